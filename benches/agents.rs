//! The agent bundle and WeaveCloud rendering: parsing a bundle from its files (what happens to
//! every bundle fetched from a channel) and rendering one WeaveCloud into its agents (what the
//! controller does at every reconcile).
//!
//! Run: `cargo bench --bench agents`

use std::collections::BTreeMap;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use weft::api::WeaveCloud;
use weft::render::bundle::Bundle;
use weft::render::weavecloud::{render_agents, AgentInputs};

/// The files of `agents/`, as a channel fetch would hand them over.
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
                files.insert(rel, std::fs::read(&path).expect("a bundle file"));
            }
        }
    }
    files
}

fn bench(c: &mut Criterion) {
    let files = bundle_files();
    c.bench_function("bundle_from_files", |b| {
        b.iter(|| Bundle::from_files(files.clone()).expect("the built-in bundle parses"))
    });

    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/weavecloud/design-example.input.yaml");
    let wc: WeaveCloud =
        serde_saphyr::from_str(&std::fs::read_to_string(input).expect("the design example"))
            .expect("a WeaveCloud");
    let bundle = Bundle::builtin().expect("the built-in bundle");
    let inputs = AgentInputs {
        token_hash: Some("0123456789abcdef0123456789abcdef".into()),
        preserved_flux_args: BTreeMap::from([("git-poll-interval".to_string(), "5m".to_string())]),
        ..Default::default()
    };
    c.bench_function("render_one_weavecloud", |b| {
        b.iter(|| render_agents(&wc, bundle, &inputs).expect("render"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
