//! The root record: one ConfigMap per sync root (and per shard root) in Weft's namespace,
//! `weft-root-<root name>`, labelled `weft.io/root: <base root name>`. The root has no custom
//! resource of its own, so this is where the cluster says how it is doing: `weft get root` reads
//! it, as `flux get kustomizations` reads a Kustomization's status.
//!
//! The leader writes the outcome keys (field manager `weft`) once per pass that ran: the outcome
//! (its `lastTransitionAt` moves only when the outcome changes — a revision applied, a pass that
//! failed or recovered), the last [`MAX_PASSES`] passes with their duration and result
//! (`passes`), and the next poll (`nextPollAt`), so that `weft ui`, which reads the cluster, can
//! show them. One server-side apply of this one small ConfigMap per pass, no-op passes included.
//! `weft suspend` / `weft resume` write the suspend keys of the base root's record (see
//! [`super::suspend`]).

use crate::api::keys::ROOT_KEY;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::Client;
use serde::{Deserialize, Serialize};

use crate::api::conditions::now_rfc3339;
use crate::api::suspend::suspends;
use crate::apply::FIELD_MANAGER;

/// The prefix of every root record's name.
const RECORD_PREFIX: &str = "weft-root-";

/// The field manager of the suspend keys of the root record.
pub const SUSPEND_MANAGER: &str = "weft-suspend";

/// Keys of the root record written by the root loop (field manager `weft`).
pub const KEY_READY: &str = "ready";
pub const KEY_REASON: &str = "reason";
pub const KEY_MESSAGE: &str = "message";
pub const KEY_REVISION: &str = "revision";
pub const KEY_SINCE: &str = "lastTransitionAt";
pub const KEY_SHARD: &str = "shard";
/// The last passes, newest first: a JSON list of [`PassEntry`].
pub const KEY_PASSES: &str = "passes";
/// RFC 3339 time of the next poll, as the leader knew it when its last pass ended.
pub const KEY_NEXT_POLL: &str = "nextPollAt";

/// How many passes the record keeps (about 1.5 KiB of JSON).
pub const MAX_PASSES: usize = 10;

/// Keys of the root record written by `weft suspend` / `weft resume`.
pub const KEY_SUSPENDED: &str = "suspended";
pub const KEY_SUSPEND_MESSAGE: &str = "suspendMessage";
pub const KEY_SUSPENDED_AT: &str = "suspendedAt";
/// The repository the root syncs (written by `weft sync`, field manager [`SOURCE_MANAGER`]).
pub const KEY_REPOSITORY: &str = "repository";
/// The `--path` the root syncs (empty for the whole repository).
pub const KEY_PATH: &str = "path";
/// The field manager of the source keys (apart from the outcome's and the suspension's).
pub const SOURCE_MANAGER: &str = "weft-source";

/// The field manager of the request annotations (`weft trigger`).
pub const REQUEST_MANAGER: &str = "weft-trigger";

/// The data key of shard `shard`'s answer to a request: `lastHandledRequest` for shard 0 (and an
/// unsharded root), `lastHandledRequest.shard-<i>` for the others.
pub fn answer_key(shard: u32) -> String {
    if shard == 0 {
        "lastHandledRequest".to_string()
    } else {
        format!("lastHandledRequest.shard-{shard}")
    }
}

/// The field manager of shard `shard`'s answer (one per shard, so that server-side apply keeps
/// each shard's key, and the pass outcome keys written by `weft`, apart).
pub fn answer_manager(shard: u32) -> String {
    format!("weft-request-{shard}")
}

/// The name of the root record of root `root_name` (shard roots have their own).
pub fn record_name(root_name: &str) -> String {
    format!("{RECORD_PREFIX}{root_name}")
}

/// The root whose record ConfigMap is `configmap` (`None`: not a root record's name).
pub fn root_of_record(configmap: &str) -> Option<&str> {
    configmap.strip_prefix(RECORD_PREFIX)
}

/// The labels of a root record of (base) root `root_name`. Not `app.kubernetes.io/managed-by`:
/// the record is Weft's own bookkeeping, like an inventory, not an object it applies (the
/// controllers' child watches and the tests' listings of applied objects go by that label).
pub fn record_labels(root_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(ROOT_KEY.to_string(), root_name.to_string())])
}

