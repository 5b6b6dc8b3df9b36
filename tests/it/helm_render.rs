//! Charts rendered by the real helm (the pinned build from `tests/helm/ensure`): the fixture
//! charts under `tests/fixtures/helm/` (`web` with the library chart `weft-lib` as an Armada
//! dependency), helm's errors with file and line, Helm's `null` semantics, hooks, and the render
//! cache. No cluster. These tests fail, never skip, when helm cannot be built.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use serde_json::{json, Value};
use weft::helm::{
    chart_format, ChartFiles, ChartFormat, ChartTree, HelmError, HelmEvidence, HelmLocation,
    HelmRenderer, Hook, HookDeletePolicy, HookPhase, ObjectClass, RenderRequest,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

use support::helm::helm;

fn renderer() -> HelmRenderer {
    HelmRenderer::new(HelmLocation::Binary(helm().to_path_buf()))
}

/// The files of a fixture chart directory.
fn fixture(name: &str) -> ChartFiles {
    fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &format!("{name}/"), files);
            } else {
                files.insert(name, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(
        &root().join("tests/fixtures/helm").join(name),
        "",
        &mut files,
    );
    ChartFiles { files }
}

/// `web` with `weft-lib` as its Armada dependency.
fn web() -> ChartTree {
    ChartTree::new(fixture("web")).with_dependencies(vec![ChartTree::new(fixture("weft-lib"))])
}

fn render(tree: &ChartTree, values: &Value) -> Result<Arc<weft::helm::HelmRender>, HelmError> {
    renderer()
        .render(&RenderRequest::new(tree, "armada-web", "web", values))
        .map(|o| o.render)
}

fn find<'a>(
    render: &'a weft::helm::HelmRender,
    kind: &str,
    name: &str,
) -> &'a weft::helm::RenderedObject {
    render
        .objects
        .iter()
        .find(|o| o.value["kind"] == kind && o.value["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in the render"))
}

#[test]
fn a_chart_with_a_library_dependency_renders_with_hooks_and_crds_classified() {
    let render = render(&web(), &json!({})).unwrap();
    let got: Vec<(String, &str, &ObjectClass)> = render
        .objects
        .iter()
        .map(|o| (o.describe(), o.source_template.as_str(), &o.class))
        .collect();
    let migrate_hook = ObjectClass::Hook(Hook {
        phases: vec![HookPhase::PreInstall, HookPhase::PreUpgrade],
        weight: -5,
        delete_policies: vec![
            HookDeletePolicy::BeforeHookCreation,
            HookDeletePolicy::HookSucceeded,
        ],
    });
    let test_hook = ObjectClass::Hook(Hook {
        phases: vec![HookPhase::Test],
        weight: 0,
        delete_policies: vec![],
    });
    // helm's order: CRDs, then plain objects in install order, then hooks.
    assert_eq!(
        got,
        vec![
            (
                "CustomResourceDefinition/sites.web.weft.test".to_string(),
                "web/crds/sites.yaml",
                &ObjectClass::Crd
            ),
            (
                "ConfigMap/armada-web".to_string(),
                "web/templates/configmap.yaml",
                &ObjectClass::Plain
            ),
            (
                "Service/armada-web".to_string(),
                "web/templates/service.yaml",
                &ObjectClass::Plain
            ),
            (
                "Deployment/armada-web".to_string(),
                "web/templates/deployment.yaml",
                &ObjectClass::Plain
            ),
            (
                "Pod/armada-web-test".to_string(),
                "web/templates/tests/test-connection.yaml",
                &test_hook
            ),
            (
                "Job/armada-web-migrate".to_string(),
                "web/templates/job-migrate.yaml",
                &migrate_hook
            ),
        ]
    );
    assert!(render.warnings.is_empty(), "{:?}", render.warnings);

    // The library's named templates, through include, toYaml | nindent and the chart's values.
    let deployment = &find(&render, "Deployment", "armada-web").value;
    assert_eq!(
        deployment["metadata"]["labels"],
        json!({
            "app.kubernetes.io/name": "web",
            "app.kubernetes.io/instance": "armada-web",
            "app.kubernetes.io/version": "1.27.1",
            "app.kubernetes.io/part-of": "web",
            "helm.sh/chart": "web-1.2.0",
            "app.kubernetes.io/component": "frontend",
        })
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"],
        json!([{
            "name": "web",
            "image": "registry.example/nginx:1.27.1",
            "ports": [{"name": "http", "containerPort": 8080}],
            "resources": {
                "limits": {"cpu": "500m", "memory": "128Mi"},
                "requests": {"cpu": "100m", "memory": "64Mi"},
            },
        }])
    );
    assert_eq!(deployment["spec"]["replicas"], json!(2));
    // --namespace sets .Release.Namespace only; helm adds no metadata.namespace.
    assert_eq!(deployment["metadata"].get("namespace"), None);
    let config = &find(&render, "ConfigMap", "armada-web").value;
    assert_eq!(
        config["data"],
        json!({"greeting": "hello", "settings.yaml": "logLevel: info\nworkers: 4\n"})
    );
    let job = &find(&render, "Job", "armada-web-migrate").value;
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["migrate", "--release=armada-web", "--upgrade=false"])
    );
}

