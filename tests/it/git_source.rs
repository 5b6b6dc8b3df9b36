//! The git source against real servers on loopback: `git daemon` (git://), `git http-backend`
//! behind an HTTP server with basic auth / bearer token (http://), and OpenSSH `sshd` (ssh://
//! and scp-style). Each test starts its own servers and repositories.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use support::git_servers::{
    git, GitDaemon, HttpAuth, HttpGitServer, RepoHost, SshServer, WorkTree,
};
use weft::source::git::auth::{Credentials, SecretValue};
use weft::source::git::{FetchOutcome, GitError, GitRef, GitSource, GitSourceSpec, HistoryRewrite};
use weft::source::{Snapshot, SnapshotLimits};

/// A served repository `config.git` with one commit on `main`; returns (host, work tree, sha).
fn repo_with_commit(files: &[(&str, &str)]) -> (RepoHost, WorkTree, String) {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    for (p, c) in files {
        work.write(p, c);
    }
    let sha = work.commit("first");
    work.push();
    (host, work, sha)
}

/// A fresh cache directory under cargo's per-target scratch directory.
fn cache_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("git-source-cache/{}-{n}", std::process::id()))
}

fn spec(url: &str, cache: &Path) -> GitSourceSpec {
    GitSourceSpec::new(url, cache)
}

fn new_snapshot(outcome: FetchOutcome) -> Arc<Snapshot> {
    match outcome {
        FetchOutcome::New(s) => s,
        FetchOutcome::Unchanged => panic!("expected a new snapshot, got Unchanged"),
    }
}

fn text(s: &Snapshot, path: &str) -> String {
    String::from_utf8(
        s.files
            .get(path)
            .unwrap_or_else(|| panic!("{path} not in {:?}", s.files.keys()))
            .clone(),
    )
    .unwrap()
}

