//! The WeaveCloud controller (kube-runtime): each WeaveCloud is rendered into its agents with its
//! active agent bundle, the token Secret's hash and the preserved flux arguments, then applied,
//! pruned and waited for by the apply engine. Status conditions `Ready`/`Reconciling`/`Stalled`
//! (and `Drifted` with `driftPolicy: report`) carry `observedGeneration`; events say what
//! happened; a finalizer prunes the agents when the WeaveCloud is deleted.
//!
//! The agent update check is a step of the same reconcile ([`Context::with_updater`]): kube-runtime
//! runs one reconcile per WeaveCloud at a time, so the reconcile is the only writer of the
//! WeaveCloud's agents and status (`daemon::state` says which step writes which field). The
//! reconcile is requeued at the next check (`status.nextUpdateCheck`), and a check asked for over
//! HTTP reconciles every WeaveCloud (`reconcile_all_on` the state's `UpdateRequests`).
//!
//! Watches: the WeaveClouds; their children (by the `weft.io/owner-ref` annotation on objects
//! labelled `app.kubernetes.io/managed-by: weft`), so a deleted or edited agent is handled within
//! seconds; and Secrets, so a changed token rolls the agents and a deleted one is `TokenMissing`.

mod agents;
mod release;
#[cfg(test)]
mod tests;
pub mod trust;
mod updates;

use crate::api::keys::AGENTS_FINALIZER;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::rollbacks::held_rollback;
use super::shutdown::Shutdown;
use super::state::DaemonState;
use super::status::now_rfc3339;
use super::suspend;
use crate::api::conditions::{set_condition, Condition, ConditionStatus, READY, RECONCILING};
use crate::api::keys::OWNER_REF_ANNOTATION;
use crate::api::weavecloud::{WeaveCloud, WeaveCloudStatus};
use crate::apply::changeset::Action as ChangeAction;
use crate::pass::agents::AgentsError;
use crate::pass::{PassError, PassInput, PassSettings};
use crate::render::DesiredSet;
use crate::render::Owner;
use agents::{reconcile_agents, reference, Outcome};
use trust::Trust;

/// The kind, as metrics and the daemon status name it.
const KIND: &str = crate::api::owner::OwnerKind::WeaveCloud.as_str();
pub use trust::NOT_RECONCILED;

/// Condition reason: the token Secret or its key is missing.
pub const TOKEN_MISSING: &str = "TokenMissing";
/// Condition type: launcher objects were found next to the agents (`True`: left in place).
pub const LAUNCHER_OBJECTS: &str = "LauncherObjects";
/// Condition reason (and event): launcher objects left alone because `takeover` is false.
pub const TAKEOVER_DISABLED: &str = "TakeoverDisabled";
/// Condition reason: the launcher's objects were taken over (removed or adopted).
pub const TAKEN_OVER: &str = "TakenOver";
/// Condition reason: no launcher object is left, and none was taken over by this WeaveCloud.
pub const NONE_LEFT: &str = "NoLauncherObjects";

/// Why a WeaveCloud reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum WeaveCloudError {
    #[error("WeaveCloud {weavecloud}: {action}: {}", crate::api::kube_error::Text(.source))]
    Kube {
        weavecloud: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("WeaveCloud {weavecloud}: reading the agents' inputs: {source}")]
    Agents {
        weavecloud: String,
        #[source]
        source: AgentsError,
    },
    #[error("WeaveCloud {weavecloud}: pruning the agents: {source}")]
    Prune {
        weavecloud: String,
        #[source]
        source: Box<PassError>,
    },
    #[error("WeaveCloud {weavecloud}: reading the root's inventory, which says whether the operator applied it: {source}")]
    Trust {
        weavecloud: String,
        #[source]
        source: Box<crate::apply::ApplyError>,
    },
    #[error("the daemon is stopping; the reconcile was abandoned")]
    Abandoned,
    #[error("WeaveCloud finalizer: {}", crate::api::kube_error::finalizer_text(.0))]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<WeaveCloudError>>),
}

