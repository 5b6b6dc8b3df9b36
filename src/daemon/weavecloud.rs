//! The WeaveCloud controller (kube-runtime): each WeaveCloud is rendered into its agents with its
//! active agent bundle, the token Secret's hash and the preserved flux arguments, then applied,
//! pruned and waited for by the apply engine. Status conditions `Ready`/`Reconciling`/`Stalled`
//! (and `Drifted` with `driftPolicy: report`) carry `observedGeneration`; events say what
//! happened; a finalizer prunes the agents when the WeaveCloud is deleted.
//!
//! Watches: the WeaveClouds; their children (by the `weft.io/owner-ref` annotation on objects
//! labelled `app.kubernetes.io/managed-by: weft`), so a deleted or edited agent is handled within
//! seconds; and Secrets, so a changed token rolls the agents and a deleted one is `TokenMissing`.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::status::{now_rfc3339, DaemonStatus};
use crate::api::conditions::{
    set_condition, Condition, ConditionStatus, DRIFTED, READY, RECONCILING, STALLED,
};
use crate::api::weavecloud::{FluxStatus, WeaveCloud, WeaveCloudStatus};
use crate::api::DriftPolicy;
use crate::apply::changeset::{Action as ChangeAction, ChangeSet};
use crate::daemon::metrics::Metrics;
use crate::daemon::updater::AgentBundles;
use crate::pass::agents::AgentsError;
use crate::pass::PassOptions;
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_REF_ANNOTATION};
use crate::render::weavecloud::render_agents;
use crate::render::DesiredSet;
use crate::render::Owner;

/// The finalizer that makes Weft prune a deleted WeaveCloud's agents.
pub const FINALIZER: &str = "weft.io/agents";
/// Condition reason: the token Secret or its key is missing.
pub const TOKEN_MISSING: &str = "TokenMissing";

/// Why a WeaveCloud reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum WeaveCloudError {
    #[error("WeaveCloud {namespace}/{name}: {action}: {message}")]
    Kube {
        namespace: String,
        name: String,
        action: String,
        message: String,
    },
    #[error("WeaveCloud finalizer: {0}")]
    Finalizer(String),
}

/// What the controller shares between reconciles.
pub struct Context {
    pub client: Client,
    pub pass_options: PassOptions,
    pub bundles: AgentBundles,
    /// Rollbacks the updater recorded: `Ready` stays False until an update succeeds.
    pub rollbacks: crate::daemon::updater::Rollbacks,
    pub recorder: Recorder,
    pub status: Arc<RwLock<DaemonStatus>>,
    pub metrics: Arc<Metrics>,
    /// Turns true on shutdown: running engine work is abandoned shortly after.
    pub stop: watch::Receiver<bool>,
}

fn owner_of(wc: &WeaveCloud) -> Owner {
    Owner::Resource {
        kind: "WeaveCloud".to_string(),
        namespace: wc.namespace().unwrap_or_default(),
        name: wc.name_any(),
    }
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
        (Some("WeaveCloud"), Some(ns), Some(name)) => Some(ObjectRef::new(name).within(ns)),
        _ => None,
    }
}

