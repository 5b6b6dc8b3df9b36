//! Scale: 1,000 / 10,000 / 100,000 plain objects, Weft beside Flux's own apply engine, in one run
//! against the same API server (issue 16, items 2 and 3).
//!
//! For each size a repository of that many ConfigMaps is generated (100 documents per file, files
//! spread over 10 top-level directories `team-00` … `team-09`, ~200 bytes of data per object) and
//! applied by each tool into a fresh namespace of its own:
//! - `weft render` of the checkout (no cluster): wall time, peak RSS;
//! - `weft sync` (the real binary): a first pass and a no-op pass;
//! - `weft run` (the daemon, as deployed with its controllers) syncing the repository from a
//!   `git daemon` on loopback: its first pass, a no-op pass asked for on the sync endpoint, RSS
//!   sampled every 200 ms, then one object changed, pushed, a GitHub webhook sent, and the time
//!   until the change is in the cluster;
//! - Flux's engine (`benches/flux-ssa`: fluxcd/pkg/ssa `ApplyAllStaged`, set up as
//!   kustomize-controller sets it up), with kustomize-controller's defaults (SSA concurrency 4,
//!   client QPS 50, burst 300) and tuned (no client-side rate limit, concurrency 10);
//! - `kubectl apply --server-side`, only up to `WEFT_BENCH_KUBECTL_MAX` objects (it is slow);
//! - raw creates: the same objects POSTed from 32 goroutines with no engine and no client-side
//!   rate limit (the Go helper's `raw` mode), the API server's own create rate: the baseline of a
//!   first pass (issue 47 item 1);
//! - raw applies: the same objects server-side applied (forced, field manager `weft`) from 32
//!   goroutines, no engine (the helper's `raw-apply` mode): the API server's own rate of first
//!   applies, the best a first pass that writes every object as an apply could reach.
//!
//! With `weft sync` measured, the raw modes run right before it and again right after it, and
//! its ratios take the mean of the two (the control plane slows as a run goes on).
//! `WEFT_BENCH_ROUNDS` (default 1) repeats that sequence for each size, and the ratios take
//! each row's median over the rounds (`scripts/bench-check` runs three).
//!
//! At the end it prints the ratios issue 47 holds Weft to (weft sync's first pass against raw
//! creates and against tuned Flux, its no-op pass against tuned Flux; with raw applies measured
//! too, raw applies against raw creates and weft sync's first pass against raw applies); with
//! `WEFT_BENCH_CHECK=1` (`scripts/bench-check`) it fails when one falls more than 20% below
//! the figure recorded in docs/benchmarks.md's table after `<!-- bench-check ratios -->`
//! (issue 47 item 5).
//!
//! Every tool reaches the API server through the same counting proxy on loopback
//! (tests/support/faults.rs `ApiProxy`), so calls are counted the same way for all: reads
//! (GET, LIST, WATCH), writes (POST/PUT/PATCH/DELETE), dry-runs (`dryRun=All`); the daemon's Lease
//! and Event writes apart. One-shot processes run under `/usr/bin/time` for their peak RSS.
//!
//! Run: `cargo bench --bench scale` (starts the control plane of tests/control-plane, or uses
//! `WEFT_TEST_KUBECONFIG`; the Go helper is built on first use by benches/flux-ssa/ensure).
//! `WEFT_BENCH_SIZES` (default `1000,10000,100000`), `WEFT_BENCH_KUBECTL_MAX` (default 1000),
//! `WEFT_BENCH_WARMUP` (default on; `0` skips the unmeasured raw creates of each size that
//! come before `weft sync` when the Go helper is built), `WEFT_BENCH_FLUX_DEFAULT_MAX` (default
//! 10000: at 50 requests a second, the default mode needs about 100,000 / 50 × 3 s ≈ 100 minutes
//! for 100,000 objects), `WEFT_BENCH_TOOLS` (default all:
//! `render,sync,daemon,flux-default,flux-tuned,raw,kubectl`; `raw-apply` is not in the default
//! set; `flux-default-noop`, not in it either, runs the default mode's no-op pass on objects the
//! tuned mode applied first, so that it can run as a second bench process beside a
//! `flux-default` one at 100,000 objects).

// The test support modules, at the crate root (they refer to each other through `super::`).
#[path = "../tests/support/cluster.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod cluster;
#[path = "../tests/support/daemon.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod daemon;
#[path = "../tests/support/faults.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod faults;
#[path = "../tests/support/git_servers.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod git_servers;
#[path = "../tests/support/helm.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod helm;
#[path = "../tests/support/manifests.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod manifests;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;

