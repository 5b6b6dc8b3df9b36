//! Proof of ownership: an object is Weft's to prune (or to put in a rebuilt inventory) only if
//! its `weft.io/owner` label names the owner *and* that label was set by a server-side apply of
//! manager `weft` (managedFields). Pure: every verb that deletes asks it, and so does the rebuild
//! of a lost inventory, which is why it lives apart from [`super::ownership`]'s inventory reads.

use serde_json::Value;

use super::FIELD_MANAGER;
use crate::api::keys::OWNER_LABEL;
use crate::render::Owner;

/// Why an object cannot be proven owned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotOwned {
    #[error("it has no {OWNER_LABEL} label")]
    NoLabel,
    #[error("its {OWNER_LABEL} label is {label}, not {id} ({reference})")]
    OtherOwner {
        label: String,
        id: String,
        reference: String,
    },
    #[error("its {OWNER_LABEL} label was not set by weft (copied from another object?)")]
    NotSetByWeft,
}

/// Is `live` provably owned by `owner`? `Err` says why not.
pub fn proof_of_ownership(live: &Value, owner: &Owner) -> Result<(), NotOwned> {
    let id = owner.id();
    let label = live
        .pointer("/metadata/labels")
        .and_then(|l| l.get(OWNER_LABEL))
        .and_then(Value::as_str);
    match label {
        None => return Err(NotOwned::NoLabel),
        Some(l) if l != id.0 => {
            return Err(NotOwned::OtherOwner {
                label: l.to_string(),
                id: id.0,
                reference: owner.reference(),
            })
        }
        Some(_) => {}
    }
    let Some(entries) = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
    else {
        // A server that keeps no managedFields: the label is all there is.
        return Ok(());
    };
    let set_by_weft = entries.iter().any(|e| {
        e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.pointer("/fieldsV1/f:metadata/f:labels")
                .and_then(|l| l.get(format!("f:{OWNER_LABEL}")))
                .is_some()
    });
    if set_by_weft {
        Ok(())
    } else {
        Err(NotOwned::NotSetByWeft)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn root() -> Owner {
        Owner::root("weft-system", "weft")
    }

    fn live(labels: Value, annotations: Value, managed: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations, "managedFields": managed}})
    }

    fn weft_managed() -> Value {
        json!([{"manager": "weft", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:weft.io/owner": {}}}}}])
    }

    #[test]
    fn ownership_needs_our_label_set_by_weft() {
        let id = root().id().0;
        assert!(proof_of_ownership(
            &live(json!({OWNER_LABEL: id}), json!({}), weft_managed()),
            &root()
        )
        .is_ok());
        let copied = live(
            json!({OWNER_LABEL: id}),
            json!({}),
            json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:weft.io/owner": {}}}}}]),
        );
        assert_eq!(
            proof_of_ownership(&copied, &root())
                .unwrap_err()
                .to_string(),
            "its weft.io/owner label was not set by weft (copied from another object?)"
        );
        let other = Owner::root("weft-system", "other");
        assert!(proof_of_ownership(
            &live(
                json!({OWNER_LABEL: other.id().0}),
                json!({}),
                weft_managed()
            ),
            &root()
        )
        .unwrap_err()
        .to_string()
        .contains("not"));
        assert_eq!(
            proof_of_ownership(&live(json!({}), json!({}), json!([])), &root()),
            Err(NotOwned::NoLabel)
        );
        assert_eq!(
            proof_of_ownership(&live(json!({}), json!({}), weft_managed()), &root())
                .unwrap_err()
                .to_string(),
            "it has no weft.io/owner label"
        );
    }
}
