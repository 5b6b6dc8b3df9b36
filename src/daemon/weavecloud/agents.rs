//! One reconcile of a WeaveCloud's agents: gather the inputs (active bundle, token hash, running
//! flux args), render, then (with `driftPolicy: report`) plan or apply, prune and check
//! readiness with the apply engine. The result is an [`Outcome`]: the conditions and fields the
//! controller writes to the WeaveCloud's status.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::{
    event, event_about, owner_of, Context, WeaveCloudError, LAUNCHER_OBJECTS, TAKEOVER_DISABLED,
    TOKEN_MISSING,
};
use crate::api::conditions::{Condition, ConditionStatus, DRIFTED, READY, STALLED};
use crate::api::weavecloud::{FluxStatus, WeaveCloud, WeaveCloudStatus};
use crate::api::{DriftPolicy, ObjectRef};
use crate::apply::changeset::{Action as ChangeAction, ChangeSet};
use crate::apply::ApplyError;
use crate::daemon::EngineRun;
use crate::pass::agents::{ActiveBundle, AgentsError};
use crate::pass::takeover::{self, Decision, Found, Takeover};
use crate::pass::{PassError, PassInput};
use crate::render::weavecloud::{render_agents, RenderedAgents};
use crate::render::{DesiredObject, DesiredSet};

/// Condition reason: an object of the agents belongs to another owner (never adopted).
pub const OWNED_BY_ANOTHER: &str = "OwnedByAnotherOwner";

/// What one reconcile of the agents found.
pub(super) struct Outcome {
    pub ready: Condition,
    pub stalled: Condition,
    pub drifted: Option<Condition>,
    /// The bundle version rendered (`None` when nothing was rendered).
    pub agent_version: Option<String>,
    pub preserved: Option<FluxStatus>,
    pub objects: usize,
    pub requeue: Duration,
    /// Still rolling out (`Reconciling=True`).
    pub reconciling: bool,
    /// What the takeover of launcher objects did this reconcile, and its condition.
    pub takeover: Option<(Takeover, Condition)>,
    /// The takeover step ran (and found nothing when `takeover` is `None`): a condition or
    /// `status.takeover.left` of an earlier reconcile no longer holds.
    pub launcher_checked: bool,
}

impl Outcome {
    /// `Ready=False` with `reason`; `Stalled=True` too when retrying will not help by itself.
    fn not_ready(reason: &str, message: String, stalled: bool, objects: usize) -> Outcome {
        Outcome {
            ready: Condition::new(READY, ConditionStatus::False, reason, message.clone()),
            stalled: if stalled {
                Condition::new(STALLED, ConditionStatus::True, reason, message)
            } else {
                Condition::new(STALLED, ConditionStatus::False, "Progressing", "")
            },
            drifted: None,
            agent_version: None,
            preserved: None,
            objects,
            requeue: Duration::from_secs(60),
            reconciling: false,
            takeover: None,
            launcher_checked: false,
        }
    }

    /// Applied and ready.
    fn ready(message: String, rendered: &Rendered, drifted: Option<Condition>) -> Outcome {
        Outcome {
            ready: Condition::new(READY, ConditionStatus::True, "Reconciled", message),
            stalled: Condition::new(STALLED, ConditionStatus::False, "Reconciled", ""),
            drifted,
            agent_version: Some(rendered.bundle.version().to_string()),
            preserved: Some(rendered.preserved()),
            objects: rendered.objects,
            requeue: Duration::from_secs(600),
            reconciling: false,
            takeover: None,
            launcher_checked: false,
        }
    }
}

/// The agents of one WeaveCloud, rendered.
struct Rendered {
    bundle: ActiveBundle,
    agents: RenderedAgents,
    /// What the takeover could not keep from the launcher's flux.
    dropped: Vec<String>,
    set: DesiredSet,
    objects: usize,
}

impl Rendered {
    /// What was kept from the agents that ran before, for `status.flux`.
    fn preserved(&self) -> FluxStatus {
        FluxStatus {
            preserved_args: self.agents.preserved_flux_args.clone(),
            preserved_memcached_args: self.agents.preserved_memcached_args.clone(),
            dropped: self.dropped.clone(),
        }
    }
}

