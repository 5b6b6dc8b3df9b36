//! A repository shaped like Flux's bootstrap output (tests/fixtures/flux-repo) is met with help:
//! every kustomization, every Flux object and `flux install`'s output is refused at its file and
//! line with what Weft uses instead; a `${VAR}` left in a manifest is a warning at its line.
//! Through `weft validate`, the command a Flux user runs first (docs/flux.md).

use std::path::Path;
use std::process::Command;

fn validate(dir: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("validate")
        .arg(dir)
        .output()
        .expect("weft runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flux-repo")
}

/// The one line of `out` that starts with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    let hits: Vec<&str> = out.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(
        hits.len(),
        1,
        "one line starting with {prefix:?} in:\n{out}"
    );
    hits[0]
}

#[test]
fn every_kustomization_file_is_refused_by_name_with_what_to_do() {
    let (code, out) = validate(&fixture());
    assert_eq!(code, 1, "{out}");
    for file in [
        "clusters/staging/flux-system/kustomization.yaml",
        "apps/base/podinfo/kustomization.yaml",
        // The third spelling kustomize reads, which is not even a *.yaml file.
        "apps/staging/Kustomization",
    ] {
        let l = line(&out, &format!("{file}:1:1: "));
        assert!(l.contains("Weft does not run kustomize"), "{l}");
        assert!(l.contains("plain manifests"), "{l}");
        assert!(l.contains("docs/flux.md"), "{l}");
    }
    // Refused as a kustomization, not as a document lacking `metadata.name`.
    assert!(!out.contains("missing required field"), "{out}");
}

#[test]
fn flux_objects_are_explained_at_their_kind_line() {
    let (_, out) = validate(&fixture());
    let cases = [
        (
            "clusters/staging/flux-system/gotk-sync.yaml:4:",
            "`GitRepository` (source.toolkit.fluxcd.io/v1) is a Flux object",
            "--repo URL --ref REF",
        ),
        (
            "clusters/staging/flux-system/gotk-sync.yaml:15:",
            "`Kustomization` (kustomize.toolkit.fluxcd.io/v1) is a Flux object",
            "`spec.path` becomes `--path`",
        ),
        (
            "clusters/staging/apps.yaml:2:",
            "`Kustomization` (kustomize.toolkit.fluxcd.io/v1)",
            "postBuild.substitute",
        ),
        (
            "apps/base/podinfo/release.yaml:2:",
            "`HelmRelease` (helm.toolkit.fluxcd.io/v2)",
            "ArmadaChart",
        ),
        (
            "apps/base/podinfo/repository.yaml:2:",
            "`HelmRepository` (source.toolkit.fluxcd.io/v1)",
            "type: tar",
        ),
    ];
    for (at, what, instead) in cases {
        let l = line(&out, at);
        assert!(l.contains(what), "{l}");
        assert!(l.contains(instead), "{l}");
    }
    assert!(!out.contains("no kind"), "{out}");
}

#[test]
fn flux_install_output_is_refused() {
    let (_, out) = validate(&fixture());
    let l = line(
        &out,
        "clusters/staging/flux-system/gotk-components.yaml:1:1: ",
    );
    assert!(l.contains("Flux's own installation"), "{l}");
}

#[test]
fn a_flux_variable_is_a_warning_at_its_line_and_the_rest_still_applies() {
    let (code, out) = validate(&fixture());
    assert_eq!(code, 1, "{out}");
    let l = line(&out, "infrastructure/configs/cluster-vars.yaml:8:");
    assert!(
        l.contains("warning: `data.environment` holds `${cluster_env}`"),
        "{l}"
    );
    assert!(l.contains("1 more value(s)"), "{l}");
    assert!(l.contains("substitutes nothing"), "{l}");

    // Alone (without the Flux objects), the same file validates: a warning, not an error.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        fixture().join("infrastructure/configs/cluster-vars.yaml"),
        dir.path().join("cluster-vars.yaml"),
    )
    .expect("copy");
    let (code, out) = validate(dir.path());
    assert_eq!(code, 0, "{out}");
    line(&out, "cluster-vars.yaml:8:");
    assert!(out.contains("ok: 1 documents, no errors"), "{out}");
}

#[test]
fn escaped_and_non_flux_dollars_are_not_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: scripts\n  namespace: default\ndata:\n  \
         run.sh: \"echo $${HOME} $HOME\"\n  regex: \"/nodes/${1}/proxy\"\n",
    )
    .expect("write");
    let (code, out) = validate(dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("warning"), "{out}");
}