/// Run the controller until `stop` turns true.
pub async fn run(ctx: Arc<Context>, mut stop: watch::Receiver<bool>) {
    let client = ctx.client.clone();
    let wcs: Api<WeaveCloud> = Api::all(client.clone());
    let children =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let controller = Controller::new(wcs, watcher::Config::default()).with_config(
        kube::runtime::controller::Config::default().debounce(Duration::from_millis(300)),
    );
    let store = controller.store();
    let shutdown = async move {
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
    };
    controller
        .watches(
            Api::<Deployment>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        .watches(
            Api::<DaemonSet>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        .watches(Api::<Service>::all(client.clone()), children.clone(), |o| {
            owner_ref_of(&o)
        })
        .watches(
            Api::<ServiceAccount>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        .watches(
            Api::<ConfigMap>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        .watches(
            Api::<ClusterRole>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        .watches(
            Api::<ClusterRoleBinding>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        .watches(
            Api::<RoleBinding>::all(client.clone()),
            children.clone(),
            |o| owner_ref_of(&o),
        )
        // Every Secret: the token Secrets are the user's (no label); map each to the WeaveClouds
        // of its namespace that refer to it (and an agent Secret to its owner).
        .watches(
            Api::<Secret>::all(client.clone()),
            watcher::Config::default(),
            move |s: Secret| {
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
                refs.extend(owner_ref_of(&s));
                refs
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "WeaveCloud controller event");
            }
        })
        .await;
}

fn error_policy(wc: Arc<WeaveCloud>, err: &WeaveCloudError, ctx: Arc<Context>) -> Action {
    tracing::warn!(weavecloud = %format!("{}/{}", wc.namespace().unwrap_or_default(), wc.name_any()), error = %err, "reconcile failed; retrying");
    ctx.metrics.count_reconcile("WeaveCloud", "error");
    Action::requeue(Duration::from_secs(15))
}

async fn reconcile(wc: Arc<WeaveCloud>, ctx: Arc<Context>) -> Result<Action, WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let api: Api<WeaveCloud> = Api::namespaced(ctx.client.clone(), &ns);
    let c = ctx.clone();
    finalizer(&api, FINALIZER, wc, move |event| async move {
        match event {
            Finalizer::Apply(wc) => apply(wc, c).await,
            Finalizer::Cleanup(wc) => cleanup(wc, c).await,
        }
    })
    .await
    .map_err(|e| WeaveCloudError::Finalizer(e.to_string()))
}

fn kube_err(wc: &WeaveCloud, action: &str, e: impl std::fmt::Display) -> WeaveCloudError {
    WeaveCloudError::Kube {
        namespace: wc.namespace().unwrap_or_default(),
        name: wc.name_any(),
        action: action.to_string(),
        message: e.to_string(),
    }
}

async fn event(ctx: &Context, wc: &WeaveCloud, type_: EventType, reason: &str, note: String) {
    let e = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&e, &wc.object_ref(&())).await {
        tracing::debug!(error = %err, "cannot publish event");
    }
}

/// Objects of a change set that were drift (edited or deleted outside Weft), given the
/// inventory of the previous reconcile.
fn drifted(changes: &ChangeSet, inventory: &BTreeSet<crate::api::ObjectRef>) -> Vec<String> {
    changes
        .entries
        .iter()
        .filter(|c| match c.action {
            ChangeAction::Configured => c
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("drifted")),
            ChangeAction::Created => inventory.contains(&c.object),
            _ => false,
        })
        .map(|c| match &c.reason {
            Some(r) if c.action == ChangeAction::Configured => format!("{} ({r})", c.object),
            _ => format!("{} (deleted)", c.object),
        })
        .collect()
}

/// Whether a change set holds changes other than drift.
fn has_desired_changes(changes: &ChangeSet, inventory: &BTreeSet<crate::api::ObjectRef>) -> bool {
    changes.entries.iter().any(|c| match c.action {
        ChangeAction::Configured => !c
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("drifted")),
        ChangeAction::Created => !inventory.contains(&c.object),
        ChangeAction::Deleted => true,
        _ => false,
    })
}

struct Outcome {
    ready: Condition,
    stalled: Condition,
    drifted: Option<Condition>,
    agent_version: Option<String>,
    preserved: Option<Vec<String>>,
    objects: usize,
    requeue: Duration,
    /// Still rolling out (`Reconciling=True`).
    reconciling: bool,
}

/// Whether a pass error only says that objects are not ready yet (the wait's deadline).
fn only_not_ready_yet(e: &crate::pass::SyncError) -> bool {
    use crate::apply::ApplyError;
    use crate::pass::SyncError;
    match e {
        SyncError::Apply(ApplyError::WaitTimeout { .. }) => true,
        SyncError::Many(all) => !all.is_empty() && all.iter().all(only_not_ready_yet),
        _ => false,
    }
}

