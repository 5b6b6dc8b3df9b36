//! `weft get` against the real control plane: the rows of WeaveClouds and Armada charts with
//! their Ready condition, exit 1 while one is not ready, JSON output, and `--wait` returning 0
//! once the last one becomes ready.

use crate::support;

use std::process::Output;
use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use support::cluster::TestNamespace;
use support::manifests::weavecloud;
use weft::api::armada::ArmadaChart;
use weft::api::WeaveCloud;

fn weft_get(ns: &str, extra: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("get")
        .args(extra)
        .args(["-n", ns])
        .args(support::cluster::cluster().kube_args())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("weft get")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ready(status: &str, reason: &str, message: &str) -> Value {
    json!({"conditions": [{
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-02T01:00:00Z",
    }]})
}

async fn set_status<K>(api: &Api<K>, name: &str, status: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

#[tokio::test]
async fn get_lists_ready_and_failing_resources_and_waits_for_them() {
    let ns = TestNamespace::new("get").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;

    let charts: Api<ArmadaChart> = ns.api();
    let chart: ArmadaChart = serde_json::from_value(json!({
        "apiVersion": "armada.airshipit.org/v1alpha1",
        "kind": "ArmadaChart",
        "metadata": {"name": "web", "namespace": ns.name()},
        "spec": {"release": "web", "namespace": ns.name(), "source": {"type": "local", "location": "charts/web"}},
    }))
    .unwrap();
    charts.create(&PostParams::default(), &chart).await.unwrap();
    let mut status = ready("True", "Deployed", "deployed");
    status["revision"] = json!("4f2a9c1");
    set_status(&charts, "web", status).await;

    let wcs: Api<WeaveCloud> = ns.api();
    let wc = weavecloud(ns.name())
        .auto_update(false)
        .token("weave-cloud-token", Some("token"))
        .object();
    wcs.create(&PostParams::default(), &wc).await.unwrap();
    set_status(
        &wcs,
        "weave-cloud",
        ready(
            "False",
            "TokenMissing",
            "Secret weave-cloud-token has no key `token`",
        ),
    )
    .await;

    // One not ready: the table shows both, the reason of the failing one, and exit 1.
    let out = weft_get(ns.name(), &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].starts_with("KIND"), "{t}");
    let chart_line = lines
        .iter()
        .find(|l| l.starts_with("ArmadaChart"))
        .expect(&t);
    assert!(
        chart_line.contains("web") && chart_line.contains("True") && chart_line.contains("4f2a9c1"),
        "{t}"
    );
    let wc_line = lines
        .iter()
        .find(|l| l.starts_with("WeaveCloud"))
        .expect(&t);
    assert!(
        wc_line.contains("False")
            && wc_line.ends_with("TokenMissing: Secret weave-cloud-token has no key `token`"),
        "{t}"
    );

    // Only the charts: all ready, exit 0. JSON has one object per resource.
    let out = weft_get(ns.name(), &["charts", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        rows,
        json!([{
            "kind": "ArmadaChart", "namespace": ns.name(), "name": "web", "ready": "True",
            "revision": "4f2a9c1", "suspended": false, "since": "2026-12-02T01:00:00Z",
            "message": "",
        }])
    );

    // --wait: the WeaveCloud becomes ready while weft get waits; it then exits 0.
    let name = ns.name().to_string();
    let waiting = std::thread::spawn(move || weft_get(&name, &["--wait", "--timeout", "60s"]));
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_status(
        &wcs,
        "weave-cloud",
        ready("True", "AgentsReady", "agents ready"),
    )
    .await;
    let out = waiting.join().expect("weft get --wait");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("False"),
        "{}",
        text(&out)
    );

    // --wait gives up at its timeout and says what is still not ready.
    set_status(
        &charts,
        "web",
        ready("False", "Failed", "helm: required value"),
    )
    .await;
    let out = weft_get(ns.name(), &["--wait", "--timeout", "3s"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("Failed: helm: required value"),
        "{}",
        text(&out)
    );
}
