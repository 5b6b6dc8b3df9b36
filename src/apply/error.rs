//! The engine's errors: each variant names the object and what to do; API errors keep the
//! [`kube::Error`] as their source.

use crate::api::keys::RECREATE_ANNOTATION;
use crate::api::ObjectRef;
use kube::core::Status;

/// What went wrong talking to the cluster. Each variant names the object and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The cluster does not serve this kind, and no CRD in the same pass defines it.
    #[error("{origin}{object}: the cluster has no kind `{kind}` in `{api_version}` (no CRD for it is installed or part of this pass)")]
    UnknownKind {
        origin: String,
        /// Boxed: the error enum stays small.
        object: Box<ObjectRef>,
        api_version: String,
        kind: String,
    },
    /// A desired object is not well-formed enough to be applied.
    #[error("{origin}{object}: {message}")]
    Invalid {
        origin: String,
        /// Boxed: the error enum stays small.
        object: Box<ObjectRef>,
        message: String,
    },
    /// An object the API server returned could not be read as JSON.
    #[error("{object}: cannot read {what}: {source}")]
    Decode {
        /// The object read, or the list whose items were read.
        object: ApiTarget,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The API server refused or failed a call about one object (or one list).
    #[error("{verb} {target}: {}", describe(.source).0)]
    Api {
        verb: &'static str,
        /// The object the call was about (typed: the pass matches it to its objects), or the
        /// list it read.
        target: ApiTarget,
        #[source]
        source: kube::Error,
    },
    /// API discovery failed.
    #[error("API discovery: {}", describe(.0).0)]
    Discovery(#[source] kube::Error),
    /// An inventory could not be read or written.
    #[error("inventory of {owner}: {problem}")]
    Inventory {
        owner: String,
        #[source]
        problem: InventoryProblem,
    },
    /// Pruning would delete more than the allowed fraction of the pass's inventories.
    #[error("refusing to prune {count} of the {total} objects in this pass's inventories ({owners}: {percent:.0}% > {limit:.0}% allowed by --max-prune-fraction); nothing was pruned. Check the repository. If the deletion is intended, allow it once: `weft sync --force-prune`; for a running daemon `weft trigger --force-prune` (POST /api/v1/sync?forcePrune=true); or annotate each owner (the root's inventory ConfigMap weft-inventory-<id>, or the custom resource) with `{annotation}: {}`", .revision.as_deref().unwrap_or("<revision>"), annotation = crate::api::keys::FORCE_PRUNE_ANNOTATION)]
    PruneGuard {
        /// Which owners would lose how many objects (`3 of root/weft-system/weft`).
        owners: String,
        count: usize,
        total: usize,
        percent: f64,
        limit: f64,
        /// The revision the pass applies.
        revision: Option<String>,
    },
    /// The pass desires no object at all while its inventories hold some: a wrong `--path` or an
    /// emptied repository looks exactly like this, so nothing is pruned without an override.
    #[error("refusing to prune {count} object(s) ({owners}): this pass's desired set is empty (a wrong --path or ref, an emptied repository?); nothing was pruned. If the repository is meant to be empty, pass --allow-empty; or allow it once: `weft sync --force-prune`, `weft trigger --force-prune`, or annotate each owner with `{annotation}: {}`", .revision.as_deref().unwrap_or("<revision>"), annotation = crate::api::keys::FORCE_PRUNE_ANNOTATION)]
    EmptyDesiredSet {
        count: usize,
        /// Which owners would lose how many objects (`3 of root/weft-system/weft`).
        owners: String,
        revision: Option<String>,
    },
    /// The API server refused the apply because it changes a field that cannot change once set
    /// (a Deployment's selector, a Service's clusterIP, a Job's template): nothing was written.
    #[error("{object}: cannot be changed in place: {} (the API server said: {detail}); {advice}", immutable_fields_text(.fields))]
    Immutable {
        /// Boxed: the error enum stays small.
        object: Box<ObjectRef>,
        /// The fields the API server named (`spec.selector`), as it spells them.
        fields: Vec<String>,
        /// The API server's message.
        detail: String,
        /// What the user can do (or why Weft did not recreate it).
        advice: String,
    },
    /// Two Weft roots declare one object (see [`crate::apply::conflict`]).
    #[error("{object}: conflict: {message}")]
    Conflict {
        /// Boxed: the error enum stays small.
        object: Box<ObjectRef>,
        message: String,
    },
    /// Objects did not become ready in time.
    #[error("timed out after {timeout:?} waiting for {} object(s) to become ready:\n{}", .not_ready.len(), .not_ready.iter().map(|(o, why)| format!("  {o}: {why}")).collect::<Vec<_>>().join("\n"))]
    WaitTimeout {
        timeout: std::time::Duration,
        not_ready: Vec<(ObjectRef, String)>,
    },
    /// Objects failed in a way that waiting cannot fix (e.g. a Job that failed).
    #[error("{} object(s) failed:\n{}", .0.len(), .0.iter().map(|(o, why)| format!("  {o}: {why}")).collect::<Vec<_>>().join("\n"))]
    Failed(Vec<(ObjectRef, String)>),
    /// Several objects failed to apply; each line names one.
    #[error("{} object(s) could not be applied:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Many(Vec<ApplyError>),
}

/// What a failed API call was about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiTarget {
    /// One object (boxed: the error enum stays small).
    Object(Box<ObjectRef>),
    /// A list, as a person reads it (`deployments in namespace shop`, `customresourcedefinitions`).
    List(String),
}

