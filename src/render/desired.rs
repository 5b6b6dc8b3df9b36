//! The desired set: everything one complete render wants, with its owners.

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::armada::{ChartFailure, HelmFailures, HelmRenders};
use super::bundle::Bundle;
use super::weavecloud::AgentInputs;
use super::{DesiredHook, DesiredObject, Owner, RenderError, RenderOptions};
use crate::load::LoadedRepo;
use crate::load::Origin;
use crate::source::chart::ChartSources;

/// Which layers a render produces. The sync root's documents and the Armada charts' objects are
/// always rendered; the WeaveCloud agents are left out where the WeaveCloud controller applies
/// them (the daemon's sync-root pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgentLayer {
    /// Render every WeaveCloud's agents (`weft render`, `weft sync`, `weft diff`).
    #[default]
    Included,
    /// Leave them to the WeaveCloud controller.
    Excluded,
}

/// Everything a render takes besides the repository: what the source stage fetched (chart
/// files) and what the cluster says (each WeaveCloud's bundle and inputs). Offline, the default:
/// no fetched charts, the built-in bundle and no cluster inputs for every WeaveCloud.
#[derive(Clone, Debug, Default)]
pub struct RenderInputs {
    /// Chart sources fetched from git and tar locations (local charts come from the snapshot).
    pub charts: ChartSources,
    /// Per WeaveCloud `(namespace, name)`: the bundle and inputs its agents are rendered with.
    /// A WeaveCloud missing here is rendered with the built-in bundle and no cluster inputs.
    pub agents: BTreeMap<(String, String), (Arc<Bundle>, AgentInputs)>,
    pub agent_layer: AgentLayer,
    /// helm's output for every Helm chart of the plan (by ArmadaChart namespace/name), rendered
    /// by `pass::prepare`. A Helm chart missing here and in `helm_failures` is a render error.
    pub helm: HelmRenders,
    /// Why helm could not render the other Helm charts of the plan: each is a [`ChartFailure`].
    pub helm_failures: HelmFailures,
}

/// A complete render: objects in apply order, the Armada charts' hooks, and warnings.
#[derive(Clone, Debug, Default)]
pub struct RenderedParts {
    pub objects: Vec<DesiredObject>,
    pub hooks: Vec<DesiredHook>,
    pub warnings: Vec<(Origin, String)>,
    /// The Armada charts that could not be rendered.
    pub failures: Vec<ChartFailure>,
}

/// The one render of a repository, used by every command and by the daemon: the sync root's
/// documents, every WeaveCloud's agents (unless excluded), every Armada chart's objects, with
/// ownership labels, in apply order.
pub fn render_desired(
    repo: &LoadedRepo,
    inputs: &RenderInputs,
    opts: &RenderOptions,
) -> Result<Vec<DesiredObject>, RenderError> {
    render_parts(repo, inputs, opts).map(|p| p.objects)
}

/// [`render_desired`] with the charts' hooks and the render's warnings.
pub fn render_parts(
    repo: &LoadedRepo,
    inputs: &RenderInputs,
    opts: &RenderOptions,
) -> Result<RenderedParts, RenderError> {
    let mut out = super::render_sync_layer(repo, opts)?;
    if inputs.agent_layer == AgentLayer::Included && !repo.weaveclouds.is_empty() {
        let offline = AgentInputs::default();
        for wc in &repo.weaveclouds {
            let key = (
                wc.value.metadata.namespace.clone().unwrap_or_default(),
                wc.value.metadata.name.clone().unwrap_or_default(),
            );
            let children = match inputs.agents.get(&key) {
                Some((bundle, agent_inputs)) => {
                    super::weavecloud::render_weavecloud(&wc.value, bundle, agent_inputs)
                }
                None => {
                    let bundle = Bundle::builtin().map_err(|e| {
                        RenderError::Other(format!("the built-in agent bundle: {e}"))
                    })?;
                    super::weavecloud::render_weavecloud(&wc.value, bundle, &offline)
                }
            }
            .map_err(|e| RenderError::At {
                origin: wc.origin.clone(),
                message: e.to_string(),
            })?;
            out.extend(children);
        }
    }
    let charts = super::armada::render(repo, &inputs.charts, &inputs.helm, &inputs.helm_failures)?;
    out.extend(charts.objects);
    super::order::sort(&mut out);
    Ok(RenderedParts {
        objects: out,
        hooks: charts.hooks,
        warnings: charts.warnings,
        failures: charts.failures,
    })
}

