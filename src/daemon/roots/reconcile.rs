//! One reconcile of a root: decide whether it may and should pass now (the flag root, suspend,
//! its identity, its source, `dependsOn`, whether a pass is due), then the pass — fetch its
//! repository ([`super::source`]: one git cache per root), `pass::run_pass` with settings from
//! its spec and its identity's client — and the status that says what happened.

use std::sync::Arc;
use std::time::Instant;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use super::ahead;
use super::answer::{self, Changes};
use super::asked::{listed_since, requested_at, Asked, Why};
use super::brought;
use super::conflict::CONFLICT;
use super::depends::{self, key_of};
use super::identity::{self, identity_of, Identity};
use super::lease::HeldRoot;
use super::repository::Fetched;
use super::settings::root_settings;
use super::shard;
use super::source::open_source;
use super::status::{self, Failure, PassOutcome, Verdict};
use super::{Context, RootsError, DEPENDENCY_RETRY};
use crate::api::redact::redact_url_passwords;
use crate::api::root::{InventoryCounts, PassSummary, Root};
use crate::api::ResourceKey;
use crate::apply::changeset::Action as ChangeAction;
use crate::pass::{PassInput, PassSettings, Progress};
use crate::render::Owner;

/// Reconcile one root (kube-runtime never runs two at once for one root).
pub async fn reconcile(root: Arc<Root>, ctx: Arc<Context>) -> Result<Action, RootsError> {
    let key = key_of(&root);
    if !ctx.state.watch_namespaces().contains(&key.namespace) {
        return Ok(Action::await_change());
    }
    if root.metadata.deletion_timestamp.is_some() {
        ctx.forget(&key);
        if key != ctx.flag_root {
            ctx.state.metrics().resources().forget(
                crate::daemon::metrics::ROOT_KIND,
                &key.namespace,
                &key.name,
            );
        }
        return Ok(Action::await_change());
    }
    // Another replica's root (see `lease`): untouched here until this replica takes its Lease,
    // which reconciles it at once. Held: its status, events and pass are written behind its
    // own fence, and it is not given back in the middle of this reconcile.
    let Some((held, _busy)) = ctx.held(&key) else {
        // Nothing of it is kept here meanwhile: a replica that takes it (again) passes it from
        // the start, and writes that pass into its status (see `first_here`).
        ctx.forget(&key);
        return Ok(Action::await_change());
    };
    // The sharded flag root's status is shard 0's to write (see `shard`).
    let writes = !ctx.flag_sharded(&key) || shard::writes_status(&ctx.state);
    let record = |verdict: Verdict| {
        let (ctx, root, held) = (ctx.clone(), root.clone(), held.clone());
        async move {
            match writes {
                true => status::record(&ctx.state, &held, &root, &verdict)
                    .await
                    .map(|_| ()),
                false => Ok(()),
            }
        }
    };
    // The flag root's Root answers a waiting request with why nothing ran.
    let not_run = |suspended: bool, message: &str| {
        if key == ctx.flag_root {
            answer::not_run(&ctx.state, suspended, message);
        }
    };
    if root.spec.suspend {
        let why = crate::api::suspend::message(&root.metadata);
        if key == ctx.flag_root {
            answer::suspended(&ctx.state, why);
        }
        not_run(true, &crate::api::suspend::root_refusal(why));
        tracing::debug!(root = %key, "the root is suspended; nothing was fetched, applied or pruned");
        record(Verdict::Suspended).await?;
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    if key == ctx.flag_root {
        answer::not_suspended(&ctx.state);
    }
    if let Some(refusal) = refusal(&root, &key, &ctx) {
        if let Verdict::Stalled { message, .. } = &refusal {
            not_run(false, message);
        }
        record(refusal).await?;
        return Ok(Action::await_change());
    }
    let identity = match identity_of(
        &root,
        &key.namespace,
        &ctx.settings.weft_namespace,
        ctx.config.default_service_account.as_deref(),
    ) {
        Ok(identity) => identity,
        Err(refused) => {
            not_run(false, &refused.message);
            record(Verdict::Stalled {
                reason: refused.reason.to_string(),
                message: refused.message,
            })
            .await?;
            return Ok(Action::await_change());
        }
    };
    let store = ctx.store.as_ref();
    let lookup = |k: &ResourceKey| {
        store.and_then(|s| s.get(&ObjectRef::<Root>::new(&k.name).within(&k.namespace)))
    };
    if let Err(refused) = declared_within(&root, &key, &identity, &ctx, &lookup).await {
        not_run(false, &refused.message);
        record(Verdict::Stalled {
            reason: refused.reason.to_string(),
            message: refused.message,
        })
        .await?;
        return Ok(Action::await_change());
    }
    if let Some((dependency, why)) = depends::waiting_for(&root, lookup) {
        let message = format!(
            "waiting for root {}: it {why}",
            depends::name_in(&dependency, &key.namespace)
        );
        not_run(false, &message);
        record(Verdict::Waiting { message }).await?;
        return Ok(Action::requeue(DEPENDENCY_RETRY));
    }

    let before = root.status.clone().unwrap_or_default();
    // The request this pass answers: a `weft.io/requested-at` value not answered yet. One
    // already answered is no request: the pass stays quiet, and writes nothing when it changes
    // nothing (every pass of a Root once requested wrote its status before).
    let requested = requested_at(&root)
        .filter(|r| before.last_handled_requested_at.as_deref() != Some(r.as_str()));
    let mut reasons = Vec::new();
    if requested.is_some() {
        reasons.push("requested".to_string());
    }
    if before.observed_generation != root.metadata.generation {
        reasons.push("spec".to_string());
    }
    let (pushed, pushed_at) = ctx.state.root_pushes().take_timed(&key);
    reasons.extend(pushed.iter().cloned());
    // The first pass after a suspension says so, however the root was resumed.
    let was_suspended = before
        .conditions
        .iter()
        .any(|c| c.type_ == crate::api::conditions::RECONCILING && c.reason == status::SUSPENDED);
    if was_suspended && !reasons.iter().any(|r| r == "resumed") {
        reasons.push("resumed".to_string());
    }
    let was_waiting = status::ready_of(&before)
        // `FlagRoot`: a Ready reason an older Weft wrote on the flag root's Root.
        .is_some_and(|c| c.reason == status::DEPENDENCY_NOT_READY || c.reason == status::FLAG_ROOT);
    match ctx.remaining(&key) {
        None => reasons.push("poll".to_string()),
        Some(_) if was_waiting => reasons.push("dependencies".to_string()),
        Some(wait) if reasons.is_empty() => return Ok(Action::requeue(wait)),
        Some(_) => {}
    }

    let mut since = listed_since(&reasons, &pushed, pushed_at, || {
        ctx.seen.since(&key, requested.as_deref()?)
    });
    let interval = root.spec.interval();
    // Numbered as the pass starts: it answers the requests made before (see `answer`), with
    // the reasons they gave since the ones taken above.
    let number = match key == ctx.flag_root {
        true => {
            let (number, late) = ctx.state.root_pushes().start_flag_pass(&key);
            if !late.is_empty() {
                // Asked for just now: listed as of the pass's start.
                since = None;
            }
            for why in late {
                if !reasons.contains(&why) {
                    reasons.push(why);
                }
            }
            Some(number)
        }
        false => None,
    };
    let why = Why {
        reasons,
        requested,
        since,
    };
    let (outcome, changes) = pass(&root, &key, &identity, &held, &ctx, why).await;
    let failure = outcome.failure.clone();
    let answered = changes.map(|c| (outcome.clone(), c));
    let recorded = record(Verdict::Passed(Box::new(outcome))).await;
    // Answered even when its status cannot be written (the API server that cut the pass off is
    // still down): the daemon's status and a waiting request show the pass failed, as the flag
    // loop's did, rather than nothing until a later pass.
    if let (Some((outcome, changes)), Some(number)) = (answered, number) {
        answer::passed(&ctx.state, number, &outcome, changes);
    }
    recorded?;
    match failure {
        None => {
            ctx.succeeded(&key, interval);
            Ok(Action::requeue(interval))
        }
        Some(f) => {
            ctx.failed(&key, interval);
            Err(RootsError::Pass {
                root: key.to_string(),
                message: f.message,
            })
        }
    }
}

/// What makes a root unable to run until its spec (or the cluster) changes: a `dependsOn`
/// cycle, a semver ref, a source that is not a git URL.
fn refusal(root: &Root, key: &ResourceKey, ctx: &Context) -> Option<Verdict> {
    let stalled = |reason: &str, message: String| Verdict::Stalled {
        reason: reason.to_string(),
        message,
    };
    if let Some(store) = &ctx.store {
        let roots = store.state();
        let edges = depends::edges(roots.iter().map(|r| r.as_ref()));
        if let Some(cycle) = depends::cycle_through(key, &edges) {
            let path = depends::describe_cycle(&cycle, &key.namespace);
            return Some(stalled(
                status::DEPENDENCY_CYCLE,
                format!("dependsOn forms a cycle: {path}; remove one of these dependencies"),
            ));
        }
    }
    // --no-cross-namespace-refs: a tenant's root waits on no other tenant's.
    if !ctx.config.cross_namespace_refs {
        let elsewhere: Vec<String> = root
            .spec
            .depends_on
            .iter()
            .filter(|d| d.namespace.as_deref().is_some_and(|ns| ns != key.namespace))
            .map(|d| format!("{}/{}", d.namespace.as_deref().unwrap_or_default(), d.name))
            .collect();
        if !elsewhere.is_empty() {
            return Some(stalled(
                "CrossNamespaceRef",
                format!(
                    "dependsOn names a root of another namespace ({}), which this Weft refuses (--no-cross-namespace-refs); depend on roots of {} only",
                    elsewhere.join(", "),
                    key.namespace
                ),
            ));
        }
    }
    let source = &root.spec.source;
    if let Some(range) = source.git_ref.as_ref().and_then(|r| r.semver.as_deref()) {
        if let Err(e) = crate::api::root::parse_semver_range(range) {
            return Some(stalled(
                "InvalidSemver",
                format!("spec.source.ref.semver `{range}` is not a semver range ({e}): write it as `>=1.2.0 <2.0.0`, `~1.2` or `1.x`"),
            ));
        }
    }
    let url = source.url.as_str();
    // A root's repository is a remote one: a path on Weft's own disk is not a tenant's to name.
    let local = !url.contains("://") || url.starts_with("file://");
    if local && key.namespace != ctx.settings.weft_namespace {
        return Some(stalled(
            "InvalidSource",
            format!(
                "spec.source.url `{}` is not a remote git URL (https://, ssh://, git://); only roots in Weft's namespace may name a local repository",
                redact_url_passwords(url)
            ),
        ));
    }
    None
}

/// A root another root's pass applied (its owner label and reference name that root) acts as
/// that root's identity at most ([`identity::within_parent`]). The claim is believed without
/// proof because it can only take rights away: a root made by hand, without it, is its
/// creator's, whom the API server let create a Root in that namespace.
async fn declared_within(
    root: &Root,
    key: &ResourceKey,
    identity: &Identity,
    ctx: &Context,
    lookup: impl Fn(&ResourceKey) -> Option<Arc<Root>>,
) -> Result<(), identity::Refused> {
    let Some(parent) = Owner::claimed_by(root.labels(), root.annotations()).filter(Owner::is_root)
    else {
        return Ok(());
    };
    let parent = ResourceKey {
        namespace: parent.namespace.to_string(),
        name: parent.name.to_string(),
    };
    let parent_identity = if parent == ctx.flag_root {
        Some(Identity::Weft)
    } else {
        let found = match lookup(&parent) {
            Some(p) => Some(p),
            // Not in the controller's store (a root of a namespace it does not watch): asked.
            None => Api::<Root>::namespaced(ctx.state.client().clone(), &parent.namespace)
                .get_opt(&parent.name)
                .await
                .ok()
                .flatten()
                .map(Arc::new),
        };
        match found {
            Some(p) => identity_of(
                &p,
                &parent.namespace,
                &ctx.settings.weft_namespace,
                ctx.config.default_service_account.as_deref(),
            )
            .ok(),
            // No Root object in Weft's namespace: the operator's `weft sync` or a shard of the
            // flag root, which act as Weft.
            None if parent.namespace == ctx.settings.weft_namespace => Some(Identity::Weft),
            None => None,
        }
    };
    identity::within_parent(key, identity, &parent, parent_identity.as_ref())
}

/// Why a pass stopped before `run_pass`, as its `Ready` reason and message.
pub(super) fn failure(reason: &str, message: impl Into<String>) -> Failure {
    Failure::new(reason, redact_url_passwords(&message.into()))
}

/// One pass of `root` as `identity`: fetch, then `run_pass`.
async fn pass(
    root: &Root,
    key: &ResourceKey,
    identity: &Identity,
    held: &HeldRoot,
    ctx: &Context,
    why: Why,
) -> (PassOutcome, Option<Changes>) {
    let Why {
        reasons,
        requested,
        since,
    } = why;
    let started_at = crate::daemon::status::now_rfc3339();
    // No pass of this root here yet (since start, the Lease's taking or a suspension): its
    // status says who passes it now even when nothing changed.
    let first_here = ctx.with_memory(key, |m| m.due.is_none());
    let start = Instant::now();
    tracing::info!(root = %key, reasons = %reasons.join(","), identity = %identity, "root pass started");
    let mut notified = Notified {
        source: crate::notify::EventSource::root(&key.namespace, &key.name),
        new_revision: false,
        changes: Vec::new(),
    };
    // `POST /api/v1/sync?forcePrune=true` (the flag root's requests only): this pass alone may
    // prune past the fraction guard — never a root whose spec says not to prune at all.
    let force_prune = *key == ctx.flag_root
        && root.spec.prune()
        && reasons
            .iter()
            .any(|r| r == super::pushes::FORCE_PRUNE_REASON);
    let since = since.unwrap_or(start);
    let asked = Asked { force_prune, since };
    let body = pass_body(root, key, identity, held, ctx, asked, &mut notified).await;
    // What the pass allocated (a render, its plan, pages of listed metadata) is freed by now:
    // hand the free pages back, as the flag loop does after each pass (src/mem.rs).
    crate::mem::release_free_memory();
    let (failure, revision, inventory, changed, conflicts, changes) = match body {
        Ok(done) => done,
        Err(f) => {
            let none = (key == &ctx.flag_root).then(Changes::default);
            (Some(f), None, None, 0, Vec::new(), none)
        }
    };
    // The pass's notifications (`notify::root`), as the flag loop sent them: the root's `Ready`
    // events of a pass are not offered to the notifier (see `status::record`).
    let changed_objects = PassSummary::bounded_changes(&notified.changes);
    let finished = crate::notify::root::PassOutcome {
        revision: revision.clone(),
        new_revision: notified.new_revision,
        error: failure.as_ref().map(|f| f.message.as_str()),
        abandoned: failure.as_ref().is_some_and(|f| f.reason == "Abandoned"),
        changes: notified.changes,
    };
    held.events
        .notifier()
        .emit_all(crate::notify::root::finished(&notified.source, &finished));
    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let next = k8s_openapi::jiff::Timestamp::now()
        .saturating_add(root.spec.interval())
        .unwrap_or(k8s_openapi::jiff::Timestamp::MAX);
    match &failure {
        None => {
            tracing::info!(root = %key, revision = revision.as_deref().unwrap_or("-"), changed, duration_ms, "root pass succeeded")
        }
        Some(f) => {
            let object = f.object.as_ref().map(tracing::field::display);
            tracing::warn!(root = %key, reason = %f.reason, object, error = %f.message, "root pass failed")
        }
    }
    let outcome = PassOutcome {
        summary: PassSummary {
            reasons,
            started_at,
            duration_ms,
            result: if failure.is_none() {
                "Succeeded"
            } else {
                "Failed"
            }
            .to_string(),
            revision: revision.clone(),
            changes: changed_objects,
        },
        failure,
        revision,
        inventory,
        changed,
        requested_at: requested,
        next_poll_at: format!("{next:.0}"),
        conflicts,
        first_here,
    };
    (outcome, changes)
}

/// What the notifications of a pass need from its body: the root as they name it (a shard of
/// the flag root by its shard's root name), whether it fetched a new revision, and
/// `Kind/namespace/name action` of every object it changed.
struct Notified {
    source: crate::notify::EventSource,
    new_revision: bool,
    changes: Vec<String>,
}

type Body = (
    Option<Failure>,
    Option<String>,
    Option<InventoryCounts>,
    usize,
    Vec<(String, String)>,
    // The changes as a report shows them: the flag root's only (see `answer`).
    Option<Changes>,
);

async fn pass_body(
    root: &Root,
    key: &ResourceKey,
    identity: &Identity,
    held: &HeldRoot,
    ctx: &Context,
    asked: Asked,
    notified: &mut Notified,
) -> Result<Body, Failure> {
    let Asked { force_prune, since } = asked;
    let client = held
        .impersonation
        .client(identity, &held.client)
        .map_err(|e| failure("IdentityFailed", e.to_string()))?;
    let flag = *key == ctx.flag_root;
    let sharded = ctx.flag_sharded(key);
    // The previous render is let go before the new one is built: only a moved head with an
    // early apply (`ahead`) reads it.
    let mut previous = ctx.with_memory(key, |m| m.rendered.take());
    let (source, last) = open_source(root, key, &client, ctx).await?;
    let mut settings = settings_of(root, key, identity, &client, ctx);
    // The same revision and Root (its spec, and the default namespace its annotation may
    // name): a self-contained render is applied again, not made again (its files are not even
    // read: an unchanged head is not read from the cache, 1,000 files at 100,000 objects).
    // Otherwise it is not kept through the pass: it would hold a second render beside the one
    // the pass makes.
    let reusable = |r: &super::Rendered| {
        !sharded
            && r.generation == root.metadata.generation
            && r.default_namespace == settings.default_namespace
            && r.set.is_self_contained()
    };
    let keeps_render = previous.as_ref().is_some_and(reusable);
    let fetched = source.fetch(last.as_ref(), since, keeps_render).await;
    if flag {
        // The daemon's `SourceReady` condition (its status, and `/readyz` while false), as the
        // flag loop keeps it: the Root's own conditions say it to `kubectl`, not to probes.
        let condition = super::repository::source_condition(fetched.as_ref().err());
        let now = crate::daemon::status::now_rfc3339();
        ctx.state.update_status(|s| {
            crate::api::conditions::set_condition(&mut s.conditions, condition, &now)
        });
    }
    let Fetched {
        snapshot,
        new: fetched_new,
    } = fetched.map_err(|e| failure("FetchFailed", e.to_string()))?;
    // The early apply takes the files changed since the last snapshot. Not for a
    // shard: its previous render is its part only (the flag loop's early apply weighs every
    // shard's part).
    let mut ahead = None;
    if fetched_new && flag && !sharded {
        if let (Some(last), Some(rendered)) = (last, previous.take()) {
            ahead = source
                .changes(&last, &snapshot)
                .await
                .map(|files| (files, rendered.set));
        }
    }
    let reused = previous.take().filter(|r| !fetched_new && reusable(r));
    ctx.with_memory(key, |m| m.last = Some(source.remember(&snapshot)));
    let revision = snapshot.revision.clone().or(Some("local".into()));
    // The flag root's Root leaves the WeaveClouds' agents (and the launcher's takeover) to the
    // WeaveCloud controller, as the root loop did.
    let mut input = PassInput {
        without_takeover: *identity != Identity::Weft,
        agents_excluded: flag,
        force_prune,
        rendered: reused.map(|r| (r.set, r.diagnostics)),
        ..PassInput::default()
    };
    if sharded {
        let Some(part) = shard::part(&ctx.state).await else {
            return Err(failure(
                "Abandoned",
                "this replica no longer holds a shard of the root; the pass was abandoned before apply",
            ));
        };
        settings.root_name = part.root_name;
        input.split = Some(part.shard);
        input.shard = Some(part.pass);
        // The notifications name a shard by its shard root, as the flag loop's did.
        notified.source = crate::notify::EventSource::root(&key.namespace, &settings.root_name);
    }
    if fetched_new {
        notified.new_revision = true;
        let started = crate::notify::root::started(&notified.source, snapshot.revision.as_deref());
        held.events.notifier().emit(started);
    }
    // A push's changed objects first, by the same rules as the flag loop's (`daemon::early`).
    let early = match ahead {
        Some((last, rendered)) => {
            ahead::apply(&client, last, &rendered, &snapshot, &settings).await
        }
        None => Vec::new(),
    };
    // Charts whose objects this pass changes are marked `deploying` as it goes (with Weft's
    // own client: a status is the controller's, whoever the pass acts as).
    let deploying = crate::daemon::armada::status::DeployingMarks::default();
    // A long wait says what it waits for, as the flag loop's passes did (see `waiting`).
    let waits = super::waiting::WaitLog::of_root(key);
    let observer = |p: Progress<'_>| match p {
        Progress::Phase { message, objects } => {
            waits.phase(&message);
            tracing::debug!(root = %key, objects, "{message}")
        }
        Progress::Change(c) if c.action != ChangeAction::Unchanged => {
            tracing::info!(root = %key, object = %c.object, action = c.action.done(), "object changed");
            deploying.mark(&held.client, &c.owner);
        }
        Progress::Change(_) => {}
        Progress::Ready(r) => tracing::debug!(root = %key, object = %r, "ready"),
        Progress::Waiting(still) => waits.waiting(still),
    };
    if ctx.shutdown.is_stopping() {
        return Err(failure(
            "Abandoned",
            "the daemon is stopping; the pass was abandoned before apply",
        ));
    }
    if *identity != Identity::Weft && root.status.as_ref().is_none_or(|s| s.passes.is_empty()) {
        seed_inventory(&client, key).await?;
    }
    // A stop request gives the running pass the shutdown grace, then abandons it (as a pod's
    // termination grace would cut it anyway), so the daemon exits in time.
    let result = tokio::select! {
        // The snapshot is the pass's to let go once rendered: nothing else holds its files.
        result = crate::pass::run_pass(
            &client,
            snapshot,
            &settings,
            &input,
            &observer,
        ) => result,
        () = ctx.shutdown.abandoned() => {
            deploying.written().await;
            return Err(failure(
                "Abandoned",
                format!(
                    "the daemon is stopping; the pass was abandoned after {}s of grace",
                    ctx.shutdown.grace().as_secs()
                ),
            ));
        }
    };
    deploying.written().await;
    if let Some(set) = result.set.as_ref() {
        charts(ctx, held, flag, set, &result).await;
        // The flag root's WeaveClouds are their controller's to report.
        if !flag {
            let label = revision.as_deref().unwrap_or("local");
            let verdicts = brought::verdicts(set, result.error.as_ref(), key, identity, label);
            brought::report(&ctx.state, verdicts).await;
        }
    }
    let changed = result
        .changes
        .entries
        .iter()
        .filter(|c| c.action != ChangeAction::Unchanged && c.action != ChangeAction::Skipped)
        .count();
    let inventory = result.set.as_deref().map(status::inventory_counts);
    // Held elsewhere (in the error: not applied) and held here (applied, claimed by another).
    let conflicts: Vec<(String, String)> = super::conflict::of_pass(&result);
    let failed = result.error.as_ref().map(|e| {
        let reason = if e.conflicts().is_empty() {
            status::FAILED
        } else {
            CONFLICT
        };
        failure(reason, e.to_string()).about(e.object())
    });
    let counted = ahead::count(answer::changes_of(&result.changes), &early);
    notified.changes = counted
        .1
        .iter()
        .map(|c| format!("{} {}", c.object, c.action))
        .collect();
    let changes = flag.then_some(counted);
    let changed = changed + early.len();
    // Kept for the next pass of the same revision: every root's self-contained render (a no-op
    // pass then reads and renders nothing), and the flag root's whatever it holds (its early
    // apply of a push compares the next render with it).
    if !sharded {
        let rendered = result
            .set
            .clone()
            .filter(|set| flag || set.is_self_contained())
            .map(|set| super::Rendered {
                set,
                diagnostics: result.diagnostics.clone(),
                generation: root.metadata.generation,
                default_namespace: settings.default_namespace.clone(),
            });
        ctx.with_memory(key, |m| m.rendered = rendered);
    }
    Ok((failed, revision, inventory, changed, conflicts, changes))
}

