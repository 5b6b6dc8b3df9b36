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