/// A source does not hold the files it read: once the snapshot is let go (a daemon lets go of
/// a root's between passes), the source reads its commit again from the cache, and a cache that
/// lost the commit makes the next fetch read it anew instead of answering `Unchanged`.
#[test]
fn an_unheld_snapshot_is_read_again_and_a_lost_cache_is_fetched_anew() {
    let (host, _work, first) = repo_with_commit(&[("a.yaml", "a: 1\n"), ("b/c.yaml", "c: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let mut src = GitSource::new(spec(&daemon.url("config.git"), &cache)).unwrap();
    let snap = new_snapshot(src.fetch().unwrap());
    let weak = Arc::downgrade(&snap);
    drop(snap);
    assert!(
        weak.upgrade().is_none(),
        "the source held the snapshot's files"
    );
    assert_eq!(src.last_good_revision().as_deref(), Some(first.as_str()));
    let again = src.last_good().expect("read again from the cache");
    assert_eq!(again.revision.as_deref(), Some(first.as_str()));
    assert_eq!(text(&again, "a.yaml"), "a: 1\n");
    assert_eq!(text(&again, "b/c.yaml"), "c: 1\n");
    assert_eq!(again.files.len(), 2);
    // While it is held, the same snapshot is given, not read again.
    assert!(Arc::ptr_eq(&src.last_good().unwrap(), &again));
    assert_eq!(src.fetch().unwrap(), FetchOutcome::Unchanged);
    drop(again);

    std::fs::remove_dir_all(src.cache_path()).unwrap();
    let err = src.read_last_good().expect_err("the cache lost the commit");
    assert!(!err.to_string().is_empty());
    assert_eq!(src.last_good_revision(), None);
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
    assert_eq!(text(&snap, "a.yaml"), "a: 1\n");
}

/// What changed between two fetched commits, from their trees alone (the daemon's early apply
/// of a push reads no file of the previous revision again): files added or modified under
/// `--path`, not deleted ones nor dot-files; whether one lay in a chart's directory before; and
/// nothing past the bound.
#[test]
fn changed_files_between_two_commits_come_from_their_trees() {
    let (host, work, first) = repo_with_commit(&[
        ("site/a.yaml", "a: 1\n"),
        ("site/b.yaml", "b: 1\n"),
        ("site/chart/Chart.yaml", "name: c\n"),
        ("site/chart/values.yaml", "v: 1\n"),
        ("other/x.yaml", "x: 1\n"),
    ]);
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let mut at_site = spec(&daemon.url("config.git"), &cache);
    at_site.path = Some("site".into());
    let mut src = GitSource::new(at_site).unwrap();
    new_snapshot(src.fetch().unwrap());
    work.write("site/a.yaml", "a: 2\n")
        .write("site/new.yaml", "n: 1\n")
        .write("site/.github/ci.yaml", "on: push\n")
        .write("other/x.yaml", "x: 2\n")
        .remove("site/b.yaml");
    let second = work.commit("second");
    work.push();
    new_snapshot(src.fetch().unwrap());
    let changed = src
        .changed_files(&first, &second, 20)
        .unwrap()
        .expect("few");
    assert_eq!(
        changed.files.iter().map(String::as_str).collect::<Vec<_>>(),
        ["a.yaml", "new.yaml"]
    );
    assert!(!changed.in_chart);
    assert_eq!(src.changed_files(&first, &second, 1).unwrap(), None);

    work.write("site/chart/values.yaml", "v: 2\n");
    let third = work.commit("third");
    work.push();
    new_snapshot(src.fetch().unwrap());
    let changed = src
        .changed_files(&second, &third, 20)
        .unwrap()
        .expect("one");
    assert_eq!(
        changed.files.iter().map(String::as_str).collect::<Vec<_>>(),
        ["chart/values.yaml"]
    );
    assert!(changed.in_chart, "the file is in a chart's directory");
}

#[test]
fn git_daemon_fetch_then_push_then_fetch_again_is_incremental() {
    let mut files: Vec<(String, String)> = (0..50)
        .map(|i| {
            (
                format!("apps/app{i}.yaml"),
                format!("kind: ConfigMap # {i}\n"),
            )
        })
        .collect();
    files.push(("README.md".into(), "hello\n".into()));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let (host, work, first) = repo_with_commit(&refs);
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let mut src = GitSource::new(spec(&daemon.url("config.git"), &cache)).unwrap();

    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
    assert_eq!(snap.files.len(), 51);
    assert_eq!(text(&snap, "apps/app7.yaml"), "kind: ConfigMap # 7\n");
    let t = src.last_transfer();
    assert!(
        t.fetched && t.shallow,
        "first fetch into an empty cache is shallow: {t:?}"
    );
    assert_eq!(src.remote_head().unwrap().to_string(), first);

    // Unchanged remote: no fetch at all.
    assert_eq!(src.fetch().unwrap(), FetchOutcome::Unchanged);
    assert!(!src.last_transfer().fetched);

    // One new commit changing one file: only that commit's objects come over the wire.
    work.write("apps/app7.yaml", "kind: ConfigMap # seven\n");
    let second = work.commit("second");
    work.push();
    assert_eq!(src.remote_head().unwrap().to_string(), second);
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(second.as_str()));
    assert_eq!(text(&snap, "apps/app7.yaml"), "kind: ConfigMap # seven\n");
    assert_eq!(snap.files.len(), 51);
    let t = src.last_transfer();
    assert!(t.fetched && !t.shallow, "{t:?}");
    // commit + root tree + apps tree + one blob
    assert!(
        t.received_objects <= 4,
        "an incremental fetch received {} objects",
        t.received_objects
    );
    assert!(
        t.received_bytes > 0 && t.received_bytes < 2000,
        "an incremental fetch received {} bytes",
        t.received_bytes
    );
    assert_eq!(
        src.last_good().unwrap().revision.as_deref(),
        Some(second.as_str())
    );
    // The source keeps the snapshot it returned, not a copy of every file.
    assert!(Arc::ptr_eq(&src.last_good().unwrap(), &snap));
    // What changed between the two commits, from their trees alone.
    let changed = src
        .changed_files(&first, &second, 20)
        .unwrap()
        .expect("one file");
    assert_eq!(
        changed.files.into_iter().collect::<Vec<_>>(),
        ["apps/app7.yaml"]
    );
    assert!(!changed.in_chart);

    // Pushing over git:// itself works the same way.
    let pusher = WorkTree::new(&daemon.url("config.git"));
    pusher.git(&["fetch", "-q", "origin", "main"]);
    pusher.git(&["reset", "-q", "--hard", "FETCH_HEAD"]);
    pusher.write("new.yaml", "a: 1\n");
    let third = pusher.commit("third, pushed over git://");
    pusher.push();
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(third.as_str()));
    assert_eq!(text(&snap, "new.yaml"), "a: 1\n");
}

#[test]
fn a_new_source_on_an_existing_cache_reads_without_downloading() {
    let (host, _work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let cache = tempfile::tempdir().unwrap();
    new_snapshot(
        GitSource::new(spec(&daemon.url("config.git"), cache.path()))
            .unwrap()
            .fetch()
            .unwrap(),
    );
    // A restarted process: no last good snapshot in memory, but the commit is in the cache.
    let mut again = GitSource::new(spec(&daemon.url("config.git"), cache.path())).unwrap();
    let snap = new_snapshot(again.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
    assert!(!again.last_transfer().fetched);
}

#[test]
fn http_basic_auth_works_and_a_wrong_password_is_refused_without_leaking_it() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("alice".into(), "correct-horse".into())),
            bearer: None,
        },
    );
    let url = server.url("config.git");
    let cache = tempfile::tempdir().unwrap();

    let mut good = spec(&url, cache.path());
    good.credentials = Credentials {
        username: Some("alice".into()),
        password: Some(SecretValue::new("correct-horse")),
        ..Default::default()
    };
    let mut src = GitSource::new(good).unwrap();
    assert_eq!(
        new_snapshot(src.fetch().unwrap()).revision.as_deref(),
        Some(first.as_str())
    );

    // The remote head is unchanged: only the ref listing is requested, no upload-pack.
    server.clear_requests();
    assert_eq!(src.fetch().unwrap(), FetchOutcome::Unchanged);
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.starts_with("GET /config.git/info/refs")),
        "{requests:?}"
    );
    assert!(!requests.is_empty());

    // Push and fetch again over HTTP.
    work.write("b.yaml", "b: 2\n");
    let second = work.commit("second");
    work.push();
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(second.as_str()));
    assert!(server
        .requests()
        .iter()
        .any(|r| r == "POST /config.git/git-upload-pack"));

    // Wrong password: an authentication error that never shows the password.
    let mut bad = spec(&url, &cache_dir());
    bad.credentials = Credentials {
        username: Some("alice".into()),
        password: Some(SecretValue::new("wrong-battery-staple")),
        ..Default::default()
    };
    let err = GitSource::new(bad).unwrap().fetch().unwrap_err();
    assert!(matches!(err, GitError::Authentication { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("authentication to http://127.0.0.1"), "{msg}");
    assert!(msg.contains("refused the username/password"), "{msg}");
    assert!(
        !msg.contains("wrong-battery-staple")
            && !format!("{err:?}").contains("wrong-battery-staple"),
        "{msg}"
    );

    // No credentials at all.
    let err = GitSource::new(spec(&url, &cache_dir()))
        .unwrap()
        .fetch()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("wants a username and password and none are configured"),
        "{err}"
    );
}

