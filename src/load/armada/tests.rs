//! Loading Armada documents: conversion, schema errors with positions, references, the plan.

use super::*;
use crate::load::yaml::{parse_documents, YamlLimits};
use crate::load::Severity;

fn raw_docs(file: &str, text: &str) -> Vec<RawDoc> {
    parse_documents(text, YamlLimits::default())
        .unwrap()
        .into_iter()
        .filter(|d| !d.value.is_null())
        .map(|d| RawDoc {
            origin: Origin {
                file: file.to_string(),
                pos: d.positions.get("").unwrap_or(d.start),
            },
            value: d.value,
            positions: d.positions,
        })
        .collect()
}

fn load_text(text: &str) -> (ArmadaDocs, Diagnostics) {
    let mut diags = Diagnostics::default();
    let docs = load(raw_docs("armada.yaml", text), &mut diags);
    diags.0.sort();
    (docs, diags)
}

fn errors(d: &Diagnostics) -> Vec<String> {
    d.0.iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect()
}
fn warnings(d: &Diagnostics) -> Vec<String> {
    d.0.iter()
        .filter(|d| d.severity == Severity::Warning)
        .map(|d| d.to_string())
        .collect()
}

const NATIVE: &str = r#"
schema: armada/Manifest/v1
metadata: {schema: metadata/Document/v1, name: site}
data:
  release_prefix: demo
  chart_groups: [infra, apps]
---
schema: armada/ChartGroup/v1
metadata: {schema: metadata/Document/v1, name: infra}
data:
  description: infrastructure
  chart_group: [db]
---
schema: armada/ChartGroup/v2
metadata: {schema: metadata/Document/v1, name: apps}
data:
  sequenced: true
  chart_group: [api, web]
---
schema: armada/Chart/v1
metadata: {schema: metadata/Document/v1, name: db}
data:
  chart_name: db
  release: db
  namespace: demo
  test: false
  source: {type: local, location: charts/db, subpath: .}
  dependencies: []
---
schema: armada/Chart/v2
metadata: {schema: metadata/Document/v1, name: api}
data:
  release: api
  namespace: demo
  wait:
    timeout: 120
    resources:
      deployment: {labels: {app: api}, min_ready: 50%}
      job: [{labels: {app: migrate}}]
  source: {type: git, location: ../charts-repo, subpath: api, reference: main}
---
schema: armada/Chart/v2
metadata: {schema: metadata/Document/v1, name: web}
data:
  release: web
  namespace: demo
  source: {type: local, location: charts/web}
"#;

#[test]
fn native_documents_become_crs_and_a_plan() {
    let (docs, diags) = load_text(NATIVE);
    assert!(errors(&diags).is_empty(), "{:?}", diags.0);
    assert_eq!(
        (docs.charts.len(), docs.groups.len(), docs.manifests.len()),
        (3, 2, 1)
    );
    let api = docs.chart("default", "api").unwrap();
    let res = api
        .resource
        .spec
        .wait
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap();
    // Armada v2's five types, jobs first; `deployment` and `job` as the mapping says.
    assert_eq!(res.len(), 5);
    assert_eq!(
        res[3].type_,
        crate::api::armada::WaitResourceType::Deployment
    );
    assert_eq!(res[0].labels["app"], "migrate");
    assert_eq!(api.native_schema.as_deref(), Some("armada/Chart/v2"));
    let w = warnings(&diags);
    assert!(
        w.iter()
            .any(|w| w.contains("wait.resources") && w.starts_with("armada.yaml:")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.contains("`test: false` is the deprecated")),
        "{w:?}"
    );
    let plan = docs.deployment_plan();
    let order: Vec<(String, u32, Option<String>)> = plan
        .iter()
        .map(|p| {
            (
                docs.charts[p.chart].resource.metadata.name.clone().unwrap(),
                p.wave,
                p.release_prefix.clone(),
            )
        })
        .collect();
    assert_eq!(
        order,
        vec![
            ("db".to_string(), 1, Some("demo".to_string())),
            ("api".to_string(), 2, Some("demo".to_string())),
            ("web".to_string(), 3, Some("demo".to_string())),
        ]
    );
}

