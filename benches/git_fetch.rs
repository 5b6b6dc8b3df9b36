//! Incremental fetch of one new commit from a repository of 10,000 files and 1,000 commits,
//! served by `git daemon` on loopback: Weft's git source (libgit2, cache started shallow) beside
//! the git CLI's `git fetch` (in a full clone and in a `--depth 1` clone) in the same run. Also the
//! cheap "remote head unchanged" poll beside `git ls-remote`.
//!
//! Every iteration first adds one commit (changing one file) to the served repository — outside
//! the timed part — then times only the fetch. Printed beside criterion's timings: objects and
//! bytes the last Weft fetch received.
//!
//! Run: `cargo bench --bench git_fetch`

#[path = "../tests/support/git_servers.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod git_servers;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use git_servers::{git, GitDaemon, RepoHost};
use weft::source::git::{read_tree_snapshot, FetchOutcome, GitSource, GitSourceSpec};
use weft::source::SnapshotLimits;

const FILES: usize = 10_000;
const COMMITS: usize = 1_000;

fn file_path(i: usize) -> String {
    format!("apps/team{:02}/app{:05}.yaml", i % 100, i)
}

fn file_content(i: usize, version: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-{i}\n  namespace: team{:02}\ndata:\n  version: \"{version}\"\n  padding: \"{}\"\n",
        i % 100,
        "x".repeat(200)
    )
}

/// Feed a fast-import stream to the bare repository.
fn fast_import(repo: &Path, stream: &[u8]) {
    let mut child = Command::new("git")
        .current_dir(repo)
        .args(["fast-import", "--quiet", "--force"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("git fast-import");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stream)
        .expect("write stream");
    assert!(
        child.wait().expect("fast-import").success(),
        "fast-import failed"
    );
}

fn commit_header(out: &mut Vec<u8>, n: usize, parent: Option<&str>) {
    let msg = format!("commit {n}");
    write!(
        out,
        "commit refs/heads/main\ncommitter Bench <bench@weft.invalid> {} +0000\ndata {}\n{}\n",
        1_700_000_000 + n,
        msg.len(),
        msg
    )
    .expect("write");
    if let Some(p) = parent {
        writeln!(out, "from {p}").expect("write");
    }
}

fn modify(out: &mut Vec<u8>, path: &str, content: &str) {
    write!(
        out,
        "M 100644 inline {path}\ndata {}\n{content}\n",
        content.len()
    )
    .expect("write");
}

/// A repository of `FILES` files and `COMMITS` commits (the first adds all files, each later one
/// changes three).
fn generate(repo: &Path) {
    let mut s = Vec::with_capacity(4 << 20);
    commit_header(&mut s, 0, None);
    for i in 0..FILES {
        modify(&mut s, &file_path(i), &file_content(i, 0));
    }
    for n in 1..COMMITS {
        commit_header(&mut s, n, None);
        for k in 0..3 {
            let i = (n * 7919 + k * 104_729) % FILES;
            modify(&mut s, &file_path(i), &file_content(i, n));
        }
    }
    fast_import(repo, &s);
    git(repo, &["gc", "-q", "--aggressive"]);
}

/// "Push" one commit changing one file, straight into the served repository.
fn add_commit(repo: &Path, n: usize) {
    let mut s = Vec::new();
    commit_header(&mut s, COMMITS + n, Some("refs/heads/main^0"));
    let i = n % FILES;
    modify(&mut s, &file_path(i), &file_content(i, COMMITS + n));
    fast_import(repo, &s);
}

fn bench(c: &mut Criterion) {
    let host = RepoHost::new();
    let repo = host.create("big.git");
    let started = Instant::now();
    generate(&repo);
    eprintln!(
        "generated {FILES} files x {COMMITS} commits in {:?}",
        started.elapsed()
    );
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("big.git");
    let work = tempfile::tempdir().expect("tempdir");

    // Weft: cache filled by a first (shallow) fetch.
    let mut spec = GitSourceSpec::new(&url, work.path().join("weft-cache"));
    spec.limits = SnapshotLimits::default();
    let mut source = GitSource::new(spec).expect("source");
    let started = Instant::now();
    source.fetch().expect("first fetch");
    eprintln!(
        "weft first (shallow) fetch + snapshot: {:?}, {} objects",
        started.elapsed(),
        source.last_transfer().received_objects
    );
    // git CLI: a full clone and a shallow clone.
    let started = Instant::now();
    git(work.path(), &["clone", "-q", "--bare", &url, "full.git"]);
    eprintln!("git clone (full): {:?}", started.elapsed());
    git(
        work.path(),
        &["clone", "-q", "--bare", "--depth", "1", &url, "shallow.git"],
    );
    let full = work.path().join("full.git");
    let shallow = work.path().join("shallow.git");

    let mut n = 0;
    let mut group = c.benchmark_group("git_fetch_one_new_commit_10k_files_1k_commits");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.warm_up_time(Duration::from_secs(1));

    let mut last_objects = 0;
    group.bench_function(
        "weft GitSource::fetch (libgit2, incremental + snapshot)",
        |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    add_commit(&repo, n);
                    let t = Instant::now();
                    let outcome = source.fetch().expect("fetch");
                    total += t.elapsed();
                    assert!(matches!(outcome, FetchOutcome::New(_)));
                    last_objects = source.last_transfer().received_objects;
                }
                total
            })
        },
    );
    eprintln!("weft: last incremental fetch received {last_objects} objects");
    for (name, clone) in [
        ("git fetch (full clone)", &full),
        ("git fetch (--depth 1 clone)", &shallow),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    add_commit(&repo, n);
                    let t = Instant::now();
                    git(
                        clone,
                        &["fetch", "-q", "origin", "+refs/heads/main:refs/heads/main"],
                    );
                    total += t.elapsed();
                }
                total
            })
        });
    }
    group.finish();

    // The part of the Weft figure above that is not network: reading the 10,000 files.
    let mut group = c.benchmark_group("git_snapshot_read_10k_files");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.warm_up_time(Duration::from_secs(1));
    let cache = git2::Repository::open_bare(source.cache_path()).expect("open cache");
    let revision = source.last_good_revision().expect("revision");
    let oid = git2::Oid::from_str(&revision).expect("oid");
    group.bench_function(
        "weft read_tree_snapshot (from the cache, no network)",
        |b| {
            b.iter(|| {
                let snap = read_tree_snapshot(&cache, oid, None, SnapshotLimits::default(), None)
                    .expect("read");
                assert_eq!(snap.files.len(), FILES);
            })
        },
    );
    group.finish();

    let mut group = c.benchmark_group("git_poll_unchanged_head");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    group.warm_up_time(Duration::from_secs(1));
    source.fetch().expect("catch up");
    group.bench_function("weft GitSource::fetch -> Unchanged", |b| {
        b.iter(|| assert_eq!(source.fetch().expect("fetch"), FetchOutcome::Unchanged))
    });
    group.bench_function("git ls-remote", |b| {
        b.iter(|| git(work.path(), &["ls-remote", &url, "refs/heads/main"]))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