#[test]
fn a_password_inside_the_url_is_used_and_redacted_everywhere() {
    let (host, _work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("bob".into(), "s3cr3t-pw".into())),
            bearer: None,
        },
    );
    let good_url = format!("http://bob:s3cr3t-pw@127.0.0.1:{}/config.git", server.port);
    let mut src = GitSource::new(spec(&good_url, &cache_dir())).unwrap();
    assert_eq!(
        src.display_url(),
        format!("http://bob:***@127.0.0.1:{}/config.git", server.port)
    );
    assert!(!format!("{src:?}").contains("s3cr3t-pw"));
    assert_eq!(
        new_snapshot(src.fetch().unwrap()).revision.as_deref(),
        Some(first.as_str())
    );

    let bad_url = format!(
        "http://bob:hunter2-leak@127.0.0.1:{}/config.git",
        server.port
    );
    let err = GitSource::new(spec(&bad_url, &cache_dir()))
        .unwrap()
        .fetch()
        .unwrap_err();
    assert!(matches!(err, GitError::Authentication { .. }), "{err:?}");
    assert!(
        err.to_string().contains("http://bob:***@127.0.0.1"),
        "{err}"
    );
    assert!(!err.to_string().contains("hunter2-leak"), "{err}");

    // Unreachable, with the password in the URL: still redacted.
    let down = format!(
        "http://bob:hunter2-leak@127.0.0.1:{}/config.git",
        support::git_servers::free_port()
    );
    let err = GitSource::new(spec(&down, &cache_dir()))
        .unwrap()
        .fetch()
        .unwrap_err();
    assert!(matches!(err, GitError::Unreachable { .. }), "{err:?}");
    assert!(!err.to_string().contains("hunter2-leak"), "{err}");
}

#[test]
fn http_bearer_token() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: None,
            bearer: Some("tok-0123456789".into()),
        },
    );
    let mut s = spec(&server.url("config.git"), &cache_dir());
    s.credentials.bearer_token = Some(SecretValue::new("tok-0123456789"));
    let mut src = GitSource::new(s).unwrap();
    assert_eq!(
        new_snapshot(src.fetch().unwrap()).revision.as_deref(),
        Some(first.as_str())
    );
    assert_eq!(src.fetch().unwrap(), FetchOutcome::Unchanged);
    assert_eq!(src.last_transfer().received_objects, 0);
    work.write("b.yaml", "b\n");
    let second = work.commit("second");
    work.push();
    assert_eq!(src.remote_head().unwrap().to_string(), second);
    assert_eq!(
        new_snapshot(src.fetch().unwrap()).revision.as_deref(),
        Some(second.as_str())
    );

    let mut bad = spec(&server.url("config.git"), &cache_dir());
    bad.credentials.bearer_token = Some(SecretValue::new("tok-wrong-wrong"));
    let err = GitSource::new(bad).unwrap().fetch().unwrap_err();
    assert!(
        err.to_string().contains("refused the bearer token"),
        "{err}"
    );
    assert!(!err.to_string().contains("tok-wrong-wrong"), "{err}");
}

fn ssh_credentials(key: String, known_hosts: String) -> Credentials {
    Credentials {
        identity: Some(SecretValue::new(key)),
        known_hosts: Some(known_hosts),
        ..Default::default()
    }
}

#[test]
fn ssh_with_key_and_known_hosts_fetches_new_commits() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let server = SshServer::start();
    let bare = host.path("config.git");

    let mut s = spec(&server.url(&bare), &cache_dir());
    s.credentials = ssh_credentials(server.user_key(), server.known_hosts());
    let mut src = GitSource::new(s).unwrap();
    let snap = new_snapshot(
        src.fetch()
            .unwrap_or_else(|e| panic!("{e}\nsshd log:\n{}", server.log())),
    );
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
    assert_eq!(src.fetch().unwrap(), FetchOutcome::Unchanged);

    work.write("a.yaml", "a: 2\n");
    let second = work.commit("second");
    work.push();
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(second.as_str()));
    assert_eq!(text(&snap, "a.yaml"), "a: 2\n");

    // The key is revoked on the server: authentication fails, the last good snapshot stays.
    server.accept_only_other_key();
    work.write("a.yaml", "a: 3\n");
    let third = work.commit("third");
    work.push();
    let err = src.fetch().unwrap_err();
    assert!(matches!(err, GitError::Authentication { .. }), "{err:?}");
    assert_eq!(
        src.last_good().unwrap().revision.as_deref(),
        Some(second.as_str())
    );
    assert_eq!(text(&src.last_good().unwrap(), "a.yaml"), "a: 2\n");
    server.accept_user_key();

    // scp-style address of the same repository.
    let mut s = spec(&server.scp_url(&bare), &cache_dir());
    s.credentials = ssh_credentials(server.user_key(), server.known_hosts());
    let snap = new_snapshot(GitSource::new(s).unwrap().fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(third.as_str()));
    // And the original source recovers with the key accepted again.
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(third.as_str()));
}