#[test]
fn unknown_and_bad_fields_name_file_line_and_field() {
    let (_, diags) = load_text(
            "schema: armada/Chart/v1\nmetadata: {name: db}\ndata:\n  release: db\n  namespace: demo\n  relase_prefix: x\n  wait: {timeout: 0}\n  source: {type: svn, location: x}\n",
        );
    let e = errors(&diags);
    assert!(
        e.iter().any(|e| e.starts_with("armada.yaml:6:3:")
            && e.contains("unknown field `relase_prefix` in `data`")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e.starts_with("armada.yaml:7:")
            && e.contains("`data.wait.timeout` must be at least 1")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e
            .contains("`data.source.type` must be one of local, git, tar, helm, oci, not `svn`")),
        "{e:?}"
    );
}

#[test]
fn min_ready_must_be_a_count_or_percentage() {
    let cr = |min_ready: &str| {
        format!(
                "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: a, namespace: n}}\nspec:\n  release: a\n  namespace: n\n  source: {{type: local, location: c}}\n  wait:\n    resources:\n      - type: deployment\n        min_ready: {min_ready}\n"
            )
    };
    let (_, d) = load_text(&cr("\"80%\""));
    assert!(errors(&d).is_empty(), "{:?}", d.0);
    let (_, d) = load_text(&cr("2"));
    assert!(errors(&d).is_empty(), "{:?}", d.0);
    let (_, d) = load_text(&cr("most"));
    let e = errors(&d);
    assert!(
        e.iter().any(|e| e.starts_with("armada.yaml:11:9:")
            && e.contains("min_ready")
            && e.contains("pattern")),
        "{e:?}"
    );
    let (_, d) = load_text(&cr("\"150%\""));
    assert!(!errors(&d).is_empty());
    let (_, d) = load_text(&cr("-1"));
    assert!(
        errors(&d)
            .iter()
            .any(|e| e.contains("must not be negative")),
        "{:?}",
        d.0
    );
}

#[test]
fn dangling_references_name_both_ends() {
    let (_, diags) = load_text(
            "schema: armada/Manifest/v1\nmetadata: {name: m}\ndata: {release_prefix: p, chart_groups: [grup]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: group}\ndata: {chart_group: [web, ghost]}\n---\nschema: armada/Chart/v2\nmetadata: {name: web}\ndata: {release: web, namespace: x, dependencies: [lib], source: {type: local, location: c}}\n",
        );
    let e = errors(&diags);
    assert!(e.iter().any(|e| e.starts_with("armada.yaml:3:") && e.contains("ArmadaManifest `default/m` lists chart group `grup`, but there is no ArmadaChartGroup `grup`") && e.contains("did you mean `group`")), "{e:?}");
    assert!(
        e.iter().any(|e| e.starts_with("armada.yaml:7:")
            && e.contains("lists chart `ghost`, but there is no ArmadaChart `ghost`")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e.contains(
            "ArmadaChart `default/web` depends on `lib`, but there is no ArmadaChart `lib`"
        )),
        "{e:?}"
    );
}

#[test]
fn dependency_cycles_are_errors() {
    let chart = |name: &str, deps: &str| {
        format!("---\nschema: armada/Chart/v2\nmetadata: {{name: {name}}}\ndata: {{release: {name}, namespace: x, dependencies: [{deps}], source: {{type: local, location: c}}}}\n")
    };
    let text = format!(
        "{}{}{}{}",
        chart("a", "b"),
        chart("b", "c"),
        chart("c", "a"),
        chart("d", "d")
    );
    let (_, diags) = load_text(&text);
    let e = errors(&diags);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e.iter()
            .any(|e| e.contains("dependency cycle") && e.contains("`a` → `b` → `c` → `a`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.contains("ArmadaChart `default/d` depends on `d`")),
        "{e:?}"
    );
}

#[test]
fn a_chart_in_two_groups_and_duplicates_are_errors() {
    let text = "schema: armada/ChartGroup/v1\nmetadata: {name: g1}\ndata: {chart_group: [a]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: g2}\ndata: {chart_group: [a]}\n---\nschema: armada/Chart/v2\nmetadata: {name: a}\ndata: {release: a, namespace: x, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: a, namespace: default}\nspec: {release: a, namespace: x, source: {type: local, location: c}}\n";
    let (_, diags) = load_text(text);
    let e = errors(&diags);
    assert!(
        e.iter().any(|e| e.contains(
            "is listed by ArmadaChartGroup `default/g2` and by ArmadaChartGroup `default/g1`"
        )),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e.starts_with("armada.yaml:13:")
            && e.contains("ArmadaChart `default/a` is defined twice: first at armada.yaml:9:")),
        "{e:?}"
    );
}

