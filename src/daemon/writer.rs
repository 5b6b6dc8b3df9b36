//! One writer per root, and one repository per root.
//!
//! - A one-shot `weft sync` must not race a live daemon of the same root: while the root's leader
//!   Lease ([`super::leader::lease_name`]) is held and renewed (watched, see
//!   [`super::liveness`]), the CLI refuses (unless `--ignore-leader`) and points to `weft
//!   trigger`, which asks the leader to run the pass.
//! - The root records its source: `weft sync` writes `repository` and `path` into the root
//!   record (`weft-root-<root>`, field manager `weft-source`, apart from the outcome keys), and a
//!   daemon records it on its Lease (`weft.io/source`). A sync from another repository than the
//!   recorded one is refused unless confirmed (`--switch-repository`): a replacement repository
//!   that overlaps the old one would otherwise be pruned down to the overlap without a word.
//!   A daemon obeys the same rule when it takes the Lease from no live holder
//!   ([`super::leader::LeaseConfig::switching`], `weft run --switch-repository`), and records
//!   its source in the root record as its term starts ([`record_claim`]).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::Client;

use super::leader::lease_name;
use super::liveness::live_holder;
use super::record::{
    self, record_labels, record_name, PassEntry, PassRecord, RootOutcome, KEY_PATH, KEY_REPOSITORY,
    SOURCE_MANAGER,
};
use crate::api::keys::SOURCE_ANNOTATION;
use crate::api::redact::redact_url_passwords;
use crate::apply::inventory::ensure_namespace;
use crate::pass::PassResult;

