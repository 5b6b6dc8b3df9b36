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

fn file_start(path: &str) -> Origin {
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

/// What Weft uses instead of a Flux kind, when `api_version`/`kind` is one of Flux's.
pub fn flux_kind_advice(api_version: &str, kind: &str) -> Option<&'static str> {
    let group = api_version.split_once('/').map(|(g, _)| g)?;
    let advice = match (group, kind) {
        ("source.toolkit.fluxcd.io", "GitRepository") => {
            "the repository Weft syncs is given to Weft itself (`weft sync --repo URL --ref REF \
             --path DIR`, or `weft run`'s flags), not declared as an object in it; charts from \
             other git repositories are an ArmadaChart's `source: {type: git, location, \
             reference}`"
        }
        ("source.toolkit.fluxcd.io", "OCIRepository" | "Bucket") => {
            "Weft syncs from git (`--repo`) or a directory; an OCI artifact or a bucket is not \
             a source: publish the manifests to a git repository"
        }
        ("source.toolkit.fluxcd.io", "HelmRepository" | "HelmChart") => {
            "a chart is fetched by the ArmadaChart that uses it: `source: {type: tar, location: \
             https://…/chart-1.2.3.tgz}` (the chart archive's URL in the Helm repository) or \
             `type: git`"
        }
        ("kustomize.toolkit.fluxcd.io", "Kustomization") => {
            "Weft applies the synced path itself (one root per `--path`, pruned and waited for); \
             `spec.path` becomes `--path`, `prune`, `wait` and `timeout` are Weft's defaults and \
             flags, `dependsOn` is expressed with waves or ArmadaChartGroups, \
             `postBuild.substitute` is not done (see docs/flux.md)"
        }
        ("helm.toolkit.fluxcd.io", "HelmRelease") => {
            "a Helm release is an ArmadaChart (`armada.airshipit.org/v1alpha1`): `spec.chart` \
             becomes `source`, `values` stay `values`, `releaseName` is `release`, \
             `targetNamespace` is `namespace`, postRenderers' patches are `values.overlays`"
        }
        ("notification.toolkit.fluxcd.io", "Provider" | "Alert") => {
            "Weft has the same kinds in `notification.weft.io/v1alpha1`: change the apiVersion \
             (and name Weft's kinds in `eventSources`); see docs/notifications.md"
        }
        ("notification.toolkit.fluxcd.io", "Receiver") => {
            "Weft's HTTP server takes webhooks itself (`weft run --webhook-secret-file`); see \
             docs/daemon.md"
        }
        ("image.toolkit.fluxcd.io", _) => {
            "Weft does not write image updates back to git; pin image tags in the manifests \
             (WeaveCloud agents are updated by their channel, docs/auto-update.md)"
        }
        (g, _) if g.ends_with(".toolkit.fluxcd.io") => {
            "this kind is reconciled by one of Flux's controllers, which Weft replaces"
        }
        _ => return None,
    };
    Some(advice)
}

/// Refuse a document of Flux's kinds, at its `kind:` line, with what Weft uses instead.
pub fn refuse_flux_kind(raw: &RawDoc, api_version: &str, kind: &str, diags: &mut Diagnostics) {
    if let Some(advice) = flux_kind_advice(api_version, kind) {
        diags.error(
            raw.origin_of("/kind"),
            format!(
                "`{kind}` ({api_version}) is a Flux object, read by Flux's controllers, which \
                 Weft does not run: {advice}"
            ),
        );
    }
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
        assert!(flux_kind_advice("source.toolkit.fluxcd.io/v1", "GitRepository").is_some());
        assert!(flux_kind_advice("kustomize.toolkit.fluxcd.io/v1", "Kustomization").is_some());
        assert!(flux_kind_advice("helm.toolkit.fluxcd.io/v2", "HelmRelease").is_some());
        assert!(flux_kind_advice("image.toolkit.fluxcd.io/v1beta2", "ImagePolicy").is_some());
        assert!(flux_kind_advice("notification.weft.io/v1alpha1", "Alert").is_none());
        assert!(flux_kind_advice("kustomize.config.k8s.io/v1beta1", "Kustomization").is_none());
        assert!(flux_kind_advice("v1", "ConfigMap").is_none());
        assert!(is_kustomization_file("apps/base/kustomization.yaml"));
        assert!(is_kustomization_file("Kustomization"));
        assert!(!is_kustomization_file("apps/kustomization-notes.yaml"));
    }
}
