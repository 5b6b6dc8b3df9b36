//! `weft validate` on broken repositories: every problem as `file:line:col: message`, exit 1.

use std::path::Path;
use std::process::Command;

fn validate(files: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("has parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    run(dir.path())
}

fn run(dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("validate")
        .arg(dir)
        // The examples repository's encrypted Secret (docs/secrets.md).
        .env(
            "SOPS_AGE_KEY_FILE",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples-repo/TEST-ONLY-age.agekey"),
        )
        .output()
        .expect("weft runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

const GOOD_WC: &str = "apiVersion: cloud.weave.works/v1beta1
kind: WeaveCloud
metadata:
  name: wc
  namespace: weave
spec:
  general:
    environment: gke
    tokenSecretRef: {name: weave-cloud}
";

#[test]
fn the_examples_repo_is_valid() {
    let (code, out) = run(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples-repo"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no errors"), "{out}");
}

#[test]
fn unknown_field_with_did_you_mean_and_position() {
    let bad = GOOD_WC.replace("environment: gke", "enviroment: gke");
    let (code, out) = validate(&[("wc.yaml", &bad)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("wc.yaml:8:5: unknown field `enviroment` in `spec.general` (did you mean `environment`?)"),
        "{out}"
    );
    assert!(
        out.contains("wc.yaml:7:3: missing required field `spec.general.environment`"),
        "{out}"
    );
}

#[test]
fn bad_enum_wrong_type_and_bad_cron_are_all_reported() {
    let bad = format!(
        "{GOOD_WC}    updateSchedule: \"every hour\"\n  scope:\n    readOnly: maybe\n  prometheus:\n    podScrapePolicy: optin\n"
    );
    let (code, out) = validate(&[("a/wc.yaml", &bad)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("a/wc.yaml:12:5: `spec.scope.readOnly` must be a boolean, not string `maybe`"),
        "{out}"
    );
    assert!(
        out.contains("a/wc.yaml:14:5: `spec.prometheus.podScrapePolicy` must be one of optIn, optOut, not `optin` (did you mean `optIn`?)"),
        "{out}"
    );
    assert!(
        out.contains("a/wc.yaml:10:5: `spec.general.updateSchedule` `every hour` does not match"),
        "{out}"
    );
}

#[test]
fn kebab_case_keys_are_accepted_with_a_warning() {
    let kebab = "apiVersion: cloud.weave.works/v1beta1
kind: WeaveCloud
metadata: {name: wc, namespace: weave}
spec:
  general:
    environment: eks
    auto-update: false
    wc-hostname: frontend.dev.weave.works
    token-secret-ref: {name: t}
  scope:
    read-only: false
    container-runtime-endpoint: /run/containerd/containerd.sock
  prometheus:
    pod-scrape-policy: optOut
";
    let (code, out) = validate(&[("wc.yaml", kebab)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("wc.yaml:7:5: warning: `auto-update` is the old kebab-case spelling; write `autoUpdate`"), "{out}");
    assert!(
        out.contains("wc.yaml:12:5: warning: `container-runtime-endpoint`"),
        "{out}"
    );
    assert!(
        out.contains("wc.yaml:14:5: warning: `pod-scrape-policy`"),
        "{out}"
    );
}

#[test]
fn missing_identity_fields_and_duplicates() {
    let (code, out) = validate(&[
        ("one.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: x\n---\nkind: Secret\nmetadata: {name: b}\n"),
        ("two.yml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: x\n"),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("one.yaml:7:1: missing required field `apiVersion`"),
        "{out}"
    );
    assert!(
        out.contains("two.yml:1:1: ConfigMap `x/a` is defined twice: first at one.yaml:1:1"),
        "{out}"
    );
}

#[test]
fn yaml_syntax_error_and_alias_bomb_name_the_file() {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        bomb.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{}", i - 1); 10].join(", ")
        ));
    }
    let (code, out) = validate(&[("bomb.yaml", &bomb), ("broken.yaml", "a: [1, 2\n")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("bomb.yaml:"), "{out}");
    assert!(out.contains("alias bomb"), "{out}");
    assert!(out.contains("broken.yaml:"), "{out}");
}

#[test]
fn symlink_leaving_the_repository_is_refused() {
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("x.yaml"), "a: 1\n").expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(outside.path().join("x.yaml"), dir.path().join("link.yaml"))
        .expect("symlink");
    let (code, out) = run(dir.path());
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("link.yaml: symlink points outside the repository"),
        "{out}"
    );
}

const CHART_X: [(&str, &str); 3] = [
    (
        "charts/x/Chart.yaml",
        "name: x\nversion: 0.1.0\nannotations: {weft.io/template-format: substitution}\n",
    ),
    (
        "charts/x/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${release.name}\n",
    ),
    ("charts/x/values.yaml", "a: 1\n"),
];

const PLAIN_CM: (&str, &str) = (
    "cm.yaml",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n",
);

#[test]
fn chart_directories_a_chart_names_are_not_loaded_as_manifests() {
    let mut files = CHART_X.to_vec();
    files.push(PLAIN_CM);
    files.push((
        "armada.yaml",
        "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: x, namespace: default}\nspec:\n  release: x\n  namespace: apps\n  source: {type: local, location: charts/x}\n",
    ));
    let (code, out) = validate(&files);
    assert_eq!(code, 0, "{out}");
    // The plain ConfigMap and the ArmadaChart; the chart's template is rendered, not loaded.
    assert!(out.contains("ok: 2 documents"), "{out}");
    assert!(!out.contains("warning"), "{out}");
}

/// Issue 14: a stray `Chart.yaml` used to drop its whole directory from the sync (and the
/// objects that vanished were pruned). Now only charts' sources are skipped; a stray one is
/// loaded and named in a warning.
#[test]
fn a_chart_directory_no_chart_names_is_loaded_with_a_warning() {
    let mut files = CHART_X.to_vec();
    files.push(PLAIN_CM);
    let (code, out) = validate(&files);
    assert_eq!(code, 0, "{out}");
    // The plain ConfigMap and the template, loaded as a manifest; Chart.yaml and values.yaml
    // are chart metadata, never manifests.
    assert!(out.contains("ok: 2 documents"), "{out}");
    assert!(
        out.contains(
            "charts/x/Chart.yaml:1:1: warning: no Armada chart has `charts/x` as its local source"
        ),
        "{out}"
    );
}

/// Logs written to a pipe (a log collector, a CI job) carry no colour escapes: `weft render
/// --repo file://…` logs its git fetch at info level, with stderr a pipe.
#[test]
fn logs_to_a_pipe_have_no_colour_escapes() {
    let work = tempfile::tempdir().expect("tempdir");
    let repo_dir = work.path().join("config");
    std::fs::create_dir_all(&repo_dir).expect("mkdir");
    let kebab = GOOD_WC.replace("tokenSecretRef", "token-secret-ref");
    std::fs::write(repo_dir.join("wc.yaml"), kebab).expect("write");
    let repo = git2::Repository::init(&repo_dir).expect("git init");
    let mut index = repo.index().expect("index");
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .expect("add");
    let tree = repo
        .find_tree(index.write_tree().expect("write tree"))
        .expect("tree");
    let sig = git2::Signature::now("test", "test@example.com").expect("signature");
    repo.commit(Some("refs/heads/main"), &sig, &sig, "config", &tree, &[])
        .expect("commit");

    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["render", "--repo"])
        .arg(format!("file://{}", repo_dir.display()))
        .env("XDG_CACHE_HOME", work.path().join("cache"))
        .env_remove("WEFT_GIT_CREDENTIALS_DIR")
        .env_remove("WEFT_LOG")
        .env_remove("WEFT_LOG_FORMAT")
        .output()
        .expect("weft runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("INFO") && stderr.contains("git: fetched new revision"),
        "the fetch is logged: {stderr}"
    );
    assert!(
        stderr.contains("wc.yaml:9:5: warning: `token-secret-ref`"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("\x1b["),
        "no ANSI escapes on a pipe: {stderr:?}"
    );
}

/// The seed's example (kebab-case, no `token-secret-ref`) validates: the token Secret defaults
/// to the launcher's `weave-cloud`/`token`, and each old spelling is a warning, not an error.
#[test]
fn the_seed_example_validates_with_kebab_case_warnings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/weavecloud-seed");
    let (code, out) = run(&dir);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no errors"), "{out}");
    assert!(!out.contains("tokenSecretRef"), "{out}");
    for (line, key) in [
        (12, "auto-update"),
        (15, "wc-hostname"),
        (21, "git-url"),
        (27, "read-only"),
        (33, "pod-scrape-policy"),
    ] {
        assert!(
            out.contains(&format!("weave-cloud.yaml:{line}:"))
                && out.contains(&format!("warning: `{key}`")),
            "no warning for `{key}` at line {line}: {out}"
        );
    }
}

/// The first proposal's WeaveCloud, as it was written (kebab-case, a bare host as poll URL).
const SEED: &str = "apiVersion: cloud.weave.works/v1beta1
kind: WeaveCloud
metadata:
  name: weave-cloud
  namespace: weave
spec:
  general:
    environment: gke
    auto-update: true
    update-schedule: \"0 * * * *\"
    wc-hostname: cloud.weave.works
    wc-poll-url: foo-bar.works
    wc-report-errors: false
  flux:
    disable: false
    config:
      git-label: label
      git-url: url
      git-path: path
      git-branch: branch
  scope:
    disable: false
    read-only: true
    container-runtime-endpoint: /var/run/crio.sock
    kubernetes-probe: true
  prometheus:
    disable: false
    pod-scrape-policy: optIn
";

fn proposal_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/weavecloud-proposal")
}

