//! Property tests of what the source stage parses from untrusted input (issue 14): URL redaction
//! never lets a password through, known_hosts patterns match like a reference matcher and in
//! bounded time, and archive unpacking never panics and keeps what it is given. Bounded: a fixed,
//! small number of cases, so the whole file runs in seconds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use weft::api::redact::redact_url_passwords;
use weft::source::channel::{pack_archive, unpack_archive, ChannelLimits};
use weft::source::chart::{unpack, ArchiveLimits};
use weft::source::git::auth::{HostKeyCheck, KnownHosts};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(64)
}

/// A reference wildcard matcher (dynamic programming): `*` any run, `?` any one byte.
fn reference_glob(pattern: &[u8], text: &[u8]) -> bool {
    let mut row = vec![false; text.len() + 1];
    row[0] = true;
    for &p in pattern {
        let mut next = vec![false; text.len() + 1];
        if p == b'*' {
            next[0] = row[0];
            for t in 1..=text.len() {
                next[t] = row[t] || next[t - 1];
            }
        } else {
            for t in 1..=text.len() {
                next[t] = row[t - 1] && (p == b'?' || p == text[t - 1]);
            }
        }
        row = next;
    }
    row[text.len()]
}

const KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

fn key_bytes() -> Vec<u8> {
    // The same blob the known_hosts line carries, decoded.
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(KEY)
        .expect("base64")
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_url_password_never_survives_redaction(
        before in "[a-z :=(]{0,20}",
        scheme in prop::sample::select(vec!["https", "http", "ssh", "git+https"]),
        user in "[a-z]{1,8}",
        password in "[A-Z0-9%!$&*+,;=]{6,24}",
        host in "[a-z]{1,10}(\\.[a-z]{2,5})?(:[0-9]{2,5})?",
        path in "(/[a-z.]{1,8}){0,3}",
        after in "[a-z :)]{0,20}",
    ) {
        let text = format!("{before}{scheme}://{user}:{password}@{host}{path}{after}");
        let out = redact_url_passwords(&text);
        prop_assert!(!out.contains(&password), "{out}");
        prop_assert!(out.contains(&format!("{user}:***@{host}")), "{out}");
    }

    #[test]
    fn a_token_used_as_an_http_user_name_never_survives(
        token in "[A-Za-z0-9_]{12,40}",
        host in "[a-z]{1,10}\\.[a-z]{2,5}",
        twice in any::<bool>(),
    ) {
        let url = format!("https://{token}@{host}/org/repo.git");
        let text = if twice { format!("{url} and again {url}") } else { url };
        let out = redact_url_passwords(&text);
        prop_assert!(!out.contains(&token), "{out}");
    }

    #[test]
    fn redaction_never_panics_and_leaves_url_free_text_alone(text in "\\PC{0,200}") {
        let out = redact_url_passwords(&text);
        if !text.contains("://") {
            prop_assert_eq!(out, text);
        }
    }

    #[test]
    fn known_hosts_patterns_match_like_the_reference(
        pattern in "[ab*?]{1,10}",
        host in "[ab]{1,10}",
    ) {
        let hosts = KnownHosts::parse(&format!("{pattern} ssh-ed25519 {KEY}\n")).expect("parse");
        let trusted = hosts.check(&host, 22, Some(&key_bytes()), None) == HostKeyCheck::Trusted;
        prop_assert_eq!(trusted, reference_glob(pattern.as_bytes(), host.as_bytes()));
    }

    #[test]
    fn known_hosts_parsing_never_panics(text in "\\PC{0,300}") {
        let _ = KnownHosts::parse(&text);
    }

    #[test]
    fn chart_archives_round_trip_and_never_escape(
        files in prop::collection::btree_map("[a-z]{1,8}(/[a-z]{1,8}){0,2}\\.yaml", "[ -~]{0,64}", 1..8),
    ) {
        let bytes = tgz(&files.iter().map(|(p, c)| (p.as_str(), c.as_bytes())).collect::<Vec<_>>());
        let out = unpack("https://h/c.tgz", &bytes, ArchiveLimits::default()).expect("unpack");
        let want: BTreeMap<String, Vec<u8>> =
            files.iter().map(|(p, c)| (p.clone(), c.as_bytes().to_vec())).collect();
        prop_assert_eq!(out, want);
    }

    #[test]
    fn arbitrary_bytes_are_refused_not_panicked_on(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = unpack("https://h/c.tgz", &bytes, ArchiveLimits::default());
        let _ = unpack_archive(&bytes, &ChannelLimits::default(), "https://h/b.tgz");
    }

    #[test]
    fn bundle_archives_round_trip(
        files in prop::collection::btree_map("[a-z]{1,8}/[a-z]{1,8}\\.yaml", "[ -~]{0,64}", 1..8),
    ) {
        let files: BTreeMap<String, Vec<u8>> =
            files.into_iter().map(|(p, c)| (p, c.into_bytes())).collect();
        let packed = pack_archive(&files).expect("pack");
        let out = unpack_archive(&packed, &ChannelLimits::default(), "https://h/b.tgz").expect("unpack");
        prop_assert_eq!(out, files);
    }
}

#[test]
fn many_wildcards_against_a_long_host_name_finish() {
    // A recursive matcher takes exponential time here; the linear one answers at once.
    let pattern = format!("{}b", "*a".repeat(40));
    let host = "a".repeat(4_000);
    let hosts = KnownHosts::parse(&format!("{pattern} ssh-ed25519 {KEY}\n")).expect("parse");
    let start = Instant::now();
    assert_eq!(
        hosts.check(&host, 22, Some(&key_bytes()), None),
        HostKeyCheck::UnknownHost
    );
    // Generous: this is a termination check, not a benchmark.
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn archive_entries_that_escape_are_refused() {
    for bad in ["../x.yaml", "a/../../x.yaml", "/etc/passwd"] {
        let mut raw = Vec::new();
        {
            let gz = flate2::write::GzEncoder::new(&mut raw, flate2::Compression::fast());
            let mut builder = tar::Builder::new(gz);
            let mut header = tar::Header::new_gnu();
            let name = header.as_gnu_mut().expect("gnu").name.as_mut();
            name[..bad.len()].copy_from_slice(bad.as_bytes());
            header.set_size(1);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder.append(&header, &b"x"[..]).expect("append");
            builder.into_inner().expect("tar").finish().expect("gz");
        }
        let err = unpack("https://h/c.tgz", &raw, ArchiveLimits::default()).unwrap_err();
        assert!(
            err.to_string().contains("refusing the archive"),
            "{bad}: {err}"
        );
        assert!(
            unpack_archive(&raw, &ChannelLimits::default(), "https://h/b.tgz").is_err(),
            "{bad}"
        );
    }
}

fn tgz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut raw = Vec::new();
    {
        let gz = flate2::write::GzEncoder::new(&mut raw, flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        for (path, content) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, *content)
                .expect("append");
        }
        let gz = builder.into_inner().expect("tar");
        gz.finish().expect("gz");
    }
    raw
}
