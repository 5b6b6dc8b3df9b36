//! Notifications end to end: `weft run` against the real control plane, a real git server, and
//! real HTTP receivers on loopback standing in for a webhook, GitHub and GitLab. Providers and
//! Alerts are created in the test's namespace; the receivers record every request.
//!
//! - a pass that fails on a YAML error → the generic receiver gets Flux's event shape with
//!   severity error and a message naming the file and line; the generic-hmac receiver's
//!   `X-Signature` verifies with the Secret's key; no token is in the daemon's logs;
//! - a pass of a new revision → GitHub gets exactly `pending` then `success` for that commit at
//!   `/api/v3/repos/<org>/<repo>/statuses/<sha>` with the token, GitLab the same at
//!   `/api/v4/projects/<org>%2F<repo>/statuses/<sha>`; an Alert with `eventSeverity: error`
//!   gets nothing; a provider that hangs then answers 500 is retried, and the pass result is in
//!   while its first request is still unanswered;
//! - a Provider whose Secret lacks the key its type needs is `Ready=False` (`SecretKeyMissing`);
//! - a notification that cannot be sent never blocks a deployment (issue 40): a Provider of the
//!   repository whose Secret is missing, an Alert to it, and a sequenced group of two charts —
//!   `weft run` and `weft sync` each deploy both charts at the new replica count, and the
//!   Provider is `Ready=False` (`SecretNotFound`, naming the Secret) with a Warning event.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;
use weft::api::notification::{
    Alert, AlertSpec, EventSourceRef, LocalRef, Provider, ProviderSpec, ProviderType,
    SeverityFilter, SourceKind,
};

