//! Channels over file, HTTP and git; bundle archives and their limits.

use super::*;

fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
        .collect()
}

fn http_resolver(base: &str) -> impl Fn(&str) -> Result<String, url::ParseError> {
    let base = url::Url::parse(base).unwrap();
    move |u: &str| base.join(u).map(|j| j.to_string())
}

const DIGEST: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

#[test]
fn a_channel_is_parsed_sorted_newest_first_with_relative_urls_resolved() {
    let text = format!(
            "channel: stable\nbundles:\n  - {{version: 1.0.0, url: b/a-1.0.0.tar.gz, sha256: {DIGEST}}}\n  - {{version: 1.2.0, url: 'https://cdn.example/a-1.2.0.tar.gz', sha256: {}}}\n",
            DIGEST.to_uppercase()
        );
    let ch = parse_channel(
        &text,
        "https://h/x/channel.yaml",
        http_resolver("https://h/x/channel.yaml"),
    )
    .unwrap();
    assert_eq!(ch.name, "stable");
    assert_eq!(ch.bundles[0].version.to_string(), "1.2.0");
    assert_eq!(ch.bundles[0].url, "https://cdn.example/a-1.2.0.tar.gz");
    assert_eq!(ch.bundles[0].sha256, DIGEST);
    assert_eq!(ch.bundles[1].url, "https://h/x/b/a-1.0.0.tar.gz");
}

#[test]
fn channel_errors_name_the_field() {
    let parse = |t: &str| {
        parse_channel(t, "https://h/c.yaml", http_resolver("https://h/c.yaml"))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        parse("bundles: []\n"),
        "channel https://h/c.yaml: `channel` (the channel's name) is missing"
    );
    let e = parse(&format!(
        "channel: s\nbundles:\n  - {{version: one, url: a, sha256: {DIGEST}}}\n"
    ));
    assert!(
        e.starts_with(
            "channel https://h/c.yaml: `bundles[0].version` `one` is not a semantic version"
        ),
        "{e}"
    );
    let e = parse("channel: s\nbundles:\n  - {version: 1.0.0, url: a, sha256: abc}\n");
    assert_eq!(e, "channel https://h/c.yaml: `bundles[0].sha256` must be 64 hexadecimal digits (the sha256 of the .tar.gz), not `abc`");
    let e = parse(&format!("channel: s\nbundles:\n  - {{version: 1.0.0, url: a, sha256: {DIGEST}}}\n  - {{version: 1.0.0, url: b, sha256: {DIGEST}}}\n"));
    assert!(
        e.contains("`bundles[1].version`: version 1.0.0 is listed twice"),
        "{e}"
    );
    let e = parse(&format!(
        "channel: s\nbundles:\n  - {{version: 1.0.0, sha256: {DIGEST}}}\n"
    ));
    assert!(e.ends_with("`bundles[0].url` is missing"), "{e}");
}

#[test]
fn poll_urls_are_parsed() {
    assert!(matches!(
        ChannelLocation::parse("https://h/c.yaml").unwrap(),
        ChannelLocation::Url(_)
    ));
    assert!(matches!(
        ChannelLocation::parse("file:///srv/c.yaml").unwrap(),
        ChannelLocation::Url(_)
    ));
    assert_eq!(
        ChannelLocation::parse("git+https://h/agents.git?ref=stable#channels/c.yaml").unwrap(),
        ChannelLocation::Git {
            url: "https://h/agents.git".into(),
            reference: Some(GitRef::Name("stable".into())),
            path: "channels/c.yaml".into()
        }
    );
    assert_eq!(
        ChannelLocation::parse("git+file:///srv/agents").unwrap(),
        ChannelLocation::Git {
            url: "file:///srv/agents".into(),
            reference: None,
            path: DEFAULT_CHANNEL_FILE.into()
        }
    );
    let e = ChannelLocation::parse("ftp://h/c.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("scheme `ftp` is not supported"), "{e}");
    let e = ChannelLocation::parse("git+https://h/a.git#../x.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("leaves the repository"), "{e}");
    let e = ChannelLocation::parse("gopher://user:hunter2@h/c.yaml")
        .unwrap_err()
        .to_string();
    assert!(!e.contains("hunter2"), "{e}");
}

#[test]
fn git_bundle_paths_are_relative_to_the_channel_file_and_stay_inside() {
    assert_eq!(
        join_inside(Path::new("channels"), "../bundles/a.tar.gz").unwrap(),
        "bundles/a.tar.gz"
    );
    assert_eq!(
        join_inside(Path::new(""), "./a.tar.gz").unwrap(),
        "a.tar.gz"
    );
    assert!(join_inside(Path::new("channels"), "../../a.tar.gz").is_err());
    assert!(join_inside(Path::new(""), "/etc/passwd").is_err());
}

#[test]
fn the_digest_check_refuses_a_mismatch_and_reports_the_actual_digest() {
    let data = b"bundle bytes";
    let good = sha256_hex(data);
    assert_eq!(verify_sha256(data, &good), Ok(()));
    assert_eq!(verify_sha256(data, &good.to_uppercase()), Ok(()));
    assert_eq!(
        verify_sha256(data, DIGEST),
        Err(DigestError::Mismatch {
            actual: good.clone()
        })
    );
    assert_eq!(
        verify_sha256(b"bundle bytez", &good)
            .unwrap_err()
            .to_string()
            .len(),
        64
    );
}

#[test]
fn an_archive_round_trips_and_is_deterministic() {
    let f = files(&[
        ("agents/bundle.yaml", "version: 1.0.0\n"),
        ("agents/flux/a.yaml", "x: 1\n"),
    ]);
    let a = pack_archive(&f).unwrap();
    assert_eq!(a, pack_archive(&f).unwrap());
    let back = unpack_archive(&a, &ChannelLimits::default(), "u").unwrap();
    assert_eq!(back, f);
}

fn raw_archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    build(&mut tar);
    let raw = tar.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &raw).unwrap();
    gz.finish().unwrap()
}