/// What the controller shares between reconciles.
pub struct Context {
    state: DaemonState,
    /// The daemon's pass settings, which every pass of the agents runs with.
    settings: Arc<PassSettings>,
    /// Running engine work is abandoned the grace period after a stop request.
    shutdown: Shutdown,
    /// Whether the root applied a WeaveCloud: its inventory, read when it changed.
    applied: crate::apply::ownership::AppliedByRoots,
    /// The agent update check, a step of each reconcile; `None`: no update checks.
    updater: Option<Arc<super::updater::Updater>>,
    /// Per WeaveCloud, the count of update requests (`UpdateRequests`) its last check answered;
    /// each entry is read and written only by its WeaveCloud's reconcile.
    answered: Mutex<HashMap<(String, String), u64>>,
}

impl Context {
    pub fn new(state: DaemonState, settings: Arc<PassSettings>, shutdown: Shutdown) -> Context {
        Context {
            state,
            settings,
            shutdown,
            applied: trust::applied_by_roots(),
            updater: None,
            answered: Mutex::default(),
        }
    }

    /// Check each WeaveCloud for agent updates in its reconcile, with `updater` (as `weft run`
    /// does): on its `updateSchedule`, and when asked over HTTP.
    pub fn with_updater(mut self, updater: Arc<super::updater::Updater>) -> Context {
        self.updater = Some(updater);
        self
    }
}

fn owner_of(wc: &WeaveCloud) -> Owner {
    crate::pass::agents::owner_of(&wc.namespace().unwrap_or_default(), &wc.name_any())
}

/// The WeaveCloud a child belongs to, from its `weft.io/owner-ref` annotation.
pub fn owner_ref_of<K: Resource>(child: &K) -> Option<ObjectRef<WeaveCloud>> {
    let r = child
        .meta()
        .annotations
        .as_ref()?
        .get(OWNER_REF_ANNOTATION)?;
    let mut parts = r.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(KIND), Some(ns), Some(name)) => Some(ObjectRef::new(name).within(ns)),
        _ => None,
    }
}

/// The WeaveClouds a Secret matters to: those of its namespace whose token it is, and the owner
/// of an agent Secret.
/// [`owner_ref_of`] as a watch mapper.
fn owned<K: Resource>(child: K) -> Option<ObjectRef<WeaveCloud>> {
    owner_ref_of(&child)
}

fn weaveclouds_of_secret(store: &Store<WeaveCloud>, s: &Secret) -> Vec<ObjectRef<WeaveCloud>> {
    let ns = s.namespace().unwrap_or_default();
    let name = s.name_any();
    let mut refs: Vec<ObjectRef<WeaveCloud>> = store
        .state()
        .iter()
        .filter(|wc| {
            wc.namespace().as_deref() == Some(ns.as_str())
                && wc.spec.general.token_secret_ref.name == name
        })
        .map(|wc| ObjectRef::from_obj(wc.as_ref()))
        .collect();
    refs.extend(owner_ref_of(s));
    refs
}

