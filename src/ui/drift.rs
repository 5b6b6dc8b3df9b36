//! The drift view: what `weft diff` shows, computed the same way (a server-side dry-run apply of
//! everything the repository renders, compared with the live objects, Secrets' values masked by
//! [`crate::apply::diff::unified`]), for the repository `weft ui` was started with. Without one,
//! the UI cannot know what the repository wants, and shows what the controllers reported as
//! drifted instead.

use crate::api::keys::{CREATE_ANNOTATION, OWNER_LABEL};
use std::sync::Arc;

use super::{Ui, UiError};
use crate::api::conditions::ConditionStatus;
use crate::api::WeaveCloud;
use crate::apply::diff::{self, ObjectDiff};
use crate::pass::agents::AgentBundles;
use crate::pass::engine::resolve_set;
use crate::pass::prepare::{prepare, ClusterInputs};
use crate::pass::PassSettings;
use crate::render::ownership::CREATE_IF_MISSING;
use crate::render::{AgentLayer, DesiredObject};
use crate::source::Snapshot;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;

/// Reads the repository to diff against (blocking: a git fetch or a directory read).
pub type ReadSnapshot = dyn Fn() -> Result<Snapshot, String> + Send + Sync;

/// The repository the drift view diffs against, and the pass settings of `weft diff`.
#[derive(Clone)]
pub struct DriftSource {
    /// Where it is, as shown on the page (redacted).
    pub location: String,
    pub read: Arc<ReadSnapshot>,
    pub settings: Arc<PassSettings>,
}

/// What the drift view shows: the objects of the repository that differ from the cluster.
pub struct DriftReport {
    /// The revision diffed.
    pub revision: String,
    pub diffs: Vec<ObjectDiff>,
    /// The charts that did not render (their objects cannot be diffed), each naming the
    /// template file and line.
    pub failed_charts: Vec<String>,
}

/// The dry-run diff of every object the repository renders whose reference (`Kind/namespace/
/// name`) contains `object` (all without it), as `weft diff` computes it. Unlike `weft diff`,
/// a chart that does not render leaves the others shown, and prunes are not listed.
pub async fn diffs(
    ui: &Ui,
    source: &DriftSource,
    object: Option<&str>,
) -> Result<DriftReport, UiError> {
    let read = source.read.clone();
    let snapshot = tokio::task::spawn_blocking(move || read())
        .await
        .map_err(|e| UiError::Drift(format!("reading the repository: {e}")))?
        .map_err(UiError::Drift)?;
    let settings = &source.settings;
    let client = ui.client();
    let bundles = AgentBundles::new(client.clone(), settings.weft_namespace.clone());
    let cluster = ClusterInputs {
        client,
        bundles: &bundles,
    };
    let prepared = prepare(snapshot, Some(cluster), AgentLayer::Included, settings).await?;
    let set = prepared.set;
    let failed_charts = set
        .failures()
        .iter()
        .map(|f| crate::api::redact::redact_url_passwords(&f.error.to_string()))
        .collect();
    let objects: Vec<DesiredObject> = set
        .objects()
        .iter()
        .filter(|o| object.is_none_or(|f| o.object_ref().to_string().contains(f)))
        .cloned()
        .collect();
    let objects = without_foreign_namespaces(ui, objects).await?;
    let catalog = ui.catalog().await?;
    let resolved = resolve_set(
        client,
        &objects,
        &set,
        &catalog,
        &settings.default_namespace,
    )
    .await?;
    let diffs = diff::diff_objects(
        client,
        &resolved.planned,
        &resolved.pending_crd,
        settings.concurrency,
    )
    .await?;
    Ok(DriftReport {
        revision: prepared.revision,
        diffs,
        failed_charts,
    })
}

/// `objects` without the Namespaces Weft only creates when missing (`weft.io/create:
/// if-missing`, Armada's release namespaces) that exist without its owner label: a pass leaves
/// them as they are, so they are not drift.
async fn without_foreign_namespaces(
    ui: &Ui,
    objects: Vec<DesiredObject>,
) -> Result<Vec<DesiredObject>, UiError> {
    let namespaces: kube::Api<Namespace> = kube::Api::all(ui.client().clone());
    let mut kept = Vec::with_capacity(objects.len());
    for o in objects {
        let r = o.object_ref();
        if r.kind == "Namespace" && r.api_version == "v1" {
            let if_missing = o
                .object
                .value()
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(CREATE_ANNOTATION))
                .and_then(serde_json::Value::as_str)
                == Some(CREATE_IF_MISSING);
            if if_missing {
                let live = namespaces
                    .get_opt(&r.name)
                    .await
                    .map_err(UiError::read(format!("Namespace {}", r.name)))?;
                if live.is_some_and(|n| !n.labels().contains_key(OWNER_LABEL)) {
                    continue;
                }
            }
        }
        kept.push(o);
    }
    Ok(kept)
}

/// A resource its controller reported as drifted.
#[derive(Clone, Debug)]
pub struct Reported {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub message: String,
}

/// The WeaveClouds with `Drifted=True` and the ArmadaCharts whose children differ from what was
/// applied (drift policy `report`).
pub async fn reported(ui: &Ui) -> Result<Vec<Reported>, UiError> {
    let armada = super::cluster::armada(ui).await?;
    let mut out = Vec::new();
    for c in &armada.charts {
        let Some(status) = &c.status else { continue };
        let drifted = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Drifted" && c.status == ConditionStatus::True);
        if status.inconsistent || drifted.is_some() {
            out.push(Reported {
                kind: "ArmadaChart",
                namespace: c.metadata.namespace.clone().unwrap_or_default(),
                name: c.metadata.name.clone().unwrap_or_default(),
                message: drifted
                    .map(|d| d.message.clone())
                    .unwrap_or_else(|| "its objects differ from what was applied".into()),
            });
        }
    }
    let api: kube::Api<WeaveCloud> = kube::Api::all(ui.client().clone());
    let clouds = match api.list(&Default::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(UiError::read("the WeaveClouds")(e)),
    };
    for wc in clouds {
        let drifted = wc.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Drifted" && c.status == ConditionStatus::True)
                .cloned()
        });
        if let Some(d) = drifted {
            out.push(Reported {
                kind: "WeaveCloud",
                namespace: wc.metadata.namespace.clone().unwrap_or_default(),
                name: wc.metadata.name.clone().unwrap_or_default(),
                message: d.message,
            });
        }
    }
    Ok(out)
}
