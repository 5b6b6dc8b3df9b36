//! The `Root` resource (`weft.io/v1alpha1`): one repository, ref and path that Weft keeps the
//! cluster equal to, with its own identity — what Flux calls a Kustomization (with its
//! GitRepository inline) and Argo CD an Application. Spec and status only; no I/O here.
//!
//! The API server checks what it can before anything reaches Weft (issue 41 item 1): the ref
//! names at most one of branch, tag, commit or semver range; durations, names and the prune
//! fraction have patterns and bounds; unknown fields are refused. What needs more than a schema
//! (a semver range that parses, a `dependsOn` cycle) is checked by the root's reconcile and
//! said in its `Stalled` condition.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;

/// A duration as Weft's flags write them (`90s`, `5m`, `1h30m`), as Flux's `interval`: what
/// [`parse_duration`] reads, nothing more (no spaces, no fractions).
pub const DURATION_PATTERN: &str = r"^([0-9]{1,6}(ms|s|m|h))+$";
/// A DNS-1123 label: the name of a root, a ServiceAccount or a namespace.
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain: the name of a Secret.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// One root: where its configuration is (a git repository, a ref, a path) and how it is applied.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "weft.io",
    version = "v1alpha1",
    kind = "Root",
    namespaced,
    status = "RootStatus",
    shortname = "rt",
    category = "weft",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    ),
    printcolumn(
        name = "Revision",
        type_ = "string",
        json_path = ".status.lastAppliedRevision"
    ),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootSpec {
    /// The git repository the root's configuration comes from.
    pub source: GitSource,
    /// The directory inside the repository (default: its top).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// How often the repository is polled and the cluster made equal to it (default `1m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub interval: Option<String>,
    /// How long one pass may take, its readiness waits included (default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub timeout: Option<String>,
    /// Delete what left the repository (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<bool>,
    /// The prune guard: the largest fraction of the root's objects one pass may delete without
    /// `weft trigger --force-prune` (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub max_prune_fraction: Option<f64>,
    /// Stop reconciling this root (nothing applied or pruned) until set back to false.
    #[serde(default)]
    pub suspend: bool,
    /// How encrypted files of the repository are decrypted (SOPS with age keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// Deploy only this ArmadaManifest of the repository (Armada's `--target-manifest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub target_manifest: Option<String>,
    /// Armada override files of the repository (paths under `path`), merged in order on top of
    /// the charts, groups and manifests they name, as `armada apply --values` and `weft run
    /// --armada-values FILE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 1024)))]
    pub armada_values: Vec<String>,
    /// Roots that must be Ready at their current revision before this one is reconciled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub depends_on: Vec<RootReference>,
    /// The ServiceAccount of the root's namespace every call of its passes is made as (through
    /// Kubernetes impersonation). Required for a root outside Weft's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
}

/// A git repository and the ref to follow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitSource {
    /// The repository: `https://…`, `ssh://…`, `git@host:path`, or `git://…`.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// What to follow; none given: the branch the remote's HEAD points to.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<GitRefSpec>,
    /// A Secret of the root's namespace with the credentials (`username`/`password`,
    /// `identity`/`known_hosts`), as Flux's GitRepository reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalReference>,
}

/// One of a branch, a tag, a commit, or a semver range over the tags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("maxProperties" = 1))]
pub struct GitRefSpec {
    /// A branch name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A tag name.
    #[schemars(length(min = 1, max = 255))]
    pub tag: Option<String>,
    /// A full commit SHA (40 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{40}$"))]
    pub commit: Option<String>,
    /// A semver range (`>=1.2.0 <2.0.0`, `1.x`): the highest tag it admits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub semver: Option<String>,
}

/// The name of an object in the root's own namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalReference {
    /// The object's name.
    #[schemars(regex(pattern = DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))]
    pub name: String,
}

/// Another root: by name, in this root's namespace unless `namespace` says otherwise.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct RootReference {
    /// The root's name.
    #[schemars(regex(pattern = DNS_LABEL_PATTERN), length(min = 1, max = 63))]
    pub name: String,
    /// Its namespace (default: this root's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DNS_LABEL_PATTERN), length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// How the repository's encrypted files are read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Decryption {
    /// Only `sops` (age identities).
    pub provider: DecryptionProvider,
    /// A Secret of the root's namespace whose keys ending in `.agekey` hold age identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalReference>,
}

/// The decryption providers Weft knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecryptionProvider {
    #[default]
    Sops,
}

/// What the root's reconcile last found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootStatus {
    /// `Ready`, `Reconciling`, `Stalled`, with their reasons.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The revision last applied in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    /// The revision last tried (equal to the applied one unless the last pass failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    /// The last `weft.io/requested-at` value a pass answered (as Flux's
    /// `lastHandledReconcileAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_requested_at: Option<String>,
    /// How many objects the root's inventory holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<InventoryCounts>,
    /// The last passes, newest first (at most ten).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<PassSummary>,
    /// When the next poll is due (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_poll_at: Option<String>,
}

/// The counts of a root's inventory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryCounts {
    /// Objects the root applied itself.
    pub objects: u64,
    /// Objects its custom resources (WeaveClouds, ArmadaCharts) applied.
    #[serde(default)]
    pub children: u64,
}

