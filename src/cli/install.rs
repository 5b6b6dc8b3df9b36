//! `weft install`: Weft itself into a cluster, as `flux install` does. The manifests are deploy/'s
//! (the same ones `kubectl apply -f deploy/` and the Helm chart's defaults install), embedded in
//! the binary at build time, changed only where a flag asks (image, namespace, repository, RBAC
//! tiers), and applied with server-side apply (field manager `weft`) in the order of deploy/'s
//! files, CRDs first. `-o yaml` prints them instead; `--dry-run` asks the API server to check them
//! without storing anything. This file builds the manifests from the flags and prints; the API
//! calls (apply, the wait for the Deployment) are `daemon::install`'s.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::args::ClusterArgs;
use crate::daemon::install::{self, object_of, Applied, Availability, DEPLOYMENT};

/// deploy/'s manifests, in the order they are applied: the CRDs, then the files by name.
const MANIFESTS: [(&str, &str); 9] = [
    ("crds.yaml", include_str!("../../deploy/crds.yaml")),
    (
        "00-namespace.yaml",
        include_str!("../../deploy/00-namespace.yaml"),
    ),
    ("10-rbac.yaml", include_str!("../../deploy/10-rbac.yaml")),
    (
        "11-rbac-agents.yaml",
        include_str!("../../deploy/11-rbac-agents.yaml"),
    ),
    (
        "12-rbac-apply.yaml",
        include_str!("../../deploy/12-rbac-apply.yaml"),
    ),
    (
        "13-rbac-notifications.yaml",
        include_str!("../../deploy/13-rbac-notifications.yaml"),
    ),
    (
        "20-deployment.yaml",
        include_str!("../../deploy/20-deployment.yaml"),
    ),
    (
        "30-service.yaml",
        include_str!("../../deploy/30-service.yaml"),
    ),
    (
        "40-networkpolicy.yaml",
        include_str!("../../deploy/40-networkpolicy.yaml"),
    ),
];

/// The namespace deploy/'s manifests name.
const DEPLOY_NAMESPACE: &str = "weft-system";

/// The optional RBAC tiers (docs/security.md); the base tier (10-rbac.yaml) is always installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tier {
    /// WeaveCloud agents (11-rbac-agents.yaml).
    Agents,
    /// Armada charts and plain manifests (12-rbac-apply.yaml).
    Apply,
    /// Providers and Alerts (13-rbac-notifications.yaml).
    Notifications,
}

impl Tier {
    fn file(self) -> &'static str {
        match self {
            Tier::Agents => "11-rbac-agents.yaml",
            Tier::Apply => "12-rbac-apply.yaml",
            Tier::Notifications => "13-rbac-notifications.yaml",
        }
    }
}

/// What `-o` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The manifests as multi-document YAML; nothing is sent to the cluster.
    Yaml,
}

/// The flags of `weft install`.
#[derive(Args, Debug)]
pub struct InstallArgs {
    /// The daemon's image, `REPOSITORY:TAG` or `REPOSITORY@DIGEST` (default: deploy/'s,
    /// ghcr.io/weft-gitops/weft:<version>; build it from deploy/Containerfile, docs/install.md).
    #[arg(long)]
    pub image: Option<String>,
    /// The config repository the daemon syncs (its `WEFT_REPO`; default: deploy/'s placeholder).
    #[arg(long = "repo")]
    pub repo_url: Option<String>,
    /// Branch, tag or commit of that repository (its `WEFT_REF`).
    #[arg(long = "ref")]
    pub git_ref: Option<String>,
    /// The optional RBAC tiers to install, comma-separated (the base tier always is).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "agents,apply,notifications"
    )]
    pub tiers: Vec<Tier>,
    /// Leave the CustomResourceDefinitions out (when they are managed apart, e.g. by `weft crds`
    /// in a pipeline of their own).
    #[arg(long)]
    pub skip_crds: bool,
    /// A Weft of one namespace (`--weft-namespace`): every ClusterRole becomes a Role there and
    /// every ClusterRoleBinding a RoleBinding (rules on cluster-scoped kinds dropped), the daemon
    /// runs with `--watch-namespaces` of that namespace, and neither the Namespace nor the CRDs
    /// are installed (a cluster administrator's). docs/install.md, "A namespaced Weft".
    #[arg(long)]
    pub namespaced: bool,
    /// Print the manifests instead of applying them (`-o yaml`, as `flux install --export`).
    #[arg(long, short = 'o')]
    pub output: Option<Output>,
    /// Server-side dry run: the API server checks every object (schema, admission, RBAC of the
    /// caller) and stores nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not wait for the daemon's Deployment to become available.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the Deployment.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub git: super::args::GitSecretArgs,
}

