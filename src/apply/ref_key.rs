//! The identity of an object across API versions: what inventories, prunes, conflicts and
//! replacements compare (an inventory entry written as `apps/v1beta2` is the same Deployment as
//! `apps/v1`).

use super::catalog::split_api_version;
use crate::api::ObjectRef;

/// The identity of a reference across API versions: (group, kind, namespace, name).
pub type RefKey = (String, String, String, String);

/// The identity of a reference across API versions: (group, kind, namespace, name).
pub fn ref_key(r: &ObjectRef) -> RefKey {
    (
        split_api_version(&r.api_version).0.to_string(),
        r.kind.clone(),
        r.namespace.clone(),
        r.name.clone(),
    )
}

/// [`ref_key`] borrowed from the reference: a set of them over a whole plan (100,000 objects)
/// copies no string.
pub fn ref_key_of(r: &ObjectRef) -> (&str, &str, &str, &str) {
    (
        split_api_version(&r.api_version).0,
        &r.kind,
        &r.namespace,
        &r.name,
    )
}
