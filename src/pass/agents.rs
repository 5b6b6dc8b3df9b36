//! What a WeaveCloud's agents are rendered from besides the WeaveCloud itself, read from the
//! cluster the same way by `weft sync`, the WeaveCloud controller and the updater, so that all
//! three render the same objects: the agent bundle it runs (kept in a ConfigMap in Weft's
//! namespace), the hash of its token Secret, and the arguments of a flux agent already running.

use crate::api::keys::{BUNDLE_OF_LABEL, OWNER_LABEL, OWNER_REF_ANNOTATION};
use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::weavecloud::WeaveCloud;
use crate::apply::FIELD_MANAGER;
use crate::render::bundle::{Bundle, BundleError};
use crate::render::ownership::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::render::weavecloud::{
    parse_flux_args, parse_memcached_args, runtime_socket, secret_data_hash, AgentInputs,
    MEMCACHED_CONTAINER, MEMCACHED_DEPLOYMENT,
};
use crate::render::Owner;
use crate::source::channel::{sha256_hex, unpack_archive, ChannelLimits};

/// Why the agents' inputs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AgentsError {
    #[error("the built-in agent bundle: {0}")]
    Builtin(BundleError),
    #[error("cached agent bundle ConfigMap {namespace}/{name}: {message}")]
    Cache {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("{action}: {}", crate::apply::describe(source).0)]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// The bundle's archive is too large for the cache ConfigMap: rolling it out would leave
    /// nothing to come back to after a restart but an older version.
    #[error("agent bundle {version} is {bytes} bytes as an archive, more than the {limit} bytes Weft can keep in its cache ConfigMap (the API server refuses objects over 1 MiB); it is not rolled out, so that a restart cannot take the agents back to an older version: publish a smaller archive")]
    TooLargeToCache {
        version: semver::Version,
        bytes: usize,
        limit: usize,
    },
    /// An object the agents need exists and belongs to another owner: never adopted.
    #[error("{object} belongs to {other}, not to {owner}: Weft never adopts another owner's object (two WeaveClouds, or a WeaveCloud and the config repository, name the same object); rename or remove one of them")]
    OwnedByAnother {
        object: String,
        owner: String,
        other: String,
    },
    /// The token Secret (or its key) does not exist: the agents cannot authenticate.
    #[error("Secret {namespace}/{name} with key `{key}` does not exist: the agents cannot authenticate. Create it (kubectl -n {namespace} create secret generic {name} --from-literal={key}=<token>)")]
    TokenMissing {
        namespace: String,
        name: String,
        key: String,
    },
    /// The launcher's agents run in kube-system and this WeaveCloud may not take them over:
    /// applying its agents would run each twice (a node exporter that can never schedule on
    /// port 9100 among them), so none is applied.
    #[error("WeaveCloud {namespace}/{name}: the Weave Cloud launcher's agents run in kube-system ({objects}); none of this WeaveCloud's agents is applied, so that none runs twice: add --launcher-takeover {namespace}/{name} (or WEFT_LAUNCHER_TAKEOVER={namespace}/{name}) to weft sync or weft run to take them over")]
    LauncherInKubeSystem {
        namespace: String,
        name: String,
        objects: String,
    },
    /// The launcher's flux has what Weft cannot carry over, and the WeaveCloud does not
    /// acknowledge leaving it: a takeover would migrate a broken flux, so none is done.
    #[error("WeaveCloud {weavecloud}: the launcher's flux has what Weft cannot carry over: {items}; nothing was taken over or applied: carry it another way (spec.flux.env, spec.flux.volumes) or acknowledge leaving it with spec.flux.acknowledgeDropped: [{acknowledge}]")]
    TakeoverWouldDrop {
        /// `namespace/name`.
        weavecloud: String,
        items: String,
        acknowledge: String,
    },
    /// The takeover's record of the launcher's flux cannot be read (issue 48 item 1).
    #[error(transparent)]
    TakeoverRecord(#[from] super::takeover::record::RecordError),
}

fn kube_err(action: impl Into<String>, source: kube::Error) -> AgentsError {
    AgentsError::Kube {
        action: action.into(),
        source,
    }
}