#[test]
fn values_merge_and_null_removes_a_default() {
    let values = json!({
        "replicaCount": 3,
        "image": {"tag": "1.28.0"},
        "resources": {"limits": null},
        "config": {"settings": {"workers": null, "extra": true}},
    });
    let render = render(&web(), &values).unwrap();
    let deployment = &find(&render, "Deployment", "armada-web").value;
    assert_eq!(deployment["spec"]["replicas"], json!(3));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    // The repository default stays; the tag is overridden.
    assert_eq!(container["image"], "registry.example/nginx:1.28.0");
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}})
    );
    let config = &find(&render, "ConfigMap", "armada-web").value;
    assert_eq!(
        config["data"]["settings.yaml"],
        "extra: true\nlogLevel: info\n"
    );
}

#[test]
fn upgrade_and_capabilities_reach_the_templates() {
    let tree = web();
    let values = json!({});
    let mut request = RenderRequest::new(&tree, "armada-web", "web", &values);
    request.is_upgrade = true;
    let render = renderer().render(&request).unwrap().render;
    let job = &find(&render, "Job", "armada-web-migrate").value;
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["args"][2],
        "--upgrade=true"
    );

    let caps = ChartTree::new(ChartFiles::from_pairs([
        ("Chart.yaml", "apiVersion: v2\nname: caps\nversion: 0.1.0\n"),
        (
            "templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: caps\ndata:\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n  monitoring: {{ .Capabilities.APIVersions.Has \"monitoring.coreos.com/v1\" | quote }}\n",
        ),
    ]));
    let mut request = RenderRequest::new(&caps, "caps", "default", &values);
    let data = |request: &RenderRequest<'_>| {
        renderer().render(request).unwrap().render.objects[0].value["data"].clone()
    };
    // The pinned helm is linked as a release build: its default is its client-go's Kubernetes.
    assert_eq!(
        data(&request),
        json!({"kube": "v1.37.0", "monitoring": "false"})
    );
    request.capabilities.kube_version = Some("v1.33.2".into());
    request.capabilities.api_versions = vec!["monitoring.coreos.com/v1".into()];
    assert_eq!(
        data(&request),
        json!({"kube": "v1.33.2", "monitoring": "true"})
    );
}

#[test]
fn required_fails_with_helms_template_file_and_line() {
    let err = render(&web(), &json!({"config": {"greeting": null}})).unwrap_err();
    let HelmError::Template(failure) = &err else {
        panic!("not a template failure: {err}");
    };
    let location = failure.location.as_ref().expect("a location");
    assert_eq!(location.file, "web/templates/configmap.yaml");
    assert_eq!((location.line, location.column), (Some(8), Some(15)));
    assert_eq!(location.message, "config.greeting is required");
    assert_eq!(
        err.to_string(),
        "helm template failed: web/templates/configmap.yaml:8:15: config.greeting is required"
    );

    // A `required` inside the library is reported where the chart includes it.
    let err = render(&web(), &json!({"image": {"repository": null}})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "helm template failed: web/templates/deployment.yaml:18:12: web: image.repository is required"
    );
}

