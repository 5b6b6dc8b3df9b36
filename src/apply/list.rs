//! Metadata-only lists, page by page: what reading the live state, rebuilding an inventory and
//! finding conflicts all list with (owner label, owner reference, managedFields), without a copy
//! of the objects themselves.

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::Client;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

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

/// One listed object's metadata, reduced to what deciding its fate reads: its name, labels,
/// annotations and who applied which fields. Each field set (`fieldsV1`) stays JSON text until
/// the decision parses the one it compares: a page of 2,000 `ObjectMeta`s with every field set
/// as a `Value` tree took ≈ 13 MB at the peak of a no-op pass, whatever the root's size.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedMeta {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub managed_fields: Vec<ListedFields>,
}

/// A field sent as `null` reads as absent (empty), as `ObjectMeta`'s `Option`s read it.
fn null_as_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// One `managedFields` entry, its field set as text.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedFields {
    pub manager: Option<String>,
    pub operation: Option<String>,
    pub subresource: Option<String>,
    #[serde(rename = "fieldsV1")]
    pub fields_v1: Option<Box<RawValue>>,
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
        assert_eq!(meta.labels["weft.io/owner"], "o");
        assert!(meta.annotations.is_empty());
        let fields = meta.managed_fields[0].fields_v1.as_ref().unwrap();
        assert_eq!(fields.get(), r#"{"f:data":{"f:k":{}}}"#);
    }
}