/// Whether a root is suspended, as recorded in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RootSuspension {
    pub suspended: bool,
    /// Why, as given to `weft suspend --message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the suspension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

impl RootSuspension {
    /// The suspension recorded in `data` (no record: not suspended).
    pub fn from_data(data: Option<&BTreeMap<String, String>>) -> RootSuspension {
        let Some(data) = data else {
            return RootSuspension::default();
        };
        RootSuspension {
            suspended: suspends(data.get(KEY_SUSPENDED).map(String::as_str)),
            message: data.get(KEY_SUSPEND_MESSAGE).cloned(),
            since: data.get(KEY_SUSPENDED_AT).cloned(),
        }
    }
}

/// The longest message kept (a failed pass's error can list many objects).
const MAX_MESSAGE: usize = 2000;

/// How the last pass of a root ended, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootOutcome {
    pub ready: bool,
    /// `Succeeded`, `Failed`, `Suspended`.
    pub reason: String,
    pub message: String,
    /// The revision applied (or tried).
    pub revision: Option<String>,
}

impl RootOutcome {
    /// The outcome recorded in `data`, if any.
    pub fn from_data(data: &BTreeMap<String, String>) -> Option<RootOutcome> {
        let ready = data.get(KEY_READY)?;
        Some(RootOutcome {
            ready: ready == "True",
            reason: data.get(KEY_REASON).cloned().unwrap_or_default(),
            message: data.get(KEY_MESSAGE).cloned().unwrap_or_default(),
            revision: data.get(KEY_REVISION).cloned(),
        })
    }

    fn truncated(mut self) -> RootOutcome {
        if self.message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !self.message.is_char_boundary(end) {
                end -= 1;
            }
            self.message.truncate(end);
            self.message.push('…');
        }
        self
    }
}

/// One pass of a root, as its record keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassEntry {
    /// The pass's number in the daemon that ran it (1, 2, … from its start).
    pub pass: u64,
    /// Why it ran (`startup`, `poll`, `requested`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// RFC 3339 start time.
    pub started_at: String,
    pub duration_ms: u64,
    /// `Succeeded` or `Failed`.
    pub result: String,
    /// The revision applied (or tried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// What a root record holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootRecord {
    pub suspension: RootSuspension,
    pub outcome: Option<RootOutcome>,
    /// RFC 3339 time the outcome last changed.
    pub since: Option<String>,
    /// The last passes, newest first (at most [`MAX_PASSES`]).
    pub passes: Vec<PassEntry>,
    /// When the leader polls next (RFC 3339), as known when its last pass ended.
    pub next_poll_at: Option<String>,
}

impl RootRecord {
    pub fn from_configmap(cm: Option<&ConfigMap>) -> RootRecord {
        let data = cm.and_then(|c| c.data.as_ref());
        RootRecord {
            suspension: RootSuspension::from_data(data),
            outcome: data.and_then(RootOutcome::from_data),
            since: data.and_then(|d| d.get(KEY_SINCE).cloned()),
            // A history that does not parse (written by hand) is shown as none.
            passes: data
                .and_then(|d| d.get(KEY_PASSES))
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or_default(),
            next_poll_at: data.and_then(|d| d.get(KEY_NEXT_POLL).cloned()),
        }
    }
}

/// What the leader writes to a root record after a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassRecord {
    pub outcome: RootOutcome,
    /// When the outcome last changed: kept from the record when it did not change now.
    pub since: String,
    /// This pass first, then the record's earlier ones, at most [`MAX_PASSES`].
    pub passes: Vec<PassEntry>,
    pub next_poll_at: Option<String>,
}

impl PassRecord {
    /// The record to write after `pass` ended with `outcome`, over what `before` held.
    pub fn after(
        before: &RootRecord,
        outcome: RootOutcome,
        pass: PassEntry,
        next_poll_at: Option<String>,
    ) -> PassRecord {
        // As the record keeps it: a long message read back is the cut one.
        let outcome = outcome.truncated();
        let since = match (&before.outcome, &before.since) {
            (Some(o), Some(since)) if *o == outcome => since.clone(),
            _ => now_rfc3339(),
        };
        let passes = std::iter::once(pass)
            .chain(before.passes.iter().cloned())
            .take(MAX_PASSES)
            .collect();
        PassRecord {
            outcome,
            since,
            passes,
            next_poll_at,
        }
    }