#[test]
fn dependencies_replace_the_charts_directory_and_are_required() {
    // A stale subchart in the chart's own charts/ is dropped when Armada dependencies are given.
    let mut files = fixture("web");
    files.files.insert(
        "charts/stale/Chart.yaml".into(),
        b"apiVersion: v2\nname: stale\nversion: 0.0.1\n".to_vec(),
    );
    files.files.insert(
        "charts/stale/templates/cm.yaml".into(),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stale\n".to_vec(),
    );
    let tree = ChartTree::new(files).with_dependencies(vec![ChartTree::new(fixture("weft-lib"))]);
    let rendered = render(&tree, &json!({})).unwrap();
    assert!(rendered
        .objects
        .iter()
        .all(|o| o.value["metadata"]["name"] != "stale"));

    // Without them helm refuses the chart, naming the missing dependency.
    let err = render(&ChartTree::new(fixture("web")), &json!({})).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("missing in charts/ directory: weft-lib"),
        "{text}"
    );
}

#[test]
fn an_unchanged_render_is_served_from_the_cache_without_starting_helm() {
    let renderer = renderer();
    let tree = web();
    let values = json!({"replicaCount": 4});
    let request = RenderRequest::new(&tree, "armada-web", "web", &values);

    let first = renderer.render(&request).unwrap();
    assert!(!first.from_cache());
    assert_eq!(first.helm_version, "v3.22.0");
    // `helm version --short` once, `helm template` once.
    assert_eq!(renderer.launches(), 2);

    // Same inputs, rebuilt from scratch (as the next pass would): no helm process at all.
    let tree_again = web();
    let values_again = json!({"replicaCount": 4});
    let again = renderer
        .render(&RenderRequest::new(
            &tree_again,
            "armada-web",
            "web",
            &values_again,
        ))
        .unwrap();
    assert!(again.from_cache());
    assert_eq!(renderer.launches(), 2);
    assert_eq!(again.key, first.key);
    assert!(Arc::ptr_eq(&again.render, &first.render));

    // Changed values, or a changed template file, start helm again (but not `helm version`).
    let values_changed = json!({"replicaCount": 5});
    let changed = renderer
        .render(&RenderRequest::new(
            &tree,
            "armada-web",
            "web",
            &values_changed,
        ))
        .unwrap();
    assert!(!changed.from_cache());
    assert_eq!(renderer.launches(), 3);
    let mut files = fixture("web");
    files.files.insert(
        "templates/extra.yaml".into(),
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n".to_vec(),
    );
    let tree_changed =
        ChartTree::new(files).with_dependencies(vec![ChartTree::new(fixture("weft-lib"))]);
    let changed = renderer
        .render(&RenderRequest::new(
            &tree_changed,
            "armada-web",
            "web",
            &values,
        ))
        .unwrap();
    assert!(!changed.from_cache());
    assert_eq!(changed.render.objects.len(), first.render.objects.len() + 1);
    assert_eq!(renderer.launches(), 4);
    assert_eq!(renderer.cached_renders(), 3);
}

