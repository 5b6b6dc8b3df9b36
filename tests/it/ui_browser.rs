//! `weft ui` in a real browser: Debian's Chromium, headless, driven through its chromedriver
//! (fantoccini), against `weft ui` on the real control plane, where a real `weft run` syncs a
//! fixture repository served by a real git daemon: plain objects (a Secret among them), and an
//! ArmadaManifest whose second group holds a chart that helm refuses to render.
//!
//! Each page loads without a console error (a script or style the Content-Security-Policy
//! blocks is one) and shows the right objects and states: the failed chart with helm's
//! file:line, the root suspended from its button, an object edited by hand shown drifted (the
//! Secret's values masked), the live roots page updated without a reload, resuming from the UI
//! starts a pass that corrects the drift, and the sync button starts a pass (the daemon runs a
//! pass for the request, and the roots page shows it among the root's last passes, with its
//! duration, and the next poll). The daemon runs with `--ui`: the same pages are served
//! read-only on its status port, without a form, and a POST there is answered 405. A
//! screenshot of each page is written to target/ui-screenshots/.
//!
//! Chromium and chromedriver missing is a failure, not a skip: tests/browser/ensure-deps
//! installs them.

use crate::support;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use support::cluster::{install_crds, TestNamespace};
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::{free_port, ServedRepo};
use weft::api::armada::{ArmadaChart, Phase};
use weft::api::root::Root;

/// A process of the test's, killed when the test ends.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until it accepts connections on `port`.
    fn wait_port(&mut self, port: u16, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{what} exited ({status}):\n{}", self.logs());
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{what} did not listen on {port} within 30s:\n{}",
            self.logs()
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows what the process said last (the UI's requests, chromedriver's).
        if std::thread::panicking() {
            let logs = self.logs();
            let lines: Vec<&str> = logs.lines().collect();
            let tail = lines[lines.len().saturating_sub(200)..].join("\n");
            eprintln!("--- {} (last 200 lines) ---\n{tail}", self.log.display());
        }
    }
}

fn spawn(cmd: &mut Command, log: PathBuf) -> Proc {
    let file = std::fs::File::create(&log).expect("log file");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    Proc { child, log }
}

/// The path of `tool`, or a failure that says how to install it.
fn required(tool: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(tool))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "{tool} is not installed: the browser test needs Debian's chromium and \
                 chromium-driver (run tests/browser/ensure-deps as root)"
            )
        })
}

fn screenshots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

const TEMPLATE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${release.name}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/instance: "${release.name}"}
  template:
    metadata:
      labels: {app.kubernetes.io/instance: "${release.name}"}
    spec:
      containers:
        - name: app
          image: registry.example/app:1
"#;

/// A helm template that fails: helm names the file and line.
const BROKEN: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: broken
data:
  password: {{ required "values.password is required" .Values.password }}
"#;

fn armada(ns: &str) -> String {
    format!(
        r#"---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: web, namespace: {ns}}}
spec:
  chart_name: app
  release: web
  namespace: {ns}
  source: {{type: local, location: charts/app}}
  values: {{}}
  wait: {{timeout: 60}}
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: broken, namespace: {ns}}}
spec:
  chart_name: broken
  release: broken
  namespace: {ns}
  source: {{type: local, location: charts/broken}}
  values: {{}}
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChartGroup
metadata: {{name: apps, namespace: {ns}}}
spec:
  sequenced: false
  chart_group: [web]
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChartGroup
metadata: {{name: extras, namespace: {ns}}}
spec:
  sequenced: false
  chart_group: [broken]
---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaManifest
metadata: {{name: site, namespace: {ns}}}
spec:
  release_prefix: ui
  chart_groups: [apps, extras]
"#
    )
}

fn objects(ns: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{mode: calm}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: drifted, namespace: {ns}}}
data: {{value: from-git}}
---
apiVersion: v1
kind: Secret
metadata: {{name: creds, namespace: {ns}}}
stringData: {{password: hunter2-from-git}}
"#
    )
}