/// binaryData key of the cached bundle archive (`.tar.gz`).
pub const ARCHIVE_KEY: &str = "bundle.tar.gz";
/// data key: the cached bundle's version.
pub const VERSION_KEY: &str = "version";
/// data key: sha256 of the cached archive.
pub const DIGEST_KEY: &str = "sha256";
/// data key: where the bundle came from (the channel URL, passwords redacted).
pub const SOURCE_KEY: &str = "source";
/// What [`SOURCE_KEY`] says for the bundle built into Weft.
pub const BUILTIN_SOURCE: &str = "builtin";

/// Largest archive kept in a ConfigMap (the API server refuses objects over 1 MiB).
pub const MAX_CACHED_ARCHIVE_BYTES: usize = 900 * 1024;

/// A bundle a WeaveCloud runs, with what is needed to keep it in the cluster.
#[derive(Clone, Debug)]
pub struct ActiveBundle {
    pub bundle: Arc<Bundle>,
    /// The archive as fetched; `None` for the built-in bundle.
    pub archive: Option<Arc<Vec<u8>>>,
    /// sha256 of the archive; `None` for the built-in bundle.
    pub sha256: Option<String>,
    /// The channel it came from, or [`BUILTIN_SOURCE`].
    pub source: String,
}

impl ActiveBundle {
    /// The bundle built into Weft.
    pub fn builtin() -> Result<ActiveBundle, AgentsError> {
        let bundle = Bundle::builtin().map_err(AgentsError::Builtin)?;
        Ok(ActiveBundle {
            bundle: Arc::new(bundle.clone()),
            archive: None,
            sha256: None,
            source: BUILTIN_SOURCE.to_string(),
        })
    }

    /// The bundle's version.
    pub fn version(&self) -> &semver::Version {
        &self.bundle.version
    }

    /// Whether [`AgentBundles::persist`] can keep this bundle in its ConfigMap: the one size
    /// rule of the cache, checked by the updater before a roll-out and by the write itself, so
    /// the two cannot disagree. The built-in bundle is kept without an archive.
    pub fn check_cacheable(&self) -> Result<(), AgentsError> {
        match &self.archive {
            Some(archive) if archive.len() > MAX_CACHED_ARCHIVE_BYTES => {
                Err(AgentsError::TooLargeToCache {
                    version: self.version().clone(),
                    bytes: archive.len(),
                    limit: MAX_CACHED_ARCHIVE_BYTES,
                })
            }
            _ => Ok(()),
        }
    }
}

/// `(namespace, name)` of a WeaveCloud.
type WcKey = (String, String);

/// The owner of WeaveCloud `namespace/name`'s agents.
pub fn owner_of(namespace: &str, name: &str) -> Owner {
    Owner::resource(OwnerKind::WeaveCloud, namespace, name)
}

/// Name of the ConfigMap (in Weft's namespace) that keeps a WeaveCloud's bundle.
pub fn cache_configmap_name(namespace: &str, name: &str) -> String {
    format!("weft-agent-bundle-{}", owner_of(namespace, name).id())
}

/// The agent bundle of every WeaveCloud: what the WeaveCloud controller renders with, and what
/// an update changes. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct AgentBundles {
    client: Client,
    weft_namespace: String,
    active: Arc<RwLock<HashMap<WcKey, ActiveBundle>>>,
}

impl AgentBundles {
    /// A store whose cache ConfigMaps live in `weft_namespace`.
    pub fn new(client: Client, weft_namespace: impl Into<String>) -> AgentBundles {
        AgentBundles {
            client,
            weft_namespace: weft_namespace.into(),
            active: Arc::default(),
        }
    }

