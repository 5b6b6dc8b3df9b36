//! Rendering charts: placeholders, values, namespaces, overlays, dependencies, errors.

use super::*;
use crate::api::armada::OverlayTarget;
use crate::api::owner::OwnerKind;
use crate::load::budget::Budget;
use chart::{check_object, target_matches};
use serde_json::json;

fn b() -> Builtins {
    Builtins {
        release_name: "demo-web".into(),
        release_namespace: "apps".into(),
        chart_name: "web".into(),
        chart_version: "1.2.0".into(),
    }
}

#[test]
fn whole_placeholders_keep_their_type() {
    let values = json!({"replicas": 3, "debug": true, "ports": [80, 443], "image": {"tag": "1.0"}});
    let sub = |s: &str| substitute_str(s, &values, &b(), &mut Budget::default());
    assert_eq!(sub("${replicas}").unwrap(), json!(3));
    assert_eq!(sub("${debug}").unwrap(), json!(true));
    assert_eq!(sub("${ports}").unwrap(), json!([80, 443]));
    assert_eq!(sub("${ports.1}").unwrap(), json!(443));
    assert_eq!(sub("${missing:=5}").unwrap(), json!(5));
    assert_eq!(sub("${missing:=false}").unwrap(), json!(false));
    assert_eq!(sub("${missing:=}").unwrap(), json!(""));
    assert_eq!(sub("${missing:=text here}").unwrap(), json!("text here"));
    assert_eq!(sub("${release.name}").unwrap(), json!("demo-web"));
}

#[test]
fn embedded_placeholders_become_text() {
    let values = json!({"image": {"repo": "nginx", "tag": 1.27}, "n": null});
    let sub = |s: &str| substitute_str(s, &values, &b(), &mut Budget::default());
    assert_eq!(
        sub("${image.repo}:${image.tag}").unwrap(),
        json!("nginx:1.27")
    );
    assert_eq!(sub("x-${missing:=5}").unwrap(), json!("x-5"));
    assert_eq!(sub("a${n}b").unwrap(), json!("ab"));
    assert_eq!(
        sub("echo $${HOME} costs $5").unwrap(),
        json!("echo ${HOME} costs $5")
    );
    assert_eq!(
        sub("${chart.name}-${chart.version}").unwrap(),
        json!("web-1.2.0")
    );
    assert!(sub("x ${image}")
        .unwrap_err()
        .to_string()
        .contains("is a mapping and cannot be written inside a string"));
}

#[test]
fn unresolved_and_malformed_placeholders_are_errors() {
    let values = json!({});
    let sub = |s: &str| substitute_str(s, &values, &b(), &mut Budget::default());
    assert_eq!(
        sub("${image.tag}").unwrap_err().to_string(),
        "unresolved placeholder `${image.tag}`: no value at `image.tag` and no default"
    );
    assert!(sub("${oops")
        .unwrap_err()
        .to_string()
        .contains("unterminated placeholder"));
    assert!(sub("${a b}")
        .unwrap_err()
        .to_string()
        .contains("is not a placeholder"));
}

#[test]
fn deep_merge_merges_maps_and_replaces_the_rest() {
    let mut base = json!({"a": {"x": 1, "y": [1, 2]}, "b": 1, "c": {"k": "v"}});
    deep_merge(
        &mut base,
        &json!({"a": {"y": [3], "z": true}, "b": {"now": "map"}, "c": null}),
    );
    assert_eq!(
        base,
        json!({"a": {"x": 1, "y": [3], "z": true}, "b": {"now": "map"}, "c": null})
    );
}

#[test]
fn namespaced_objects_get_the_release_namespace() {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
    check_object(&mut cm, "apps").unwrap();
    assert_eq!(cm["metadata"]["namespace"], "apps");
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}});
    check_object(&mut ns, "apps").unwrap();
    assert!(ns["metadata"].get("namespace").is_none());
    let mut other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
    check_object(&mut other, "apps").unwrap();
    assert_eq!(other["metadata"]["namespace"], "x");
    let mut nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    assert_eq!(
        check_object(&mut nameless, "apps").unwrap_err().1,
        "rendered object has no `metadata.name`"
    );
}

#[test]
fn overlay_targets() {
    let o = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "apps", "labels": {"app": "web"}}});
    let t = |v: Value| serde_json::from_value::<OverlayTarget>(v).unwrap();
    assert!(target_matches(
        &t(json!({"kind": "Deployment", "name": "web"})),
        &o
    ));
    assert!(target_matches(
        &t(json!({"labelSelector": "app=web", "namespace": "apps"})),
        &o
    ));
    assert!(!target_matches(
        &t(json!({"kind": "Deployment", "namespace": "other"})),
        &o
    ));
    assert!(!target_matches(
        &t(json!({"labelSelector": "app!=web"})),
        &o
    ));
    assert!(target_matches(
        &t(json!({"apiVersion": "apps/v1", "kind": "Deployment"})),
        &o
    ));
}

