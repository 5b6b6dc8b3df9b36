//! One pass of a Root object's spec outside the controller (`weft sync root NAME`): read the
//! Root, refuse what the controller would not pass (suspended, a semver range, an identity it
//! may not take), act as its identity, read its credentials as that identity, fetch its source
//! and build its pass settings as [`super::reconcile`] does. The CLI keeps the arguments and
//! the printing; everything that calls the API is here.
//!
//! The flag form, `weft sync --repo … [--path …]`, passes the root of its flags, whose home is
//! the Root `--root-name` in Weft's namespace too: [`check_flag_sync`] refuses what a daemon
//! would refuse (the Root suspended, a live daemon leading the root, another source without
//! `--switch-repository`), and [`record_flag_sync`] leaves the outcome in that Root (creating it
//! from the flags as `weft run` does), so `weft get root` shows it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;

use super::flag::{self, FlagRoot, FlagRootError};
use super::identity::{identity_of, Identity};
use super::repository::RootSource;
use super::settings::root_settings;
use super::source::credentials_of;
use super::status::{self, Failure, PassOutcome, Verdict};
use crate::api::kube_error::Text;
use crate::api::root::{PassSummary, Root};
use crate::api::suspend::refuses_one_shot;
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
    pub snapshot: Arc<Snapshot>,
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
    let snapshot = match source.fetch(None, std::time::Instant::now(), false).await {
        Ok(fetched) => fetched.snapshot,
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

/// Why a one-shot `weft sync --repo …` of the flag root (the Root `--root-name` in Weft's
/// namespace) may not write: the same rules as a daemon's, on the Root's spec.
#[derive(Debug, thiserror::Error)]
pub enum FlagSyncError {
    /// The Root's `spec.suspend`.
    #[error("{0}")]
    Suspended(String),
    #[error("the root {root} is led by a live daemon ({holder} holds the Lease {namespace}/{lease} and renews it); a second writer would race it (objects deleted and recreated). Ask the daemon to run the pass: `weft trigger`; or, if that daemon is not syncing this root, pass --ignore-leader")]
    LedByDaemon {
        root: String,
        holder: String,
        namespace: String,
        lease: String,
    },
    /// The Root's spec names another source than the flags, and no `--switch-repository`.
    #[error("the root {} (the Root {key}) syncs {recorded}; this sync is from {given}. Switching a root to another source prunes everything the new one lacks: if that is intended, pass --switch-repository (else use another --root-name)", .key.name)]
    Differs {
        key: ResourceKey,
        recorded: String,
        given: String,
    },
    #[error("{0}")]
    Root(#[source] Box<FlagRootError>),
    #[error("cannot read the Leases of namespace {namespace}: {}", Text(.source))]
    Lease {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// Weft's namespace could not be created for the Root.
    #[error("recording the root {key}: {source}")]
    Namespace {
        key: ResourceKey,
        #[source]
        source: crate::apply::InventoryProblem,
    },
    #[error("cannot {action} the Root {key}: {}", Text(.source))]
    Api {
        key: ResourceKey,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl From<FlagRootError> for FlagSyncError {
    fn from(e: FlagRootError) -> Self {
        match e {
            FlagRootError::Differs {
                key,
                recorded,
                ours,
            } => FlagSyncError::Differs {
                key,
                recorded,
                given: ours,
            },
            other => FlagSyncError::Root(Box::new(other)),
        }
    }
}

/// Check, before a one-shot pass of the flag root writes anything, that it may: its Root (if
/// there is one) is not suspended, no live daemon leads the root (its leader Lease, unless
/// `ignore_leader`), and the Root syncs the flags' source (unless `switch`). The Root as it is,
/// `None` when there is none yet. A cluster without the Root CRD gets it, as a daemon does.
pub async fn check_flag_sync(
    client: &Client,
    flags: &FlagRoot,
    switch: bool,
    ignore_leader: bool,
) -> Result<Option<Root>, FlagSyncError> {
    let key = &flags.key;
    // Installs the Root CRD when it is missing; the source is compared below.
    let existing = if flag::check(client, flags, true).await? {
        read_root(client, key).await?
    } else {
        None
    };
    if let Some(why) = existing.as_ref().and_then(refuses_one_shot) {
        return Err(FlagSyncError::Suspended(why));
    }
    if !ignore_leader {
        check_no_live_leader(client, &key.namespace, &key.name).await?;
    }
    if existing.is_some() && !switch {
        flag::check(client, flags, false).await?;
    }
    if existing.is_none() && !switch {
        check_recorded_source(client, flags).await?;
    }
    Ok(existing)
}

/// A root that has no Root yet, synced or led before Roots: the repository its root record
/// names, else the source claim on its leader Lease (a daemon of an older version, alive or
/// not), must be the flags' (`--switch-repository` else), as the Root's spec would be.
async fn check_recorded_source(client: &Client, flags: &FlagRoot) -> Result<(), FlagSyncError> {
    use crate::daemon::leader::{claim_repository, same_repository, shown_repository};
    use k8s_openapi::api::coordination::v1::Lease;
    let key = &flags.key;
    let api_error = |action, source| FlagSyncError::Api {
        key: key.clone(),
        action,
        source,
    };
    let mut recorded = super::legacy::read(client, &key.namespace, &key.name)
        .await
        .map_err(|e| api_error("read the root record of", e))?
        .and_then(|cm| super::legacy::Record::of(&cm).repository);
    if recorded.is_none() {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &key.namespace);
        let lease = crate::daemon::leader::lease_name(&key.name);
        let params = kube::api::ListParams::default().fields(&format!("metadata.name={lease}"));
        recorded = leases
            .list(&params)
            .await
            .map_err(|source| FlagSyncError::Lease {
                namespace: key.namespace.clone(),
                source,
            })?
            .items
            .into_iter()
            .next()
            .and_then(|l| l.metadata.annotations)
            .and_then(|a| a.get(crate::api::keys::SOURCE_ANNOTATION).cloned())
            .map(|claim| claim_repository(&claim).to_string());
    }
    match recorded {
        Some(recorded) if !same_repository(&recorded, &flags.spec.source.url) => {
            Err(FlagSyncError::Differs {
                key: key.clone(),
                recorded: shown_repository(&recorded),
                given: shown_repository(&flags.spec.source.url),
            })
        }
        _ => Ok(()),
    }
}

async fn read_root(client: &Client, key: &ResourceKey) -> Result<Option<Root>, FlagSyncError> {
    let api: Api<Root> = Api::namespaced(client.clone(), &key.namespace);
    api.get_opt(&key.name)
        .await
        .map_err(|source| FlagSyncError::Api {
            key: key.clone(),
            action: "read",
            source,
        })
}

/// `Err` when a live daemon leads `root`: its leader Lease in `namespace` is held and renewed
/// while we watch it (see `daemon::liveness`; an absent or released Lease answers at once). The
/// Lease is read by a list with a field selector: the shipped Role lets Weft `get` only the
/// default root's Lease by name, but `list` every Lease of its namespace.
async fn check_no_live_leader(
    client: &Client,
    namespace: &str,
    root: &str,
) -> Result<(), FlagSyncError> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = crate::daemon::leader::lease_name(root);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={lease}"));
    let live = crate::daemon::liveness::live_holder(|| async {
        Ok::<_, kube::Error>(leases.list(&params).await?.items)
    })
    .await
    .map_err(|source| FlagSyncError::Lease {
        namespace: namespace.to_string(),
        source,
    })?;
    match live {
        None => Ok(()),
        Some(live) => Err(FlagSyncError::LedByDaemon {
            root: root.to_string(),
            holder: live.holder.chars().take(300).collect(),
            namespace: namespace.to_string(),
            lease,
        }),
    }
}

/// What a one-shot pass of the flag root ended with, for its Root's status.
pub struct FlagSyncPass<'a> {
    pub result: &'a crate::pass::PassResult,
    /// RFC 3339 start of the pass.
    pub started_at: String,
}

/// After a one-shot pass of the flag root: its Root says the outcome, as the controller's pass
/// would (`Ready`, the revisions, a pass entry with reason `weft sync`), so `weft get root(s)`
/// shows it. A pass that reached the cluster creates the Root from the flags when it is missing
/// (as `weft run` does, see [`flag::adopt`]) or switches its source (`switch`); a pass that
/// never reached it (the repository did not load or render) of a root that has no Root leaves
/// nothing: a typo'd repository is no root. `Ok(false)` then.
pub async fn record_flag_sync(
    client: &Client,
    flags: &FlagRoot,
    switch: bool,
    pass: &FlagSyncPass<'_>,
) -> Result<bool, FlagSyncError> {
    let key = &flags.key;
    let result = pass.result;
    let reached = result.set.is_some();
    if !reached && read_root(client, key).await?.is_none() {
        return Ok(false);
    }
    if reached {
        crate::apply::inventory::ensure_namespace(client, &key.namespace)
            .await
            .map_err(|source| FlagSyncError::Namespace {
                key: key.clone(),
                source,
            })?;
        flag::adopt(client, flags, switch).await?;
    }
    let Some(root) = read_root(client, key).await? else {
        return Ok(false);
    };
    let before = root.status.clone().unwrap_or_default();
    let now = crate::daemon::status::now_rfc3339();
    let mut after = status::next_status(
        &before,
        root.metadata.generation,
        &Verdict::Passed(Box::new(flag_sync_outcome(pass))),
        &now,
    );
    // A one-shot pass schedules no poll: the daemon's next poll stays as it was.
    after.next_poll_at.clone_from(&before.next_poll_at);
    let api: Api<Root> = Api::namespaced(client.clone(), &key.namespace);
    api.patch_status(
        &key.name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": after })),
    )
    .await
    .map_err(|source| FlagSyncError::Api {
        key: key.clone(),
        action: "write the status of",
        source,
    })?;
    Ok(true)
}

/// The outcome of a one-shot pass as the Root controller's pass says it.
fn flag_sync_outcome(pass: &FlagSyncPass<'_>) -> PassOutcome {
    let result = pass.result;
    let revision = Some(result.revision.clone()).filter(|r| !r.is_empty());
    let failure = result.error.as_ref().map(|e| {
        let reason = if e.conflicts().is_empty() {
            status::FAILED
        } else {
            super::conflict::CONFLICT
        };
        Failure::new(reason, e.to_string()).about(e.object())
    });
    let inventory = result.set.as_deref().map(status::inventory_counts);
    let conflicts = super::conflict::of_pass(result);
    let changed_objects: Vec<String> = result
        .changes
        .entries
        .iter()
        .filter(|c| {
            !matches!(
                c.action,
                crate::apply::changeset::Action::Unchanged
                    | crate::apply::changeset::Action::Skipped
            )
        })
        .map(|c| format!("{} {}", c.object, c.action.done()))
        .collect();
    let changed = changed_objects.len();
    PassOutcome {
        summary: PassSummary {
            reasons: vec!["weft sync".to_string()],
            started_at: pass.started_at.clone(),
            duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
            result: if failure.is_none() {
                "Succeeded"
            } else {
                "Failed"
            }
            .to_string(),
            revision: revision.clone(),
            changes: PassSummary::bounded_changes(&changed_objects),
        },
        failure,
        revision,
        inventory,
        changed,
        requested_at: None,
        next_poll_at: String::new(),
        conflicts,
        // An operator's one-shot pass is always recorded (it writes its status itself).
        first_here: true,
    }
}