impl std::fmt::Display for ApiTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiTarget::Object(r) => r.fmt(f),
            ApiTarget::List(what) => f.write_str(what),
        }
    }
}

impl ApplyError {
    /// A failed API call about `object`.
    pub(crate) fn api(verb: &'static str, object: &ObjectRef, source: kube::Error) -> Self {
        ApplyError::Api {
            verb,
            target: ApiTarget::Object(Box::new(object.clone())),
            source,
        }
    }

    /// An object the API server returned about `object` (`what`: which copy of it) that could
    /// not be read as JSON.
    pub(crate) fn decode(
        object: &ObjectRef,
        what: &'static str,
        source: serde_json::Error,
    ) -> Self {
        ApplyError::Decode {
            object: ApiTarget::Object(Box::new(object.clone())),
            what,
            source,
        }
    }

    /// A failed list (`what`: the objects listed, as a person reads it).
    pub(crate) fn list(what: String, source: kube::Error) -> Self {
        ApplyError::Api {
            verb: "list",
            target: ApiTarget::List(what),
            source,
        }
    }

    /// Whether this is a failed API call about `object`: the same kind, namespace and name (any
    /// API version, as the object is named to a person).
    pub fn is_about(&self, object: &ObjectRef) -> bool {
        matches!(self, ApplyError::Api { target: ApiTarget::Object(r), .. }
            if r.kind == object.kind && r.namespace == object.namespace && r.name == object.name)
    }

    /// The one object this error is about, when it names exactly one.
    pub fn object(&self) -> Option<&ObjectRef> {
        match self {
            ApplyError::Api {
                target: ApiTarget::Object(object),
                ..
            }
            | ApplyError::Decode {
                object: ApiTarget::Object(object),
                ..
            }
            | ApplyError::Invalid { object, .. }
            | ApplyError::UnknownKind { object, .. }
            | ApplyError::Conflict { object, .. }
            | ApplyError::Immutable { object, .. } => Some(object),
            ApplyError::Failed(objects)
            | ApplyError::WaitTimeout {
                not_ready: objects, ..
            } if objects.len() == 1 => Some(&objects[0].0),
            ApplyError::Many(all) if all.len() == 1 => all[0].object(),
            _ => None,
        }
    }