#[test]
fn braces_are_detected_as_helm_and_never_reach_the_output() {
    assert_eq!(
        chart_format(&fixture("web")).unwrap(),
        ChartFormat::Helm(HelmEvidence::ChartApiVersion("v2".into()))
    );
    // No Helm Chart.yaml (as Weft's own charts), but `{{` in a template: still a Helm chart,
    // and helm renders it.
    let braces = ChartFiles::from_pairs([
        ("Chart.yaml", "name: port\nversion: 1.0.0\n"),
        (
            "templates/svc.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: port\nspec:\n  ports:\n    - port: {{ .Values.port }}\n",
        ),
        ("values.yaml", "port: 8080\n"),
    ]);
    assert_eq!(
        chart_format(&braces).unwrap(),
        ChartFormat::Helm(HelmEvidence::TemplateAction("templates/svc.yaml".into()))
    );
    let rendered = render(&ChartTree::new(braces), &json!({})).unwrap();
    assert_eq!(
        rendered.objects[0].value["spec"]["ports"],
        json!([{"port": 8080}])
    );

    // A template that prints `{{` literally is refused, naming the template, unless allowed (in
    // an annotation: in a ConfigMap's data, braces are the workload's and only warned about).
    let literal = ChartTree::new(ChartFiles::from_pairs([
        ("Chart.yaml", "apiVersion: v2\nname: rules\nversion: 1.0.0\n"),
        (
            "templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rules\n  annotations:\n    summary: {{ \"{{ $labels.instance }} is down\" | quote }}\n",
        ),
    ]));
    let err = render(&literal, &json!({})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "rules/templates/cm.yaml: the rendered object ConfigMap/rules still contains `{{` at /metadata/annotations/summary; an unrendered template action must never reach the cluster"
    );
    let values = json!({});
    let mut request = RenderRequest::new(&literal, "rules", "default", &values);
    request.allow_literal_braces = true;
    let allowed = renderer().render(&request).unwrap();
    assert_eq!(
        allowed.render.objects[0].value["metadata"]["annotations"]["summary"],
        "{{ $labels.instance }} is down"
    );
}

#[test]
fn helm_warnings_with_success_are_warnings() {
    let chart = ChartTree::new(ChartFiles::from_pairs([
        ("Chart.yaml", "apiVersion: v2\nname: warn\nversion: 0.1.0\n"),
        ("values.yaml", "port: 80\n"),
        (
            "templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: warn\ndata:\n  port: {{ .Values.port | quote }}\n",
        ),
    ]));
    let render = render(&chart, &json!({"port": {"nested": 1}})).unwrap();
    assert_eq!(render.objects.len(), 1);
    assert_eq!(render.warnings.len(), 1, "{:?}", render.warnings);
    assert!(
        render.warnings[0].contains("skipped value for warn.port: Not a table"),
        "{:?}",
        render.warnings
    );
}

/// The `scalars` fixture chart: every YAML 1.1 scalar form a template can emit.
fn scalars() -> ChartTree {
    ChartTree::new(fixture("scalars"))
}

