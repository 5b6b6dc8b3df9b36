//! What the daemon knows about itself, shown by `GET /api/v1/status`, returned by
//! `POST /api/v1/sync?wait=true` and printed by `weft trigger --wait`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::api::ObjectRef;

/// How a pass ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PassResultKind {
    /// Everything applied, pruned and ready.
    Succeeded,
    /// A stage failed; `error` says which and why.
    Failed,
    /// The daemon stopped during the pass, which was abandoned between two stages.
    Abandoned,
    /// The root is suspended (`weft suspend`): nothing was fetched, applied or pruned.
    Suspended,
}

/// Counts of what a pass did, per action (a view of the apply engine's change set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeSummary {
    pub created: u64,
    pub configured: u64,
    pub unchanged: u64,
    pub pruned: u64,
    pub skipped: u64,
}

impl ChangeSummary {
    /// Objects written (created or configured).
    pub fn applied(&self) -> u64 {
        self.created + self.configured
    }
}

/// One object a pass touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectChange {
    /// `Kind/namespace/name` (or `Kind/name`).
    pub object: String,
    /// `created`, `configured`, `unchanged`, `pruned`, `skipped`.
    pub action: String,
    /// Why (`changed`, `drifted: /data/value`, `conflict: owned by …`, `applied ahead of the
    /// full pass`); absent when the engine gave none (a creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The result of one sync-root pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassReport {
    /// Pass number since the daemon started (1, 2, …).
    pub pass: u64,
    /// Why it ran (`startup`, `poll`, `webhook/github`, `api`, …), coalesced.
    pub reasons: Vec<String>,
    /// RFC 3339 start time.
    pub started_at: String,
    pub duration_seconds: f64,
    /// The git commit the pass applied (or tried to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub result: PassResultKind,
    /// What went wrong, naming the stage, file and object (on the wire: the line a person
    /// reads, see [`PassFailure`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<PassFailure>,
    /// Whether the remote head was unchanged, so fetch, load and render were skipped.
    #[serde(default)]
    pub head_unchanged: bool,
    pub summary: ChangeSummary,
    /// Objects created, configured or pruned (unchanged ones are only counted); once the pass
    /// is over, the first [`MAX_CHANGES`] of them (see [`PassReport::bounded`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ObjectChange>,
    /// Changes left out of `changes` (a first pass of 100,000 objects creates them all).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changes_omitted: u64,
}

/// Why a pass did not succeed, kept typed until it is shown: the stage it stopped at, the
/// object it failed on when there is one, and the line a person reads. The status, `POST
/// /api/v1/sync?wait=true` and `weft trigger --wait` carry that line alone (`"error": "…"`, as
/// they always did); read back from there, only the line is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassFailure {
    /// The stage it stopped at, as the Root's `Ready` reason names it (`FetchFailed`,
    /// `InventoryFailed`, `Failed`, `Conflict`, `Abandoned`, `Suspended`, …); [`UNKNOWN_STAGE`]
    /// when read back from the line alone.
    pub reason: String,
    /// The one object the pass failed on, when the error names exactly one (boxed: a failure
    /// is returned as an error all along a pass, and stays small).
    pub object: Option<Box<ObjectRef>>,
    /// The line a person reads (passwords in URLs already redacted by whoever built it).
    pub message: String,
}

/// The stage of a [`PassFailure`] read back from its line (`weft trigger --wait`).
pub const UNKNOWN_STAGE: &str = "Unknown";

impl PassFailure {
    /// A failure at `reason` (a stage) that names no single object.
    pub fn new(reason: &str, message: impl Into<String>) -> PassFailure {
        PassFailure {
            reason: reason.to_string(),
            object: None,
            message: message.into(),
        }
    }

    /// The same failure, naming the object it failed on.
    pub fn about(mut self, object: Option<&ObjectRef>) -> PassFailure {
        self.object = object.map(|o| Box::new(o.clone()));
        self
    }
}

impl std::fmt::Display for PassFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Serialize for PassFailure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.message)
    }
}

impl<'de> Deserialize<'de> for PassFailure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PassFailure, D::Error> {
        String::deserialize(d).map(|message| PassFailure::new(UNKNOWN_STAGE, message))
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The changes a finished pass's report keeps: the status, `POST /api/v1/sync?wait=true` and the
/// request answers show at most these. A first pass of 100,000 objects would otherwise keep
/// 100,000 entries (≈ 15 MB) until the next pass and copy them for every status request.
pub const MAX_CHANGES: usize = 100;

impl PassReport {
    /// Whether the pass succeeded.
    pub fn succeeded(&self) -> bool {
        self.result == PassResultKind::Succeeded
    }

