//! The one pass driver behind `weft sync` ([`super::run_pass`]) and the daemon's sync root
//! (`daemon::root`): a rendered set → suspended resources held out → the launcher's objects
//! taken over (when asked; a dry run plans it) → apply, prune and wait. Load and render come before it (the daemon
//! keeps its last render across passes, so it hands over a set, not a snapshot).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use kube::Client;

use super::{reconcile, suspend, takeover, Observer, PassError, PassInput, PassSettings, Progress};
use crate::apply::changeset::{Action, Change, ChangeSet};
use crate::render::{DesiredSet, Owner};

/// How a driven pass ended.
#[derive(Debug)]
pub enum Outcome<H> {
    /// Which resources are suspended could not be read: nothing was applied or pruned.
    Unheld(kube::Error),
    /// The launcher's objects could not be taken over: nothing was applied or pruned.
    Takeover(kube::Error),
    /// `stop` resolved first: the work was dropped between two API calls.
    Abandoned,
    /// The engine ran to the end: the set it applied (suspended owners held out), every change,
    /// the error that stopped it, if any, and what the caller's `on_held` made of the suspended
    /// owners.
    Finished {
        set: Arc<DesiredSet>,
        changes: ChangeSet,
        error: Option<PassError>,
        held: H,
    },
}

/// Drive one pass over `set`: hold out suspended owners (`on_held` gets them before anything is
/// applied), take over the launcher's objects when `takeover` (a dry run plans the takeover and writes nothing), then run the
/// engine until it finishes or `stop` resolves.
#[allow(clippy::too_many_arguments)]
pub async fn drive<H, F, Fut, S>(
    client: &Client,
    set: Arc<DesiredSet>,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
    takeover: bool,
    on_held: F,
    stop: S,
) -> Outcome<H>
where
    F: FnOnce(BTreeSet<Owner>) -> Fut,
    Fut: Future<Output = H>,
    S: Future<Output = ()>,
{
    let (set, held) = match suspend::hold_suspended(client, &set).await {
        Ok((Some(held_set), held)) => (Arc::new(held_set), held),
        Ok((None, held)) => (set, held),
        Err(e) => return Outcome::Unheld(e),
    };
    let held = on_held(held).await;
    // A dry run finds the same objects and plans the takeover without writing.
    let (set, (removed, copied)) = match takeover {
        false => (set, Default::default()),
        true => {
            let owned = Arc::try_unwrap(set).unwrap_or_else(|shared| (*shared).clone());
            let taken = takeover::before_pass(
                client,
                &settings.weft_namespace,
                owned,
                settings.launcher_takeover.as_deref(),
                input.dry_run,
                observer,
            )
            .await;
            match taken {
                Ok((set, planned)) => {
                    if !planned.changes.is_empty() {
                        observer(Progress::Phase {
                            message: format!(
                                "taking over the Weave Cloud launcher's objects ({} adopted by the apply)",
                                planned.adopted
                            ),
                            objects: planned.changes.len(),
                        });
                        planned
                            .changes
                            .iter()
                            .for_each(|c| observer(Progress::Change(c)));
                    }
                    (Arc::new(set), (planned.changes, planned.copied))
                }
                Err(e) => return Outcome::Takeover(e),
            }
        }
    };
    // What the takeover would have created first (a dry run did not) is adopted by the real
    // apply: the plan says so, line and counts, as the real sync reports it.
    let adopted = |c: &Change| -> Option<Change> {
        let reference = format!("{}/{}/{}", c.object.kind, c.object.namespace, c.object.name);
        (c.action == Action::Created && copied.contains(&reference)).then(|| Change {
            action: Action::Configured,
            reason: Some("adopted: the launcher's deploy key, copied from kube-system".into()),
            ..c.clone()
        })
    };
    let observe = |p: Progress<'_>| match p {
        Progress::Change(c) => match adopted(c) {
            Some(a) => observer(Progress::Change(&a)),
            None => observer(Progress::Change(c)),
        },
        other => observer(other),
    };
    tokio::select! {
        (mut changes, error) = reconcile(client, &set, settings, input, &observe) => {
            for c in changes.entries.iter_mut() {
                if let Some(a) = adopted(c) {
                    *c = a;
                }
            }
            changes.entries.splice(0..0, removed);
            Outcome::Finished { set: set.clone(), changes, error, held }
        }
        _ = stop => Outcome::Abandoned,
    }
}
