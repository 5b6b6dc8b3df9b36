//! Desired objects from the loaded repository: the sync root's own documents, the agents of each
//! WeaveCloud, the objects of each Armada chart; ownership labels; apply order. Pure functions.

pub mod armada;
pub mod bundle;
pub mod desired;
pub mod order;
pub mod output;
pub mod ownership;
pub mod patch;
pub mod shard;
pub mod weavecloud;

pub use crate::load::Doc;
use crate::load::{LoadedRepo, Origin};
pub use desired::{
    render_desired, render_parts, AgentLayer, DesiredSet, RenderInputs, RenderedParts,
    CUSTOM_RESOURCE_KINDS,
};
pub use ownership::{Owner, OwnerId, OwnerKind};

/// One object Weft wants in the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObject {
    /// The full object (apiVersion, kind, metadata, …) with ownership labels and annotations,
    /// as compact JSON. Shared: the plan and the daemon's kept render hold the same object, not
    /// copies ([`Doc::edit`] changes only its own copy).
    pub object: Doc,
    /// Who applies it and may prune it.
    pub owner: Owner,
    /// Deployment wave: objects of a later wave are applied after the earlier wave is ready
    /// (Armada groups and sequenced charts). 0 for the sync root and the agents.
    pub wave: u32,
    /// The document it came from, when it came from the repository directly.
    pub origin: Option<Origin>,
}

impl DesiredObject {
    pub fn api_version(&self) -> &str {
        self.object.api_version()
    }
    pub fn kind(&self) -> &str {
        self.object.kind()
    }
    pub fn name(&self) -> &str {
        self.object.name()
    }
    pub fn namespace(&self) -> Option<&str> {
        self.object.namespace()
    }
    /// The inventory reference of this object.
    pub fn object_ref(&self) -> crate::api::ObjectRef {
        crate::api::ObjectRef {
            api_version: self.api_version().to_string(),
            kind: self.kind().to_string(),
            namespace: self.namespace().unwrap_or("").to_string(),
            name: self.name().to_string(),
        }
    }
}

/// A Helm hook of an Armada chart (`helm.sh/hook`): never applied as a plain object and not in
/// any inventory. The pass runs it only when its chart is installed or upgraded (a pre-hook before
/// the chart's objects are applied, a post-hook after they are ready), waits for it, and deletes
/// it per its `helm.sh/hook-delete-policy`.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredHook {
    /// The hook object, with the chart's ownership labels and wave.
    pub object: DesiredObject,
    /// Its phases (only those Weft runs, see [`RUN_HOOK_PHASES`]), weight and delete policies.
    pub hook: crate::helm::Hook,
}

impl DesiredHook {
    /// Does the hook run before its chart's objects (`pre-install`/`pre-upgrade`) on an install
    /// (`upgrade` false) or an upgrade?
    pub fn runs(&self, pre: bool, upgrade: bool) -> bool {
        use crate::helm::HookPhase as P;
        let want = match (pre, upgrade) {
            (true, false) => P::PreInstall,
            (true, true) => P::PreUpgrade,
            (false, false) => P::PostInstall,
            (false, true) => P::PostUpgrade,
        };
        self.hook.phases.contains(&want)
    }
}

/// The hook phases Weft runs; other hooks (`pre-delete`, rollback) are dropped with a warning and
/// test hooks too (Weft runs no Helm tests).
pub const RUN_HOOK_PHASES: &[crate::helm::HookPhase] = &[
    crate::helm::HookPhase::PreInstall,
    crate::helm::HookPhase::PreUpgrade,
    crate::helm::HookPhase::PostInstall,
    crate::helm::HookPhase::PostUpgrade,
];

/// Why rendering failed. Nothing is applied or pruned after a render error (an Armada chart's
/// own error is a [`ChartFailure`] of the set instead: it stops its group, and nothing is pruned).
#[derive(Clone, Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{origin}: {message}")]
    At { origin: Origin, message: String },
    #[error("{0}")]
    Other(String),
}

/// Options of a render that do not come from the repository.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    /// Name of the sync root (the owner of the repository's own documents).
    pub root_name: String,
    /// Weft's own namespace: part of the sync root's identity.
    pub weft_namespace: String,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            root_name: "weft".to_string(),
            weft_namespace: "weft-system".to_string(),
        }
    }
}

/// The sync layer: the repository's own documents (plain manifests and the CRs), owned by the
/// sync root, with ownership labels, in apply order.
pub fn render_sync_layer(
    repo: &LoadedRepo,
    opts: &RenderOptions,
) -> Result<Vec<DesiredObject>, RenderError> {
    let owner = Owner::root(&opts.weft_namespace, &opts.root_name);
    let mut out = Vec::with_capacity(repo.len());
    for m in &repo.manifests {
        out.push(owner.adopt(m.value.value(), 0, Some(m.origin.clone())));
    }
    for wc in &repo.weaveclouds {
        let value = serde_json::to_value(&wc.value).map_err(|e| RenderError::At {
            origin: wc.origin.clone(),
            message: format!("cannot serialise WeaveCloud: {e}"),
        })?;
        out.push(owner.adopt(value, 0, Some(wc.origin.clone())));
    }
    for (value, origin) in armada::sync_documents(&repo.armada)? {
        out.push(owner.adopt(value, 0, Some(origin)));
    }
    order::sort(&mut out);
    Ok(out)
}

/// Both layers, offline: the sync layer plus every CR's children, in apply order (what
/// `weft render` prints without fetched charts). See [`render_desired`].
pub fn render_all(
    repo: &LoadedRepo,
    opts: &RenderOptions,
) -> Result<Vec<DesiredObject>, RenderError> {
    render_desired(repo, &RenderInputs::default(), opts)
}