/// Run the controller until the daemon is asked to stop.
pub async fn run(ctx: Context) {
    let client = ctx.state.client().clone();
    // With `--watch-namespaces` every watch is one per namespace (a Weft with a Role in each
    // gets no cluster-wide list, and no 403 retried forever), and the cluster-scoped children
    // (ClusterRoles, ClusterRoleBindings) are not watched: their drift is corrected on the
    // WeaveCloud's next interval instead (docs/security.md).
    let namespaces = ctx.state.watch_namespaces().names();
    // Children of custom resources only: the sync roots' own objects (possibly 100,000s) are
    // left out by the server, not filtered here.
    let children = watcher::Config::default().labels(&ctx.state.children_selector());
    let (reader, writer) = kube::runtime::reflector::store();
    let wcs = crate::apply::watch::watch_in::<WeaveCloud>(
        &client,
        namespaces.clone(),
        watcher::Config::default(),
    )
    .reflect(writer)
    .touched_objects();
    let controller = Controller::for_stream(wcs, reader).with_config(
        kube::runtime::controller::Config::default().debounce(Duration::from_millis(300)),
    );
    let store = controller.store();
    let shutdown = ctx.shutdown.clone();
    let c = controller;
    let c = crate::apply::watch::watches_in::<Deployment, _, _>(
        c,
        &client,
        &namespaces,
        &children,
        owned,
    );
    let c = crate::apply::watch::watches_in::<DaemonSet, _, _>(
        c,
        &client,
        &namespaces,
        &children,
        owned,
    );
    let c =
        crate::apply::watch::watches_in::<Service, _, _>(c, &client, &namespaces, &children, owned);
    let c = crate::apply::watch::watches_in::<ServiceAccount, _, _>(
        c,
        &client,
        &namespaces,
        &children,
        owned,
    );
    let c = crate::apply::watch::watches_in::<ConfigMap, _, _>(
        c,
        &client,
        &namespaces,
        &children,
        owned,
    );
    let c = crate::apply::watch::watches_in::<RoleBinding, _, _>(
        c,
        &client,
        &namespaces,
        &children,
        owned,
    );
    let c = match namespaces {
        None => c
            .watches(
                Api::<ClusterRole>::all(client.clone()),
                children.clone(),
                owned::<ClusterRole>,
            )
            .watches(
                Api::<ClusterRoleBinding>::all(client.clone()),
                children,
                owned::<ClusterRoleBinding>,
            ),
        Some(_) => c,
    };
    // The token Secrets are the user's (no label): every Secret of the namespaces WeaveClouds
    // are acted on in. With `--watch-namespaces`, one watch per namespace, so the agents tier
    // may read Secrets through a Role in each instead of cluster-wide (docs/security.md).
    let of_secret = move |s: Secret| weaveclouds_of_secret(&store, &s);
    let namespaces = ctx.state.watch_namespaces().names();
    let controller = crate::apply::watch::watches_in::<Secret, _, _>(
        c,
        &client,
        &namespaces,
        &watcher::Config::default(),
        of_secret,
    );
    controller
        // Resuming the root reconciles every WeaveCloud again.
        .reconcile_all_on(ctx.state.suspension().resumes())
        // So does an update check asked for over HTTP (the reconcile runs the check).
        .reconcile_all_on(ctx.state.update_requests().triggers())
        .graceful_shutdown_on(async move { shutdown.stopped().await })
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "WeaveCloud controller event");
            }
        })
        .await;
}

fn error_policy(wc: Arc<WeaveCloud>, err: &WeaveCloudError, ctx: Arc<Context>) -> Action {
    tracing::warn!(weavecloud = %reference(&wc), error = %err, "reconcile failed; retrying");
    ctx.state.metrics().count_reconcile(KIND, "error");
    Action::requeue(Duration::from_secs(15))
}

