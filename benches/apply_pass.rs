//! A sync pass against the test API server, beside `kubectl apply --server-side` of the same
//! objects in the same run: a first pass (everything created) and a no-op pass (nothing changed),
//! over 1,000 and 5,000 ConfigMaps, with wall time and write calls for both.
//!
//! Run: `cargo bench --bench apply_pass` (starts the control plane of tests/control-plane, or
//! uses the cluster of `WEFT_TEST_KUBECONFIG`). Sizes: `WEFT_BENCH_SIZES=1000,5000` (default).
//! weft's calls are counted by a tower layer on its client; kubectl's from its `-v=6` request
//! log (one line per request).

#[path = "../tests/support/cluster.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod cluster;
#[path = "../tests/support/manifests.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod manifests;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use manifests::configmap_with;
use weft::apply::calls;
use weft::pass::{self, PassInput, PassSettings};
use weft::source::Snapshot;

/// ConfigMap number `i`, with a 64-byte payload.
fn configmap(ns: &str, i: usize) -> String {
    configmap_with(
        ns,
        &format!("cm-{i:05}"),
        &[("app", "bench")],
        &[("index", &i.to_string()), ("payload", &"x".repeat(64))],
    )
}

struct Row {
    tool: &'static str,
    size: usize,
    pass: &'static str,
    wall: Duration,
    writes: u64,
    reads: u64,
}

async fn weft_pass(
    ns: &str,
    size: usize,
    files: &BTreeMap<String, Vec<u8>>,
    pass: &'static str,
) -> Row {
    let c = cluster::cluster();
    let config = calls::config(Some(c.kubeconfig_path()), c.context())
        .await
        .expect("kubeconfig");
    let (client, counts) = calls::counting_client(config).expect("client");
    let opts = PassSettings {
        root_name: ns.to_string(),
        weft_namespace: ns.to_string(),
        default_namespace: ns.to_string(),
        ..PassSettings::default()
    };
    let snapshot = Snapshot {
        revision: None,
        files: files.clone(),
    };
    let start = Instant::now();
    let result = pass::run_pass(&client, snapshot, &opts, &PassInput::default(), &|_| {}).await;
    let wall = start.elapsed();
    if let Some(e) = &result.error {
        panic!("weft pass failed: {e}");
    }
    let used = counts.snapshot();
    Row {
        tool: "weft sync",
        size,
        pass,
        wall,
        writes: used.writes,
        reads: used.reads,
    }
}

fn kubectl_pass(file: &std::path::Path, size: usize, pass: &'static str) -> Row {
    let c = cluster::cluster();
    let start = Instant::now();
    let out = Command::new("kubectl")
        .args(c.kube_args())
        .args([
            "apply",
            "--server-side",
            "--field-manager",
            "bench-kubectl",
            "-v=6",
            "-f",
        ])
        .arg(file)
        .output()
        .expect("run kubectl");
    let wall = start.elapsed();
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let count = |methods: &[&str]| {
        log.lines()
            .filter(|l| l.contains("round_trippers") || l.contains("Response"))
            .filter(|l| {
                methods
                    .iter()
                    .any(|m| l.contains(&format!("\"{m} ")) || l.contains(&format!(" {m} http")))
            })
            .count() as u64
    };
    Row {
        tool: "kubectl apply --server-side",
        size,
        pass,
        wall,
        writes: count(&["PATCH", "POST", "PUT", "DELETE"]),
        reads: count(&["GET"]),
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("WEFT_BENCH_SIZES")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // `cargo bench` passes `--bench`; nothing else to parse.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut rows = Vec::new();
    for &size in &sizes {
        let (weft_ns, kubectl_ns) = runtime.block_on(async {
            (
                cluster::TestNamespace::new(&format!("bench-weft-{size}")).await,
                cluster::TestNamespace::new(&format!("bench-kubectl-{size}")).await,
            )
        });
        let files: BTreeMap<String, Vec<u8>> = (0..size)
            .map(|i| {
                (
                    format!("configmaps/cm-{i:05}.yaml"),
                    configmap(weft_ns.name(), i).into_bytes(),
                )
            })
            .collect();
        rows.push(runtime.block_on(weft_pass(weft_ns.name(), size, &files, "first")));
        rows.push(runtime.block_on(weft_pass(weft_ns.name(), size, &files, "no-op")));

        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("configmaps.yaml");
        let stream: String = (0..size)
            .map(|i| format!("---\n{}", configmap(kubectl_ns.name(), i)))
            .collect();
        std::fs::write(&file, stream).expect("write");
        rows.push(kubectl_pass(&file, size, "first"));
        rows.push(kubectl_pass(&file, size, "no-op"));
        runtime.block_on(async {
            weft_ns.delete().await;
            kubectl_ns.delete().await;
        });
    }
    println!("| objects | tool | pass | wall time | write calls | read calls |");
    println!("|---:|---|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} s | {} | {} |",
            r.size,
            r.tool,
            r.pass,
            r.wall.as_secs_f64(),
            r.writes,
            r.reads
        );
    }
}
