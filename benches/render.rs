//! `weft render` of a repository with 10,000 plain objects: load (YAML with positions,
//! classification, validation) + render (ownership labels, hashes, ordering) + YAML output.
//! Peak heap is measured with a counting allocator and printed beside criterion's timings.
//!
//! Run: `cargo bench --bench render`

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use weft::source::Snapshot;

struct Counting;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// 100 files of 100 documents: ConfigMaps, Deployments and Services in turn.
fn repository(objects: usize) -> Snapshot {
    let mut files = BTreeMap::new();
    let per_file = 100;
    for f in 0..objects.div_ceil(per_file) {
        let mut text = String::new();
        for i in 0..per_file.min(objects - f * per_file) {
            let n = f * per_file + i;
            let doc = match n % 3 {
                0 => format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{n}\n  namespace: bench\n  labels: {{app: bench, idx: \"{n}\"}}\ndata:\n  key: value-{n}\n  other: |\n    line one\n    line two\n"),
                1 => format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{n}\n  namespace: bench\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: app-{n}}}\n  template:\n    metadata:\n      labels: {{app: app-{n}}}\n    spec:\n      containers:\n        - name: main\n          image: example/app:{n}\n          args: [\"--port=8080\", \"--verbose\"]\n          ports: [{{containerPort: 8080}}]\n          resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}\n"),
                _ => format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{n}\n  namespace: bench\nspec:\n  selector: {{app: app-{n}}}\n  ports:\n    - port: 80\n      targetPort: 8080\n"),
            };
            text.push_str("---\n");
            text.push_str(&doc);
        }
        files.insert(format!("objects/file-{f:03}.yaml"), text.into_bytes());
    }
    Snapshot {
        revision: None,
        files,
    }
}

fn render_to_yaml(snapshot: Arc<Snapshot>) -> usize {
    let (repo, _) = weft::load::load(snapshot).expect("bench repository loads");
    let objects =
        weft::render::render_all(&repo, &weft::render::RenderOptions::default()).expect("renders");
    weft::render::output::to_yaml_stream(&objects)
        .expect("serialises")
        .len()
}

fn bench(c: &mut Criterion) {
    let snapshot = Arc::new(repository(10_000));
    let input_bytes: usize = snapshot.files.values().map(Vec::len).sum();

    // One measured run for peak memory, before criterion's repetitions.
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = render_to_yaml(snapshot.clone());
    let peak = PEAK.load(Ordering::Relaxed) - base;
    println!(
        "render 10,000 objects: input {:.1} MiB, output {:.1} MiB, peak heap {:.1} MiB",
        input_bytes as f64 / 1048576.0,
        out as f64 / 1048576.0,
        peak as f64 / 1048576.0
    );

    let mut group = c.benchmark_group("render");
    group.sample_size(10);
    group.bench_function("load+render+yaml 10k objects", |b| {
        b.iter(|| render_to_yaml(snapshot.clone()))
    });
    group.bench_function("load only 10k objects", |b| {
        b.iter(|| weft::load::load(snapshot.clone()).map(|(r, _)| r.len()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
