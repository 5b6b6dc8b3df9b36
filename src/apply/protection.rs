//! Protection: an object that is provably an owner's is still not deleted while it is protected
//! (`weft.io/prune: disabled`; a Namespace or CRD without `weft.io/prune: enabled`). Prune,
//! cascade, recreate and replace all ask it before a delete.

use crate::api::keys::PRUNE_ANNOTATION;
use serde_json::Value;

/// Why an object that is provably ours is still not deleted, if it is protected.
pub fn protection(kind: &str, live: &Value) -> Option<String> {
    let prune = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(PRUNE_ANNOTATION))
        .and_then(Value::as_str);
    if prune == Some("disabled") {
        return Some(format!("{PRUNE_ANNOTATION}: disabled"));
    }
    if matches!(kind, "Namespace" | "CustomResourceDefinition") && prune != Some("enabled") {
        return Some(format!(
            "{kind}s are pruned only with {PRUNE_ANNOTATION}: enabled"
        ));
    }
    None
}