#[test]
fn fields_weft_cannot_act_on_are_warnings() {
    let text = "schema: armada/Chart/v1\nmetadata: {name: a}\ndata:\n  chart_name: a\n  release: a\n  namespace: x\n  timeout: 100\n  test: {enabled: true, options: {cleanup: true}}\n  install: {no_hooks: false}\n  upgrade:\n    no_hooks: false\n    pre:\n      delete: [{type: job, labels: {app: a}}]\n      create: [{type: pod}]\n    options: {force: true}\n  wait: {native: {enabled: true}}\n  source: {type: git, location: https://example.com/r.git, subpath: a, proxy_server: p, auth_method: ssh}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: g}\ndata: {chart_group: [a], test_charts: true}\n";
    let (docs, diags) = load_text(text);
    assert!(errors(&diags).is_empty(), "{:?}", diags.0);
    let w = warnings(&diags);
    for (line, field) in [
        (7, "`data.timeout` is deprecated"),
        (8, "`data.test` is accepted but ignored"),
        (9, "`data.install.no_hooks`"),
        (14, "`data.upgrade.pre.create`"),
        (15, "`data.upgrade.options.force`"),
        (16, "`data.wait.native`"),
        (17, "`data.source.proxy_server`"),
        (17, "`data.source.auth_method`"),
        (21, "`data.test_charts`"),
    ] {
        assert!(
            w.iter()
                .any(|w| w.starts_with(&format!("armada.yaml:{line}:")) && w.contains(field)),
            "{field} at {line}: {w:?}"
        );
    }
    // `upgrade.no_hooks` is acted on (an upgrade runs no hook): no warning says otherwise.
    assert!(
        !w.iter().any(|w| w.contains("`data.upgrade.no_hooks`")),
        "{w:?}"
    );
    let up = docs.charts[0].resource.spec.upgrade.as_ref().unwrap();
    assert_eq!(up.pre.as_ref().unwrap().delete[0].type_, "job");
}

#[test]
fn v2_wait_resources_by_type_keep_armadas_defaults() {
    let text = "schema: armada/Chart/v2\nmetadata: {name: a}\ndata:\n  release: a\n  namespace: x\n  source: {type: local, location: c}\n  wait:\n    labels: {release_group: a}\n    resources:\n      daemonset: false\n      statefulset: {allow_async_updates: true, min_ready: 1}\n      job: [{labels: {component: db-init}}, {labels: {component: bootstrap}, required: false}]\n---\nschema: armada/Chart/v2\nmetadata: {name: b}\ndata:\n  release: b\n  namespace: x\n  source: {type: local, location: c}\n---\nschema: armada/Chart/v1\nmetadata: {name: c}\ndata:\n  chart_name: c\n  release: c\n  namespace: x\n  source: {type: local, location: c}\n";
    let (docs, diags) = load_text(text);
    assert!(errors(&diags).is_empty(), "{:?}", diags.0);
    let waits = |name: &str| {
        docs.chart("default", name)
            .unwrap()
            .resource
            .spec
            .wait
            .as_ref()
            .and_then(|w| w.resources.clone())
            .map(|r| {
                r.iter()
                    .map(|r| {
                        format!(
                            "{}{}{}{}",
                            r.type_.kind(),
                            r.labels
                                .iter()
                                .map(|(k, v)| format!(" {k}={v}"))
                                .collect::<String>(),
                            match r.required {
                                Some(false) => " optional",
                                _ => "",
                            },
                            match r.allow_async_updates {
                                Some(true) => " async",
                                _ => "",
                            }
                        )
                    })
                    .collect::<Vec<_>>()
            })
    };
    // Jobs first, as Armada waits; a listed type replaces its default (required unless it says
    // otherwise); `daemonset: false` drops the type; the others keep `required: false`.
    assert_eq!(
        waits("a").unwrap(),
        vec![
            "Job component=db-init",
            "Job component=bootstrap optional",
            "StatefulSet async",
            "Deployment optional",
            "Pod optional",
        ]
    );
    // v2 without `resources`: every type, none required.
    assert_eq!(
        waits("b").unwrap(),
        vec![
            "Job optional",
            "DaemonSet optional",
            "StatefulSet optional",
            "Deployment optional",
            "Pod optional",
        ]
    );
    // v1 without `resources`: left to the CRD's default (jobs if any, pods required).
    assert_eq!(waits("c"), None);
}

