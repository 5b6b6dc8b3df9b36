//! The first half of every pass, the same for `weft render`, `validate`, `diff`, `sync` and the
//! daemon: load the snapshot, fetch the chart sources, render the Helm charts with helm
//! ([`super::helm`]), read the WeaveClouds' inputs from the cluster (when there is one), and render the desired set with [`DesiredSet::render`]. A failure
//! of any step is an error of the pass: nothing is applied or pruned.

use std::sync::Arc;

use kube::Client;

use super::agents::{self, AgentBundles, AgentsError};
use super::{PassError, PassSettings};
use crate::load::{self, Diagnostics, LoadedRepo};
use crate::render::{AgentLayer, DesiredSet, RenderInputs, RenderOptions};
use crate::source::chart::{self, ChartCache, ChartSources};
use crate::source::Snapshot;

/// The cluster a render reads its inputs from: the WeaveClouds' bundles, token hashes and
/// running flux arguments. Without one (offline), agents render with the built-in bundle.
#[derive(Clone, Copy)]
pub struct ClusterInputs<'a> {
    pub client: &'a Client,
    pub bundles: &'a AgentBundles,
}

/// A loaded and rendered revision.
#[derive(Debug)]
pub struct Prepared {
    /// The revision (`local` for a directory).
    pub revision: String,
    /// Warnings of the load (and of reading the cluster inputs).
    pub diagnostics: Diagnostics,
    /// Everything the pass applies, with its owners.
    pub set: DesiredSet,
}

/// Load `snapshot`, fetch its charts, read the cluster inputs of its WeaveClouds, render.
/// The snapshot is shared, not copied, and let go once rendered (a daemon keeps no files
/// between passes: the git source reads an unchanged head again).
pub async fn prepare(
    snapshot: impl Into<Arc<Snapshot>>,
    cluster: Option<ClusterInputs<'_>>,
    agent_layer: AgentLayer,
    settings: &PassSettings,
) -> Result<Prepared, PassError> {
    let snapshot: Arc<Snapshot> = snapshot.into();
    let revision = snapshot.revision_label();
    // The keys are read only for a revision that has SOPS files (a decryption Secret that is
    // missing does not stop a repository without any).
    let identities = if load::sops::needs_decryption(&snapshot) {
        settings
            .decryption
            .identities()
            .await
            .map_err(PassError::Decryption)?
    } else {
        Arc::default()
    };
    // The manifest that deploys is chosen while the Armada documents are loaded, before their
    // references are checked: a site's other manifests may list the same groups.
    let load_opts = load::LoadOptions {
        identities,
        target_manifest: settings.target_manifest.clone(),
        armada_values: settings.armada_values.clone(),
    };
    let (repo, mut diagnostics) =
        tokio::task::spawn_blocking(move || load::load_with(snapshot, &load_opts))
            .await
            .map_err(task("the loader"))??;
    let charts = resolve_charts(&repo, settings).await?;
    let capabilities = match cluster {
        Some(c) if !repo.armada.charts.is_empty() => {
            Some(super::helm::cluster_capabilities(c.client).await)
        }
        _ => None,
    };
    let mut helm =
        super::helm::render_helm_charts(&repo, &charts, &settings.helm, capabilities).await?;
    // A chart repository or registry that failed fails its chart alone, as helm would.
    let source_of = |key: &crate::api::ResourceKey| {
        repo.armada
            .chart_index(key)
            .map(|i| repo.armada.charts[i].origin_of("/source"))
            .unwrap_or_default()
    };
    for (key, failure) in &charts.failures {
        helm.failures.insert(
            key.clone(),
            crate::render::RenderError::At {
                origin: source_of(key),
                message: failure.message.clone(),
            },
        );
    }
    for (key, message) in &charts.warnings {
        diagnostics.warning(source_of(key), message.clone());
    }
    let mut inputs = RenderInputs {
        charts,
        helm: helm.renders,
        helm_failures: helm.failures,
        agent_layer,
        ..RenderInputs::default()
    };
    if let (Some(cluster), AgentLayer::Included) = (cluster, agent_layer) {
        for wc in &repo.weaveclouds {
            let key = (
                wc.value.metadata.namespace.clone().unwrap_or_default(),
                wc.value.metadata.name.clone().unwrap_or_default(),
            );
            let legacy =
                super::takeover::designated(settings.launcher_takeover.as_deref(), &key.0, &key.1);
            match agents::gather(cluster.client, cluster.bundles, &wc.value, legacy).await {
                Ok(sources) => {
                    inputs
                        .agents
                        .insert(key, (sources.bundle.bundle, sources.inputs));
                }
                // As the WeaveCloud controller would report it (`TokenMissing`); the agents are
                // rendered without the token's hash, so they roll when the Secret appears.
                Err(e @ AgentsError::TokenMissing { .. }) => {
                    diagnostics.warning(wc.origin.clone(), e.to_string());
                }
                Err(e) => return Err(PassError::Agents(e)),
            }
        }
    }
    let render_opts = RenderOptions {
        root_name: settings.root_name.clone(),
        weft_namespace: settings.weft_namespace.clone(),
    };
    let set = DesiredSet::render(repo, &inputs, &render_opts)?;
    for (origin, message) in set.warnings() {
        diagnostics.warning(origin.clone(), message.clone());
    }
    Ok(Prepared {
        revision,
        diagnostics,
        set,
    })
}

