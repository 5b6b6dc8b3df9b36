//! Metadata-only lists, page by page: what reading the live state, rebuilding an inventory and
//! finding conflicts all list with (owner label, owner reference, managedFields), without a copy
//! of the objects themselves.

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::Client;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::ApiTarget;
use super::ApplyError;

/// Objects per page of a metadata-only list (a few hundred bytes each): fewer round trips than
/// the 500 of a full list, on the pass's critical path when one namespace holds 100,000.
pub(super) const META_PAGE: u32 = 2000;

/// Every page of a metadata-only list of `api` with `lp` (its `limit` is the page size), each
/// handed to `each` as it arrives: nothing of a page is kept unless `each` keeps it.
pub(super) async fn for_each_metadata_page(
    api: &Api<DynamicObject>,
    lp: ListParams,
    what: &str,
    each: impl FnMut(Vec<PartialObjectMeta<DynamicObject>>) -> Result<(), ApplyError>,
) -> Result<(), ApplyError> {
    for_each_page(api, lp, what, each).await
}

/// One listed object's metadata, reduced to what deciding its fate reads: its name, the owner
/// label, Weft's two annotations, and the field set of Weft's own `Apply` entry. Nothing else of
/// a page is kept, not even as it is decoded: the other labels, annotations and managers' entries
/// are skipped (a map of every label and annotation, and every manager's entry, was a fifth of
/// the CPU a no-op pass over 100,000 objects spent). The field set stays JSON text until the
/// decision parses it: a page of 2,000 `ObjectMeta`s with every field set as a `Value` tree took
/// ≈ 13 MB at the peak of a no-op pass, whatever the root's size.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedMeta {
    pub name: Option<String>,
    /// The `weft.io/owner` label.
    #[serde(default, rename = "labels", deserialize_with = "owner_label")]
    pub owner: Option<String>,
    #[serde(default, deserialize_with = "weft_annotations")]
    pub annotations: WeftAnnotations,
    #[serde(default, deserialize_with = "weft_fields")]
    pub managed_fields: ManagedFields,
}

/// The annotations of a listed object that decide: the applied hash and another root's claim.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct WeftAnnotations {
    /// `weft.io/applied-hash`.
    pub applied_hash: Option<String>,
    /// `weft.io/claimed-by`.
    pub claimed_by: Option<String>,
}

/// What a listed object's `managedFields` say to the decision.
#[derive(Debug, Default)]
pub(crate) struct ManagedFields {
    /// Whether the server sent any entry (without any, the object is read whole and compared by
    /// value).
    pub any: bool,
    /// The field set of Weft's own `Apply` entry (of the object, not a subresource), as text.
    pub ours: Option<Box<RawValue>>,
}

/// One `managedFields` entry, its field set as text.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedFields {
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    #[serde(rename = "fieldsV1")]
    fields_v1: Option<Box<RawValue>>,
}

