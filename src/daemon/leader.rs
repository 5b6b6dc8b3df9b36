//! Leader election on a `coordination.k8s.io/v1` Lease, written by hand (kube-runtime has none
//! and `kubert` would pull a second kube stack).
//!
//! The algorithm is client-go's: a replica takes the Lease when it is free (no holder, released) or
//! when its holder has not renewed it for `leaseDurationSeconds`, measured on *our* clock from when
//! we first saw the current record (so clock skew between replicas does not matter). Writes use the
//! Lease's resourceVersion, so two candidates racing for it cannot both win. A leader that cannot
//! renew within the renew deadline gives up leadership; on shutdown it releases the Lease so a
//! standby takes over at once.

use crate::api::keys::{HOOKS_URL_ANNOTATION, SOURCE_ANNOTATION, VERSION_ANNOTATION};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::apply::fence::WriteFence;

/// Why leader election failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot read or write Lease {namespace}/{name}: {}", crate::api::kube_error::Text(.source))]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The root record (which repository the root syncs) could not be read.
    #[error("cannot read the root record {namespace}/{name}: {}", crate::api::kube_error::Text(.source))]
    Record {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Another replica holds the Lease now.
    #[error("another replica took the leader Lease")]
    TakenOver,
    /// A live installation that syncs another repository holds this root's Lease.
    #[error("the sync root's Lease {namespace}/{name} is held by `{holder}`, a live installation that syncs `{theirs}` (this one syncs `{ours}`): two installations must not share a root. Give this one its own --root-name or --weft-namespace")]
    Claimed {
        namespace: String,
        name: String,
        holder: String,
        theirs: String,
        ours: String,
    },
    /// The root records another repository, and no live installation holds its Lease: taking
    /// it would switch the root without a word (what the new repository lacks is pruned).
    #[error("the root {root} syncs {recorded}; this daemon syncs {ours}. Switching a root to another repository prunes everything the new one lacks: if that is intended, start this daemon once with --switch-repository (as `weft sync --switch-repository`); else give it another --root-name")]
    Switch {
        root: String,
        recorded: String,
        ours: String,
    },
    /// The API server did not answer a Lease call in time.
    #[error("no answer about the Lease within {}ms", .0.as_millis())]
    Timeout(Duration),
    /// Renewing failed for longer than the renew deadline.
    #[error("could not renew the leader Lease for {}s: {source}", .deadline.as_secs())]
    NotRenewed {
        deadline: Duration,
        #[source]
        source: Box<LeaderError>,
    },
}

/// Timing and identity of an election.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Weft's namespace (`--weft-namespace`).
    pub weft_namespace: String,
    /// Name of the Lease (`weft-leader`).
    pub name: String,
    /// This replica's identity (pod name, or host name and process id).
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// How often candidates retry and leaders renew.
    pub retry_period: Duration,
    /// What this installation syncs (its repository, redacted, and path): recorded on the Lease
    /// ([`SOURCE_ANNOTATION`]) so that an installation of another repository that would share
    /// the root refuses to start instead of taking turns with this one.
    pub claim: Option<String>,
    /// The URL of this replica's hooks port, published on the Lease while it leads so that
    /// standbys forward webhooks and sync requests to it ([`HOOKS_URL_ANNOTATION`]).
    pub hooks_url: Option<String>,
    /// The root whose recorded repository is checked when the Lease is taken from no live
    /// holder (see [`LeaseConfig::switching`]); `None`: not checked.
    pub root: Option<String>,
    /// `--switch-repository`: this installation may switch the root to its repository.
    pub switch_repository: bool,
}

/// This build's version and commit: `0.1.0 (commit 3f2a9c1e0b7d)`.
pub fn build_version() -> String {
    format!(
        "{} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("WEFT_COMMIT")
    )
}

/// The Lease of the sync root `root_name`: `weft-leader` for the default root (as every release
/// before named it), `weft-leader-<root>` for the others, so that two roots in one namespace are
/// elected apart.
pub fn lease_name(root_name: &str) -> String {
    if root_name == "weft" {
        "weft-leader".to_string()
    } else {
        format!("weft-leader-{root_name}")
    }
}

/// What a daemon publishes on its leader Lease, as `weft version` reads it.
pub struct Published {
    /// The replica holding the Lease (`None`: nobody holds it).
    pub holder: Option<String>,
    /// The holder's version (`None`: a release before 0.1.0 published none).
    pub version: Option<String>,
}

/// The leader Lease of the sync root `root_name` in `namespace`; `None` when there is none.
pub async fn published(
    client: &Client,
    namespace: &str,
    root_name: &str,
) -> Result<Option<Published>, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .get_opt(&lease_name(root_name))
        .await?
        .map(|l| Published {
            holder: l
                .spec
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty()),
            version: l
                .metadata
                .annotations
                .and_then(|a| a.get(VERSION_ANNOTATION).cloned()),
        }))
}