async fn apply(wc: Arc<WeaveCloud>, ctx: Arc<Context>) -> Result<Action, WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let status_before = wc.status.clone().unwrap_or_default();
    let previous_ready = status_before
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .cloned();
    let mut outcome = reconcile_agents(&wc, &ctx, &status_before).await?;
    if let Some(held) = ctx.rollbacks.held_ready(
        &ns,
        &name,
        &status_before,
        wc.metadata.generation,
        &outcome.ready,
    ) {
        outcome.ready = held;
    }
    let result = if outcome.ready.status == ConditionStatus::True {
        "ready"
    } else {
        "not_ready"
    };
    ctx.metrics.count_reconcile("WeaveCloud", result);

    // Events on transitions of Ready's reason (not on every reconcile).
    let ready_changed = previous_ready
        .as_ref()
        .is_none_or(|p| p.status != outcome.ready.status || p.reason != outcome.ready.reason);
    if ready_changed {
        let type_ = if outcome.ready.status == ConditionStatus::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        event(
            &ctx,
            &wc,
            type_,
            &outcome.ready.reason,
            outcome.ready.message.clone(),
        )
        .await;
    }

    let mut status = status_before.clone();
    let now = now_rfc3339();
    let generation = wc.metadata.generation;
    let mut ready = outcome.ready.clone();
    ready.observed_generation = generation;
    let mut stalled = outcome.stalled.clone();
    stalled.observed_generation = generation;
    set_condition(&mut status.conditions, ready.clone(), &now);
    set_condition(&mut status.conditions, stalled, &now);
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
    set_condition(
        &mut status.conditions,
        Condition {
            observed_generation: generation,
            ..reconciling
        },
        &now,
    );
    if let Some(mut d) = outcome.drifted.clone() {
        d.observed_generation = generation;
        set_condition(&mut status.conditions, d, &now);
    }
    status.observed_generation = generation;
    if outcome.agent_version.is_some() {
        status.agent_version = outcome.agent_version.clone();
    }
    if let Some(p) = &outcome.preserved {
        status.flux = Some(FluxStatus {
            preserved_args: p.clone(),
        });
    }
    if status != status_before {
        patch_status(&ctx.client, &wc, &status).await?;
    }

    ctx.metrics
        .set_agent_version(&ns, &name, status.agent_version.as_deref());
    {
        let mut s = ctx.status.write().unwrap_or_else(|p| p.into_inner());
        // The updater keeps the version fields of the same entry: update only ours.
        let mut entry = s
            .owners
            .get(&format!("WeaveCloud/{ns}/{name}"))
            .cloned()
            .unwrap_or_default();
        entry.kind = "WeaveCloud".into();
        entry.namespace = ns.clone();
        entry.name = name.clone();
        entry.ready = format!("{:?}", ready.status);
        entry.reason = ready.reason.clone();
        entry.message = ready.message.clone();
        entry.observed_generation = generation;
        entry.version = status.agent_version.clone();
        entry.objects = outcome.objects;
        if entry.next_update_check.is_none() {
            entry.next_update_check = status.next_update_check.clone();
        }
        s.set_owner(entry);
    }
    Ok(Action::requeue(outcome.requeue))
}

