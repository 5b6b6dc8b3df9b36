//! A repository shaped like Flux's bootstrap output (tests/fixtures/flux-repo) is met with help:
//! every kustomization, every Flux object and `flux install`'s output is refused at its file and
//! line with what Weft uses instead; a `${VAR}` left in a manifest is a warning at its line.
//! Repositories shaped like fluxcd's two example repositories (tests/fixtures/flux-kustomize-helm,
//! tests/fixtures/flux-multi-tenancy) are told what each Flux object, each kustomize patch and
//! each values file is. Through `weft validate`, the command a Flux user runs first
//! (docs/flux.md).

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
    named_fixture("flux-repo")
}

fn named_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// What a Flux repository must never be told: its patches are not duplicates, its values files
/// are not objects missing an apiVersion, a JSON 6902 patch is not a bad document, an OCI
/// source is not "publish to git".
fn assert_no_misleading_errors(out: &str) {
    for wrong in [
        "defined twice",
        "missing required field",
        "must be a mapping",
        "publish the manifests",
        "no kind",
    ] {
        assert!(!out.contains(wrong), "{wrong:?} in:\n{out}");
    }
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

/// Every Flux kind of a repository shaped like flux2-kustomize-helm-example — the
/// ArtifactGenerator and ExternalArtifact of Flux 2.7 and the image automation kinds among them —
/// is named at its `kind:` line, however many clusters declare the same one.
#[test]
fn every_flux_kind_is_named_at_its_kind_line() {
    let (code, out) = validate(&named_fixture("flux-kustomize-helm"));
    assert_eq!(code, 1, "{out}");
    for (at, kind) in [
        ("clusters/staging/artifacts.yaml:3:", "ArtifactGenerator"),
        ("clusters/staging/artifacts.yaml:26:", "ExternalArtifact"),
        ("clusters/staging/apps.yaml:3:", "Kustomization"),
        // The same Kustomization `flux-system/apps` of another cluster: named too, not a duplicate.
        ("clusters/production/apps.yaml:3:", "Kustomization"),
        ("clusters/staging/infrastructure.yaml:17:", "Kustomization"),
        (
            "clusters/staging/image-automation.yaml:3:",
            "ImageRepository",
        ),
        ("clusters/staging/image-automation.yaml:12:", "ImagePolicy"),
        (
            "clusters/staging/image-automation.yaml:24:",
            "ImageUpdateAutomation",
        ),
        ("apps/base/web/release.yaml:2:", "HelmRelease"),
        ("apps/base/web/repository.yaml:2:", "HelmRepository"),
        (
            "infrastructure/controllers/cert-manager.yaml:8:",
            "OCIRepository",
        ),
        (
            "infrastructure/controllers/cert-manager.yaml:22:",
            "HelmRelease",
        ),
    ] {
        let l = line(&out, at);
        assert!(l.contains(&format!("`{kind}` (")), "{l}");
        assert!(l.contains("is a Flux object"), "{l}");
        assert!(
            !l.contains("one of Flux's controllers"),
            "advice of its own: {l}"
        );
    }
    let generator = line(&out, "clusters/staging/artifacts.yaml:3:");
    assert!(
        generator.contains("source.extensions.fluxcd.io/v1beta1"),
        "{generator}"
    );
    assert!(generator.contains("root of its own"), "{generator}");
    assert_no_misleading_errors(&out);
}

/// An OCI Helm repository and an OCIRepository are chart sources: the help points at the
/// chart-source documentation, not at git.
#[test]
fn oci_sources_point_to_the_chart_sources() {
    let (_, out) = validate(&named_fixture("flux-kustomize-helm"));
    for at in [
        "apps/base/web/repository.yaml:2:",
        "infrastructure/controllers/cert-manager.yaml:8:",
    ] {
        let l = line(&out, at);
        assert!(l.contains("docs/armada.md#chart-sources"), "{l}");
        assert!(!l.contains("publish"), "{l}");
    }
    let helm = line(&out, "apps/base/web/repository.yaml:2:");
    assert!(helm.contains("`type: oci`"), "{helm}");
    assert!(helm.contains("OCI registry of charts"), "{helm}");
    // The same on the multi-tenancy shape, whose OCIRepository holds manifests.
    let (_, out) = validate(&named_fixture("flux-multi-tenancy"));
    let l = line(&out, "infrastructure/policy-engine/source.yaml:2:");
    assert!(l.contains("docs/armada.md#chart-sources"), "{l}");
    assert!(l.contains("`--repo`"), "{l}");
}

/// The overlays' patch files (`patches`, `patchesJson6902`) are told they are patches of the
/// object they change, by the kustomization that applies them — not "defined twice", not "a
/// document must be a mapping".
#[test]
fn kustomize_patch_files_are_recognised_as_patches() {
    let (code, out) = validate(&named_fixture("flux-kustomize-helm"));
    assert_eq!(code, 1, "{out}");
    for (file, kustomization, field, what) in [
        (
            "apps/staging/web-values.yaml",
            "apps/staging/kustomization.yaml",
            "patches",
            "a partial HelmRelease web/web",
        ),
        (
            "apps/production/web-values.yaml",
            "apps/production/kustomization.yaml",
            "patches",
            "a partial HelmRelease web/web",
        ),
        (
            "apps/staging/replicas.yaml",
            "apps/staging/kustomization.yaml",
            "patchesJson6902",
            "a JSON 6902 patch of HelmRelease web",
        ),
    ] {
        let l = line(&out, &format!("{file}:1:1: "));
        assert!(l.contains("kustomize patch"), "{l}");
        assert!(l.contains(what), "{l}");
        assert!(
            l.contains(&format!("`{kustomization}` applies with `{field}`")),
            "{l}"
        );
        assert!(
            l.contains("Write the change into the manifest it patches"),
            "{l}"
        );
    }
    assert_no_misleading_errors(&out);
}

/// A values file that a kustomization's configMapGenerator turns into a HelmRelease's
/// `valuesFrom`, and kustomize's own configuration beside it, are named as what they are.
#[test]
fn values_and_kustomize_configuration_beside_a_kustomization_are_explained() {
    let (_, out) = validate(&named_fixture("flux-kustomize-helm"));
    let values = line(&out, "apps/base/web/values.yaml:1:1: ");
    assert!(
        values.contains(
            "an input of `apps/base/web/kustomization.yaml`'s configMapGenerator `web-values`"
        ),
        "{values}"
    );
    assert!(values.contains("ArmadaChart's `values`"), "{values}");
    let config = line(&out, "apps/base/web/kustomizeconfig.yaml:1:1: ");
    assert!(config.contains("kustomize's own configuration"), "{config}");
    assert!(config.contains("`configurations`"), "{config}");
    assert!(!out.contains("apiVersion`"), "{out}");
}

/// flux2-multi-tenancy's shape: a tenant's overlays patch its Flux Kustomization, in the old
/// (`patchesStrategicMerge`) and the new (`patches`) spelling; every cluster declares the same
/// `tenants` Kustomization. Each is named as what it is.
#[test]
fn a_multi_tenant_repository_gets_one_precise_line_per_file() {
    let (code, out) = validate(&named_fixture("flux-multi-tenancy"));
    assert_eq!(code, 1, "{out}");
    for (file, field) in [
        ("tenants/staging/team-a-patch.yaml", "patchesStrategicMerge"),
        ("tenants/production/team-a-patch.yaml", "patches"),
    ] {
        let l = line(&out, &format!("{file}:1:1: "));
        assert!(l.contains("a partial Kustomization team-a/team-a"), "{l}");
        assert!(l.contains(&format!("applies with `{field}`")), "{l}");
    }
    for (at, kind) in [
        ("clusters/staging/tenants.yaml:2:", "Kustomization"),
        ("clusters/production/tenants.yaml:2:", "Kustomization"),
        ("clusters/staging/infrastructure.yaml:16:", "Kustomization"),
        ("infrastructure/policy-engine/sync.yaml:2:", "Kustomization"),
        ("tenants/base/team-a/sync.yaml:2:", "GitRepository"),
        ("tenants/base/team-a/sync.yaml:13:", "Kustomization"),
    ] {
        let l = line(&out, at);
        assert!(l.contains(&format!("`{kind}` (")), "{l}");
    }
    for file in [
        "tenants/staging/kustomization.yaml",
        "tenants/production/kustomization.yaml",
        "tenants/base/team-a/kustomization.yaml",
    ] {
        line(&out, &format!("{file}:1:1: Weft does not run kustomize"));
    }
    // The tenant's plain objects and the policy are not errors.
    assert!(!out.contains("rbac.yaml"), "{out}");
    assert!(!out.contains("tenant-sources.yaml"), "{out}");
    assert_no_misleading_errors(&out);
}