/// Objects of a change set that were drift (edited or deleted outside Weft), given the
/// inventory of the previous reconcile.
pub(super) fn drifted(changes: &ChangeSet, inventory: &BTreeSet<ObjectRef>) -> Vec<String> {
    changes
        .entries
        .iter()
        .filter(|c| is_drift(c, inventory))
        .map(|c| match &c.reason {
            Some(r) if c.action == ChangeAction::Configured => format!("{} ({r})", c.object),
            _ => format!("{} (deleted)", c.object),
        })
        .collect()
}

fn is_drift(c: &crate::apply::changeset::Change, inventory: &BTreeSet<ObjectRef>) -> bool {
    match c.action {
        ChangeAction::Configured => c
            .reason
            .as_deref()
            // `UpdateReason::Drifted`, as the change set words it.
            .is_some_and(|r| r.starts_with("drifted")),
        ChangeAction::Created => inventory.contains(&c.object),
        _ => false,
    }
}

/// Whether a change set holds changes other than drift.
pub(super) fn has_desired_changes(changes: &ChangeSet, inventory: &BTreeSet<ObjectRef>) -> bool {
    changes.entries.iter().any(|c| match c.action {
        ChangeAction::Configured | ChangeAction::Created => !is_drift(c, inventory),
        ChangeAction::Deleted => true,
        _ => false,
    })
}

/// Whether a pass error only says that objects are not ready yet (the wait's deadline).
fn only_not_ready_yet(e: &PassError) -> bool {
    match e {
        PassError::Apply(ApplyError::WaitTimeout { .. }) => true,
        PassError::Many(all) => !all.is_empty() && all.iter().all(only_not_ready_yet),
        _ => false,
    }
}

/// Render and apply `wc`'s agents; the outcome for its status.
pub(super) async fn reconcile_agents(
    wc: &WeaveCloud,
    ctx: &Context,
    status: &WeaveCloudStatus,
) -> Result<Outcome, WeaveCloudError> {
    let known = status.inventory.len();
    let rendered = match render(wc, ctx).await? {
        Ok(r) => r,
        Err(outcome) => return Ok(outcome),
    };
    let input = PassInput {
        namespace: Some(wc.namespace().unwrap_or_default()),
        // Check readiness, do not sit in a wait: a not-ready agent is re-checked by a requeue.
        timeout: Some(Duration::from_secs(2)),
        ..PassInput::default()
    };
    let inventory: BTreeSet<ObjectRef> = status.inventory.iter().cloned().collect();
    // An object another owner applied is never adopted (a cluster-scoped name, or a second
    // WeaveCloud in the namespace): say whose it is, apply nothing.
    let checked = crate::pass::agents::check_not_owned_by_another(
        ctx.state.client(),
        &owner_of(wc),
        rendered.set.objects(),
        &inventory,
    )
    .await;
    match checked {
        Ok(()) => {}
        Err(source @ AgentsError::Kube { .. }) => {
            return Err(WeaveCloudError::Agents {
                weavecloud: reference(wc),
                source,
            })
        }
        Err(e) => {
            tracing::warn!(weavecloud = %reference(wc), error = %e, "not applied");
            return Ok(Outcome::not_ready(
                OWNED_BY_ANOTHER,
                e.to_string(),
                true,
                known,
            ));
        }
    }
    let taken = take_over(wc, ctx, rendered.set.objects(), &rendered.preserved()).await?;
    let mut rendered = rendered;
    if let Some((t, _)) = &taken {
        if !wc.spec.general.takeover && !t.left.is_empty() {
            // Leave the launcher's objects as they are: do not apply Weft's same-named ones over them.
            let keep: Vec<DesiredObject> = rendered
                .set
                .objects()
                .iter()
                .filter(|d| !t.left.contains(&takeover::desired_reference(d)))
                .cloned()
                .collect();
            rendered.objects = keep.len();
            rendered.set = DesiredSet::for_owners(keep, [owner_of(wc)].into());
        }
    }
    let mut outcome = apply_or_report(wc, ctx, rendered, &input, &inventory, status, known).await?;
    outcome.takeover = taken;
    outcome.launcher_checked = true;
    Ok(outcome)
}