/// A header whose name is written raw, bypassing tar's own path checks (as a hostile
/// archive would be).
fn raw_header(name: &str, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(kind);
    h.set_cksum();
    h
}

#[test]
fn paths_that_leave_the_bundle_are_refused() {
    for name in ["../evil.yaml", "a/../../evil.yaml", "/etc/evil.yaml"] {
        let a = raw_archive(|t| {
            let h = raw_header(name, tar::EntryType::Regular, 2);
            t.append(&h, &b"x\n"[..]).unwrap();
        });
        let e = unpack_archive(&a, &ChannelLimits::default(), "u")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("leaves the bundle") || e.contains("absolute path"),
            "{name}: {e}"
        );
    }
}

#[test]
fn a_long_name_is_refused_and_quoted_clipped() {
    // Issue 48 item 4: a 64 KiB name (a GNU long name, as `tar` writes one) gave a 65,637-byte
    // error, which went on into the WeaveCloud's status, an event and the logs.
    let name = format!("agents/{}.yaml", "n".repeat(64 * 1024));
    let mut f = BTreeMap::new();
    f.insert(name, b"x: 1\n".to_vec());
    let a = pack_archive(&f).unwrap();
    let e = unpack_archive(&a, &ChannelLimits::default(), "u")
        .unwrap_err()
        .to_string();
    assert!(
        e.len() < 400,
        "{} bytes: {}",
        e.len(),
        &e[..400.min(e.len())]
    );
    assert!(
        e.contains("… (65548 bytes in all)`: a path of 65548 bytes is longer than the 4096"),
        "{e}"
    );
}

#[test]
fn links_are_refused() {
    let a = raw_archive(|t| {
        let mut h = raw_header("agents/bundle.yaml", tar::EntryType::Symlink, 0);
        h.set_link_name("/etc/passwd").unwrap();
        h.set_cksum();
        t.append(&h, std::io::empty()).unwrap();
    });
    let e = unpack_archive(&a, &ChannelLimits::default(), "u")
        .unwrap_err()
        .to_string();
    assert_eq!(
            e,
            "bundle archive u: `agents/bundle.yaml`: a symbolic link is not allowed in a bundle (regular files only)"
        );
}

#[test]
fn size_and_entry_limits_are_enforced() {
    let limits = ChannelLimits {
        max_entries: 3,
        max_file_bytes: 10,
        max_unpacked_bytes: 15,
        ..Default::default()
    };
    let many = pack_archive(&files(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")])).unwrap();
    assert!(unpack_archive(&many, &limits, "u")
        .unwrap_err()
        .to_string()
        .contains("more than 3 entries"));
    let big = pack_archive(&files(&[("a", "0123456789abc")])).unwrap();
    assert!(unpack_archive(&big, &limits, "u")
        .unwrap_err()
        .to_string()
        .contains("`a`: 13 bytes is more than the 10"));
    let total = pack_archive(&files(&[("a", "0123456789"), ("b", "0123456789")])).unwrap();
    assert!(unpack_archive(&total, &limits, "u")
        .unwrap_err()
        .to_string()
        .contains("more than 15 bytes unpacked"));
    assert!(unpack_archive(b"not gzip", &limits, "u").is_err());
}

#[tokio::test]
async fn a_file_channel_is_read_and_its_bundle_verified() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = files(&[("bundle.yaml", "version: 2.0.0\n")]);
    let archive = pack_archive(&bundle).unwrap();
    std::fs::create_dir(dir.path().join("b")).unwrap();
    std::fs::write(dir.path().join("b/a.tar.gz"), &archive).unwrap();
    let channel = format!(
            "channel: test\nbundles:\n  - {{version: 2.0.0, url: b/a.tar.gz, sha256: {}}}\n  - {{version: 2.1.0, url: b/a.tar.gz, sha256: {DIGEST}}}\n",
            sha256_hex(&archive)
        );
    std::fs::write(dir.path().join("channel.yaml"), channel).unwrap();
    let url = url::Url::from_file_path(dir.path().join("channel.yaml")).unwrap();
    let src = ChannelSource::new(url.as_str(), ChannelOptions::default()).unwrap();
    let ch = src.fetch_index().await.unwrap();
    assert_eq!(ch.bundles.len(), 2);
    let good = src.fetch_bundle(&ch.bundles[1]).await.unwrap();
    assert_eq!(good.files, bundle);
    assert_eq!(good.archive, archive);
    let bad = src.fetch_bundle(&ch.bundles[0]).await.unwrap_err();
    assert!(
        matches!(&bad, ChannelError::DigestMismatch { version, .. } if version == "2.1.0"),
        "{bad}"
    );
    assert!(bad.to_string().contains("sha256 mismatch"), "{bad}");
}