use daemon::{github_push, Daemon, DaemonOptions, SYNC_TOKEN};
use faults::{ApiCallCounts, ApiProxy};
use git_servers::{GitDaemon, RepoHost, WorkTree};
use manifests::configmap_with;

const OBJECTS_PER_FILE: usize = 100;
const TEAMS: usize = 10;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// One ConfigMap of the generated repository, ~200 bytes of data.
fn configmap(ns: &str, i: usize, payload: &str) -> String {
    let team = format!("team-{:02}", (i / OBJECTS_PER_FILE) % TEAMS);
    configmap_with(
        ns,
        &format!("cm-{i:06}"),
        &[("app", "scale-bench"), ("team", &team)],
        &[("index", &i.to_string()), ("payload", payload)],
    )
}

fn payload(i: usize) -> String {
    format!("{i:08x}.").repeat(21)
}

fn file_of(i: usize) -> String {
    let f = i / OBJECTS_PER_FILE;
    format!("team-{:02}/part-{f:05}.yaml", f % TEAMS)
}

/// The text of file number `f` (objects `f * 100 ..`), with `changed` as the payload of object
/// `changed_index` if given.
fn file_text(ns: &str, size: usize, f: usize, changed: Option<(usize, &str)>) -> String {
    let mut text = String::new();
    for i in f * OBJECTS_PER_FILE..((f + 1) * OBJECTS_PER_FILE).min(size) {
        let p = match changed {
            Some((c, value)) if c == i => value.to_string(),
            _ => payload(i),
        };
        text.push_str("---\n");
        text.push_str(&configmap(ns, i, &p));
    }
    text
}

/// Writes the repository of `size` ConfigMaps in namespace `ns` under `root`.
fn write_repo(root: &Path, ns: &str, size: usize) {
    for f in 0..size.div_ceil(OBJECTS_PER_FILE) {
        let path = root.join(file_of(f * OBJECTS_PER_FILE));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, file_text(ns, size, f, None)).expect("write");
    }
}

/// One line of the result table.
struct Row {
    size: usize,
    tool: String,
    pass: String,
    wall: Duration,
    calls: Option<ApiCallCounts>,
    rss_kib: Option<u64>,
    note: String,
}

impl Row {
    fn markdown(&self) -> String {
        let (reads, writes, dry) = match &self.calls {
            Some(c) => (
                c.reads.to_string(),
                c.writes.to_string(),
                c.dry_runs.to_string(),
            ),
            None => ("–".into(), "–".into(), "–".into()),
        };
        format!(
            "| {} | {} | {} | {:.2} s | {reads} | {writes} | {dry} | {} | {} |",
            self.size,
            self.tool,
            self.pass,
            self.wall.as_secs_f64(),
            self.rss_kib.map_or("–".to_string(), |k| format!(
                "{:.0} MiB",
                k as f64 / 1024.0
            )),
            self.note
        )
    }
}

const TABLE_HEAD: &str = "| objects | tool | pass | wall | reads | writes | dry-runs | peak RSS | notes |\n|---:|---|---|---:|---:|---:|---:|---:|---|";

/// A finished one-shot process: wall time, peak RSS (GNU time's `%M`), calls, stdout.
struct Measured {
    wall: Duration,
    rss_kib: u64,
    calls: ApiCallCounts,
    stdout: String,
}

