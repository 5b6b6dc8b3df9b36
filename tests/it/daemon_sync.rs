//! `weft run` against the real control plane and a real git server (`git daemon` on loopback):
//! a push followed by a webhook is applied within seconds; `weft trigger --wait` returns the new
//! revision; a webhook with a bad signature is refused with 401 and changes nothing; a push to
//! another branch is ignored; SIGTERM exits 0.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::configmap;

/// Commit what the work tree holds, push it, send GitHub's push webhook, and wait for pass `pass`.
async fn push_and_wait_pass(
    repo: &Repo,
    d: &Daemon,
    message: &str,
    pass: u64,
) -> serde_json::Value {
    repo.work.commit(message);
    repo.work.push();
    let (status, body) = github_push(d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    d.wait_status(
        &format!("the pass of \"{message}\""),
        Duration::from_secs(10),
        |s| s["lastPass"]["pass"] == pass,
    )
    .await
}

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

async fn greeting(api: &Api<ConfigMap>) -> Option<String> {
    api.get_opt("greeting")
        .await
        .expect("GET configmap")
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

async fn wait_greeting(api: &Api<ConfigMap>, want: &str, within: Duration, d: &Daemon) -> Duration {
    let start = std::time::Instant::now();
    loop {
        if greeting(api).await.as_deref() == Some(want) {
            return start.elapsed();
        }
        if start.elapsed() > within {
            panic!(
                "ConfigMap greeting did not become {want:?} within {within:?} (now {:?})\nlogs:\n{}",
                greeting(api).await,
                d.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_push_and_a_github_webhook_are_applied_within_seconds() {
    let ns = TestNamespace::new("daemon-webhook").await;
    let repo = repo_with_greeting(ns.name(), "one");
    let d = Daemon::start(DaemonOptions::new(&repo.url, ns.name()));
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    wait_greeting(&api, "one", Duration::from_secs(30), &d).await;

    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "two"),
    );
    let sha = repo.work.commit("two");
    repo.work.push();
    // The poll interval is an hour: only the webhook can make this happen in seconds.
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    assert!(body.contains("queued"), "{body}");
    let took = wait_greeting(&api, "two", Duration::from_secs(10), &d).await;
    eprintln!("push + webhook → applied in {took:?}");
    let s = d
        .wait_status(
            "status shows the new revision",
            Duration::from_secs(5),
            |s| s["revision"] == sha.as_str(),
        )
        .await;
    assert_eq!(s["lastPass"]["result"], "succeeded");
    assert!(
        s["lastPass"]["reasons"]
            .to_string()
            .contains("webhook/github"),
        "{s:#}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_bad_signature_is_refused_with_401_and_nothing_happens() {
    let ns = TestNamespace::new("daemon-badsig").await;
    let repo = repo_with_greeting(ns.name(), "one");
    let d = Daemon::start(DaemonOptions::new(&repo.url, ns.name()));
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    wait_greeting(&api, "one", Duration::from_secs(30), &d).await;
    let before = d
        .wait_status("first pass", Duration::from_secs(10), |s| {
            s["lastPass"]["pass"] == 1
        })
        .await;

    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "two"),
    );
    repo.work.commit("two");
    repo.work.push();
    let forged = weft::server::signature::sign(b"not-the-secret", br#"{"ref":"refs/heads/main"}"#);
    let (status, body) = github_push(&d, "refs/heads/main", Some(forged)).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("does not match"), "{body}");
    // A push to another branch, correctly signed, is ignored.
    let (status, body) = github_push(&d, "refs/heads/feature", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("ignored"), "{body}");

    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        greeting(&api).await.as_deref(),
        Some("one"),
        "nothing may be applied"
    );
    let after = d.status().await;
    assert_eq!(
        after["lastPass"]["pass"], before["lastPass"]["pass"],
        "no pass may run: {after:#}"
    );
    let logs = d.logs();
    assert!(
        logs.contains("request refused: authentication failed")
            && logs.contains("X-Hub-Signature-256 does not match"),
        "the log says why: {logs}"
    );
    assert!(
        !logs.contains(support::daemon::WEBHOOK_SECRET),
        "the secret is never logged"
    );
    ns.delete().await;
}

#[tokio::test]
async fn weft_trigger_wait_returns_the_new_revision_and_sigterm_exits_0() {
    let ns = TestNamespace::new("daemon-trigger").await;
    let repo = repo_with_greeting(ns.name(), "one");
    let mut d = Daemon::start(DaemonOptions::new(&repo.url, ns.name()));
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    wait_greeting(&api, "one", Duration::from_secs(30), &d).await;

    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "three"),
    );
    let sha = repo.work.commit("three");
    repo.work.push();
    let out = tokio::process::Command::new(support::daemon::weft_bin())
        .args([
            "trigger",
            "--wait",
            "--url",
            &d.hooks_base(),
            "--sync-token-file",
        ])
        .arg(d.token_file())
        .output()
        .await
        .expect("weft trigger");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&sha), "the new revision {sha} in: {stdout}");
    assert!(stdout.contains("succeeded"), "{stdout}");
    assert!(
        stdout.contains("ConfigMap/") && stdout.contains("configured"),
        "{stdout}"
    );
    // When `weft trigger --wait` returns, the object is already applied.
    assert_eq!(greeting(&api).await.as_deref(), Some("three"));

    // A wrong token is refused.
    let bad = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(bad.path(), "wrong").expect("write");
    let out = tokio::process::Command::new(support::daemon::weft_bin())
        .args(["trigger", "--url", &d.hooks_base(), "--sync-token-file"])
        .arg(bad.path())
        .output()
        .await
        .expect("weft trigger");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    d.terminate();
    assert!(
        d.logs().contains("released the leader Lease"),
        "{}",
        d.logs()
    );
    ns.delete().await;
}