#[test]
fn ssh_wrong_key_and_wrong_host_key_are_refused() {
    let (host, _work, _) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let server = SshServer::start();
    let url = server.url(&host.path("config.git"));

    let mut s = spec(&url, &cache_dir());
    s.credentials = ssh_credentials(server.other_key(), server.known_hosts());
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert!(matches!(err, GitError::Authentication { .. }), "{err:?}");
    assert!(err.to_string().contains("refused the SSH key"), "{err}");
    assert!(!err.to_string().contains("PRIVATE KEY"), "{err}");

    let mut s = spec(&url, &cache_dir());
    s.credentials = ssh_credentials(server.user_key(), server.wrong_known_hosts());
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert!(matches!(err, GitError::HostKey { .. }), "{err:?}");
    assert!(
        err.to_string().contains("does not match known_hosts"),
        "{err}"
    );

    let mut s = spec(&url, &cache_dir());
    s.credentials = ssh_credentials(server.user_key(), "[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n".into());
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "no known_hosts entry for [127.0.0.1]:{}",
            server.port
        )),
        "{err}"
    );
}

#[test]
fn unreachable_server_keeps_the_last_good_snapshot() {
    let (host, _work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");
    let mut src = GitSource::new(spec(&url, &cache_dir())).unwrap();
    new_snapshot(src.fetch().unwrap());
    drop(daemon);
    let err = src.fetch().unwrap_err();
    assert!(matches!(err, GitError::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!("cannot reach {url}")),
        "{err}"
    );
    assert_eq!(
        src.last_good().unwrap().revision.as_deref(),
        Some(first.as_str())
    );
    assert!(src.remote_head().is_err());
}

#[test]
fn missing_branch_and_tag_are_clear_errors() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    work.push_branch("dev");
    let daemon = GitDaemon::start(&host);
    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.reference = GitRef::Branch("release".into());
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "branch `release` not found in {} (its branches: dev, main)",
            daemon.url("config.git")
        )
    );

    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.reference = GitRef::Tag("v9".into());
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert!(
        err.to_string().starts_with("tag `v9` not found in git://"),
        "{err}"
    );

    // A branch deleted after a good fetch: error, last good kept.
    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.reference = GitRef::Branch("dev".into());
    let mut src = GitSource::new(s).unwrap();
    new_snapshot(src.fetch().unwrap());
    work.git(&["push", "-q", "origin", ":refs/heads/dev"]);
    let err = src.fetch().unwrap_err();
    assert!(matches!(err, GitError::MissingRef { .. }), "{err:?}");
    assert_eq!(
        src.last_good().unwrap().revision.as_deref(),
        Some(first.as_str())
    );
}

#[test]
fn tags_commits_and_names() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "v: 1\n")]);
    work.git(&["tag", "-a", "-m", "release 1", "v1"]);
    work.write("a.yaml", "v: 2\n");
    let second = work.commit("second");
    work.git(&["tag", "light"]);
    work.write("a.yaml", "v: 3\n");
    let third = work.commit("third");
    work.push();
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");

    let fetch = |r: GitRef| {
        let mut s = spec(&url, &cache_dir());
        s.reference = r;
        new_snapshot(
            GitSource::new(s)
                .unwrap()
                .fetch()
                .unwrap_or_else(|e| panic!("{e}")),
        )
    };
    let annotated = fetch(GitRef::Tag("v1".into()));
    assert_eq!(
        annotated.revision.as_deref(),
        Some(first.as_str()),
        "an annotated tag is peeled to its commit"
    );
    assert_eq!(text(&annotated, "a.yaml"), "v: 1\n");
    assert_eq!(
        fetch(GitRef::parse("light")).revision.as_deref(),
        Some(second.as_str())
    );
    assert_eq!(
        fetch(GitRef::parse(&second)).revision.as_deref(),
        Some(second.as_str())
    );
    assert_eq!(text(&fetch(GitRef::parse(&first)), "a.yaml"), "v: 1\n");
    assert_eq!(
        fetch(GitRef::parse("main")).revision.as_deref(),
        Some(third.as_str())
    );

    let mut s = spec(&url, &cache_dir());
    s.reference = GitRef::parse("00000000000000000000000000000000000000aa");
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert!(
        err.to_string()
            .contains("commit 00000000000000000000000000000000000000aa not found"),
        "{err}"
    );
}

#[test]
fn force_pushed_branch_is_followed_or_refused_by_policy() {
    let (host, work, _first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    work.write("a.yaml", "a: 2\n");
    let second = work.commit("second");
    work.push();
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");
    let mut follow = GitSource::new(spec(&url, &cache_dir())).unwrap();
    let mut refuse_spec = spec(&url, &cache_dir());
    refuse_spec.on_history_rewrite = HistoryRewrite::Refuse;
    let mut refuse = GitSource::new(refuse_spec).unwrap();
    new_snapshot(follow.fetch().unwrap());
    new_snapshot(refuse.fetch().unwrap());

    // Rewrite history: drop `second`, commit something else, force-push.
    work.git(&["reset", "-q", "--hard", "HEAD~1"]);
    work.write("a.yaml", "a: rewritten\n");
    let rewritten = work.commit("rewritten");
    work.force_push();

    let snap = new_snapshot(follow.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(rewritten.as_str()));
    assert_eq!(text(&snap, "a.yaml"), "a: rewritten\n");

    let err = refuse.fetch().unwrap_err();
    assert!(matches!(err, GitError::HistoryRewritten { .. }), "{err:?}");
    assert!(err.to_string().contains("was force-pushed"), "{err}");
    assert!(err.to_string().contains(&second), "{err}");
    assert_eq!(
        refuse.last_good().unwrap().revision.as_deref(),
        Some(second.as_str())
    );
}

/// Overwrite every file under `dir` with garbage.
fn trash(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            trash(&p);
        } else {
            let mut perms = std::fs::metadata(&p).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&p, perms).unwrap();
            std::fs::write(&p, b"garbage").unwrap();
        }
    }
}