    /// The bundle WeaveCloud `namespace/name` runs: in memory, else the cached ConfigMap (a
    /// restarted Weft), else the built-in one. A damaged cached bundle is logged and the
    /// built-in one is used; an API error is returned (nothing is remembered).
    pub async fn active(&self, namespace: &str, name: &str) -> Result<ActiveBundle, AgentsError> {
        let key = (namespace.to_string(), name.to_string());
        if let Some(a) = self.memory(&key) {
            return Ok(a);
        }
        let loaded = match self.read_cache(namespace, name).await {
            Ok(Some(a)) => a,
            Ok(None) => ActiveBundle::builtin()?,
            // The API server could not be asked: do not fall back (and stick) to the built-in
            // bundle, which could be older than the one running; the caller retries.
            Err(e @ AgentsError::Kube { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(weavecloud = %format!("{namespace}/{name}"), error = %e,
                    "cannot use the cached agent bundle; using the built-in one");
                ActiveBundle::builtin()?
            }
        };
        let mut map = self.active.write().unwrap_or_else(|p| p.into_inner());
        // Another task may have set it meanwhile: that one is newer.
        Ok(map.entry(key).or_insert(loaded).clone())
    }

    fn memory(&self, key: &WcKey) -> Option<ActiveBundle> {
        self.active
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Remember `bundle` as the one WeaveCloud `namespace/name` runs (not persisted).
    pub fn set_memory(&self, namespace: &str, name: &str, bundle: ActiveBundle) {
        self.active
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.to_string(), name.to_string()), bundle);
    }

    /// Forget a deleted WeaveCloud and delete its cached bundle.
    pub async fn forget(&self, namespace: &str, name: &str) -> Result<(), AgentsError> {
        self.active
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(namespace.to_string(), name.to_string()));
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.weft_namespace);
        let cm = cache_configmap_name(namespace, name);
        match api.delete(&cm, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(e) if crate::apply::is_not_found(&e) => Ok(()),
            Err(e) => Err(kube_err(
                format!("deleting ConfigMap {}/{cm}", self.weft_namespace),
                e,
            )),
        }
    }

    async fn read_cache(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ActiveBundle>, AgentsError> {
        let cm_name = cache_configmap_name(namespace, name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.weft_namespace);
        let cm = api.get_opt(&cm_name).await.map_err(|e| {
            kube_err(
                format!("reading ConfigMap {}/{cm_name}", self.weft_namespace),
                e,
            )
        })?;
        let Some(cm) = cm else { return Ok(None) };
        let fail = |message: String| AgentsError::Cache {
            namespace: self.weft_namespace.clone(),
            name: cm_name.clone(),
            message,
        };
        let data = cm.data.unwrap_or_default();
        let source = data
            .get(SOURCE_KEY)
            .cloned()
            .unwrap_or_else(|| BUILTIN_SOURCE.to_string());
        let Some(archive) = cm.binary_data.and_then(|mut b| b.remove(ARCHIVE_KEY)) else {
            // The built-in bundle is recorded without an archive.
            return Ok(Some(ActiveBundle::builtin()?));
        };
        let archive = archive.0;
        let digest = sha256_hex(&archive);
        if let Some(recorded) = data.get(DIGEST_KEY) {
            if !recorded.eq_ignore_ascii_case(&digest) {
                return Err(fail(format!(
                    "`{ARCHIVE_KEY}` has sha256 {digest}, but `{DIGEST_KEY}` says {recorded}"
                )));
            }
        }
        let files = unpack_archive(&archive, &ChannelLimits::default(), &cm_name)
            .map_err(|e| fail(e.to_string()))?;
        let bundle = Bundle::from_files(files).map_err(|e| fail(e.to_string()))?;
        Ok(Some(ActiveBundle {
            bundle: Arc::new(bundle),
            archive: Some(Arc::new(archive)),
            sha256: Some(digest),
            source,
        }))
    }

    /// Keep `bundle` as WeaveCloud `namespace/name`'s bundle: in memory and in its ConfigMap.
    pub async fn persist(
        &self,
        namespace: &str,
        name: &str,
        bundle: &ActiveBundle,
    ) -> Result<(), AgentsError> {
        let cm_name = cache_configmap_name(namespace, name);
        let owner = owner_of(namespace, name);
        let mut binary = BTreeMap::new();
        bundle.check_cacheable()?;
        if let Some(archive) = &bundle.archive {
            binary.insert(ARCHIVE_KEY.to_string(), ByteString(archive.to_vec()));
        }
        let mut data = BTreeMap::new();
        data.insert(VERSION_KEY.to_string(), bundle.version().to_string());
        data.insert(SOURCE_KEY.to_string(), bundle.source.clone());
        if let Some(d) = &bundle.sha256 {
            data.insert(DIGEST_KEY.to_string(), d.clone());
        }
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": cm_name,
                "namespace": self.weft_namespace,
                // Not the owner label: the cache is never in an inventory, never pruned.
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, BUNDLE_OF_LABEL: owner.id().0},
                "annotations": {OWNER_REF_ANNOTATION: owner.reference()},
            },
            "data": data,
            // Server-side apply of `binaryData: {}` removes an archive kept before.
            "binaryData": binary,
        });
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.weft_namespace);
        api.patch(
            &cm_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await
        .map_err(|e| {
            kube_err(
                format!("writing ConfigMap {}/{cm_name}", self.weft_namespace),
                e,
            )
        })?;
        self.set_memory(namespace, name, bundle.clone());
        Ok(())
    }
}

