//! The root of `weft run`'s flags as a Root object (issue 41 item 5, `--root-object`): the
//! Root `--root-name` in Weft's namespace, created from the flags when it is missing and then
//! reconciled by the Root controller like any other root.
//!
//! What a root is lives in that object from then on: a daemon started later with other
//! flags does not switch it silently (the same rule as a daemon of another repository, see
//! `daemon::leader`): it refuses to start unless `--switch-repository`, which writes the flags'
//! source into the Root's spec.
//!
//! The migration of a cluster Weft already manages writes the Root only. The Root owns what the
//! flag root owned because they are one owner (`root/<Weft's namespace>/<name>`, the same owner
//! label and inventory ConfigMap, see `api::owner::OwnerKind::Root`); the root record
//! (`weft-root-<name>`) gives the Root its suspension, its pending `weft trigger` request and
//! its last revision and passes, and is left as it is (a rollback to the flag loop reads it).

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::legacy;
use crate::api::keys::REQUESTED_AT_ANNOTATION;
use crate::api::root::{GitRefSpec, GitSource, LocalReference, PassSummary, Root, RootSpec};
use crate::api::ResourceKey;
use crate::apply::FIELD_MANAGER;
use crate::daemon::leader::{same_repository, shown_repository};
use crate::pass::PassSettings;

/// What the flags say the root is: its key and the spec they describe.
#[derive(Clone, Debug)]
pub struct FlagRoot {
    pub key: ResourceKey,
    pub spec: RootSpec,
    /// Where the flag loop puts manifests without a namespace.
    pub default_namespace: String,
}

/// Why the flag root cannot become (or stay) its Root object.
#[derive(Debug, thiserror::Error)]
pub enum FlagRootError {
    /// The Root's spec names another source than the flags, and no `--switch-repository`.
    #[error("the Root {key} syncs {recorded}; this daemon's flags say {ours}. The Root's spec is the root now: the root {} syncs its source until it is switched. Edit the Root (`kubectl edit root {} -n {}`), or start this daemon once with --switch-repository to write the flags' source into it (what the new source lacks is pruned); else give this daemon another --root-name", .key.name, .key.name, .key.namespace)]
    Differs {
        key: ResourceKey,
        recorded: String,
        ours: String,
    },
    /// The API server does not serve Roots: the CRD was never installed.
    #[error("the Root CRD (roots.weft.io) is not installed, so the flag root {key} cannot be a Root object: install it with `weft install` or `kubectl apply --server-side -f deploy/crds.yaml`, then start this daemon again")]
    NoCrd { key: ResourceKey },
    /// No Root CRD, and this daemon could not install it.
    #[error("the Root CRD (roots.weft.io) is not installed and this daemon could not install it ({why}), so the flag root {key} cannot be reconciled: install it with `weft install` or `kubectl apply --server-side -f deploy/crds.yaml`, then start this daemon again")]
    NoCrdInstalled { key: ResourceKey, why: String },
    #[error("cannot {action} the Root {key}: {}", crate::api::kube_error::Text(.source))]
    Api {
        key: ResourceKey,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// What [`adopt`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adopted {
    /// The Root was there, with the flags' source: nothing written.
    Kept,
    /// The Root was created from the flags (and the root record, when there was one).
    Created,
    /// The Root's source was switched to the flags' (`--switch-repository`).
    Switched,
}

impl Adopted {
    /// As a log line says it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Adopted::Kept => "kept",
            Adopted::Created => "created",
            Adopted::Switched => "switched",
        }
    }
}

impl FlagRoot {
    /// The root the flags describe: `--repo`, `--ref`, `--path`, `--interval`, `--timeout`,
    /// `--max-prune-fraction`, `--target-manifest`, `--git-secret`.
    pub fn from_flags(
        settings: &PassSettings,
        git_ref: Option<&str>,
        path: Option<&str>,
        interval: Duration,
        git_secret: Option<&str>,
    ) -> FlagRoot {
        FlagRoot {
            key: ResourceKey {
                namespace: settings.weft_namespace.clone(),
                name: settings.root_name.clone(),
            },
            spec: RootSpec {
                source: GitSource {
                    url: settings.repo_location.clone(),
                    git_ref: git_ref.and_then(ref_spec),
                    secret_ref: git_secret.map(|n| LocalReference {
                        name: n.to_string(),
                    }),
                },
                path: path.filter(|p| !p.is_empty()).map(str::to_string),
                interval: Some(duration_text(interval)),
                timeout: Some(duration_text(settings.timeout)),
                max_prune_fraction: Some(settings.max_prune_fraction),
                target_manifest: settings.target_manifest.clone(),
                armada_values: settings.armada_values.clone(),
                ..RootSpec::default()
            },
            default_namespace: settings.default_namespace.clone(),
        }
    }