/// Runs `program args` under `/usr/bin/time -f %M`, through nothing but its own arguments (the
/// kubeconfig of the proxy is among them); panics with its stderr if it fails.
fn timed(proxy: &ApiProxy, program: &Path, args: &[String], keep_stdout: bool) -> Measured {
    let dir = tempfile::tempdir().expect("tempdir");
    let rss_file = dir.path().join("maxrss");
    let before = proxy.counts();
    let start = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&rss_file)
        .arg(program)
        .args(args)
        .env("WEFT_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(if keep_stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let wall = start.elapsed();
    let calls = proxy.counts().since(&before);
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}",
        program.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let rss_kib = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|t| t.lines().last().and_then(|l| l.trim().parse().ok()))
        .unwrap_or(0);
    proxy.clear_writes();
    Measured {
        wall,
        rss_kib,
        calls,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Samples a process's VmRSS every 200 ms; the peak since the last [`RssSampler::take_peak`].
struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                p.fetch_max(status_kib(pid, "VmRSS:"), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        RssSampler { peak, stop }
    }

    fn take_peak(&self) -> u64 {
        self.peak.swap(0, Ordering::SeqCst)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Deletes the namespace and waits until it is gone, so that the namespace controller's work
/// (deleting every object in it) does not run during the next tool's measurement.
async fn delete_and_wait(ns: cluster::TestNamespace, client: &kube::Client) {
    let name = ns.name().to_string();
    let start = Instant::now();
    ns.delete().await;
    let api: Api<Namespace> = Api::all(client.clone());
    while start.elapsed() < Duration::from_secs(3600) {
        if matches!(api.get_opt(&name).await, Ok(None)) {
            eprintln!("scale: namespace {name} deleted in {:.1?}", start.elapsed());
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("scale: namespace {name} still terminating after an hour; going on");
}

fn weft_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_weft"))
}

fn flux_helper() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/flux-ssa/ensure");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

struct Bench {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
    proxy: ApiProxy,
    proxy_kubeconfig: String,
    rows: Vec<Row>,
    webhook: Vec<(usize, Duration)>,
}

impl Bench {
    fn push(&mut self, row: Row) {
        println!("{}", row.markdown());
        self.rows.push(row);
    }

    fn namespace(&self, prefix: &str) -> cluster::TestNamespace {
        self.runtime.block_on(cluster::TestNamespace::new(prefix))
    }

    /// A fresh namespace named from `prefix`, and a directory holding the repository of `size`
    /// objects in it.
    fn repo_namespace(
        &self,
        prefix: &str,
        size: usize,
    ) -> (cluster::TestNamespace, tempfile::TempDir) {
        let ns = self.namespace(prefix);
        let dir = tempfile::tempdir().expect("tempdir");
        write_repo(dir.path(), ns.name(), size);
        (ns, dir)
    }

    fn drop_namespace(&self, ns: cluster::TestNamespace) {
        self.runtime.block_on(delete_and_wait(ns, &self.client));
    }

    fn render(&mut self, size: usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        write_repo(dir.path(), "scale-render", size);
        let args = vec!["render".to_string(), dir.path().display().to_string()];
        let m = timed(&self.proxy, weft_bin(), &args, false);
        self.push(Row {
            size,
            tool: "weft render".into(),
            pass: "–".into(),
            wall: m.wall,
            calls: None,
            rss_kib: Some(m.rss_kib),
            note: "no cluster".into(),
        });
    }

    fn sync(&mut self, size: usize) {
        let (ns, dir) = self.repo_namespace(&format!("scale-sync-{size}"), size);
        let args: Vec<String> = [
            "sync",
            &dir.path().display().to_string(),
            "--kubeconfig",
            &self.proxy_kubeconfig,
            "--weft-namespace",
            ns.name(),
            "--root-name",
            ns.name(),
            "--timeout",
            "30m",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for pass in ["first", "no-op"] {
            let m = timed(&self.proxy, weft_bin(), &args, true);
            // weft's own count of its calls, for a cross-check against the proxy's.
            let summary = m
                .stdout
                .lines()
                .rfind(|l| l.starts_with("synced"))
                .unwrap_or("")
                .to_string();
            eprintln!("scale: weft sync {size} {pass}: {summary}");
            self.push(Row {
                size,
                tool: "weft sync".into(),
                pass: pass.into(),
                wall: m.wall,
                calls: Some(m.calls),
                rss_kib: Some(m.rss_kib),
                note: String::new(),
            });
        }
        self.drop_namespace(ns);
    }

    fn flux(&mut self, size: usize, helper: &Path, mode: &str) {
        let (ns, dir) = self.repo_namespace(&format!("scale-flux-{mode}-{size}"), size);
        for pass in ["first", "no-op"] {
            self.flux_pass(size, helper, dir.path(), ns.name(), mode, pass, "");
        }
        self.drop_namespace(ns);
    }

    /// The default mode's no-op pass over objects the tuned mode applied first (the same engine,
    /// field manager and owner labels: the objects are as the default mode's own first pass
    /// leaves them). Its first pass is rate-limited to ≈ 100 minutes at 100,000 objects, and its
    /// no-op pass to ≈ 66 more; run as its own bench process beside `flux-default` (which then
    /// gives the first pass), the two fit in one working session.
    fn flux_default_noop(&mut self, size: usize, helper: &Path) {
        let (ns, dir) = self.repo_namespace(&format!("scale-flux-noop-{size}"), size);
        let note = "; objects applied first by the tuned mode";
        self.flux_pass(size, helper, dir.path(), ns.name(), "tuned", "first", "");
        self.flux_pass(
            size,
            helper,
            dir.path(),
            ns.name(),
            "default",
            "no-op",
            note,
        );
        self.drop_namespace(ns);
    }

    /// The Go helper's arguments: one pass of `mode` over the YAML of `dir`, its owner labels
    /// naming namespace `ns`, through the counting proxy.
    fn helper_args(&self, dir: &Path, ns: &str, mode: &str) -> Vec<String> {
        [
            "-kubeconfig",
            &self.proxy_kubeconfig,
            "-dir",
            &dir.display().to_string(),
            "-mode",
            mode,
            "-passes",
            "1",
            "-name",
            "scale",
            "-namespace",
            ns,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// One run of the Flux helper over the repository in `dir`, applied into `ns`.
    #[allow(clippy::too_many_arguments)]
    fn flux_pass(
        &mut self,
        size: usize,
        helper: &Path,
        dir: &Path,
        ns: &str,
        mode: &str,
        pass: &str,
        note: &str,
    ) {
        let m = timed(&self.proxy, helper, &self.helper_args(dir, ns, mode), true);
        let line: serde_json::Value = m
            .stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("flux-ssa printed no result: {}", m.stdout));
        let count = |k: &str| line[k].as_u64().unwrap_or(0);
        let (created, configured, unchanged) =
            (count("created"), count("configured"), count("unchanged"));
        assert_eq!(
            created + configured + unchanged,
            size as u64,
            "flux-ssa {mode}: {line}"
        );
        if pass == "no-op" {
            assert_eq!(unchanged, size as u64, "flux-ssa {mode} no-op: {line}");
        }
        self.push(Row {
            size,
            tool: tool_of_mode(mode),
            pass: pass.into(),
            wall: m.wall,
            calls: Some(m.calls),
            rss_kib: Some(m.rss_kib),
            note: format!(
                "{created} created, {configured} configured, {unchanged} unchanged; apply {:.2} s in-process{note}",
                line["wall_seconds"].as_f64().unwrap_or(0.0) - line["read_seconds"].as_f64().unwrap_or(0.0)
            ),
        });
    }

    /// The API server's own create rate for these objects: plain POSTs from 32 goroutines, no
    /// engine, no client-side rate limit (the helper's `raw` mode), into a fresh namespace; or,
    /// with `mode` `raw-apply`, its own rate of first server-side applies of them.
    /// `pass` names the row: `first`, or where it ran beside `weft sync` (see [`RAW_BEFORE`]).
    fn raw(&mut self, size: usize, helper: &Path, mode: &str, pass: &str) {
        let (ns, dir) = self.repo_namespace(&format!("scale-{mode}-{size}"), size);
        self.flux_pass(size, helper, dir.path(), ns.name(), mode, pass, "");
        self.drop_namespace(ns);
    }

    /// Before a size's measured tools: the same objects created once by the helper's `raw` mode
    /// and deleted, not measured. On a fresh control plane the first tool to write thousands of
    /// objects paid for the API server's and etcd's first growth (likely a fresh etcd database
    /// growing its file and mapping, and the API server its heap): the first `weft sync` of
    /// 20,000 objects took 27.6 s in one run, 17.8 and 19.3 s in two more on fresh control
    /// planes, and 17.1–17.5 s after a warm-up (docs/benchmarks.md).
    /// `WEFT_BENCH_WARMUP=0` skips it.
    fn warm_up(&mut self, size: usize, helper: &Path) {
        let (ns, dir) = self.repo_namespace(&format!("scale-warmup-{size}"), size);
        let args = self.helper_args(dir.path(), ns.name(), "raw");
        let m = timed(&self.proxy, helper, &args, true);
        assert!(
            m.stdout.contains("\"created\""),
            "the warm-up's raw creates printed no result: {}",
            m.stdout
        );
        self.drop_namespace(ns);
        println!(
            "warm-up: {size} raw creates in {:.2} s, deleted (not measured)",
            m.wall.as_secs_f64()
        );
    }

    /// The wall time of a row, if the run has it: with `WEFT_BENCH_ROUNDS` above 1, the median
    /// of its rounds.
    fn wall_of(&self, size: usize, tool: &str, pass: &str) -> Option<f64> {
        median(
            self.rows
                .iter()
                .filter(|r| r.size == size && r.tool == tool && r.pass == pass)
                .map(|r| r.wall.as_secs_f64())
                .collect(),
        )
    }

    /// A raw mode's wall time: the mean of its runs before and after `weft sync` when it ran on
    /// both sides, else its one run.
    fn raw_wall(&self, size: usize, mode: &str) -> Option<f64> {
        let tool = tool_of_mode(mode);
        match (
            self.wall_of(size, &tool, RAW_BEFORE),
            self.wall_of(size, &tool, RAW_AFTER),
        ) {
            (Some(before), Some(after)) => Some((before + after) / 2.0),
            _ => self.wall_of(size, &tool, "first"),
        }
    }

    /// The ratios issue 47 holds Weft to, for each size this run measured both sides of. Each
    /// is "higher is better": the share of the raw create rate a first pass reaches, and how
    /// many times faster than Flux's tuned engine the first and the no-op pass are.
    fn ratios(&self, sizes: &[usize]) -> Vec<Ratio> {
        let mut out = Vec::new();
        for &size in sizes {
            let sync_first = self.wall_of(size, "weft sync", "first");
            let sync_noop = self.wall_of(size, "weft sync", "no-op");
            let raw = self.raw_wall(size, "raw");
            let raw_apply = self.raw_wall(size, "raw-apply");
            let flux_first = self.wall_of(size, &tool_of_mode("tuned"), "first");
            let flux_noop = self.wall_of(size, &tool_of_mode("tuned"), "no-op");
            let mut add = |key: &'static str, fast: Option<f64>, slow: Option<f64>| {
                if let (Some(weft), Some(other)) = (fast, slow) {
                    out.push(Ratio {
                        key,
                        size,
                        value: other / weft,
                    });
                }
            };
            add(RATIO_KEYS[0], sync_first, raw);
            add(RATIO_KEYS[1], sync_first, flux_first);
            add(RATIO_KEYS[2], sync_noop, flux_noop);
            // What bounds the first: the API server's applies against its creates, and Weft
            // against bare applies (printed, not checked).
            add(SHOWN_KEYS[0], raw_apply, raw);
            add(SHOWN_KEYS[1], sync_first, raw_apply);
        }
        out
    }

    fn kubectl(&mut self, size: usize) {
        let (ns, dir) = self.repo_namespace(&format!("scale-kubectl-{size}"), size);
        let args: Vec<String> = [
            "--kubeconfig",
            &self.proxy_kubeconfig,
            "apply",
            "--server-side",
            "--field-manager",
            "bench-kubectl",
            "-R",
            "-f",
            &dir.path().display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for pass in ["first", "no-op"] {
            let m = timed(&self.proxy, Path::new("kubectl"), &args, false);
            self.push(Row {
                size,
                tool: "kubectl apply --server-side".into(),
                pass: pass.into(),
                wall: m.wall,
                calls: Some(m.calls),
                rss_kib: Some(m.rss_kib),
                note: String::new(),
            });
        }
        self.drop_namespace(ns);
    }

    /// The writes the proxy saw since it last forgot them, each `METHOD path` (no query) once
    /// with its count: which calls a pass wrote, for the notes.
    fn write_paths(&self) -> String {
        let mut seen: Vec<(String, usize)> = Vec::new();
        for (_, w) in self.proxy.writes() {
            let w = w.split('?').next().unwrap_or_default().to_string();
            match seen.iter_mut().find(|(p, _)| *p == w) {
                Some((_, n)) => *n += 1,
                None => seen.push((w, 1)),
            }
        }
        if seen.is_empty() {
            return "none".into();
        }
        seen.iter()
            .map(|(p, n)| format!("{p} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn daemon(&mut self, size: usize) {
        let ns = self.namespace(&format!("scale-daemon-{size}"));
        let host = RepoHost::new();
        let bare = host.create("config.git");
        let server = GitDaemon::start(&host);
        let work = WorkTree::new(&bare.display().to_string());
        write_repo(work.path(), ns.name(), size);
        work.commit("objects");
        work.push();
        let url = server.url("config.git");
        // Generous bounds: ~20 ms per object and pass is far beyond any measured pass.
        let bound = Duration::from_secs(120) + Duration::from_millis(20 * size as u64);

        let before = self.proxy.counts();
        let started = Instant::now();
        let d = Daemon::start(DaemonOptions {
            controllers: true,
            kubeconfig: Some(self.proxy.kubeconfig().to_path_buf()),
            // The log level of a deployed daemon (deploy/ sets none): the tests' `weft=debug`
            // writes a line per object of every pass, 100,000 lines a no-op pass.
            env: vec![("WEFT_LOG".into(), "info".into())],
            ..DaemonOptions::new(&url, ns.name())
        });
        let pid = d.pid();
        let sampler = RssSampler::start(pid);

        let s = self
            .runtime
            .block_on(d.wait_status("first pass", bound, |s| s["lastPass"]["pass"] == 1));
        assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
        let ready = started.elapsed();
        let calls = self.proxy.counts().since(&before);
        self.push(Row {
            size,
            tool: "weft run (daemon)".into(),
            pass: "first".into(),
            wall: secs(&s),
            calls: Some(calls),
            rss_kib: Some(sampler.take_peak()),
            note: format!(
                "process start → pass done {:.2} s; {} Lease + {} Event writes",
                ready.as_secs_f64(),
                calls.lease_writes,
                calls.event_writes
            ),
        });

        // A no-op pass, asked for on the sync endpoint (head unchanged).
        std::thread::sleep(Duration::from_secs(2));
        sampler.take_peak();
        self.proxy.clear_writes();
        let before = self.proxy.counts();
        let status = self.runtime.block_on(async {
            reqwest::Client::new()
                .post(format!("{}/api/v1/sync", d.hooks_base()))
                .bearer_auth(SYNC_TOKEN)
                .send()
                .await
                .expect("POST /api/v1/sync")
                .status()
                .as_u16()
        });
        assert_eq!(status, 202, "sync endpoint");
        let s = self
            .runtime
            .block_on(d.wait_status("no-op pass", bound, |s| {
                s["lastPass"]["pass"].as_u64() >= Some(2)
            }));
        assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
        assert_eq!(s["lastPass"]["summary"]["unchanged"], size as u64, "{s:#}");
        let calls = self.proxy.counts().since(&before);
        let peak = sampler.take_peak();
        std::thread::sleep(Duration::from_secs(3));
        let after = status_kib(pid, "VmRSS:");
        self.push(Row {
            size,
            tool: "weft run (daemon)".into(),
            pass: "no-op".into(),
            wall: secs(&s),
            calls: Some(calls),
            rss_kib: Some(peak),
            note: format!(
                "RSS 3 s after it {:.0} MiB; {} Lease + {} Event writes; writes: {}",
                after as f64 / 1024.0,
                calls.lease_writes,
                calls.event_writes,
                self.write_paths()
            ),
        });

        // One object changed: push, webhook, until the cluster has it.
        let changed = format!("changed-{size}");
        work.write(
            &file_of(0),
            file_text(ns.name(), size, 0, Some((0, &changed))),
        );
        work.commit("change one object");
        let before = self.proxy.counts();
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns.name());
        let start = Instant::now();
        work.push();
        let latency = self.runtime.block_on(async {
            let (status, body) = github_push(&d, "refs/heads/main", None).await;
            assert_eq!(status, 202, "{body}");
            loop {
                let value = api
                    .get_opt("cm-000000")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("payload").cloned());
                if value.as_deref() == Some(changed.as_str()) {
                    return start.elapsed();
                }
                assert!(
                    start.elapsed() < bound,
                    "the change never reached the cluster\n{}",
                    d.logs()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let s = self
            .runtime
            .block_on(d.wait_status("webhook pass", bound, |s| {
                s["lastPass"]["pass"].as_u64() >= Some(3)
            }));
        assert_eq!(s["lastPass"]["result"], "succeeded", "{s:#}");
        let calls = self.proxy.counts().since(&before);
        let hwm = status_kib(pid, "VmHWM:");
        self.push(Row {
            size,
            tool: "weft run (daemon)".into(),
            pass: "webhook, 1 object changed".into(),
            wall: secs(&s),
            calls: Some(calls),
            rss_kib: Some(sampler.take_peak()),
            note: format!(
                "push + webhook → in the cluster {:.2} s; VmHWM of the whole run {:.0} MiB",
                latency.as_secs_f64(),
                hwm as f64 / 1024.0
            ),
        });
        self.webhook.push((size, latency));
        drop(sampler);
        drop(d);
        drop(server);
        self.proxy.clear_writes();
        self.drop_namespace(ns);
    }
}

/// The pass column of a raw mode's run just before `weft sync`, and of its run just after.
const RAW_BEFORE: &str = "first, before weft sync";
const RAW_AFTER: &str = "first, after weft sync";

/// The row label of one mode of the Go helper.
fn tool_of_mode(mode: &str) -> String {
    match mode {
        "raw" => "raw creates (32 at once, no engine)".to_string(),
        "raw-apply" => "raw applies (32 at once, no engine)".to_string(),
        _ => format!("Flux ssa ({mode})"),
    }
}

/// The ratios the bench check knows, as docs/benchmarks.md's table "Ratios the bench check
/// holds" names them: `first/raw` (raw creates' wall / weft sync's first pass: the share of the
/// API server's create rate reached), `first/flux-tuned` and `noop/flux-tuned` (Flux tuned's
/// wall / weft sync's, first and no-op pass).
const RATIO_KEYS: [&str; 3] = ["first/raw", "first/flux-tuned", "noop/flux-tuned"];

/// Ratios printed beside them, not checked: `raw-apply/raw` (raw creates' wall / raw applies':
/// the share of the create rate the API server reaches when every write is an apply, the
/// ceiling of `first/raw` for a pass that applies) and `first/raw-apply` (raw applies' wall /
/// weft sync's first pass: the share of that ceiling Weft reaches).
const SHOWN_KEYS: [&str; 2] = ["raw-apply/raw", "first/raw-apply"];

/// How far below its recorded figure a ratio may fall before the bench check fails.
const RATIO_TOLERANCE: f64 = 0.8;

/// One measured ratio.
struct Ratio {
    key: &'static str,
    size: usize,
    value: f64,
}

/// The recorded ratios of docs/benchmarks.md: rows `| `KEY` | OBJECTS | RATIO | … |` of the
/// table that follows the line `<!-- bench-check ratios -->`, up to the first line that is not
/// a table row.
fn recorded_ratios(doc: &str) -> Vec<(String, usize, f64)> {
    let mut rows = Vec::new();
    let mut lines = doc
        .lines()
        .skip_while(|l| l.trim() != "<!-- bench-check ratios -->");
    lines.next();
    for line in lines.take_while(|l| l.trim_start().starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(key), Some(size), Some(value)) = (cells.get(1), cells.get(2), cells.get(3))
        else {
            continue;
        };
        let key = key.trim_matches('`');
        if let (true, Ok(size), Ok(value)) = (
            RATIO_KEYS.contains(&key),
            size.replace(',', "").parse::<usize>(),
            value.trim_end_matches('×').parse::<f64>(),
        ) {
            rows.push((key.to_string(), size, value));
        }
    }
    rows
}

/// The bench check (`WEFT_BENCH_CHECK=1`, `scripts/bench-check`): every recorded ratio of a size
/// this run measured must be measured, and at least `RATIO_TOLERANCE` of its recorded figure.
/// Returns the failures, one line each; a run that could check nothing is a failure too.
fn check_ratios(
    recorded: &[(String, usize, f64)],
    measured: &[Ratio],
    sizes: &[usize],
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (key, size, want) in recorded.iter().filter(|(_, size, _)| sizes.contains(size)) {
        checked += 1;
        match measured.iter().find(|r| r.key == key && r.size == *size) {
            None => failures.push(format!(
                "{key} at {size} objects is recorded ({want}) but this run did not measure it: run the tools it needs (WEFT_BENCH_TOOLS=sync,flux-tuned,raw)"
            )),
            Some(r) if r.value < want * RATIO_TOLERANCE => failures.push(format!(
                "{key} at {size} objects fell to {:.2} from the recorded {want} (more than {:.0}% below): find what slowed Weft down, or record the new figure in docs/benchmarks.md with the reason",
                r.value,
                (1.0 - RATIO_TOLERANCE) * 100.0
            )),
            Some(_) => {}
        }
    }
    if checked == 0 {
        failures.push(format!(
            "docs/benchmarks.md records no ratio for the sizes {sizes:?}: nothing was checked (see its table after `<!-- bench-check ratios -->`)"
        ));
    }
    failures
}

/// The median of `walls` (the mean of the middle two for an even count); `None` for none.
fn median(mut walls: Vec<f64>) -> Option<f64> {
    walls.sort_by(f64::total_cmp);
    let n = walls.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(walls[n / 2]),
        _ => Some((walls[n / 2 - 1] + walls[n / 2]) / 2.0),
    }
}

/// A pass's own duration from the daemon's status.
fn secs(status: &serde_json::Value) -> Duration {
    Duration::from_secs_f64(
        status["lastPass"]["durationSeconds"]
            .as_f64()
            .unwrap_or(0.0),
    )
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes no arguments.
    let sizes: Vec<usize> = std::env::var("WEFT_BENCH_SIZES")
        .unwrap_or_else(|_| "1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let kubectl_max = env_usize("WEFT_BENCH_KUBECTL_MAX", 1000);
    let flux_default_max = env_usize("WEFT_BENCH_FLUX_DEFAULT_MAX", 10_000);
    let tools: Vec<String> = std::env::var("WEFT_BENCH_TOOLS")
        .unwrap_or_else(|_| "render,sync,daemon,flux-default,flux-tuned,raw,kubectl".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let wants = |t: &str| tools.iter().any(|x| x == t);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime.block_on(cluster::client());
    if wants("daemon") {
        runtime.block_on(cluster::install_crds(&client));
    }
    let proxy = runtime.block_on(ApiProxy::start());
    let proxy_kubeconfig = proxy.kubeconfig().display().to_string();
    let helper = [
        "flux-default",
        "flux-tuned",
        "flux-default-noop",
        "raw",
        "raw-apply",
    ]
    .into_iter()
    .any(wants)
    .then(flux_helper);
    let mut bench = Bench {
        runtime,
        client,
        proxy,
        proxy_kubeconfig,
        rows: Vec::new(),
        webhook: Vec::new(),
    };

    let warm_up = std::env::var("WEFT_BENCH_WARMUP").map_or(true, |v| v != "0");
    let rounds = env_usize("WEFT_BENCH_ROUNDS", 1).max(1);
    println!("{TABLE_HEAD}");
    for &size in &sizes {
        // Only before tools whose first pass is compared side by side.
        if let (true, Some(helper)) = (warm_up && wants("sync"), &helper) {
            bench.warm_up(size, helper);
        }
        if wants("render") {
            bench.render(size);
        }
        // With `weft sync` measured, the raw modes run right before it and again right after it
        // (mirrored), and its ratios take their mean: a control plane slows as a run goes on
        // (etcd's history of the namespaces written and deleted), so a baseline measured only
        // after the heavier tools, as it once was, flattered Weft (docs/benchmarks.md, "Item 1:
        // the raw creates on both sides of weft sync").
        // The helper is built whenever a raw mode is asked for.
        let raw_modes: Vec<&str> = match &helper {
            Some(_) => ["raw", "raw-apply"]
                .into_iter()
                .filter(|m| wants(m))
                .collect(),
            None => Vec::new(),
        };
        let raw_runs = |bench: &mut Bench, modes: &[&str], pass: &str| {
            for mode in modes {
                bench.raw(size, helper.as_deref().expect("helper"), mode, pass);
            }
        };
        let bracket = wants("sync");
        if bracket {
            let mirrored: Vec<&str> = raw_modes.iter().rev().copied().collect();
            // Repeated with `WEFT_BENCH_ROUNDS`: at 2,000 objects one first pass took 1.64–2.87 s
            // from run to run on one control plane, and one round's ratio said little.
            for _ in 0..rounds {
                raw_runs(&mut bench, &raw_modes, RAW_BEFORE);
                bench.sync(size);
                raw_runs(&mut bench, &mirrored, RAW_AFTER);
            }
        }
        if wants("daemon") {
            bench.daemon(size);
        }
        if let Some(helper) = &helper {
            if wants("flux-default") && size <= flux_default_max {
                bench.flux(size, helper, "default");
            }
            if wants("flux-tuned") {
                bench.flux(size, helper, "tuned");
            }
            if wants("flux-default-noop") && size <= flux_default_max {
                bench.flux_default_noop(size, helper);
            }
        }
        if !bracket {
            raw_runs(&mut bench, &raw_modes, "first");
        }
        if wants("kubectl") && size <= kubectl_max {
            bench.kubectl(size);
        }
    }

    println!("\nscale: all results\n\n{TABLE_HEAD}");
    for r in &bench.rows {
        println!("{}", r.markdown());
    }
    for (size, latency) in &bench.webhook {
        println!(
            "\nweft run, {size} objects: push + webhook → change in the cluster {:.2} s",
            latency.as_secs_f64()
        );
    }
    let ratios = bench.ratios(&sizes);
    if !ratios.is_empty() {
        println!(
            "\nscale: ratios (higher is better)\n\n| ratio | objects | measured |\n|---|---:|---:|"
        );
        for r in &ratios {
            println!("| `{}` | {} | {:.2} |", r.key, r.size, r.value);
        }
    }
    if std::env::var("WEFT_BENCH_CHECK").is_ok_and(|v| v == "1") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/benchmarks.md");
        let doc = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let failures = check_ratios(&recorded_ratios(&doc), &ratios, &sizes);
        if !failures.is_empty() {
            eprintln!("\nbench check failed:");
            for f in &failures {
                eprintln!("- {f}");
            }
            std::process::exit(1);
        }
        println!(
            "\nbench check: every recorded ratio holds (within {:.0}%)",
            (1.0 - RATIO_TOLERANCE) * 100.0
        );
    }
}