    /// The HTTP status code of a failed API call, when the API server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApplyError::Api { source, .. } | ApplyError::Discovery(source) => describe(source).1,
            ApplyError::Inventory { problem, .. } => problem.kube().and_then(|e| describe(e).1),
            ApplyError::Immutable { .. } => Some(422),
            _ => None,
        }
    }

    /// The conflicts with another Weft root in this error (itself, or inside [`Many`](Self::Many)):
    /// each object with what it says.
    pub fn conflicts(&self) -> Vec<(&ObjectRef, &str)> {
        match self {
            ApplyError::Conflict { object, message } => vec![(&**object, message.as_str())],
            ApplyError::Many(all) => all.iter().flat_map(ApplyError::conflicts).collect(),
            _ => Vec::new(),
        }
    }

    /// One error for a list of them: `None` for none, the error itself for one, [`Many`](Self::Many) otherwise,
    /// in the order of their text: concurrent applies and deletes finish in any order, and a
    /// message that changed order on every pass rewrote its resource's status every pass
    /// (issue 48 item 6).
    pub fn from_list(mut errors: Vec<ApplyError>) -> Option<ApplyError> {
        errors.sort_by_cached_key(ToString::to_string);
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ApplyError::Many(errors)),
        }
    }
}

/// The value of [`RECREATE_ANNOTATION`] that allows it.
pub const RECREATE_ALLOWED: &str = "allowed";

/// The error of an apply the API server refused for an immutable field, if that is what
/// `status` says (see [`immutable_fields`]).
pub(crate) fn refusal(object: &ObjectRef, status: &Status) -> Option<ApplyError> {
    let fields = immutable_fields(status)?;
    Some(ApplyError::Immutable {
        object: Box::new(object.clone()),
        fields,
        detail: status.message.clone(),
        advice: format!(
            "nothing was written. Change it back in git, delete the object by hand, or annotate its document with `{RECREATE_ANNOTATION}: {RECREATE_ALLOWED}` to let Weft delete and recreate it (the delete counts against the prune guard)"
        ),
    })
}

/// A failed apply (`verb`: `apply`, `dry-run apply`) of `object`: [`ApplyError::Immutable`] when
/// the API server refused it for an immutable field, [`ApplyError::Api`] otherwise.
pub(crate) fn apply_error(verb: &'static str, object: &ObjectRef, e: kube::Error) -> ApplyError {
    let immutable = match &e {
        kube::Error::Api(status) => refusal(object, status),
        _ => None,
    };
    immutable.unwrap_or_else(|| ApplyError::api(verb, object, e))
}

/// `spec.selector is immutable`, `spec.selector and spec.template are immutable`, or `a field is
/// immutable` when the API server named none.
fn immutable_fields_text(fields: &[String]) -> String {
    match fields {
        [] => "a field it changes is immutable".to_string(),
        [one] => format!("{one} is immutable"),
        [rest @ .., last] => format!("{} and {last} are immutable", rest.join(", ")),
    }
}

/// The fields an API server's refusal says cannot change (`Some`, possibly empty when it named
/// none), or `None` when the refusal is about something else. The API server answers 422
/// `Invalid` with a cause per field: `field is immutable` (ValidateImmutableField: a
/// Deployment's selector, a Job's template, a ConfigMap marked immutable), `may not change once
/// set` (a Service's clusterIP), or a `Forbidden` "updates to … spec for fields other than … are
/// forbidden" (a StatefulSet's volumeClaimTemplates).
pub fn immutable_fields(status: &kube::core::Status) -> Option<Vec<String>> {
    if status.code != 422 {
        return None;
    }
    let says_immutable = |m: &str| {
        m.contains("immutable")
            || m.contains("may not change once set")
            || (m.contains("updates to") && m.contains("are forbidden"))
    };
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    let mut fields: Vec<String> = causes
        .iter()
        .filter(|c| says_immutable(&c.message))
        .map(|c| c.field.clone())
        .filter(|f| !f.is_empty())
        .collect();
    fields.dedup();
    if fields.is_empty() && !causes.iter().any(|c| says_immutable(&c.message)) {
        return says_immutable(&status.message).then(Vec::new);
    }
    Some(fields)
}

