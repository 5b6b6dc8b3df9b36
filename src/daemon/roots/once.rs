//! One pass of a Root object's spec outside the controller (`weft sync root NAME`): read the
//! Root, refuse what the controller would not pass (suspended, a semver range, an identity it
//! may not take), act as its identity, read its credentials as that identity, fetch its source
//! and build its pass settings as [`super::reconcile`] does. The CLI keeps the arguments and
//! the printing; everything that calls the API is here.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::Client;

use super::identity::{identity_of, Identity};
use super::reconcile::root_settings;
use super::repository::RootSource;
use super::source::credentials_of;
use crate::api::kube_error::Text;
use crate::api::root::Root;
use crate::api::ResourceKey;
use crate::pass::PassSettings;
use crate::source::Snapshot;

/// A Root ready for its one pass.
pub struct Prepared {
    /// The client the pass calls through: Weft's own, or one impersonating the root's account.
    pub client: Client,
    /// The account the pass acts as, when the root names one.
    pub user: Option<String>,
    /// The revision fetched from the root's source.
    pub snapshot: Snapshot,
    /// The root's pass settings, as the controller builds them.
    pub settings: PassSettings,
}

/// Why no pass was run.
#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    /// Refused before anything was fetched: one line for a person, nothing applied or pruned.
    #[error("{0}")]
    Refused(String),
    /// The source could not be opened or fetched.
    #[error("{0}")]
    Source(String),
    /// The cluster's configuration could not be read to act as the root's account.
    #[error("{0}")]
    Config(String),
}

/// Where `weft sync root` connects and how long a fetch may take.
pub struct OnceOptions<'a> {
    pub weft_namespace: &'a str,
    pub kubeconfig: Option<&'a Path>,
    pub context: Option<&'a str>,
    pub fetch_timeout: Duration,
    pub dry_run: bool,
}

/// Read the Root `key` and prepare its one pass.
pub async fn prepare(
    client: &Client,
    key: &ResourceKey,
    options: &OnceOptions<'_>,
) -> Result<Prepared, OnceError> {
    let refused = |line: String| Err(OnceError::Refused(line));
    let api: Api<Root> = Api::namespaced(client.clone(), &key.namespace);
    let root = match api.get_opt(&key.name).await {
        Ok(Some(root)) => root,
        Ok(None) => {
            return refused(format!(
                "no Root {key} (`weft get roots -A` lists the roots); nothing was applied or pruned"
            ))
        }
        Err(e) => {
            return refused(format!(
                "reading the Root {key}: {}; nothing was applied or pruned",
                Text(&e)
            ))
        }
    };
    if root.spec.suspend && !options.dry_run {
        return refused(format!(
            "the Root {key} is suspended; nothing was applied or pruned (`weft resume root {} -n {}` first)",
            key.name, key.namespace
        ));
    }
    if let Some(range) = root
        .spec
        .source
        .git_ref
        .as_ref()
        .and_then(|r| r.semver.as_ref())
    {
        return refused(format!(
            "the Root {key} follows a semver range of tags (`{range}`), which `weft sync root` does not resolve; `weft trigger root {} -n {}` asks the daemon for a pass",
            key.name, key.namespace
        ));
    }
    let identity = match identity_of(&root, &key.namespace, options.weft_namespace, None) {
        Ok(i) => i,
        Err(why) => {
            return refused(format!(
                "the Root {key}: {}; nothing was applied or pruned",
                why.message
            ))
        }
    };
    // A root with an account acts as it here too: every call of the pass impersonates it.
    let user = identity.user();
    let pass_client = match &user {
        None => client.clone(),
        Some(user) => {
            let mut config = crate::apply::calls::config(options.kubeconfig, options.context)
                .await
                .map_err(|e| OnceError::Config(e.to_string()))?;
            config.auth_info.impersonate = Some(user.clone());
            Client::try_from(config).map_err(|e| OnceError::Config(Text(&e).to_string()))?
        }
    };
    let secret = match &root.spec.source.secret_ref {
        None => None,
        Some(r) => {
            let secrets: Api<Secret> = Api::namespaced(pass_client.clone(), &key.namespace);
            match secrets.get(&r.name).await {
                Ok(s) => Some((r.name.clone(), s)),
                Err(e) => {
                    return refused(format!(
                        "reading the credentials Secret {}/{}: {}; nothing was applied or pruned",
                        key.namespace,
                        r.name,
                        Text(&e)
                    ))
                }
            }
        }
    };
    let credentials = credentials_of(&secret, key).map_err(|f| OnceError::Source(f.message))?;
    let git_ref = root.spec.source.git_ref.as_ref().and_then(|r| r.as_flag());
    let source = RootSource::open(
        &root.spec.source.url,
        git_ref.as_deref(),
        root.spec.path.as_deref(),
        Some(
            crate::source::git::default_cache_dir()
                .join("roots")
                .join(&key.namespace)
                .join(&key.name),
        ),
        credentials,
        options.fetch_timeout,
    )
    .map_err(|e| OnceError::Source(format!("the Root {key}'s source: {e}")))?;
    let snapshot = match source.fetch(None).await {
        Ok(Some(s)) => Snapshot::clone(&s),
        Ok(None) => {
            return Err(OnceError::Source(format!(
                "the Root {key}'s repository gave no revision"
            )))
        }
        Err(e) => {
            return Err(OnceError::Source(format!(
                "fetching the Root {key}'s repository: {e}"
            )))
        }
    };
    let base = PassSettings {
        weft_namespace: options.weft_namespace.to_string(),
        ..PassSettings::default()
    };
    let own = identity == Identity::Weft;
    let settings = root_settings(&base, &root, key, own, &pass_client);
    Ok(Prepared {
        client: pass_client,
        user,
        snapshot,
        settings,
    })
}
