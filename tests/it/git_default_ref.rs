//! Without `--ref`, Weft follows the remote's HEAD, as `git clone` does: on real servers on
//! loopback (`git daemon`, `git http-backend` with a bearer token, where the ref is learnt by a
//! fetch rather than a listing) whose HEAD is `trunk`, not `main`; a moved HEAD is followed.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::git_servers::{git, GitDaemon, HttpAuth, HttpGitServer, RepoHost, WorkTree};
use weft::source::git::auth::SecretValue;
use weft::source::git::{FetchOutcome, GitRef, GitSource, GitSourceSpec};
use weft::source::Snapshot;

/// `config.git` with a `main` branch (holding `main.yaml`) and a `trunk` branch (holding
/// `trunk.yaml`), whose HEAD is `trunk`. Returns (host, work tree, trunk's commit).
fn repo_with_head_on_trunk() -> (RepoHost, WorkTree, String) {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().expect("utf-8 path"));
    work.write("main.yaml", config_map("from-main"));
    work.commit("on main");
    work.push();
    work.git(&["checkout", "-q", "-b", "trunk"]);
    work.remove("main.yaml");
    work.write("trunk.yaml", config_map("from-trunk"));
    let trunk = work.commit("on trunk");
    work.push_branch("trunk");
    git(&bare, &["symbolic-ref", "HEAD", "refs/heads/trunk"]);
    (host, work, trunk)
}

fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\n")
}

fn cache_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("git-default-ref-cache/{}-{n}", std::process::id()))
}

fn new_snapshot(outcome: FetchOutcome) -> Arc<Snapshot> {
    match outcome {
        FetchOutcome::New(s) => s,
        FetchOutcome::Unchanged => panic!("expected a new snapshot, got Unchanged"),
    }
}

fn files(s: &Snapshot) -> Vec<&str> {
    s.files.keys().map(String::as_str).collect()
}

#[test]
fn the_default_ref_is_the_remote_head_and_a_moved_head_is_followed() {
    let (host, work, trunk) = repo_with_head_on_trunk();
    let daemon = GitDaemon::start(&host);
    let spec = GitSourceSpec::new(daemon.url("config.git"), cache_dir());
    assert_eq!(spec.reference, GitRef::Head);
    let mut src = GitSource::new(spec).expect("source");
    let first = new_snapshot(src.fetch().expect("fetch"));
    assert_eq!(first.revision.as_deref(), Some(trunk.as_str()));
    assert_eq!(files(&first), vec!["trunk.yaml"]);
    assert_eq!(src.remote_head().expect("head").to_string(), trunk);
    assert_eq!(src.fetch().expect("poll"), FetchOutcome::Unchanged);
    // The branch name, for the daemon's webhook filter.
    assert_eq!(
        src.remote_default_branch().expect("symref").as_deref(),
        Some("trunk")
    );

    // The default branch is renamed on the server: the next poll follows it.
    work.git(&["checkout", "-q", "-b", "release"]);
    work.write("release.yaml", config_map("from-release"));
    let release = work.commit("on release");
    work.push_branch("release");
    git(
        &host.path("config.git"),
        &["symbolic-ref", "HEAD", "refs/heads/release"],
    );
    let moved = new_snapshot(src.fetch().expect("fetch after the move"));
    assert_eq!(moved.revision.as_deref(), Some(release.as_str()));
    assert!(
        files(&moved).contains(&"release.yaml"),
        "{:?}",
        files(&moved)
    );
}

#[test]
fn the_remote_head_is_fetched_when_refs_are_learnt_by_fetching() {
    // A bearer token makes Weft learn the ref by a fetch (libgit2 sends custom headers only then).
    let (host, _work, trunk) = repo_with_head_on_trunk();
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: None,
            bearer: Some("tok-0123456789".into()),
        },
    );
    let mut spec = GitSourceSpec::new(server.url("config.git"), cache_dir());
    spec.credentials.bearer_token = Some(SecretValue::new("tok-0123456789"));
    let mut src = GitSource::new(spec).expect("source");
    let snapshot = new_snapshot(src.fetch().expect("fetch"));
    assert_eq!(snapshot.revision.as_deref(), Some(trunk.as_str()));
    assert_eq!(files(&snapshot), vec!["trunk.yaml"]);
    assert_eq!(src.fetch().expect("poll"), FetchOutcome::Unchanged);
}

#[test]
fn weft_render_without_ref_renders_the_remote_head_and_ref_still_picks_a_branch() {
    let (host, _work, _) = repo_with_head_on_trunk();
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let render = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .arg("render")
            .arg("--repo")
            .arg(daemon.url("config.git"))
            .args(extra)
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .expect("weft runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let head = render(&[]);
    assert!(head.contains("name: from-trunk"), "{head}");
    assert!(!head.contains("name: from-main"), "{head}");
    let main = render(&["--ref", "main"]);
    assert!(main.contains("name: from-main"), "{main}");
    assert!(!main.contains("name: from-trunk"), "{main}");
}

#[test]
fn an_unborn_head_falls_back_to_main() {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().expect("utf-8 path"));
    work.write("main.yaml", config_map("from-main"));
    let main = work.commit("on main");
    work.push();
    git(&bare, &["symbolic-ref", "HEAD", "refs/heads/never-pushed"]);
    let daemon = GitDaemon::start(&host);
    let mut src =
        GitSource::new(GitSourceSpec::new(daemon.url("config.git"), cache_dir())).expect("source");
    let snapshot = new_snapshot(src.fetch().expect("fetch"));
    assert_eq!(snapshot.revision.as_deref(), Some(main.as_str()));
}

#[test]
fn a_remote_without_a_head_is_named_in_the_error() {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().expect("utf-8 path"));
    work.write("a.yaml", "a: 1\n");
    work.commit("one");
    work.push_branch("other");
    // HEAD names `main`, which was never pushed: the remote advertises no HEAD, and no `main`.
    let daemon = GitDaemon::start(&host);
    let err = GitSource::new(GitSourceSpec::new(daemon.url("config.git"), cache_dir()))
        .expect("source")
        .fetch()
        .expect_err("no HEAD");
    let text = err.to_string();
    assert!(text.contains("the remote's HEAD"), "{text}");
    assert!(text.contains("other"), "{text}");
}
