//! The monitoring examples against a real daemon: `weft run` syncs a real git repository into
//! the real control plane, `GET /metrics` is scraped, and
//!
//! - every metric name that `deploy/monitoring/grafana-dashboard.json` and
//!   `deploy/monitoring/prometheus-rules.yaml` use in their PromQL has samples there;
//! - the values are real: the root's `Ready` gauge is `True` after a sync, its suspend gauge is 1
//!   after `weft suspend` (and 0 again after `weft resume`), its reconcile duration counts the
//!   passes, the API client's requests are counted by code, the process metrics are this
//!   daemon's.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::cluster::TestNamespace;
use support::daemon::{Daemon, DaemonOptions};
use support::git_servers::ServedRepo;
use support::manifests::{configmap, weavecloud};
use support::weft_cli::Weft;

/// The samples of a Prometheus text exposition: name → [(labels as written, value)].
fn samples(text: &str) -> BTreeMap<String, Vec<(String, f64)>> {
    let mut out: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("sample line: series value");
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        out.entry(name.to_string())
            .or_default()
            .push((labels.to_string(), value));
    }
    out
}

/// The value of the sample `name{labels}` (labels exactly as the exposition writes them).
fn value(all: &BTreeMap<String, Vec<(String, f64)>>, name: &str, labels: &str) -> Option<f64> {
    all.get(name)?
        .iter()
        .find(|(l, _)| l == labels)
        .map(|(_, v)| *v)
}

/// PromQL words that are not metric names when they are not followed by `(`.
const KEYWORDS: [&str; 12] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
];

/// The metric names a PromQL expression reads: its identifiers outside strings, label
/// matchers (`{…}`), ranges (`[…]`) and grouping lists (`by (…)`), that are neither functions
/// (followed by `(`) nor keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut cleaned = String::new();
    let (mut braces, mut brackets, mut quote) = (0, 0, None);
    for c in expr.chars() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '{' => braces += 1,
            '}' => braces -= 1,
            '[' => brackets += 1,
            ']' => brackets -= 1,
            _ if braces == 0 && brackets == 0 => {
                cleaned.push(c);
                continue;
            }
            _ => continue,
        }
        cleaned.push(' ');
    }
    let chars: Vec<char> = cleaned.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut next = i;
        while next < chars.len() && chars[next].is_whitespace() {
            next += 1;
        }
        let ahead: String = chars[next..].iter().take(8).collect();
        // An aggregation with its grouping first (`sum by (le) (…)`) is an operator too.
        let grouped = ["by", "without"].iter().any(|g| {
            ahead
                .strip_prefix(g)
                .is_some_and(|rest| rest.starts_with(|c: char| c == '(' || c.is_whitespace()))
        });
        let called = chars.get(next) == Some(&'(') || grouped;
        if KEYWORDS.contains(&word.as_str()) {
            if called && !matches!(word.as_str(), "and" | "or" | "unless" | "atan2") {
                // A grouping list: label names, skipped.
                let mut depth = 0;
                i = next;
                while i < chars.len() {
                    match chars[i] {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            continue;
        }
        if !called {
            names.insert(word);
        }
    }
    names
}

/// Every string under a key `key`, anywhere in `v`.
fn strings_under(v: &Value, key: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match v {
                    Value::String(s) if k == key => out.push(s.clone()),
                    _ => strings_under(v, key, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| strings_under(v, key, out)),
        _ => {}
    }
}

/// The metric names the shipped dashboard and rules use, each with the file that uses it.
fn referenced_metrics() -> BTreeMap<String, &'static str> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("prometheus-rules.yaml")).expect("rules"),
    )
    .expect("rules YAML");
    assert_eq!(rules["kind"], "PrometheusRule");
    let mut out = BTreeMap::new();
    for (file, doc) in [
        ("grafana-dashboard.json", &dashboard),
        ("prometheus-rules.yaml", &rules),
    ] {
        let mut exprs = Vec::new();
        strings_under(doc, "expr", &mut exprs);
        assert!(exprs.len() > 5, "{file}: only {} expressions", exprs.len());
        for e in &exprs {
            let names = metric_names(e);
            assert!(!names.is_empty(), "{file}: no metric in {e}");
            for n in names {
                out.insert(n, file);
            }
        }
    }
    // Grafana's variables: `label_values(METRIC{…}, LABEL)`.
    let mut queries = Vec::new();
    strings_under(&dashboard, "definition", &mut queries);
    for q in queries {
        let inner = q
            .strip_prefix("label_values(")
            .unwrap_or_else(|| panic!("a variable that is not label_values: {q}"));
        let metric: String = inner
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        out.insert(metric, "grafana-dashboard.json");
    }
    out
}

