//! Day one for a Flux user (issue 33), with the real `weft` binary against the real control
//! plane: `weft trigger [--wait]` through the API server with only a kubeconfig, as `flux
//! reconcile` works; what `weft sync` prints while it waits, fails or changes nothing; and the
//! kubectl-shaped command line.

use crate::support;

use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use support::cluster::{self, TestNamespace};
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::configmap;

/// A bare repository served by `git daemon`, with one commit holding the greeting ConfigMap.
struct Repo {
    _host: RepoHost,
    _server: GitDaemon,
    url: String,
    work: WorkTree,
}

fn repo_with_greeting(ns: &str, value: &str) -> Repo {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let server = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write("apps/greeting.yaml", configmap(ns, "greeting", value));
    work.commit("greeting");
    work.push();
    Repo {
        url: server.url("config.git"),
        _host: host,
        _server: server,
        work,
    }
}

/// The flags that name the test's cluster, and Weft's namespace and root (both the test's
/// namespace, as the test daemons use).
fn cluster_args(ns: &str) -> Vec<String> {
    root_args(ns, ns)
}

/// The flags that name the test's cluster, Weft's namespace `ns` and the root `root`.
fn root_args(ns: &str, root: &str) -> Vec<String> {
    let mut args = cluster::cluster().kube_args();
    args.extend(["--weft-namespace", ns, "--root-name", root].map(String::from));
    args
}

/// Run `weft <args>` with nothing of the daemon's HTTP side in its environment.
async fn weft(args: &[String]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .env_remove("WEFT_URL")
        .env_remove("WEFT_SYNC_TOKEN_FILE")
        .env_remove("WEFT_NAMESPACE")
        .env_remove("WEFT_ROOT_NAME")
        .env("NO_COLOR", "1")
        .output()
        .await
        .expect("run weft")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn greeting(api: &Api<ConfigMap>) -> Option<String> {
    api.get_opt("greeting")
        .await
        .expect("GET configmap")
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

/// Wait until the daemon's first pass is in its Root's status (the Root a request annotates).
async fn wait_record(ns: &TestNamespace, d: &Daemon) {
    let api: Api<weft::api::root::Root> = Api::namespaced(ns.client(), ns.name());
    let name = ns.name();
    for _ in 0..300 {
        let recorded = api
            .get_opt(name)
            .await
            .expect("GET Root")
            .and_then(|r| r.status)
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready"));
        if recorded {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no pass in the status of Root {name}/{name} after 30s:\n{}",
        d.logs()
    );
}

#[tokio::test]
async fn trigger_needs_only_a_kubeconfig_waits_for_its_pass_and_says_suspended() {
    let ns = TestNamespace::new("day1-trigger").await;
    let repo = repo_with_greeting(ns.name(), "one");
    // The poll interval is an hour: only the request can apply the next commit in time.
    let d = Daemon::start(DaemonOptions::new(&repo.url, ns.name()));
    wait_record(&ns, &d).await;
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    assert_eq!(greeting(&api).await.as_deref(), Some("one"));

    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "two"),
    );
    let sha = repo.work.commit("two");
    repo.work.push();
    let mut args = vec!["trigger".to_string(), "--wait".into(), "--timeout".into()];
    args.push("60s".into());
    args.extend(cluster_args(ns.name()));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{stderr}\n{}",
        d.logs()
    );
    assert!(stdout.contains(&sha), "the new revision {sha} in: {stdout}");
    assert!(stdout.contains("succeeded"), "{stdout}");
    assert!(stdout.contains("ConfigMap/") && stdout.contains("configured"));
    // When `weft trigger --wait` returns, the pass that answered has applied the commit.
    assert_eq!(greeting(&api).await.as_deref(), Some("two"));
    assert!(d.logs().contains("reasons=requested"), "{}", d.logs());

    // `weft version` names the client's build and the leading daemon's, read from its Lease.
    let mut args = vec!["version".to_string()];
    args.extend(cluster_args(ns.name()));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        stdout.contains(&format!("client: weft {version} (commit ")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("daemon: weft {version} (commit ")) && stdout.contains("leader "),
        "{stdout}"
    );

    // Without --wait: asked, and answered by a pass soon after.
    let mut args = vec!["trigger".to_string()];
    args.extend(cluster_args(ns.name()));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("requested a pass"), "{stdout}");

    // A suspended root: the request is answered `suspended`, exit 1, nothing applied.
    let mut args = vec!["suspend".to_string()];
    args.extend(cluster_args(ns.name()));
    let out = weft(&args).await;
    assert!(out.status.success(), "{:?}", text(&out));
    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "three"),
    );
    repo.work.commit("three");
    repo.work.push();
    let mut args = vec!["trigger".to_string(), "--wait".into()];
    args.extend(cluster_args(ns.name()));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("suspended"), "{stdout}");
    assert!(!stdout.contains("failed"), "{stdout}");
    assert!(stderr.contains("the root is suspended"), "{stderr}");
    assert_eq!(greeting(&api).await.as_deref(), Some("two"));

    // A root nobody runs is refused at once, not waited for.
    let mut args = vec!["trigger".to_string(), "--wait".into()];
    args.extend(root_args(ns.name(), "nobody-runs-this"));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("Root {}/nobody-runs-this", ns.name())),
        "{stderr}"
    );
    drop(d);
    ns.delete().await;
}