/// One pass of a root.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PassSummary {
    /// Why it ran (`startup`, `poll`, `requested`, `push`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// RFC 3339 start time.
    pub started_at: String,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// `Succeeded` or `Failed`.
    pub result: String,
    /// The revision applied (or tried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// What the pass changed, `Kind/namespace/name action`: at most 20, then how many more; on
    /// the newest pass only (`weft trigger --wait` prints them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// How many changed objects the newest pass of `status.passes` names.
pub const MAX_PASS_CHANGES: usize = 20;

impl PassSummary {
    /// `changes` as the newest pass keeps them: the first [`MAX_PASS_CHANGES`], then
    /// `and N more`.
    pub fn bounded_changes(changes: &[String]) -> Vec<String> {
        let mut kept: Vec<String> = changes.iter().take(MAX_PASS_CHANGES).cloned().collect();
        if changes.len() > MAX_PASS_CHANGES {
            kept.push(format!("and {} more", changes.len() - MAX_PASS_CHANGES));
        }
        kept
    }
}

/// The default of `spec.interval`.
pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// The default of `spec.timeout`.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);
/// The default of `spec.maxPruneFraction`.
pub const DEFAULT_MAX_PRUNE_FRACTION: f64 = 0.5;
/// How many passes `status.passes` keeps.
pub const MAX_PASSES: usize = 10;

/// A duration written as [`DURATION_PATTERN`] allows (`90s`, `5m`, `1h30m`); `None` when it is
/// not one (the API server refuses those before Weft sees them).
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    if !matches_duration_pattern(text) {
        return None;
    }
    humantime::parse_duration(text).ok()
}

/// Whether `text` matches [`DURATION_PATTERN`], checked by hand (the api layer compiles no
/// regular expression on each call).
fn matches_duration_pattern(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 6 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

impl GitRefSpec {
    /// The ref as Weft's `--ref` flag reads it (`refs/heads/<branch>`, `refs/tags/<tag>`, or a
    /// commit SHA), or `None` for the remote's HEAD and for a semver range (see `semver`).
    pub fn as_flag(&self) -> Option<String> {
        if let Some(b) = &self.branch {
            return Some(format!("refs/heads/{b}"));
        }
        if let Some(t) = &self.tag {
            return Some(format!("refs/tags/{t}"));
        }
        self.commit.clone()
    }
}

/// A semver range as Flux writes it (`>=1.2.0 <2.0.0`, `~1.2`, `1.x`), read by the `semver`
/// crate (which separates comparators with commas).
pub fn parse_semver_range(range: &str) -> Result<semver::VersionReq, semver::Error> {
    let mut parts: Vec<String> = Vec::new();
    for token in range.split([',', ' ']).filter(|t| !t.is_empty()) {
        // `>= 1.2` written with a space: the operator joins the version after it.
        match parts.last_mut() {
            Some(last) if matches!(last.as_str(), ">" | ">=" | "<" | "<=" | "=" | "~" | "^") => {
                last.push_str(token)
            }
            _ => parts.push(token.to_string()),
        }
    }
    semver::VersionReq::parse(&parts.join(", "))
}

/// The highest of `tags` (`v1.2.3` or `1.2.3`) that `range` admits, by semver order (a
/// pre-release only when the range names one, as the semver crate reads ranges).
pub fn highest_matching_tag<'a>(
    range: &semver::VersionReq,
    tags: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    tags.into_iter()
        .filter_map(|t| {
            let v = semver::Version::parse(t.strip_prefix('v').unwrap_or(t)).ok()?;
            range.matches(&v).then_some((v, t))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t)
}

impl RootSpec {
    /// `spec.interval`, or the default (1m).
    pub fn interval(&self) -> std::time::Duration {
        self.interval
            .as_deref()
            .and_then(parse_duration)
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_INTERVAL)
    }

    /// `spec.timeout`, or the default (5m).
    pub fn timeout(&self) -> std::time::Duration {
        self.timeout
            .as_deref()
            .and_then(parse_duration)
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_TIMEOUT)
    }

    /// `spec.maxPruneFraction`, or the default (0.5).
    pub fn max_prune_fraction(&self) -> f64 {
        self.max_prune_fraction
            .filter(|f| (0.0..=1.0).contains(f))
            .unwrap_or(DEFAULT_MAX_PRUNE_FRACTION)
    }

    /// `spec.prune`, or the default (true).
    pub fn prune(&self) -> bool {
        self.prune.unwrap_or(true)
    }
}

impl RootReference {
    /// `namespace/name`, the namespace defaulting to `own_namespace` (the referring root's).
    pub fn key(&self, own_namespace: &str) -> super::ResourceKey {
        super::ResourceKey {
            namespace: self
                .namespace
                .clone()
                .unwrap_or_else(|| own_namespace.to_string()),
            name: self.name.clone(),
        }
    }
}

#[cfg(test)]
impl Root {
    /// A Root `namespace/name` of the repository `url`, everything else defaulted (for tests).
    pub fn of_repository(namespace: &str, name: &str, url: &str) -> Root {
        let mut root = Root::new(
            name,
            RootSpec {
                source: GitSource {
                    url: url.into(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        root.metadata.namespace = Some(namespace.into());
        root
    }
}

#[cfg(test)]
mod tests;
