//! The apply engine: desired objects → cluster state, one verb per file, in the manner of Flux's
//! `fluxcd/pkg/ssa`. Every verb returns (or adds to) a [`changeset::ChangeSet`]; the CLI output,
//! CR status, events and metrics are views of it.
//!
//! - [`plan`]: API discovery for every kind, namespaced vs cluster-scoped, live state, no-op skip;
//! - [`apply`](mod@apply): server-side apply (field manager `weft`) in stages, bounded concurrency;
//! - [`drift`]: has the live copy drifted from what Weft applied (managedFields of manager `weft`);
//! - [`inventory`]: what each owner applied (ConfigMap for the sync root, `status.inventory` for CRs);
//! - [`prune`]: previous inventory − desired, with every safety rule of the design;
//! - [`wait`]: readiness with timeouts;
//! - [`diff`]: server-side dry-run and a unified diff per changed object;
//! - [`calls`]: a client that counts API calls (reads, writes, dry-runs).

#[allow(clippy::module_inception)] // `apply::apply` is the apply verb, beside `apply::prune` etc.
pub mod apply;
pub mod calls;
pub mod changeset;
pub mod diff;
pub mod drift;
pub mod inventory;
pub mod plan;
pub mod prune;
pub mod readiness;
pub mod wait;

use crate::api::ObjectRef;

/// The field manager of every server-side apply Weft makes.
pub const FIELD_MANAGER: &str = "weft";

/// What went wrong talking to the cluster. Each variant names the object and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The cluster does not serve this kind, and no CRD in the same pass defines it.
    #[error("{origin}{object}: the cluster has no kind `{kind}` in `{api_version}` (no CRD for it is installed or part of this pass)")]
    UnknownKind {
        origin: String,
        object: String,
        api_version: String,
        kind: String,
    },
    /// A desired object is not well-formed enough to be applied.
    #[error("{origin}{object}: {message}")]
    Invalid {
        origin: String,
        object: String,
        message: String,
    },
    /// The API server refused or failed a call about one object.
    #[error("{verb} {object}: {message}")]
    Api {
        verb: &'static str,
        object: String,
        /// The API server's message (or the transport error).
        message: String,
        /// The HTTP status code, when the API server answered.
        code: Option<u16>,
    },
    /// API discovery failed.
    #[error("API discovery: {0}")]
    Discovery(#[source] kube::Error),
    /// An inventory could not be read or written.
    #[error("inventory of {owner}: {message}")]
    Inventory { owner: String, message: String },
    /// Pruning would delete more than the allowed fraction of an inventory.
    #[error("refusing to prune {count} of {total} objects of {owner} ({percent:.0}% > {limit:.0}% allowed by --max-prune-fraction); nothing was pruned. Check the repository, or rerun with --force-prune")]
    PruneGuard {
        owner: String,
        count: usize,
        total: usize,
        percent: f64,
        limit: f64,
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

impl ApplyError {
    pub(crate) fn api(verb: &'static str, object: &ObjectRef, source: kube::Error) -> Self {
        let (message, code) = describe(&source);
        ApplyError::Api {
            verb,
            object: object.to_string(),
            message,
            code,
        }
    }
}

/// `true` when a kube error is a 404 from the API server.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A kube error as one readable line: the API server's own message when it answered.
pub fn describe(e: &kube::Error) -> (String, Option<u16>) {
    match e {
        kube::Error::Api(s) => (
            format!("{} ({}, HTTP {})", s.message, s.reason, s.code),
            Some(s.code),
        ),
        other => (other.to_string(), None),
    }
}
