//! Immutable fields: an object whose new version changes a field the API server lets no one
//! change once set (a Deployment's selector, a Service's clusterIP, a Job's template) cannot be
//! applied. The apply fails with [`ApplyError::Immutable`], naming the object and the fields;
//! nothing is written.
//!
//! An object whose document is annotated `weft.io/recreate: allowed` (as kapp's
//! `kapp.k14s.io/update-strategy: fallback-on-replace` and Flux's `kustomize.toolkit.fluxcd.io/force:
//! enabled`) is deleted, waited for until gone, and created again instead — only if it is provably
//! its owner's and not protected (`weft.io/prune: disabled`; a Namespace or CRD without
//! `weft.io/prune: enabled`), as for a prune. The caller counts the delete against the prune
//! guard before it asks for it.

use crate::api::keys::RECREATE_ANNOTATION;
use std::time::Duration;

use kube::Client;
use serde_json::Value;

use super::apply::apply_one;
use super::changeset::{Action, Change};
use super::delete::{delete_and_wait, Gone};
pub use super::error::RECREATE_ALLOWED;
use super::planned::PlannedObject;
use super::proof::proof_of_ownership;
use super::protection::protection;
use super::ApplyError;

/// How long a recreated object may take to be gone.
#[derive(Clone, Debug)]
pub struct RecreateOptions {
    pub timeout: Duration,
    pub poll_interval: Duration,
}

/// Does `p`'s document allow Weft to recreate it?
pub fn allowed(p: &PlannedObject) -> bool {
    p.desired
        .object
        .value()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(RECREATE_ANNOTATION))
        .and_then(Value::as_str)
        == Some(RECREATE_ALLOWED)
}

/// `fields` as a reason: `spec.selector is immutable`.
fn fields_text(fields: &[String]) -> String {
    match fields {
        [] => "a field is immutable".to_string(),
        [one] => format!("{one} is immutable"),
        many => format!("{} are immutable", many.join(", ")),
    }
}

/// The [`ApplyError::Immutable`] `refused` with another piece of advice.
pub fn not_recreated(refused: ApplyError, why: String) -> ApplyError {
    match refused {
        ApplyError::Immutable {
            object,
            fields,
            detail,
            ..
        } => ApplyError::Immutable {
            object,
            fields,
            detail,
            advice: format!(
                "nothing was written, and it was not recreated although annotated `{RECREATE_ANNOTATION}: {RECREATE_ALLOWED}`: {why}"
            ),
        },
        other => other,
    }
}

/// Recreate `p`, whose apply was `refused` ([`ApplyError::Immutable`]): delete the live object
/// (its UID as precondition), wait until it is gone, apply `p` again. Returns the delete and the
/// create, or `refused` with the reason when the live object is not provably `p`'s owner's or is
/// protected.
pub async fn recreate(
    client: &Client,
    p: &PlannedObject,
    refused: ApplyError,
    opts: &RecreateOptions,
) -> Result<Vec<Change>, ApplyError> {
    let fields = match &refused {
        ApplyError::Immutable { fields, .. } => fields_text(fields),
        _ => fields_text(&[]),
    };
    let api = p.api(client);
    let r = &p.object_ref;
    let live = api
        .get_opt(&r.name)
        .await
        .map_err(|e| ApplyError::api("read", r, e))?;
    let mut changes = Vec::new();
    if let Some(live) = live {
        let uid = live.metadata.uid.clone();
        let value = serde_json::to_value(&live)
            .map_err(|source| ApplyError::decode(r, "the live object", source))?;
        if let Err(why) = proof_of_ownership(&value, &p.desired.owner) {
            return Err(not_recreated(refused, why.to_string()));
        }
        if let Some(why) = protection(&r.kind, &value) {
            return Err(not_recreated(refused, why));
        }
        let gone = Gone {
            timeout: opts.timeout,
            poll_interval: opts.poll_interval,
            why: "deleted to be recreated, but still there (a finalizer?)",
        };
        delete_and_wait(&api, r, uid, &gone).await?;
        changes.push(Change {
            object: r.clone(),
            owner: p.desired.owner.clone(),
            action: Action::Deleted,
            reason: Some(format!(
                "to recreate it: {fields} ({RECREATE_ANNOTATION}: {RECREATE_ALLOWED})"
            )),
        });
    }
    apply_one(client, p).await?;
    changes.push(Change {
        object: r.clone(),
        owner: p.desired.owner.clone(),
        action: Action::Created,
        reason: Some(format!("recreated: {fields}")),
    });
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::error::refusal;
    use crate::render::Owner;
    use kube::core::Status;
    use serde_json::json;

    fn planned(annotations: Value) -> PlannedObject {
        let desired = Owner::root("weft-system", "weft").adopt(
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": "shop", "annotations": annotations}}),
            0,
            None,
        );
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        );
        PlannedObject {
            object_ref: desired.object_ref(),
            desired,
            resource: std::sync::Arc::new(ar),
            namespaced: true,
            ignored: Vec::new(),
        }
    }

    #[test]
    fn only_the_documents_annotation_allows_a_recreate() {
        assert!(allowed(&planned(json!({RECREATE_ANNOTATION: "allowed"}))));
        assert!(!allowed(&planned(json!({RECREATE_ANNOTATION: "true"}))));
        assert!(!allowed(&planned(json!({}))));
    }

    #[test]
    fn a_refusal_says_how_to_allow_the_recreate() {
        let object = planned(json!({})).object_ref;
        let mut status = Status::failure(
            r#"Deployment.apps "web" is invalid: spec.selector: Invalid value: "x": field is immutable"#,
            "Invalid",
        );
        status.code = 422;
        let e = refusal(&object, &status).expect("immutable");
        let text = e.to_string();
        assert!(
            text.starts_with("Deployment/shop/web: cannot be changed in place: a field it changes is immutable (the API server said: Deployment.apps \"web\" is invalid"),
            "{text}"
        );
        assert!(text.contains("`weft.io/recreate: allowed`"), "{text}");
        let kept = not_recreated(e, "its weft.io/owner label was not set by weft".into());
        assert!(
            kept.to_string().ends_with("it was not recreated although annotated `weft.io/recreate: allowed`: its weft.io/owner label was not set by weft"),
            "{kept}"
        );
        status.code = 409;
        assert!(refusal(&object, &status).is_none());
    }
}