#[test]
fn yaml_1_1_scalars_in_helms_output_are_read_as_kubernetes_reads_them() {
    // What sigs.k8s.io/yaml (go-yaml v2's resolve rules, then encoding/json) makes of each form;
    // tests/it/helm_sync.rs checks the same chart against what `helm install` stores.
    let render = render(&scalars(), &json!({})).unwrap();
    let probe = &find(&render, "ScalarProbe", "scalars").value["spec"];
    assert_eq!(
        probe["integers"],
        json!({"octal": 365, "octalO": 292, "zero": 0, "hex": 31, "hexUpper": 31, "binary": 5,
               "plus": 12, "minusHex": -16, "underscores": 1000,
               "max": 9223372036854775807i64, "min": -9223372036854775808i64})
    );
    assert_eq!(
        probe["floats"],
        json!({"float": 1.5, "dot": 0.5, "exponent": 1000, "whole": 1, "notOctal": 8,
               "negative": -2.25, "small": 1e-7})
    );
    // Integers are JSON integers, never `365.0`: the API server refuses a float for an int field.
    assert_eq!(probe["integers"]["octal"].to_string(), "365");
    assert_eq!(probe["floats"]["whole"].to_string(), "1");
    let mut booleans = vec![json!(true); 11];
    booleans.extend(vec![json!(false); 11]);
    assert_eq!(probe["booleans"], json!(booleans));
    assert_eq!(probe["nulls"], json!([null, null, null, null]));
    assert_eq!(
        probe["strings"],
        json!([
            "0555",
            "yes",
            "yess",
            "1.2.3",
            "1:30",
            "0x",
            "+",
            ".",
            "1e999",
            "2001-12-14",
            "2001-12-14T21:59:43Z",
            "0b2",
            "0o9",
            "<<"
        ])
    );
    assert_eq!(
        probe["tagged"],
        json!(["0555", 16, 3, "hello", "12", "2001-12-14"])
    );
    assert_eq!(
        probe["keys"],
        json!({"true": "f", "false": "b", "365": "c", "1.5": "d", "1e+07": "e", "12": "g", "~": "h"})
    );
    // `y` is a YAML 1.1 boolean, as a key too: go-yaml v2 makes it `true`.
    assert_eq!(
        probe["anchors"],
        json!({"base": {"x": 1, "true": 2}, "merged": {"x": 1, "true": 3}, "first": {"a": 1},
               "list": {"a": 1, "x": 1, "true": 2}, "copy": {"x": 1, "true": 2}})
    );

    let deployment = &find(&render, "Deployment", "scalars").value["spec"];
    assert_eq!(deployment["replicas"], json!(1));
    assert_eq!(deployment["revisionHistoryLimit"], json!(8));
    assert_eq!(deployment["progressDeadlineSeconds"], json!(600));
    let pod = &deployment["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], json!(false));
    assert_eq!(pod["terminationGracePeriodSeconds"], json!(30));
    assert_eq!(pod["containers"][0]["tty"], json!(false));
    let modes: Vec<&Value> = (0..3)
        .map(|i| {
            let v = &pod["volumes"][i];
            if v["configMap"].is_object() {
                &v["configMap"]["defaultMode"]
            } else {
                &v["secret"]["defaultMode"]
            }
        })
        .collect();
    assert_eq!(modes, [&json!(365), &json!(292), &json!(256)]);

    // ConfigMap data stay strings; keys are made strings as Kubernetes makes them.
    assert_eq!(
        find(&render, "ConfigMap", "scalars").value["data"],
        json!({"mode": "0555", "answer": "yes", "true": "a key read as a boolean",
               "365": "a key read as an octal number", "time": "2001-12-14", "block": "0555\n",
               "twice": "last"})
    );
    // Duplicate keys: accepted, last wins, a warning names the template and the key.
    let duplicates: Vec<&String> = render
        .warnings
        .iter()
        .filter(|w| w.contains("appears twice"))
        .collect();
    assert_eq!(duplicates.len(), 2, "{:?}", render.warnings);
    assert!(
        duplicates.iter().any(|w| w.starts_with(
            "scalars/templates/configmap.yaml: ConfigMap/scalars: key `twice` appears twice in the mapping at /data"
        )),
        "{duplicates:?}"
    );
    assert!(
        duplicates.iter().any(|w| w.starts_with(
            "scalars/templates/probe.yaml: ScalarProbe/scalars: key `true` appears twice in the mapping at /spec/keys"
        )),
        "{duplicates:?}"
    );
    assert!(render
        .warnings
        .iter()
        .all(|w| !w.contains("DuplicateKeyPolicy")));
}

#[test]
fn infinities_are_refused_by_helm_itself_naming_the_template() {
    // helm converts its output to JSON as Kubernetes' client does, and JSON has no infinity:
    // the render fails before Weft reads it (Weft's reader refuses `.inf` too, see yaml11.rs).
    let chart = ChartTree::new(ChartFiles::from_pairs([
        ("Chart.yaml", "apiVersion: v2\nname: inf\nversion: 0.1.0\n"),
        (
            "templates/cm.yaml",
            "apiVersion: weft.test/v1\nkind: ScalarProbe\nmetadata:\n  name: inf\nspec:\n  limit: .inf\n",
        ),
    ]));
    let err = render(&chart, &json!({})).unwrap_err().to_string();
    assert!(err.contains("inf/templates/cm.yaml"), "{err}");
    assert!(err.contains("+Inf"), "{err}");
}
