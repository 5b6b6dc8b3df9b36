//! Metadata-only lists, page by page: what reading the live state, rebuilding an inventory and
//! finding conflicts all list with (owner label, owner reference, managedFields), without a copy
//! of the objects themselves.

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::Client;
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
    mut each: impl FnMut(Vec<PartialObjectMeta<DynamicObject>>) -> Result<(), ApplyError>,
) -> Result<(), ApplyError> {
    let mut lp = lp;
    loop {
        let page = api
            .list_metadata(&lp)
            .await
            .map_err(|e| list_error(what, e))?;
        each(page.items)?;
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(()),
        }
    }
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