/// Weft's custom resources a repository declares: a WeaveCloud and Armada's documents. They are
/// not waited for as workloads and not replaced inline (their controllers and finalizers have
/// their part); the ones that own children are the [`OwnerKind`]s that render.
pub const CUSTOM_RESOURCE_KINDS: &[&str] = &[
    "WeaveCloud",
    "ArmadaChart",
    "ArmadaChartGroup",
    "ArmadaManifest",
];

/// Everything one complete render wants, with every owner that takes part (also owners that now
/// want nothing, so that their old objects are pruned).
///
/// It is made from the output of a render that succeeded: [`DesiredSet::render`] (both layers of
/// a repository that loaded without errors) or [`DesiredSet::for_owners`] (one layer, from the
/// `Ok` value of a render). Pruning takes a `&DesiredSet`, so nothing can be pruned after a failed
/// fetch, load or render — there is no value to prune against. A set with [`failures`]
/// (Armada charts that could not be rendered) is applied up to the first failed chart's group
/// and never pruned.
///
/// [`failures`]: DesiredSet::failures
#[derive(Clone, Debug, Default)]
pub struct DesiredSet {
    pub(super) objects: Vec<DesiredObject>,
    pub(super) owners: BTreeSet<Owner>,
    pub(super) hooks: Vec<DesiredHook>,
    pub(super) warnings: Vec<(Origin, String)>,
    pub(super) failures: Vec<ChartFailure>,
    /// The source revision of each fetched chart (`1.2.0@sha256:…`, a git commit), for its
    /// `status.revision`.
    pub(super) chart_revisions: BTreeMap<crate::api::ResourceKey, String>,
    /// A complete render that read nothing but the repository's files and the pass's settings:
    /// no chart (its sources, helm), no WeaveCloud (its bundle and the cluster's inputs), no
    /// encrypted file (the decryption keys). The same revision and settings render it the same,
    /// so a daemon may apply it again instead of rendering again. `false` for any part of a
    /// render (a layer, a shard, a set without held owners).
    pub(super) self_contained: bool,
}

impl DesiredSet {
    /// The source revision of every fetched chart, by chart.
    pub fn chart_revisions(&self) -> &BTreeMap<crate::api::ResourceKey, String> {
        &self.chart_revisions
    }
    /// See the field: whether the render may be applied again for the same revision and settings.
    pub fn is_self_contained(&self) -> bool {
        self.self_contained
    }
    /// The source revision `chart` was rendered from, when it was fetched.
    pub fn chart_revision(&self, chart: &crate::api::ResourceKey) -> Option<&str> {
        self.chart_revisions.get(chart).map(String::as_str)
    }

    /// [`render_desired`], with every owner that takes part: the sync root, and each custom
    /// resource of the repository whose children this render includes (an owner that now wants
    /// nothing still takes part, so that its old objects are pruned).
    ///
    /// It takes the loaded repository: its plain manifests are moved into the set, not copied,
    /// so a render of 100,000 documents does not hold them twice.
    pub fn render(
        mut repo: LoadedRepo,
        inputs: &RenderInputs,
        opts: &RenderOptions,
    ) -> Result<DesiredSet, RenderError> {
        let manifests = std::mem::take(&mut repo.manifests);
        let RenderedParts {
            mut objects,
            hooks,
            warnings,
            failures,
        } = render_parts(&repo, inputs, opts)?;
        let self_contained = repo.weaveclouds.is_empty()
            && repo.armada.is_empty()
            && !crate::load::sops::needs_decryption(&repo.snapshot);
        let armada = std::mem::take(&mut repo.armada);
        // The repository's files go before its manifests are adopted (each adopted object is a
        // new text with its ownership labels): at 100,000 objects the files (≈ 28 MB) beside
        // every adopted object were the render's peak.
        drop(repo);
        let root = Owner::root(&opts.weft_namespace, &opts.root_name);
        let adopted: Vec<DesiredObject> = manifests
            .into_iter()
            .map(|m| root.adopt(m.value.value(), 0, Some(m.origin)))
            .collect();
        // Moved, not copied, when the repository has only plain manifests: a copy of 100,000
        // objects' entries (≈ 13 MB) was there too.
        if objects.is_empty() {
            objects = adopted;
        } else {
            objects.extend(adopted);
        }
        // The resources' own namespaces first: a release namespace that is also theirs is
        // needed before any chart.
        let own = super::armada::resource_namespaces(&objects);
        objects.extend(own);
        let namespaces = super::armada::release_namespaces(&armada, &objects);
        drop(armada);
        objects.extend(namespaces);
        super::order::sort(&mut objects);
        let mut owners = BTreeSet::new();
        owners.insert(Owner::root(&opts.weft_namespace, &opts.root_name));
        let agents = inputs.agent_layer == AgentLayer::Included;
        for o in &objects {
            owners.insert(o.owner.clone());
            let renders = OwnerKind::from_kind(o.kind())
                .filter(|k| k.renders_children() && (agents || *k != OwnerKind::WeaveCloud));
            if let (true, Some(kind)) = (o.owner.is_root(), renders) {
                owners.insert(Owner::resource(kind, o.namespace().unwrap_or(""), o.name()));
            }
        }
        owners.extend(failures.iter().map(|f| f.owner.clone()));
        let chart_revisions = inputs
            .charts
            .by_chart
            .iter()
            .filter_map(|(k, f)| f.revision.clone().map(|r| (k.clone(), r)))
            .collect();
        Ok(DesiredSet {
            objects,
            owners,
            hooks,
            warnings,
            failures,
            chart_revisions,
            self_contained,
        })
    }