impl LeaseConfig {
    /// client-go's proportions (15 s / 10 s / 2 s) scaled to `lease_duration`.
    pub fn new(weft_namespace: &str, identity: &str, lease_duration: Duration) -> Self {
        let lease_duration = lease_duration.max(Duration::from_secs(2));
        LeaseConfig {
            weft_namespace: weft_namespace.to_string(),
            name: "weft-leader".to_string(),
            identity: identity.to_string(),
            lease_duration,
            renew_deadline: lease_duration.mul_f64(2.0 / 3.0),
            retry_period: (lease_duration / 7).max(Duration::from_millis(200)),
            claim: None,
            hooks_url: None,
            root: None,
            switch_repository: false,
        }
    }

    /// The Lease of the sync root `root_name` (see [`lease_name`]).
    pub fn for_root(mut self, root_name: &str) -> Self {
        self.name = lease_name(root_name);
        self
    }

    /// The Lease `name` instead (a shard's, see [`crate::daemon::shards`]).
    pub fn named(mut self, name: String) -> Self {
        self.name = name;
        self
    }

    /// Record (and check) what this installation syncs.
    pub fn claiming(mut self, claim: Option<String>) -> Self {
        self.claim = claim;
        self
    }

    /// Check, when taking the Lease from no live holder (released by a SIGTERM, expired after a
    /// kill, absent), that `root` records this installation's repository: one rule with
    /// `weft sync`, which refuses another repository unless `--switch-repository`
    /// (`confirmed`).
    pub fn switching(mut self, root: &str, confirmed: bool) -> Self {
        self.root = Some(root.to_string());
        self.switch_repository = confirmed;
        self
    }

    /// Publish this URL of the hooks port while leading.
    pub fn publishing(mut self, hooks_url: Option<String>) -> Self {
        self.hooks_url = hooks_url;
        self
    }
}

/// The identity of this process: the pod name when set (`POD_NAME`, from the downward API), else
/// the host name, plus the process id so two daemons on one machine differ.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "weft".to_string());
    format!("{host}_{}", std::process::id())
}

/// One candidate in an election.
pub struct LeaderElector {
    api: Api<Lease>,
    /// For the root record (the repository it records).
    client: Client,
    cfg: LeaseConfig,
    /// The holder and renew time we last saw, and when we first saw them.
    observed: Option<(Option<String>, Option<MicroTime>, Instant)>,
    /// Opened until `sent + renew deadline` by each renewal, closed when leadership ends.
    fence: WriteFence,
}

