//! What `weft install` does in the cluster: server-side apply of Weft's own manifests, one by
//! one, each said as created, configured or unchanged, then the wait for the daemon's
//! Deployment to become available. The command line builds the manifests from its flags and
//! prints; this file makes the API calls.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, Patch};
use kube::Client;
use serde_json::Value;

use crate::api::ObjectRef;
use crate::apply::apply::apply_params;
use crate::apply::plan::Catalog;
use crate::apply::readiness::{self, Readiness};
use crate::apply::ApplyError;

/// The name of the daemon's Deployment in deploy/20-deployment.yaml.
pub const DEPLOYMENT: &str = "weft";

/// What installing went wrong on. Each names the object.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// API discovery failed.
    #[error(transparent)]
    Discovery(#[from] ApplyError),
    /// A manifest's kind is not served (a CRD left out with `--skip-crds`, an old cluster).
    #[error("the cluster has no kind `{kind}` in `{api_version}`")]
    UnknownKind { api_version: String, kind: String },
    /// Reading an object before applying it, or the Deployment while waiting, failed.
    #[error("reading {object}")]
    Read {
        object: String,
        #[source]
        source: kube::Error,
    },
    /// The API server refused an apply.
    #[error("apply {object}: {}", crate::apply::describe(.source).0)]
    Apply {
        /// Boxed: the error enum stays small.
        object: Box<ObjectRef>,
        #[source]
        source: kube::Error,
    },
    /// The Deployment the API server returned could not be read as JSON.
    #[error("Deployment {DEPLOYMENT}: cannot read it: {0}")]
    Decode(#[source] serde_json::Error),
}

/// What one apply did, by the object's resourceVersion before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Created,
    Configured,
    Unchanged,
}

impl Applied {
    /// `created`, `configured` or `unchanged`, as `weft install` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Applied::Created => "created",
            Applied::Configured => "configured",
            Applied::Unchanged => "unchanged",
        }
    }
}

/// The reference of a manifest (`?` for what it lacks: deploy/'s all have a kind and a name).
pub fn object_of(o: &Value) -> ObjectRef {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    ObjectRef {
        api_version: text(&o["apiVersion"]),
        kind: text(&o["kind"]),
        namespace: o["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        name: text(&o["metadata"]["name"]),
    }
}

/// The kinds the cluster serves (what [`apply`] resolves manifests with).
pub async fn discover(client: &Client) -> Result<Catalog, InstallError> {
    Ok(Catalog::discover(client).await?)
}

/// Server-side apply (field manager `weft`) of one manifest; `dry_run`: the API server checks
/// it and stores nothing.
pub async fn apply(
    client: &Client,
    catalog: &Catalog,
    o: &Value,
    dry_run: bool,
) -> Result<Applied, InstallError> {
    let api_version = o["apiVersion"].as_str().unwrap_or_default();
    let kind = o["kind"].as_str().unwrap_or_default();
    let Some((resource, namespaced)) = catalog.resolve(api_version, kind) else {
        return Err(InstallError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    };
    let object = object_of(o);
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match o["metadata"]["namespace"].as_str() {
        Some(ns) if *namespaced => Api::namespaced_with(client.clone(), ns, &**resource),
        _ => Api::all_with(client.clone(), &**resource),
    };
    let before = api
        .get_opt(name)
        .await
        .map_err(|source| InstallError::Read {
            object: object.to_string(),
            source,
        })?;
    let mut params = apply_params();
    params.dry_run = dry_run;
    let after = api
        .patch(name, &params, &Patch::Apply(o))
        .await
        .map_err(|source| InstallError::Apply {
            object: Box::new(object),
            source,
        })?;
    Ok(match before {
        None => Applied::Created,
        Some(b) if b.metadata.resource_version == after.metadata.resource_version => {
            Applied::Unchanged
        }
        Some(_) => Applied::Configured,
    })
}

/// How the wait for the daemon's Deployment ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Every replica updated and ready.
    Ready,
    /// It will not become available by waiting; why.
    Failed(String),
    /// Still not available after the timeout; the last reason it gave.
    TimedOut(String),
}

/// Wait until the Deployment [`DEPLOYMENT`] of `namespace` is available, or `timeout` passes;
/// `waiting` is told each new reason it is not yet.
pub async fn wait_available(
    client: &Client,
    namespace: &str,
    timeout: Duration,
    mut waiting: impl FnMut(&str),
) -> Result<Availability, InstallError> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<Deployment>(&()),
    );
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let live = api
            .get(DEPLOYMENT)
            .await
            .map_err(|source| InstallError::Read {
                object: format!("Deployment {DEPLOYMENT}"),
                source,
            })?;
        let value = serde_json::to_value(&live).map_err(InstallError::Decode)?;
        match readiness::readiness("Deployment", &value) {
            Readiness::Ready => return Ok(Availability::Ready),
            Readiness::Failed(why) => return Ok(Availability::Failed(why)),
            Readiness::InProgress(why) => {
                if why != last {
                    waiting(&why);
                    last = why;
                }
            }
        }
        if start.elapsed() >= timeout {
            return Ok(Availability::TimedOut(last));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