async fn reconcile_agents(
    wc: &WeaveCloud,
    ctx: &Context,
    status: &WeaveCloudStatus,
) -> Result<Outcome, WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let secret_ref = &wc.spec.general.token_secret_ref;
    let not_ready = |reason: &str, message: String, stalled: bool| Outcome {
        ready: Condition::new(READY, ConditionStatus::False, reason, message.clone()),
        stalled: if stalled {
            Condition::new(STALLED, ConditionStatus::True, reason, message)
        } else {
            Condition::new(STALLED, ConditionStatus::False, "Progressing", "")
        },
        drifted: None,
        agent_version: None,
        preserved: None,
        objects: status.inventory.len(),
        requeue: Duration::from_secs(60),
        reconciling: false,
    };

    let sources = match crate::pass::agents::gather(&ctx.client, &ctx.bundles, wc).await {
        Ok(s) => s,
        Err(e @ AgentsError::TokenMissing { .. }) => {
            tracing::warn!(weavecloud = %format!("{ns}/{name}"), secret = %secret_ref.name, "token Secret missing");
            return Ok(not_ready(TOKEN_MISSING, e.to_string(), true));
        }
        Err(e @ AgentsError::Kube { .. }) => {
            return Err(kube_err(wc, "reading the agents' inputs", e));
        }
        Err(e) => return Ok(not_ready("BundleUnavailable", e.to_string(), false)),
    };
    let active = sources.bundle;
    let inputs = sources.inputs;
    let running = sources.running_flux;
    let rendered = match render_agents(wc, &active.bundle, &inputs) {
        Ok(r) => r,
        Err(e) => return Ok(not_ready("RenderFailed", e.to_string(), true)),
    };
    // Flux args taken over from an agent Weft did not install: say so, once.
    if let Some((_, false)) = &running {
        if !rendered.preserved_flux_args.is_empty() {
            event(
                ctx,
                wc,
                EventType::Normal,
                "FluxArgsPreserved",
                format!(
                    "kept the running flux agent's arguments that spec.flux.config leaves unset: {}",
                    rendered.preserved_flux_args.join(" ")
                ),
            )
            .await;
        }
    }
    let objects = rendered.objects.len();
    let set = Arc::new(DesiredSet::for_owners(
        rendered.objects,
        [owner_of(wc)].into(),
    ));
    let opts = PassOptions {
        default_namespace: ns.clone(),
        // Check readiness, do not sit in a wait: a not-ready agent is re-checked by a requeue.
        timeout: Duration::from_secs(2),
        ..ctx.pass_options.clone()
    };
    let inventory: BTreeSet<crate::api::ObjectRef> = status.inventory.iter().cloned().collect();

    let mut drift_condition = None;
    if wc.spec.drift_policy == DriftPolicy::Report {
        let plan = run_engine(
            ctx,
            set.clone(),
            PassOptions {
                dry_run: true,
                ..opts.clone()
            },
        )
        .await;
        let (changes, error) = match plan {
            Ok(r) => r,
            Err(e) => return Ok(not_ready("ReconcileFailed", e, false)),
        };
        if let Some(e) = error {
            return Ok(not_ready("ReconcileFailed", e.to_string(), false));
        }
        let drift = drifted(&changes, &inventory);
        if !has_desired_changes(&changes, &inventory) {
            let ready = Condition::new(
                READY,
                ConditionStatus::True,
                "Reconciled",
                format!("{objects} agent objects, bundle {}", active.version()),
            );
            let drifted_cond = if drift.is_empty() {
                Condition::new(DRIFTED, ConditionStatus::False, "InSync", "")
            } else {
                let message = format!(
                    "changed outside Weft (driftPolicy: report, not corrected): {}",
                    drift.join(", ")
                );
                if !status.conditions.iter().any(|c| {
                    c.type_ == DRIFTED && c.status == ConditionStatus::True && c.message == message
                }) {
                    event(ctx, wc, EventType::Warning, "Drifted", message.clone()).await;
                }
                Condition::new(DRIFTED, ConditionStatus::True, "Drifted", message)
            };
            return Ok(Outcome {
                ready,
                stalled: Condition::new(STALLED, ConditionStatus::False, "Reconciled", ""),
                drifted: Some(drifted_cond),
                agent_version: Some(active.version().to_string()),
                preserved: Some(rendered.preserved_flux_args),
                objects,
                requeue: Duration::from_secs(600),
                reconciling: false,
            });
        }
        drift_condition = Some(Condition::new(
            DRIFTED,
            ConditionStatus::False,
            "InSync",
            "",
        ));
    }

    let (changes, error) = match run_engine(ctx, set, opts).await {
        Ok(r) => r,
        Err(e) => return Ok(not_ready("ReconcileFailed", e, false)),
    };
    let s = changes.summary();
    ctx.metrics.count_objects(
        (s.created + s.configured) as u64,
        s.deleted as u64,
        s.unchanged as u64,
    );
    let corrected = drifted(&changes, &inventory);
    if !corrected.is_empty() {
        event(
            ctx,
            wc,
            EventType::Normal,
            "DriftCorrected",
            format!("restored: {}", corrected.join(", ")),
        )
        .await;
    }
    if s.created + s.configured + s.deleted > 0 {
        tracing::info!(weavecloud = %format!("{ns}/{name}"), "{s}", s = s);
    }
    match error {
        None => {}
        Some(e) if only_not_ready_yet(&e) => {
            // Applied; the agents are still rolling out. Look again shortly instead of blocking
            // this WeaveCloud's reconciles (drift, token changes) in a long wait.
            let mut o = not_ready(
                "Progressing",
                format!("agents applied, waiting for them to become ready: {e}"),
                false,
            );
            o.agent_version = Some(active.version().to_string());
            o.preserved = Some(rendered.preserved_flux_args);
            o.drifted = drift_condition;
            o.objects = objects;
            o.requeue = Duration::from_secs(5);
            o.reconciling = true;
            return Ok(o);
        }
        Some(e) => {
            tracing::warn!(weavecloud = %format!("{ns}/{name}"), error = %e, "applying the agents failed");
            return Ok(not_ready("ReconcileFailed", e.to_string(), false));
        }
    }
    Ok(Outcome {
        ready: Condition::new(
            READY,
            ConditionStatus::True,
            "Reconciled",
            format!(
                "{objects} agent objects applied and ready, bundle {}",
                active.version()
            ),
        ),
        stalled: Condition::new(STALLED, ConditionStatus::False, "Reconciled", ""),
        drifted: drift_condition,
        agent_version: Some(active.version().to_string()),
        preserved: Some(rendered.preserved_flux_args),
        objects,
        requeue: Duration::from_secs(600),
        reconciling: false,
    })
}

async fn run_engine(
    ctx: &Context,
    set: Arc<DesiredSet>,
    opts: PassOptions,
) -> Result<(ChangeSet, Option<crate::pass::SyncError>), String> {
    match super::reconcile_detached(
        ctx.client.clone(),
        set,
        opts,
        Arc::new(|_| {}),
        std::future::pending(),
    )
    .await?
    {
        Some(r) => Ok(r),
        None => Err("cancelled".to_string()),
    }
}