fn repo(files: &[(&str, &str)]) -> LoadedRepo {
    let mut snap = Snapshot::default();
    for (p, c) in files {
        snap.files.insert(p.to_string(), c.as_bytes().to_vec());
    }
    match crate::load::load(std::sync::Arc::new(snap)) {
        Ok((r, _)) => r,
        Err(e) => panic!("{e}"),
    }
}

const LIB_CHART: &[(&str, &str)] = &[
        ("charts/lib/Chart.yaml", "name: lib\nversion: 0.1.0\nannotations: {weft.io/template-format: substitution}\n"),
        ("charts/lib/values.yaml", "size: small\n"),
        (
            "charts/lib/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}-lib\ndata:\n  size: ${size}\n",
        ),
        ("charts/app/Chart.yaml", "name: app\nversion: 1.0.0\nannotations: {weft.io/template-format: substitution}\n"),
        (
            "charts/app/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}\ndata:\n  mode: ${mode:=fast}\n",
        ),
    ];

fn chart_doc(name: &str, extra: &str) -> String {
    format!("---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  release: {name}\n  namespace: ns\n  source: {{type: local, location: charts/{name}}}\n{extra}")
}

#[test]
fn dependencies_render_inside_the_parent_release_with_the_parents_values() {
    let charts = format!(
        "{}{}",
        chart_doc(
            "app",
            "  dependencies: [lib]\n  values:\n    lib: {size: large}\n"
        ),
        chart_doc("lib", "")
    );
    let mut files = LIB_CHART.to_vec();
    files.push(("armada.yaml", &charts));
    let repo = repo(&files);
    let objects = render(
        &repo,
        &ChartSources::default(),
        &HelmRenders::new(),
        &HelmFailures::new(),
    )
    .unwrap()
    .objects;
    let names: Vec<(&str, String)> = objects
        .iter()
        .map(|o| {
            (
                o.name(),
                o.object.value()["data"]
                    .as_object()
                    .unwrap()
                    .values()
                    .next()
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    // `lib` is only a dependency: it is rendered once, inside `app`, with app's values.lib.
    assert_eq!(
        names,
        vec![
            ("app", "fast".to_string()),
            ("app-lib", "large".to_string())
        ]
    );
    assert!(objects
        .iter()
        .all(|o| o.owner == Owner::resource(OwnerKind::ArmadaChart, "default", "app")));
}

#[test]
fn overlay_errors_point_at_the_overlay() {
    let overlays = "  values:\n    overlays:\n      - target: {kind: Deployment}\n        mergePatch: {spec: {}}\n      - target: {kind: ConfigMap}\n        jsonPatch: [{op: replace, path: /data/missing, value: x}]\n";
    let charts = chart_doc("app", overlays);
    let mut files = LIB_CHART.to_vec();
    files.push(("armada.yaml", &charts));
    let err = failures(&files);
    assert!(err.contains("armada.yaml:11:9: ArmadaChart `default/app`: `values.overlays[0]` matches no rendered object (target kind=Deployment)"), "{err}");
    assert!(err.contains("armada.yaml:13:9: ArmadaChart `default/app`: `values.overlays[1]` on ConfigMap `app`: JSON patch failed"), "{err}");
}

#[test]
fn two_charts_rendering_the_same_object_is_an_error() {
    let charts = format!(
        "{}{}",
        chart_doc("app", "  release: same\n"),
        chart_doc("lib", "")
    );
    let charts = charts.replace("  release: app\n", "");
    let mut files = LIB_CHART.to_vec();
    files.push((
        "charts/lib/templates/dup.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: same\n",
    ));
    files.push(("armada.yaml", &charts));
    let err = render(
        &repo(&files),
        &ChartSources::default(),
        &HelmRenders::new(),
        &HelmFailures::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ConfigMap `same` is rendered by ArmadaChart `default/lib` and by ArmadaChart `default/app`"), "{err}");
}

#[test]
fn git_charts_need_resolved_sources() {
    let charts = chart_doc("app", "").replace(
        "{type: local, location: charts/app}",
        "{type: git, location: https://example.com/charts.git}",
    );
    let mut files = LIB_CHART.to_vec();
    files.push(("armada.yaml", &charts));
    let err = failures(&files);
    assert!(err.contains("its git source was not fetched"), "{err}");
}

/// The charts of `files` that failed to render, as one text (the render itself succeeds).
fn failures(files: &[(&str, &str)]) -> String {
    let out = render(
        &repo(files),
        &ChartSources::default(),
        &HelmRenders::new(),
        &HelmFailures::new(),
    )
    .unwrap();
    assert!(!out.failures.is_empty(), "no chart failed");
    out.failures
        .iter()
        .map(|f| f.error.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_chart_helm_could_not_render_fails_alone_in_its_wave() {
    // `app` and `lib` are two charts of one group (wave 0); helm failed for `lib` only.
    let charts = format!("{}{}", chart_doc("app", ""), chart_doc("lib", ""));
    let mut files = LIB_CHART.to_vec();
    files.push(("armada.yaml", &charts));
    let repo = repo(&files);
    let lib = ResourceKey {
        namespace: "default".into(),
        name: "lib".into(),
    };
    let failed = HelmFailures::from([(
        lib,
        RenderError::Other(
            "ArmadaChart default/lib: helm template failed: lib/templates/x.yaml:3:4: boom".into(),
        ),
    )]);
    let out = render(
        &repo,
        &ChartSources::default(),
        &HelmRenders::new(),
        &failed,
    )
    .unwrap();
    assert_eq!(out.failures.len(), 1);
    let f = &out.failures[0];
    assert_eq!(
        f.owner,
        Owner::resource(OwnerKind::ArmadaChart, "default", "lib")
    );
    assert!(
        f.error.to_string().contains("x.yaml:3:4: boom"),
        "{}",
        f.error
    );
    // `app` still rendered; nothing of `lib`.
    assert!(!out.objects.is_empty());
    assert!(out.objects.iter().all(|o| match &o.owner {
        Owner {
            kind: OwnerKind::ArmadaChart,
            name,
            ..
        } => &**name == "app",
        _ => false,
    }));
}

/// `failures` on a thread with a small stack, for the cases that would blow up.
fn failures_on_small_stack(files: Vec<(&'static str, String)>) -> String {
    std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || {
            let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            failures(&files)
        })
        .unwrap()
        .join()
        .expect("rendering overflowed a 1 MiB stack")
}

fn lib_chart_with(armada: String) -> Vec<(&'static str, String)> {
    let mut files: Vec<(&'static str, String)> =
        LIB_CHART.iter().map(|(p, t)| (*p, t.to_string())).collect();
    files.push(("armada.yaml", armada));
    files
}

#[test]
fn a_json_patch_copying_an_object_into_itself_stops_at_the_budget() {
    // Each `copy` of /data into /data/dN doubles the ConfigMap: 40 would need 2^40 nodes.
    let ops: String = (0..40)
        .map(|i| format!("          - {{op: copy, from: /data, path: /data/d{i}}}\n"))
        .collect();
    let overlays = format!(
        "  values:\n    overlays:\n      - target: {{kind: ConfigMap}}\n        jsonPatch:\n{ops}"
    );
    let err = failures_on_small_stack(lib_chart_with(chart_doc("app", &overlays)));
    assert!(
        err.contains("armada.yaml:11:9: ArmadaChart `default/app`: `values.overlays[0]` on ConfigMap `app`: operation")
            && err.contains("would exceed the render budget"),
        "{err}"
    );
}

#[test]
fn a_json_patch_nesting_an_object_ever_deeper_stops_at_the_depth_bound() {
    // Each `copy` of /data into /data/x/…/x nests it one level deeper per operation.
    let ops: String = (1..400)
        .map(|i| {
            let path = "/x".repeat(i);
            format!("          - {{op: add, path: /data{path}, value: {{}}}}\n")
        })
        .collect();
    let overlays = format!(
        "  values:\n    overlays:\n      - target: {{kind: ConfigMap}}\n        jsonPatch:\n{ops}"
    );
    let err = failures_on_small_stack(lib_chart_with(chart_doc("app", &overlays)));
    assert!(
        err.contains("would nest values deeper than 256 levels"),
        "{err}"
    );
}

#[test]
fn a_whole_value_placeholder_copied_many_times_stops_at_the_budget() {
    // values.big: 10,000 nodes; the template uses it 200 times (2,000,000 nodes).
    let big: String = (0..10_000).map(|i| format!("{i}, ")).collect();
    let uses: String = (0..200).map(|i| format!("  k{i}: ${{big}}\n")).collect();
    let mut files = lib_chart_with(chart_doc("app", &format!("  values:\n    big: [{big}]\n")));
    files.push((
        "charts/app/templates/many.yaml",
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: many\ndata:\n{uses}"),
    ));
    let err = failures_on_small_stack(files);
    assert!(
        err.contains("charts/app/templates/many.yaml:")
            && err.contains(
                "substitution of `${big}` would produce more than 250000 YAML/JSON nodes"
            ),
        "{err}"
    );
    // One error, not one per remaining placeholder.
    assert_eq!(err.matches("substitution of").count(), 1, "{err}");
}

#[test]
fn a_string_placeholder_repeated_many_times_stops_at_the_byte_budget() {
    // 1 MiB of text interpolated 100 times into one string.
    let text = "x".repeat(1 << 20);
    let uses = "-${s}".repeat(100);
    let mut files = lib_chart_with(chart_doc("app", &format!("  values:\n    s: {text}\n")));
    files.push((
        "charts/app/templates/long.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: long\ndata:\n  v: \"{uses}\"\n"
        ),
    ));
    let err = failures_on_small_stack(files);
    assert!(err.contains("bytes of text"), "{err}");
}