/// Why a one-shot pass may not write, or the API error that kept it from being told.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("the root {root} is led by a live daemon ({holder} holds the Lease {namespace}/{lease} and renews it); a second writer would race it (objects deleted and recreated). Ask the daemon to run the pass: `weft trigger` (with --force-prune if needed); or, if that daemon is not syncing this root, pass --ignore-leader")]
    LedByDaemon {
        root: String,
        holder: String,
        namespace: String,
        lease: String,
    },
    #[error("the root {root} syncs {recorded}; this sync is from {given}. Switching a root to another repository prunes everything the new one lacks: if that is intended, pass --switch-repository (else use another --root-name)")]
    RepositorySwitch {
        root: String,
        recorded: String,
        given: String,
    },
    #[error("reading or writing the root's writer record: {}", crate::api::kube_error::Text(.0))]
    Api(#[from] kube::Error),
    /// Weft's namespace could not be created for the root record.
    #[error("recording the root: {0}")]
    Namespace(#[from] crate::apply::InventoryProblem),
}

/// A repository as compared: passwords redacted, no trailing `/` or `.git`.
fn normalized(repo: &str) -> String {
    let r = redact_url_passwords(repo.trim());
    let r = r.trim_end_matches('/');
    r.strip_suffix(".git").unwrap_or(r).to_string()
}

/// Are `a` and `b` one repository (passwords, trailing `/` and `.git` aside)?
pub fn same_repository(a: &str, b: &str) -> bool {
    normalized(a) == normalized(b)
}

/// A repository as an error quotes it: normalized and bounded.
pub fn shown(repo: &str) -> String {
    bounded(&normalized(repo))
}

/// The repository of a Lease's source claim (`<repo>` or `<repo>//<path>`).
pub fn claim_repository(claim: &str) -> &str {
    match claim.rsplit_once("//") {
        Some((repo, _)) if !repo.ends_with(':') && !repo.is_empty() => repo,
        _ => claim,
    }
}

/// The bound of a quoted repository in an error.
fn bounded(text: &str) -> String {
    text.chars().take(300).collect()
}

/// The Lease `name` in `namespace`, read by a list with a field selector: the shipped Role lets
/// Weft `get` only the default root's Lease by name (`weft-leader`), but `list` every Lease of its
/// namespace, and a one-shot `weft sync` of another root runs with that Role too.
async fn read_lease(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Lease>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(leases.list(&params).await?.items.into_iter().next())
}

/// `Err` when a live daemon leads `root`: its Lease in `namespace` is held and renewed while we
/// watch it (see [`super::liveness`]; a held Lease is watched for up to its duration, a released
/// or absent one answers at once).
pub async fn check_no_live_leader(
    client: &Client,
    namespace: &str,
    root: &str,
) -> Result<(), WriterError> {
    let lease = lease_name(root);
    let live = live_holder(|| async {
        Ok::<_, kube::Error>(
            read_lease(client, namespace, &lease)
                .await?
                .into_iter()
                .collect(),
        )
    })
    .await?;
    match live {
        None => Ok(()),
        Some(live) => Err(WriterError::LedByDaemon {
            root: root.to_string(),
            holder: bounded(&live.holder),
            namespace: namespace.to_string(),
            lease,
        }),
    }
}

/// The repository the record of `root` names (a `weft sync`, or a daemon as it leads, wrote it).
pub async fn record_repository(
    client: &Client,
    namespace: &str,
    root: &str,
) -> Result<Option<String>, kube::Error> {
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    Ok(records
        .get_opt(&record_name(root))
        .await?
        .and_then(|c| c.data)
        .and_then(|mut d| d.remove(KEY_REPOSITORY))
        .filter(|r| !r.is_empty()))
}

/// The repository `root` was last synced from: its record's (a `weft sync`, a daemon), else its
/// Lease's source claim (a daemon of an older version, alive or not).
pub async fn recorded_repository(
    client: &Client,
    namespace: &str,
    root: &str,
) -> Result<Option<String>, WriterError> {
    let recorded = record_repository(client, namespace, root).await?;
    if recorded.is_some() {
        return Ok(recorded);
    }
    Ok(read_lease(client, namespace, &lease_name(root))
        .await?
        .and_then(|l| l.metadata.annotations)
        .and_then(|a| a.get(SOURCE_ANNOTATION).cloned())
        .map(|claim| claim_repository(&claim).to_string()))
}

/// `Err` when `given` is another repository than the one `root` records, unless `confirmed`.
pub async fn check_repository(
    client: &Client,
    namespace: &str,
    root: &str,
    given: &str,
    confirmed: bool,
) -> Result<(), WriterError> {
    let Some(recorded) = recorded_repository(client, namespace, root).await? else {
        return Ok(());
    };
    if confirmed || normalized(&recorded) == normalized(given) {
        return Ok(());
    }
    Err(WriterError::RepositorySwitch {
        root: root.to_string(),
        recorded: bounded(&normalized(&recorded)),
        given: bounded(&normalized(given)),
    })
}

/// What a one-shot `weft sync` of `root` leaves in the root's record, after its pass: the
/// repository it synced (see [`check_repository`]) and the pass's outcome, as a daemon records
/// its passes (`weft get root` then shows it Ready or not, with the revision).
///
/// A pass that never reached the cluster (the repository did not load or render) of a root that
/// has no record yet leaves nothing: a typo'd repository is no root. `Ok(false)` then.
pub async fn record_one_shot(
    client: &Client,
    namespace: &str,
    root: &str,
    source: &OneShotSource<'_>,
    result: &PassResult,
) -> Result<bool, WriterError> {
    let before = record::read_opt(client, namespace, root).await?;
    if result.set.is_none() && before.is_none() {
        return Ok(false);
    }
    ensure_namespace(client, namespace).await?;
    // The source is the repository the root's objects came from: one that did not load is not.
    if result.set.is_some() {
        record_source(client, namespace, root, source.repository, source.path).await?;
    }
    let revision = source.revision.map(str::to_string);
    let applied = revision.as_deref().unwrap_or("local");
    let outcome = match &result.error {
        None => RootOutcome {
            ready: true,
            reason: "Succeeded".into(),
            message: format!("applied revision {applied} (weft sync)"),
            revision: revision.clone(),
        },
        Some(e) => RootOutcome {
            ready: false,
            reason: "Failed".into(),
            message: e.to_string(),
            revision: revision.clone(),
        },
    };
    let entry = PassEntry {
        pass: 0,
        reasons: vec!["weft sync".into()],
        started_at: source.started_at.clone(),
        duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        result: outcome.reason.clone(),
        revision,
    };
    let before = before.unwrap_or_default();
    let next_poll_at = before.next_poll_at.clone();
    let written = PassRecord::after(&before, outcome, entry, next_poll_at);
    record::write_pass(client, namespace, root, root, 0, &written).await?;
    Ok(true)
}

/// Where a one-shot pass came from, for its root record.
#[derive(Clone, Debug)]
pub struct OneShotSource<'a> {
    /// The repository as given (`--repo`).
    pub repository: &'a str,
    /// `--path`, if any.
    pub path: Option<&'a str>,
    /// The commit synced (`None`: a local directory).
    pub revision: Option<&'a str>,
    /// RFC 3339 start of the pass.
    pub started_at: String,
}

/// Record that `root` syncs what a daemon's source claim says (`<repo>` or `<repo>//<path>`):
/// the daemon's term starts with it, so that the record names the repository in effect for
/// `weft sync` and the next daemon alike.
pub async fn record_claim(
    client: &Client,
    namespace: &str,
    root: &str,
    claim: &str,
) -> Result<(), WriterError> {
    let repository = claim_repository(claim);
    let path = claim
        .strip_prefix(repository)
        .and_then(|rest| rest.strip_prefix("//"));
    record_source(client, namespace, root, repository, path).await
}

/// Record that `root` syncs `repository` at `path`.
pub async fn record_source(
    client: &Client,
    namespace: &str,
    root: &str,
    repository: &str,
    path: Option<&str>,
) -> Result<(), WriterError> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(root)),
            namespace: Some(namespace.to_string()),
            labels: Some(record_labels(root)),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            (KEY_REPOSITORY.to_string(), normalized(repository)),
            (
                KEY_PATH.to_string(),
                path.unwrap_or("").trim_matches('/').to_string(),
            ),
        ])),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.patch(
        &record_name(root),
        &PatchParams::apply(SOURCE_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(())
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
}