/// `true` when a kube error is a 404 from the API server.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A kube error as one readable line ([`crate::api::kube_error::text`]: the API server's own
/// message and what to do), and the HTTP status code when there is one.
pub fn describe(e: &kube::Error) -> (String, Option<u16>) {
    let code = match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    };
    (crate::api::kube_error::text(e), code)
}

/// What went wrong with one inventory (the owner is named by [`ApplyError::Inventory`]).
#[derive(Debug, thiserror::Error)]
pub enum InventoryProblem {
    /// Reading it from the cluster failed.
    #[error("{}", describe(.0).0)]
    Read(#[source] kube::Error),
    /// What is stored is not a list of references.
    #[error("{what} is not valid: {source}")]
    Invalid {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// It could not be encoded.
    #[error("{0}")]
    Encode(#[source] serde_json::Error),
    /// Writing it, or reading or creating Weft's namespace for it, failed.
    #[error("{what}: {}", describe(.source).0)]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The owner is a custom resource the cluster does not serve.
    #[error("the cluster does not serve kind {0}")]
    UnknownKind(String),
    /// The owner custom resource does not exist (its own apply failed), so nothing can record
    /// its objects: they are not created.
    #[error("the custom resource does not exist, so its objects were not created (nothing could record them for a later prune); see why it was not applied")]
    OwnerMissing,
}

impl InventoryProblem {
    /// The kube error underneath, if any.
    pub fn kube(&self) -> Option<&kube::Error> {
        match self {
            InventoryProblem::Read(e) | InventoryProblem::Api { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};
    use kube::core::Status;

    fn refusal(code: u16, message: &str, causes: &[(&str, &str)]) -> Status {
        let mut s = Status::failure(message, "Invalid");
        s.code = code;
        s.details = Some(StatusDetails {
            causes: causes
                .iter()
                .map(|(field, message)| StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message: message.to_string(),
                    field: field.to_string(),
                })
                .collect(),
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        s
    }

    #[test]
    fn immutable_fields_are_read_from_the_causes() {
        let selector = refusal(
            422,
            r#"Deployment.apps "web" is invalid: spec.selector: Invalid value: v1.LabelSelector{...}: field is immutable"#,
            &[(
                "spec.selector",
                "Invalid value: v1.LabelSelector{...}: field is immutable",
            )],
        );
        assert_eq!(
            immutable_fields(&selector),
            Some(vec!["spec.selector".to_string()])
        );
        let cluster_ip = refusal(
            422,
            "Service \"api\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"10.0.0.9\"}: may not change once set",
            &[("spec.clusterIPs[0]", "Invalid value: []string{\"10.0.0.9\"}: may not change once set")],
        );
        assert_eq!(
            immutable_fields(&cluster_ip),
            Some(vec!["spec.clusterIPs[0]".to_string()])
        );
        // Another validation error is not about immutability.
        let other = refusal(
            422,
            "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            &[("spec.replicas", "Invalid value: -1: must be greater than or equal to 0")],
        );
        assert_eq!(immutable_fields(&other), None);
        // Without causes, the message says it; other codes never do.
        let bare = refusal(422, "spec.template: field is immutable", &[]);
        assert_eq!(immutable_fields(&bare), Some(vec![]));
        let conflict = refusal(409, "field is immutable", &[]);
        assert_eq!(immutable_fields(&conflict), None);
    }

    #[test]
    fn the_immutable_error_names_the_object_and_the_fields() {
        let e = ApplyError::Immutable {
            object: Box::new(ObjectRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "shop".into(),
                name: "web".into(),
            }),
            fields: vec![
                "spec.selector".into(),
                "spec.template.metadata.labels".into(),
            ],
            detail: "field is immutable".into(),
            advice: "left as it is".into(),
        };
        assert_eq!(
            e.to_string(),
            "Deployment/shop/web: cannot be changed in place: spec.selector and spec.template.metadata.labels are immutable (the API server said: field is immutable); left as it is"
        );
    }
}
