//! `load_with` over whole snapshots: which directories are charts and which are manifests.

use std::sync::Arc;

use super::*;

fn snapshot(files: &[(&str, &str)]) -> Arc<Snapshot> {
    Arc::new(Snapshot {
        revision: None,
        files: files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect(),
    })
}

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: default\n";
const CHART_CR: &str = "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata:\n  name: web\n  namespace: default\nspec:\n  chart_name: web\n  release: web\n  namespace: default\n  source:\n    type: local\n    location: charts/web\n";
const TEMPLATE: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n";

fn names(repo: &LoadedRepo) -> Vec<String> {
    repo.manifests
        .iter()
        .map(|m| format!("{}:{}", m.origin.file, m.value.name()))
        .collect()
}

#[test]
fn a_stray_chart_yaml_at_the_root_hides_nothing() {
    // Before: this one file removed every manifest of the repository from the sync (and they were
    // pruned). Now the directory is loaded and the file is named in a warning.
    let snap = snapshot(&[
        ("Chart.yaml", "name: oops\n"),
        ("apps/app.yaml", CONFIG_MAP),
    ]);
    let (repo, diags) = load(snap).expect("loads");
    assert_eq!(names(&repo), vec!["apps/app.yaml:app"]);
    let warnings: Vec<String> = diags.warnings().map(|d| d.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .starts_with("Chart.yaml:1:1: warning: no Armada chart has `.` as its local source"),
        "{warnings:?}"
    );
}

#[test]
fn a_stray_chart_directory_is_loaded_and_its_templates_are_errors_not_silence() {
    let snap = snapshot(&[
        ("apps/Chart.yaml", "name: apps\n"),
        ("apps/values.yaml", "replicas: 2\n"),
        ("apps/app.yaml", CONFIG_MAP),
        ("apps/templates/cm.yaml", TEMPLATE),
    ]);
    let err = load(snap).expect_err("a template is not a manifest");
    let text = err.to_string();
    assert!(text.contains("apps/templates/cm.yaml:4:"), "{text}");
    // The chart's own description is not a manifest and is not reported as one.
    assert!(!text.contains("apps/values.yaml"), "{text}");
    assert!(!text.contains("apps/Chart.yaml"), "{text}");
    let warning = err
        .0
        .warnings()
        .next()
        .expect("the stray Chart.yaml is named")
        .to_string();
    assert!(
        warning.starts_with("apps/Chart.yaml:1:1: warning:"),
        "{warning}"
    );
    assert!(warning.contains("`apps`"), "{warning}");
}

#[test]
fn only_referenced_chart_directories_are_skipped() {
    let snap = snapshot(&[
        ("armada/web.yaml", CHART_CR),
        ("charts/web/Chart.yaml", "name: web\n"),
        ("charts/web/templates/cm.yaml", TEMPLATE),
        // A subchart of the referenced chart is part of it.
        ("charts/web/charts/lib/Chart.yaml", "name: lib\n"),
        ("charts/web/charts/lib/templates/x.yaml", TEMPLATE),
        // A sibling nobody references.
        ("charts/other/Chart.yaml", "name: other\n"),
        ("charts/other/extra.yaml", CONFIG_MAP),
    ]);
    let (repo, diags) = load(snap).expect("loads");
    assert_eq!(names(&repo), vec!["charts/other/extra.yaml:app"]);
    assert_eq!(repo.armada.len(), 1);
    let warnings: Vec<String> = diags.warnings().map(|d| d.to_string()).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("charts/other/Chart.yaml:1:1: warning:")),
        "{warnings:?}"
    );
    assert!(
        !warnings.iter().any(|w| w.contains("charts/web")),
        "{warnings:?}"
    );
}

#[test]
fn native_armada_documents_reference_chart_directories_too() {
    let native = "schema: armada/Chart/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: web\ndata:\n  chart_name: web\n  release: web\n  namespace: default\n  source:\n    type: local\n    location: ./charts\n    subpath: web\n";
    let snap = snapshot(&[
        ("armada.yaml", native),
        ("charts/web/Chart.yaml", "name: web\n"),
        ("charts/web/templates/cm.yaml", TEMPLATE),
    ]);
    let (repo, diags) = load(snap).expect("loads");
    assert!(repo.manifests.is_empty());
    assert_eq!(diags.warnings().count(), 0, "{:?}", diags.0);
}

#[test]
fn when_a_document_fails_no_chart_directory_is_called_stray() {
    // The broken document may be the chart that names `charts/web`: its templates are not
    // loaded as manifests, no misleading warning, and the load fails on the real error.
    let broken = CHART_CR.replace("  release: web\n", "  release: [web]\n");
    let snap = snapshot(&[
        ("armada.yaml", &broken),
        ("charts/web/Chart.yaml", "name: web\nversion: 0.1.0\n"),
        ("charts/web/templates/cm.yaml", TEMPLATE),
    ]);
    let err = load_with(snap, &LoadOptions::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("armada.yaml:"), "{text}");
    assert!(!text.contains("charts/web/templates"), "{text}");
    assert!(!text.contains("no Armada chart has"), "{text}");
}