/// Apply or clean up one WeaveCloud, through the finalizer helper.
pub async fn reconcile(wc: Arc<WeaveCloud>, ctx: Arc<Context>) -> Result<Action, WeaveCloudError> {
    let namespace = wc.namespace().unwrap_or_default();
    let roots = trust::roots(
        &ctx.state,
        &ctx.settings.weft_namespace,
        &ctx.settings.root_name,
    );
    let listing = trust::listing(
        &ctx.applied,
        ctx.state.client(),
        &roots,
        &ctx.settings.weft_namespace,
        ctx.state.watch_namespaces(),
    )
    .await
    .map_err(|source| WeaveCloudError::Trust {
        weavecloud: reference(&wc),
        source: Box::new(source),
    })?;
    let decision = trust::trust(&wc, &roots, &listing, ctx.state.watch_namespaces());
    if let Trust::Ignored { why, tell } = decision {
        let ours = wc.finalizers().iter().any(|f| f == AGENTS_FINALIZER);
        if wc.metadata.deletion_timestamp.is_none() || !ours {
            // Not the operator's (docs/security.md): no agents, no finalizer, no update.
            tracing::debug!(weavecloud = %reference(&wc), %why, "ignored");
            if tell {
                mark_not_reconciled(&ctx, &wc, why).await?;
            }
            return Ok(Action::await_change());
        }
        // Reconciled before (by an older Weft, or before the operator narrowed its trust) and
        // deleted now: its agents are pruned and the finalizer released, as for any other, so
        // that the deletion does not hang.
    }
    if !ctx
        .state
        .handles(wc.labels(), KIND, &namespace, &wc.name_any())
    {
        // Another shard's (`--shards`): its holder reconciles it.
        tracing::debug!(weavecloud = %reference(&wc), "another shard's; ignored");
        return Ok(Action::await_change());
    }
    let api: Api<WeaveCloud> = Api::namespaced(ctx.state.client().clone(), &namespace);
    let why = suspend::why_suspended(ctx.state.suspension(), &wc.metadata);
    let conditions = wc.status.as_ref().map(|s| s.conditions.clone());
    // Flux-shaped metrics: this reconcile's duration (on every exit), the gauges as it starts
    // (the status written below is seen by the reconcile its change triggers, and by `record`).
    let resources = ctx.state.metrics().resources();
    let _timer = resources.timer(KIND, &namespace, &wc.name_any());
    resources.set_suspended(KIND, &namespace, &wc.name_any(), why.is_some());
    resources.set_ready_from(
        KIND,
        &namespace,
        &wc.name_any(),
        conditions.as_deref().unwrap_or_default(),
    );
    suspend::mark(&api, &wc.name_any(), &conditions.unwrap_or_default(), why)
        .await
        .map_err(|source| WeaveCloudError::Kube {
            weavecloud: reference(&wc),
            action: "writing the Suspended condition",
            source,
        })?;
    if let Some(why) = why {
        // Nothing is applied, corrected, pruned or updated; a deletion keeps the finalizer (and
        // the agents) until the WeaveCloud is resumed.
        tracing::info!(weavecloud = %reference(&wc), why, "suspended; left as it is");
        return Ok(Action::await_change());
    }
    finalizer(&api, AGENTS_FINALIZER, wc, |event| async move {
        match event {
            Finalizer::Apply(wc) => apply(&wc, &ctx).await,
            Finalizer::Cleanup(wc) => cleanup(&wc, &ctx).await,
        }
    })
    .await
    .map_err(|e| WeaveCloudError::Finalizer(Box::new(e)))
}

/// Say in `wc`'s status why it is not reconciled (`Ready=False`, [`NOT_RECONCILED`]) and in one
/// event, unless it already has a `Ready` condition: whoever reconciles it (another
/// installation) owns that condition, and two installations never overwrite each other.
async fn mark_not_reconciled(
    ctx: &Context,
    wc: &WeaveCloud,
    why: String,
) -> Result<(), WeaveCloudError> {
    let mut conditions = wc
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if conditions.iter().any(|c| c.type_ == READY) {
        return Ok(());
    }
    let mut c = Condition::new(READY, ConditionStatus::False, NOT_RECONCILED, why.clone());
    c.observed_generation = wc.metadata.generation;
    set_condition(&mut conditions, c, &now_rfc3339());
    let api: Api<WeaveCloud> = Api::namespaced(
        ctx.state.client().clone(),
        &wc.namespace().unwrap_or_default(),
    );
    let patch = json!({"status": {"conditions": conditions}});
    api.patch_status(
        &wc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|source| WeaveCloudError::Kube {
        weavecloud: reference(wc),
        action: "writing the NotReconciled condition",
        source,
    })?;
    event(ctx, wc, EventType::Warning, NOT_RECONCILED, why).await;
    Ok(())
}

async fn event(ctx: &Context, wc: &WeaveCloud, type_: EventType, reason: &str, note: String) {
    event_about(ctx, wc, type_, reason, note, None).await
}

/// An event about `wc`, related to `secondary` (the recorder keeps one event series per
/// regarding/related pair and reason: events of one reason about different objects need it).
async fn event_about(
    ctx: &Context,
    wc: &WeaveCloud,
    type_: EventType,
    reason: &str,
    note: String,
    secondary: Option<k8s_openapi::api::core::v1::ObjectReference>,
) {
    let event = crate::daemon::events::Note {
        warning: type_ == EventType::Warning,
        reason,
        action: "Reconcile",
        text: &note,
        related: secondary,
    };
    ctx.state.events().publish(wc, event).await;
}

