//! Helm charts rendered by the real helm (`$WEFT_HELM`, else built by `tests/helm/ensure`):
//! 100 realistic charts — each the example `api` chart (deployment, service, config map with
//! `required`, a pre-install hook Job and a test Pod, `_helpers.tpl`) with the library chart
//! `demo-lib` as an Armada dependency, under its own name and values — rendered
//!
//! - first: by a fresh `HelmRenderer` (one `helm template` per chart, plus one `helm version`);
//! - cached: by a renderer that rendered them before (what an unchanged pass costs: assembly and
//!   digests, no process);
//! - beside `helm template` run directly on the same charts (already assembled on disk);
//! - as a pass renders them: `pass::helm::render_helm_charts` over 100 ArmadaCharts (with
//!   `demo-lib` as their Armada dependency) of a loaded repository, one helm process per core.
//!
//! Run: `WEFT_HELM="$(tests/helm/ensure)" cargo bench --bench helm`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use weft::helm::{ChartFiles, ChartTree, HelmLocation, HelmRenderer, RenderRequest};

const CHARTS: usize = 100;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pinned helm (shared with the tests).
#[path = "../tests/support/helm.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod pinned_helm;
use pinned_helm::helm;

fn read_dir(dir: &Path, rel: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if entry.file_type().unwrap().is_dir() {
            read_dir(&entry.path(), &rel, out);
        } else {
            out.insert(rel, std::fs::read(entry.path()).unwrap());
        }
    }
}

/// Chart `i`: the example api chart named `app-<i>`, with demo-lib as its dependency.
fn chart(i: usize, api: &BTreeMap<String, Vec<u8>>, lib: &ChartFiles) -> ChartTree {
    let mut files = api.clone();
    let chart_yaml = String::from_utf8(files["Chart.yaml"].clone())
        .unwrap()
        .replace("name: api", &format!("name: app-{i}"))
        .replace("version: 1.4.0", &format!("version: 1.4.{i}"));
    files.insert("Chart.yaml".into(), chart_yaml.into_bytes());
    ChartTree::new(ChartFiles { files }).with_dependencies(vec![ChartTree::new(lib.clone())])
}

fn values(i: usize) -> Value {
    json!({
        "replicas": 1 + i % 3,
        "logLevel": if i.is_multiple_of(2) { "debug" } else { "info" },
        "redis": {"host": format!("redis-{}", i % 5)},
        "image": {"tag": format!("1.4.{i}")},
        "resources": {"limits": {"memory": format!("{}Mi", 128 + i)}},
    })
}

/// The same 100 charts as ArmadaCharts of a loaded config repository.
fn repository(api: &BTreeMap<String, Vec<u8>>, lib: &ChartFiles) -> weft::load::LoadedRepo {
    let mut files = BTreeMap::new();
    for (p, c) in &lib.files {
        files.insert(format!("charts/demo-lib/{p}"), c.clone());
    }
    let mut docs = String::from(
        "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: demo-lib, namespace: apps}\nspec:\n  release: demo-lib\n  namespace: apps\n  source: {type: local, location: charts/demo-lib}\n",
    );
    for i in 0..CHARTS {
        for (p, c) in &chart(i, api, lib).chart.files {
            files.insert(format!("charts/app-{i}/{p}"), c.clone());
        }
        docs.push_str(&format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: app-{i}, namespace: apps}}\nspec:\n  release: site-app-{i}\n  namespace: apps\n  source: {{type: local, location: charts/app-{i}}}\n  dependencies: [demo-lib]\n  values: {}\n",
            values(i)
        ));
    }
    files.insert("armada.yaml".into(), docs.into_bytes());
    let snapshot = weft::source::Snapshot {
        revision: None,
        files,
    };
    let (repo, _) =
        weft::load::load(std::sync::Arc::new(snapshot)).unwrap_or_else(|e| panic!("{e}"));
    repo
}

fn render_all(renderer: &HelmRenderer, charts: &[(ChartTree, Value)]) -> usize {
    charts
        .iter()
        .enumerate()
        .map(|(i, (tree, values))| {
            let release = format!("site-app-{i}");
            let request = RenderRequest::new(tree, &release, "apps", values);
            renderer
                .render(&request)
                .unwrap_or_else(|e| panic!("{e}"))
                .render
                .objects
                .len()
        })
        .sum()
}

fn bench(c: &mut Criterion) {
    let helm = helm().to_path_buf();
    let mut api = BTreeMap::new();
    read_dir(&root().join("examples-repo/charts/api"), "", &mut api);
    let mut lib = BTreeMap::new();
    read_dir(&root().join("examples-repo/charts/demo-lib"), "", &mut lib);
    let lib = ChartFiles { files: lib };
    let charts: Vec<(ChartTree, Value)> = (0..CHARTS)
        .map(|i| (chart(i, &api, &lib), values(i)))
        .collect();

    // The same charts assembled on disk, for `helm template` alone.
    let disk = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for (i, (tree, values)) in charts.iter().enumerate() {
        let dir = disk.path().join(format!("app-{i}"));
        let files = weft::helm::assemble::assemble(tree).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        weft::helm::assemble::write_chart(&dir, &files).unwrap();
        let values_file = disk.path().join(format!("values-{i}.json"));
        std::fs::write(&values_file, values.to_string()).unwrap();
        dirs.push((dir, values_file));
    }

    let warm = HelmRenderer::new(HelmLocation::Binary(helm.clone()));
    let objects = render_all(&warm, &charts);
    // 3 objects, a hook Job and a test Pod per chart.
    assert_eq!(objects, CHARTS * 5, "objects per render");

    let mut group = c.benchmark_group("helm");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    group.bench_function("100 charts, first render (helm template each)", |b| {
        b.iter(|| {
            let fresh = HelmRenderer::new(HelmLocation::Binary(helm.clone()));
            render_all(&fresh, &charts)
        })
    });
    group.bench_function("100 charts, helm template run directly", |b| {
        b.iter(|| {
            for (i, (dir, values_file)) in dirs.iter().enumerate() {
                let out = Command::new(&helm)
                    .arg("template")
                    .arg(format!("site-app-{i}"))
                    .arg(dir)
                    .arg("--namespace=apps")
                    .arg(format!("--values={}", values_file.display()))
                    .arg("--include-crds")
                    .output()
                    .unwrap();
                assert!(out.status.success());
            }
        })
    });
    let repo = repository(&api, &lib);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    group.bench_function(
        "100 charts, first render of a pass (pass::helm, one helm per core)",
        |b| {
            b.iter(|| {
                let fresh =
                    std::sync::Arc::new(HelmRenderer::new(HelmLocation::Binary(helm.clone())));
                let out = runtime
                    .block_on(weft::pass::helm::render_helm_charts(
                        &repo,
                        &weft::source::chart::ChartSources::default(),
                        &fresh,
                        None,
                    ))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(out.failures.is_empty(), "{:?}", out.failures);
                assert_eq!(out.renders.len(), CHARTS);
            })
        },
    );
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("100 charts, cached render (no helm)", |b| {
        b.iter(|| render_all(&warm, &charts))
    });
    group.finish();
    assert_eq!(
        warm.cached_renders(),
        CHARTS,
        "the cached renders stayed cached"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