    /// The flags' source, as an error names it.
    fn shown(spec: &RootSpec) -> String {
        let mut s = shown_repository(&spec.source.url);
        if let Some(r) = spec.source.git_ref.as_ref().and_then(GitRefSpec::as_flag) {
            s.push_str(&format!(" at {r}"));
        }
        if let Some(p) = &spec.path {
            s.push_str(&format!(" (path {p})"));
        }
        s
    }
}

/// `--ref` as a Root's ref: `refs/heads/B` a branch, `refs/tags/T` a tag, 40 hex digits a
/// commit, any other name a branch (as `git clone --branch` reads it first); `HEAD`: none.
pub fn ref_spec(flag: &str) -> Option<GitRefSpec> {
    let flag = flag.trim();
    if flag.is_empty() || flag == "HEAD" {
        return None;
    }
    let mut spec = GitRefSpec::default();
    if flag.len() == 40 && flag.bytes().all(|b| b.is_ascii_hexdigit()) {
        spec.commit = Some(flag.to_ascii_lowercase());
    } else if let Some(t) = flag.strip_prefix("refs/tags/") {
        spec.tag = Some(t.to_string());
    } else {
        spec.branch = Some(flag.strip_prefix("refs/heads/").unwrap_or(flag).to_string());
    }
    Some(spec)
}

/// A duration as the Root's schema writes it (`90s`, `5m`, `1h`).
fn duration_text(d: Duration) -> String {
    let secs = d.as_secs().max(1);
    if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Whether `spec` follows the same source as `flags` (repository, ref, path).
fn same_source(spec: &RootSpec, flags: &RootSpec) -> bool {
    same_repository(&spec.source.url, &flags.source.url)
        && spec.source.git_ref.as_ref().and_then(GitRefSpec::as_flag)
            == flags.source.git_ref.as_ref().and_then(GitRefSpec::as_flag)
        && spec.path.as_deref().unwrap_or("") == flags.path.as_deref().unwrap_or("")
}

/// Check, before anything is written, that the flags may drive the Root: whether it exists. An
/// existing Root of another source is refused unless `switch`.
pub async fn check(client: &Client, flags: &FlagRoot, switch: bool) -> Result<bool, FlagRootError> {
    let existing = match read(client, flags).await {
        // A cluster Weft managed before the Root existed (or where `weft install` never ran):
        // the daemon installs the Root CRD itself when it may, as today's users upgrade the
        // binary before the manifests; else it refuses, saying how to install it. This runs
        // before the leader Lease is held, when the write fence lets no write out: a dry run
        // proves that it may, and [`adopt`] installs it as the leader.
        Err(FlagRootError::NoCrd { key }) => {
            apply_root_crd(client, true)
                .await
                .map_err(|why| FlagRootError::NoCrdInstalled { key, why })?;
            return Ok(false);
        }
        other => other?,
    };
    match existing {
        None => Ok(false),
        Some(root) if switch || same_source(&root.spec, &flags.spec) => Ok(true),
        Some(root) => Err(FlagRootError::Differs {
            key: flags.key.clone(),
            recorded: FlagRoot::shown(&root.spec),
            ours: FlagRoot::shown(&flags.spec),
        }),
    }
}

/// The flag root's Root, `None` when there is none ([`FlagRootError::NoCrd`] without its CRD).
async fn read(client: &Client, flags: &FlagRoot) -> Result<Option<Root>, FlagRootError> {
    let api: Api<Root> = Api::namespaced(client.clone(), &flags.key.namespace);
    // A missing Root is a 404 with reason NotFound (`None`); without the CRD the path itself
    // is unknown: a 404 of another reason ("page not found").
    api.get_opt(&flags.key.name)
        .await
        .map_err(|source| match &source {
            kube::Error::Api(e) if e.code == 404 => FlagRootError::NoCrd {
                key: flags.key.clone(),
            },
            _ => FlagRootError::Api {
                key: flags.key.clone(),
                action: "read",
                source,
            },
        })
}

/// Create the Root CRD (server-side apply as Weft, the same object `weft install` applies) and
/// wait until the API server serves it; with `dry_run`, only ask the API server whether this
/// daemon may. The reason in one line when it cannot.
async fn apply_root_crd(client: &Client, dry_run: bool) -> Result<(), String> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::runtime::wait::{await_condition, conditions};
    use kube::CustomResourceExt;
    let crd = Root::crd();
    let name = crd.name_any();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut pp = PatchParams::apply(FIELD_MANAGER);
    pp.dry_run = dry_run;
    api.patch(&name, &pp, &Patch::Apply(&crd))
        .await
        .map_err(|e| crate::api::kube_error::Text(&e).to_string())?;
    if dry_run {
        return Ok(());
    }
    match tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api, &name, conditions::is_crd_established()),
    )
    .await
    {
        Ok(Ok(_)) => {
            tracing::info!(crd = %name, "installed the Root CRD: the flag root becomes its Root object");
            Ok(())
        }
        Ok(Err(e)) => Err(format!("watching it: {e}")),
        Err(_) => Err("it was created but not Established within 30 s".to_string()),
    }
}