/// The token Secret's data, or `None` when the Secret or its key is missing.
pub async fn token_data(
    client: &Client,
    wc: &WeaveCloud,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, kube::Error> {
    let r = &wc.spec.general.token_secret_ref;
    let api: Api<Secret> = Api::namespaced(client.clone(), &wc.namespace().unwrap_or_default());
    let Some(secret) = api.get_opt(&r.name).await? else {
        return Ok(None);
    };
    let data = crate::api::secret_bytes(secret);
    Ok(data.contains_key(&r.key).then_some(data))
}

/// The namespace of the launcher's installs before 2018 (docs/migrating-from-launcher.md).
pub const LAUNCHER_LEGACY_NAMESPACE: &str = "kube-system";

/// The args of container `container` (else the first container, as the launcher read it) of
/// Deployment `name` running now: in the WeaveCloud's namespace, else (with takeover, for the
/// WeaveCloud designated to take over kube-system: `legacy`) a launcher-labelled one in
/// `kube-system`; and whether Weft (this WeaveCloud) owns it.
async fn running_container_args(
    client: &Client,
    wc: &WeaveCloud,
    name: &str,
    container: &str,
    launcher_app: &str,
    legacy: bool,
) -> Result<Option<(Vec<String>, bool)>, kube::Error> {
    let ns = wc.namespace().unwrap_or_default();
    if ns == LAUNCHER_LEGACY_NAMESPACE && !legacy {
        return Ok(None);
    }
    let mut found = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt(name)
        .await?;
    let weft_runs_it = found.as_ref().is_some_and(|d| {
        d.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
    });
    if (found.is_none() || weft_runs_it)
        && wc.spec.general.takeover
        && legacy
        && ns != LAUNCHER_LEGACY_NAMESPACE
    {
        // A kube-system install is read only if the launcher labelled it so (never by name
        // alone). It wins over a flux Weft installed here before the takeover was asked for
        // (a first `weft sync` without `--launcher-takeover`): that one has no git settings,
        // the launcher's has them (issue 44 item 1).
        let launcher = Api::<Deployment>::namespaced(client.clone(), LAUNCHER_LEGACY_NAMESPACE)
            .get_opt(name)
            .await?
            .filter(|d| {
                d.labels().get("app").map(String::as_str) == Some(launcher_app)
                    && d.labels().get(MANAGED_BY_LABEL).map(String::as_str)
                        != Some(MANAGED_BY_VALUE)
            });
        if launcher.is_some() {
            found = launcher;
        }
    }
    let Some(d) = found else {
        return Ok(None);
    };
    let ours = d.labels().get(OWNER_LABEL).map(String::as_str)
        == Some(owner_of(&ns, &wc.name_any()).id().0.as_str());
    let containers = d
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers)
        .unwrap_or_default();
    let index = containers
        .iter()
        .position(|c| c.name == container)
        .unwrap_or(0);
    let args = containers
        .into_iter()
        .nth(index)
        .and_then(|c| c.args)
        .unwrap_or_default();
    Ok(Some((args, ours)))
}