#[test]
fn upgrade_delete_types_are_checked() {
    let (_, d) = load_text("schema: armada/Chart/v2\nmetadata: {name: a}\ndata:\n  release: a\n  namespace: x\n  source: {type: local, location: c}\n  upgrade:\n    pre:\n      delete:\n        - {type: job, labels: {a: b}}\n        - {type: deployment}\n");
    let e = errors(&d);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("armada.yaml:11:12:")
            && e[0].contains("`data.upgrade.pre.delete[1].type` `deployment` cannot be deleted"),
        "{e:?}"
    );
}

#[test]
fn local_paths_may_not_leave_the_repository() {
    let (_, d) = load_text("schema: armada/Chart/v2\nmetadata: {name: a}\ndata: {release: a, namespace: x, source: {type: local, location: ../other, subpath: x}}\n");
    assert!(
        errors(&d)
            .iter()
            .any(|e| e.contains("`data.source.location`") && e.contains("leaves the repository")),
        "{:?}",
        d.0
    );
    let (_, d) = load_text("schema: armada/Chart/v2\nmetadata: {name: a}\ndata: {release: a, namespace: x, source: {type: git, location: ../other, subpath: ../../x}}\n");
    assert!(
        errors(&d)
            .iter()
            .any(|e| e.contains("`data.source.subpath`")),
        "{:?}",
        d.0
    );
}

#[test]
fn unknown_schema_and_bad_names() {
    let (_, d) = load_text("schema: armada/Chart/v3\nmetadata: {name: a}\ndata: {}\n---\nschema: armada/Chart/v1\nmetadata: {name: My_Chart}\ndata: {release: a, namespace: x, source: {type: local, location: c}}\n");
    let e = errors(&d);
    assert!(
        e.iter().any(|e| e.starts_with("armada.yaml:1:")
            && e.contains("unknown Armada document schema `armada/Chart/v3`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.contains("`metadata.name` `My_Chart` cannot name a Kubernetes resource")),
        "{e:?}"
    );
}

#[test]
fn plan_puts_lone_groups_and_charts_after_manifests_and_skips_dependency_only_charts() {
    let text = "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {name: g, namespace: n}\nspec: {chart_group: [a, b]}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: a, namespace: n}\nspec: {release: a, namespace: n, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: b, namespace: n}\nspec: {release: b, namespace: n, dependencies: [lib], source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: lib, namespace: n}\nspec: {release: lib, namespace: n, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: solo, namespace: n}\nspec: {release: solo, namespace: n, source: {type: local, location: c}}\n";
    let (docs, d) = load_text(text);
    assert!(errors(&d).is_empty(), "{:?}", d.0);
    let plan: Vec<(String, u32)> = docs
        .deployment_plan()
        .iter()
        .map(|p| {
            (
                docs.charts[p.chart].resource.metadata.name.clone().unwrap(),
                p.wave,
            )
        })
        .collect();
    assert_eq!(
        plan,
        vec![("a".into(), 1), ("b".into(), 1), ("solo".into(), 2)]
    );
}

#[test]
fn airshipit_v1_and_keleustes_documents_are_read_as_weft_s_own() {
    let text = "apiVersion: armada.airshipit.org/v1\nkind: ArmadaChart\nmetadata: {name: blog-1, namespace: n}\nspec: {release: blog-1, namespace: blog, source: {type: local, location: c}}\n---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: blog-2}\nspec:\n  release: blog-2\n  namespace: blog\n  target_state: deployed\n  source: {type: local, location: c}\n";
    let (docs, diags) = load_text(text);
    assert_eq!(errors(&diags), Vec::<String>::new());
    let keys: Vec<String> = docs
        .charts
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c.resource.metadata.namespace.as_deref().unwrap_or(""),
                c.resource.metadata.name.as_deref().unwrap_or("")
            )
        })
        .collect();
    // Without a namespace, a document defaults as a native one does.
    assert_eq!(keys, ["n/blog-1", &format!("{NATIVE_NAMESPACE}/blog-2")]);
    assert_eq!(
        warnings(&diags),
        ["armada.yaml:12:3: warning: `spec.target_state` (an armada-operator field) is ignored: Weft deploys every chart it is given"]
    );
}

fn native_chart(name: &str, deps: &[String]) -> String {
    format!(
        "---\nschema: armada/Chart/v2\nmetadata: {{name: {name}}}\ndata: {{release: {name}, namespace: x, dependencies: [{}], source: {{type: local, location: c}}}}\n",
        deps.join(", ")
    )
}