use support::cluster::{install_crds, TestNamespace};
use support::daemon::{github_push, Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::configmap;
use support::repo_dir::Repo;
use support::wait::wait_for;
use support::weft_cli::Weft;
use weft::api::armada::{ArmadaChart, Phase};

const HMAC_KEY: &str = "hmac-key-d41d8cd98f00b204";
const GITHUB_TOKEN: &str = "ghp_notify_test_token_0001";
const GITLAB_TOKEN: &str = "glpat-notify-test-token-0002";
const BEARER_TOKEN: &str = "bearer-notify-test-token-0003";

/// One request a receiver got.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// An HTTP server on loopback that records every request and answers `status` after `delay`.
struct Receiver {
    port: u16,
    seen: Arc<Mutex<Vec<Received>>>,
    answered: Arc<AtomicUsize>,
}

impl Receiver {
    async fn start(status: u16, delay: Duration) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let answered: Arc<AtomicUsize> = Arc::default();
        let (s, a) = (seen.clone(), answered.clone());
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (seen, answered) = (s.clone(), a.clone());
            async move {
                let path = req.uri().path().to_string();
                let headers = req
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect();
                let body = axum::body::to_bytes(req.into_body(), 1 << 20)
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default();
                seen.lock().unwrap().push(Received {
                    path,
                    headers,
                    body,
                });
                tokio::time::sleep(delay).await;
                answered.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::from_u16(status).unwrap()
            }
        });
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            port,
            seen,
            answered,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Wait until the requests satisfy `pred`, or panic with the logs.
    async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        d: &Daemon,
        pred: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let seen = self.seen();
            if pred(&seen) {
                return seen;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what} did not happen within {within:?}; received: {:#?}\nlogs:\n{}",
                    seen.iter().map(|r| (&r.path, r.json())).collect::<Vec<_>>(),
                    d.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn secret(ns: &TestNamespace, name: &str, data: &[(&str, &str)]) {
    let s = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    ns.api::<Secret>()
        .create(&PostParams::default(), &s)
        .await
        .expect("create Secret");
}

async fn provider(
    ns: &TestNamespace,
    name: &str,
    type_: ProviderType,
    address: &str,
    secret: Option<&str>,
) {
    let p = Provider::new(
        name,
        ProviderSpec {
            type_,
            address: Some(address.into()),
            channel: None,
            username: None,
            secret_ref: secret.map(|s| LocalRef { name: s.into() }),
            suspend: false,
        },
    );
    ns.api::<Provider>()
        .create(&PostParams::default(), &p)
        .await
        .expect("create Provider");
}

/// An Alert of the test's sync root (named after the namespace) to `provider`.
async fn root_alert(ns: &TestNamespace, name: &str, provider: &str, severity: SeverityFilter) {
    let a = Alert::new(
        name,
        AlertSpec {
            provider_ref: LocalRef {
                name: provider.into(),
            },
            event_severity: severity,
            event_sources: vec![EventSourceRef {
                kind: SourceKind::Root,
                name: ns.name().into(),
                namespace: None,
            }],
            exclusion_list: Vec::new(),
            summary: Some("notify test".into()),
            suspend: false,
        },
    );
    ns.api::<Alert>()
        .create(&PostParams::default(), &a)
        .await
        .expect("create Alert");
}

/// `weft run` with `--allowed-notification-urls` opting in to these loopback receivers, as an
/// operator would (loopback is refused by default).
fn daemon_allowing(repo: &str, ns: &TestNamespace, receivers: &[&str]) -> Daemon {
    let mut opts = DaemonOptions::new(repo, ns.name());
    // Only this test's Providers: a daemon judges (and writes the status of) every Provider it
    // watches, and the daemons of tests running beside it allow other receivers.
    opts.extra = vec![
        "--allowed-notification-urls".into(),
        receivers.join(","),
        "--watch-namespaces".into(),
        ns.name().into(),
    ];
    Daemon::start(opts)
}

impl Receiver {
    /// The prefix that allows this receiver and nothing else on loopback.
    fn prefix(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

fn assert_no_secret_in_logs(d: &Daemon) {
    let logs = d.logs();
    for token in [HMAC_KEY, GITHUB_TOKEN, GITLAB_TOKEN, BEARER_TOKEN] {
        assert!(!logs.contains(token), "a token is in the logs:\n{logs}");
    }
}

#[tokio::test]
async fn a_failed_pass_reaches_the_webhooks_with_file_and_line_signed() {
    let ns = TestNamespace::new("notify-fail").await;
    install_crds(&ns.client()).await;
    let generic = Receiver::start(200, Duration::ZERO).await;
    let hmac = Receiver::start(200, Duration::ZERO).await;
    secret(&ns, "bearer", &[("token", BEARER_TOKEN)]).await;
    secret(&ns, "hmac", &[("token", HMAC_KEY)]).await;
    provider(
        &ns,
        "generic",
        ProviderType::Generic,
        &generic.url("/hook"),
        Some("bearer"),
    )
    .await;
    provider(
        &ns,
        "signed",
        ProviderType::GenericHmac,
        &hmac.url("/signed"),
        Some("hmac"),
    )
    .await;
    root_alert(&ns, "to-generic", "generic", SeverityFilter::Info).await;
    root_alert(&ns, "to-signed", "signed", SeverityFilter::Error).await;

    let repo = ServedRepo::start();
    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "hello"),
    );
    repo.work
        .write("apps/bad.yaml", "apiVersion: v1\nkind: ConfigMap: oops\n");
    let sha = repo.work.commit("a YAML error");
    repo.work.push();
    let d = daemon_allowing(&repo.url(), &ns, &[&generic.prefix(), &hmac.prefix()]);

    let seen = generic
        .wait_for(
            "an error event at the generic receiver",
            Duration::from_secs(40),
            &d,
            |r| r.iter().any(|r| r.json()["severity"] == "error"),
        )
        .await;
    let error = seen
        .iter()
        .find(|r| r.json()["severity"] == "error")
        .unwrap();
    let body = error.json();
    assert_eq!(error.path, "/hook");
    assert_eq!(body["reason"], "ReconciliationFailed");
    assert_eq!(body["reportingController"], "weft");
    assert_eq!(body["involvedObject"]["kind"], "Root");
    assert_eq!(body["involvedObject"]["name"], ns.name());
    assert_eq!(body["metadata"]["revision"], sha.as_str());
    assert_eq!(body["metadata"]["summary"], "notify test");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("apps/bad.yaml:2"), "{message}");
    assert_eq!(
        error.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {BEARER_TOKEN}").as_str())
    );
    // The pending event of the new revision came first (info, to the info Alert).
    assert_eq!(
        seen[0].json()["reason"],
        "Progressing",
        "{:?}",
        seen[0].json()
    );

    let signed = hmac
        .wait_for(
            "an error event at the hmac receiver",
            Duration::from_secs(20),
            &d,
            |r| !r.is_empty(),
        )
        .await;
    // eventSeverity error: the Progressing event (info) never reached it.
    assert!(signed.iter().all(|r| r.json()["severity"] == "error"));
    let r = &signed[0];
    let expected = format!(
        "sha256={}",
        weft::notify::payload::hmac_sha256_hex(HMAC_KEY.as_bytes(), &r.body)
    );
    assert_eq!(r.headers.get("x-signature"), Some(&expected));
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("apps/bad.yaml:2"));
    assert_no_secret_in_logs(&d);
    ns.delete().await;
}

