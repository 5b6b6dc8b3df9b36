//! Hostile sources, built in each test (issue 30, item 4): a git tree bomb, a symlink whose blob
//! is huge, a tree read that outlasts `--fetch-timeout`, a chart archive whose PAX header
//! unpacks to far more than the archive, and names and link targets long enough to flood an
//! error message. Each test prints the bound it measured (`--nocapture`); see
//! docs/security.md, "Bounded work".

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::git_servers::{git, GitDaemon, RepoHost, WorkTree};
use weft::api::armada::ChartSource;
use weft::api::ResourceKey;
use weft::source::chart::{self, ArchiveLimits, ChartCache, ChartRequest};
use weft::source::git::{GitError, GitRef, GitSource, GitSourceSpec};
use weft::source::{Snapshot, SnapshotLimits};

fn hash_object(repo: &Path, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("git")
        .current_dir(repo)
        .arg("hash-object")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn hex_to_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// A tree object of `(mode, name, id)` entries, written as is (`--literally`: names git itself
/// would refuse are kept).
fn tree(repo: &Path, entries: &[(&str, &str, &str)]) -> String {
    let mut raw = Vec::new();
    for (mode, name, id) in entries {
        raw.extend_from_slice(format!("{mode} {name}\0").as_bytes());
        raw.extend_from_slice(&hex_to_bytes(id));
    }
    hash_object(repo, &["-w", "-t", "tree", "--literally", "--stdin"], &raw)
}

/// Point `main` of the bare repository at a commit of `root_tree`.
fn commit_tree(repo: &Path, root_tree: &str) -> String {
    let commit = git(repo, &["commit-tree", root_tree, "-m", "hostile"]);
    git(repo, &["update-ref", "refs/heads/main", &commit]);
    commit
}

fn spec(url: &str, cache: &Path) -> GitSourceSpec {
    let mut s = GitSourceSpec::new(url, cache);
    s.reference = GitRef::Branch("main".into());
    s
}

/// Fetch `url` on a thread; `None` when it did not finish within `patience`.
fn fetch_within(
    url: &str,
    cache: &Path,
    patience: Duration,
) -> Option<(Result<usize, GitError>, Duration)> {
    let spec = spec(url, cache);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let result = GitSource::new(spec).and_then(|mut s| s.fetch()).map(|_| 0);
        let _ = tx.send((result, started.elapsed()));
    });
    rx.recv_timeout(patience).ok()
}

/// A tree that names one subtree 16 times, 8 levels deep: 4.3 billion directories in 5 KB of
/// objects, whose leaves hold only a dot-file (never a file of the snapshot, so the file limit
/// never stops the walk). Every entry examined counts: refused at 4 × `max_files`.
#[test]
fn a_tree_bomb_is_refused_at_the_entry_bound() {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let blob = hash_object(&bare, &["-w", "--stdin"], b"hidden\n");
    let mut level = tree(&bare, &[("100644", ".keep", &blob)]);
    for _ in 0..8 {
        let names: Vec<String> = (0..16).map(|i| format!("d{i:02}")).collect();
        let entries: Vec<(&str, &str, &str)> = names
            .iter()
            .map(|n| ("40000", n.as_str(), level.as_str()))
            .collect();
        level = tree(&bare, &entries);
    }
    commit_tree(&bare, &level);
    let objects: u64 = walk_size(&bare.join("objects"));
    let daemon = GitDaemon::start(&host);
    let cache = tempfile::tempdir().unwrap();
    let (result, elapsed) = fetch_within(
        &daemon.url("config.git"),
        cache.path(),
        Duration::from_secs(120),
    )
    .expect("the read of a tree bomb did not finish within 120 s");
    let err = result.expect_err("a tree bomb is refused");
    let limit = SnapshotLimits::default().max_files * 4;
    assert!(
        matches!(&err, GitError::TooManyTreeEntries { limit: l, .. } if *l == limit),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("hold more than {limit} entries")),
        "{err}"
    );
    println!(
        "tree bomb: {objects} bytes of objects naming 16^8 directories; refused after {limit} tree entries in {elapsed:.2?}"
    );
}

