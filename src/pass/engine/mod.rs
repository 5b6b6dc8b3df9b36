//! The staged engine run of a pass: apply in stages and waves, prune, write inventories, wait —
//! by the generic verbs of [`crate::apply`] and the [`ApplyPolicy`] the pass built.
//!
//! 1. cluster prerequisites (CRDs, Namespaces, cluster roles, `*Class` kinds), then a wait for
//!    them (CRDs Established) and a new discovery, so that custom resources whose CRD is in the
//!    same pass can be applied;
//! 2. every other object, wave by wave, each wave's deletes before an update first, and each
//!    wave waited for before the next starts (objects of an owner with a wait rule by that
//!    rule, the rest by the readiness table and `--timeout`);
//! 3. prune (only when every object applied), inventories, and the wait for the last wave.
//!
//! An Armada chart that could not be rendered ([`ChartFailure`]) fails in its wave, after the
//! wave's other objects were applied (and, but for the last wave, waited for), like a chart that
//! did not become ready: the pass stops there unless its rule says to continue, and a pass with
//! such a chart prunes nothing (its old objects are not in the set, but must stay).
//!
//! An object another root holds, or that the API server forbids to the pass's identity (403: a
//! tenant's ClusterRole), fails alone: every other object, stage and wave goes on, nothing is
//! pruned, and the pass fails with it at its end (issue 41 item 6, issue 42 items 3 and 5). A
//! forbidden object of an Armada chart is the chart's failure, as before.

mod ahead;
mod replace;
mod waits;

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kube::Client;

use super::helm_hooks::{self, Release};
use super::inventories::read_reusing;
use super::shard;
use super::{Observer, PassError, PassInput, PassSettings, Progress};
use crate::api::ObjectRef;
use crate::apply::apply::{apply_batch, ApplyOptions};
use crate::apply::apply_policy::{ApplyPolicy, WaitRule};
use crate::apply::changeset::{Action, Change, ChangeSet};
use crate::apply::delete::{self, DeleteOptions};
use crate::apply::inventory::{self, Inventory};
use crate::apply::plan::{self, Catalog, PlannedObject};
use crate::apply::prune::{self, GuardScope, PruneOptions};
use crate::apply::replaced::Replacement;
use crate::apply::wait::NotReady;
use crate::apply::ApplyError;
use crate::render::armada::ChartFailure;
use crate::render::{order, DesiredHook, DesiredObject, DesiredSet, Owner};

/// How the pass reports an owner that did not become ready by its wait rule.
pub type DescribeFailure = fn(&Owner, &WaitRule, NotReady) -> PassError;

/// One engine run over a complete render.
pub struct Engine<'a> {
    client: &'a Client,
    settings: &'a PassSettings,
    input: &'a PassInput,
    observer: &'a Observer<'a>,
    policy: ApplyPolicy,
    describe_failure: DescribeFailure,
    changes: ChangeSet,
    /// Failures of owners whose rule says to continue: the pass went on, but they are reported
    /// at the end.
    deferred: Vec<PassError>,
    /// The Armada charts' Helm hooks of the set (run on install or upgrade only).
    hooks: Vec<DesiredHook>,
    /// Post-hooks of the last wave, run after it is ready: (owner, wave, release).
    pending_post: Vec<(Owner, u32, Release)>,
    /// The set's charts that could not be rendered.
    failures: Vec<ChartFailure>,
    /// The sync root's inventories as the write-ahead read (and wrote) them: only this pass
    /// writes them, so the prune step does not read them again.
    root_inventories: Vec<Inventory>,
    /// The size of every inventory of the pass, as the write-ahead left it: what the prune
    /// guard judges the deletes before the prune against.
    guard_scopes: Vec<GuardScope>,
    /// The kind changes of the pass (an old object pruned before its replacement is created).
    replacements: Vec<Replacement>,
    /// What the pass deleted before its prune (kind changes, recreates), per owner: counted
    /// by the prune guard.
    deleted_early: BTreeMap<Owner, usize>,
    /// Objects another Weft root holds that this pass declares (not written): the pass goes on
    /// with every other object and wave, prunes nothing, and fails with them at its end.
    held_elsewhere: Vec<ApplyError>,
    /// Objects the API server refused to this pass's identity (403: a tenant's ClusterRole, an
    /// object in another tenant's namespace, a quota): like `held_elsewhere`, each fails alone
    /// — the pass goes on with every other object, stage and wave (issue 42 items 3 and 5),
    /// prunes nothing, waits for none of them, and fails with them at its end.
    refused: Vec<ApplyError>,
    /// The owner custom resources with no stored inventory at the write-ahead (created by this
    /// pass): what each wants, and its inventory as read, until it is recorded.
    unrecorded: BTreeMap<Owner, (BTreeSet<ObjectRef>, Inventory)>,
    /// Stage 0 is being applied (before every wave).
    before_waves: bool,
}