impl LeaderElector {
    pub fn new(client: Client, cfg: LeaseConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client.clone(), &cfg.weft_namespace),
            client,
            cfg,
            observed: None,
            fence: WriteFence::unenforced(),
        }
    }

    /// Keep `fence` open exactly while this elector holds a fresh Lease.
    pub fn with_fence(mut self, fence: WriteFence) -> Self {
        self.fence = fence;
        self
    }

    /// One attempt bounded by `limit` (a Lease call must not hang past the renew deadline); when
    /// it takes the Lease, the fence opens until `sent + renew deadline`.
    async fn attempt(&mut self, limit: Duration) -> Result<bool, LeaderError> {
        let sent = Instant::now();
        let held = tokio::time::timeout(limit, self.try_acquire_or_renew())
            .await
            .map_err(|_| LeaderError::Timeout(limit))??;
        if held {
            self.fence.open_until(sent + self.cfg.renew_deadline);
        } else {
            self.fence.close();
        }
        Ok(held)
    }

    /// One bounded attempt to take or renew the Lease (see [`Self::try_acquire_or_renew`]);
    /// the fence opens when it is held.
    pub async fn attempt_once(&mut self) -> Result<bool, LeaderError> {
        self.attempt(self.cfg.renew_deadline).await
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    fn api_err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            namespace: self.cfg.weft_namespace.clone(),
            name: self.cfg.name.clone(),
            source,
        }
    }

    /// What the holder records on the Lease: what it syncs, and where its hooks port is (empty
    /// when it publishes none, so that a predecessor's URL does not linger).
    fn claim_annotations(&self) -> Option<std::collections::BTreeMap<String, String>> {
        let mut a = std::collections::BTreeMap::new();
        if let Some(claim) = &self.cfg.claim {
            a.insert(SOURCE_ANNOTATION.to_string(), claim.clone());
        }
        a.insert(
            HOOKS_URL_ANNOTATION.to_string(),
            self.cfg.hooks_url.clone().unwrap_or_default(),
        );
        a.insert(VERSION_ANNOTATION.to_string(), build_version());
        Some(a)
    }

    /// A live holder that syncs another repository: this installation must not run beside it.
    fn check_claim(&self, lease: &Lease, holder: &str) -> Result<(), LeaderError> {
        let (Some(ours), Some(theirs)) = (
            self.cfg.claim.as_deref(),
            lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SOURCE_ANNOTATION)),
        ) else {
            return Ok(());
        };
        if ours == theirs {
            return Ok(());
        }
        Err(LeaderError::Claimed {
            namespace: self.cfg.weft_namespace.clone(),
            name: self.cfg.name.clone(),
            holder: holder.to_string(),
            theirs: theirs.clone(),
            ours: ours.to_string(),
        })
    }

    /// Taking the Lease from no live holder: `Err` when the root records another repository than
    /// this installation's and the switch is not confirmed (see [`LeaseConfig::switching`]). The
    /// root record says which repository (a `weft sync`, or a daemon, wrote it), else the
    /// previous holder's source claim on the Lease.
    async fn check_switch(&self, lease: Option<&Lease>) -> Result<(), LeaderError> {
        let (Some(ours), Some(root)) = (self.cfg.claim.as_deref(), self.cfg.root.as_deref()) else {
            return Ok(());
        };
        if self.cfg.switch_repository {
            return Ok(());
        }
        let recorded = super::roots::legacy::read(&self.client, &self.cfg.weft_namespace, root)
            .await
            .map_err(|source| LeaderError::Record {
                namespace: self.cfg.weft_namespace.clone(),
                name: super::roots::legacy::record_name(root),
                source,
            })?
            .and_then(|cm| super::roots::legacy::Record::of(&cm).repository);
        let previous = recorded.or_else(|| {
            lease
                .and_then(|l| l.metadata.annotations.as_ref())
                .and_then(|a| a.get(SOURCE_ANNOTATION))
                .map(|claim| claim_repository(claim).to_string())
        });
        let ours = claim_repository(ours);
        match previous {
            Some(previous) if !same_repository(&previous, ours) => Err(LeaderError::Switch {
                root: root.to_string(),
                recorded: shown_repository(&previous),
                ours: shown_repository(ours),
            }),
            _ => Ok(()),
        }
    }

    /// Before anything else is checked or written: `Err` ([`LeaderError::Claimed`]) when a
    /// live installation of another repository holds the Lease (renewed within its duration by
    /// its own clock). Said first because it is the likelier mistake (two installations given
    /// one root) and names the other installation.
    pub async fn check_live_claim(&self) -> Result<(), LeaderError> {
        let Some(lease) = self
            .api
            .get_opt(&self.cfg.name)
            .await
            .map_err(|e| self.api_err(e))?
        else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let Some(holder) = spec
            .holder_identity
            .as_deref()
            .filter(|h| !h.is_empty() && *h != self.cfg.identity)
        else {
            return Ok(());
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.cfg.lease_duration, Duration::from_secs);
        let live = spec.renew_time.as_ref().is_some_and(|t| {
            let age = Timestamp::now().duration_since(t.0);
            age.as_secs() < i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
        });
        if live {
            self.check_claim(&lease, holder)?;
        }
        Ok(())
    }

    /// One attempt: take the Lease if it is free or expired, renew it if we hold it. `Ok(true)`
    /// when we hold it afterwards; `Ok(false)` when someone else does (or won a race).
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let now = MicroTime(Timestamp::now());
        let duration_secs = i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let existing = self
            .api
            .get_opt(&self.cfg.name)
            .await
            .map_err(|e| self.api_err(e))?;
        let Some(mut lease) = existing else {
            self.check_switch(None).await?;
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.weft_namespace.clone()),
                    annotations: self.claim_annotations(),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.cfg.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.api_err(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.clone());
        let observed_at = match &self.observed {
            Some((h, r, at)) if (h, r) == (&record.0, &record.1) => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((record.0.clone(), record.1.clone(), at));
                at
            }
        };
        let held_by_me = holder.as_deref() == Some(self.cfg.identity.as_str());
        if let Some(other) = holder.as_deref().filter(|_| !held_by_me) {
            let their_duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(self.cfg.lease_duration);
            if observed_at.elapsed() < their_duration {
                self.check_claim(&lease, other)?;
                tracing::debug!(
                    holder = other,
                    "the leader Lease is held by another replica"
                );
                return Ok(false);
            }
            tracing::info!(previous = other, "the leader Lease expired; taking it over");
        }
        if !held_by_me {
            self.check_switch(Some(&lease)).await?;
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(duration_secs),
            acquire_time: if held_by_me {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!held_by_me)),
            ..spec
        });
        if let Some(annotations) = self.claim_annotations() {
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .extend(annotations);
        }
        // replace() sends our resourceVersion: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.api_err(e)),
        }
    }

    /// Wait until we are the leader (`true`) or `stop` is cancelled (`false`); `Err` when a live
    /// installation of another repository holds the Lease ([`LeaderError::Claimed`]), or the
    /// root records another repository ([`LeaderError::Switch`]).
    pub async fn acquire(&mut self, stop: &CancellationToken) -> Result<bool, LeaderError> {
        let mut announced = false;
        loop {
            if stop.is_cancelled() {
                return Ok(false);
            }
            match self.attempt(self.cfg.renew_deadline).await {
                Ok(true) => return Ok(true),
                Err(e @ (LeaderError::Claimed { .. } | LeaderError::Switch { .. })) => {
                    return Err(e)
                }
                Ok(false) => {
                    if !announced {
                        tracing::info!(lease = %self.cfg.name, "standing by: another replica leads");
                        announced = true;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
                _ = stop.cancelled() => {}
            }
        }
    }

    /// Renew the Lease until `stop` is cancelled (return `Ok`; the Lease is still held, so the
    /// caller can finish its work and then [`release`](Self::release) it) or leadership is lost
    /// (return `Err` with why; another replica may lead now).
    pub async fn hold(&mut self, stop: &CancellationToken) -> Result<(), LeaderError> {
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
                _ = stop.cancelled() => {}
            }
            if stop.is_cancelled() {
                return Ok(());
            }
            // No attempt may outlive the renew deadline: past it, leadership is over anyway.
            let left = self
                .cfg
                .renew_deadline
                .saturating_sub(last_renew.elapsed())
                .max(Duration::from_millis(100));
            let sent = Instant::now();
            match self.attempt(left).await {
                Ok(true) => last_renew = sent,
                Ok(false) => return Err(LeaderError::TakenOver),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renew the leader Lease");
                    if last_renew.elapsed() >= self.cfg.renew_deadline {
                        self.fence.close();
                        return Err(LeaderError::NotRenewed {
                            deadline: self.cfg.renew_deadline,
                            source: Box::new(e),
                        });
                    }
                }
            }
        }
    }

    /// Give the Lease up (if we hold it), so a standby does not wait for it to expire.
    pub async fn release(&mut self) {
        // Nothing may be written once a standby can take over.
        self.fence.close();
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.cfg.name, "released the leader Lease"),
            Err(e) => {
                tracing::warn!(error = %crate::api::kube_error::Text(&e), "could not release the leader Lease; it expires on its own")
            }
        }
    }
}