/// The values of the keys `wanted` of a JSON object of strings (`null`: none); every other entry
/// is skipped without a copy.
fn picked<'de, D, const N: usize>(
    d: D,
    wanted: [&'static str; N],
) -> Result<[Option<String>; N], D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Picker<const N: usize>([&'static str; N]);
    impl<'de, const N: usize> serde::de::Visitor<'de> for Picker<N> {
        type Value = [Option<String>; N];
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of strings or null")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(std::array::from_fn(|_| None))
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(std::array::from_fn(|_| None))
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out: [Option<String>; N] = std::array::from_fn(|_| None);
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match self.0.iter().position(|w| *w == key) {
                    Some(i) => out[i] = Some(map.next_value()?),
                    None => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    d.deserialize_option(Picker(wanted))
}

fn owner_label<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let [owner] = picked(d, [crate::api::keys::OWNER_LABEL])?;
    Ok(owner)
}

fn weft_annotations<'de, D: serde::Deserializer<'de>>(d: D) -> Result<WeftAnnotations, D::Error> {
    use crate::api::keys::{APPLIED_HASH_ANNOTATION, CLAIM_ANNOTATION};
    let [applied_hash, claimed_by] = picked(d, [APPLIED_HASH_ANNOTATION, CLAIM_ANNOTATION])?;
    Ok(WeftAnnotations {
        applied_hash,
        claimed_by,
    })
}

fn weft_fields<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ManagedFields, D::Error> {
    let entries: Vec<ListedFields> = null_as_empty(d)?;
    let any = !entries.is_empty();
    let ours = entries
        .into_iter()
        .find(|e| {
            e.manager.as_deref() == Some(super::FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
                && e.subresource.as_deref().unwrap_or("").is_empty()
        })
        .and_then(|e| e.fields_v1);
    Ok(ManagedFields { any, ours })
}

/// A field sent as `null` reads as absent (empty), as `ObjectMeta`'s `Option`s read it.
fn null_as_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
struct ListedItem {
    #[serde(default, deserialize_with = "null_as_empty")]
    metadata: ListedMeta,
}

/// One page of a metadata-only list, its items decoded as `T`.
#[derive(Deserialize)]
#[serde(bound = "T: Deserialize<'de>")]
struct ListedPage<T> {
    #[serde(default, deserialize_with = "null_as_empty")]
    metadata: ListedPageMeta,
    /// `null` for an empty list.
    #[serde(default, deserialize_with = "null_as_empty")]
    items: Vec<T>,
}

#[derive(Default, Deserialize)]
struct ListedPageMeta {
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

/// [`for_each_metadata_page`], each object's metadata decoded as a [`ListedMeta`] only.
pub(super) async fn for_each_listed_page(
    api: &Api<DynamicObject>,
    lp: ListParams,
    what: &str,
    mut each: impl FnMut(Vec<ListedMeta>) -> Result<(), ApplyError>,
) -> Result<(), ApplyError> {
    for_each_page(api, lp, what, |items: Vec<ListedItem>| {
        each(items.into_iter().map(|i| i.metadata).collect())
    })
    .await
}

/// Every page of a metadata-only list of `api` with `lp`, its items decoded as `T` and handed to
/// `each` as the page arrives.
///
/// The next page is asked for as soon as a page's `continue` token is read, before its items are
/// decoded and handed to `each`: the API server prepares page N+1 while Weft decides on page N
/// (at 100,000 objects, 50 pages, the two took turns). At most two pages are held: the one
/// being decided and the text of the next.
async fn for_each_page<T: serde::de::DeserializeOwned>(
    api: &Api<DynamicObject>,
    lp: ListParams,
    what: &str,
    mut each: impl FnMut(Vec<T>) -> Result<(), ApplyError>,
) -> Result<(), ApplyError> {
    let client = api.clone().into_client();
    let request = kube::core::Request::new(api.resource_url());
    // The request for one page, sent on a task of its own: its answer is read while the caller
    // decodes the page before it.
    let ask = |lp: &ListParams| {
        let mut req = request
            .list_metadata(lp)
            .map_err(|e| list_error(what, kube::Error::BuildRequest(e)))?;
        // The same tag as `Api::list_metadata`'s, for whatever sorts requests by it.
        req.extensions_mut().insert("list_metadata");
        let client = client.clone();
        Ok::<_, ApplyError>(tokio::spawn(async move { client.request_text(req).await }))
    };
    let mut lp = lp;
    let mut next = Some(ask(&lp)?);
    while let Some(asked) = next.take() {
        let text = match asked.await {
            Ok(answer) => answer.map_err(|e| list_error(what, e))?,
            // The task panicked or the runtime is shutting down: no page, as a failed request.
            Err(e) => {
                return Err(list_error(
                    what,
                    kube::Error::Service(Box::new(std::io::Error::other(e.to_string()))),
                ))
            }
        };
        let decode = |e| list_error(what, kube::Error::SerdeError(e));
        // The items stay text (borrowed from the page's) until the next page is asked for.
        let page: ListedPage<&RawValue> = serde_json::from_str(&text).map_err(decode)?;
        if let Some(token) = page.metadata.continue_.filter(|c| !c.is_empty()) {
            lp = lp.continue_token(&token);
            next = Some(ask(&lp)?);
            // Let the task send its request before the page is decided: on a runtime of one
            // thread (`weft sync`'s) it would otherwise wait for the next `await`, after the
            // decoding, and the two would take turns again.
            tokio::task::yield_now().await;
        }
        let items: Vec<T> = page
            .items
            .into_iter()
            .map(|item| serde_json::from_str(item.get()))
            .collect::<Result<_, _>>()
            .map_err(decode)?;
        drop(text);
        each(items)?;
    }
    Ok(())
}

pub(super) fn display_ns(ns: &str) -> String {
    if ns.is_empty() {
        "the cluster".into()
    } else {
        format!("namespace {ns}")
    }
}

pub(super) fn list_error(what: &str, source: kube::Error) -> ApplyError {
    ApplyError::list(what.to_string(), source)
}

/// The metadata (`{"metadata": …}`) of every object of `resource` carrying `selector`, in
/// `namespace` or (None) everywhere: a metadata-only list, page by page.
pub(super) async fn list_labelled(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    selector: &str,
) -> Result<Vec<Value>, ApplyError> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let what = format!(
        "{} in {}",
        resource.plural,
        namespace
            .map(display_ns)
            .unwrap_or_else(|| "all namespaces".into())
    );
    let mut out = Vec::new();
    let lp = ListParams::default().labels(selector).limit(META_PAGE);
    for_each_metadata_page(&api, lp, &what, |items| {
        for item in items {
            let meta =
                serde_json::to_value(&item.metadata).map_err(|source| ApplyError::Decode {
                    object: ApiTarget::List(what.clone()),
                    what: "a listed object's metadata",
                    source,
                })?;
            out.push(serde_json::json!({ "metadata": meta }));
        }
        Ok(())
    })
    .await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_page_keeps_what_decides_and_reads_null_as_empty() {
        let page: ListedPage<ListedItem> = serde_json::from_str(
            r#"{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"285"},"items":null}"#,
        )
        .unwrap();
        assert!(page.items.is_empty());
        assert_eq!(page.metadata.continue_, None);
        let page: ListedPage<ListedItem> = serde_json::from_str(
            r#"{"metadata":{"continue":"abc"},"items":[{"metadata":{"name":"a","uid":"u",
              "labels":{"weft.io/owner":"o"},"annotations":null,
              "managedFields":[{"manager":"weft","operation":"Apply","fieldsType":"FieldsV1",
                                "fieldsV1":{"f:data":{"f:k":{}}}}]}}]}"#,
        )
        .unwrap();
        assert_eq!(page.metadata.continue_.as_deref(), Some("abc"));
        let meta = &page.items[0].metadata;
        assert_eq!(meta.name.as_deref(), Some("a"));
        assert_eq!(meta.owner.as_deref(), Some("o"));
        assert_eq!(meta.annotations, WeftAnnotations::default());
        assert!(meta.managed_fields.any);
        let fields = meta.managed_fields.ours.as_ref().unwrap();
        assert_eq!(fields.get(), r#"{"f:data":{"f:k":{}}}"#);
    }

    #[test]
    fn a_listed_object_keeps_only_weft_s_label_annotations_and_apply_entry() {
        let meta: ListedMeta = serde_json::from_str(
            r#"{"name":"a","labels":{"app":"x","weft.io/owner":"o","weft.io/owner-ref":"r"},
              "annotations":{"note":"{\"json\": 1}","weft.io/applied-hash":"h",
                             "weft.io/claimed-by":"c"},
              "managedFields":[
                {"manager":"kubectl-edit","operation":"Update","fieldsV1":{"f:data":{}}},
                {"manager":"weft","operation":"Apply","subresource":"status","fieldsV1":{"f:status":{}}},
                {"manager":"weft","operation":"Apply","fieldsV1":{"f:metadata":{}}}]}"#,
        )
        .unwrap();
        assert_eq!(meta.owner.as_deref(), Some("o"));
        assert_eq!(meta.annotations.applied_hash.as_deref(), Some("h"));
        assert_eq!(meta.annotations.claimed_by.as_deref(), Some("c"));
        assert_eq!(
            meta.managed_fields.ours.as_ref().map(|f| f.get()),
            Some(r#"{"f:metadata":{}}"#)
        );
        // Another manager's entries only: some entries, none of Weft's.
        let meta: ListedMeta = serde_json::from_str(
            r#"{"name":"b","labels":null,"managedFields":[
                {"manager":"kubectl","operation":"Apply","fieldsV1":{"f:data":{}}}]}"#,
        )
        .unwrap();
        assert_eq!(meta.owner, None);
        assert!(meta.managed_fields.any && meta.managed_fields.ours.is_none());
        // No managedFields at all.
        let meta: ListedMeta =
            serde_json::from_str(r#"{"name":"c","managedFields":null}"#).unwrap();
        assert!(!meta.managed_fields.any);
    }
}