impl<'a> Engine<'a> {
    pub fn new(
        client: &'a Client,
        settings: &'a PassSettings,
        input: &'a PassInput,
        observer: &'a Observer<'a>,
        policy: ApplyPolicy,
        describe_failure: DescribeFailure,
    ) -> Engine<'a> {
        Engine {
            client,
            settings,
            input,
            observer,
            policy,
            describe_failure,
            changes: ChangeSet::default(),
            deferred: Vec::new(),
            hooks: Vec::new(),
            pending_post: Vec::new(),
            failures: Vec::new(),
            root_inventories: Vec::new(),
            guard_scopes: Vec::new(),
            replacements: Vec::new(),
            deleted_early: BTreeMap::new(),
            held_elsewhere: Vec::new(),
            refused: Vec::new(),
            unrecorded: BTreeMap::new(),
            before_waves: false,
        }
    }

    /// Namespace of the pass's namespaced objects that do not say one.
    fn default_namespace(&self) -> &'a str {
        self.input.default_namespace(self.settings)
    }

    /// Bound of each readiness wait of the pass.
    fn timeout(&self) -> Duration {
        self.input.timeout(self.settings)
    }

    /// Apply, prune and wait for `set`: every change, and what stopped the run, if anything.
    pub async fn run(mut self, set: &DesiredSet) -> (ChangeSet, Option<PassError>) {
        let error = match self.run_inner(set).await {
            Ok(()) => None,
            Err(errors) => PassError::from_list(errors),
        };
        (self.changes, error)
    }

    async fn run_inner(&mut self, set: &DesiredSet) -> Result<(), Vec<PassError>> {
        let one = |e: ApplyError| vec![PassError::Apply(e)];
        self.hooks = set.hooks().to_vec();
        self.failures = set.failures().to_vec();
        let mut catalog = Catalog::discover(self.client).await.map_err(one)?;
        self.read_applied_before(&catalog).await;
        if !self.input.dry_run {
            self.record_ahead(set, &catalog).await?;
        }
        // Inventories are written whatever happens below, so that objects created by a pass that
        // failed half-way are still known to the next pass; only pruning needs a pass that
        // applied everything.
        let mut errors = Vec::new();
        let last = match self.apply_phase(set, &mut catalog).await {
            Ok(last) => Some(self.to_wait_for(last)),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        // Held by another root: nothing of this root is pruned while it declares another's object.
        // Nor while an object was refused: its old copy may still be in an inventory.
        let complete = last.is_some()
            && self.failures.is_empty()
            && self.held_elsewhere.is_empty()
            && self.refused.is_empty();
        match self.prune_and_record(set, &catalog, complete).await {
            Ok(more) => errors.extend(more),
            Err(fatal) => {
                // Without every inventory, prune cannot be judged (the guard is per inventory),
                // and the pass stops here.
                errors.extend(fatal);
                errors.append(&mut self.deferred);
                errors.extend(self.held_elsewhere.drain(..).map(PassError::Apply));
                errors.extend(self.refused.drain(..).map(PassError::Apply));
                return Err(errors);
            }
        }
        if let Some(last) = last {
            match self.wait_wave(&last).await {
                Ok(()) => {
                    for (owner, wave, release) in std::mem::take(&mut self.pending_post) {
                        if let Err(e) = self.run_phase(&catalog, &owner, wave, false, release).await
                        {
                            errors.push(e);
                            break;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        errors.append(&mut self.deferred);
        errors.extend(self.held_elsewhere.drain(..).map(PassError::Apply));
        errors.extend(self.refused.drain(..).map(PassError::Apply));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Prune (when everything applied) and write the inventories; the errors of both. `Err`
    /// when an inventory could not be read: nothing was pruned or written.
    async fn prune_and_record(
        &mut self,
        set: &DesiredSet,
        catalog: &Catalog,
        applied: bool,
    ) -> Result<Vec<PassError>, Vec<PassError>> {
        let mut errors = Vec::new();
        let desired_refs = plan::desired_refs(set, catalog, self.default_namespace());
        // A shard never prunes what another shard applies now.
        let elsewhere = shard::elsewhere(self.input, catalog, self.default_namespace());
        let all_desired: prune::Desired =
            desired_refs.values().flatten().chain(&elsewhere).collect();
        let known = std::mem::take(&mut self.root_inventories);
        let (mut inventories, mut read_errors) = read_reusing(
            self.client,
            set,
            catalog,
            &self.settings.weft_namespace,
            known,
        )
        .await;
        let (retired, retired_errors) =
            shard::retired_inventories(self.client, self.input, &self.settings.weft_namespace)
                .await;
        inventories.extend(retired);
        read_errors.extend(retired_errors);
        if !read_errors.is_empty() {
            return Err(read_errors.into_iter().map(PassError::Apply).collect());
        }
        let outcome = if applied {
            self.prune_phase(set, catalog, &all_desired, &inventories)
                .await
        } else {
            // Nothing is pruned after a failed apply: keep every old entry for the next pass.
            let kept = prune::candidates(&inventories, &all_desired)
                .into_iter()
                .map(|(owner, refs)| (owner, refs.into_iter().collect::<BTreeSet<_>>()))
                .collect();
            prune::PruneOutcome {
                kept,
                ..Default::default()
            }
        };
        // The prune borrowed every desired reference; the inventories are written from
        // `desired_refs`, moved (the pass's memory peaks at this write: each copy of the
        // references of 100,000 objects is ≈ 20 MB).
        drop(all_desired);
        self.changes.extend(outcome.changes);
        errors.extend(outcome.errors.into_iter().map(PassError::Apply));
        if self.input.dry_run {
            return Ok(errors);
        }
        let mut next = inventory::next_inventories(desired_refs, &outcome.kept);
        shard::keep_handed_off(&mut next, &inventories, &elsewhere, self.input);
        let none = BTreeSet::new();
        for inv in &inventories {
            let entries = next.get(&inv.owner).unwrap_or(&none);
            if entries.is_empty() && shard::is_retired(self.input, &inv.owner) {
                // A retired shard's inventory is finished: nothing left to prune or hand off.
                if let Err(e) =
                    inventory::remove_root(self.client, &inv.owner, &self.settings.weft_namespace)
                        .await
                {
                    errors.push(PassError::Apply(e));
                }
                continue;
            }
            let written = inventory::write(
                self.client,
                catalog,
                &inv.owner,
                &self.settings.weft_namespace,
                entries,
                inv,
            )
            .await;
            if let Err(e) = written {
                errors.push(PassError::Apply(e));
            }
        }
        Ok(errors)
    }

    async fn prune_phase(
        &mut self,
        set: &DesiredSet,
        catalog: &Catalog,
        all_desired: &prune::Desired<'_>,
        inventories: &[Inventory],
    ) -> prune::PruneOutcome {
        (self.observer)(Progress::Phase {
            message: "pruning".into(),
            objects: 0,
        });
        let prune_opts = PruneOptions {
            owner_kinds: OwnerKind::RENDERING.to_vec(),
            max_fraction: self.settings.max_prune_fraction,
            force: self.input.force_prune(self.settings),
            dry_run: self.input.dry_run,
            concurrency: self.settings.concurrency,
            revision: self.input.revision.clone(),
            allow_empty: self.settings.allow_empty,
            deleted_earlier: self.deleted_early.clone(),
        };
        let observer = self.observer;
        prune::prune(
            self.client,
            catalog,
            set,
            all_desired,
            inventories,
            &prune_opts,
            &|c| observer(Progress::Change(c)),
        )
        .await
    }

    /// Stages and waves; returns the objects of the last wave (waited for after the prune).
    async fn apply_phase(
        &mut self,
        set: &DesiredSet,
        catalog: &mut Catalog,
    ) -> Result<Vec<PlannedObject>, PassError> {
        let rest = self.apply_stages(set, catalog).await?;
        self.apply_waves(rest, catalog).await
    }

    /// Stage 0, then the desired objects that wait for it, in order (stage 1 is done by the
    /// caller).
    async fn apply_stages(
        &mut self,
        set: &DesiredSet,
        catalog: &mut Catalog,
    ) -> Result<Vec<PlannedObject>, ApplyError> {
        let default_ns = self.default_namespace();
        let resolved = resolve_set(self.client, set.objects(), set, catalog, default_ns).await?;

        // Stage 0: cluster prerequisites, then CRDs established and a fresh discovery. The rest
        // stays in the plan's own vector (a plan of 100,000 objects is not copied).
        let mut rest = resolved.planned;
        let first_use = first_wave_in_namespace(&rest);
        let stage0: Vec<PlannedObject> = rest
            .extract_if(.., |p| {
                order::stage(&p.object_ref.kind) == 0 && !in_its_own_wave(p, &first_use)
            })
            .collect();
        self.before_waves = true;
        let applied = self
            .apply(
                &stage0,
                catalog,
                "cluster prerequisites (CRDs, Namespaces, cluster roles, classes)",
            )
            .await;
        self.before_waves = false;
        applied?;
        self.wait(&stage0).await?;
        if resolved.pending_crd.is_empty() {
            return Ok(rest);
        }
        if self.input.dry_run {
            for d in &resolved.pending_crd {
                let c = Change {
                    object: d.object_ref(),
                    owner: d.owner.clone(),
                    action: Action::Created,
                    reason: Some("its CRD is created in this pass".into()),
                };
                (self.observer)(Progress::Change(&c));
                self.changes.push(c);
            }
            return Ok(rest);
        }
        rest.extend(
            self.resolve_after_crds(&resolved.pending_crd, set, catalog)
                .await?,
        );
        order_planned(&mut rest);
        Ok(rest)
    }

    /// Resolve the objects whose CRD stage 0 created; discovery can trail an Established CRD by
    /// a moment, so this retries until `--timeout`.
    async fn resolve_after_crds(
        &self,
        pending: &[DesiredObject],
        set: &DesiredSet,
        catalog: &mut Catalog,
    ) -> Result<Vec<PlannedObject>, ApplyError> {
        let deadline = Instant::now() + self.timeout();
        loop {
            *catalog = Catalog::discover(self.client).await?;
            let r =
                resolve_set(self.client, pending, set, catalog, self.default_namespace()).await?;
            if r.pending_crd.is_empty() {
                return Ok(r.planned);
            }
            if Instant::now() >= deadline {
                let first = &r.pending_crd[0];
                return Err(ApplyError::UnknownKind {
                    origin: String::new(),
                    object: Box::new(first.object_ref()),
                    api_version: first.api_version().to_string(),
                    kind: first.kind().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stage 1, wave by wave: the deletes before an update of the wave's owners, apply, wait
    /// (each owner by its own rule). The last wave is waited for after the prune.
    async fn apply_waves(
        &mut self,
        mut rest: Vec<PlannedObject>,
        catalog: &Catalog,
    ) -> Result<Vec<PlannedObject>, PassError> {
        let waves: BTreeSet<u32> = rest
            .iter()
            .map(|p| p.desired.wave)
            .chain(self.failures.iter().map(|f| f.wave))
            .collect();
        let last_wave = waves.iter().next_back().copied();
        let mut last: Vec<PlannedObject> = Vec::new();
        // Each wave is moved out of the plan, not copied (stable: apply order within a wave is
        // kept); a single wave is the plan itself.
        // Already in wave order as planned (`order_planned`, the render's order): a stable sort
        // of 100,000 planned objects would allocate a scratch buffer of half of them at the
        // pass's memory peak for nothing.
        if !rest.is_sorted_by_key(|p| p.desired.wave) {
            rest.sort_by_key(|p| p.desired.wave);
        }
        for wave in &waves {
            let n = rest.iter().take_while(|p| p.desired.wave == *wave).count();
            let objects: Vec<PlannedObject> = if n == rest.len() {
                std::mem::take(&mut rest)
            } else {
                rest.drain(..n).collect()
            };
            let label = if waves.len() > 1 {
                format!("wave {wave}")
            } else {
                "objects".to_string()
            };
            // A release's namespace and cluster objects, as it installs: applied and waited for
            // before anything else of its wave, its pre-install hooks included (stable: the
            // wave's order stays). Whether a release installs is judged without them.
            // Taken out in place: the wave (the whole plan of a root of plain manifests) is not
            // copied into a second vector, which at 100,000 objects was ≈ 40 MB at the pass's
            // peak (docs/benchmarks.md).
            let mut objects = objects;
            let prerequisites: Vec<PlannedObject> = objects
                .extract_if(.., |p| order::stage(&p.object_ref.kind) == 0)
                .collect();
            let releases = self.releases(&objects).await?;
            if !prerequisites.is_empty() {
                let what = format!("{label}: namespaces and cluster objects");
                self.apply(&prerequisites, catalog, &what).await?;
                self.wait(&prerequisites).await?;
            }
            for (owner, release) in &releases {
                self.run_phase(catalog, owner, *wave, true, *release)
                    .await?;
            }
            self.deletes_before_update(&objects, catalog).await?;
            self.apply(&objects, catalog, &label).await?;
            if Some(*wave) == last_wave {
                last = objects;
                self.pending_post = releases
                    .into_iter()
                    .map(|(owner, release)| (owner, *wave, release))
                    .collect();
            } else {
                self.wait_wave(&objects).await?;
                for (owner, release) in &releases {
                    self.run_phase(catalog, owner, *wave, false, *release)
                        .await?;
                }
            }
            self.failed_charts(*wave)?;
        }
        Ok(last)
    }

    /// The charts of `wave` that could not be rendered, as failed charts: each whose rule says
    /// to continue goes to `deferred`; any other stops the pass here.
    fn failed_charts(&mut self, wave: u32) -> Result<(), PassError> {
        let mut stop = Vec::new();
        for f in self.failures.iter().filter(|f| f.wave == wave) {
            let rule = self.policy.waits.get(&f.owner);
            let go_on = rule.is_some_and(|r| r.continue_on_failure);
            let e = super::armada::render_failure(f, go_on);
            if go_on {
                self.deferred.push(e);
            } else {
                stop.push(e);
            }
        }
        PassError::from_list(stop).map_or(Ok(()), Err)
    }

    /// The owners of `objects` that have hooks and are installed or upgraded by this wave.
    async fn releases(
        &self,
        objects: &[PlannedObject],
    ) -> Result<Vec<(Owner, Release)>, ApplyError> {
        let hooked: BTreeSet<&Owner> = Self::owners_of(objects)
            .into_iter()
            .filter(|o| self.hooks.iter().any(|h| &h.object.owner == *o))
            .collect();
        let mut out = Vec::new();
        for owner in hooked {
            let mine: Vec<PlannedObject> = objects
                .iter()
                .filter(|p| &p.desired.owner == owner)
                .cloned()
                .collect();
            let live = plan::read_live(self.client, &mine, self.settings.concurrency).await?;
            if let Some(release) = helm_hooks::release_of(&live, owner, &mine) {
                out.push((owner.clone(), release));
            }
        }
        Ok(out)
    }

    /// Run `owner`'s pre- or post-hooks of `wave` for `release`, within its wait timeout.
    async fn run_phase(
        &mut self,
        catalog: &Catalog,
        owner: &Owner,
        wave: u32,
        pre: bool,
        release: Release,
    ) -> Result<(), PassError> {
        if release == Release::Upgrade && self.policy.no_upgrade_hooks.contains(owner) {
            return Ok(());
        }
        let hooks = helm_hooks::hooks_for(&self.hooks, owner, wave, pre, release);
        let phase = match (pre, release) {
            (true, Release::Install) => "pre-install",
            (true, Release::Upgrade) => "pre-upgrade",
            (false, Release::Install) => "post-install",
            (false, Release::Upgrade) => "post-upgrade",
        };
        let timeout = self
            .policy
            .waits
            .get(owner)
            .map_or(self.timeout(), |r| r.timeout);
        let mut changes = Vec::new();
        let result = helm_hooks::run_hooks(
            self.client,
            catalog,
            &hooks,
            phase,
            timeout,
            self.settings,
            self.input,
            self.observer,
            &mut changes,
        )
        .await;
        self.changes.entries.extend(changes);
        result
    }

    /// Apply one batch (a stage or a wave): every object, an object refused for an immutable
    /// field recreated when it allows it; then, only if all of that applied, the kind changes:
    /// each old object pruned (waited for until gone) and its new object created. A batch that
    /// fails replaces nothing (docs/apply.md: nothing is pruned or replaced in a failed pass).
    async fn apply(
        &mut self,
        objects: &[PlannedObject],
        catalog: &Catalog,
        label: &str,
    ) -> Result<(), ApplyError> {
        if objects.is_empty() {
            return Ok(());
        }
        let missing = self.record_late(objects, catalog).await?;
        if !missing.is_empty() {
            let recorded: Vec<PlannedObject> = objects
                .iter()
                .filter(|p| !missing.contains_key(&p.desired.owner))
                .cloned()
                .collect();
            let mut errors: Vec<ApplyError> = missing.into_values().collect();
            if let Err(e) = Box::pin(self.apply(&recorded, catalog, label)).await {
                errors.push(e);
            }
            return ApplyError::from_list(errors).map_or(Ok(()), Err);
        }
        (self.observer)(Progress::Phase {
            message: format!("applying {label}"),
            objects: objects.len(),
        });
        let (due, held, mut errors) = self.kind_changes_due(objects).await;
        let later: BTreeSet<inventory::RefKey> =
            due.iter().map(|r| inventory::ref_key(&r.new)).collect();
        // Only when there is a kind change is the batch copied.
        let kept: Vec<PlannedObject>;
        let first: &[PlannedObject] = if held.is_empty() && later.is_empty() {
            objects
        } else {
            kept = objects
                .iter()
                .filter(|p| {
                    let k = inventory::ref_key(&p.object_ref);
                    !held.contains(&k) && !later.contains(&k)
                })
                .cloned()
                .collect();
            &kept
        };
        let refused_before = self.refused.len();
        errors.extend(self.apply_objects(first).await?);
        if due.is_empty() {
            return ApplyError::from_list(errors).map_or(Ok(()), Err);
        }
        // A batch with a refused object replaces nothing either (a failed pass).
        if !errors.is_empty() || self.refused.len() > refused_before {
            self.kind_changes_stopped(&due);
            return ApplyError::from_list(errors).map_or(Ok(()), Err);
        }
        let (ready, more) = self.replace_old(&due, catalog).await;
        errors.extend(more);
        let news: Vec<PlannedObject> = objects
            .iter()
            .filter(|p| ready.contains(&inventory::ref_key(&p.object_ref)))
            .cloned()
            .collect();
        errors.extend(self.apply_objects(&news).await?);
        ApplyError::from_list(errors).map_or(Ok(()), Err)
    }

    /// Apply `objects` (read live, server-side apply, recreate what is refused and allows it);
    /// the errors of the objects that were not applied.
    async fn apply_objects(
        &mut self,
        objects: &[PlannedObject],
    ) -> Result<Vec<ApplyError>, ApplyError> {
        if objects.is_empty() {
            return Ok(Vec::new());
        }
        let live = plan::read_live(self.client, objects, self.settings.concurrency).await?;
        let observer = self.observer;
        let apply_opts = ApplyOptions {
            concurrency: self.settings.concurrency,
            dry_run: self.input.dry_run,
        };
        let (changes, failed) = apply_batch(
            self.client,
            objects,
            &live,
            &apply_opts,
            &self.policy.report_drift,
            &|c| observer(Progress::Change(c)),
        )
        .await;
        self.changes.extend(changes);
        // A conflict with another root stops neither this wave nor the next (issue 41 item 6).
        let (held, failed): (Vec<_>, Vec<_>) = failed
            .into_iter()
            .partition(|e| matches!(e, ApplyError::Conflict { .. }));
        self.held_elsewhere.extend(held);
        // Nor does an object the API server refuses to this identity (issue 42 item 3) — but
        // for an Armada chart's, whose failure is the chart's and stops its group as Armada's
        // sequencing says.
        let (refused, failed): (Vec<_>, Vec<_>) = failed
            .into_iter()
            .partition(|e| e.code() == Some(403) && !self.owned_by_ruled(objects, e));
        self.refused.extend(refused);
        Ok(self.recreate_refused(objects, failed).await)
    }

    /// Whether `e` is about one of `objects` whose owner has a wait rule (an Armada chart).
    fn owned_by_ruled(&self, objects: &[PlannedObject], e: &ApplyError) -> bool {
        objects
            .iter()
            .find(|p| e.is_about(&p.object_ref))
            .is_some_and(|p| self.policy.waits.contains_key(&p.desired.owner))
    }

    /// The owners among `objects`, each once, in order.
    fn owners_of(objects: &[PlannedObject]) -> BTreeSet<&Owner> {
        objects.iter().map(|p| &p.desired.owner).collect()
    }

    /// The deletes before an update of every owner in `objects` that is being updated.
    async fn deletes_before_update(
        &mut self,
        objects: &[PlannedObject],
        catalog: &Catalog,
    ) -> Result<(), ApplyError> {
        let delete_opts = DeleteOptions {
            dry_run: self.input.dry_run,
            poll_interval: self.settings.poll_interval,
        };
        for owner in Self::owners_of(objects) {
            let Some(rule) = self.policy.pre_update_deletes.get(owner) else {
                continue;
            };
            let mine: Vec<PlannedObject> = objects
                .iter()
                .filter(|p| &p.desired.owner == owner)
                .cloned()
                .collect();
            let live = plan::read_live(self.client, &mine, self.settings.concurrency).await?;
            if !delete::is_update(&live, owner, &mine) {
                continue;
            }
            let observer = self.observer;
            let changes = delete::delete_before_update(
                self.client,
                catalog,
                owner,
                rule,
                &delete_opts,
                &|c| observer(Progress::Change(c)),
            )
            .await?;
            self.changes.entries.extend(changes);
        }
        Ok(())
    }
}

/// [`plan::resolve`] against the CRDs of this pass, and, if a kind is still unknown, against the
/// CRDs in the cluster too (a CRD created just before the pass is not served at once).
pub async fn resolve_set(
    client: &Client,
    objects: &[DesiredObject],
    set: &DesiredSet,
    catalog: &Catalog,
    default_namespace: &str,
) -> Result<plan::Resolved, ApplyError> {
    let mut crds = plan::crds_of(set.objects());
    let mut resolved = match plan::resolve(objects, &crds, catalog, default_namespace) {
        Ok(r) => r,
        Err(ApplyError::UnknownKind { .. }) | Err(ApplyError::Many(_)) => {
            crds.extend(plan::cluster_crds(client).await?);
            plan::resolve(objects, &crds, catalog, default_namespace)?
        }
        Err(e) => return Err(e),
    };
    // Before the live state is read: an autoscaler's replicas are neither drift nor a change.
    crate::apply::ignore::respect_other_managers(client, catalog, &mut resolved.planned).await?;
    Ok(resolved)
}

/// Whether a cluster prerequisite is applied in its own wave rather than before every wave: an
/// Armada release's Namespace, ClusterRoles and bindings come when that release installs, as
/// Armada installs them (a chart that is never reached gets none). CRDs stay in stage 0: the
/// custom resources of later waves are resolved against them once, before the waves.
/// A chart's Namespace that an object of an earlier wave lives in is needed before that wave: it
/// stays in stage 0. `first_use`: the first wave of any object in each namespace.
fn in_its_own_wave(p: &PlannedObject, first_use: &BTreeMap<String, u32>) -> bool {
    let needed_earlier = p.object_ref.kind == "Namespace"
        && first_use
            .get(p.object_ref.name.as_str())
            .is_some_and(|w| *w < p.desired.wave);
    p.desired.owner.as_chart().is_some()
        && p.object_ref.kind != "CustomResourceDefinition"
        && !needed_earlier
}

/// The first wave of any object in each namespace of `planned`.
fn first_wave_in_namespace(planned: &[PlannedObject]) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for p in planned.iter().filter(|p| p.namespaced) {
        let wave = out
            .entry(p.object_ref.namespace.clone())
            .or_insert(u32::MAX);
        *wave = (*wave).min(p.desired.wave);
    }
    out
}

fn order_planned(objects: &mut [PlannedObject]) {
    objects.sort_by(|a, b| {
        let key = |p: &PlannedObject| (p.desired.wave, order::kind_rank(&p.object_ref.kind));
        key(a)
            .cmp(&key(b))
            .then_with(|| a.object_ref.cmp(&b.object_ref))
    });
}