/// The browser, its driver and the UI under test.
struct Session {
    browser: Browser,
    driver_port: u16,
    base: String,
    shots: PathBuf,
}

impl Session {
    /// The browser's console messages of level SEVERE since the last call.
    async fn console_errors(&self) -> Vec<String> {
        let id = self
            .browser
            .session_id()
            .await
            .expect("session id")
            .expect("a session");
        let url = format!("http://127.0.0.1:{}/session/{id}/se/log", self.driver_port);
        let answer = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(json!({"type": "browser"}).to_string())
            .send()
            .await
            .expect("chromedriver log endpoint");
        let body: Value =
            serde_json::from_slice(&answer.bytes().await.expect("log body")).expect("log JSON");
        body["value"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].to_string())
            .collect()
    }

    /// The visible text of the page body, once it contains every one of `expected`.
    async fn text_with(&self, what: &str, expected: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = match self.browser.find(Locator::Css("main")).await {
                Ok(main) => main.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if expected.iter().all(|e| text.contains(e)) {
                return text;
            }
            if Instant::now() > deadline {
                panic!("{what}: the page does not show {expected:?} within {within:?}:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Open `path`, wait for `expected`, check the console, take the screenshot `shot`.
    async fn visit(&self, path: &str, expected: &[&str], shot: &str) -> String {
        self.visit_at(&self.base, path, expected, shot).await
    }

    /// [`Session::visit`] on the server at `base`.
    async fn visit_at(&self, base: &str, path: &str, expected: &[&str], shot: &str) -> String {
        self.browser
            .goto(&format!("{base}{path}"))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
        let text = self
            .text_with(path, expected, Duration::from_secs(60))
            .await;
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "{path}: console errors: {errors:#?}");
        self.shot(shot).await;
        text
    }

    async fn shot(&self, name: &str) {
        let png = self.browser.screenshot().await.expect("screenshot");
        std::fs::write(self.shots.join(format!("{name}.png")), png).expect("write screenshot");
    }

    /// Click the button of the form posting to `action` (a path suffix).
    /// A live update may replace the button between finding and clicking it: found again then.
    async fn click_form(&self, action: &str) {
        let css = format!("form[action$=\"{action}\"] button[type=submit]");
        for attempt in 1.. {
            let button = self
                .browser
                .find(Locator::Css(&css))
                .await
                .unwrap_or_else(|e| panic!("no button posting to {action}: {e}"));
            match button.click().await {
                Ok(()) => return,
                Err(e) if attempt < 5 && e.to_string().contains("stale element") => {}
                Err(e) => panic!("clicking the button posting to {action}: {e}"),
            }
        }
    }

    async fn page_source(&self) -> String {
        self.browser.source().await.expect("page source")
    }
}

async fn wait_for<T>(what: &str, within: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_chromium() {
    let chromium = required("chromium");
    let chromedriver = required("chromedriver");
    let ns = TestNamespace::new("ui").await;
    let n = ns.name().to_string();
    let client = ns.client();
    install_crds(&client).await;

    let repo = ServedRepo::start();
    repo.work.write("apps/objects.yaml", objects(&n));
    repo.work.write(
        "charts/app/Chart.yaml",
        "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n",
    );
    repo.work
        .write("charts/app/templates/deployment.yaml", TEMPLATE);
    repo.work.write(
        "charts/broken/Chart.yaml",
        "apiVersion: v2\nname: broken\nversion: 0.1.0\n",
    );
    repo.work
        .write("charts/broken/templates/config.yaml", BROKEN);
    repo.work.write("armada.yaml", armada(&n));
    repo.work.commit("fixture");
    repo.work.push();
    let url = repo.url();
    let daemon = Daemon::start(DaemonOptions {
        controllers: true,
        extra: vec!["--ui".into()],
        ..DaemonOptions::new(&url, &n)
    });
    daemon
        .wait_status("the first pass", Duration::from_secs(120), |s| {
            s["lastPass"]["result"].is_string()
        })
        .await;
    let charts: Api<ArmadaChart> = Api::namespaced(client.clone(), &n);
    wait_for(
        "the chart broken fails",
        Duration::from_secs(120),
        async || {
            let c = charts.get_opt("broken").await.ok()??;
            (c.status?.phase == Some(Phase::Failed)).then_some(())
        },
    )
    .await;

    // A Root object beside the flag root (issue 41 item 8): its own repository, one object.
    let extra = ServedRepo::start();
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {n}\ndata:\n  k: v\n")
    };
    extra.work.write("app/cm.yaml", cm("extra-config"));
    extra.work.write("base/cm.yaml", cm("base-config"));
    extra.work.commit("extra");
    extra.work.push();
    let roots: Api<Root> = Api::namespaced(client.clone(), &n);
    let root: Root = serde_json::from_value(json!({
        "apiVersion": "weft.io/v1alpha1", "kind": "Root",
        "metadata": {"name": "extra", "namespace": n},
        "spec": {"source": {"url": extra.url()}, "path": "app", "interval": "1h", "dependsOn": [{"name": "base"}]},
    }))
    .unwrap();
    let base: Root = serde_json::from_value(json!({
        "apiVersion": "weft.io/v1alpha1", "kind": "Root",
        "metadata": {"name": "base", "namespace": n},
        "spec": {"source": {"url": extra.url()}, "path": "base", "interval": "1h"},
    }))
    .unwrap();
    let pp = PatchParams::apply("weft-test");
    for r in [&base, &root] {
        let name = r.metadata.name.clone().unwrap();
        roots.patch(&name, &pp, &Patch::Apply(r)).await.unwrap();
    }
    wait_for(
        "the Root extra Ready",
        Duration::from_secs(120),
        async || {
            let r = roots.get_opt("extra").await.ok()??;
            let ready = r
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (ready.reason == "ReconciliationSucceeded").then_some(())
        },
    )
    .await;

    // weft ui, with the same repository for the drift view.
    let dir = tempfile::tempdir().expect("tempdir");
    let ui_port = free_port();
    let mut ui = spawn(
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("ui")
            .args(["--port", &ui_port.to_string()])
            .args(["--weft-namespace", &n, "--root-name", &n, "--repo", &url])
            .args(["--refresh", "2s"])
            .args(support::cluster::cluster().kube_args())
            .env("WEFT_HELM", support::helm::helm())
            .env("WEFT_LOG", "info,weft=debug")
            .env_remove("WEFT_REPO")
            .env_remove("WEFT_ROOT_NAME"),
        dir.path().join("ui.log"),
    );
    ui.wait_port(ui_port, "weft ui");
    let driver_port = free_port();
    let mut driver = spawn(
        Command::new(&chromedriver).arg(format!("--port={driver_port}")),
        dir.path().join("chromedriver.log"),
    );
    driver.wait_port(driver_port, "chromedriver");
    let profile = dir.path().join("chromium-profile");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1100,760", format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    let browser = builder
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .unwrap_or_else(|e| panic!("chromedriver session: {e}\n{}", driver.logs()));
    let s = Session {
        browser,
        driver_port,
        base: format!("http://127.0.0.1:{ui_port}"),
        shots: screenshots_dir(),
    };

    // The roots: this root with its revision and leader.
    let text = s.visit("/", &[&n, "Sync now"], "roots").await;
    assert!(text.contains("Lease"), "the leader is shown:\n{text}");
    // The Root objects of every namespace, with their dependencies; a Root's page shows its
    // objects with their health.
    let text = s
        .visit(
            "/",
            &["Root objects", &format!("{n}/extra")],
            "root-objects",
        )
        .await;
    assert!(
        text.contains(&format!("{n}/base")),
        "the dependency is shown:\n{text}"
    );
    let text = s
        .visit(
            &format!("/root/{n}/extra"),
            &["Objects of the root", "extra-config"],
            "root-object",
        )
        .await;
    assert!(text.contains("ready"), "each object's health:\n{text}");
    // Back to the roots page, which the live checks below watch.
    s.visit("/", &[&n, "Sync now"], "roots").await;
    // Live: suspended from the command line, the open page says so without a reload.
    wait_for(
        "the live stream to connect",
        Duration::from_secs(20),
        async || {
            let t = s
                .browser
                .find(Locator::Id("live"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            t.starts_with("live").then_some(())
        },
    )
    .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &n);
    weft::daemon::roots::requests::set_suspended(&client, &n, &n, true, Some("from the test"))
        .await
        .expect("suspend");
    s.text_with(
        "the live update",
        &["Suspended", "from the test"],
        Duration::from_secs(20),
    )
    .await;
    weft::daemon::roots::requests::set_suspended(&client, &n, &n, false, None)
        .await
        .expect("resume");
    s.text_with(
        "the live update",
        &["Sync now", "Suspend"],
        Duration::from_secs(20),
    )
    .await;

    // Suspend from its button: the Root says so, and the page.
    s.browser
        .goto(&format!("{}/", s.base))
        .await
        .expect("roots");
    s.click_form(&format!("/roots/{n}/suspend")).await;
    s.text_with(
        "after Suspend",
        &["Suspended", "Resume"],
        Duration::from_secs(20),
    )
    .await;
    let flag_root = roots.get(&n).await.expect("the flag root's Root");
    assert!(flag_root.spec.suspend);
    s.shot("roots-suspended").await;
    // The Root's reconcile has seen it: a pass that was running when the button was pressed
    // (the broken chart retries) has ended, so none applies over the edits below.
    wait_for(
        "the Root's reconcile to see the suspension",
        Duration::from_secs(60),
        async || {
            let root = roots.get_opt(&n).await.ok()??;
            root.status?
                .conditions
                .iter()
                .any(|c| c.reason == "Suspended")
                .then_some(())
        },
    )
    .await;

    // Drift while suspended: an edit by hand stays, and so does a Secret's.
    let hand = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    configmaps
        .patch(
            "drifted",
            &hand,
            &Patch::Merge(json!({"data": {"value": "edited-by-hand"}})),
        )
        .await
        .expect("edit the ConfigMap");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &n);
    secrets
        .patch(
            "creds",
            &hand,
            &Patch::Merge(json!({"stringData": {"password": "hunter2-by-hand"}})),
        )
        .await
        .expect("edit the Secret");
    let text = s
        .visit(
            "/drift",
            &[
                &format!("ConfigMap/{n}/drifted"),
                &format!("Secret/{n}/creds"),
                "2 object(s) differ",
            ],
            "drift",
        )
        .await;
    assert!(
        text.contains("edited-by-hand"),
        "the diff shows the edit:\n{text}"
    );
    let html = s.page_source().await;
    for secret in ["hunter2-from-git", "hunter2-by-hand", "aHVudGVyMi"] {
        assert!(
            !html.contains(secret),
            "a Secret value on the drift page: {secret}"
        );
    }
    assert!(
        html.contains("*** (after)"),
        "the Secret's change is shown masked"
    );
    assert!(
        text.contains("templates/config.yaml"),
        "the chart that did not render is named:\n{text}"
    );
    // One object's drift.
    let text = s
        .visit(
            &format!("/drift?object=ConfigMap%2F{n}%2Fdrifted"),
            &["1 object(s) differ"],
            "drift-object",
        )
        .await;
    assert!(
        !text.contains("Secret/"),
        "only the object asked for:\n{text}"
    );

    // The root's inventory: every object with its health.
    let text = s
        .visit(
            &format!("/roots/{n}"),
            &["settings", "drifted", "creds", "ready"],
            "inventory",
        )
        .await;
    assert!(
        text.contains(&format!("namespace {n}")),
        "the tree by namespace:\n{text}"
    );
    assert!(
        text.contains("ArmadaChart"),
        "the charts are in the root's inventory:\n{text}"
    );
    // The root's own page: each chart's objects (its Deployment) under the chart, not only in
    // `weft tree` (issue 41 item 8).
    let text = s
        .visit(
            &format!("/root/{n}/{n}"),
            &[
                "Objects of the root",
                &format!("Objects of ArmadaChart {n}/web"),
                "Deployment",
            ],
            "root-object-charts",
        )
        .await;
    assert!(
        text.find(&format!("Objects of ArmadaChart {n}/web")) < text.rfind("Deployment"),
        "the chart's Deployment is listed under the chart:\n{text}"
    );

    // Armada: the manifest's groups in order, the failed chart with helm's file:line.
    let text = s
        .visit(
            "/armada",
            &[
                "ArmadaManifest",
                "group apps",
                "group extras",
                "broken",
                "failed",
            ],
            "armada",
        )
        .await;
    assert!(
        text.find("group apps") < text.find("group extras"),
        "groups in apply order:\n{text}"
    );
    assert!(
        text.contains("config.yaml:6"),
        "the failed chart's file:line:\n{text}"
    );

    s.visit("/weaveclouds", &["WeaveClouds"], "weaveclouds")
        .await;
    s.visit("/events", &["Events"], "events").await;

    // Every page left closed its live stream: a browser opens six connections to a host, and
    // streams of pages left behind held all six, so a form's post waited a minute for one.
    let most_open = ui
        .logs()
        .lines()
        .filter(|l| l.contains("live stream opened"))
        .filter_map(|l| l.split(" open=").nth(1)?.trim().parse::<usize>().ok())
        .max();
    assert!(
        most_open.is_some_and(|n| n <= 3),
        "live streams open at once, at most: {most_open:?} (each page left must close its own):\n{}",
        ui.logs()
    );

    // Resume from its button: the daemon starts a pass at once, which corrects the drift.
    s.browser
        .goto(&format!("{}/", s.base))
        .await
        .expect("roots");
    s.click_form(&format!("/roots/{n}/resume")).await;
    s.text_with(
        "after Resume",
        &["Suspend", "Sync now"],
        Duration::from_secs(20),
    )
    .await;
    wait_for(
        "the pass the resume started",
        Duration::from_secs(60),
        async || {
            let cm = configmaps.get_opt("drifted").await.ok()??;
            (cm.data?.get("value")? == "from-git").then_some(())
        },
    )
    .await;

    // The sync button: the request on the root's Root starts a pass of it, which the roots
    // page shows among the root's last passes, with its duration.
    let before = daemon.status().await["lastPass"]["pass"]
        .as_u64()
        .unwrap_or(0);
    s.click_form(&format!("/roots/{n}/sync")).await;
    s.text_with(
        "after Sync",
        &["sync requested at"],
        Duration::from_secs(20),
    )
    .await;
    let flag_root = roots.get(&n).await.expect("the flag root's Root");
    assert!(
        flag_root
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("weft.io/requested-at"),
        "the sync request is on the Root"
    );
    let status = daemon
        .wait_status(
            "the pass the Sync button asked for",
            Duration::from_secs(60),
            |st| {
                st["lastPass"]["pass"].as_u64().unwrap_or(0) > before
                    && st["lastPass"]["reasons"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|r| r == "requested"))
            },
        )
        .await;
    // A Root's passes are known by when they started (its status numbers none).
    let started = status["lastPass"]["startedAt"]
        .as_str()
        .expect("the pass's start")
        .to_string();
    let text = s
        .text_with(
            "the requested pass on the roots page",
            &[
                &format!("last pass started {started}, took"),
                &format!("Last passes of {n}"),
                "requested",
                "next poll",
            ],
            Duration::from_secs(30),
        )
        .await;
    assert!(
        text.contains("resumed"),
        "the earlier passes are listed too:\n{text}"
    );
    s.browser
        .execute(
            "document.querySelector('section.passes').scrollIntoView()",
            vec![],
        )
        .await
        .expect("scroll to the passes");
    s.shot("roots-passes").await;
    let status = roots
        .get(&n)
        .await
        .expect("the flag root's Root")
        .status
        .unwrap_or_default();
    let passes = &status.passes;
    assert_eq!(passes[0].started_at, started, "newest first: {passes:#?}");
    assert!(passes.len() <= 10, "at most ten kept: {passes:#?}");
    assert!(
        status.next_poll_at.is_some(),
        "the next poll is in the Root's status: {status:#?}"
    );
    let errors = s.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    // Another site cannot act through the UI with the user's credentials.
    let http = reqwest::Client::new();
    let page = http
        .get(format!("{}/", s.base))
        .send()
        .await
        .expect("GET /");
    let html = page.text().await.expect("page");
    let token = html
        .split("name=\"token\" value=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("a form token")
        .to_string();
    let suspend = format!("{}/roots/{n}/suspend", s.base);
    let post = |token: String, origin: Option<&'static str>| {
        let mut r = http
            .post(&suspend)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&back=/"));
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.send()
    };
    let wrong = post("0".repeat(64), None).await.expect("post");
    assert_eq!(wrong.status(), 403, "a wrong token is refused");
    let foreign = post(token.clone(), Some("http://evil.example"))
        .await
        .expect("post");
    assert_eq!(foreign.status(), 403, "another origin is refused");
    let rebound = http
        .get(format!("{}/", s.base))
        .header("host", format!("evil.example:{ui_port}"))
        .send()
        .await
        .expect("get");
    assert_eq!(rebound.status(), 403, "another Host is refused");
    let flag_root = roots.get(&n).await.expect("the flag root's Root");
    assert!(
        !flag_root.spec.suspend,
        "nothing was suspended by the refused requests"
    );
    let ours = post(token, Some("http://127.0.0.1")).await.expect("post");
    assert_eq!(
        ours.status(),
        403,
        "an origin without this port is another origin"
    );

    // weft run --ui: the same pages on the daemon's status port, read-only.
    let daemon_base = daemon.base();
    let text = s
        .visit_at(
            &daemon_base,
            "/",
            &[&n, "Last passes", "next poll"],
            "daemon-roots",
        )
        .await;
    assert!(
        !text.contains("Sync now"),
        "no action on the daemon's pages:\n{text}"
    );
    assert!(
        s.page_source().await.contains(">read-only<"),
        "the daemon's pages say they are read-only"
    );
    s.visit_at(
        &daemon_base,
        "/armada",
        &["group apps", "config.yaml:6"],
        "daemon-armada",
    )
    .await;
    s.visit_at(
        &daemon_base,
        &format!("/roots/{n}"),
        &["settings", "ready"],
        "daemon-inventory",
    )
    .await;
    let html = s.page_source().await;
    assert!(
        !html.contains("method=\"post\""),
        "no form on the daemon's pages"
    );
    assert!(
        !html.contains("data-token"),
        "no form token on the daemon's pages"
    );
    for (path, body) in [
        (format!("/roots/{n}/suspend"), "token=x&back=/"),
        (format!("/roots/{n}/sync"), ""),
        ("/".to_string(), ""),
        (format!("/resources/ArmadaChart/{n}/web/suspend"), ""),
    ] {
        let answer = http
            .post(format!("{daemon_base}{path}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("POST to the daemon's pages");
        assert_eq!(answer.status(), 405, "POST {path} on the read-only pages");
    }
    let flag_root = roots.get(&n).await.expect("the flag root's Root");
    assert!(
        !flag_root.spec.suspend,
        "the read-only pages suspended nothing"
    );
    // The status routes of the port are still there.
    let status = http
        .get(format!("{daemon_base}/api/v1/status"))
        .send()
        .await
        .expect("status");
    assert_eq!(status.status(), 200);

    s.browser.close().await.expect("close the browser");
    drop(driver);
    drop(ui);
    drop(daemon);
    ns.delete().await;
}