/// The seed's own WeaveCloud validates as written, `wc-poll-url: foo-bar.works` included: the
/// bare host is read as `https://foo-bar.works`, with a warning at the value's line and column.
#[test]
fn the_seed_as_written_validates_and_its_bare_poll_host_reads_as_https() {
    let text = std::fs::read_to_string(proposal_dir().join("weave-cloud.yaml")).expect("fixture");
    assert!(
        text.ends_with(SEED),
        "the fixture keeps the seed's lines verbatim:\n{text}"
    );
    let (code, out) = run(&proposal_dir());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no errors"), "{out}");
    assert!(!out.contains("relative URL"), "{out}");
    let poll: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("foo-bar.works"))
        .collect();
    assert_eq!(poll.len(), 1, "{out}");
    assert!(
        poll[0].starts_with(
            "weave-cloud.yaml:16:5: warning: `spec.general.wcPollUrl: foo-bar.works` has no scheme, so it is read as `https://foo-bar.works`"
        ),
        "{out}"
    );
}

/// `weft render` of the seed as written: the WeaveCloud carries the full poll URL, and the
/// seed's settings reach the agents.
#[test]
fn the_seed_as_written_renders() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("render")
        .arg(proposal_dir())
        .output()
        .expect("weft runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("wcPollUrl: https://foo-bar.works"),
        "{stdout}"
    );
    assert!(!stdout.contains("wcPollUrl: foo-bar.works"), "{stdout}");
    assert!(
        stdout.contains("--probe.no-controls=true"),
        "read-only: true reaches scope"
    );
    assert!(stdout.contains("--git-url=url"), "git-url reaches flux");
    assert!(
        stderr.contains("foo-bar.works"),
        "the warning is printed: {stderr}"
    );
}