#[tokio::test]
async fn a_new_revision_gets_pending_then_success_commit_statuses() {
    let ns = TestNamespace::new("notify-status").await;
    install_crds(&ns.client()).await;
    let github = Receiver::start(201, Duration::ZERO).await;
    let gitlab = Receiver::start(201, Duration::ZERO).await;
    let errors_only = Receiver::start(200, Duration::ZERO).await;
    // Hangs 8 s, then fails: the pass must not wait for it.
    let failing = Receiver::start(500, Duration::from_secs(8)).await;
    secret(&ns, "github", &[("token", GITHUB_TOKEN)]).await;
    secret(&ns, "gitlab", &[("token", GITLAB_TOKEN)]).await;
    provider(
        &ns,
        "github",
        ProviderType::Github,
        &github.url("/org/repo"),
        Some("github"),
    )
    .await;
    provider(
        &ns,
        "gitlab",
        ProviderType::Gitlab,
        &gitlab.url("/org/repo.git"),
        Some("gitlab"),
    )
    .await;
    provider(
        &ns,
        "errors",
        ProviderType::Generic,
        &errors_only.url("/errors"),
        None,
    )
    .await;
    provider(
        &ns,
        "failing",
        ProviderType::Generic,
        &failing.url("/down"),
        None,
    )
    .await;
    root_alert(&ns, "to-github", "github", SeverityFilter::Info).await;
    root_alert(&ns, "to-gitlab", "gitlab", SeverityFilter::Info).await;
    root_alert(&ns, "to-errors", "errors", SeverityFilter::Error).await;
    root_alert(&ns, "to-failing", "failing", SeverityFilter::Info).await;

    let repo = ServedRepo::start();
    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "hello"),
    );
    let sha = repo.work.commit("greeting");
    repo.work.push();
    let d = daemon_allowing(
        &repo.url(),
        &ns,
        &[
            &github.prefix(),
            &gitlab.prefix(),
            &errors_only.prefix(),
            &failing.prefix(),
        ],
    );

    let s = d
        .wait_status("the first pass succeeded", Duration::from_secs(40), |s| {
            s["lastPass"]["result"] == "succeeded"
        })
        .await;
    assert_eq!(s["revision"], sha.as_str());
    // The failing provider's first request (the pending event) is still unanswered: the pass
    // did not wait for it.
    assert!(
        !failing.seen().is_empty(),
        "the failing provider was called"
    );
    assert_eq!(failing.answered.load(Ordering::SeqCst), 0);

    let two = |r: &[Received]| r.len() >= 2;
    let statuses = github
        .wait_for("two GitHub statuses", Duration::from_secs(20), &d, two)
        .await;
    let path = format!("/api/v3/repos/org/repo/statuses/{sha}");
    let states: Vec<(String, Value)> = statuses
        .iter()
        .map(|r| (r.path.clone(), r.json()["state"].clone()))
        .collect();
    assert_eq!(
        states,
        vec![(path.clone(), "pending".into()), (path, "success".into())]
    );
    for r in &statuses {
        assert_eq!(
            r.headers.get("authorization").map(String::as_str),
            Some(format!("token {GITHUB_TOKEN}").as_str())
        );
        assert_eq!(r.json()["context"], format!("weft/Root/{}", ns.name()));
    }
    let statuses = gitlab
        .wait_for("two GitLab statuses", Duration::from_secs(20), &d, two)
        .await;
    let path = format!("/api/v4/projects/org%2Frepo/statuses/{sha}");
    let states: Vec<(String, Value)> = statuses
        .iter()
        .map(|r| (r.path.clone(), r.json()["state"].clone()))
        .collect();
    assert_eq!(
        states,
        vec![(path.clone(), "pending".into()), (path, "success".into())]
    );
    assert!(statuses
        .iter()
        .all(|r| r.headers.get("private-token").map(String::as_str) == Some(GITLAB_TOKEN)));

    // Retried after the failure (8 s hang + 1 s backoff).
    failing
        .wait_for(
            "a retry of the failing provider",
            Duration::from_secs(40),
            &d,
            two,
        )
        .await;
    assert!(failing
        .seen()
        .iter()
        .all(|r| r.json()["reason"] == "Progressing"
            || r.json()["reason"] == "ReconciliationSucceeded"));
    // No error happened: the errors-only Alert's receiver got nothing.
    assert!(errors_only.seen().is_empty(), "{:?}", errors_only.seen());
    // Exactly two statuses: nothing more arrived meanwhile.
    assert_eq!(github.seen().len(), 2);
    let metrics = reqwest::get(format!("{}/metrics", d.base()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let sent: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("weft_notifications_sent_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no weft_notifications_sent_total in:\n{metrics}"));
    assert!(sent >= 4.0, "github and gitlab accepted 2 each: {sent}");
    assert_no_secret_in_logs(&d);
    ns.delete().await;
}