    /// What the notifications say of this pass; `fetched` is the revision this pass fetched
    /// new, if any (a pass that failed to load it reports that commit, not the one applied
    /// before; a failed fetch reports none).
    pub fn notification(&self, fetched: Option<&str>) -> crate::notify::root::PassOutcome<'_> {
        let revision = match fetched {
            Some(r) => Some(r.to_string()),
            None if self.head_unchanged || self.error.is_none() => self.revision.clone(),
            None => None,
        };
        crate::notify::root::PassOutcome {
            revision,
            new_revision: !self.head_unchanged,
            error: self.error.as_ref().map(|e| e.message.as_str()),
            // A pass abandoned at shutdown, or not run because the root is suspended, says
            // nothing (no failure, no commit status).
            abandoned: matches!(
                self.result,
                PassResultKind::Abandoned | PassResultKind::Suspended
            ),
            changes: self
                .changes
                .iter()
                .map(|c| format!("{} {}", c.object, c.action))
                .collect(),
        }
    }
}

/// The state of one custom resource the controllers reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerStatus {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The `Ready` condition's status: `True`, `False` or `Unknown`.
    pub ready: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// WeaveCloud: the agent bundle version; Armada: the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// WeaveCloud: the newest agent bundle version its channel offers and `agentVersion` allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_version: Option<String>,
    /// WeaveCloud: next time the agent channel is checked (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_update_check: Option<String>,
    /// Children in the owner's inventory.
    #[serde(default)]
    pub objects: usize,
}

/// Everything `GET /api/v1/status` shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonStatus {
    /// The repository, with any password removed.
    pub repo: String,
    #[serde(rename = "ref")]
    pub git_ref: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// This replica's identity in the leader Lease.
    pub identity: String,
    /// Whether this replica holds the Lease (only the leader reconciles).
    pub leader: bool,
    /// The shards this replica works on: `[i]` while it holds shard `i` (`[0]` for the leader of
    /// an unsharded root), `[]` on a standby.
    #[serde(default)]
    pub shards: Vec<u32>,
    /// How many shards the root is split into (`--shards`; 0 read as 1).
    #[serde(default)]
    pub shard_count: u32,
    /// Whether the root is suspended (`weft suspend`), and since when and why.
    #[serde(default)]
    pub suspension: super::suspend::RootSuspension,
    /// The last revision applied successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pass: Option<PassReport>,
    /// RFC 3339 time of the last successful pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_at: Option<String>,
    /// RFC 3339 time of the next poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_poll_at: Option<String>,
    /// The earliest next agent update check over all WeaveClouds (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_update_check: Option<String>,
    /// Per custom resource, keyed `Kind/namespace/name`.
    #[serde(default)]
    pub owners: BTreeMap<String, OwnerStatus>,
    /// The sync root's conditions (`SourceReady`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::api::conditions::Condition>,
}

impl PassReport {
    /// The report as the daemon keeps it after the pass (status, sync answers): its error
    /// bounded like every status message ([`crate::api::bounded::message`]), its changes cut
    /// to the first [`MAX_CHANGES`] (the rest counted in `changes_omitted`).
    pub fn bounded(&self) -> PassReport {
        let kept = self.changes.len().min(MAX_CHANGES);
        PassReport {
            pass: self.pass,
            reasons: self.reasons.clone(),
            started_at: self.started_at.clone(),
            duration_seconds: self.duration_seconds,
            revision: self.revision.clone(),
            result: self.result,
            error: self.error.as_ref().map(|e| PassFailure {
                message: crate::api::bounded::message(&e.message),
                ..e.clone()
            }),
            head_unchanged: self.head_unchanged,
            summary: self.summary,
            // Only the kept part is copied.
            changes: self.changes[..kept].to_vec(),
            changes_omitted: self.changes_omitted + (self.changes.len() - kept) as u64,
        }
    }
}

impl DaemonStatus {
    /// Record an owner's state and recompute the earliest next update check.
    pub fn set_owner(&mut self, mut status: OwnerStatus) {
        // Served to anyone who reaches the port: no more of an error than a person reads.
        status.message = crate::api::bounded::message(&status.message);
        let key = format!("{}/{}/{}", status.kind, status.namespace, status.name);
        self.owners.insert(key, status);
        self.recompute_next_update_check();
    }

    /// Forget a deleted owner.
    pub fn remove_owner(&mut self, kind: &str, namespace: &str, name: &str) {
        self.owners.remove(&format!("{kind}/{namespace}/{name}"));
        self.recompute_next_update_check();
    }

    fn recompute_next_update_check(&mut self) {
        // RFC 3339 UTC strings of one format sort chronologically.
        self.next_update_check = self
            .owners
            .values()
            .filter_map(|o| o.next_update_check.clone())
            .min();
    }
}