/// Make the flags' root a Root object (the caller holds the leader Lease): create it when it is
/// missing (from the flags and the root record), switch its source when told, else leave it.
/// Writes the Root only.
pub async fn adopt(
    client: &Client,
    flags: &FlagRoot,
    switch: bool,
) -> Result<Adopted, FlagRootError> {
    let key = &flags.key;
    let api_error = |action, source| FlagRootError::Api {
        key: key.clone(),
        action,
        source,
    };
    // No Root CRD yet: [`check`] found that this daemon may install it, now that it may write.
    if let Err(FlagRootError::NoCrd { key }) = read(client, flags).await {
        apply_root_crd(client, false)
            .await
            .map_err(|why| FlagRootError::NoCrdInstalled { key, why })?;
    }
    let api: Api<Root> = Api::namespaced(client.clone(), &key.namespace);
    let existing = read(client, flags).await?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    if let Some(root) = existing {
        if same_source(&root.spec, &flags.spec) {
            return Ok(Adopted::Kept);
        }
        if !switch {
            return Err(FlagRootError::Differs {
                key: key.clone(),
                recorded: FlagRoot::shown(&root.spec),
                ours: FlagRoot::shown(&flags.spec),
            });
        }
        // The whole spec, the source and path switched: an apply names the object, and the
        // fields this manager set when it created the Root (interval, timeout, …) are kept.
        let mut spec = root.spec.clone();
        spec.source = flags.spec.source.clone();
        spec.path.clone_from(&flags.spec.path);
        let patch = json!({
            "apiVersion": "weft.io/v1alpha1",
            "kind": "Root",
            "metadata": {"name": key.name, "namespace": key.namespace},
            "spec": spec,
        });
        api.patch(&key.name, &pp, &Patch::Apply(&patch))
            .await
            .map_err(|e| api_error("switch the source of", e))?;
        tracing::warn!(root = %key, source = %FlagRoot::shown(&flags.spec), "switched the Root's source to this daemon's flags (--switch-repository)");
        return Ok(Adopted::Switched);
    }
    let record_cm = legacy::read(client, &key.namespace, &key.name)
        .await
        .map_err(|e| api_error("read the root record of", e))?;
    let migrated = Migrated::from_record(record_cm.as_ref());
    let mut spec = flags.spec.clone();
    spec.suspend = migrated.suspended;
    // Manifests without a namespace stay where the flag loop put them.
    let mut annotations = BTreeMap::from([(
        crate::api::keys::DEFAULT_NAMESPACE_ANNOTATION.to_string(),
        flags.default_namespace.clone(),
    )]);
    if let Some(at) = &migrated.requested_at {
        annotations.insert(REQUESTED_AT_ANNOTATION.to_string(), at.clone());
    }
    let root = json!({
        "apiVersion": "weft.io/v1alpha1",
        "kind": "Root",
        "metadata": {"name": key.name, "namespace": key.namespace, "annotations": annotations},
        "spec": spec,
    });
    let created = api
        .patch(&key.name, &pp, &Patch::Apply(&root))
        .await
        .map_err(|e| api_error("create", e))?;
    if let Some(status) = migrated.status() {
        let patch = json!({"apiVersion": "weft.io/v1alpha1", "kind": "Root", "status": status});
        api.patch_status(&created.name_any(), &pp, &Patch::Apply(&patch))
            .await
            .map_err(|e| api_error("carry the record's status over to", e))?;
    }
    tracing::info!(root = %key, record = record_cm.is_some(), suspended = migrated.suspended, "the flag root is now a Root object (created from the flags and its root record; the objects it owns were not written)");
    Ok(Adopted::Created)
}