/// The launcher's objects next to these agents: with `takeover` (the default) remove those Weft
/// replaces, one event each; without it, list them and say that agents may run twice.
async fn take_over(
    wc: &WeaveCloud,
    ctx: &Context,
    desired: &[DesiredObject],
    preserved: &FluxStatus,
) -> Result<Option<(Takeover, Condition)>, WeaveCloudError> {
    let ns = wc.namespace().unwrap_or_default();
    let client = ctx.state.client();
    let kube = |source| WeaveCloudError::Kube {
        weavecloud: reference(wc),
        action: "taking over the launcher's objects",
        source,
    };
    let legacy = takeover::designated(
        ctx.settings.launcher_takeover.as_deref(),
        &ns,
        &wc.name_any(),
    );
    let found = takeover::find(client, &ns, desired, legacy)
        .await
        .map_err(kube)?;
    let mut result = Takeover::default();
    if !wc.spec.general.takeover {
        if found.is_empty() {
            return Ok(None);
        }
        result.left = found.iter().map(Found::reference).collect();
        let message = format!(
            "spec.general.takeover is false: the launcher's objects are left in place, so its agents may run beside Weft's (two flux, two node exporters on port 9100, two prometheus): {}",
            result.left.join(", ")
        );
        let known = wc.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == LAUNCHER_OBJECTS && c.message == message)
        });
        if !known {
            event(
                ctx,
                wc,
                EventType::Warning,
                TAKEOVER_DISABLED,
                message.clone(),
            )
            .await;
        }
        let c = Condition::new(
            LAUNCHER_OBJECTS,
            ConditionStatus::True,
            TAKEOVER_DISABLED,
            message,
        );
        return Ok(Some((result, c)));
    }
    let copied = takeover::carry_deploy_key(client, &ns, &found)
        .await
        .map_err(kube)?;
    if copied {
        let note = format!(
            "copied the flux deploy key from Secret {}/flux-git-deploy into {ns}/flux-git-deploy (the original is kept)",
            crate::pass::agents::LAUNCHER_LEGACY_NAMESPACE
        );
        event(ctx, wc, EventType::Normal, "DeployKeyCopied", note).await;
    }
    if found.is_empty() {
        return Ok(None);
    }
    // Record what is kept from the launcher's agents before removing them: if this reconcile
    // stops before Weft's agents run, the next one renders them from this record
    // (`pass::agents::inputs`).
    if *preserved != FluxStatus::default() {
        let api: Api<WeaveCloud> = Api::namespaced(client.clone(), &ns);
        api.patch_status(
            &wc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"status": {"flux": preserved}})),
        )
        .await
        .map_err(kube)?;
    }
    // The launcher's flux settings, recorded where they outlive this WeaveCloud; the user is
    // told what was kept, what was not, and what to commit.
    let weft_namespace = &ctx.settings.weft_namespace;
    if let Some(r) = takeover::record::keep(client, weft_namespace, wc, &found, legacy)
        .await
        .map_err(kube)?
    {
        let note = bounded_note(&takeover::record::notice(&r, weft_namespace, wc));
        let type_ = if r.dropped.is_empty() {
            EventType::Normal
        } else {
            EventType::Warning
        };
        event(ctx, wc, type_, "TakeoverPreserved", note).await;
    }
    for (object, why) in takeover::remove_all(client, &found).await.map_err(kube)? {
        let related = found
            .iter()
            .find(|f| f.reference() == object)
            .map(Found::object_reference);
        event_about(
            ctx,
            wc,
            EventType::Normal,
            "LauncherObjectRemoved",
            format!("deleted {object}: {why}"),
            related,
        )
        .await;
        result.removed.push(object);
    }
    result.adopted = found
        .iter()
        .filter(|f| f.action == Decision::Adopt)
        .map(Found::reference)
        .collect();
    if !result.adopted.is_empty() {
        let note = format!("adopting the launcher's {}", result.adopted.join(", "));
        event(ctx, wc, EventType::Normal, "LauncherObjectAdopted", note).await;
    }
    let message = format!(
        "removed {} launcher objects, adopted {}",
        result.removed.len(),
        result.adopted.len()
    );
    let c = Condition::new(
        LAUNCHER_OBJECTS,
        ConditionStatus::False,
        super::TAKEN_OVER,
        message,
    );
    Ok(Some((result, c)))
}