/// Exit 0 when installed (and, unless `--no-wait`, available), 1 when the wait timed out, 2 on
/// an error.
pub fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let objects = manifests(&args)?;
    if args.output == Some(Output::Yaml) {
        for o in &objects {
            out!("---\n{}", crate::render::output::to_yaml(o)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        let catalog = install::discover(&client).await?;
        // A dry run stores nothing, so the objects of a namespace it would create cannot be
        // checked by the API server (it answers "namespace not found"): they are listed as such.
        let mut new_namespaces = BTreeSet::new();
        let mut unchecked = 0;
        for o in &objects {
            let namespace = o["metadata"]["namespace"].as_str();
            if let Some(ns) = namespace.filter(|ns| args.dry_run && new_namespaces.contains(*ns)) {
                outln!(
                    "{:<10} {} (not checked by the API server: namespace {ns} does not exist yet)",
                    "created",
                    object_of(o)
                );
                unchecked += 1;
                continue;
            }
            let outcome = install::apply(&client, &catalog, o, args.dry_run).await?;
            let object = object_of(o);
            if object.kind == "Namespace" && outcome == Applied::Created {
                new_namespaces.insert(object.name.clone());
            }
            outln!("{:<10} {object}", outcome.as_str());
        }
        if args.dry_run {
            outln!(
                "dry run: {} object(s) checked by the API server{}, none stored",
                objects.len() - unchecked,
                if unchecked > 0 {
                    format!(", {unchecked} in namespaces this install would create not checked")
                } else {
                    String::new()
                }
            );
            return Ok(ExitCode::SUCCESS);
        }
        if args.no_wait {
            return Ok(ExitCode::SUCCESS);
        }
        let namespace = &args.cluster.weft_namespace;
        let waiting = |why: &str| outln!("waiting    Deployment {DEPLOYMENT}: {why}");
        match install::wait_available(&client, namespace, args.timeout, waiting).await? {
            Availability::Ready => {
                outln!("{:<10} Deployment/{namespace}/{DEPLOYMENT}", "ready");
                Ok(ExitCode::SUCCESS)
            }
            Availability::Failed(why) => {
                errln!("error: Deployment {DEPLOYMENT}: {why}");
                Ok(ExitCode::from(1))
            }
            Availability::TimedOut(last) => {
                errln!(
                    "error: Deployment {DEPLOYMENT} not available after {:?}: {last} (kubectl -n {namespace} describe deployment {DEPLOYMENT}; does the image exist?)",
                    args.timeout
                );
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// deploy/'s objects as `args` changes them, in apply order.
fn manifests(args: &InstallArgs) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for (file, text) in MANIFESTS {
        let tier = [Tier::Agents, Tier::Apply, Tier::Notifications]
            .into_iter()
            .find(|t| t.file() == file);
        if tier.is_some_and(|t| !args.tiers.contains(&t))
            || ((args.skip_crds || args.namespaced) && file == "crds.yaml")
        {
            continue;
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .with_context(|| format!("deploy/{file} embedded in weft is not YAML"))?;
        objects.extend(docs.into_iter().filter(Value::is_object));
    }
    if args.namespaced {
        objects.retain(|o| o["kind"] != "Namespace");
        for o in &mut objects {
            namespaced(o, &args.cluster.weft_namespace);
        }
        objects
            .retain(|o| !(o["kind"] == "Role" && o["rules"].as_array().is_none_or(Vec::is_empty)));
    }
    for o in &mut objects {
        customise(o, args)?;
    }
    Ok(objects)
}

/// Kinds a Role cannot grant (cluster-scoped): dropped from the rules of a namespaced install.
const CLUSTER_SCOPED: &[&str] = &[
    "namespaces",
    "nodes",
    "customresourcedefinitions",
    "clusterroles",
    "clusterrolebindings",
];

/// `--namespaced`: a ClusterRole becomes a Role of deploy/'s namespace (renamed to the flag's by
/// [`customise`]), without its rules on cluster-scoped kinds; a ClusterRoleBinding a RoleBinding
/// to it; the daemon watches only its own namespace.
fn namespaced(o: &mut Value, namespace: &str) {
    match o["kind"].as_str() {
        Some("ClusterRole") => {
            o["kind"] = "Role".into();
            o["metadata"]["namespace"] = DEPLOY_NAMESPACE.into();
            if let Some(rules) = o.get_mut("rules").and_then(Value::as_array_mut) {
                for rule in rules.iter_mut() {
                    if let Some(resources) = rule["resources"].as_array_mut() {
                        resources
                            .retain(|r| r.as_str().is_some_and(|r| !CLUSTER_SCOPED.contains(&r)));
                    }
                }
                rules.retain(|r| r["resources"].as_array().is_some_and(|r| !r.is_empty()));
            }
        }
        Some("ClusterRoleBinding") => {
            o["kind"] = "RoleBinding".into();
            o["metadata"]["namespace"] = DEPLOY_NAMESPACE.into();
            o["roleRef"]["kind"] = "Role".into();
        }
        Some("Deployment") => {
            let weft = o
                .pointer_mut("/spec/template/spec/containers")
                .and_then(Value::as_array_mut)
                .and_then(|c| c.iter_mut().find(|c| c["name"] == "weft"));
            if let Some(args) = weft.and_then(|c| c["args"].as_array_mut()) {
                args.push(format!("--watch-namespaces={namespace}").into());
            }
        }
        _ => {}
    }
}

/// One object changed as the flags ask: Weft's namespace, the image, the repository, the git
/// credentials' Secret.
fn customise(o: &mut Value, args: &InstallArgs) -> anyhow::Result<()> {
    let namespace = args.cluster.weft_namespace.as_str();
    if namespace != DEPLOY_NAMESPACE {
        if o["kind"] == "Namespace" {
            o["metadata"]["name"] = namespace.into();
        }
        if o["metadata"]["namespace"] == DEPLOY_NAMESPACE {
            o["metadata"]["namespace"] = namespace.into();
        }
        // Cluster-scoped RBAC of an installation in another namespace is named as Weft names the
        // agents' (`<name>:<namespace>`), so that it does not replace weft-system's.
        if matches!(
            o["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        ) {
            let name = format!(
                "{}:{namespace}",
                o["metadata"]["name"].as_str().unwrap_or("weft")
            );
            o["metadata"]["name"] = name.into();
        }
        if o["roleRef"]["kind"] == "ClusterRole" {
            let name = format!(
                "{}:{namespace}",
                o["roleRef"]["name"].as_str().unwrap_or("weft")
            );
            o["roleRef"]["name"] = name.into();
        }
        if let Some(subjects) = o.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects
                .iter_mut()
                .filter(|s| s["namespace"] == DEPLOY_NAMESPACE)
            {
                s["namespace"] = namespace.into();
            }
        }
    }
    if o["kind"] != "Deployment" {
        return Ok(());
    }
    let Some(container) = o
        .pointer_mut("/spec/template/spec/containers")
        .and_then(Value::as_array_mut)
        .and_then(|c| c.iter_mut().find(|c| c["name"] == "weft"))
    else {
        bail!("deploy/20-deployment.yaml embedded in weft has no container `weft`");
    };
    if let Some(image) = &args.image {
        if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
            bail!("--image: `{}` is not an image reference", bounded(image));
        }
        container["image"] = image.as_str().into();
    }
    let env = [
        ("WEFT_REPO", args.repo_url.as_deref()),
        ("WEFT_REF", args.git_ref.as_deref()),
        ("WEFT_GIT_SECRET", args.git.git_secret.as_deref()),
    ];
    let Some(vars) = container.get_mut("env").and_then(Value::as_array_mut) else {
        bail!("deploy/20-deployment.yaml embedded in weft has no env in container `weft`");
    };
    for (name, value) in env {
        let Some(value) = value else { continue };
        match vars.iter_mut().find(|v| v["name"] == name) {
            Some(v) => v["value"] = value.into(),
            // Beside the repository's other variables, where the chart puts it.
            None => {
                let at = vars
                    .iter()
                    .rposition(|v| {
                        matches!(
                            v["name"].as_str(),
                            Some("WEFT_REPO" | "WEFT_REF" | "WEFT_PATH")
                        )
                    })
                    .map_or(vars.len(), |i| i + 1);
                vars.insert(at, serde_json::json!({"name": name, "value": value}));
            }
        }
    }
    Ok(())
}

/// `text` cut to 100 characters (it is quoted in an error).
fn bounded(text: &str) -> String {
    text.chars().take(100).collect()
}