#[test]
fn corrupted_cache_is_detected_and_cloned_again() {
    let (host, work, _) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");
    let cache = tempfile::tempdir().unwrap();
    let mut src = GitSource::new(spec(&url, cache.path())).unwrap();
    new_snapshot(src.fetch().unwrap());

    // Damaged objects: the next fetch notices, deletes the cache and clones again.
    trash(&src.cache_path().join("objects"));
    work.write("a.yaml", "a: 2\n");
    let second = work.commit("second");
    work.push();
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(second.as_str()));
    assert_eq!(text(&snap, "a.yaml"), "a: 2\n");
    assert!(src.last_transfer().shallow, "cloned again from scratch");

    // A cache that is not a repository at all (e.g. a crash while creating it).
    let mut restarted = GitSource::new(spec(&url, cache.path())).unwrap();
    trash(restarted.cache_path());
    let snap = new_snapshot(restarted.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(second.as_str()));

    // Damaged cache and the server gone: a clear error and the last good snapshot stays.
    trash(&restarted.cache_path().join("objects"));
    work.write("a.yaml", "a: 3\n");
    work.commit("third");
    work.push();
    // The ref listing needs the server; stop it after the listing would see a new head.
    drop(daemon);
    let err = restarted.fetch().unwrap_err();
    assert!(
        matches!(
            err,
            GitError::Unreachable { .. } | GitError::CacheDamaged { .. }
        ),
        "{err:?}"
    );
    assert_eq!(
        restarted.last_good().unwrap().revision.as_deref(),
        Some(second.as_str())
    );
    assert_eq!(text(&restarted.last_good().unwrap(), "a.yaml"), "a: 2\n");
}

#[test]
fn path_selects_a_subdirectory() {
    let (host, _work, _) = repo_with_commit(&[
        ("clusters/prod/a.yaml", "a\n"),
        ("clusters/dev/b.yaml", "b\n"),
        ("top.yaml", "t\n"),
    ]);
    let daemon = GitDaemon::start(&host);
    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.path = Some("clusters/prod".into());
    let snap = new_snapshot(GitSource::new(s).unwrap().fetch().unwrap());
    assert_eq!(snap.files.keys().collect::<Vec<_>>(), vec!["a.yaml"]);

    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.path = Some("clusters/staging".into());
    let err = GitSource::new(s).unwrap().fetch().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--path `clusters/staging` does not exist at commit"),
        "{err}"
    );

    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.path = Some("clusters/../..".into());
    let err = GitSource::new(s).unwrap_err();
    assert!(err.to_string().contains("no `..`"), "{err}");
}

#[test]
fn symlinks_inside_are_followed_and_symlinks_leaving_are_refused() {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    work.write("base/real.yaml", "r: 1\n");
    work.symlink("app/link.yaml", "../base/real.yaml");
    work.symlink("app/dir-link", "../base");
    let ok = work.commit("links inside");
    work.push();
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");
    let mut src = GitSource::new(spec(&url, &cache_dir())).unwrap();
    let snap = new_snapshot(src.fetch().unwrap());
    assert_eq!(text(&snap, "app/link.yaml"), "r: 1\n");
    assert_eq!(
        snap.files.keys().collect::<Vec<_>>(),
        vec!["app/link.yaml", "base/real.yaml"]
    );

    for (target, what) in [
        ("../../../etc/passwd", "relative"),
        ("/etc/passwd", "absolute"),
    ] {
        work.symlink("app/escape.yaml", target);
        work.commit(&format!("{what} escape"));
        work.push();
        let err = src.fetch().unwrap_err();
        assert!(matches!(err, GitError::SymlinkEscapes { .. }), "{err:?}");
        assert!(
            err.to_string().starts_with(&format!(
                "app/escape.yaml: symlink points outside the repository (to `{target}`)"
            )),
            "{err}"
        );
        assert_eq!(
            src.last_good().unwrap().revision.as_deref(),
            Some(ok.as_str())
        );
        std::fs::remove_file(work.path().join("app/escape.yaml")).unwrap();
    }
}