/// An event note fits the API server's 1 kB: longer text is cut at a character boundary, and
/// says where the rest is.
fn bounded_note(note: &str) -> String {
    const MAX: usize = 1000;
    if note.len() <= MAX {
        return note.to_string();
    }
    let mut end = MAX - 60;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (the rest: the record's commit.yaml)", &note[..end])
}

/// `driftPolicy: report` (plan, maybe apply) or apply.
async fn apply_or_report(
    wc: &WeaveCloud,
    ctx: &Context,
    rendered: Rendered,
    input: &PassInput,
    inventory: &BTreeSet<ObjectRef>,
    status: &WeaveCloudStatus,
    known: usize,
) -> Result<Outcome, WeaveCloudError> {
    let mut drift_condition = None;
    if wc.spec.drift_policy == DriftPolicy::Report {
        match report_only(wc, ctx, &rendered, input, inventory, status).await? {
            ReportOnly::InSync(outcome) => return Ok(*outcome),
            ReportOnly::Failed(message) => {
                return Ok(Outcome::not_ready("ReconcileFailed", message, false, known))
            }
            ReportOnly::Changed => {
                drift_condition = Some(Condition::new(
                    DRIFTED,
                    ConditionStatus::False,
                    "InSync",
                    "",
                ))
            }
        }
    }
    apply_agents(wc, ctx, rendered, input, inventory, drift_condition, known).await
}

/// Gather the inputs and render; `Ok(Err(outcome))` when the agents cannot be rendered (the
/// outcome says why: a missing token, an unusable bundle, a render error).
async fn render(
    wc: &WeaveCloud,
    ctx: &Context,
) -> Result<Result<Rendered, Outcome>, WeaveCloudError> {
    let known = wc.status.as_ref().map_or(0, |s| s.inventory.len());
    let not_ready = |reason: &str, e: &dyn std::fmt::Display, stalled| {
        Ok(Err(Outcome::not_ready(
            reason,
            e.to_string(),
            stalled,
            known,
        )))
    };
    let legacy = takeover::designated(
        ctx.settings.launcher_takeover.as_deref(),
        &wc.namespace().unwrap_or_default(),
        &wc.name_any(),
    );
    let gathered =
        crate::pass::agents::gather(ctx.state.client(), ctx.state.bundles(), wc, legacy).await;
    let sources = match gathered {
        Ok(s) => s,
        Err(e @ AgentsError::TokenMissing { .. }) => {
            tracing::warn!(weavecloud = %reference(wc), secret = %wc.spec.general.token_secret_ref.name, "token Secret missing");
            return not_ready(TOKEN_MISSING, &e, true);
        }
        Err(source @ AgentsError::Kube { .. }) => {
            return Err(WeaveCloudError::Agents {
                weavecloud: reference(wc),
                source,
            });
        }
        Err(e @ AgentsError::LauncherInKubeSystem { .. }) => {
            return not_ready("LauncherInKubeSystem", &e, true);
        }
        Err(e @ AgentsError::TakeoverWouldDrop { .. }) => {
            return not_ready("TakeoverRefused", &e, true);
        }
        Err(e) => return not_ready("BundleUnavailable", &e, false),
    };
    let mut agents = match render_agents(wc, &sources.bundle.bundle, &sources.inputs) {
        Ok(r) => r,
        Err(e) => return not_ready("RenderFailed", &e, true),
    };
    // Flux args taken over from an agent Weft did not install: say so, once.
    if let Some((_, false)) = &sources.running_flux {
        if !agents.preserved_flux_args.is_empty() {
            event(
                ctx,
                wc,
                EventType::Normal,
                "FluxArgsPreserved",
                format!(
                    "kept the running flux agent's arguments that spec.flux.config leaves unset: {}",
                    agents.preserved_flux_args.join(" ")
                ),
            )
            .await;
        }
    }
    let objects = agents.objects.len();
    let set = DesiredSet::for_owners(std::mem::take(&mut agents.objects), [owner_of(wc)].into());
    Ok(Ok(Rendered {
        bundle: sources.bundle,
        agents,
        dropped: sources.dropped,
        set,
        objects,
    }))
}

/// The result of the dry run of `driftPolicy: report`.
enum ReportOnly {
    /// Nothing but drift (reported, not corrected): this is the outcome.
    InSync(Box<Outcome>),
    /// The plan itself failed.
    Failed(String),
    /// The spec asks for changes: apply them.
    Changed,
}

/// `driftPolicy: report`: plan without writing; when the only differences are drift, report
/// them (condition `Drifted`, an event on a new finding) and change nothing.
async fn report_only(
    wc: &WeaveCloud,
    ctx: &Context,
    rendered: &Rendered,
    input: &PassInput,
    inventory: &BTreeSet<ObjectRef>,
    status: &WeaveCloudStatus,
) -> Result<ReportOnly, WeaveCloudError> {
    let plan = PassInput {
        dry_run: true,
        namespace: input.namespace.clone(),
        timeout: input.timeout,
        ..PassInput::default()
    };
    let changes = match engine(ctx, &rendered.set, &plan).await? {
        (_, Some(e)) => return Ok(ReportOnly::Failed(e.to_string())),
        (changes, None) => changes,
    };
    if has_desired_changes(&changes, inventory) {
        return Ok(ReportOnly::Changed);
    }
    let drift = drifted(&changes, inventory);
    let drifted_cond = if drift.is_empty() {
        Condition::new(DRIFTED, ConditionStatus::False, "InSync", "")
    } else {
        let message = format!(
            "changed outside Weft (driftPolicy: report, not corrected): {}",
            drift.join(", ")
        );
        let known = status.conditions.iter().any(|c| {
            c.type_ == DRIFTED && c.status == ConditionStatus::True && c.message == message
        });
        if !known {
            event(ctx, wc, EventType::Warning, "Drifted", message.clone()).await;
        }
        Condition::new(DRIFTED, ConditionStatus::True, "Drifted", message)
    };
    let message = format!(
        "{} agent objects, bundle {}",
        rendered.objects,
        rendered.bundle.version()
    );
    Ok(ReportOnly::InSync(Box::new(Outcome::ready(
        message,
        rendered,
        Some(drifted_cond),
    ))))
}

/// Apply, prune and check the agents; drift that was corrected gets an event.
async fn apply_agents(
    wc: &WeaveCloud,
    ctx: &Context,
    rendered: Rendered,
    input: &PassInput,
    inventory: &BTreeSet<ObjectRef>,
    drift_condition: Option<Condition>,
    known: usize,
) -> Result<Outcome, WeaveCloudError> {
    let (changes, error) = engine(ctx, &rendered.set, input).await?;
    let s = changes.summary();
    ctx.state.metrics().count_objects(
        (s.created + s.configured) as u64,
        s.deleted as u64,
        s.unchanged as u64,
    );
    let corrected = drifted(&changes, inventory);
    if !corrected.is_empty() {
        let note = format!("restored: {}", corrected.join(", "));
        event(ctx, wc, EventType::Normal, "DriftCorrected", note).await;
    }
    if s.created + s.configured + s.deleted > 0 {
        tracing::info!(weavecloud = %reference(wc), "{s}");
    }
    match error {
        None => {
            let message = format!(
                "{} agent objects applied and ready, bundle {}",
                rendered.objects,
                rendered.bundle.version()
            );
            Ok(Outcome::ready(message, &rendered, drift_condition))
        }
        Some(e) if only_not_ready_yet(&e) => {
            // Applied; the agents are still rolling out. Look again shortly instead of blocking
            // this WeaveCloud's reconciles (drift, token changes) in a long wait.
            let message = format!("agents applied, waiting for them to become ready: {e}");
            let mut o = Outcome::not_ready("Progressing", message, false, rendered.objects);
            o.agent_version = Some(rendered.bundle.version().to_string());
            o.preserved = Some(rendered.preserved());
            o.drifted = drift_condition;
            o.requeue = Duration::from_secs(5);
            o.reconciling = true;
            Ok(o)
        }
        Some(e) => {
            tracing::warn!(weavecloud = %reference(wc), error = %e, "applying the agents failed");
            Ok(Outcome::not_ready(
                "ReconcileFailed",
                e.to_string(),
                false,
                known,
            ))
        }
    }
}

/// Run the apply engine for the agents; `Err` only when the daemon stopped meanwhile.
pub(super) async fn engine(
    ctx: &Context,
    set: &DesiredSet,
    input: &PassInput,
) -> Result<(ChangeSet, Option<PassError>), WeaveCloudError> {
    let run = crate::daemon::run_engine(
        ctx.state.client(),
        set,
        &ctx.settings,
        input,
        &|_| {},
        &ctx.shutdown,
    );
    match run.await {
        EngineRun::Finished(changes, error) => Ok((changes, error)),
        EngineRun::Abandoned => Err(WeaveCloudError::Abandoned),
    }
}

/// `namespace/name` of a WeaveCloud, for logs.
pub(super) fn reference(wc: &WeaveCloud) -> String {
    format!("{}/{}", wc.namespace().unwrap_or_default(), wc.name_any())
}
