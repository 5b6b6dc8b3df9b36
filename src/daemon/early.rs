//! Changed objects first: when a push changes a few plain-manifest files, the daemon applies the
//! objects they changed before the full pass loads and renders the whole repository. In a
//! repository of 100,000 objects the full pass takes seconds; a one-object change then reaches
//! the cluster within a fraction of a second of the webhook, and the full pass that follows finds
//! it unchanged (it writes nothing more for it) and does everything else: new objects, prune,
//! Armada, waits.
//!
//! It is the same apply as the full pass, only sooner: the fields other managers own (an
//! autoscaler's `spec.replicas`, `weft.io/ignore-fields`) keep their live values, an object
//! another root holds or claims is not written (the full pass reports the conflict), and only
//! objects this root already holds are updated. It deletes nothing, so the prune guard has
//! nothing to judge; a suspended root runs no pass, so no early apply either.
//!
//! Taken only when it cannot apply anything the full pass would refuse:
//! - every changed file is a `*.yaml`/`*.yml` outside any chart directory, at most
//!   [`MAX_FILES`] of them (removed files are left to the full pass);
//! - the changed files load and render cleanly on their own, and hold only plain manifests of the
//!   sync root (no WeaveCloud, no Armada document, no CRD, no Namespace);
//! - none of their objects takes the name of an object of another file (the full load would
//!   refuse the duplicate);
//! - only objects that the previous render already had in those files (so already in the
//!   inventory, and this shard's) and whose applied hash changed are written, at most
//!   [`MAX_OBJECTS`]; new objects wait for the full pass and its write-ahead inventory.
//!
//! Anything else — or any error — skips the early apply, silently but for a debug line: the full
//! pass does the work as before.

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::Client;

use crate::api::ObjectRef;
use crate::apply::apply::{apply_batch, ApplyOptions};
use crate::apply::changeset::{Action, Change};
use crate::apply::ignore::{respect_other_managers, SCALERS};
use crate::apply::plan::{self, Decision, PlannedObject, UpdateReason};
use crate::pass::prepare::prepare;
use crate::pass::PassSettings;
use crate::render::{AgentLayer, DesiredObject, DesiredSet, Owner, CUSTOM_RESOURCE_KINDS};
use crate::source::git::ChangedFiles;
use crate::source::Snapshot;

/// At most this many changed files take the early path.
pub const MAX_FILES: usize = 20;
/// At most this many objects are written early.
pub const MAX_OBJECTS: usize = 200;

/// What the previous pass rendered: what its files were (let go once the changed files are
/// known), this shard's part and the other shards'.
pub struct Previous<'a> {
    pub files: PreviousFiles,
    pub set: &'a DesiredSet,
    pub elsewhere: &'a DesiredSet,
}

/// The previous revision's files, or what git says changed since them.
pub enum PreviousFiles {
    /// The previous files themselves (a directory's, compared with the new ones).
    Snapshot(Arc<Snapshot>),
    /// The files a git source's trees say were added or modified since the previous revision
    /// (no file of it is read again); `None` when more than [`MAX_FILES`] changed.
    Changed(Option<ChangedFiles>),
}

/// Apply the objects a push changed in a few plain-manifest files (see the module docs); the
/// changes written (each `configured`, with why). Empty when the early path does not apply or
/// nothing needed it.
pub async fn changed_first(
    client: &Client,
    previous: Previous<'_>,
    next: &Snapshot,
    settings: &PassSettings,
) -> Vec<Change> {
    let Previous {
        files,
        set,
        elsewhere,
    } = previous;
    let changed = match files {
        PreviousFiles::Snapshot(snapshot) => changed_files(&snapshot, next),
        PreviousFiles::Changed(changed) => changed.and_then(|c| {
            let ChangedFiles { files, in_chart } = c;
            admissible(files, next, |_| in_chart)
        }),
    };
    let Some(changed) = changed else {
        return Vec::new();
    };
    let partial = Snapshot {
        revision: next.revision.clone(),
        files: changed
            .iter()
            .filter_map(|p| next.files.get(p).map(|b| (p.clone(), b.clone())))
            .collect(),
    };
    let rendered = match prepare(partial, None, AgentLayer::Excluded, settings).await {
        Ok(p) => p.set,
        Err(e) => {
            tracing::debug!(error = %e, "the changed files do not load on their own; the full pass decides");
            return Vec::new();
        }
    };
    let Some(writes) = to_write(&rendered, set, elsewhere, &changed) else {
        return Vec::new();
    };
    if writes.is_empty() {
        return Vec::new();
    }
    match apply_as_the_pass(client, &writes, settings).await {
        Ok(applied) => {
            tracing::info!(
                objects = applied.len(),
                files = changed.len(),
                "applied the pushed changes ahead of the full pass"
            );
            applied
        }
        Err(why) => {
            tracing::debug!("{why}; the full pass decides");
            Vec::new()
        }
    }
}