#[test]
fn a_tree_entry_named_dotdot_is_refused() {
    let (host, _work, _) = repo_with_commit(&[("a.yaml", "a\n")]);
    let bare = host.path("config.git");
    // Craft a tree git itself would never write: an entry named `..`.
    let blob = hash_object(&bare, &["-w", "--stdin"], b"evil: true\n");
    let mut inner = Vec::new();
    inner.extend_from_slice(b"100644 x.yaml\0");
    inner.extend_from_slice(&hex_to_bytes(&blob));
    let inner_tree = hash_object(
        &bare,
        &["-w", "-t", "tree", "--literally", "--stdin"],
        &inner,
    );
    let mut root = Vec::new();
    root.extend_from_slice(b"40000 ..\0");
    root.extend_from_slice(&hex_to_bytes(&inner_tree));
    let root_tree = hash_object(
        &bare,
        &["-w", "-t", "tree", "--literally", "--stdin"],
        &root,
    );
    let commit = git(&bare, &["commit-tree", &root_tree, "-m", "evil"]);
    git(&bare, &["update-ref", "refs/heads/main", &commit]);

    let daemon = GitDaemon::start(&host);
    let err = GitSource::new(spec(&daemon.url("config.git"), &cache_dir()))
        .unwrap()
        .fetch()
        .unwrap_err();
    assert!(matches!(err, GitError::UnsafePath { .. }), "{err:?}");
    assert!(err.to_string().starts_with(".."), "{err}");
    assert!(err.to_string().contains("path component `..`"), "{err}");
}

fn hash_object(repo: &Path, args: &[&str], input: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .current_dir(repo)
        .arg("hash-object")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn hex_to_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn repositories_over_limits_are_refused() {
    let (host, _work, _) = repo_with_commit(&[
        ("a.yaml", "a\n"),
        ("b.yaml", "b\n"),
        ("big/blob.yaml", &"x".repeat(5000)),
    ]);
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");
    let with = |limits: SnapshotLimits| {
        let mut s = spec(&url, &cache_dir());
        s.limits = limits;
        GitSource::new(s).unwrap().fetch().unwrap_err().to_string()
    };
    let err = with(SnapshotLimits {
        max_files: 2,
        ..Default::default()
    });
    assert!(
        err.starts_with("repository has more than 2 files at commit"),
        "{err}"
    );
    let err = with(SnapshotLimits {
        max_file_bytes: 4096,
        ..Default::default()
    });
    assert!(
        err.starts_with("big/blob.yaml: file is 5000 bytes, over the limit of 4096 bytes"),
        "{err}"
    );
    let err = with(SnapshotLimits {
        max_total_bytes: 3000,
        ..Default::default()
    });
    assert!(
        err.starts_with("repository is larger than 3000 bytes in total"),
        "{err}"
    );
}

#[test]
fn file_urls_and_local_repository_paths() {
    let (host, _work, first) = repo_with_commit(&[("a.yaml", "a\n")]);
    let bare = host.path("config.git");
    for url in [
        format!("file://{}", bare.display()),
        bare.display().to_string(),
    ] {
        let mut src = GitSource::new(spec(&url, &cache_dir())).unwrap();
        let snap = new_snapshot(src.fetch().unwrap_or_else(|e| panic!("{url}: {e}")));
        assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
        assert_eq!(src.fetch().unwrap(), FetchOutcome::Unchanged);
    }
}

#[test]
fn credentials_from_a_directory_work_for_ssh() {
    let (host, _work, first) = repo_with_commit(&[("a.yaml", "a\n")]);
    let server = SshServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("identity"), server.user_key()).unwrap();
    std::fs::write(dir.path().join("known_hosts"), server.known_hosts()).unwrap();
    let mut s = spec(&server.url(&host.path("config.git")), &cache_dir());
    s.credentials = Credentials::from_dir(dir.path()).unwrap();
    let snap = new_snapshot(GitSource::new(s).unwrap().fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
}

/// `weft render --repo URL --ref REF --path DIR` prints exactly what `weft render DIR` prints.
#[test]
fn cli_render_of_a_remote_repository_matches_the_local_directory() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples-repo");
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    copy_dir(&examples, &work.path().join("deploy/config"));
    work.commit("examples");
    work.push_branch("release");
    // The Armada chart with `location: ../examples-charts` resolves next to the config repository,
    // as `examples-charts/` sits next to `examples-repo/` locally.
    let charts_bare = host.create("examples-charts");
    let charts = WorkTree::new(charts_bare.to_str().unwrap());
    copy_dir(
        &examples.parent().unwrap().join("examples-charts"),
        charts.path(),
    );
    charts.commit("charts");
    charts.push();
    let daemon = GitDaemon::start(&host);
    let cache = tempfile::tempdir().unwrap();

    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(args)
            .env("XDG_CACHE_HOME", cache.path())
            .env_remove("WEFT_GIT_CREDENTIALS_DIR")
            // The example's encrypted Secret (docs/secrets.md).
            .env("SOPS_AGE_KEY_FILE", examples.join("TEST-ONLY-age.agekey"))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let local = run(&["render", examples.to_str().unwrap()]);
    assert_eq!(local.0, Some(0), "{}", local.2);
    assert!(!local.1.is_empty());
    let url = daemon.url("config.git");
    let remote = run(&[
        "render",
        "--repo",
        &url,
        "--ref",
        "release",
        "--path",
        "deploy/config",
    ]);
    assert_eq!(remote.0, Some(0), "{}", remote.2);
    assert_eq!(remote.1, local.1);

    let missing = run(&["render", "--repo", &url, "--ref", "nope"]);
    assert_eq!(missing.0, Some(2));
    assert!(
        missing
            .2
            .contains("ref `nope` not found in git://127.0.0.1"),
        "{}",
        missing.2
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `--git-secret NAME`: credentials read from a Secret in the real API server.
#[tokio::test]
async fn credentials_from_a_kubernetes_secret() {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    let ns = support::cluster::TestNamespace::new("git-secret").await;
    let mut data = BTreeMap::new();
    data.insert("username".to_string(), ByteString(b"carol".to_vec()));
    data.insert("password".to_string(), ByteString(b"pa55-word".to_vec()));
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("git-creds".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    ns.api::<Secret>()
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let creds = weft::source::git::auth::from_kube_secret(ns.client(), ns.name(), "git-creds")
        .await
        .unwrap();
    assert_eq!(creds.username.as_deref(), Some("carol"));
    assert_eq!(creds.password.as_ref().unwrap().expose(), "pa55-word");

    let err = weft::source::git::auth::from_kube_secret(ns.client(), ns.name(), "absent")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("Secret {}/absent: cannot read it", ns.name())),
        "{err}"
    );

    // Fetch over HTTP with them.
    let (host, _work, first) =
        tokio::task::spawn_blocking(|| repo_with_commit(&[("a.yaml", "a\n")]))
            .await
            .unwrap();
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("carol".into(), "pa55-word".into())),
            bearer: None,
        },
    );
    let url = server.url("config.git");
    let snap = tokio::task::spawn_blocking(move || {
        let mut s = spec(&url, &cache_dir());
        s.credentials = creds;
        new_snapshot(GitSource::new(s).unwrap().fetch().unwrap())
    })
    .await
    .unwrap();
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
    ns.delete().await;
}