    /// One layer of a complete render, for exactly `owners` (the daemon applies the sync layer
    /// and each custom resource's children separately). Objects of other owners are dropped.
    pub fn for_owners(objects: Vec<DesiredObject>, owners: BTreeSet<Owner>) -> DesiredSet {
        let mut objects: Vec<DesiredObject> = objects
            .into_iter()
            .filter(|o| owners.contains(&o.owner))
            .collect();
        super::order::sort(&mut objects);
        DesiredSet {
            objects,
            owners,
            hooks: Vec::new(),
            warnings: Vec::new(),
            failures: Vec::new(),
            chart_revisions: BTreeMap::new(),
            self_contained: false,
        }
    }

    /// The set without `held` owners: none of their objects, hooks or failures, and they take
    /// no part (their inventories are neither read, pruned nor written: a suspended owner's
    /// prune is deferred, never lost).
    pub fn without_owners(&self, held: &BTreeSet<Owner>) -> DesiredSet {
        let keep = |o: &Owner| !held.contains(o);
        DesiredSet {
            objects: self
                .objects
                .iter()
                .filter(|o| keep(&o.owner))
                .cloned()
                .collect(),
            owners: self.owners.iter().filter(|o| keep(o)).cloned().collect(),
            hooks: self
                .hooks
                .iter()
                .filter(|h| keep(&h.object.owner))
                .cloned()
                .collect(),
            warnings: self.warnings.clone(),
            failures: self
                .failures
                .iter()
                .filter(|f| keep(&f.owner))
                .cloned()
                .collect(),
            chart_revisions: self.chart_revisions.clone(),
            self_contained: false,
        }
    }

    /// With the hooks of its owners (e.g. from the complete render this layer came from).
    pub fn with_hooks(mut self, hooks: impl IntoIterator<Item = DesiredHook>) -> DesiredSet {
        let owners = &self.owners;
        self.hooks.extend(
            hooks
                .into_iter()
                .filter(|h| owners.contains(&h.object.owner)),
        );
        self
    }

    /// The Armada charts' Helm hooks (not objects: run only on install or upgrade).
    pub fn hooks(&self) -> &[DesiredHook] {
        &self.hooks
    }

    /// The render's warnings (dropped test hooks, helm's warnings).
    pub fn warnings(&self) -> &[(Origin, String)] {
        &self.warnings
    }

    /// The Armada charts that could not be rendered, in plan order.
    pub fn failures(&self) -> &[ChartFailure] {
        &self.failures
    }

    /// The failed charts as one error, for the commands that need a complete render (`render`,
    /// `validate`, `diff`); `None` when every chart rendered.
    pub fn failure_error(&self) -> Option<RenderError> {
        match self.failures.as_slice() {
            [] => None,
            [one] => Some(one.error.clone()),
            all => Some(RenderError::Other(
                all.iter()
                    .map(|f| f.error.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
            )),
        }
    }

    /// The objects, in apply order.
    pub fn objects(&self) -> &[DesiredObject] {
        &self.objects
    }
    /// Every owner of this pass.
    pub fn owners(&self) -> &BTreeSet<Owner> {
        &self.owners
    }
    pub fn len(&self) -> usize {
        self.objects.len()
    }
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}