/// Load `text` on a thread with a small stack: the graph walks must not recurse per chart.
fn load_on_small_stack(text: String) -> Vec<String> {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || errors(&load_text(&text).1))
        .unwrap()
        .join()
        .expect("loading overflowed a 256 KiB stack")
}

#[test]
fn a_long_dependency_chain_is_refused_at_its_bound_without_deep_recursion() {
    let n = 5_000;
    let text: String = (0..n)
        .map(|i| {
            let deps = if i + 1 < n {
                vec![format!("c{}", i + 1)]
            } else {
                vec![]
            };
            native_chart(&format!("c{i}"), &deps)
        })
        .collect();
    let e = load_on_small_stack(text);
    // Reported once, where the chain first passes the bound (the 33rd chart from the end).
    assert_eq!(e.len(), 1, "{e:?}");
    let at = n - MAX_DEPENDENCY_DEPTH - 1;
    assert!(
        e[0].contains(&format!("ArmadaChart `default/c{at}`"))
            && e[0].contains("nested deeper than 32 levels")
            && e[0].starts_with("armada.yaml:"),
        "{e:?}"
    );
}

#[test]
fn a_long_dependency_cycle_is_found_without_deep_recursion() {
    let n = 5_000;
    let text: String = (0..n)
        .map(|i| native_chart(&format!("c{i}"), &[format!("c{}", (i + 1) % n)]))
        .collect();
    let e = load_on_small_stack(text);
    let cycles: Vec<&String> = e
        .iter()
        .filter(|e| e.contains("dependency cycle"))
        .collect();
    assert_eq!(cycles.len(), 1, "{}", e.len());
    // Named by its ends, not by all 5,000 charts.
    assert!(
        cycles[0].contains("(`c0` → `c1` → `c2` → … 4995 more … → `c4998` → `c4999` → `c0`)"),
        "{}",
        &cycles[0][..cycles[0].len().min(400)]
    );
}

#[test]
fn a_dependency_diamond_repeated_per_level_is_refused_by_tree_size() {
    // d0 → {l1, r1} → d1 → {l2, r2} → d2 …: 2^levels paths to the last chart.
    let levels = 20;
    let mut text = String::new();
    for i in 0..levels {
        let d = |j: usize| format!("d{j}");
        text.push_str(&native_chart(&d(i), &[format!("l{i}"), format!("r{i}")]));
        text.push_str(&native_chart(&format!("l{i}"), &[d(i + 1)]));
        text.push_str(&native_chart(&format!("r{i}"), &[d(i + 1)]));
    }
    text.push_str(&native_chart(&format!("d{levels}"), &[]));
    let e = load_on_small_stack(text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("dependency tree expands to more than 256 charts"),
        "{e:?}"
    );
    // A shared dependency alone (one diamond) is fine.
    let one = [
        native_chart("top", &["l".into(), "r".into()]),
        native_chart("l", &["base".into()]),
        native_chart("r", &["base".into()]),
        native_chart("base", &[]),
    ]
    .concat();
    assert_eq!(load_on_small_stack(one), Vec::<String>::new());
}

#[test]
fn native_documents_keep_their_annotations_and_labels() {
    let text = "schema: armada/Chart/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: alerts\n  labels: {component: alerts}\n  annotations:\n    weft.io/literal-braces: allow\n  storagePolicy: cleartext\ndata: {release: alerts, namespace: x, source: {type: local, location: c}}\n---\nschema: armada/Chart/v1\nmetadata:\n  name: bad\n  annotations:\n    weft.io/retries: 3\ndata: {release: bad, namespace: x, source: {type: local, location: c}}\n";
    let (docs, diags) = load_text(text);
    let c = docs.chart(NATIVE_NAMESPACE, "alerts").unwrap();
    let annotations = c.resource.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("weft.io/literal-braces")
            .map(String::as_str),
        Some("allow")
    );
    let labels = c.resource.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("component").map(String::as_str), Some("alerts"));
    // A value that is not a string is an error at its line, not a failed conversion.
    assert_eq!(
        errors(&diags),
        ["armada.yaml:15:5: `metadata.annotations.weft.io/retries` must be a string (quote it)"]
    );
    assert!(docs.chart(NATIVE_NAMESPACE, "bad").is_none());
}