/// A repository as compared: passwords redacted, no trailing `/` or `.git`.
fn normalized(repo: &str) -> String {
    let r = crate::api::redact::redact_url_passwords(repo.trim());
    let r = r.trim_end_matches('/');
    r.strip_suffix(".git").unwrap_or(r).to_string()
}

/// Are `a` and `b` one repository (passwords, trailing `/` and `.git` aside)?
pub fn same_repository(a: &str, b: &str) -> bool {
    normalized(a) == normalized(b)
}

/// A repository as an error quotes it: normalized, and at most 300 characters.
pub fn shown_repository(repo: &str) -> String {
    normalized(repo).chars().take(300).collect()
}

/// The repository of a Lease's source claim (`<repo>` or `<repo>//<path>`).
pub fn claim_repository(claim: &str) -> &str {
    match claim.rsplit_once("//") {
        Some((repo, _)) if !repo.ends_with(':') && !repo.is_empty() => repo,
        _ => claim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_compare_without_passwords_slashes_or_dot_git() {
        assert_eq!(
            normalized("https://u:secret@git.example/team/config.git/"),
            normalized("https://u:other@git.example/team/config")
        );
        assert_ne!(
            normalized("https://git.example/team/config"),
            normalized("https://git.example/team/other")
        );
        assert_eq!(
            claim_repository("https://git.example/r//apps"),
            "https://git.example/r"
        );
        assert_eq!(
            claim_repository("https://git.example/r"),
            "https://git.example/r"
        );
        assert_eq!(claim_repository("/srv/config//apps"), "/srv/config");
        assert!(same_repository(
            "https://git.example/r.git",
            "https://git.example/r/"
        ));
    }

    #[test]
    fn timings_keep_client_go_proportions() {
        let c = LeaseConfig::new("weft-system", "me", Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert!(
            c.retry_period >= Duration::from_secs(2) && c.retry_period < Duration::from_secs(3)
        );
        let tiny = LeaseConfig::new("ns", "me", Duration::from_millis(10));
        assert_eq!(tiny.lease_duration, Duration::from_secs(2));
        assert!(tiny.renew_deadline < tiny.lease_duration);
    }

    #[test]
    fn identities_differ_per_process() {
        assert!(default_identity().ends_with(&format!("_{}", std::process::id())));
    }
}