/// The source stage for charts: fetch every chart's files (git, tar) before the pure render.
pub async fn resolve_charts(
    repo: &LoadedRepo,
    settings: &PassSettings,
) -> Result<ChartSources, PassError> {
    if repo.armada.charts.is_empty() {
        return Ok(ChartSources::default());
    }
    let charts = repo.armada.chart_requests();
    let snapshot = repo.snapshot.clone();
    let location = settings.repo_location.clone();
    let cache_dir = settings
        .chart_cache_dir
        .clone()
        .unwrap_or_else(ChartCache::default_dir);
    let policy = settings.chart_sources.clone();
    let fetch = settings.chart_fetch.clone();
    tokio::task::spawn_blocking(move || {
        let cache = ChartCache::new(cache_dir)
            .with_policy(policy)
            .with_settings(fetch);
        chart::resolve(&charts, &snapshot, &location, &cache)
    })
    .await
    .map_err(task("the chart fetch"))?
    .map_err(PassError::ChartSource)
}

/// The error of a blocking `step` that panicked (or was cancelled): a [`PassError::Task`] that
/// says which step, not a render error.
fn task(step: &'static str) -> impl FnOnce(tokio::task::JoinError) -> PassError {
    move |source| PassError::Task { step, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn snapshot(files: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            revision: Some("0123456789abcdef0123456789abcdef01234567".into()),
            files: files
                .iter()
                .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
                .collect(),
        }
    }

    async fn rendered(files: &[(&str, &str)]) -> DesiredSet {
        let settings = PassSettings::default();
        prepare(snapshot(files), None, AgentLayer::Excluded, &settings)
            .await
            .expect("renders")
            .set
    }

    /// A daemon applies a render again for the same revision only when nothing but the files
    /// went into it (`DesiredSet::is_self_contained`): a WeaveCloud's render also reads the
    /// cluster, an encrypted file the decryption keys.
    #[tokio::test]
    async fn only_a_render_of_plain_files_is_self_contained() {
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: n\ndata:\n  k: v\n";
        let plain = rendered(&[("cm.yaml", cm)]).await;
        assert!(plain.is_self_contained());
        assert_eq!(plain.objects().len(), 1);
        // A part of a render never is: it is not the whole of what the files say.
        assert!(!plain.without_owners(&BTreeSet::new()).is_self_contained());

        let wc = "apiVersion: cloud.weave.works/v1beta1\nkind: WeaveCloud\nmetadata:\n  name: weave-cloud\n  namespace: weave\nspec:\n  general:\n    environment: gke\n";
        let with_wc = rendered(&[("cm.yaml", cm), ("wc.yaml", wc)]).await;
        assert!(!with_wc.is_self_contained());
    }

    #[tokio::test]
    async fn a_panicking_step_is_reported_as_a_panic_of_that_step() {
        let joined = tokio::task::spawn_blocking(|| -> u8 { panic!("boom") }).await;
        let error = joined.map_err(task("the loader")).unwrap_err();
        assert!(
            matches!(&error, PassError::Task { step: "the loader", source } if source.is_panic()),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.starts_with("the loader failed, nothing was applied or pruned: "),
            "{text}"
        );
        assert!(text.contains("panicked"), "{text}");
        assert!(!text.contains("render"), "{text}");
    }
}