/// A ConfigMap whose data copies an anchored list of 1,000 strings `aliases` times.
fn alias_file(i: usize, aliases: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a{i}, namespace: default}}\nx: &x [{}]\ndata: {{{}}}\n",
        vec!["abcdefgh"; 1000].join(", "),
        (0..aliases).map(|j| format!("k{j}: *x")).collect::<Vec<_>>().join(", ")
    )
}

#[test]
fn one_budget_bounds_every_file_of_a_load() {
    // One file copies 20,020 nodes (20 aliases of 1,001): far within the budget. Forty of them
    // (800,000 nodes) were each within a per-file budget; the load's one budget refuses them.
    let files: Vec<(String, String)> = (0..40)
        .map(|i| (format!("f{i:02}.yaml"), alias_file(i, 20)))
        .collect();
    let one: Vec<(&str, &str)> = vec![(files[0].0.as_str(), files[0].1.as_str())];
    let (repo, _) = load(snapshot(&one)).unwrap();
    let (nodes, _) = repo.budget.spent();
    assert_eq!(nodes, 1001 * 21, "the anchor and its 20 aliases");
    let all: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let err = load(snapshot(&all)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("anchors and aliases would produce more than 250000"),
        "{text}"
    );
    // The files before the budget ran out loaded; the first refused one is named.
    assert!(text.contains("f11.yaml:"), "{text}");
}

#[test]
fn empty_documents_cost_nothing_and_broken_ones_stop_at_a_bound() {
    // 2 MiB of `---`: streamed, nothing kept (and within the documents per file).
    let (repo, _) = load(snapshot(&[("e.yaml", &"---\n".repeat(90_000))])).unwrap();
    assert!(repo.manifests.is_empty());
    // 50,000 documents that are not objects: the load stops at MAX_DIAGNOSTICS messages.
    let err = load(snapshot(&[("s.yaml", &"--- a\n".repeat(50_000))])).unwrap_err();
    let errors = err.0.errors().count();
    assert_eq!(errors, MAX_DIAGNOSTICS + 1, "{}", err.0 .0.last().unwrap());
    assert!(err
        .to_string()
        .contains("the rest of the repository was not read"));
}

const KUSTOMIZATION: &str =
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [app.yaml]\n";

#[test]
fn a_values_file_beside_a_kustomization_is_explained_not_missing_its_api_version() {
    // No kustomization names it (a HelmRelease's `valuesFrom` ConfigMap made elsewhere): still
    // a file of the kustomization's directory, not an object missing its apiVersion.
    let err = load(snapshot(&[
        ("apps/kustomization.yaml", KUSTOMIZATION),
        ("apps/app.yaml", CONFIG_MAP),
        (
            "apps/values.yaml",
            "replicaCount: 2\nimage:\n  tag: 1.2.3\n",
        ),
    ]))
    .unwrap_err();
    let text = err.to_string();
    let values: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("apps/values.yaml"))
        .collect();
    assert_eq!(values.len(), 1, "{text}");
    assert!(
        values[0].starts_with("apps/values.yaml:1:1: this document has neither `apiVersion`"),
        "{text}"
    );
    assert!(values[0].contains("the kustomization of `apps`"), "{text}");
    assert!(!text.contains("missing required field"), "{text}");

    // Away from a kustomization the same document is what it was: an object missing fields.
    let err = load(snapshot(&[("apps/values.yaml", "replicaCount: 2\n")])).unwrap_err();
    assert!(
        err.to_string()
            .contains("apps/values.yaml:1:1: missing required field `apiVersion`"),
        "{err}"
    );
}

#[test]
fn a_patch_named_by_a_kustomization_is_a_patch_even_if_it_does_not_parse() {
    let kustomization = format!("{KUSTOMIZATION}patches:\n  - path: ../overlays/patch.yaml\n");
    let err = load(snapshot(&[
        ("base/kustomization.yaml", &kustomization),
        ("overlays/patch.yaml", "- op: [unclosed\n"),
    ]))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("overlays/patch.yaml:1:1: this is a kustomize patch (a patch) that `base/kustomization.yaml` applies with `patches`"),
        "{text}"
    );
}