async fn patch_status(
    client: &Client,
    wc: &WeaveCloud,
    status: &WeaveCloudStatus,
) -> Result<(), WeaveCloudError> {
    let api: Api<WeaveCloud> = Api::namespaced(client.clone(), &wc.namespace().unwrap_or_default());
    // Only the fields this controller owns: the inventory is written by the apply engine, the
    // update fields by the updater.
    let patch = json!({"status": {
        "conditions": status.conditions,
        "observedGeneration": status.observed_generation,
        "agentVersion": status.agent_version,
        "flux": status.flux,
    }});
    api.patch_status(
        &wc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| kube_err(wc, "writing status", e))?;
    Ok(())
}

/// The WeaveCloud is being deleted: prune every agent it applied, then let it go.
async fn cleanup(wc: Arc<WeaveCloud>, ctx: Arc<Context>) -> Result<Action, WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let name = wc.name_any();
    let set = Arc::new(DesiredSet::for_owners(Vec::new(), [owner_of(&wc)].into()));
    let opts = PassOptions {
        default_namespace: ns.clone(),
        force_prune: true,
        max_prune_fraction: 1.0,
        ..ctx.pass_options.clone()
    };
    let (changes, error) = run_engine(&ctx, set, opts)
        .await
        .map_err(|e| kube_err(&wc, "pruning the agents", e))?;
    if let Some(e) = error {
        return Err(kube_err(&wc, "pruning the agents", e));
    }
    for c in changes
        .entries
        .iter()
        .filter(|c| c.action != ChangeAction::Deleted)
    {
        tracing::warn!(weavecloud = %format!("{ns}/{name}"), change = %c, "agent not pruned");
    }
    let pruned = changes.summary().deleted;
    ctx.metrics.count_objects(0, pruned as u64, 0);
    let known = wc.status.as_ref().map_or(0, |s| s.inventory.len());
    tracing::info!(weavecloud = %format!("{ns}/{name}"), pruned, known, "WeaveCloud deleted: its agents were pruned");
    event(
        &ctx,
        &wc,
        EventType::Normal,
        "Pruned",
        format!("deleted {pruned} agent objects"),
    )
    .await;
    ctx.rollbacks.set(&ns, &name, None);
    if let Err(e) = ctx.bundles.forget(&ns, &name).await {
        tracing::warn!(error = %e, "cannot forget the cached agent bundle");
    }
    ctx.metrics.set_agent_version(&ns, &name, None);
    ctx.status
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove_owner("WeaveCloud", &ns, &name);
    Ok(Action::await_change())
}

/// A recorder for Weft's events.
pub fn recorder(client: Client) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: "weft".to_string(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::changeset::Change;

    fn cm(name: &str) -> crate::api::ObjectRef {
        crate::api::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "weave".into(),
            name: name.into(),
        }
    }

    fn change(name: &str, action: ChangeAction, reason: Option<&str>) -> Change {
        Change {
            object: cm(name),
            owner: Owner::Resource {
                kind: "WeaveCloud".into(),
                namespace: "weave".into(),
                name: "wc".into(),
            },
            action,
            reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn drift_is_an_edited_field_or_a_deleted_child_not_a_spec_change() {
        let inventory: BTreeSet<_> = [cm("a"), cm("b")].into();
        let changes = ChangeSet {
            entries: vec![
                change("a", ChangeAction::Configured, Some("drifted: data.k")),
                change("b", ChangeAction::Created, None),
                change("c", ChangeAction::Unchanged, None),
            ],
        };
        assert_eq!(
            drifted(&changes, &inventory),
            vec![
                "ConfigMap/weave/a (drifted: data.k)".to_string(),
                "ConfigMap/weave/b (deleted)".to_string()
            ]
        );
        assert!(!has_desired_changes(&changes, &inventory));
        let spec_change = ChangeSet {
            entries: vec![
                change("a", ChangeAction::Configured, Some("changed")),
                change("new", ChangeAction::Created, None),
            ],
        };
        assert!(drifted(&spec_change, &inventory).is_empty());
        assert!(has_desired_changes(&spec_change, &inventory));
    }

    #[test]
    fn children_map_to_their_weavecloud_by_annotation() {
        let mut d = Deployment::default();
        d.metadata.annotations = Some(
            [(
                OWNER_REF_ANNOTATION.to_string(),
                "WeaveCloud/weave/wc".to_string(),
            )]
            .into(),
        );
        let r = owner_ref_of(&d).unwrap();
        assert_eq!(r.name, "wc");
        assert_eq!(r.namespace.as_deref(), Some("weave"));
        d.metadata.annotations =
            Some([(OWNER_REF_ANNOTATION.to_string(), "root/weft".to_string())].into());
        assert!(owner_ref_of(&d).is_none());
    }
}