#[tokio::test]
async fn a_provider_without_the_key_its_type_needs_is_not_ready() {
    let ns = TestNamespace::new("notify-ready").await;
    install_crds(&ns.client()).await;
    secret(
        &ns,
        "no-token",
        &[("address", "https://github.com/org/repo")],
    )
    .await;
    provider(
        &ns,
        "broken",
        ProviderType::Github,
        "https://github.com/org/repo",
        Some("no-token"),
    )
    .await;
    // An address every daemon allows (other tests' daemons, watching every namespace with the
    // default policy, judge this Provider too); nothing is sent to it (no Alert names it).
    provider(
        &ns,
        "fine",
        ProviderType::Generic,
        "https://hooks.example.com/x",
        None,
    )
    .await;
    root_alert(&ns, "orphan", "missing", SeverityFilter::Info).await;
    let repo = ServedRepo::start();
    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "hello"),
    );
    repo.work.commit("greeting");
    repo.work.push();
    let d = daemon_allowing(&repo.url(), &ns, &["https://"]);

    let providers: Api<Provider> = ns.api();
    let alerts: Api<Alert> = ns.api();
    let ready = |c: &Option<weft::api::notification::NotificationStatus>| {
        c.as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready").cloned())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let broken = ready(&providers.get("broken").await.unwrap().status);
        let fine = ready(&providers.get("fine").await.unwrap().status);
        let orphan = ready(&alerts.get("orphan").await.unwrap().status);
        if let (Some(b), Some(f), Some(o)) = (&broken, &fine, &orphan) {
            assert_eq!(b.reason, "SecretKeyMissing", "{b:?}");
            assert_eq!(
                b.message,
                "Secret no-token has no key `token`, which provider type github needs"
            );
            assert_eq!(format!("{:?}", f.status), "True", "{f:?}");
            assert_eq!(o.reason, "ProviderNotFound", "{o:?}");
            break;
        }
        if Instant::now() > deadline {
            panic!(
                "no Ready conditions within 30s: {broken:?} {fine:?} {orphan:?}\nlogs:\n{}",
                d.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ns.delete().await;
}

/// Issue 30: a Provider may not make Weft post to loopback (the node's services, the kubelet)
/// or link-local (cloud metadata) unless the operator lists that address. The receiver outside
/// the list gets nothing and its Provider says why; the listed one gets the pass's events.
#[tokio::test]
async fn a_provider_address_outside_the_allow_list_gets_nothing() {
    let ns = TestNamespace::new("notify-policy").await;
    install_crds(&ns.client()).await;
    let listed = Receiver::start(200, Duration::ZERO).await;
    let internal = Receiver::start(200, Duration::ZERO).await;
    provider(
        &ns,
        "listed",
        ProviderType::Generic,
        &listed.url("/ok"),
        None,
    )
    .await;
    provider(
        &ns,
        "internal",
        ProviderType::Generic,
        &internal.url("/secret-service"),
        None,
    )
    .await;
    provider(
        &ns,
        "metadata",
        ProviderType::Generic,
        "https://169.254.169.254/latest/meta-data/",
        None,
    )
    .await;
    root_alert(&ns, "to-listed", "listed", SeverityFilter::Info).await;
    root_alert(&ns, "to-internal", "internal", SeverityFilter::Info).await;
    root_alert(&ns, "to-metadata", "metadata", SeverityFilter::Info).await;
    let repo = ServedRepo::start();
    repo.work.write(
        "apps/greeting.yaml",
        configmap(ns.name(), "greeting", "hello"),
    );
    repo.work.commit("greeting");
    repo.work.push();
    let d = daemon_allowing(&repo.url(), &ns, &["https://", &listed.prefix()]);

    listed
        .wait_for(
            "the pass's events at the listed receiver",
            Duration::from_secs(40),
            &d,
            |r| {
                r.iter()
                    .any(|r| r.json()["reason"] == "ReconciliationSucceeded")
            },
        )
        .await;
    let providers: Api<Provider> = ns.api();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (internal_ready, metadata_ready) = loop {
        let ready = |p: Provider| {
            p.status
                .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
        };
        let i = ready(providers.get("internal").await.unwrap());
        let m = ready(providers.get("metadata").await.unwrap());
        if let (Some(i), Some(m)) = (&i, &m) {
            break (i.clone(), m.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no Ready conditions: {i:?} {m:?}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for c in [&internal_ready, &metadata_ready] {
        assert_eq!(c.reason, "AddressNotAllowed", "{c:?}");
        assert_eq!(format!("{:?}", c.status), "False");
        assert!(!c.message.contains("secret-service"), "{c:?}");
    }
    // http is not listed for that port; the listed https reaches no link-local host either.
    assert!(
        internal_ready
            .message
            .contains("not allowed by --allowed-notification-urls"),
        "{internal_ready:?}"
    );
    assert!(
        metadata_ready.message.contains("link-local"),
        "{metadata_ready:?}"
    );
    assert!(
        internal.seen().is_empty(),
        "the unlisted loopback receiver got {} request(s)",
        internal.seen().len()
    );
    println!(
        "notify policy: listed receiver got {} event(s); unlisted loopback receiver 0; \"{}\" / \"{}\"",
        listed.seen().len(),
        internal_ready.message,
        metadata_ready.message
    );
    ns.delete().await;
}

const CHART: &str =
    "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n";
const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${release.name}
  labels: {app.kubernetes.io/instance: "${release.name}"}
spec:
  replicas: ${replicas}
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

/// The files of a repository with a Provider whose Secret (`slack-webhook`) does not exist, an
/// Alert to it, and a sequenced group of two charts whose Deployments have `replicas`.
fn undeliverable_repo(ns: &str, replicas: u32) -> Vec<(&'static str, String)> {
    let chart = |name: &str| {
        format!(
            r#"---
apiVersion: armada.airshipit.org/v1alpha1
kind: ArmadaChart
metadata: {{name: {name}, namespace: {ns}}}
spec:
  chart_name: app
  release: {name}
  namespace: {ns}
  source: {{type: local, location: charts/app}}
  values: {{replicas: {replicas}}}
  wait:
    timeout: 90
    labels: {{app.kubernetes.io/instance: "{name}"}}
    resources:
      - type: deployment
"#
        )
    };
    let mut armada = chart("first");
    armada.push_str(&chart("second"));
    armada.push_str(&format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {ns}}}\nspec:\n  sequenced: true\n  chart_group: [first, second]\n"
    ));
    let notifications = format!(
        r#"apiVersion: notification.weft.io/v1alpha1
kind: Provider
metadata: {{name: slack, namespace: {ns}}}
spec:
  type: generic
  address: https://hooks.example.com/weft
  secretRef: {{name: slack-webhook}}
---
apiVersion: notification.weft.io/v1alpha1
kind: Alert
metadata: {{name: failures, namespace: {ns}}}
spec:
  providerRef: {{name: slack}}
  eventSources:
    - {{kind: ArmadaChart, name: "*"}}
    - {{kind: Root, name: "{ns}"}}
"#
    );
    vec![
        ("charts/app/Chart.yaml", CHART.to_string()),
        ("charts/app/values.yaml", "replicas: 1\n".to_string()),
        (
            "charts/app/templates/deployment.yaml",
            DEPLOYMENT.to_string(),
        ),
        ("armada.yaml", armada),
        ("apps/notifications.yaml", notifications),
    ]
}

/// Both charts' Deployments have `replicas`, all of them ready, and both charts are deployed.
async fn deployed_at(ns: &TestNamespace, replicas: i32) -> Option<()> {
    let deployments: Api<Deployment> = ns.api();
    let charts: Api<ArmadaChart> = ns.api();
    for name in ["first", "second"] {
        let d = deployments.get_opt(name).await.ok()??;
        let spec = d.spec.as_ref().and_then(|s| s.replicas);
        let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
        if spec != Some(replicas) || ready != Some(replicas) {
            return None;
        }
        let phase = charts.get_opt(name).await.ok()??.status?.phase;
        if phase != Some(Phase::Deployed) {
            return None;
        }
    }
    Some(())
}

/// The message of the Provider `slack`'s `Ready=False` (`SecretNotFound`), once it is so.
async fn provider_not_ready(ns: &TestNamespace) -> Option<String> {
    let providers: Api<Provider> = ns.api();
    let ready = providers
        .get("slack")
        .await
        .ok()?
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    (format!("{:?}", ready.status) == "False" && ready.reason == "SecretNotFound")
        .then_some(ready.message)
}

/// The Provider `slack` is `Ready=False` (`SecretNotFound`, naming the Secret) and has a
/// Warning event saying the same: the condition's message.
async fn provider_reported(ns: &TestNamespace) -> Option<String> {
    let message = provider_not_ready(ns).await?;
    let events: Api<KubeEvent> = ns.api();
    let warned = events
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("SecretNotFound")
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Provider") && r.name.as_deref() == Some("slack")
                })
                && e.note.as_deref() == Some(message.as_str())
        });
    warned.then_some(message)
}

