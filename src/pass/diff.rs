//! `weft diff`: the unified diff of every object a pass would change, from a server-side
//! dry-run, plus every object a pass would prune. Writes nothing.

use crate::api::owner::OwnerKind;

use kube::api::DynamicObject;
use kube::{Api, Client};

use super::agents::AgentBundles;
use super::engine::resolve_set;
use super::inventories::read_inventories;
use super::prepare::{prepare, ClusterInputs};
use super::{PassError, PassInput, PassSettings};
use crate::api::ObjectRef;
use crate::apply::changeset::{Action, Change};
use crate::apply::diff::{self, DiffChange, ObjectDiff};
use crate::apply::plan::{self, Catalog};
use crate::apply::prune::{self, PruneOptions};
use crate::apply::ApplyError;
use crate::render::{AgentLayer, DesiredSet};
use crate::source::Snapshot;

/// The diff of everything a pass over `snapshot` would apply or prune.
pub async fn diff_pass(
    client: &Client,
    snapshot: Snapshot,
    settings: &PassSettings,
    input: &PassInput,
) -> Result<Vec<ObjectDiff>, PassError> {
    let bundles = AgentBundles::new(client.clone(), settings.weft_namespace.clone());
    let cluster = ClusterInputs {
        client,
        bundles: &bundles,
    };
    let set = prepare(snapshot, Some(cluster), AgentLayer::Included, settings)
        .await?
        .set;
    // A diff shows the whole pass or nothing: a chart that did not render cannot be shown.
    if let Some(e) = set.failure_error() {
        return Err(PassError::Render(e));
    }
    let revisions = set.chart_revisions().clone();
    // The launcher takeover the pass would do first: its removals are shown as prunes, and the
    // objects it recreates (a launcher selector cannot change) as created, never as an update
    // the API server refuses.
    let (set, takeover) = super::takeover::before_pass(
        client,
        &settings.weft_namespace,
        set,
        settings.launcher_takeover.as_deref(),
        true,
        &|_| {},
    )
    .await
    .map_err(PassError::Takeover)?;
    let catalog = Catalog::discover(client).await?;
    let default_ns = input.default_namespace(settings);
    let resolved = resolve_set(client, set.objects(), &set, &catalog, default_ns).await?;
    let mut pending = resolved.pending_crd.clone();
    pending.extend(takeover.recreated.iter().cloned());
    let mut out = Vec::new();
    for c in takeover
        .changes
        .iter()
        .filter(|c| c.action == Action::Deleted)
    {
        if let Some(d) = prune_diff(client, &catalog, c).await? {
            out.push(d);
        }
    }
    out.extend(
        diff::diff_objects(client, &resolved.planned, &pending, settings.concurrency).await?,
    );
    for c in would_prune(client, &set, &catalog, settings, input).await? {
        if let Some(d) = prune_diff(client, &catalog, &c).await? {
            out.push(d);
        }
    }
    out.extend(source_moves(client, &revisions).await);
    Ok(out)
}

/// The charts whose source this pass would move (a range that found a newer version, a changed
/// reference): their live `status.revision` against the one just fetched, as a diff of the
/// ArmadaChart. A chart not deployed yet (no revision) shows in its objects' diffs.
async fn source_moves(
    client: &Client,
    revisions: &std::collections::BTreeMap<crate::api::ResourceKey, String>,
) -> Vec<ObjectDiff> {
    let mut out = Vec::new();
    for (key, next) in revisions {
        let api: Api<crate::api::armada::ArmadaChart> =
            Api::namespaced(client.clone(), &key.namespace);
        let Ok(Some(live)) = api.get_opt(&key.name).await else {
            continue;
        };
        let Some(current) = live.status.and_then(|s| s.revision) else {
            continue;
        };
        if current != *next {
            out.push(ObjectDiff {
                object: ObjectRef {
                    api_version: crate::api::armada::API_VERSION.to_string(),
                    kind: "ArmadaChart".to_string(),
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                },
                change: diff::DiffChange::Update,
                text: format!(
                    "--- ArmadaChart {key} chart source (deployed)\n+++ ArmadaChart {key} chart source (this pass)\n-{current}\n+{next}\n"
                ),
            });
        }
    }
    out
}

/// What a pass would prune (a forced dry-run prune: the guard is the pass's business).
async fn would_prune(
    client: &Client,
    set: &DesiredSet,
    catalog: &Catalog,
    settings: &PassSettings,
    input: &PassInput,
) -> Result<Vec<Change>, ApplyError> {
    let desired_refs = plan::desired_refs(set, catalog, input.default_namespace(settings));
    let all_desired: prune::Desired = desired_refs.values().flatten().collect();
    let (inventories, errors) =
        read_inventories(client, set, catalog, &settings.weft_namespace).await;
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let prune_opts = PruneOptions {
        owner_kinds: OwnerKind::RENDERING.to_vec(),
        max_fraction: settings.max_prune_fraction,
        force: true,
        dry_run: true,
        concurrency: settings.concurrency,
        revision: input.revision.clone(),
        allow_empty: settings.allow_empty,
        deleted_earlier: Default::default(),
    };
    let outcome = prune::prune(
        client,
        catalog,
        set,
        &all_desired,
        &inventories,
        &prune_opts,
        &|_| {},
    )
    .await;
    if let Some(e) = outcome.errors.into_iter().next() {
        return Err(e);
    }
    Ok(outcome
        .changes
        .with_action(Action::Deleted)
        .cloned()
        .collect())
}

/// The diff of one object a pass would prune: its live copy, removed.
async fn prune_diff(
    client: &Client,
    catalog: &Catalog,
    c: &Change,
) -> Result<Option<ObjectDiff>, ApplyError> {
    let Some((ar, namespaced)) = catalog
        .resolve(&c.object.api_version, &c.object.kind)
        .cloned()
    else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), &c.object.namespace, &*ar)
    } else {
        Api::all_with(client.clone(), &*ar)
    };
    let live = api
        .get_opt(&c.object.name)
        .await
        .map_err(|e| ApplyError::api("read", &c.object, e))?;
    let live = live.and_then(|l| serde_json::to_value(l).ok());
    Ok(
        diff::unified(&c.object, live.as_ref(), None).map(|text| ObjectDiff {
            object: c.object.clone(),
            change: DiffChange::Prune,
            text,
        }),
    )
}