/// Apply `writes` as the full pass would (see the module docs): the fields other managers own
/// keep their live values, and only objects this root already holds, with no other root
/// declaring them, that the pass would update because they changed (or drifted) are written, by
/// the pass's own apply. The changes written; `Err` says why nothing was.
async fn apply_as_the_pass(
    client: &Client,
    writes: &[DesiredObject],
    settings: &PassSettings,
) -> Result<Vec<Change>, String> {
    let mut refs: BTreeSet<ObjectRef> = writes.iter().map(|d| d.object_ref()).collect();
    // The scalers' kinds too: their targets keep the replicas the scaler set.
    refs.extend(SCALERS.iter().map(|(api_version, kind, _)| ObjectRef {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        namespace: String::new(),
        name: String::new(),
    }));
    let catalog = plan::Catalog::of_kinds(client, &refs)
        .await
        .map_err(|e| format!("discovery for the early apply failed: {e}"))?;
    let mut planned = match plan::resolve(writes, &[], &catalog, &settings.default_namespace) {
        Ok(r) if r.pending_crd.is_empty() => r.planned,
        _ => return Err("a kind of the changed objects is not served".into()),
    };
    respect_other_managers(client, &catalog, &mut planned)
        .await
        .map_err(|e| format!("reading the fields other managers own failed: {e}"))?;
    // A few objects: read by name, not by listing their kind (a LIST in the namespace of a
    // root of 100,000 ConfigMaps paged through all of them for one changed object).
    let live = plan::read_by_name(client, &planned, settings.concurrency)
        .await
        .map_err(|e| format!("reading the live objects failed: {e}"))?;
    // Anything else (an object to create, adopt or take over; one another root holds or claims)
    // is the full pass's, with its write-ahead inventory and its conflict report.
    // (A copy: `live` borrows the plan. The early path takes a few changed files.)
    let planned: Vec<PlannedObject> = planned
        .iter()
        .filter(|p| {
            live.conflict(p).is_none()
                && matches!(
                    live.decide(p),
                    Decision::Update(UpdateReason::Changed | UpdateReason::Drifted { .. })
                )
        })
        .cloned()
        .collect();
    let opts = ApplyOptions {
        concurrency: settings.concurrency,
        dry_run: false,
    };
    let (changes, errors) =
        apply_batch(client, &planned, &live, &opts, &BTreeMap::new(), &|_| {}).await;
    for e in errors {
        tracing::debug!(error = %e, "early apply failed; the full pass applies it");
    }
    Ok(changes
        .entries
        .into_iter()
        .filter(|c| matches!(c.action, Action::Configured))
        .collect())
}

/// The files `next` changed or added since `previous`, if the early path may take them.
fn changed_files(previous: &Snapshot, next: &Snapshot) -> Option<BTreeSet<String>> {
    let changed: BTreeSet<String> = next
        .files
        .iter()
        .filter(|(path, bytes)| previous.files.get(*path) != Some(*bytes))
        .map(|(path, _)| path.clone())
        .collect();
    admissible(changed, next, |p| in_chart_dir(p, previous))
}

/// `changed`, if the early path may take them: a few plain YAML files, none of them in a chart's
/// directory now (`next`) or before (`was_in_chart`).
fn admissible(
    changed: BTreeSet<String>,
    next: &Snapshot,
    was_in_chart: impl Fn(&str) -> bool,
) -> Option<BTreeSet<String>> {
    if changed.is_empty() || changed.len() > MAX_FILES {
        return None;
    }
    let plain = changed.iter().all(|p| {
        (p.ends_with(".yaml") || p.ends_with(".yml")) && !in_chart_dir(p, next) && !was_in_chart(p)
    });
    plain.then_some(changed)
}