/// The airshipit armada-operator's `v1` ArmadaChart keeps its spec under `data:` (its Go type's
/// `Spec ArmadaChartSpec json:"data"`), with a few fields of its own.
#[test]
fn the_airshipit_operator_s_data_form_is_read_as_written() {
    let text = "apiVersion: armada.airshipit.org/v1\nkind: ArmadaChart\nmetadata:\n  name: mariadb\n  namespace: openstack\n  annotations: {weft.io/literal-braces: allow}\ndata:\n  chart_name: mariadb\n  release: mariadb\n  namespace: openstack\n  source: {type: tar, location: 'http://charts.example/mariadb.tgz', subpath: mariadb}\n  values: {pod: {replicas: {server: 1}}}\n  wait:\n    timeout: 600\n    labels: {release_group: airship-mariadb}\n    resources:\n      - type: statefulset\n        min_ready: '1'\n        namespace: openstack\n        condition: Ready\n        delay: 5\n  upgrade:\n    pre:\n      cleanup: true\n      update_crd: false\n      delete: [{type: job, labels: {release_group: airship-mariadb}}]\n---\napiVersion: armada.airshipit.org/v1\nkind: ArmadaChart\nmetadata: {name: typo}\ndata:\n  release: typo\n  namespace: x\n  relase: y\n  source: {type: local, location: c}\n";
    let (docs, diags) = load_text(text);
    let c = docs
        .chart("openstack", "mariadb")
        .expect("the v1 data form is read");
    let spec = &c.resource.spec;
    assert_eq!(spec.release, "mariadb");
    assert_eq!(spec.source.subpath.as_deref(), Some("mariadb"));
    assert_eq!(spec.values["pod"]["replicas"]["server"], 1);
    let wait = spec.wait.as_ref().unwrap();
    assert_eq!(wait.timeout, Some(600));
    assert_eq!(wait.resources.as_ref().map(Vec::len), Some(1));
    assert_eq!(
        c.resource
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("weft.io/literal-braces"))
            .map(String::as_str),
        Some("allow")
    );
    // Errors and warnings name `data.…` at its line.
    assert_eq!(c.field_name("/wait/timeout"), "data.wait.timeout");
    assert_eq!(c.origin_of("/wait/timeout").to_string(), "armada.yaml:14:5");
    let w = warnings(&diags);
    for (line, field) in [
        (19, "wait.resources[0].namespace"),
        (20, "wait.resources[0].condition"),
        (21, "wait.resources[0].delay"),
        (24, "upgrade.pre.cleanup"),
        (25, "upgrade.pre.update_crd"),
    ] {
        assert!(
            w.iter()
                .any(|w| w.starts_with(&format!("armada.yaml:{line}:"))
                    && w.contains(&format!(
                        "`data.{field}` (an armada-operator field) is ignored"
                    ))),
            "{field}: {w:?}"
        );
    }
    let e = errors(&diags);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("armada.yaml:34:3: ") && e[0].contains("relase"),
        "{e:?}"
    );
    assert!(docs.chart(NATIVE_NAMESPACE, "typo").is_none());
}

/// A treasuremap site holds Pegleg and Deckhand documents beside Armada's: each is an
/// unsupported schema at its file and line, never a Kubernetes object without `apiVersion`.
#[test]
fn pegleg_and_deckhand_documents_are_an_unsupported_schema() {
    let text = "schema: pegleg/SoftwareVersions/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: software-versions\n  layeringDefinition: {abstract: false, layer: global}\n  storagePolicy: cleartext\ndata: {charts: {}}\n---\nschema: deckhand/Passphrase/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: osh_keystone_admin_password\n  storagePolicy: encrypted\ndata: password\n";
    let docs = raw_docs("site/secrets.yaml", text);
    assert!(docs.iter().all(|d| is_native(&d.value)));
    let mut diags = Diagnostics::default();
    load(docs, &mut diags);
    let e = errors(&diags);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("site/secrets.yaml:1:1: unsupported document schema `pegleg/SoftwareVersions/v1`: this is a Pegleg/Deckhand document"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with(
            "site/secrets.yaml:9:1: unsupported document schema `deckhand/Passphrase/v1`"
        ),
        "{e:?}"
    );
    assert!(
        e.iter().all(|e| !e.contains("missing required field")),
        "{e:?}"
    );
    // A Kubernetes object with a field called `schema` stays a Kubernetes object.
    let k8s = raw_docs(
        "a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nschema: x/Y/v1\n",
    );
    assert!(!is_native(&k8s[0].value));
}