/// helm's output may contain `{{` on purpose (Prometheus alert templates): refused unless the
/// ArmadaChart says so, and the error says how. (In a ConfigMap's data they are the workload's
/// template, only warned about: see tests/it/armada_truth.rs.)
#[test]
fn a_chart_printing_literal_braces_needs_the_annotation() {
    let chart_yaml = "apiVersion: v2\nname: rules\nversion: 1.0.0\n";
    let template = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rules\n  annotations:\n    summary: {{ \"{{ $labels.instance }} is down\" | quote }}\n";
    let doc = |annotations: &str| {
        format!(
            "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata:\n  name: rules\n  namespace: monitoring\n{annotations}spec:\n  release: rules\n  namespace: monitoring\n  source: {{type: local, location: charts/rules}}\n"
        )
    };
    let refused = doc("");
    let (code, out) = validate(&[
        ("charts/rules/Chart.yaml", chart_yaml),
        ("charts/rules/templates/cm.yaml", template),
        ("armada.yaml", &refused),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ArmadaChart monitoring/rules")
            && out.contains("still contains `{{` at /metadata/annotations/summary")
            && out.contains("`weft.io/literal-braces: allow`"),
        "{out}"
    );
    let allowed = doc("  annotations: {weft.io/literal-braces: allow}\n");
    let (code, out) = validate(&[
        ("charts/rules/Chart.yaml", chart_yaml),
        ("charts/rules/templates/cm.yaml", template),
        ("armada.yaml", &allowed),
    ]);
    assert_eq!(code, 0, "{out}");
}