/// Render and apply the agents and write their status fields, then the update step: a check when
/// due (or asked for), and a requeue at the next one. The update step runs even when the agents'
/// step failed (a newer bundle may be what fixes them), as it did beside the controller.
async fn apply(wc: &WeaveCloud, ctx: &Context) -> Result<Action, WeaveCloudError> {
    let agents = apply_agents(wc, ctx).await;
    let status = match &agents {
        Ok((_, status)) => status.clone(),
        Err(_) => wc.status.clone().unwrap_or_default(),
    };
    let next = updates::step(ctx, wc, status).await;
    let (mut requeue, _) = agents?;
    if let Some(next) = next {
        let until = Duration::try_from(k8s_openapi::jiff::Timestamp::now().duration_until(next))
            .unwrap_or_default();
        requeue = requeue.min(until.max(Duration::from_secs(1)));
    }
    Ok(Action::requeue(requeue))
}

/// The agents' step: render and apply them, then write its status fields. When to reconcile
/// again for the agents' sake, and the status as it wrote it.
async fn apply_agents(
    wc: &WeaveCloud,
    ctx: &Context,
) -> Result<(Duration, WeaveCloudStatus), WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let mut before = wc.status.clone().unwrap_or_default();
    let mut outcome = reconcile_agents(wc, ctx, &before).await?;
    if outcome.launcher_checked
        && outcome.takeover.is_none()
        && launcher_condition_is_stale(&before)
        && before
            .takeover
            .as_ref()
            .is_none_or(|t| t.removed.is_empty())
    {
        // This copy may predate the status a takeover just wrote (a reconcile queued before
        // it, after `takeover: false` → `true`): the removals the API server holds decide
        // between TakenOver and NoLauncherObjects (issue 44 item 5). One read, only then.
        let api: kube::Api<WeaveCloud> = kube::Api::namespaced(ctx.state.client().clone(), &ns);
        if let Ok(Some(live)) = api.get_opt(&name).await {
            if let Some(t) = live.status.and_then(|s| s.takeover) {
                if !t.removed.is_empty() {
                    before.takeover.get_or_insert_with(Default::default).removed = t.removed;
                }
            }
        }
    }
    let generation = wc.metadata.generation;
    if let Some(held) = held_rollback(&before, generation, &outcome.ready) {
        outcome.ready = held;
    } else if outcome.ready.status == ConditionStatus::True
        && next_status(&before, &outcome, generation, &now_rfc3339()) != before
    {
        // This copy may predate the verdict of an update this WeaveCloud's previous reconcile
        // rolled back (the watch had not delivered that status yet): before a write that would
        // replace `Ready`, the status the API server holds decides. One read, only then.
        let api: Api<WeaveCloud> = Api::namespaced(ctx.state.client().clone(), &ns);
        let live = api
            .get_status(&name)
            .await
            .map_err(|source| WeaveCloudError::Kube {
                weavecloud: reference(wc),
                action: "reading its status",
                source,
            })?
            .status
            .unwrap_or_default();
        if let Some(held) = held_rollback(&live, generation, &outcome.ready) {
            before.conditions = live.conditions;
            outcome.ready = held;
        }
    }
    let result = if outcome.ready.status == ConditionStatus::True {
        "ready"
    } else {
        "not_ready"
    };
    ctx.state.metrics().count_reconcile(KIND, result);
    // Events on transitions of Ready's reason (not on every reconcile).
    let previous = before.conditions.iter().find(|c| c.type_ == READY);
    if previous.is_none_or(|p| p.status != outcome.ready.status || p.reason != outcome.ready.reason)
    {
        let type_ = if outcome.ready.status == ConditionStatus::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        let note = outcome.ready.message.clone();
        event(ctx, wc, type_, &outcome.ready.reason, note).await;
    }
    let status = next_status(&before, &outcome, generation, &now_rfc3339());
    if status != before {
        patch_status(ctx, wc, &status).await?;
    }
    record(ctx, wc, &outcome, &status);
    Ok((outcome.requeue, status))
}