/// A configuration directory with `files` (path, content).
fn config_dir(files: &[(String, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, content) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }
    dir
}

/// `weft sync DIR` into the test's namespace (Weft's namespace and root too), on a pipe. Each
/// step writes its repository into a fresh directory, so the root is synced from another
/// directory each time: `--switch-repository` says that is intended (one writer per root).
async fn sync(dir: &std::path::Path, ns: &str, extra: &[&str]) -> Output {
    let mut args = vec!["sync".to_string(), dir.display().to_string()];
    args.extend(cluster_args(ns));
    args.push("--switch-repository".to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    weft(&args).await
}

fn numbered_configmap(ns: &str, i: usize, value: &str) -> (String, String) {
    (
        format!("apps/cm-{i}.yaml"),
        configmap(ns, &format!("cm-{i}"), value),
    )
}

#[tokio::test]
async fn sync_on_a_pipe_says_what_changed_what_it_waits_for_and_never_synced_for_a_failure() {
    let ns = TestNamespace::new("day1-sync").await;
    let name = ns.name().to_string();

    // 20 objects, then one of them changed: one line for the change, a count for the rest.
    let mut files: Vec<_> = (0..20).map(|i| numbered_configmap(&name, i, "a")).collect();
    let dir = config_dir(&files);
    let out = sync(dir.path(), &name, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    files[3] = numbered_configmap(&name, 3, "b");
    let dir = config_dir(&files);
    let out = sync(dir.path(), &name, &[]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("configured ConfigMap/{name}/cm-3")),
        "{stdout}"
    );
    assert!(
        !stdout.contains(&format!("ConfigMap/{name}/cm-4")),
        "an unchanged object has a line of its own:\n{stdout}"
    );
    assert!(stdout.contains("unchanged  19 object(s)"), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("synced revision local"), "{stdout}");

    // A Deployment no node can take: the wait says what it waits for while it waits, and the
    // summary says the sync failed.
    files.push((
        "apps/never.yaml".to_string(),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: never\n  namespace: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: never}}\n  template:\n    metadata:\n      labels: {{app: never}}\n    spec:\n      nodeSelector: {{weft.io/no-such-node: \"true\"}}\n      containers:\n      - name: c\n        image: registry.invalid/never:1\n"
        ),
    ));
    let dir = config_dir(&files);
    let out = sync(dir.path(), &name, &["--timeout", "12s"]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let waiting: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("waiting ") && l.contains(&format!("Deployment/{name}/never")))
        .collect();
    assert!(
        waiting.len() >= 2,
        "a line every 5s during the 12s wait, naming the Deployment:\n{stdout}"
    );
    assert!(waiting[0].contains("not ready after"), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("sync failed at revision local"),
        "{stdout}"
    );
    assert!(!stdout.contains("synced"), "{stdout}");
    ns.delete().await;
}