/// What a root record hands over to the Root created for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Migrated {
    pub suspended: bool,
    /// The record's `weft trigger` request (`weft.io/requested-at`), answered or not.
    pub requested_at: Option<String>,
    /// The request the record's answer says was handled.
    pub handled: Option<String>,
    pub revision: Option<String>,
    /// Whether the last pass applied `revision` (a failed pass only attempted it).
    pub applied: bool,
    pub passes: Vec<PassSummary>,
}

impl Migrated {
    /// What `record` (the ConfigMap `weft-root-<name>`, if any) holds.
    pub fn from_record(cm: Option<&k8s_openapi::api::core::v1::ConfigMap>) -> Migrated {
        let Some(cm) = cm else {
            return Migrated::default();
        };
        let record = legacy::Record::of(cm);
        Migrated {
            suspended: record.suspended,
            requested_at: record.requested_at,
            handled: record.handled,
            revision: record.revision,
            applied: record.ready,
            passes: record
                .passes
                .into_iter()
                .map(|p| PassSummary {
                    reasons: p.reasons,
                    started_at: p.started_at,
                    duration_ms: p.duration_ms,
                    result: p.result,
                    revision: p.revision,
                    changes: Vec::new(),
                })
                .collect(),
        }
    }

    /// The Root's first status (none when the record held no pass): the revisions, the request
    /// answered and the passes. No condition: the controller says Ready after its first pass.
    fn status(&self) -> Option<serde_json::Value> {
        if self.revision.is_none() && self.handled.is_none() && self.passes.is_empty() {
            return None;
        }
        Some(json!({
            "lastAppliedRevision": self.revision.as_ref().filter(|_| self.applied),
            "lastAttemptedRevision": self.revision,
            "lastHandledRequestedAt": self.handled,
            "passes": self.passes,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    #[test]
    fn flags_become_a_spec_the_schema_accepts() {
        let settings = PassSettings {
            repo_location: "https://git.example/config.git".into(),
            root_name: "weft".into(),
            weft_namespace: "weft-system".into(),
            timeout: Duration::from_secs(300),
            ..PassSettings::default()
        };
        let flags = FlagRoot::from_flags(
            &settings,
            Some("refs/tags/v1"),
            Some("clusters/prod"),
            Duration::from_secs(90),
            Some("git-creds"),
        );
        assert_eq!(flags.key.to_string(), "weft-system/weft");
        let s = &flags.spec;
        assert_eq!(
            s.source.git_ref.as_ref().unwrap().tag.as_deref(),
            Some("v1")
        );
        assert_eq!(s.interval.as_deref(), Some("90s"));
        assert_eq!(s.timeout.as_deref(), Some("5m"));
        assert_eq!(s.path.as_deref(), Some("clusters/prod"));
        assert_eq!(s.source.secret_ref.as_ref().unwrap().name, "git-creds");
        assert_eq!(ref_spec("main").unwrap().branch.as_deref(), Some("main"));
        assert_eq!(ref_spec("HEAD"), None);
        let sha = "A".repeat(40);
        assert_eq!(ref_spec(&sha).unwrap().commit, Some("a".repeat(40)));
        assert_eq!(duration_text(Duration::from_secs(3600)), "1h");
    }

    #[test]
    fn another_ref_or_path_is_another_source() {
        let settings = PassSettings {
            repo_location: "https://git.example/config.git".into(),
            ..PassSettings::default()
        };
        let a = FlagRoot::from_flags(&settings, None, None, Duration::from_secs(60), None);
        let b = FlagRoot::from_flags(&settings, Some("main"), None, Duration::from_secs(60), None);
        let c = FlagRoot::from_flags(&settings, None, Some("x"), Duration::from_secs(60), None);
        assert!(same_source(&a.spec, &a.spec));
        assert!(!same_source(&a.spec, &b.spec));
        assert!(!same_source(&a.spec, &c.spec));
    }

    #[test]
    fn a_record_hands_over_its_suspension_request_and_revision() {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([(
                    REQUESTED_AT_ANNOTATION.to_string(),
                    "2026-12-05T01:00:00Z".to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("suspended".to_string(), "true".to_string()),
                ("ready".to_string(), "True".to_string()),
                ("revision".to_string(), "abc".to_string()),
            ])),
            ..Default::default()
        };
        let m = Migrated::from_record(Some(&cm));
        assert!(m.suspended);
        assert!(m.applied);
        assert_eq!(m.revision.as_deref(), Some("abc"));
        assert_eq!(m.requested_at.as_deref(), Some("2026-12-05T01:00:00Z"));
        let status = m.status().expect("a status");
        assert_eq!(status["lastAppliedRevision"], "abc");
        assert_eq!(Migrated::from_record(None), Migrated::default());
        assert_eq!(Migrated::default().status(), None);
    }
}