/// The Armada charts' (and their groups' and manifests') phases and conditions from this pass,
/// held charts marked `Suspended`, as the flag loop wrote them; for the flag root, the daemon's
/// status and resource gauges too.
async fn charts(
    ctx: &Context,
    held: &HeldRoot,
    flag: bool,
    set: &crate::render::DesiredSet,
    result: &crate::pass::PassResult,
) {
    use crate::daemon::armada::status as armada_status;
    let phases = armada_status::record_suspended(&held.client, &result.held).await;
    let reported = armada_status::record_pass(
        &held.client,
        &held.events,
        set,
        &result.changes,
        result.error.as_ref(),
        &phases,
    )
    .await;
    if !flag {
        return;
    }
    ctx.state.metrics().resources().replace_reported(&reported);
    let outcomes = armada_status::chart_outcomes(set, &result.changes, result.error.as_ref());
    ctx.state.update_status(|s| {
        for (owner, o) in &outcomes {
            if let Some(status) = armada_status::owner_status(set, owner, o) {
                s.set_owner(status);
            }
        }
    });
}

/// Store an empty inventory for a new root that acts as a ServiceAccount, unless it has one: a
/// root without a stored inventory has it rebuilt from the labelled objects of every kind it
/// renders, in every namespace — lists a namespace's account may not make, and a new root has
/// nothing to find anyway.
async fn seed_inventory(client: &Client, key: &ResourceKey) -> Result<(), Failure> {
    use crate::apply::inventory::{self, Inventory, InventorySource};
    let owner = Owner::root(&key.namespace, &key.name);
    let problem = |e: crate::apply::ApplyError| failure("InventoryFailed", e.to_string());
    if inventory::read_root(client, &owner, &key.namespace)
        .await
        .map_err(problem)?
        .is_some()
    {
        return Ok(());
    }
    let none = Inventory {
        owner: owner.clone(),
        entries: Default::default(),
        source: InventorySource::Rebuilt,
        force_prune: None,
    };
    let catalog = crate::apply::plan::Catalog::default();
    inventory::write(
        client,
        &catalog,
        &owner,
        &key.namespace,
        &none.entries,
        &none,
    )
    .await
    .map_err(problem)?;
    Ok(())
}

/// The pass settings of `root`: the daemon's, with the root's owner (`Owner::SyncRoot` of its
/// namespace and name, so a Root in Weft's namespace owns what the flag root of that name
/// owned), its namespace as the default one and the home of its inventory, its timeout, prune
/// guard, target manifest and decryption Secret.
fn settings_of(
    root: &Root,
    key: &ResourceKey,
    identity: &Identity,
    client: &Client,
    ctx: &Context,
) -> PassSettings {
    let own = *identity == Identity::Weft;
    let mut s = root_settings(&ctx.settings, root, key, own, client);
    // The flag root's Root whose spec names no decryption Secret decrypts with the daemon's
    // `--decryption-secret`, as the flag loop did: the same reader every pass, so the Secret is
    // parsed again (and a rotated key used) when its resourceVersion changes, without a restart.
    if *key == ctx.flag_root && own && s.decryption.secret.is_none() {
        s.decryption
            .secret
            .clone_from(&ctx.settings.decryption.secret);
    }
    s
}
