//! The `weft sync` and `weft diff` binaries against the real control plane: exit codes, the
//! plan and progress lines a user reads, and the example repository deployed wave by wave.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use support::cluster::{self, TestNamespace};
use support::manifests::configmap;
use support::repo_dir::Repo;
use support::weft_cli::Weft;

/// Run `weft <args> --repo <repo>` against the test cluster, with its inventory and sync root
/// in `ns`.
fn weft(sub: &str, repo: &Path, ns: &str, extra: &[&str]) -> Output {
    Weft::new([sub])
        .repo(repo)
        .cluster()
        .root(ns)
        .args(extra)
        // The examples repository's encrypted Secret (docs/secrets.md).
        .age_key(examples_repo().join("TEST-ONLY-age.agekey"))
        .env("WEFT_LOG", "warn")
        .output()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn value_of(client: &Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.expect("get").map(|c| {
        c.data
            .unwrap_or_default()
            .get("value")
            .cloned()
            .unwrap_or_default()
    })
}

#[tokio::test]
async fn sync_prints_progress_and_dry_run_prints_the_plan_without_writing() {
    let ns = TestNamespace::new("cli-plan").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    for n in ["a", "b", "c"] {
        repo.write(&format!("{n}.yaml"), &configmap(&name, n, "one"));
    }
    let out = weft("sync", repo.path(), &name, &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("created    ConfigMap/{name}/a\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "synced revision local: 3 created, 0 configured, 0 unchanged, 0 deleted, 0 skipped"
        ),
        "{stdout}"
    );

    repo.write("a.yaml", &configmap(&name, "a", "two"));
    repo.remove("c.yaml");
    repo.write("d.yaml", &configmap(&name, "d", "new"));
    let out = weft("sync", repo.path(), &name, &["--dry-run"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for line in [
        format!("update     ConfigMap/{name}/a (changed)"),
        // A pipe gets a line per change; unchanged objects are counted.
        "unchanged  1 object(s)".to_string(),
        format!("create     ConfigMap/{name}/d"),
        format!("prune      ConfigMap/{name}/c"),
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing `{line}` in:\n{stdout}"
        );
    }
    assert!(stdout.contains("(0 API writes"), "{stdout}");
    assert_eq!(value_of(&client, &name, "a").await.as_deref(), Some("one"));
    assert_eq!(value_of(&client, &name, "c").await.as_deref(), Some("one"));
    assert_eq!(value_of(&client, &name, "d").await, None);

    // The same through the environment, as the daemon's container would set it.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    if let Some(context) = cluster::cluster().context() {
        cmd.env("WEFT_CONTEXT", context);
    }
    let out = cmd
        .arg("sync")
        .env("WEFT_REPO", repo.path())
        .env("WEFT_KUBECONFIG", cluster::kubeconfig_path())
        .env("WEFT_NAMESPACE", &name)
        .env("WEFT_ROOT_NAME", &name)
        .env("WEFT_DRY_RUN", "true")
        .env_remove("KUBECONFIG")
        .output()
        .expect("run weft");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("prune      ConfigMap/{name}/c")),
        "{stdout}"
    );

    let out = weft("sync", repo.path(), &name, &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("deleted    ConfigMap/{name}/c\n")),
        "{stdout}"
    );
    assert_eq!(value_of(&client, &name, "a").await.as_deref(), Some("two"));
    assert_eq!(value_of(&client, &name, "c").await, None);
    ns.delete().await;
}

#[tokio::test]
async fn diff_exit_codes_and_unified_diffs() {
    let ns = TestNamespace::new("cli-diff").await;
    let name = ns.name().to_string();
    let repo = Repo::new();
    repo.write("a.yaml", &configmap(&name, "a", "one"));
    repo.write("b.yaml", &configmap(&name, "b", "one"));
    let out = weft("sync", repo.path(), &name, &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));

    let out = weft("diff", repo.path(), &name, &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("no changes"), "{stderr}");

    repo.write("a.yaml", &configmap(&name, "a", "two"));
    repo.remove("b.yaml");
    let out = weft("diff", repo.path(), &name, &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "--- live/ConfigMap/{name}/a\n+++ desired/ConfigMap/{name}/a\n"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("-  value: one\n+  value: two\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("--- live/ConfigMap/{name}/b\n")),
        "{stdout}"
    );
    assert!(
        !stdout.contains("managedFields") && !stdout.contains("resourceVersion"),
        "{stdout}"
    );
    assert!(stderr.contains("2 object(s) would change"), "{stderr}");

    // An error (no such kubeconfig) is exit code 2.
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["diff", "--repo"])
        .arg(repo.path())
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .expect("run weft");
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    assert!(
        text(&out).1.contains("/nonexistent/kubeconfig"),
        "{:?}",
        text(&out)
    );
    ns.delete().await;
}

