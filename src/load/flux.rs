//! A Flux repository met with help: what Weft does not do (kustomize, Flux's own controllers'
//! kinds, `postBuild.substitute`) is named where it is written, with what to do instead
//! (docs/flux.md), rather than failing later as "the cluster has no kind GitRepository".

use serde_json::Value;

use super::yaml::Pos;
use super::{Diagnostics, Origin, RawDoc};

/// The file names kustomize reads as a directory's kustomization.
const KUSTOMIZATION_FILES: &[&str] = &["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// `path` is a kustomization file (kustomize's entry point of its directory).
pub fn is_kustomization_file(path: &str) -> bool {
    KUSTOMIZATION_FILES.contains(&file_name(path))
}

/// `path` is `flux install`'s output, the manifests of Flux's own controllers.
pub fn is_flux_components(path: &str) -> bool {
    file_name(path) == "gotk-components.yaml"
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub(super) fn file_start(path: &str) -> Origin {
    Origin {
        file: path.to_string(),
        pos: Pos { line: 1, col: 1 },
    }
}

/// Refuse a kustomization file: Weft would otherwise read it as a manifest (or, for
/// `Kustomization`, skip it) and apply the directory without the kustomization's effect.
pub fn refuse_kustomization(path: &str, diags: &mut Diagnostics) {
    let dir = match path.rsplit_once('/') {
        Some((dir, _)) => dir,
        None => ".",
    };
    diags.error(
        file_start(path),
        format!(
            "Weft does not run kustomize, so the directory `{dir}` cannot be built from this \
             kustomization: Weft applies every *.yaml/*.yml under the synced path as it is \
             written. List the resources as plain manifests (move or copy the files its \
             `resources` name into the synced path, drop the kustomization file), express \
             overlays as JSON or merge patches (an ArmadaChart's `values.overlays`) or one root \
             per cluster with `--path`; see docs/flux.md"
        ),
    );
}

/// Refuse Flux's installation manifests: two reconcilers would fight over the same objects.
pub fn refuse_flux_components(path: &str, diags: &mut Diagnostics) {
    diags.error(
        file_start(path),
        "this is Flux's own installation (`flux install`'s output); Weft takes the place of \
         Flux's controllers rather than running beside them in the same repository: remove the \
         flux-system directory from the synced path (uninstall Flux once Weft syncs the \
         cluster); see docs/flux.md",
    );
}

/// Where chart sources are described: a Helm repository or an OCI registry as a chart's source
/// is designed there.
const CHART_SOURCES: &str = "docs/armada.md#chart-sources";

/// The API groups of Flux: every `*.fluxcd.io` (the toolkit's controllers and
/// `source.extensions.fluxcd.io`'s source-watcher) and the Flux Operator's
/// `fluxcd.controlplane.io`.
pub fn is_flux_group(group: &str) -> bool {
    group == "fluxcd.io" || group.ends_with(".fluxcd.io") || group == "fluxcd.controlplane.io"
}

/// What Weft uses instead of a Flux kind, when `api_version`/`kind` is one of Flux's; `value` is
/// the document (a HelmRepository's `spec.type` tells an OCI registry from an HTTP one).
pub fn flux_kind_advice(api_version: &str, kind: &str, value: &Value) -> Option<String> {
    let group = api_version.split_once('/').map(|(g, _)| g)?;
    if !is_flux_group(group) {
        return None;
    }
    let oci = value.pointer("/spec/type").and_then(Value::as_str) == Some("oci");
    let advice = match (group, kind) {
        ("source.toolkit.fluxcd.io", "GitRepository") => {
            "the repository Weft syncs is given to Weft itself (`weft sync --repo URL --ref REF \
             --path DIR`, or `weft run`'s flags), not declared as an object in it; charts from \
             other git repositories are an ArmadaChart's `source: {type: git, location, \
             reference}`"
                .to_string()
        }
        ("source.toolkit.fluxcd.io", "OCIRepository") => format!(
            "an OCI artifact is read by Weft only as the chart of an ArmadaChart: {CHART_SOURCES} \
             is the place that describes chart sources (a Helm repository or an OCI registry \
             as a chart's source is designed there); manifests are synced from the root's git \
             repository or directory (`--repo`)"
        ),
        ("source.toolkit.fluxcd.io", "HelmRepository") if oci => format!(
            "a Helm repository of `type: oci` is an OCI registry of charts, read by Weft only \
             as an ArmadaChart's chart source: {CHART_SOURCES} is the place that describes \
             chart sources (an OCI registry as a chart's source is designed there)"
        ),
        ("source.toolkit.fluxcd.io", "HelmRepository" | "HelmChart") => format!(
            "a chart is fetched by the ArmadaChart that uses it: `source: {{type: tar, \
             location: https://…/chart-1.2.3.tgz}}` (the chart archive's URL in the Helm \
             repository) or `type: git`; see {CHART_SOURCES}"
        ),
        ("source.toolkit.fluxcd.io", "Bucket") => {
            "Weft syncs from git (`--repo`) or a directory; a bucket is not a source of Weft: \
             keep the manifests in the root's git repository"
                .to_string()
        }
        ("source.toolkit.fluxcd.io", "ExternalArtifact") => {
            "an external artifact (made by an ArtifactGenerator or another controller) is not a \
             source of Weft: the root's `--repo` and `--path` name what is synced"
                .to_string()
        }
        ("source.extensions.fluxcd.io", "ArtifactGenerator") => {
            "Weft does not compose artifacts from parts of sources: each `copy` of an artifact \
             becomes a root of its own (`--path` of the directory it copies; one root per \
             cluster), or the files move into one synced path"
                .to_string()
        }
        ("kustomize.toolkit.fluxcd.io", "Kustomization") => {
            "Weft applies the synced path itself (one root per `--path`, pruned and waited for); \
             `spec.path` becomes `--path`, `prune`, `wait` and `timeout` are Weft's defaults and \
             flags, `dependsOn` is expressed with waves or ArmadaChartGroups, `patches` are \
             written into the manifests, `postBuild.substitute` is not done (see docs/flux.md)"
                .to_string()
        }
        ("helm.toolkit.fluxcd.io", "HelmRelease") => {
            "a Helm release is an ArmadaChart (`armada.airshipit.org/v1alpha1`): `spec.chart` \
             or `chartRef` becomes `source`, `values` stay `values`, `releaseName` is \
             `release`, `targetNamespace` is `namespace`, postRenderers' patches are \
             `values.overlays`"
                .to_string()
        }
        ("notification.toolkit.fluxcd.io", "Provider" | "Alert") => {
            "Weft has the same kinds in `notification.weft.io/v1alpha1`: change the apiVersion \
             (and name Weft's kinds in `eventSources`); see docs/notifications.md"
                .to_string()
        }
        ("notification.toolkit.fluxcd.io", "Receiver") => {
            "Weft's HTTP server takes webhooks itself (`weft run --webhook-secret-file`); see \
             docs/daemon.md"
                .to_string()
        }
        ("image.toolkit.fluxcd.io", _) => {
            "Weft does not scan image registries nor write image updates back to git; pin \
             image tags in the manifests (WeaveCloud agents are updated by their channel, \
             docs/auto-update.md)"
                .to_string()
        }
        ("fluxcd.controlplane.io", _) => {
            "this is the Flux Operator's, which installs and runs Flux's controllers; Weft \
             takes their place rather than running beside them: remove it from the synced path \
             (see docs/flux.md)"
                .to_string()
        }
        _ => "this kind is reconciled by one of Flux's controllers, which Weft does not run; \
              remove it from the synced path (see docs/flux.md)"
            .to_string(),
    };
    Some(advice)
}

/// Refuse a document of Flux's kinds, at its `kind:` line, with what Weft uses instead; whether
/// it was one.
pub fn refuse_flux_kind(
    raw: &RawDoc,
    api_version: &str,
    kind: &str,
    diags: &mut Diagnostics,
) -> bool {
    let Some(advice) = flux_kind_advice(api_version, kind, &raw.value) else {
        return false;
    };
    let oci = if kind == "HelmRepository"
        && raw.value.pointer("/spec/type").and_then(Value::as_str) == Some("oci")
    {
        ", `type: oci`"
    } else {
        ""
    };
    diags.error(
        raw.origin_of("/kind"),
        format!(
            "`{kind}` ({api_version}{oci}) is a Flux object, read by Flux's controllers, which \
             Weft does not run: {advice}"
        ),
    );
    true
}

/// The first `${VAR}` (Flux's `postBuild.substitute` syntax) in a string, with the variable's
/// name. `$${` is Flux's escape for a literal `${` and is not counted.
fn first_variable(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find("${").map(|i| i + from) {
        from = at + 2;
        if at > 0 && bytes[at - 1] == b'$' {
            continue;
        }
        let rest = &text[at + 2..];
        let len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let name = &rest[..len];
        let starts_well = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        // `}` ends it; `:=`, `:-`, `-`, `=` start Flux's (envsubst's) default forms.
        let ends_well = matches!(rest.as_bytes().get(len), Some(b'}' | b':' | b'-' | b'='));
        if starts_well && ends_well {
            return Some(name);
        }
    }
    None
}

/// The `${VAR}`s left in a manifest's string values: each value's pointer and its first
/// variable's name.
fn variables(value: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    // Iterative: a manifest's depth is bounded by the loader, but no recursion is needed.
    let mut stack: Vec<(String, &Value)> = vec![(String::new(), value)];
    while let Some((pointer, node)) = stack.pop() {
        match node {
            Value::String(s) => {
                if let Some(name) = first_variable(s) {
                    found.push((pointer, name.to_string()));
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    stack.push((format!("{pointer}/{i}"), item));
                }
            }
            Value::Object(map) => {
                for (key, child) in map.iter() {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    stack.push((format!("{pointer}/{key}"), child));
                }
            }
            _ => {}
        }
    }
    found
}

/// Warn about `${VAR}` left in a plain manifest: Flux's `postBuild.substitute` would have
/// replaced it, Weft applies it as written. `text` is the document's JSON, a cheap first check.
pub fn warn_unsubstituted(raw: &RawDoc, text: &str, diags: &mut Diagnostics) {
    if !text.contains("${") {
        return;
    }
    let found = variables(&raw.value);
    let count = found.len();
    // The first in the file, as a reader meets them.
    let Some((origin, pointer, name)) = found
        .into_iter()
        .map(|(pointer, name)| (raw.origin_of(&pointer), pointer, name))
        .min()
    else {
        return;
    };
    let field = pointer.trim_start_matches('/').replace('/', ".");
    let more = match count {
        1 => String::new(),
        n => format!(" ({} more value(s) of this document too)", n - 1),
    };
    diags.warning(
        origin,
        format!(
            "`{field}` holds `${{{name}}}`, Flux's postBuild substitution syntax{more}: Weft \
             applies manifests as written and substitutes nothing, so the literal text reaches \
             the cluster. Write the value itself (one directory per cluster with `--path`); if \
             the text is meant literally (a shell script's variable), ignore this warning; see \
             docs/flux.md"
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_variables_are_found_and_escapes_are_not() {
        assert_eq!(first_variable("${cluster_env}"), Some("cluster_env"));
        assert_eq!(first_variable("app-${ENV:=dev}"), Some("ENV"));
        assert_eq!(first_variable("x ${A:-b} y"), Some("A"));
        assert_eq!(first_variable("$${HOME} costs $5"), None);
        assert_eq!(first_variable("${1abc}"), None);
        assert_eq!(first_variable("${ spaced }"), None);
        assert_eq!(first_variable("${unterminated"), None);
        assert_eq!(first_variable("$${A} then ${B}"), Some("B"));
    }

    #[test]
    fn every_value_holding_a_variable_is_found_and_escapes_are_not() {
        let value = serde_json::json!({
            "metadata": {"name": "a"},
            "data": {"a": "${ONE}", "b": ["x", "${TWO}"], "c": "$${NOT}"}
        });
        let mut found = variables(&value);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("/data/a".to_string(), "ONE".to_string()),
                ("/data/b/1".to_string(), "TWO".to_string())
            ]
        );
    }

    #[test]
    fn flux_kinds_are_recognised_by_group_and_others_are_not() {
        let none = Value::Null;
        let advice = |api_version: &str, kind: &str| flux_kind_advice(api_version, kind, &none);
        // Every kind of Flux 2.7 (`flux migrate`'s list), the source-watcher's and the Flux
        // Operator's: each has advice, none the catch-all of an unknown Flux kind but these.
        let generic = advice("future.toolkit.fluxcd.io/v1", "Thing").expect("a Flux group");
        for (api_version, kind) in [
            ("source.toolkit.fluxcd.io/v1", "GitRepository"),
            ("source.toolkit.fluxcd.io/v1", "OCIRepository"),
            ("source.toolkit.fluxcd.io/v1", "Bucket"),
            ("source.toolkit.fluxcd.io/v1", "HelmRepository"),
            ("source.toolkit.fluxcd.io/v1", "HelmChart"),
            ("source.toolkit.fluxcd.io/v1", "ExternalArtifact"),
            ("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator"),
            ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
            ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
            ("notification.toolkit.fluxcd.io/v1", "Receiver"),
            ("notification.toolkit.fluxcd.io/v1beta3", "Alert"),
            ("notification.toolkit.fluxcd.io/v1beta3", "Provider"),
            ("image.toolkit.fluxcd.io/v1", "ImageRepository"),
            ("image.toolkit.fluxcd.io/v1", "ImagePolicy"),
            ("image.toolkit.fluxcd.io/v1", "ImageUpdateAutomation"),
            ("fluxcd.controlplane.io/v1", "FluxInstance"),
        ] {
            let a = advice(api_version, kind).unwrap_or_else(|| panic!("{kind}"));
            assert_ne!(a, generic, "{kind} has advice of its own");
        }
        assert!(advice("notification.weft.io/v1alpha1", "Alert").is_none());
        assert!(advice("kustomize.config.k8s.io/v1beta1", "Kustomization").is_none());
        assert!(advice("v1", "ConfigMap").is_none());
        assert!(advice("fluxcd.io.example.com/v1", "Thing").is_none());
        assert!(is_kustomization_file("apps/base/kustomization.yaml"));
        assert!(is_kustomization_file("Kustomization"));
        assert!(!is_kustomization_file("apps/kustomization-notes.yaml"));
    }

    #[test]
    fn oci_sources_point_to_the_chart_sources_and_not_to_git() {
        let oci = serde_json::json!({"spec": {"type": "oci", "url": "oci://ghcr.io/charts"}});
        for (kind, value) in [("HelmRepository", &oci), ("OCIRepository", &Value::Null)] {
            let a = flux_kind_advice("source.toolkit.fluxcd.io/v1", kind, value).expect(kind);
            assert!(a.contains("docs/armada.md#chart-sources"), "{a}");
            assert!(!a.contains("publish"), "{a}");
        }
        let http = serde_json::json!({"spec": {"url": "https://charts.example.com"}});
        let a = flux_kind_advice("source.toolkit.fluxcd.io/v1", "HelmRepository", &http)
            .expect("advice");
        assert!(a.contains("type: tar"), "{a}");
    }
}