/// The args of the flux container running now, and whether Weft (this WeaveCloud) owns it.
pub async fn running_flux(
    client: &Client,
    wc: &WeaveCloud,
    kind: &str,
    name: &str,
    container: &str,
    legacy: bool,
) -> Result<Option<(Vec<String>, bool)>, kube::Error> {
    if kind != "Deployment" || wc.spec.flux.disable {
        return Ok(None);
    }
    running_container_args(client, wc, name, container, "weave-flux", legacy).await
}

/// The args of the memcached running now (Weft's, or the launcher's), and whether Weft (this
/// WeaveCloud) owns it.
pub async fn running_memcached(
    client: &Client,
    wc: &WeaveCloud,
    legacy: bool,
) -> Result<Option<(Vec<String>, bool)>, kube::Error> {
    if wc.spec.flux.disable {
        return Ok(None);
    }
    running_container_args(
        client,
        wc,
        MEMCACHED_DEPLOYMENT,
        MEMCACHED_CONTAINER,
        "weave-flux",
        legacy,
    )
    .await
}

/// The CRI socket of the cluster's runtime, from the first node's `containerRuntimeVersion`
/// (as the launcher's installer chose it); `None` for Docker, or when there is no node.
/// Read only when scope runs without `containerRuntimeEndpoint`.
pub async fn detected_cri_socket(
    client: &Client,
    wc: &WeaveCloud,
) -> Result<Option<String>, kube::Error> {
    if wc.spec.scope.disable || wc.spec.scope.container_runtime_endpoint.is_some() {
        return Ok(None);
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await?;
    Ok(nodes
        .items
        .first()
        .and_then(|n| n.status.as_ref()?.node_info.as_ref())
        .and_then(|i| runtime_socket(&i.container_runtime_version))
        .map(str::to_string))
}

/// What `wc`'s agents are rendered from: the bundle it runs and the cluster inputs.
#[derive(Clone, Debug)]
pub struct AgentSources {
    pub bundle: ActiveBundle,
    pub inputs: AgentInputs,
    /// The running flux agent's arguments, and whether this WeaveCloud installed it (`false`:
    /// taken over from an agent Weft did not install).
    pub running_flux: Option<(Vec<String>, bool)>,
    /// What the takeover could not keep from the launcher's flux (`status.flux.dropped`).
    pub dropped: Vec<String>,
}

/// The cluster inputs of `wc`'s agents rendered with `bundle`: its token Secret's hash and the
/// arguments of the flux agent running now (with whether this WeaveCloud installed it).
/// [`AgentsError::TokenMissing`] when the token Secret (or its key) does not exist. The takeover
/// record is read from Weft's namespace `weft_namespace` only. `legacy`:
/// the WeaveCloud may read the launcher's agents in kube-system (see
/// [`super::takeover::designated`]).
pub async fn inputs(
    client: &Client,
    weft_namespace: &str,
    wc: &WeaveCloud,
    bundle: &Bundle,
    legacy: bool,
) -> Result<(AgentInputs, Option<(Vec<String>, bool)>, Vec<String>), AgentsError> {
    let ns = wc.namespace().unwrap_or_default();
    let secret_ref = &wc.spec.general.token_secret_ref;
    let token = token_data(client, wc)
        .await
        .map_err(|e| kube_err(format!("reading Secret {ns}/{}", secret_ref.name), e))?
        .ok_or_else(|| AgentsError::TokenMissing {
            namespace: ns.clone(),
            name: secret_ref.name.clone(),
            key: secret_ref.key.clone(),
        })?;
    let doubled = super::takeover::launcher_agents_in_kube_system(client, wc, legacy)
        .await
        .map_err(|e| kube_err("reading the launcher's agents in kube-system", e))?;
    if !doubled.is_empty() {
        return Err(AgentsError::LauncherInKubeSystem {
            namespace: ns,
            name: wc.name_any(),
            objects: doubled.join(", "),
        });
    }
    let flux = bundle.flux.container();
    let running = running_flux(client, wc, &flux.kind, &flux.name, &flux.container, legacy)
        .await
        .map_err(|e| kube_err(format!("reading the running flux agent in {ns}"), e))?;
    let memcached = running_memcached(client, wc, legacy)
        .await
        .map_err(|e| kube_err(format!("reading the running memcached in {ns}"), e))?;
    let detected_cri_socket = detected_cri_socket(client, wc)
        .await
        .map_err(|e| kube_err("reading the nodes' container runtime", e))?;
    // What was preserved from the agents that ran before is kept in `status.flux` before a
    // takeover removes them: when they are gone and Weft's own are not there (yet, or any more),
    // the status is the record, so that a takeover interrupted half-way loses nothing.
    let recorded = if running.is_none() || memcached.is_none() {
        recorded_flux_status(client, wc)
            .await
            .map_err(|e| kube_err(format!("reading WeaveCloud {ns}/{}", wc.name_any()), e))?
    } else {
        None
    };
    let recorded = recorded.unwrap_or_default();
    // What a takeover kept from the launcher's flux: captured from it while it runs, else
    // Weft's record of it, which outlives the WeaveCloud (`takeover::record`).
    let record = super::takeover::record::for_render(
        client,
        weft_namespace,
        wc,
        &flux.container,
        running.as_ref(),
        legacy,
    )
    .await?
    .unwrap_or_default();
    // What cannot be carried over stops the takeover unless the WeaveCloud acknowledges it
    // (issue 44 item 4): a proxied flux migrated without its proxy syncs nothing.
    if wc.spec.general.takeover && matches!(&running, Some((_, false))) {
        let unacknowledged: Vec<&String> = record
            .dropped
            .iter()
            .filter(|d| {
                !super::takeover::record::acknowledged(d, &wc.spec.flux.acknowledge_dropped)
            })
            .collect();
        if !unacknowledged.is_empty() {
            let acknowledge: Vec<String> = unacknowledged
                .iter()
                .map(|d| {
                    let words: Vec<&str> = d.splitn(3, ' ').take(2).collect();
                    format!("\"{}\"", words.join(" "))
                })
                .collect();
            return Err(AgentsError::TakeoverWouldDrop {
                weavecloud: format!("{ns}/{}", wc.name_any()),
                items: unacknowledged
                    .iter()
                    .map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                acknowledge: acknowledge.join(", "),
            });
        }
    }
    // Which flux settings win: the launcher's flux while it runs (it is what the user ran),
    // then the takeover's record (captured from it before it went), then the flux Weft runs, then
    // `status.flux`. The record beats Weft's own flux: a flux Weft installed before the takeover
    // was asked for has none of the launcher's settings, and would otherwise keep itself
    // that way at every pass (issue 44 item 1).
    let preserved_flux_args = match &running {
        Some((args, false)) => parse_flux_args(args),
        _ if !record.flux_args.is_empty() => parse_flux_args(&record.flux_args),
        Some((args, true)) => parse_flux_args(args),
        None => parse_flux_args(&recorded.preserved_args),
    };
    let preserved_memcached_args = match &memcached {
        Some((args, false)) => parse_memcached_args(args),
        _ if !record.memcached_args.is_empty() => parse_memcached_args(&record.memcached_args),
        Some((args, true)) => parse_memcached_args(args),
        None => parse_memcached_args(&recorded.preserved_memcached_args),
    };
    let mut inputs = AgentInputs {
        token_hash: Some(secret_data_hash(&token)),
        preserved_flux_args,
        preserved_memcached_args,
        detected_cri_socket,
        preserved_flux_extra_args: record.extra_flux_args(),
        preserved_flux_volumes: record.volumes.clone(),
        preserved_flux_mounts: record.volume_mounts.clone(),
        preserved_flux_env: record.env.clone(),
    };
    if wc.spec.flux.disable {
        inputs.preserved_flux_env.clear();
        inputs.preserved_flux_extra_args.clear();
        inputs.preserved_flux_volumes.clear();
        inputs.preserved_flux_mounts.clear();
    }
    Ok((inputs, running, record.dropped))
}

/// `status.flux` of `wc` as the API server has it now (a controller's copy may be older than
/// the write made just before a takeover); `None` when the WeaveCloud is gone or has none.
async fn recorded_flux_status(
    client: &Client,
    wc: &WeaveCloud,
) -> Result<Option<crate::api::weavecloud::FluxStatus>, kube::Error> {
    if wc.spec.flux.disable {
        return Ok(None);
    }
    let api: Api<WeaveCloud> = Api::namespaced(client.clone(), &wc.namespace().unwrap_or_default());
    Ok(api
        .get_opt(&wc.name_any())
        .await?
        .and_then(|w| w.status)
        .and_then(|s| s.flux))
}

/// Everything `wc`'s agents are rendered from: its active bundle and [`inputs`].
pub async fn gather(
    client: &Client,
    bundles: &AgentBundles,
    wc: &WeaveCloud,
    legacy: bool,
) -> Result<AgentSources, AgentsError> {
    let bundle = bundles
        .active(&wc.namespace().unwrap_or_default(), &wc.name_any())
        .await?;
    let (inputs, running_flux, dropped) =
        self::inputs(client, &bundles.weft_namespace, wc, &bundle.bundle, legacy).await?;
    Ok(AgentSources {
        bundle,
        inputs,
        running_flux,
        dropped,
    })
}

/// Refuse to adopt: each of `objects` (the agents of `owner`) that is not in `known` (the
/// owner's inventory, whose objects were its own) and exists with another owner's
/// `weft.io/owner` label is an error naming both owners. Objects without Weft's label (the
/// launcher's, which a takeover adopts) pass. One read per new object; none in a steady state.
pub async fn check_not_owned_by_another(
    client: &Client,
    owner: &Owner,
    objects: &[crate::render::DesiredObject],
    known: &std::collections::BTreeSet<crate::api::ObjectRef>,
) -> Result<(), AgentsError> {
    let id = owner.id().0;
    for o in objects {
        let namespace = o.namespace().unwrap_or_default();
        let listed = known
            .iter()
            .any(|k| k.kind == o.kind() && k.name == o.name() && k.namespace == namespace);
        if listed {
            continue;
        }
        let (group, version) = o
            .api_version()
            .split_once('/')
            .unwrap_or(("", o.api_version()));
        let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            group,
            version,
            o.kind(),
        ));
        let api: Api<kube::api::DynamicObject> = match o.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let shown = match o.namespace() {
            Some(ns) => format!("{}/{ns}/{}", o.kind(), o.name()),
            None => format!("{}/{}", o.kind(), o.name()),
        };
        let Some(live) = api
            .get_opt(o.name())
            .await
            .map_err(|e| kube_err(format!("reading {shown}"), e))?
        else {
            continue;
        };
        let Some(label) = live.labels().get(OWNER_LABEL) else {
            continue;
        };
        if *label == id {
            continue;
        }
        // The readable owner, bounded: the annotation is whatever the object's writer set.
        let other = live
            .annotations()
            .get(OWNER_REF_ANNOTATION)
            .map(|r| r.chars().take(200).collect::<String>())
            .unwrap_or_else(|| format!("owner {}", label.chars().take(63).collect::<String>()));
        return Err(AgentsError::OwnedByAnother {
            object: shown,
            owner: owner.reference(),
            other,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_archive(bytes: usize) -> ActiveBundle {
        ActiveBundle {
            archive: Some(Arc::new(vec![0; bytes])),
            sha256: Some("0".repeat(64)),
            source: "https://example.com/channel.yaml".into(),
            ..ActiveBundle::builtin().expect("the built-in bundle")
        }
    }

    #[test]
    fn the_cache_keeps_archives_up_to_its_limit_and_names_version_size_and_limit_above() {
        assert!(ActiveBundle::builtin().unwrap().check_cacheable().is_ok());
        assert!(with_archive(MAX_CACHED_ARCHIVE_BYTES)
            .check_cacheable()
            .is_ok());
        let big = with_archive(MAX_CACHED_ARCHIVE_BYTES + 1);
        let err = big.check_cacheable().expect_err("one byte over the limit");
        let message = err.to_string();
        let version = big.version().to_string();
        for part in [
            format!("agent bundle {version} "),
            format!("{} bytes", MAX_CACHED_ARCHIVE_BYTES + 1),
            format!("the {MAX_CACHED_ARCHIVE_BYTES} bytes"),
            "not rolled out".to_string(),
        ] {
            assert!(message.contains(&part), "{part:?} in {message}");
        }
    }
}