/// Is `path` inside a directory that holds a `Chart.yaml` (itself included)?
fn in_chart_dir(path: &str, snapshot: &Snapshot) -> bool {
    let mut dir = path;
    while let Some((parent, _)) = dir.rsplit_once('/') {
        if snapshot.files.contains_key(&format!("{parent}/Chart.yaml")) {
            return true;
        }
        dir = parent;
    }
    path.ends_with("Chart.yaml") || snapshot.files.contains_key("Chart.yaml")
}

fn from(d: &DesiredObject, files: &BTreeSet<String>) -> bool {
    d.origin.as_ref().is_some_and(|o| files.contains(&o.file))
}

/// The objects of `rendered` to write early, or `None` when the early path must not be taken.
/// `previous` is what the previous pass rendered of this shard, `elsewhere` the other shards'.
fn to_write(
    rendered: &DesiredSet,
    previous: &DesiredSet,
    elsewhere: &DesiredSet,
    changed: &BTreeSet<String>,
) -> Option<Vec<DesiredObject>> {
    let objects = rendered.objects();
    let plain = rendered.hooks().is_empty()
        && rendered.failures().is_empty()
        && objects.iter().all(|d| {
            matches!(
                d.owner,
                Owner {
                    kind: OwnerKind::Root,
                    ..
                }
            ) && !CUSTOM_RESOURCE_KINDS.contains(&d.kind())
                && !matches!(d.kind(), "CustomResourceDefinition" | "Namespace")
        });
    if !plain {
        return None;
    }
    // What those files held before, in this shard's part.
    let before: BTreeMap<ObjectRef, Option<&str>> = previous
        .objects()
        .iter()
        .filter(|d| from(d, changed))
        .map(|d| (d.object_ref(), d.object.applied_hash()))
        .collect();
    // A name another file (or another shard's file) has: the full load refuses the duplicate.
    let new: BTreeSet<ObjectRef> = objects
        .iter()
        .map(DesiredObject::object_ref)
        .filter(|r| !before.contains_key(r))
        .collect();
    if !new.is_empty() {
        let others = previous.objects().iter().chain(elsewhere.objects());
        if others
            .filter(|d| !from(d, changed))
            .any(|d| new.contains(&d.object_ref()))
        {
            return None;
        }
    }
    let writes: Vec<DesiredObject> = objects
        .iter()
        .filter(|d| {
            before
                .get(&d.object_ref())
                .is_some_and(|old| *old != d.object.applied_hash())
        })
        .cloned()
        .collect();
    (writes.len() <= MAX_OBJECTS).then_some(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(files: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            revision: Some("r".into()),
            files: files
                .iter()
                .map(|(p, b)| (p.to_string(), b.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[test]
    fn only_a_few_changed_manifest_files_outside_charts_take_the_early_path() {
        let before = snapshot(&[
            ("apps/a.yaml", "a"),
            ("apps/b.yaml", "b"),
            ("charts/web/Chart.yaml", "c"),
            ("charts/web/values.yaml", "v"),
        ]);
        let next = snapshot(&[
            ("apps/a.yaml", "a2"),
            ("apps/b.yaml", "b"),
            ("apps/c.yaml", "c"),
            ("charts/web/Chart.yaml", "c"),
            ("charts/web/values.yaml", "v"),
        ]);
        assert_eq!(
            changed_files(&before, &next),
            Some(BTreeSet::from(["apps/a.yaml".into(), "apps/c.yaml".into()]))
        );
        // Nothing changed, a chart's file, a file that is not YAML: the full pass only.
        assert_eq!(changed_files(&before, &before), None);
        let chart = snapshot(&[
            ("apps/a.yaml", "a"),
            ("apps/b.yaml", "b"),
            ("charts/web/Chart.yaml", "c"),
            ("charts/web/values.yaml", "v2"),
        ]);
        assert_eq!(changed_files(&before, &chart), None);
        let other = snapshot(&[
            ("apps/a.yaml", "a"),
            ("apps/b.yaml", "b"),
            ("apps/notes.txt", "x"),
            ("charts/web/Chart.yaml", "c"),
            ("charts/web/values.yaml", "v"),
        ]);
        assert_eq!(changed_files(&before, &other), None);
        let many: Vec<(String, String)> = (0..=MAX_FILES)
            .map(|i| (format!("apps/f{i}.yaml"), "x".to_string()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(p, b)| (p.as_str(), b.as_str())).collect();
        assert_eq!(changed_files(&before, &snapshot(&many)), None);
    }
}