#[tokio::test]
async fn load_errors_print_once_and_a_failed_fetch_keeps_no_snapshot_it_never_had() {
    let ns = TestNamespace::new("day1-errors").await;
    let dir = config_dir(&[(
        "apps/bad.yaml".to_string(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n".to_string(),
    )]);
    let out = sync(dir.path(), ns.name(), &[]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let all = format!("{stdout}{stderr}");
    assert_eq!(
        all.matches("bad.yaml:").count(),
        1,
        "the load error once:\n{all}"
    );
    assert!(stderr.contains("nothing was applied or pruned"), "{stderr}");
    assert!(!stdout.contains("synced"), "{stdout}");

    // Nothing listens on this port: the one-shot fetch fails, and there is no snapshot to keep.
    let port = support::git_servers::free_port();
    let mut args = vec![
        "sync".to_string(),
        "--repo".into(),
        format!("git://127.0.0.1:{port}/config.git"),
    ];
    args.extend(cluster_args(ns.name()));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("127.0.0.1"), "{stderr}");
    assert!(!stderr.contains("last good snapshot"), "{stderr}");
    ns.delete().await;
}

/// `weft <args> --help`.
async fn help(args: &[&str]) -> String {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.push("--help".into());
    let out = weft(&all).await;
    assert!(out.status.success(), "{:?}", text(&out));
    text(&out).0
}

#[tokio::test]
async fn the_command_line_speaks_kubectl() {
    // Each command's help lists only the flags it uses, and ends with examples.
    for command in [
        "sync",
        "diff",
        "run",
        "trigger",
        "get",
        "suspend",
        "resume",
        "uninstall",
        "version",
        "completion",
        "render",
        "validate",
        "crds",
    ] {
        let h = help(&[command]).await;
        let examples = h
            .rfind("Examples:")
            .unwrap_or_else(|| panic!("{command}: {h}"));
        assert!(
            h[examples..].lines().skip(1).any(|l| l.contains("weft ")),
            "{command}: {h}"
        );
        if !["sync", "diff", "run"].contains(&command) {
            assert!(!h.contains("--git-secret"), "{command}: {h}");
        }
    }
    let resume = help(&["resume"]).await;
    assert!(
        !resume.contains("-m,") && !resume.contains("--message"),
        "{resume}"
    );
    let diff = help(&["diff"]).await;
    assert!(!diff.contains("prune"), "{diff}");
    let get = help(&["get"]).await;
    assert!(get.contains("-n, --namespace"), "{get}");
    assert!(get.contains("--weft-namespace"), "{get}");

    for (shell, mark) in [
        ("bash", "_weft()"),
        ("zsh", "#compdef weft"),
        ("fish", "complete -c weft"),
    ] {
        let out = weft(&["completion".to_string(), shell.to_string()]).await;
        assert!(out.status.success(), "{shell}: {:?}", text(&out));
        assert!(text(&out).0.contains(mark), "{shell}");
    }
    let out = weft(&["version".to_string(), "--client".into()]).await;
    assert!(
        text(&out).0.starts_with("client: weft "),
        "{:?}",
        text(&out)
    );

    // A server nobody answers at: its URL once, and what to check.
    let port = support::git_servers::free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: gone\n  context: {{cluster: gone, user: u}}\n- name: other\n  context: {{cluster: gone, user: u}}\ncurrent-context: gone\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .expect("write kubeconfig");
    let kc = kubeconfig.display().to_string();
    let out = weft(&[
        "get".into(),
        "root".into(),
        "--kubeconfig".into(),
        kc.clone(),
    ])
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    let url = format!("https://127.0.0.1:{port}");
    assert_eq!(stderr.matches(&url).count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot reach the Kubernetes API server"),
        "{stderr}"
    );
    assert!(stderr.contains("--kubeconfig"), "{stderr}");
    // A context that does not exist: the ones that do.
    let out = weft(&[
        "get".into(),
        "--kubeconfig".into(),
        kc,
        "--context".into(),
        "nope".into(),
    ])
    .await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("context \"nope\" does not exist") && stderr.contains("gone, other"),
        "{stderr}"
    );

    // -n is the namespace of the objects shown; Weft's own is --weft-namespace.
    let ns = TestNamespace::new("day1-flags").await;
    let name = ns.name().to_string();
    let dir = config_dir(&[numbered_configmap(&name, 0, "a")]);
    let out = sync(dir.path(), &name, &["-o", "json"]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("sync -o json");
    assert_eq!(doc["result"], "succeeded", "{doc}");
    assert_eq!(doc["summary"]["created"], 1, "{doc}");
    assert!(
        stderr.contains("synced revision local"),
        "progress on stderr: {stderr}"
    );
    let changed = config_dir(&[numbered_configmap(&name, 0, "b")]);
    let mut args = vec!["diff".to_string(), changed.path().display().to_string()];
    args.extend(cluster_args(&name));
    args.extend(["-o", "json"].map(String::from));
    let out = weft(&args).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("diff -o json");
    assert_eq!(doc[0]["object"], format!("ConfigMap/{name}/cm-0"), "{doc}");
    assert_eq!(doc[0]["change"], "update", "{doc}");

    let get = |namespace: &str| {
        let mut args = vec!["get".to_string(), "all".into(), "-o".into(), "json".into()];
        args.extend(cluster::cluster().kube_args());
        args.extend(["--weft-namespace".to_string(), name.clone()]);
        args.extend(["--namespace".to_string(), namespace.to_string()]);
        args
    };
    let rows = |out: &Output| -> Vec<serde_json::Value> {
        serde_json::from_str(&text(out).0).unwrap_or_else(|e| panic!("{e}: {:?}", text(out)))
    };
    // The root's Root (made by the sync above, suspended here) is a row.
    let mut args = vec!["suspend".to_string()];
    args.extend(cluster_args(&name));
    assert!(weft(&args).await.status.success());
    let out = weft(&get(&name)).await;
    assert!(
        rows(&out)
            .iter()
            .any(|r| r["kind"] == "Root" && r["name"] == name.as_str()),
        "{:?}",
        text(&out)
    );
    let out = weft(&get("default")).await;
    assert!(
        rows(&out)
            .iter()
            .all(|r| r["namespace"] == "default" && r["kind"] != "Root"),
        "--namespace default shows only default: {:?}",
        text(&out)
    );
    ns.delete().await;
}

/// The labels `weft get`/`kubectl` see on a namespace Weft created for itself.
async fn namespace_labels(
    ns: &TestNamespace,
    name: &str,
) -> Option<std::collections::BTreeMap<String, String>> {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client())
        .get_opt(name)
        .await
        .expect("GET namespace")
        .map(|n| n.metadata.labels.unwrap_or_default())
}

