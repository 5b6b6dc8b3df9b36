//! The reconcile loops of the daemon (`weft run`): the sync root, the custom resource
//! controllers (one kube-runtime `Controller` per kind; the agent update check is a step of the
//! WeaveCloud's reconcile) and leader election, all sharing one
//! [`state::DaemonState`].
//!
//! The HTTP server is not started here: `weft run` (the cli) starts it beside [`run::Daemon`],
//! with the same state.

pub mod armada;
pub mod early;
pub mod events;
pub mod export;
#[cfg(test)]
pub mod fixtures;
pub mod health;
pub mod install;
pub mod leader;
pub mod liveness;
pub mod metrics;
pub mod namespaces;
pub mod overview;
pub mod rollbacks;
pub mod roots;
pub mod run;
pub mod shards;
pub mod shutdown;
pub mod state;
pub mod status;
pub mod suspend;
pub mod tree;
pub mod uninstall;
pub mod update_requests;
pub mod updater;
pub mod weavecloud;

use kube::Client;

use crate::apply::changeset::ChangeSet;
use crate::pass::{Observer, PassError, PassInput, PassSettings};
use crate::render::DesiredSet;
use shutdown::Shutdown;

/// What an engine run of the daemon ended with.
#[derive(Debug)]
pub enum EngineRun {
    /// It ran to the end: every change, and the error that stopped it, if any.
    Finished(ChangeSet, Option<PassError>),
    /// The daemon stopped and the grace period ran out: the work was dropped between two API
    /// calls (nothing is pruned unless every apply finished, so the next pass starts from a
    /// consistent state).
    Abandoned,
}

/// Run the apply engine (apply, prune, wait) on `set` until it finishes, or until `shutdown`'s
/// grace period after a stop request runs out.
pub async fn run_engine(
    client: &Client,
    set: &DesiredSet,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
    shutdown: &Shutdown,
) -> EngineRun {
    tokio::select! {
        (changes, error) = crate::pass::reconcile(client, set, settings, input, observer) => {
            EngineRun::Finished(changes, error)
        }
        _ = shutdown.abandoned() => EngineRun::Abandoned,
    }
}
