//! Armada chart rendering: a repository with 100 local charts (10 groups in one manifest, half
//! of them sequenced), each with a values.yaml, 3 templates full of placeholders and 2 overlays,
//! rendered end to end (load with reference checks + values merge + substitution + overlays +
//! ownership + order): 300 objects. Also the substitution alone on one large template.
//!
//! Run: `cargo bench --bench armada`

use std::collections::BTreeMap;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use weft::load::budget::Budget;
use weft::render::armada::{substitute, Builtins};
use weft::source::chart::ChartSources;
use weft::source::Snapshot;

const CHARTS: usize = 100;
const GROUPS: usize = 10;

fn repository() -> Snapshot {
    let mut files = BTreeMap::new();
    let mut crs = String::new();
    crs.push_str("apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaManifest\nmetadata: {name: site, namespace: default}\nspec:\n  release_prefix: bench\n  chart_groups:\n");
    for g in 0..GROUPS {
        crs.push_str(&format!("    - group-{g}\n"));
    }
    for g in 0..GROUPS {
        crs.push_str(&format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: group-{g}, namespace: default}}\nspec:\n  sequenced: {}\n  chart_group:\n",
            g % 2 == 0
        ));
        for c in 0..CHARTS / GROUPS {
            crs.push_str(&format!("    - chart-{}\n", g * (CHARTS / GROUPS) + c));
        }
    }
    for i in 0..CHARTS {
        let dir = format!("charts/chart-{i}");
        files.insert(
            format!("{dir}/Chart.yaml"),
            format!("name: chart-{i}\nversion: 1.0.{i}\nannotations:\n  weft.io/template-format: substitution\n").into_bytes(),
        );
        let mut values = String::from("image: {repository: example/app, tag: \"1.0\"}\nreplicas: 2\nport: 8080\nresources: {requests: {cpu: 10m, memory: 16Mi}}\n");
        for k in 0..20 {
            values.push_str(&format!("setting{k}: value-{k}\n"));
        }
        files.insert(format!("{dir}/values.yaml"), values.into_bytes());
        let mut config = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}-config\n  labels: {app: \"${release.name}\"}\ndata:\n");
        for k in 0..20 {
            config.push_str(&format!(
                "  SETTING_{k}: \"${{setting{k}}}-${{chart.version}}\"\n"
            ));
        }
        files.insert(format!("{dir}/templates/config.yaml"), config.into_bytes());
        files.insert(
            format!("{dir}/templates/deployment.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ${release.name}\n  labels: {app: \"${release.name}\"}\nspec:\n  replicas: ${replicas}\n  selector: {matchLabels: {app: \"${release.name}\"}}\n  template:\n    metadata: {labels: {app: \"${release.name}\"}}\n    spec:\n      containers:\n        - name: app\n          image: ${image.repository}:${image.tag}\n          ports: [{containerPort: \"${port}\"}]\n          resources: ${resources}\n          envFrom: [{configMapRef: {name: \"${release.name}-config\"}}]\n".as_bytes().to_vec(),
        );
        files.insert(
            format!("{dir}/templates/service.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: ${release.name}\n  labels: {app: \"${release.name}\"}\nspec:\n  selector: {app: \"${release.name}\"}\n  ports: [{port: 80, targetPort: \"${port}\"}]\n".as_bytes().to_vec(),
        );
        crs.push_str(&format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: chart-{i}, namespace: default}}\nspec:\n  release: chart-{i}\n  namespace: apps\n  source: {{type: local, location: {dir}}}\n  values:\n    replicas: 3\n    overlays:\n      - target: {{kind: Deployment}}\n        mergePatch: {{spec: {{template: {{metadata: {{annotations: {{rollout: \"1\"}}}}}}}}}}\n      - target: {{labelSelector: \"app=bench-chart-{i}\", kind: Service}}\n        jsonPatch: [{{op: add, path: /spec/type, value: ClusterIP}}]\n  wait: {{timeout: 300, resources: [{{type: deployment, min_ready: 50%}}]}}\n"
        ));
    }
    files.insert("armada.yaml".to_string(), crs.into_bytes());
    Snapshot {
        revision: None,
        files,
    }
}

fn bench(c: &mut Criterion) {
    let snapshot = Arc::new(repository());
    let (repo, _) = weft::load::load(snapshot.clone()).unwrap_or_else(|e| panic!("{e}"));
    let objects = weft::render::armada::render(
        &repo,
        &ChartSources::default(),
        &Default::default(),
        &Default::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(objects.objects.len(), CHARTS * 3);

    let mut group = c.benchmark_group("armada");
    group.sample_size(20);
    group.bench_function("load 100 charts (CRs, references, plan)", |b| {
        b.iter(|| {
            weft::load::load(snapshot.clone())
                .map(|(r, _)| r.armada.len())
                .unwrap_or(0)
        })
    });
    group.bench_function("render 100 charts (300 objects)", |b| {
        b.iter(|| {
            weft::render::armada::render(
                &repo,
                &ChartSources::default(),
                &Default::default(),
                &Default::default(),
            )
            .map(|o| o.objects.len())
            .unwrap_or(0)
        })
    });
    let values = json!({"a": {"b": {"c": "deep"}}, "n": 3, "list": [1, 2, 3], "map": {"x": 1}});
    let builtins = Builtins {
        release_name: "r".into(),
        release_namespace: "ns".into(),
        chart_name: "c".into(),
        chart_version: "1".into(),
    };
    let template = json!({"items": (0..1000).map(|i| json!({"name": format!("item-{i}-${{a.b.c}}"), "count": "${n}", "map": "${map}", "plain": "no placeholder here"})).collect::<Vec<_>>()});
    group.bench_function("substitute 3,000 placeholders", |b| {
        b.iter(|| {
            let mut t = template.clone();
            let mut problems = Vec::new();
            let mut budget = Budget::default();
            let _ = substitute(
                &mut t,
                String::new(),
                &values,
                &builtins,
                &mut budget,
                &mut problems,
            );
            problems.len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