#[test]
fn sources_sharing_a_cache_fetch_concurrently() {
    let (host, work, _) = repo_with_commit(&[("a/x.yaml", "x\n"), ("b/y.yaml", "y\n")]);
    work.git(&["tag", "v1"]);
    work.push();
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let threads: Vec<_> = [("main", "a"), ("main", "b"), ("v1", "a"), ("v1", "b")]
        .into_iter()
        .map(|(reference, path)| {
            let url = daemon.url("config.git");
            let cache = cache.clone();
            std::thread::spawn(move || {
                let mut s = spec(&url, &cache);
                s.reference = GitRef::parse(reference);
                s.path = Some(path.to_string());
                let snap = new_snapshot(GitSource::new(s).unwrap().fetch().unwrap());
                (path, snap)
            })
        })
        .collect();
    for t in threads {
        let (path, snap) = t.join().unwrap();
        let expected = if path == "a" { "x.yaml" } else { "y.yaml" };
        assert_eq!(snap.files.keys().collect::<Vec<_>>(), vec![expected]);
    }
}

#[test]
fn an_old_commit_is_found_on_a_server_that_only_serves_ref_tips() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "v: 1\n")]);
    work.write("a.yaml", "v: 2\n");
    work.commit("second");
    work.write("a.yaml", "v: 3\n");
    work.commit("third");
    work.push();
    git(
        &host.path("config.git"),
        &["config", "uploadpack.allowAnySHA1InWant", "false"],
    );
    let daemon = GitDaemon::start(&host);
    let mut s = spec(&daemon.url("config.git"), &cache_dir());
    s.reference = GitRef::parse(&first);
    let snap = new_snapshot(GitSource::new(s).unwrap().fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(first.as_str()));
    assert_eq!(text(&snap, "a.yaml"), "v: 1\n");
}

#[test]
fn a_force_push_while_the_process_was_down_is_still_detected() {
    let (host, work, first) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let refusing = || {
        let mut s = spec(&daemon.url("config.git"), &cache);
        s.on_history_rewrite = HistoryRewrite::Refuse;
        GitSource::new(s).unwrap()
    };
    new_snapshot(refusing().fetch().unwrap());
    work.git(&["commit", "-q", "--amend", "-m", "amended"]);
    work.force_push();
    let err = refusing().fetch().unwrap_err();
    assert!(matches!(err, GitError::HistoryRewritten { .. }), "{err:?}");
    assert!(err.to_string().contains(&first), "{err}");
}