/// The status after a reconcile: `before` with the controller's fields from `outcome`.
fn next_status(
    before: &WeaveCloudStatus,
    outcome: &Outcome,
    generation: Option<i64>,
    now: &str,
) -> WeaveCloudStatus {
    let mut status = before.clone();
    let with_generation = |c: &Condition| Condition {
        observed_generation: generation,
        ..c.clone()
    };
    set_condition(&mut status.conditions, with_generation(&outcome.ready), now);
    set_condition(
        &mut status.conditions,
        with_generation(&outcome.stalled),
        now,
    );
    let reconciling = if outcome.reconciling {
        Condition::new(
            RECONCILING,
            ConditionStatus::True,
            "Progressing",
            "waiting for the agents to become ready",
        )
    } else {
        Condition::new(RECONCILING, ConditionStatus::False, "ReconcileFinished", "")
    };
    set_condition(&mut status.conditions, with_generation(&reconciling), now);
    if let Some(d) = &outcome.drifted {
        set_condition(&mut status.conditions, with_generation(d), now);
    }
    status.observed_generation = generation;
    if let Some(p) = &outcome.preserved {
        status.flux = Some(p.clone());
    }
    if let Some((taken, condition)) = &outcome.takeover {
        set_condition(&mut status.conditions, with_generation(condition), now);
        let mut t = status.takeover.clone().unwrap_or_default();
        // Removals add up over reconciles (a second pass finds nothing left to remove).
        for r in &taken.removed {
            if !t.removed.contains(r) {
                t.removed.push(r.clone());
            }
        }
        t.left = taken.left.clone();
        status.takeover = Some(t);
    } else if outcome.launcher_checked && launcher_condition_is_stale(&status) {
        // No launcher object is left (removed by hand, by `weft sync`, or by an earlier
        // reconcile): what a `takeover: false` reconcile wrote no longer holds.
        if let Some(t) = status.takeover.as_mut() {
            t.left.clear();
        }
        let taken_over = status
            .takeover
            .as_ref()
            .is_some_and(|t| !t.removed.is_empty());
        let c = if taken_over {
            Condition::new(
                LAUNCHER_OBJECTS,
                ConditionStatus::False,
                TAKEN_OVER,
                "the launcher's objects were taken over (see status.takeover)",
            )
        } else {
            Condition::new(
                LAUNCHER_OBJECTS,
                ConditionStatus::False,
                NONE_LEFT,
                "no launcher object is left next to the agents",
            )
        };
        set_condition(&mut status.conditions, with_generation(&c), now);
    } else if status
        .takeover
        .as_ref()
        .is_some_and(|t| !t.removed.is_empty())
        && !status
            .conditions
            .iter()
            .any(|c| c.type_ == LAUNCHER_OBJECTS)
    {
        // A reconcile that started from a copy older than the takeover's status write finds
        // nothing left to take over; the condition follows the recorded takeover.
        let c = Condition::new(
            LAUNCHER_OBJECTS,
            ConditionStatus::False,
            TAKEN_OVER,
            "the launcher's objects were taken over (see status.takeover)",
        );
        set_condition(&mut status.conditions, with_generation(&c), now);
    }
    status
}

/// Whether `status` still says launcher objects are left in place (`LauncherObjects=True`, or a
/// `status.takeover.left`), which a reconcile that found none must correct.
fn launcher_condition_is_stale(status: &WeaveCloudStatus) -> bool {
    status.takeover.as_ref().is_some_and(|t| !t.left.is_empty())
        || status
            .conditions
            .iter()
            .any(|c| c.type_ == LAUNCHER_OBJECTS && c.status == ConditionStatus::True)
}

/// The WeaveCloud's entry in the daemon status and its version gauge.
fn record(ctx: &Context, wc: &WeaveCloud, outcome: &Outcome, status: &WeaveCloudStatus) {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let version = outcome
        .agent_version
        .clone()
        .or_else(|| status.agent_version.clone());
    ctx.state
        .metrics()
        .set_agent_version(&ns, &name, version.as_deref());
    ctx.state
        .metrics()
        .resources()
        .set_ready_from(KIND, &ns, &name, &status.conditions);
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    ctx.state.update_status(|s| {
        // The update step keeps the version fields of the same entry: update only ours.
        let mut entry = s
            .owners
            .get(&format!("WeaveCloud/{ns}/{name}"))
            .cloned()
            .unwrap_or_default();
        entry.kind = KIND.into();
        entry.namespace = ns.clone();
        entry.name = name.clone();
        if let Some(r) = ready {
            entry.ready = format!("{:?}", r.status);
            entry.reason = r.reason.clone();
            entry.message = r.message.clone();
        }
        entry.observed_generation = status.observed_generation;
        entry.version = version;
        entry.objects = outcome.objects;
        if entry.next_update_check.is_none() {
            entry.next_update_check = status.next_update_check.clone();
        }
        s.set_owner(entry);
    });
}