#[test]
fn promql_names_are_read_as_prometheus_reads_them() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (kind, le) (rate(weft_x_bucket{kind=~"$kind",a="b{c}"}[5m]))) > 600 and on (pod) (weft_leader == 1)"#
        ),
        BTreeSet::from(["weft_x_bucket".to_string(), "weft_leader".to_string()])
    );
    assert_eq!(
        metric_names("process_open_fds / process_max_fds > 0.8 or vector(0)"),
        BTreeSet::from([
            "process_open_fds".to_string(),
            "process_max_fds".to_string()
        ])
    );
    let used = referenced_metrics();
    for expected in [
        "weft_reconcile_condition",
        "weft_suspend_status",
        "weft_reconcile_duration_seconds_bucket",
        "rest_client_requests_total",
        "process_cpu_seconds_total",
    ] {
        assert!(
            used.contains_key(expected),
            "{expected} not found in {used:?}"
        );
    }
}

/// `GET /metrics` of `d`.
async fn scrape(d: &Daemon) -> String {
    let resp = reqwest::get(format!("{}/metrics", d.base()))
        .await
        .expect("GET /metrics");
    assert_eq!(resp.status(), 200);
    resp.text().await.expect("metrics body")
}

/// Scrape until `pred` holds on the samples, or panic with `what` and the logs.
async fn wait_metrics(
    d: &Daemon,
    what: &str,
    pred: impl Fn(&BTreeMap<String, Vec<(String, f64)>>) -> bool,
) -> BTreeMap<String, Vec<(String, f64)>> {
    let start = Instant::now();
    loop {
        let text = scrape(d).await;
        let all = samples(&text);
        if pred(&all) {
            return all;
        }
        if start.elapsed() > Duration::from_secs(30) {
            panic!("{what}: not within 30s\n{text}\nlogs:\n{}", d.logs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn every_metric_of_the_dashboard_and_the_rules_is_exported_with_real_values() {
    let ns = TestNamespace::new("monitoring").await;
    let n = ns.name();
    let repo = ServedRepo::start();
    repo.work
        .write("apps/greeting.yaml", configmap(n, "greeting", "hello"));
    repo.work.commit("one");
    repo.work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions::new(&url, n));
    d.wait_status("the first pass", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;

    let root = format!("kind=\"Root\",name=\"{n}\",namespace=\"{n}\"");
    let ready = |status: &str| format!("{root},type=\"Ready\",status=\"{status}\"");
    let all = wait_metrics(&d, "the root's gauges after the first pass", |all| {
        value(all, "weft_reconcile_condition", &ready("True")) == Some(1.0)
            && value(all, "weft_suspend_status", &root) == Some(0.0)
    })
    .await;
    let text = scrape(&d).await;

    // Every metric the shipped dashboard and rules name has samples.
    let missing: Vec<String> = referenced_metrics()
        .into_iter()
        .filter(|(name, _)| !all.contains_key(name))
        .map(|(name, file)| format!("{name} ({file})"))
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}\n{text}");

    // Real values.
    assert_eq!(
        value(&all, "weft_reconcile_condition", &ready("False")),
        Some(0.0)
    );
    assert_eq!(
        value(&all, "weft_reconcile_condition", &ready("Unknown")),
        Some(0.0)
    );
    let passes = value(&all, "weft_reconcile_duration_seconds_count", &root).expect("root passes");
    assert!(passes >= 1.0, "{text}");
    assert!(value(&all, "weft_leader", "") == Some(1.0), "{text}");
    let ok_gets = value(
        &all,
        "rest_client_requests_total",
        "code=\"200\",method=\"GET\"",
    );
    assert!(
        ok_gets.is_some_and(|v| v > 0.0),
        "API reads counted: {text}"
    );
    let get_latency = value(
        &all,
        "rest_client_request_duration_seconds_count",
        "verb=\"GET\"",
    );
    assert!(get_latency.is_some_and(|v| v > 0.0), "{text}");
    let rss = value(&all, "process_resident_memory_bytes", "").expect("rss");
    assert!(rss > 1_000_000.0, "a daemon's resident memory: {rss}");
    let started = value(&all, "process_start_time_seconds", "").expect("start time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now + 1.0 && started > now - 600.0,
        "the daemon started within the test: {started} vs now {now}"
    );
    assert!(
        value(&all, "process_open_fds", "").is_some_and(|v| v > 3.0),
        "{text}"
    );
    assert!(
        value(&all, "tokio_alive_tasks", "").is_some_and(|v| v > 0.0),
        "{text}"
    );

    // Suspend the root: its suspend gauge says so at once (the daemon follows the record), and
    // its Ready gauge stays what the last pass left.
    let weft = |verb: &str| {
        Weft::new([verb])
            .cluster()
            .root(n)
            .env_remove("WEFT_ROOT_NAME")
            .run()
    };
    let (code, out, err) = weft("suspend");
    assert_eq!(code, 0, "weft suspend:\n{out}\n{err}");
    wait_metrics(&d, "the suspended root's gauge", |all| {
        value(all, "weft_suspend_status", &root) == Some(1.0)
            && value(all, "weft_reconcile_condition", &ready("True")) == Some(1.0)
    })
    .await;
    let (code, out, err) = weft("resume");
    assert_eq!(code, 0, "weft resume:\n{out}\n{err}");
    wait_metrics(&d, "the resumed root's gauge", |all| {
        value(all, "weft_suspend_status", &root) == Some(0.0)
    })
    .await;
    drop(d);
    ns.delete().await;
}

#[tokio::test]
async fn a_weavecloud_has_its_ready_and_suspend_series_until_it_is_deleted() {
    use kube::api::{Api, DeleteParams, Patch, PatchParams};
    use weft::api::WeaveCloud;

    let ns = TestNamespace::new("monitoring-wc").await;
    let n = ns.name();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    support::cluster::create_token_secret(&client, n, "weave-cloud-token", "s3cr3t-token").await;
    let repo = ServedRepo::start();
    // A WeaveCloud the root applies, with the token Secret above for its agents.
    let wc = weavecloud(n)
        .auto_update(false)
        .token("weave-cloud-token", Some("token"))
        .flux_config();
    repo.work.write("weave/weave-cloud.yaml", wc.yaml());
    repo.work.commit("weave cloud");
    repo.work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        ..DaemonOptions::new(&url, n)
    });
    let wcs: Api<WeaveCloud> = Api::namespaced(client.clone(), n);
    let series = format!("kind=\"WeaveCloud\",name=\"weave-cloud\",namespace=\"{n}\"");

    // The Ready gauge follows the WeaveCloud's Ready condition, whatever the agents do.
    let start = Instant::now();
    loop {
        let status = wcs
            .get_opt("weave-cloud")
            .await
            .ok()
            .flatten()
            .and_then(|wc| {
                let ready = wc
                    .status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Ready")?;
                Some(format!("{:?}", ready.status))
            });
        let all = samples(&scrape(&d).await);
        let gauge = |s: &str| {
            value(
                &all,
                "weft_reconcile_condition",
                &format!("{series},type=\"Ready\",status=\"{s}\""),
            )
        };
        if let Some(s) = &status {
            let others: Vec<&str> = ["True", "False", "Unknown"]
                .into_iter()
                .filter(|o| o != s)
                .collect();
            if gauge(s) == Some(1.0) && others.iter().all(|o| gauge(o) == Some(0.0)) {
                let reconciles =
                    value(&all, "weft_reconcile_duration_seconds_count", &series).unwrap_or(0.0);
                assert!(reconciles >= 1.0, "reconciles are timed");
                assert_eq!(value(&all, "weft_suspend_status", &series), Some(0.0));
                break;
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            panic!(
                "the Ready gauge never matched the WeaveCloud's Ready ({status:?}):\n{}\nlogs:\n{}",
                scrape(&d).await,
                d.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let annotate = async |value: Option<&str>| {
        let patch = serde_json::json!({"metadata": {"annotations": {"weft.io/suspend": value}}});
        wcs.patch(
            "weave-cloud",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("annotate the WeaveCloud");
    };
    annotate(Some("true")).await;
    wait_metrics(&d, "the suspended WeaveCloud's gauge", |all| {
        value(all, "weft_suspend_status", &series) == Some(1.0)
    })
    .await;
    annotate(None).await;
    wait_metrics(&d, "the resumed WeaveCloud's gauge", |all| {
        value(all, "weft_suspend_status", &series) == Some(0.0)
    })
    .await;

    // Deleted: its gauges go (the root prunes nothing here: it is deleted by hand).
    wcs.delete("weave-cloud", &DeleteParams::default())
        .await
        .expect("delete the WeaveCloud");
    wait_metrics(&d, "the deleted WeaveCloud's series gone", |all| {
        value(all, "weft_suspend_status", &series).is_none()
            && all
                .get("weft_reconcile_condition")
                .is_none_or(|s| !s.iter().any(|(l, _)| l.starts_with(&series)))
    })
    .await;
    drop(d);
    ns.delete().await;
}

/// An Armada site: a chart (reconciled by the chart controller), a group and a manifest (whose
/// status the pass writes) each get their Ready and suspend series; a group and manifest that
/// leave git lose theirs with the next pass.
#[tokio::test]
async fn armada_charts_groups_and_manifests_have_ready_series_until_they_leave_git() {
    let ns = TestNamespace::new("monitoring-armada").await;
    let n = ns.name();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let repo = ServedRepo::start();
    repo.work
        .write(
            "charts/caps/Chart.yaml",
            "apiVersion: v2\nname: caps\nversion: 1.0.0\n",
        )
        .write(
            "charts/caps/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  x: \"1\"\n",
        )
        .write(
            "site/chart.yaml",
            format!("apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: caps, namespace: {n}}}\nspec:\n  release: caps\n  namespace: {n}\n  source: {{type: local, location: charts/caps}}\n  wait: {{resources: []}}\n"),
        )
        .write(
            "site/groups.yaml",
            format!("apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: first, namespace: {n}}}\nspec:\n  chart_group: [caps]\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {{name: site, namespace: {n}}}\nspec:\n  release_prefix: site\n  chart_groups: [first]\n"),
        );
    repo.work.commit("an armada site");
    repo.work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        interval: "2s",
        ..DaemonOptions::new(&url, n)
    });
    d.wait_status("the first pass", Duration::from_secs(90), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    let of = |kind: &str, name: &str| format!("kind=\"{kind}\",name=\"{name}\",namespace=\"{n}\"");
    let ready =
        |kind: &str, name: &str| format!("{},type=\"Ready\",status=\"True\"", of(kind, name));
    let all = wait_metrics(&d, "the site's Ready series", |all| {
        [
            ("ArmadaChart", "caps"),
            ("ArmadaChartGroup", "first"),
            ("ArmadaManifest", "site"),
        ]
        .iter()
        .all(|(k, name)| value(all, "weft_reconcile_condition", &ready(k, name)) == Some(1.0))
    })
    .await;
    for (kind, name) in [("ArmadaChartGroup", "first"), ("ArmadaManifest", "site")] {
        assert_eq!(
            value(&all, "weft_suspend_status", &of(kind, name)),
            Some(0.0),
            "{kind} {name}"
        );
        let false_series = format!("{},type=\"Ready\",status=\"False\"", of(kind, name));
        assert_eq!(
            value(&all, "weft_reconcile_condition", &false_series),
            Some(0.0)
        );
    }

    // The group and the manifest leave git: their series go; the chart's stay.
    repo.work.remove("site/groups.yaml");
    repo.work.commit("no group, no manifest");
    repo.work.push();
    let gone = |all: &BTreeMap<String, Vec<(String, f64)>>| {
        let series = all.get("weft_reconcile_condition");
        let named =
            |needle: &str| series.is_some_and(|s| s.iter().any(|(l, _)| l.contains(needle)));
        !named("kind=\"ArmadaChartGroup\"") && !named("kind=\"ArmadaManifest\"")
    };
    let all = wait_metrics(&d, "the group's and manifest's series gone", gone).await;
    assert_eq!(
        value(
            &all,
            "weft_reconcile_condition",
            &ready("ArmadaChart", "caps")
        ),
        Some(1.0)
    );
    drop(d);
    ns.delete().await;
}