pub use crate::api::conditions::now_rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_update_check_is_the_earliest_over_owners() {
        let mut s = DaemonStatus::default();
        let wc = |name: &str, at: Option<&str>| OwnerStatus {
            kind: "WeaveCloud".into(),
            namespace: name.into(),
            name: "wc".into(),
            next_update_check: at.map(str::to_string),
            ..Default::default()
        };
        s.set_owner(wc("a", Some("2026-01-01T10:00:00Z")));
        s.set_owner(wc("b", Some("2026-01-01T09:00:00Z")));
        s.set_owner(wc("c", None));
        assert_eq!(s.next_update_check.as_deref(), Some("2026-01-01T09:00:00Z"));
        s.remove_owner("WeaveCloud", "b", "wc");
        assert_eq!(s.next_update_check.as_deref(), Some("2026-01-01T10:00:00Z"));
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["owners"]["WeaveCloud/a/wc"].is_object());
    }

    /// Issue 47 item 3: a first pass of 100,000 objects kept (and copied for every status
    /// request) 100,000 changes; the kept report holds the first 100 and counts the rest.
    #[test]
    fn a_kept_report_holds_the_first_changes_and_counts_the_rest() {
        let change = |i: usize| ObjectChange {
            object: format!("ConfigMap/apps/c{i}"),
            action: "created".into(),
            reason: None,
        };
        let report = PassReport {
            pass: 1,
            reasons: vec!["startup".into()],
            started_at: now_rfc3339(),
            duration_seconds: 1.0,
            revision: Some("abc".into()),
            result: PassResultKind::Succeeded,
            error: None,
            head_unchanged: false,
            summary: ChangeSummary {
                created: 250,
                ..Default::default()
            },
            changes: (0..250).map(change).collect(),
            changes_omitted: 0,
        };
        let kept = report.bounded();
        assert_eq!(
            kept.changes,
            (0..MAX_CHANGES).map(change).collect::<Vec<_>>()
        );
        assert_eq!(kept.changes_omitted, 150);
        assert_eq!(kept.summary.created, 250, "the summary counts them all");
        let json = serde_json::to_value(&kept).unwrap();
        assert_eq!(json["changesOmitted"], 150);
        // Bounding again keeps the count; a small report says nothing of omissions.
        assert_eq!(kept.bounded().changes_omitted, 150);
        let small = PassReport {
            changes: vec![change(0)],
            ..report
        }
        .bounded();
        assert_eq!(small.changes.len(), 1);
        assert!(serde_json::to_value(&small)
            .unwrap()
            .get("changesOmitted")
            .is_none());
    }

    /// Issue 48 item 4: `/api/v1/status` (no credential needed) served 33.5 MB of two chart
    /// errors that quoted a 16 MiB name.
    #[test]
    fn what_status_serves_of_an_error_is_bounded() {
        let huge = format!("chart c: entry `{}`: refused", "n".repeat(16 << 20));
        let mut s = DaemonStatus::default();
        s.set_owner(OwnerStatus {
            kind: "ArmadaChart".into(),
            namespace: "apps".into(),
            name: "c".into(),
            message: huge.clone(),
            ..Default::default()
        });
        s.last_pass = Some(
            PassReport {
                pass: 1,
                reasons: vec![],
                started_at: now_rfc3339(),
                duration_seconds: 0.1,
                revision: None,
                result: PassResultKind::Failed,
                error: Some(PassFailure::new("Failed", huge)),
                head_unchanged: false,
                summary: ChangeSummary::default(),
                changes: vec![],
                changes_omitted: 0,
            }
            .bounded(),
        );
        let served = serde_json::to_string(&s).unwrap();
        assert!(served.len() < 10_000, "{} bytes served", served.len());
        assert!(
            served.contains("(16777242 bytes in all)"),
            "the size is said"
        );
    }

    /// The report's `error` stays the string it always was on the wire, whatever the failure
    /// keeps in memory (issue 46 item 3).
    #[test]
    fn a_failure_is_its_line_on_the_wire() {
        let object = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "apps".into(),
            name: "a".into(),
        };
        let failure = PassFailure::new("Conflict", "ConfigMap/apps/a: conflict: owned by x")
            .about(Some(&object));
        let report = PassReport {
            pass: 3,
            reasons: vec!["api".into()],
            started_at: "2026-12-02T01:00:00Z".into(),
            duration_seconds: 0.5,
            revision: None,
            result: PassResultKind::Failed,
            error: Some(failure),
            head_unchanged: false,
            summary: ChangeSummary::default(),
            changes: vec![],
            changes_omitted: 0,
        };
        let json = serde_json::to_string(&report).unwrap();
        assert!(
            json.contains(r#""error":"ConfigMap/apps/a: conflict: owned by x""#),
            "{json}"
        );
        let back: PassReport = serde_json::from_str(&json).unwrap();
        let error = back.error.clone().unwrap();
        assert_eq!(error.to_string(), "ConfigMap/apps/a: conflict: owned by x");
        assert_eq!((error.reason.as_str(), error.object), (UNKNOWN_STAGE, None));
        assert_eq!(serde_json::to_string(&back.bounded()).unwrap(), json);
    }
}