#[tokio::test]
async fn sync_exits_non_zero_naming_what_did_not_become_ready() {
    let ns = TestNamespace::new("cli-stuck").await;
    let name = ns.name().to_string();
    let repo = Repo::new();
    repo.write(
        "stuck.yaml",
        &format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: stuck, namespace: {name}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: stuck}}}}
  template:
    metadata: {{labels: {{app: stuck}}}}
    spec:
      nodeSelector: {{weft.test/no-such-node: "true"}}
      containers: [{{name: app, image: example.com/app:1}}]
"#
        ),
    );
    let out = weft("sync", repo.path(), &name, &["--timeout", "6s"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("timed out after 6s waiting for 1 object(s) to become ready"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "Deployment/{name}/stuck: 0 of 2 replicas available"
        )),
        "{stderr}"
    );
    ns.delete().await;
}

fn examples_repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples-repo")
}

/// The example repository: the WeaveCloud agents, plain manifests, and the Armada manifest whose
/// sequenced group is deployed chart by chart, each waited for before the next.
#[tokio::test]
async fn examples_repo_first_pass_wave_by_wave_then_a_no_op_pass() {
    let ns = TestNamespace::new("cli-examples").await;
    let name = ns.name().to_string();
    let client = ns.client();
    // Weft's CRDs, as `kubectl apply -f deploy/` installs them.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for crd in weft::api::crds() {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("weft-test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("install CRD");
    }
    // The local control plane has no storage provisioner: a volume for the redis chart's claim.
    if cluster::cluster().is_local() {
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{name}-pv")},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/weft-test-pv"}}});
        pvs.patch(
            &format!("{name}-pv"),
            &PatchParams::apply("weft-test"),
            &Patch::Apply(&pv),
        )
        .await
        .expect("PV");
    }

    let out = weft("sync", &examples_repo(), &name, &["--timeout", "3m"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let at = |line: &str| {
        stdout
            .lines()
            .position(|l| l.trim_end() == line)
            .unwrap_or_else(|| panic!("missing `{line}` in:\n{stdout}"))
    };
    // The sequenced group: redis ready before api is applied, api ready before web.
    let redis_ready = at("ready      StatefulSet/demo/demo-redis");
    let api_created = at("created    Deployment/demo/demo-api");
    let api_ready = at("ready      Deployment/demo/demo-api");
    let web_created = at("created    Deployment/demo/demo-web");
    assert!(at("created    StatefulSet/demo/demo-redis") < redis_ready);
    assert!(redis_ready < api_created, "{stdout}");
    assert!(api_ready < web_created, "{stdout}");
    // The api chart's pre-install hook (its migration Job, a Helm hook) ran before its objects.
    let hook_created = stdout
        .lines()
        .position(|l| l.starts_with("created    Job/demo/demo-api-migrate"))
        .unwrap_or_else(|| panic!("no hook Job in:\n{stdout}"));
    assert!(
        redis_ready < hook_created && hook_created < api_created,
        "{stdout}"
    );
    assert!(at("created    WeaveCloud/weave/weave-cloud") < redis_ready);
    assert!(
        stdout.contains("created    Deployment/weave/weave-flux-agent"),
        "{stdout}"
    );

    let out = weft("sync", &examples_repo(), &name, &["--timeout", "3m"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains(" 0 created, 0 configured,"), "{stdout}");
    assert!(stdout.contains("(0 API writes"), "{stdout}");

    // Clean up what the example created outside the test namespace.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in ["demo", "weave"] {
        let _ = namespaces.delete(n, &DeleteParams::default()).await;
    }
    ns.delete().await;
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--repo` as a git URL: the snapshot comes from the git source at the commit of `--ref`, and
/// `--path` picks a subdirectory; `weft diff` shows objects whose namespace the pass creates.
#[tokio::test]
async fn sync_from_a_git_url_with_ref_and_path() {
    let ns = TestNamespace::new("cli-git").await;
    let name = ns.name().to_string();
    let client = ns.client();
    let repo = Repo::new();
    let target = format!("{name}-app");
    repo.write(
        "clusters/test/app.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {target}}}\n---\n{}",
            configmap(&target, "settings", "from-git")
        ),
    );
    repo.write("README.md", "not a manifest\n");
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let url = format!("file://{}", repo.path().display());
    let home = tempfile::tempdir().expect("home");
    let run = |sub: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([
                sub,
                "--repo",
                &url,
                "--ref",
                "main",
                "--path",
                "clusters/test",
            ])
            .args(cluster::cluster().kube_args())
            .args(["--weft-namespace", &name, "--root-name", &name])
            .args(extra)
            .env("XDG_CACHE_HOME", home.path())
            .env("HOME", home.path())
            .env_remove("KUBECONFIG")
            .output()
            .expect("run weft")
    };

    let out = run("diff", &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("+++ desired/ConfigMap/{target}/settings")),
        "{stdout}"
    );
    assert!(stdout.contains("+  value: from-git"), "{stdout}");

    let out = run("sync", &[]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("created    Namespace/{target}")),
        "{stdout}"
    );
    assert_eq!(
        value_of(&client, &target, "settings").await.as_deref(),
        Some("from-git")
    );
    let out = run("diff", &[]);
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&target, &DeleteParams::default()).await;
    ns.delete().await;
}