#[tokio::test]
async fn a_first_sync_on_a_cluster_without_weft_works_and_a_failed_load_leaves_no_root() {
    // Objects in the test's namespace; Weft's namespace one that does not exist yet, as on a
    // cluster where Weft was never installed (issue 40 items 2 and 4).
    let ns = TestNamespace::new("day1-fresh").await;
    let name = ns.name().to_string();
    let home = format!("{name}-weft");
    let args_for = |root: &str| {
        let mut a = cluster::cluster().kube_args();
        a.extend(["--weft-namespace", &home, "--root-name", root].map(String::from));
        a
    };
    let with = |head: &[&str], root: &str| {
        let mut a: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        a.extend(args_for(root));
        a
    };
    // `weft get root NAME`: the root is named as an argument.
    let get_root = |root: &str| {
        let mut a: Vec<String> = ["get", "root", root].map(String::from).to_vec();
        a.extend(cluster::cluster().kube_args());
        a.extend(["--weft-namespace".to_string(), home.clone()]);
        a
    };
    let bad = config_dir(&[(
        "apps/bad.yaml".to_string(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n".to_string(),
    )]);
    let good = config_dir(&[numbered_configmap(&name, 0, "a")]);
    let bad_path = bad.path().display().to_string();
    let good_path = good.path().display().to_string();

    // Reading commands work on the fresh cluster and create nothing.
    let mut get_all: Vec<String> = vec!["get".into()];
    get_all.extend(cluster::cluster().kube_args());
    get_all.extend(["--weft-namespace".to_string(), home.clone()]);
    let out = weft(&get_all).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let out = weft(&with(&["diff", "--repo", &good_path], "first")).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "changes to show:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("ConfigMap/{name}/cm-0")),
        "{stdout}"
    );
    let out = weft(&with(&["trigger"], "first")).await;
    let (stdout, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("there is no root there"), "{stderr}");
    for debug in ["Status {", "Some(", "ApiError", "ListMeta"] {
        assert!(
            !stderr.contains(debug),
            "Rust debug output `{debug}`:\n{stderr}"
        );
    }
    // weft ui serves its pages on the fresh cluster (no root yet), and creates nothing.
    let port = support::git_servers::free_port();
    let mut ui = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("ui")
        .args(["--port", &port.to_string()])
        .args(args_for("first"))
        .env_remove("WEFT_REPO")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start weft ui");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let page = loop {
        let got = reqwest::get(format!("http://127.0.0.1:{port}/")).await;
        match got {
            Ok(r) => break (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) if std::time::Instant::now() > deadline => {
                let _ = ui.kill();
                panic!("weft ui did not answer: {e}");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let _ = ui.kill();
    let _ = ui.wait();
    assert_eq!(page.0, 200, "{}", page.1);
    for debug in ["Status {", "Some(", "ApiError", "ListMeta"] {
        assert!(
            !page.1.contains(debug),
            "Rust debug output `{debug}` on the page"
        );
    }
    assert_eq!(
        namespace_labels(&ns, &home).await,
        None,
        "a reading command created {home}"
    );

    // A repository that does not load: exit 1, and neither a Root nor Weft's namespace.
    let out = weft(&with(&["sync", "--repo", &bad_path], "typo")).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("nothing was applied or pruned"), "{stderr}");
    assert_eq!(
        namespace_labels(&ns, &home).await,
        None,
        "a failed load created {home}"
    );

    // The first real sync creates Weft's namespace, labelled as Weft's, and the root's Root.
    let out = weft(&with(&["sync", "--repo", &good_path], "first")).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let labels = namespace_labels(&ns, &home)
        .await
        .expect("Weft's namespace created");
    assert_eq!(
        labels.get("app.kubernetes.io/part-of").map(String::as_str),
        Some("weft")
    );
    let cm: Api<ConfigMap> = Api::namespaced(ns.client(), &name);
    assert!(cm.get_opt("cm-0").await.expect("GET").is_some());
    let records: Api<weft::api::root::Root> = Api::namespaced(ns.client(), &home);
    assert!(records.get_opt("first").await.expect("GET").is_some());

    // `weft get root` shows it Ready, exit 0; the failed load's root is nowhere.
    let out = weft(&get_root("first")).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.contains("first"))
        .unwrap_or_default();
    assert!(row.contains("True"), "root not Ready:\n{stdout}");
    assert!(!stdout.contains("typo"), "a phantom root:\n{stdout}");
    assert!(records.get_opt("typo").await.expect("GET").is_none());

    // A failed load of a root that exists is recorded on it (as a daemon does), and a later
    // good sync makes it Ready again.
    let out = weft(&with(
        &["sync", "--repo", &bad_path, "--switch-repository"],
        "first",
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    let out = weft(&get_root("first")).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let out = weft(&with(
        &["sync", "--repo", &good_path, "--switch-repository"],
        "first",
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let out = weft(&get_root("first")).await;
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));

    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client())
        .delete(&home, &Default::default())
        .await;
    ns.delete().await;
}