    /// The record's data keys written by the leader (field manager `weft`).
    fn data(&self, shard: u32) -> BTreeMap<String, String> {
        let outcome = self.outcome.clone().truncated();
        let mut data = BTreeMap::from([
            (
                KEY_READY.to_string(),
                if outcome.ready { "True" } else { "False" }.to_string(),
            ),
            (KEY_REASON.to_string(), outcome.reason),
            (KEY_MESSAGE.to_string(), outcome.message),
            (KEY_SINCE.to_string(), self.since.clone()),
            (KEY_SHARD.to_string(), shard.to_string()),
            (
                KEY_PASSES.to_string(),
                serde_json::to_string(&self.passes).unwrap_or_else(|_| "[]".into()),
            ),
        ]);
        if let Some(r) = outcome.revision {
            data.insert(KEY_REVISION.to_string(), r);
        }
        if let Some(at) = &self.next_poll_at {
            data.insert(KEY_NEXT_POLL.to_string(), at.clone());
        }
        data
    }
}

/// Read the record of root `root_name` (absent: the default, not suspended, no outcome).
pub async fn read(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
) -> Result<RootRecord, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let cm = api.get_opt(&record_name(root_name)).await?;
    Ok(RootRecord::from_configmap(cm.as_ref()))
}

/// The record of root `root_name`, if it has one (a missing namespace is no record).
pub async fn read_opt(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
) -> Result<Option<RootRecord>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let cm = api.get_opt(&record_name(root_name)).await?;
    Ok(cm.map(|cm| RootRecord::from_configmap(Some(&cm))))
}

/// The roots recorded in Weft's namespace `weft_namespace`: the base roots named by the label of
/// every root record there (a sharded root once, not per shard), sorted.
pub async fn roots(client: &Client, weft_namespace: &str) -> Result<Vec<String>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let list = api.list(&ListParams::default().labels(ROOT_KEY)).await?;
    let names: BTreeSet<String> = list
        .items
        .iter()
        .filter_map(|cm| cm.metadata.labels.as_ref()?.get(ROOT_KEY).cloned())
        .filter(|n| !n.is_empty())
        .collect();
    Ok(names.into_iter().collect())
}

