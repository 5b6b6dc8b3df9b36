use serde_json::json;

use super::*;

/// `helm template r app --include-crds` of helm v3.22.0, verbatim: a CRD file of two documents,
/// a plain object, a template whose first document is only a comment, and two hooks.
const HELM_OUTPUT: &str = "---
# Source: app/crds/crds.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: a.x.io
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: b.x.io

---
# Source: app/templates/deploy.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: c
data:
  v: \"false\"
---
# Source: app/templates/hooks.yaml
# comment
---
# Source: app/templates/hooks.yaml
apiVersion: v1
kind: Pod
metadata:
  name: t
  annotations:
    helm.sh/hook: test
---
# Source: app/templates/hooks.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: j
  annotations:
    \"helm.sh/hook\": pre-install
";

fn names(render: &HelmRender) -> Vec<(String, &str, &ObjectClass)> {
    render
        .objects
        .iter()
        .map(|o| (o.describe(), o.source_template.as_str(), &o.class))
        .collect()
}

fn hook(phases: &[HookPhase], weight: i32, delete_policies: &[HookDeletePolicy]) -> ObjectClass {
    ObjectClass::Hook(Hook {
        phases: phases.to_vec(),
        weight,
        delete_policies: delete_policies.to_vec(),
    })
}

#[test]
fn helm_output_is_split_with_sources_and_classified() {
    let render = parse_manifests(HELM_OUTPUT).unwrap();
    assert_eq!(
        names(&render),
        vec![
            (
                "CustomResourceDefinition/a.x.io".to_string(),
                "app/crds/crds.yaml",
                &ObjectClass::Crd
            ),
            (
                "CustomResourceDefinition/b.x.io".to_string(),
                "app/crds/crds.yaml",
                &ObjectClass::Crd
            ),
            (
                "ConfigMap/c".to_string(),
                "app/templates/deploy.yaml",
                &ObjectClass::Plain
            ),
            (
                "Pod/t".to_string(),
                "app/templates/hooks.yaml",
                &hook(&[HookPhase::Test], 0, &[])
            ),
            (
                "Job/j".to_string(),
                "app/templates/hooks.yaml",
                &hook(&[HookPhase::PreInstall], 0, &[])
            ),
        ]
    );
    assert_eq!(render.objects[2].value["data"], json!({"v": "false"}));
    assert!(render.warnings.is_empty(), "{:?}", render.warnings);
}

#[test]
fn empty_output_and_empty_documents_give_no_objects() {
    assert!(parse_manifests("").unwrap().objects.is_empty());
    let render =
        parse_manifests("---\n# Source: a/templates/x.yaml\n\n---\n# Source: a/templates/y.yaml\n# only a comment\n---\n~\n")
            .unwrap();
    assert!(render.objects.is_empty());
}

#[test]
fn hook_annotations_are_read_as_helm_reads_them() {
    // Shapes seen in openstack-helm: comma lists, quoted weights, spaces in policies.
    let text = "---
# Source: keystone/templates/job-db-sync.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: keystone-db-sync
  annotations:
    helm.sh/hook: post-install,post-upgrade
    helm.sh/hook-weight: \"-5\"
    helm.sh/hook-delete-policy: before-hook-creation, hook-succeeded
---
# Source: keystone/templates/pod-test.yaml
apiVersion: v1
kind: Pod
metadata:
  name: keystone-test
  annotations:
    \"helm.sh/hook\": test-success
    helm.sh/hook-weight: \"ten\"
---
# Source: keystone/templates/job-x.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: x
  annotations:
    helm.sh/hook: Pre-Delete, test-failure ,pre-delete
    helm.sh/hook-weight: 3
    helm.sh/hook-delete-policy: hook-failed,keep
";
    let render = parse_manifests(text).unwrap();
    let classes: Vec<&ObjectClass> = render.objects.iter().map(|o| &o.class).collect();
    assert_eq!(
        classes,
        vec![
            &hook(
                &[HookPhase::PostInstall, HookPhase::PostUpgrade],
                -5,
                &[
                    HookDeletePolicy::BeforeHookCreation,
                    HookDeletePolicy::HookSucceeded
                ]
            ),
            &hook(&[HookPhase::TestSuccess], 0, &[]),
            &hook(&[HookPhase::PreDelete], 3, &[HookDeletePolicy::HookFailed]),
        ]
    );
    assert_eq!(
        render.warnings,
        [
            "keystone/templates/pod-test.yaml: Pod/keystone-test: helm.sh/hook-weight `ten` is not an integer; weight 0 is used, as helm does",
            "keystone/templates/job-x.yaml: Job/x: unknown hook phase `test-failure` in helm.sh/hook is ignored, as helm does",
            "keystone/templates/job-x.yaml: Job/x: unknown helm.sh/hook-delete-policy `keep` is ignored",
        ]
    );
    let ObjectClass::Hook(test) = &render.objects[1].class else {
        panic!("not a hook")
    };
    assert!(test.is_test());
    assert_eq!(
        test.effective_delete_policies(),
        [HookDeletePolicy::BeforeHookCreation]
    );
}