/// Two manifests that list the same groups, as treasuremap's `full-site` and `cluster-bootstrap`,
/// and a chart that only the second one's groups list.
const TWO_MANIFESTS: &str = "schema: armada/Manifest/v1\nmetadata: {name: full-site}\ndata: {release_prefix: airship, chart_groups: [infra, apps]}\n---\nschema: armada/Manifest/v1\nmetadata: {name: cluster-bootstrap}\ndata: {release_prefix: airship, chart_groups: [infra, extra]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: infra}\ndata: {chart_group: [db]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: apps}\ndata: {sequenced: true, chart_group: [api]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: extra}\ndata: {chart_group: [tools]}\n---\nschema: armada/Chart/v1\nmetadata: {name: db}\ndata: {release: db, namespace: x, source: {type: local, location: c}}\n---\nschema: armada/Chart/v1\nmetadata: {name: api}\ndata: {release: api, namespace: x, dependencies: [lib], source: {type: local, location: c}}\n---\nschema: armada/Chart/v1\nmetadata: {name: lib}\ndata: {release: lib, namespace: x, source: {type: local, location: c}}\n---\nschema: armada/Chart/v1\nmetadata: {name: tools}\ndata: {release: tools, namespace: x, source: {type: local, location: c}}\n";

fn load_target(text: &str, target: Option<&str>) -> (ArmadaDocs, Diagnostics) {
    let mut diags = Diagnostics::default();
    let docs = load_targeted(raw_docs("armada.yaml", text), target, &mut diags);
    diags.0.sort();
    (docs, diags)
}

#[test]
fn the_target_manifest_deploys_its_groups_only() {
    let (docs, diags) = load_target(TWO_MANIFESTS, Some("full-site"));
    assert_eq!(errors(&diags), Vec::<String>::new());
    let plan: Vec<(String, u32)> = docs
        .deployment_plan()
        .iter()
        .map(|p| {
            (
                docs.charts[p.chart].resource.metadata.name.clone().unwrap(),
                p.wave,
            )
        })
        .collect();
    // `lib` stays, as `api`'s dependency; `tools` (listed only by `cluster-bootstrap`) goes.
    assert_eq!(plan, vec![("db".into(), 1), ("api".into(), 2)]);
    assert!(docs.chart(NATIVE_NAMESPACE, "lib").is_some());
    assert!(docs.chart(NATIVE_NAMESPACE, "tools").is_none());
    assert_eq!(docs.manifests.len(), 1);
    assert_eq!(
        warnings(&diags),
        [
            "armada.yaml:17:1: warning: ArmadaChartGroup `default/extra` is not deployed: the target manifest `full-site` does not list it",
            "armada.yaml:33:1: warning: ArmadaChart `default/tools` is not deployed: no chart group of the target manifest `full-site` lists it",
        ]
    );
    // NAMESPACE/NAME names the same manifest.
    let (docs, diags) = load_target(TWO_MANIFESTS, Some("default/cluster-bootstrap"));
    assert_eq!(errors(&diags), Vec::<String>::new());
    assert!(docs.chart(NATIVE_NAMESPACE, "tools").is_some());
    assert!(docs.chart(NATIVE_NAMESPACE, "api").is_none());
}

#[test]
fn two_manifests_without_a_target_are_refused_as_armada_refuses_them() {
    let (_, diags) = load_target(TWO_MANIFESTS, None);
    let e = errors(&diags);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("2 ArmadaManifests: `default/cluster-bootstrap` (armada.yaml:5:1), `default/full-site` (armada.yaml:1:1)")
            && e[0].contains("choose it with --target-manifest NAME (or WEFT_TARGET_MANIFEST)"),
        "{e:?}"
    );
    // A target that names none is an error that lists them.
    let (_, diags) = load_target(TWO_MANIFESTS, Some("full-sit"));
    let e = errors(&diags);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("--target-manifest `full-sit` names no ArmadaManifest")
            && e[0].contains("(did you mean `full-site`?)"),
        "{e:?}"
    );
    let (_, diags) = load_target(&NATIVE.replace("name: site", "name: one"), Some("site"));
    assert!(
        errors(&diags)
            .iter()
            .any(|e| e.contains("--target-manifest `site` names no ArmadaManifest")),
        "{diags:?}"
    );
}