/// Why a command about one root cannot go on: the root is not there.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("no root `{root}` in namespace {namespace} (no ConfigMap {namespace}/{}): {}", record_name(.root), known_roots(.known))]
    Missing {
        root: String,
        namespace: String,
        /// The roots that are there.
        known: Vec<String>,
    },
    #[error("cannot list the root records of namespace {namespace}: {}", crate::api::kube_error::Text(.source))]
    Api {
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

fn known_roots(known: &[String]) -> String {
    if known.is_empty() {
        "there is no root there (a root is recorded by its first `weft sync` or `weft run` pass; \
         check --weft-namespace)"
            .to_string()
    } else {
        format!(
            "the roots there are {} (check --root-name or WEFT_ROOT_NAME)",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// `Ok` when root `root_name` has a record in `weft_namespace`; else which roots do. Commands
/// about one root ask this first, so that a wrong name is an error, not a phantom record.
pub async fn require(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
) -> Result<(), LookupError> {
    let known = roots(client, weft_namespace)
        .await
        .map_err(|source| LookupError::Api {
            namespace: weft_namespace.to_string(),
            source,
        })?;
    if known.iter().any(|k| k == root_name) {
        return Ok(());
    }
    Err(LookupError::Missing {
        root: root_name.to_string(),
        namespace: weft_namespace.to_string(),
        known,
    })
}

/// Why a one-shot pass of root `root_name` must not run: the root is suspended (`weft
/// suspend`), or its record cannot be read. `None`: it may run.
pub async fn suspension_of(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
) -> Option<String> {
    match read(client, weft_namespace, root_name).await {
        Ok(r) if r.suspension.suspended => Some(format!(
            "the root {root_name} is suspended{}; nothing was applied or pruned (`weft resume` first)",
            r.suspension
                .message
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "cannot read the root record (is the root suspended?), nothing was applied or pruned: {}",
            crate::api::kube_error::Text(&e)
        )),
    }
}

/// Write `record` to the record of root `root_name` (shard `shard` of base root `base_root`):
/// one server-side apply.
pub async fn write_pass(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
    base_root: &str,
    shard: u32,
    record: &PassRecord,
) -> Result<(), kube::Error> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(root_name)),
            namespace: Some(weft_namespace.to_string()),
            labels: Some(record_labels(base_root)),
            ..Default::default()
        },
        data: Some(record.data(shard)),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&record_name(root_name), &pp, &Patch::Apply(&cm))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_reads_back_and_long_messages_are_cut() {
        let data = BTreeMap::from([
            (KEY_READY.to_string(), "False".to_string()),
            (KEY_REASON.to_string(), "Failed".to_string()),
            (KEY_MESSAGE.to_string(), "a.yaml:3:1: bad".to_string()),
            (KEY_REVISION.to_string(), "abc".to_string()),
        ]);
        let o = RootOutcome::from_data(&data).expect("an outcome");
        assert!(!o.ready);
        assert_eq!(o.reason, "Failed");
        assert_eq!(o.revision.as_deref(), Some("abc"));
        assert_eq!(RootOutcome::from_data(&BTreeMap::new()), None);
        let long = RootOutcome {
            message: "é".repeat(MAX_MESSAGE),
            ..Default::default()
        }
        .truncated();
        assert!(long.message.len() <= MAX_MESSAGE + '…'.len_utf8());
        assert!(long.message.ends_with('…'));
    }

    #[test]
    fn a_missing_root_names_the_roots_there_or_says_there_is_none() {
        let e = LookupError::Missing {
            root: "wft".into(),
            namespace: "weft-system".into(),
            known: vec!["prod".into(), "weft".into()],
        };
        assert_eq!(
            e.to_string(),
            "no root `wft` in namespace weft-system (no ConfigMap weft-system/weft-root-wft): the roots there are `prod`, `weft` (check --root-name or WEFT_ROOT_NAME)"
        );
        let e = LookupError::Missing {
            root: "weft".into(),
            namespace: "other".into(),
            known: vec![],
        };
        assert!(e.to_string().contains("there is no root there"), "{e}");
    }

    fn entry(pass: u64) -> PassEntry {
        PassEntry {
            pass,
            reasons: vec!["poll".into()],
            started_at: "2026-12-04T10:00:00Z".into(),
            duration_ms: 1200,
            result: "Succeeded".into(),
            revision: Some("abc".into()),
        }
    }

    #[test]
    fn a_pass_record_keeps_the_last_passes_and_the_time_of_the_last_change() {
        let ok = RootOutcome {
            ready: true,
            reason: "Succeeded".into(),
            message: "applied revision abc".into(),
            revision: Some("abc".into()),
        };
        let mut before = RootRecord::default();
        for n in 1..=12 {
            let next = PassRecord::after(&before, ok.clone(), entry(n), Some("later".into()));
            let cm = ConfigMap {
                data: Some(next.data(0)),
                ..Default::default()
            };
            let read = RootRecord::from_configmap(Some(&cm));
            assert_eq!(read.outcome.as_ref(), Some(&ok));
            assert_eq!(read.next_poll_at.as_deref(), Some("later"));
            assert_eq!(read.passes, next.passes);
            before = read;
        }
        let numbers: Vec<u64> = before.passes.iter().map(|p| p.pass).collect();
        assert_eq!(
            numbers,
            (3..=12).rev().collect::<Vec<_>>(),
            "newest first, ten kept"
        );
        // The outcome did not change: its time is kept; a failure moves it.
        let since = before.since.clone().expect("since");
        before.since = Some("2026-01-01T00:00:00Z".into());
        let same = PassRecord::after(&before, ok.clone(), entry(13), None);
        assert_eq!(same.since, "2026-01-01T00:00:00Z");
        let failed = RootOutcome {
            ready: false,
            reason: "Failed".into(),
            ..ok
        };
        let changed = PassRecord::after(&before, failed, entry(14), None);
        assert_ne!(changed.since, "2026-01-01T00:00:00Z");
        assert!(!since.is_empty());
        // A history written by hand that does not parse is none, not an error.
        let cm = ConfigMap {
            data: Some(BTreeMap::from([(
                KEY_PASSES.to_string(),
                "nope".to_string(),
            )])),
            ..Default::default()
        };
        assert!(RootRecord::from_configmap(Some(&cm)).passes.is_empty());
    }
}