/// Issue 40: `weft run` with a Provider whose Secret is missing — every pass used to fail on
/// the Provider's `Ready=False`, and the charts stayed `Blocked` at the old replica count.
#[tokio::test]
async fn a_provider_whose_secret_is_missing_blocks_no_deployment_in_the_daemon() {
    let ns = TestNamespace::new("notify-undeliverable").await;
    install_crds(&ns.client()).await;
    let repo = ServedRepo::start();
    for (file, text) in undeliverable_repo(ns.name(), 1) {
        repo.work.write(file, text);
    }
    repo.work.commit("charts and a Provider without its Secret");
    repo.work.push();
    let d = daemon_allowing(&repo.url(), &ns, &["https://"]);

    wait_for(
        "both charts deployed at 1 replica",
        Duration::from_secs(120),
        &d,
        async || deployed_at(&ns, 1).await,
    )
    .await;
    // Once the Provider says it cannot send, the next pass (a new revision) goes on too: it
    // used to fail on the Provider's `Ready=False`, every chart `Blocked` at 1 replica.
    wait_for(
        "the Provider Ready=False",
        Duration::from_secs(60),
        &d,
        async || provider_not_ready(&ns).await,
    )
    .await;
    for (file, text) in undeliverable_repo(ns.name(), 2) {
        repo.work.write(file, text);
    }
    repo.work.commit("two replicas");
    repo.work.push();
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");
    wait_for(
        "both charts deployed at the new replica count",
        Duration::from_secs(120),
        &d,
        async || deployed_at(&ns, 2).await,
    )
    .await;
    let report = d
        .wait_status("the pass is reported", Duration::from_secs(60), |s| {
            s["lastPass"]["result"] == "succeeded"
        })
        .await;
    assert!(report["lastPass"]["error"].is_null(), "{report:#}");
    let message = wait_for(
        "the Provider's Warning event",
        Duration::from_secs(60),
        &d,
        async || provider_reported(&ns).await,
    )
    .await;
    assert!(message.contains("Secret slack-webhook"), "{message}");
    ns.delete().await;
}