async fn patch_status(
    ctx: &Context,
    wc: &WeaveCloud,
    status: &WeaveCloudStatus,
) -> Result<(), WeaveCloudError> {
    let api: Api<WeaveCloud> = Api::namespaced(
        ctx.state.client().clone(),
        &wc.namespace().unwrap_or_default(),
    );
    // Only the fields of this step (see `daemon::state`): the inventory is the apply engine's,
    // the version fields are the update check's.
    let mut patch = json!({"status": {
        "conditions": status.conditions,
        "observedGeneration": status.observed_generation,
        "flux": status.flux,
    }});
    // Only a takeover that happened is written: a reconcile that started from a cached copy
    // older than the takeover's status write must not erase it (a merge patch's null would).
    if let Some(t) = &status.takeover {
        patch["status"]["takeover"] = json!(t);
        // An empty list is left out of the serialized status, and a merge patch that leaves a
        // field out keeps it: `left` is written explicitly, so that an emptied list is emptied.
        patch["status"]["takeover"]["left"] = json!(t.left);
    }
    api.patch_status(
        &wc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|source| WeaveCloudError::Kube {
        weavecloud: reference(wc),
        action: "writing status",
        source,
    })?;
    Ok(())
}

/// The WeaveCloud is being deleted: prune every agent it applied, then let it go.
async fn cleanup(wc: &WeaveCloud, ctx: &Context) -> Result<Action, WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let owner = owner_of(wc);
    let set = DesiredSet::for_owners(Vec::new(), [owner.clone()].into());
    // The one pass that ignores `--max-prune-fraction` (forced past the guard): deleting the
    // WeaveCloud deletes all its agents by definition, so the guard would always trip. The
    // rest (`--concurrency`, timeouts) is the daemon's.
    let input = PassInput {
        namespace: Some(ns.clone()),
        force_prune: true,
        ..PassInput::default()
    };
    // A ServiceAccount another workload runs as (an adopted `weave-flux` a user's
    // flux-helm-operator uses) is released, not pruned.
    let released = release::release_shared_service_accounts(ctx.state.client(), wc, &owner)
        .await
        .map_err(|source| WeaveCloudError::Kube {
            weavecloud: reference(wc),
            action: "releasing ServiceAccounts other workloads use",
            source,
        })?;
    if !released.is_empty() {
        let note = format!("kept, not pruned: {}", released.join(", "));
        event(ctx, wc, EventType::Normal, "ServiceAccountKept", note).await;
    }
    let (changes, error) = agents::engine(ctx, &set, &input).await?;
    if let Some(source) = error {
        return Err(WeaveCloudError::Prune {
            weavecloud: reference(wc),
            source: Box::new(source),
        });
    }
    for c in changes
        .entries
        .iter()
        .filter(|c| c.action != ChangeAction::Deleted)
    {
        tracing::warn!(weavecloud = %reference(wc), change = %c, "agent not pruned");
    }
    let pruned = changes.summary().deleted;
    ctx.state.metrics().count_objects(0, pruned as u64, 0);
    let known = wc.status.as_ref().map_or(0, |s| s.inventory.len());
    tracing::info!(weavecloud = %reference(wc), pruned, known, "WeaveCloud deleted: its agents were pruned");
    let note = format!("deleted {pruned} agent objects");
    event(ctx, wc, EventType::Normal, "Pruned", note).await;
    if let Err(e) = ctx.state.bundles().forget(&ns, &name).await {
        tracing::warn!(error = %e, "cannot forget the cached agent bundle");
    }
    ctx.state.metrics().set_agent_version(&ns, &name, None);
    updates::forget(ctx, &ns, &name);
    ctx.state.metrics().resources().forget(KIND, &ns, &name);
    ctx.state
        .update_status(|s| s.remove_owner(KIND, &ns, &name));
    Ok(Action::await_change())
}
