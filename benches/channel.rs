//! The CPU side of an agent update check, without the network: parse a channel index, verify a
//! bundle archive's sha256, unpack it (with the safety checks), and parse the unpacked bundle.
//! Also the deterministic packing used to publish a bundle and to keep it in a ConfigMap.
//!
//! Run: `cargo bench --bench channel`

use std::collections::BTreeMap;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use weft::render::bundle::Bundle;
use weft::source::channel::{
    pack_archive, parse_channel, sha256_hex, unpack_archive, verify_sha256, ChannelLimits,
};

/// The files of `agents/`, inside one top-level directory as `tar czf x.tar.gz agents/` makes.
fn bundle_files() -> BTreeMap<String, Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents");
    let mut files = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("agents/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(&root)
                    .expect("under agents/")
                    .to_string_lossy()
                    .to_string();
                files.insert(
                    format!("agents/{rel}"),
                    std::fs::read(&path).expect("a bundle file"),
                );
            }
        }
    }
    files
}

/// A channel listing `n` versions.
fn channel_text(n: usize, digest: &str) -> String {
    let mut text = String::from("channel: stable\nbundles:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - version: 1.{i}.0\n    url: bundles/agents-1.{i}.0.tar.gz\n    sha256: {digest}\n"
        ));
    }
    text
}

fn bench(c: &mut Criterion) {
    let files = bundle_files();
    let archive = pack_archive(&files).expect("packing agents/");
    let digest = sha256_hex(&archive);
    eprintln!(
        "agents/ bundle: {} files, {} bytes unpacked, {} bytes as .tar.gz",
        files.len(),
        files.values().map(Vec::len).sum::<usize>(),
        archive.len()
    );
    let limits = ChannelLimits::default();
    let base = url::Url::parse("https://example.com/weave/channel.yaml").expect("a URL");
    let resolve = |u: &str| base.join(u).map(|j| j.to_string());

    let small = channel_text(10, &digest);
    c.bench_function("channel_parse_10_versions", |b| {
        b.iter(|| parse_channel(&small, "bench", resolve).expect("a channel"))
    });
    let big = channel_text(1000, &digest);
    c.bench_function("channel_parse_1000_versions", |b| {
        b.iter(|| parse_channel(&big, "bench", resolve).expect("a channel"))
    });
    c.bench_function("bundle_verify_unpack_parse", |b| {
        b.iter(|| {
            verify_sha256(&archive, &digest).expect("the digest matches");
            let files = unpack_archive(&archive, &limits, "bench").expect("unpacks");
            Bundle::from_files(files).expect("a bundle")
        })
    });
    c.bench_function("bundle_pack", |b| {
        b.iter(|| pack_archive(&files).expect("packs"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