/// Issue 40: `weft sync` judges the same repository the same way — the pass succeeds, both
/// charts reach the new replica count, the Provider is `Ready=False` with a Warning event, and
/// the command says so in one warning line.
#[tokio::test]
async fn a_provider_whose_secret_is_missing_blocks_no_deployment_in_a_one_shot_sync() {
    let ns = TestNamespace::new("notify-undeliverable-sync").await;
    install_crds(&ns.client()).await;
    let repo = Repo::new();
    let sync = |replicas: u32| {
        for (file, text) in undeliverable_repo(ns.name(), replicas) {
            repo.write(file, &text);
        }
        Weft::new(["sync", "--timeout", "120s"])
            .repo(repo.path())
            .cluster()
            .root(ns.name())
            .env("WEFT_HELM", support::helm::helm())
            .run()
    };
    for replicas in [1, 2] {
        let (code, stdout, stderr) = sync(replicas);
        assert_eq!(
            code, 0,
            "weft sync ({replicas} replicas) failed:\n{stdout}\n{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "warning: Provider/{}/slack is not ready (SecretNotFound): Secret slack-webhook",
                ns.name()
            )),
            "{stderr}"
        );
        // Said once, in that line.
        assert_eq!(stderr.matches("SecretNotFound").count(), 1, "{stderr}");
        let no_logs = || format!("{stdout}\n{stderr}");
        wait_for(
            "both charts deployed",
            Duration::from_secs(30),
            &no_logs,
            async || deployed_at(&ns, replicas as i32).await,
        )
        .await;
        let message = wait_for(
            "the Provider Ready=False with a Warning event",
            Duration::from_secs(30),
            &no_logs,
            async || provider_reported(&ns).await,
        )
        .await;
        assert!(message.contains("Secret slack-webhook"), "{message}");
    }
    ns.delete().await;
}