/// The CLI over HTTPS with basic auth from a credentials directory (`WEFT_GIT_CREDENTIALS_DIR`),
/// trusting the test server's certificate through `SSL_CERT_FILE`, or through a hashed
/// directory in `SSL_CERT_DIR` (libgit2 without a CA bundle, src/source/git/system_ca.rs).
#[test]
fn cli_render_over_https_with_credentials_from_a_directory() {
    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\ndata:\n  a: \"1\"\n";
    let (host, _work, _) = repo_with_commit(&[("apps/settings.yaml", CM)]);
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("dave".into(), "tls-pa55".into())),
            bearer: None,
        },
    );
    let tls = support::git_servers::TlsProxy::start(server.port);
    let local = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(local.path().join("apps")).unwrap();
    std::fs::write(local.path().join("apps/settings.yaml"), CM).unwrap();
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("username"), "dave\n").unwrap();
    let cache = tempfile::tempdir().unwrap();

    // The test certificate in a hashed directory (`openssl rehash`), as the system's CA
    // directory is on Debian: with no `SSL_CERT_FILE`, libgit2 looks the CA up there on demand
    // instead of loading a bundle (src/source/git/system_ca.rs).
    let hashed = tempfile::tempdir().unwrap();
    std::fs::copy(tls.cert_file(), hashed.path().join("test-ca.pem")).unwrap();
    let rehash = Command::new("openssl")
        .arg("rehash")
        .arg(hashed.path())
        .status()
        .unwrap();
    assert!(rehash.success(), "openssl rehash failed");
    let run_with = |args: &[&str], password: &str, trust: Trust| {
        std::fs::write(creds.path().join("password"), password).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.args(args)
            .env("XDG_CACHE_HOME", cache.path())
            .env("WEFT_GIT_CREDENTIALS_DIR", creds.path());
        match trust {
            Trust::File => cmd.env("SSL_CERT_FILE", tls.cert_file()),
            Trust::HashedDir => cmd
                .env_remove("SSL_CERT_FILE")
                .env("SSL_CERT_DIR", hashed.path()),
            Trust::System => cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR"),
        };
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let run = |args: &[&str], password: &str, trust: bool| {
        run_with(
            args,
            password,
            if trust { Trust::File } else { Trust::System },
        )
    };
    let url = tls.url("config.git");
    let expected = run(&["render", local.path().to_str().unwrap()], "", true);
    assert_eq!(expected.0, Some(0), "{}", expected.2);
    assert!(expected.1.contains("name: settings"), "{}", expected.1);

    let remote = run(&["render", "--repo", &url], "tls-pa55", true);
    assert_eq!(remote.0, Some(0), "{}", remote.2);
    assert_eq!(remote.1, expected.1);

    let wrong = run(&["render", "--repo", &url], "not-the-pa55word", true);
    assert_eq!(wrong.0, Some(2));
    assert!(
        wrong.2.contains("refused the username/password"),
        "{}",
        wrong.2
    );
    assert!(!wrong.2.contains("not-the-pa55word"), "{}", wrong.2);

    // Without trusting the test certificate, TLS verification fails (every run lists the refs
    // over TLS first, so the cache gives no shortcut).
    let untrusted = run(&["render", "--repo", &url], "tls-pa55", false);
    assert_eq!(untrusted.0, Some(2), "{}", untrusted.2);
    assert!(untrusted.2.contains("certificate"), "{}", untrusted.2);
    assert!(
        untrusted.2.contains(&format!("cannot reach {url}")),
        "{}",
        untrusted.2
    );

    // Trusted through the hashed directory alone.
    let from_dir = run_with(&["render", "--repo", &url], "tls-pa55", Trust::HashedDir);
    assert_eq!(from_dir.0, Some(0), "{}", from_dir.2);
    assert_eq!(from_dir.1, expected.1);
}

/// Where a test's `weft` finds the CA of the TLS test server.
#[derive(Clone, Copy)]
enum Trust {
    /// `SSL_CERT_FILE` names its certificate.
    File,
    /// `SSL_CERT_DIR` names a hashed directory holding it; no `SSL_CERT_FILE`.
    HashedDir,
    /// The system's CAs only: not trusted.
    System,
}

#[test]
fn lock_files_left_by_a_crashed_fetch_do_not_block_later_fetches() {
    let (host, work, _) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let mut src = GitSource::new(spec(&daemon.url("config.git"), &cache)).unwrap();
    new_snapshot(src.fetch().unwrap());
    // What a process killed in the middle of a fetch leaves behind.
    let refs = src.cache_path().join("refs/remotes/origin");
    std::fs::create_dir_all(&refs).unwrap();
    std::fs::write(refs.join("main.lock"), "").unwrap();
    std::fs::write(src.cache_path().join("shallow.lock"), "").unwrap();
    std::fs::write(src.cache_path().join("packed-refs.lock"), "").unwrap();
    work.write("a.yaml", "a: 2\n");
    let second = work.commit("second");
    work.push();
    let mut restarted = GitSource::new(spec(&daemon.url("config.git"), &cache)).unwrap();
    let snap = new_snapshot(restarted.fetch().unwrap());
    assert_eq!(snap.revision.as_deref(), Some(second.as_str()));
    assert!(!refs.join("main.lock").exists());
}

/// Another process fetching into the same cache holds its file lock: this fetch waits for it
/// (at most its deadline) and never takes that fetch's lock files for stale ones.
#[test]
fn a_fetch_waits_for_another_process_fetching_into_the_same_cache() {
    let (host, _work, _) = repo_with_commit(&[("a.yaml", "a: 1\n")]);
    let daemon = GitDaemon::start(&host);
    let cache = cache_dir();
    let mut first = GitSource::new(spec(&daemon.url("config.git"), &cache)).unwrap();
    new_snapshot(first.fetch().unwrap());
    // The other process: a child that holds the cache's file lock, mid-fetch, with a lock file
    // of its own in the cache.
    let live_lock = first.cache_path().join("packed-refs.lock");
    std::fs::write(&live_lock, "").unwrap();
    let lock_file = first.cache_path().with_extension("git.lock");
    // `-o`: only flock(1) itself holds the lock, not its `sleep`.
    let mut holder = Command::new("flock")
        .arg("-o")
        .arg(&lock_file)
        .args(["sleep", "30"])
        .spawn()
        .expect("flock(1)");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut other = GitSource::new(GitSourceSpec {
        fetch_timeout: std::time::Duration::from_secs(2),
        ..spec(&daemon.url("config.git"), &cache)
    })
    .unwrap();
    let started = std::time::Instant::now();
    let err = other
        .fetch()
        .expect_err("the cache is locked by another process");
    assert!(matches!(err, GitError::Timeout { .. }), "{err}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    assert!(
        live_lock.exists(),
        "another process's lock file was removed"
    );
    // Once it is done, the fetch goes on (and a lock file left then is stale).
    holder.kill().unwrap();
    holder.wait().unwrap();
    new_snapshot(other.fetch().unwrap());
    assert!(!live_lock.exists());
}