/// The seed's `wc-poll-url: foo-bar.works`: a bare host is read as `https://foo-bar.works`, with
/// a warning at the value's own line and column (not at `general:`); the loaded WeaveCloud (and
/// so the CR applied) carries the full URL.
#[test]
fn a_bare_host_poll_url_is_read_as_https_with_a_warning_at_its_line() {
    let wc = "apiVersion: cloud.weave.works/v1beta1\nkind: WeaveCloud\nmetadata:\n  name: weave-cloud\n  namespace: weave\nspec:\n  general:\n    environment: gke\n    wc-hostname: cloud.weave.works\n    wc-poll-url: foo-bar.works\n";
    let (repo, diags) = load(snapshot(&[("wc.yaml", wc)])).expect("loads");
    assert_eq!(
        repo.weaveclouds[0]
            .value
            .spec
            .general
            .wc_poll_url
            .as_deref(),
        Some("https://foo-bar.works")
    );
    let warnings: Vec<String> = diags.warnings().map(|d| d.to_string()).collect();
    let poll: Vec<&String> = warnings
        .iter()
        .filter(|w| w.contains("foo-bar.works"))
        .collect();
    assert_eq!(poll.len(), 1, "{warnings:?}");
    assert!(
        poll[0].starts_with("wc.yaml:10:5: warning: `spec.general.wcPollUrl: foo-bar.works` has no scheme, so it is read as `https://foo-bar.works`"),
        "{warnings:?}"
    );

    // What is neither a URL nor a host is an error at the same place, camelCase or kebab-case.
    for key in ["wc-poll-url", "wcPollUrl"] {
        let bad = wc.replace(
            "wc-poll-url: foo-bar.works",
            &format!("{key}: ./channel.yaml"),
        );
        let err = load(snapshot(&[("wc.yaml", &bad)])).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(
                "wc.yaml:10:5: `spec.general.wcPollUrl` is neither a URL nor a host name"
            ),
            "{text}"
        );
    }
    let bad = wc.replace(
        "wc-poll-url: foo-bar.works",
        "wc-poll-url: ftp://foo-bar.works/c",
    );
    let text = load(snapshot(&[("wc.yaml", &bad)]))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(
            "wc.yaml:10:5: `spec.general.wcPollUrl: ftp://foo-bar.works/c`: scheme `ftp`"
        ),
        "{text}"
    );
}

#[test]
fn only_a_host_first_reads_as_https() {
    for (url, read) in [
        ("foo-bar.works", Some("https://foo-bar.works")),
        (
            " channels.example.com/weave/channel.yaml ",
            Some("https://channels.example.com/weave/channel.yaml"),
        ),
        (
            "localhost:8443/c.yaml",
            Some("https://localhost:8443/c.yaml"),
        ),
        ("https://foo-bar.works", None),
        ("git+https://h/a.git", None),
        ("channel.yaml", None),
        ("./channel.yaml", None),
        ("/srv/channel.yaml", None),
        ("user:secret@host.example.com", None),
        ("-bad.example.com", None),
        ("", None),
    ] {
        assert_eq!(bare_host_as_https(url).as_deref(), read, "{url:?}");
    }
}

/// `wcReportErrors: true` loads with a warning at its line that it does nothing; a
/// `memcachedArgs` entry other than `-m`/`-I` with a size is an error at its line (issue 44).
#[test]
fn report_errors_is_deprecated_and_memcached_args_are_sizes_only() {
    let wc = "apiVersion: cloud.weave.works/v1beta1\nkind: WeaveCloud\nmetadata:\n  name: weave-cloud\n  namespace: weave\nspec:\n  general:\n    environment: gke\n    wcReportErrors: true\n  flux:\n    memcachedArgs: [\"-m 64\", \"-I 8m\"]\n";
    let (_, diags) = load(snapshot(&[("wc.yaml", wc)])).expect("loads");
    let warnings: Vec<String> = diags.warnings().map(|d| d.to_string()).collect();
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "wc.yaml:9:5: warning: `spec.general.wcReportErrors` is deprecated and does nothing"
        )),
        "{warnings:?}"
    );
    let off = wc.replace("wcReportErrors: true", "wcReportErrors: false");
    let (_, diags) = load(snapshot(&[("wc.yaml", &off)])).expect("loads");
    assert!(
        !diags
            .warnings()
            .any(|d| d.to_string().contains("wcReportErrors")),
        "no warning when false"
    );
    let bad = off.replace("\"-I 8m\"", "\"-vv\"");
    let text = load(snapshot(&[("wc.yaml", &bad)]))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("wc.yaml:11:")
            && text.contains("`spec.flux.memcachedArgs[1]: -vv` is not `-m <size>` or `-I <size>`"),
        "{text}"
    );
}

#[test]
fn an_update_schedule_is_five_or_six_cron_fields_or_a_macro_never_seven() {
    for ok in ["0 * * * *", "30 0 * * * *", "@daily"] {
        assert!(parse_update_schedule(ok).is_ok(), "{ok}");
    }
    // croner 4 takes a seventh field (years) by default; the schedule's syntax does not.
    assert!(parse_update_schedule("0 0 0 1 1 * 2030").is_err());
}