#[test]
fn crds_of_subcharts_are_crds_and_crd_kinds_elsewhere_are_not() {
    assert!(is_crd_source("web/crds/a.yaml"));
    assert!(is_crd_source("web/charts/lib/crds/a.yaml"));
    assert!(is_crd_source("web/charts/lib/charts/inner/crds/sub/a.yaml"));
    assert!(!is_crd_source("web/templates/crds/a.yaml"));
    assert!(!is_crd_source("web/charts/crds/templates/a.yaml"));
    assert!(!is_crd_source("crds/a.yaml"));
    let render = parse_manifests(
        "---\n# Source: web/templates/crd.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a.x.io}\n",
    )
    .unwrap();
    assert_eq!(render.objects[0].class, ObjectClass::Plain);
}

#[test]
fn separators_with_content_and_documents_before_any_source() {
    let render = parse_manifests(
        "apiVersion: v1\nkind: A\n--- {apiVersion: v1, kind: B}\n---   \n# Source: c/templates/c.yaml\napiVersion: v1\nkind: C\n----not-a-separator: 1\n",
    )
    .unwrap();
    let got: Vec<(String, &str)> = render
        .objects
        .iter()
        .map(|o| (o.describe(), o.source_template.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("A/?".to_string(), "helm output"),
            ("B/?".to_string(), "helm output"),
            ("C/?".to_string(), "c/templates/c.yaml"),
        ]
    );
    assert_eq!(render.objects[2].value["----not-a-separator"], json!(1));
}

#[test]
fn documents_that_are_not_objects_name_their_template() {
    let err = parse_manifests("---\n# Source: w/templates/l.yaml\n- a\n- b\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "w/templates/l.yaml: rendered a document that is not a Kubernetes object: a YAML sequence instead of a mapping"
    );
    let err = parse_manifests("---\n# Source: w/templates/m.yaml\napiVersion: v1\nmetadata: {}\n")
        .unwrap_err();
    assert!(err.to_string().contains("`kind` is missing"), "{err}");
    let err =
        parse_manifests("---\n# Source: w/crds/c.yaml\nkind: [unclosed\nsecret: aHVudGVyMg==\n")
            .unwrap_err();
    assert!(
        matches!(&err, HelmError::OutputYaml { template, .. } if template == "w/crds/c.yaml"),
        "{err}"
    );
    // The parser's snippet of the document stays out of the message.
    assert!(!err.to_string().contains("aHVudGVyMg"), "{err}");
}

#[test]
fn deep_crd_schemas_parse() {
    // 100 levels of mappings: beyond serde-saphyr's default depth of 64.
    let mut doc =
        String::from("---\n# Source: w/crds/deep.yaml\napiVersion: v1\nkind: Deep\nspec:\n");
    for i in 0..100 {
        doc.push_str(&" ".repeat(2 * (i + 1)));
        doc.push_str("p:\n");
    }
    doc.push_str(&" ".repeat(202));
    doc.push_str("x: 1\n");
    assert_eq!(parse_manifests(&doc).unwrap().objects.len(), 1);
}

fn object(value: Value) -> RenderedObject {
    RenderedObject {
        value,
        source_template: "web/templates/cm.yaml".to_string(),
        class: ObjectClass::Plain,
    }
}