#[tokio::test]
async fn sigterm_during_a_long_pass_abandons_it_after_the_grace_and_exits_0() {
    let ns = TestNamespace::new("daemon-abandon").await;
    let repo = repo_with_greeting(ns.name(), "one");
    let mut d = Daemon::start(DaemonOptions::new(&repo.url, ns.name()));
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    wait_greeting(&api, "one", Duration::from_secs(30), &d).await;
    d.wait_status("first pass", Duration::from_secs(10), |s| {
        s["lastPass"]["pass"] == 1
    })
    .await;

    // A Deployment that can never become ready: the pass waits for it (up to --timeout 60s).
    repo.work.write(
        "apps/stuck.yaml",
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: stuck, namespace: {}}}\nspec:\n  selector: {{matchLabels: {{app: stuck}}}}\n  template:\n    metadata: {{labels: {{app: stuck}}}}\n    spec:\n      nodeSelector: {{weft.test/no-such-node: \"true\"}}\n      containers: [{{name: app, image: registry.example/app:1}}]\n",
            ns.name()
        ),
    );
    repo.work.commit("stuck");
    repo.work.push();
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    // Wait until the pass is in its readiness wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !d.logs().contains("waiting for 1 object(s) to become ready") {
        assert!(std::time::Instant::now() < deadline, "{}", d.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = std::time::Instant::now();
    d.signal("TERM");
    // --shutdown-grace 5s (the test daemons' setting): abandoned after it, then a clean exit.
    d.expect_clean_exit();
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(20), "exit took {took:?}");
    let logs = d.logs();
    assert!(logs.contains("abandoned"), "{logs}");
    assert!(logs.contains("released the leader Lease"), "{logs}");
    ns.delete().await;
}

fn other_configmap(ns: &str, name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n  value: \"x\"\n")
}

/// A push that changes a few manifest files has its changed objects applied ahead of the full
/// pass (`src/daemon/early.rs`); a push whose files do not load, or that duplicates another
/// file's object, has nothing applied early (and its full pass fails): no object of a revision
/// the full pass refuses reaches the cluster.
#[tokio::test]
async fn a_small_push_goes_out_ahead_of_the_full_pass_and_a_refused_one_not_at_all() {
    let ns = TestNamespace::new("daemon-early").await;
    let n = ns.name();
    let repo = repo_with_greeting(n, "one");
    repo.work
        .write("apps/other.yaml", other_configmap(n, "other"));
    repo.work.commit("other");
    repo.work.push();
    let d = Daemon::start(DaemonOptions::new(&repo.url, n));
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), n);
    wait_greeting(&api, "one", Duration::from_secs(30), &d).await;
    d.wait_status("first pass", Duration::from_secs(10), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;

    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "two"));
    repo.work.commit("two");
    repo.work.push();
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    wait_greeting(&api, "two", Duration::from_secs(10), &d).await;
    let s = d
        .wait_status("the webhook's pass", Duration::from_secs(10), |s| {
            s["lastPass"]["pass"] == 2
        })
        .await;
    assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
    assert!(
        d.logs()
            .contains("applied the pushed changes ahead of the full pass objects=1 files=1"),
        "the change went out early:\n{}",
        d.logs()
    );
    assert_eq!(
        s["lastPass"]["summary"]["configured"], 1,
        "the early write is the pass's change: {s:#}"
    );
    assert_eq!(
        d.logs().matches("object changed pass=2 ").count(),
        0,
        "the full pass wrote nothing more after the early write:\n{}",
        d.logs()
    );

    // The same kind of change, with a file that does not load: nothing goes out.
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "three"));
    repo.work.write(
        "apps/broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: [oops\n",
    );
    let s = push_and_wait_pass(&repo, &d, "three, broken", 3).await;
    assert_eq!(s["lastPass"]["result"], "failed", "{s:#}");
    assert!(
        s["lastPass"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("apps/broken.yaml"),
        "{s:#}"
    );
    assert_eq!(greeting(&api).await.as_deref(), Some("two"));

    // Fixed, but a new file takes the name of another file's object: refused, nothing early.
    repo.work.remove("apps/broken.yaml");
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "four"));
    repo.work
        .write("apps/dup.yaml", other_configmap(n, "other"));
    let s = push_and_wait_pass(&repo, &d, "four, duplicate", 4).await;
    assert_eq!(s["lastPass"]["result"], "failed", "{s:#}");
    assert!(
        s["lastPass"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("defined twice"),
        "{s:#}"
    );
    assert_eq!(greeting(&api).await.as_deref(), Some("two"));
    assert_eq!(
        d.logs()
            .matches("applied the pushed changes ahead of the full pass")
            .count(),
        1,
        "{}",
        d.logs()
    );

    // Fixed: the last render failed, so there is no previous render to compare with (a pass
    // lets it go before rendering anew): this revision goes out by the full pass only.
    repo.work.remove("apps/dup.yaml");
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "five"));
    let s = push_and_wait_pass(&repo, &d, "five", 5).await;
    assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
    assert_eq!(greeting(&api).await.as_deref(), Some("five"));
    let early = |d: &Daemon| {
        d.logs()
            .matches("applied the pushed changes ahead of the full pass")
            .count()
    };
    assert_eq!(early(&d), 1, "{}", d.logs());

    // Rendered again: the next small push goes out first again.
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "six"));
    let s = push_and_wait_pass(&repo, &d, "six", 6).await;
    assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
    assert_eq!(greeting(&api).await.as_deref(), Some("six"));
    assert_eq!(early(&d), 2, "{}", d.logs());
    ns.delete().await;
}