fn walk_size(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            walk_size(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// A symlink entry whose blob is 16 MiB: its size is read from the object header, and the link
/// is refused without reading it (it was read whole, then echoed whole into the error).
#[test]
fn a_huge_symlink_blob_is_refused_by_its_size() {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let size = 16 << 20;
    let target = "x/".repeat(size / 2);
    let link = hash_object(&bare, &["-w", "--stdin"], target.as_bytes());
    let file = hash_object(&bare, &["-w", "--stdin"], b"a: 1\n");
    let root = tree(
        &bare,
        &[("100644", "a.yaml", &file), ("120000", "link.yaml", &link)],
    );
    commit_tree(&bare, &root);
    let daemon = GitDaemon::start(&host);
    let cache = tempfile::tempdir().unwrap();
    let (result, elapsed) = fetch_within(
        &daemon.url("config.git"),
        cache.path(),
        Duration::from_secs(120),
    )
    .expect("did not finish");
    let err = result.expect_err("refused").to_string();
    assert!(
        err.contains("link.yaml: unsafe path in the repository at commit")
            && err.contains(&format!(
                "symlink target is {size} bytes, over the limit of 4096"
            )),
        "{}",
        &err[..err.len().min(2000)]
    );
    assert!(err.len() < 1000, "the error is {} bytes", err.len());
    println!(
        "symlink blob of {size} bytes: refused by its header (bound 4096 bytes) in {elapsed:.2?}; error of {} bytes",
        err.len()
    );
}

/// The read of a fetched tree is bounded by `--fetch-timeout` too: a commit already in the cache
/// (no network at all) with a deadline that has passed is not read to the end.
#[test]
fn the_tree_read_is_bounded_by_the_fetch_timeout() {
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let work = WorkTree::new(bare.to_str().unwrap());
    for i in 0..3000 {
        work.write(&format!("d{}/f{i}.yaml", i % 30), format!("i: {i}\n"));
    }
    let commit = work.commit("3000 files");
    work.push();
    let daemon = GitDaemon::start(&host);
    let url = daemon.url("config.git");
    let cache = tempfile::tempdir().unwrap();
    let mut first = GitSource::new(spec(&url, cache.path())).unwrap();
    first.fetch().unwrap();
    let mut pinned = spec(&url, cache.path());
    pinned.reference = GitRef::Commit(commit.clone());
    pinned.fetch_timeout = Duration::from_millis(1);
    let started = Instant::now();
    let err = GitSource::new(pinned)
        .unwrap()
        .fetch()
        .expect_err("the read outlasts the deadline");
    assert!(matches!(err, GitError::ReadTimeout { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "reading the files of commit {commit} did not finish within --fetch-timeout"
        )),
        "{err}"
    );
    println!(
        "tree read past a 1 ms --fetch-timeout: stopped after {:.2?}: {err}",
        started.elapsed()
    );
}

/// A one-file HTTP server on loopback.
fn serve(body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/web-1.0.0.tgz", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

fn tar_request(url: &str) -> ChartRequest {
    ChartRequest {
        chart: ResourceKey {
            namespace: "default".into(),
            name: "web".into(),
        },
        origin: "web.yaml:1:1".into(),
        source: serde_json::from_value::<ChartSource>(
            serde_json::json!({"type": "tar", "location": url}),
        )
        .unwrap(),
    }
}

/// A PAX record `"<len> <key>=<value>\n"` whose value is `filler` repeated `n` times, streamed.
fn pax_record(key: &str, filler: u8, n: u64) -> (u64, impl Read) {
    let body = key.len() as u64 + 2 + n + 1; // " key=" minus the length, the value, "\n"
    let mut total = body;
    loop {
        let next = body + total.to_string().len() as u64;
        if next == total {
            break;
        }
        total = next;
    }
    let head = format!("{total} {key}=");
    (
        total,
        std::io::Cursor::new(head.into_bytes())
            .chain(std::io::repeat(filler).take(n))
            .chain(std::io::Cursor::new(b"\n".to_vec())),
    )
}

fn append_file(builder: &mut tar::Builder<impl Write>, path: &str, content: &[u8]) {
    let mut header = tar::Header::new_ustar();
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    builder.append_data(&mut header, path, content).unwrap();
}

fn append_pax(builder: &mut tar::Builder<impl Write>, size: u64, data: impl Read) {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::XHeader);
    header.set_size(size);
    header.set_mode(0o644);
    header.set_path("PaxHeaders/web").unwrap();
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

const CHART_YAML: &[u8] =
    b"name: web\nversion: 1.0.0\nannotations:\n  weft.io/template-format: substitution\n";

/// A chart archive with a 128 MiB PAX header (a `comment`, which every reader ignores) in front
/// of a valid chart: the tar reader used to read the header whole into memory, uncounted.
#[test]
fn pax_headers_count_against_the_unpacked_limit() {
    let header_size: u64 = 128 << 20;
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let (size, data) = pax_record("comment", b'x', header_size - 32);
    append_pax(&mut builder, size, data);
    append_file(&mut builder, "web/Chart.yaml", CHART_YAML);
    let bytes = builder.into_inner().unwrap().finish().unwrap();
    let download = bytes.len();
    let url = serve(bytes);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path());
    let started = Instant::now();
    let err = chart::resolve(
        &[tar_request(&url)],
        &Snapshot::default(),
        "/nowhere",
        &cache,
    )
    .expect_err("the PAX header is over the unpacked limit")
    .to_string();
    let limit = ArchiveLimits::default().max_unpacked_bytes;
    assert!(
        err.contains(&format!("unpacks to more than {limit} bytes")),
        "{err}"
    );
    println!(
        "PAX header of {size} bytes in a {download}-byte download: refused at the unpacked bound ({limit} bytes) in {:.2?}",
        started.elapsed()
    );
}

/// Names and link targets are the author's data: errors quote them up to a bound.
#[test]
fn errors_quote_attacker_data_up_to_a_bound() {
    // A tar entry whose PAX path is 64 KiB and leaves the directory.
    let long = format!("web/{}/../../../../etc/passwd", "a".repeat(64 << 10));
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let (size, data) = {
        let record = format!("path={long}\n");
        let mut total = record.len() + 1;
        while format!("{total} {record}").len() != total {
            total += 1;
        }
        let text = format!("{total} {record}");
        (text.len() as u64, std::io::Cursor::new(text.into_bytes()))
    };
    append_pax(&mut builder, size, data);
    append_file(&mut builder, "web/ignored", b"x");
    let bytes = builder.into_inner().unwrap().finish().unwrap();
    let err = chart::unpack(
        "https://charts.example/web.tgz",
        &bytes,
        ArchiveLimits::default(),
    )
    .expect_err("the entry leaves the directory")
    .to_string();
    assert!(
        err.contains("leaves the extraction directory"),
        "{}",
        &err[..err.len().min(500)]
    );
    assert!(err.len() < 1000, "tar error of {} bytes", err.len());
    println!(
        "tar entry name of {} bytes: error of {} bytes",
        long.len(),
        err.len()
    );

    // A git symlink whose target (under the 4096-byte bound) escapes: quoted up to 200 characters.
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let target = format!("{}/../../../../../etc/passwd", "b".repeat(4000));
    let target = &target[target.len() - 4000..];
    let target = format!("/{target}");
    let link = hash_object(&bare, &["-w", "--stdin"], target.as_bytes());
    // And a crafted tree entry name of 60 KiB holding a separator (libgit2 reads names up to 64 KiB).
    let file = hash_object(&bare, &["-w", "--stdin"], b"a: 1\n");
    let name = format!("{}/x.yaml", "c".repeat(60 << 10));
    let bad_tree = tree(&bare, &[("100644", &name, &file)]);
    let daemon = GitDaemon::start(&host);
    for (what, root) in [
        (
            "symlink target",
            tree(&bare, &[("120000", "link.yaml", &link)]),
        ),
        ("entry name", tree(&bare, &[("40000", "dir", &bad_tree)])),
    ] {
        commit_tree(&bare, &root);
        let cache = tempfile::tempdir().unwrap();
        let (result, _) = fetch_within(
            &daemon.url("config.git"),
            cache.path(),
            Duration::from_secs(60),
        )
        .expect("did not finish");
        let err = result.expect_err("refused").to_string();
        assert!(err.len() < 1000, "{what}: error of {} bytes", err.len());
        assert!(err.contains("bytes in all"), "{what}: {err}");
        println!("git {what}: error of {} bytes: {err}", err.len());
    }
}