#[test]
fn unrendered_actions_are_refused_with_template_object_and_pointer() {
    let ok = object(
        json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "{ x }", "b": "${y}"}}),
    );
    reject_template_actions(std::slice::from_ref(&ok)).unwrap();

    let bad = object(json!({
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"a": "ok", "a/b": ["x", "port {{ .Values.port }}"]}
    }));
    let err = reject_template_actions(&[ok.clone(), bad]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "web/templates/cm.yaml: the rendered object ConfigMap/c still contains `{{` at /data/a~1b/1; an unrendered template action must never reach the cluster"
    );

    let key = object(
        json!({"kind": "ConfigMap", "metadata": {"name": "k"}, "data": {"{{ .Values.k }}": "v"}}),
    );
    let err = reject_template_actions(&[key]).unwrap_err();
    assert!(
        matches!(&err, HelmError::UnrenderedAction { pointer, .. } if pointer == "/data/{{ .Values.k }}"),
        "{err}"
    );
}

/// Issue 49 item 5: an nginx template in a ConfigMap's data keeps its `{{` (the workload's
/// template engine reads it), with a warning naming the key; braces anywhere else are refused.
#[test]
fn literal_braces_in_config_map_data_warn_and_elsewhere_are_refused() {
    let text = "---\n# Source: db/templates/configmap-ingress-etc.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: db-ingress-etc\ndata:\n  nginx.tmpl: |\n    {{ range $server := .Servers }}server {{ $server.Hostname }};{{ end }}\n  plain: x\n";
    let render = parse_manifests(text).unwrap();
    reject_template_actions(&render.objects).unwrap();
    assert_eq!(
        render.warnings,
        ["db/templates/configmap-ingress-etc.yaml: ConfigMap/db-ingress-etc: data key `nginx.tmpl` keeps a literal `{{`; applied as it is, for the workload that reads it (its own template engine); if the chart meant a Helm action there, it was not rendered"]
    );
    for bad in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "{{ x }}"}}, "data": {"t": "{{ ok }}"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}, "stringData": {"t": "{{ x }}"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "c", "annotations": {"a": "{{ x }}"}}}),
    ] {
        assert!(
            reject_template_actions(&[object(bad.clone())]).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn octal_modes_are_read_as_kubernetes_reads_them() {
    // openstack-helm's shape: `defaultMode: 0555` in a volume, as `helm install` sends it (365).
    let render = parse_manifests(
        "---\n# Source: keystone/templates/deployment-api.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: keystone-api\nspec:\n  template:\n    spec:\n      volumes:\n        - name: keystone-bin\n          configMap:\n            name: keystone-bin\n            defaultMode: 0555\n        - name: keystone-etc\n          secret:\n            secretName: keystone-etc\n            defaultMode: 0444\n",
    )
    .unwrap();
    let volumes = &render.objects[0].value["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["defaultMode"], json!(365));
    assert_eq!(volumes[1]["secret"]["defaultMode"], json!(292));
    assert_eq!(
        serde_json::to_string(&volumes[0]["configMap"]["defaultMode"]).unwrap(),
        "365"
    );
}

#[test]
fn duplicate_keys_are_warned_about_with_template_and_key() {
    // treasuremap's mariadb with monitoring: `securityContext` written twice.
    let render = parse_manifests(
        "---\n# Source: mariadb/templates/statefulset.yaml\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: mariadb-server\nspec:\n  template:\n    spec:\n      securityContext:\n        runAsUser: 0\n      containers: []\n      securityContext:\n        runAsUser: 999\n",
    )
    .unwrap();
    assert_eq!(
        render.objects[0].value["spec"]["template"]["spec"]["securityContext"],
        json!({"runAsUser": 999})
    );
    assert_eq!(
        render.warnings,
        ["mariadb/templates/statefulset.yaml: StatefulSet/mariadb-server: key `securityContext` appears twice in the mapping at /spec/template/spec (the later one at line 11 of the document); the last one is used, as helm and Kubernetes do"]
    );
    assert!(!render.warnings[0].contains("DuplicateKeyPolicy"));
}

#[test]
fn many_duplicate_keys_give_a_bounded_number_of_warnings() {
    let mut doc = String::from("---\n# Source: w/templates/d.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\ndata:\n");
    for _ in 0..1000 {
        doc.push_str("  k: v\n");
    }
    let render = parse_manifests(&doc).unwrap();
    assert_eq!(render.warnings.len(), MAX_DUPLICATE_WARNINGS + 1);
    assert!(render.warnings[MAX_DUPLICATE_WARNINGS].starts_with("979 more duplicate keys"));
}
