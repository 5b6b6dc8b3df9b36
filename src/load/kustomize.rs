//! The files a kustomization names besides its resources: patches, the inputs of its
//! generators, its configurations. Weft runs no kustomize (the kustomization itself is refused,
//! [`super::flux::refuse_kustomization`]), but these files lie in the synced path too and are
//! not objects of their own: a patch of a HelmRelease would read as the HelmRelease "defined
//! twice", a values file as a document "missing apiVersion". Knowing what each one is, the
//! loader says so, and what to do with it, instead.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::yaml::{self, YamlLimits};
use super::{flux, Diagnostics, Origin, RawDoc};
use crate::source::Snapshot;

/// What a kustomization does with one of the files it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// A patch (`patches`, `patchesStrategicMerge`, `patchesJson6902`); `target` is the
    /// entry's `target` (`Kind name`), when it has one.
    Patch {
        field: &'static str,
        target: Option<String>,
    },
    /// An input of a `configMapGenerator` or `secretGenerator` (`files`, `envs`, `env`).
    GeneratorInput {
        field: &'static str,
        generator: String,
    },
    /// The values of a `helmCharts` entry (`valuesFile`).
    HelmValues { chart: String },
    /// kustomize's own configuration: `configurations`, `transformers`, `generators`,
    /// `validators`, `replacements`' files.
    Configuration { field: &'static str },
}

/// A file named by a kustomization: which one, and what it is to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub kustomization: String,
    pub role: Role,
}

/// What the kustomizations of a snapshot name, by the repository path of the named file; and
/// the directories that hold a kustomization.
#[derive(Clone, Debug, Default)]
pub struct KustomizeFiles {
    named: BTreeMap<String, Reference>,
    dirs: BTreeSet<String>,
}

impl KustomizeFiles {
    /// Read every kustomization of `snapshot`. One that does not parse names nothing: it is
    /// refused as a kustomization anyway.
    pub fn of(snapshot: &Snapshot) -> KustomizeFiles {
        let mut found = KustomizeFiles::default();
        for (path, bytes) in snapshot.files.iter() {
            if !flux::is_kustomization_file(path) {
                continue;
            }
            let dir = parent(path);
            found.dirs.insert(dir.to_string());
            let Ok(text) = std::str::from_utf8(bytes) else {
                continue;
            };
            let Ok(docs) = yaml::parse_documents(text, YamlLimits::default()) else {
                continue;
            };
            for doc in docs {
                for (file, role) in named_files(&doc.value) {
                    if let Some(target) = join(dir, &file) {
                        // The first kustomization to name a file tells what it is.
                        found.named.entry(target).or_insert_with(|| Reference {
                            kustomization: path.clone(),
                            role: role.clone(),
                        });
                    }
                }
            }
        }
        found
    }

    /// What a kustomization makes of `path`, if one names it.
    pub fn reference(&self, path: &str) -> Option<&Reference> {
        self.named.get(path)
    }

    /// The kustomization file in `path`'s directory, if there is one.
    pub fn beside(&self, path: &str) -> bool {
        self.dirs.contains(parent(path))
    }
}

/// The directory of a repository path (`""` at the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// `rel` (as a kustomization in `dir` writes it) as a repository path; `None` for what is
/// outside the repository or not a local file (a URL, an absolute path).
fn join(dir: &str, rel: &str) -> Option<String> {
    if rel.contains("://") || rel.starts_with('/') || rel.is_empty() {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

fn strings(value: Option<&Value>) -> Vec<&str> {
    match value {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => Vec::new(),
    }
}

fn items(value: &Value, key: &str) -> Vec<Value> {
    match value.get(key) {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

/// `Kind name` of a patch entry's `target`.
fn target(entry: &Value) -> Option<String> {
    let target = entry.get("target")?;
    let kind = target.get("kind").and_then(Value::as_str);
    let name = target.get("name").and_then(Value::as_str);
    match (kind, name) {
        (Some(k), Some(n)) => Some(format!("{k} {n}")),
        (Some(k), None) => Some(format!("every {k}")),
        (None, Some(n)) => Some(n.to_string()),
        (None, None) => None,
    }
}

/// The local files a kustomization names, with their role. Inline patches (`patch: |`) and
/// `resources` are not files of this kind.
fn named_files(k: &Value) -> Vec<(String, Role)> {
    let mut out = Vec::new();
    for (field, entries) in [
        ("patches", items(k, "patches")),
        ("patchesJson6902", items(k, "patchesJson6902")),
    ] {
        for entry in entries {
            if let Some(path) = entry.get("path").and_then(Value::as_str) {
                let role = Role::Patch {
                    field,
                    target: target(&entry),
                };
                out.push((path.to_string(), role));
            }
        }
    }
    // Each entry a file name, or (older kustomize) an inline patch, which has a newline or
    // a `:` of YAML in it.
    for entry in items(k, "patchesStrategicMerge") {
        if let Some(path) = entry
            .as_str()
            .filter(|s| !s.contains('\n') && !s.contains(": "))
        {
            let role = Role::Patch {
                field: "patchesStrategicMerge",
                target: None,
            };
            out.push((path.to_string(), role));
        }
    }
    for field in ["configMapGenerator", "secretGenerator"] {
        for generator in items(k, field) {
            let name = generator
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let mut inputs = strings(generator.get("files"));
            inputs.extend(strings(generator.get("envs")));
            inputs.extend(strings(generator.get("env")));
            for input in inputs {
                // `key=path`: the key the file's content is stored under.
                let path = input.split_once('=').map_or(input, |(_, p)| p);
                let role = Role::GeneratorInput {
                    field,
                    generator: name.clone(),
                };
                out.push((path.to_string(), role));
            }
        }
    }
    for chart in items(k, "helmCharts") {
        if let Some(path) = chart.get("valuesFile").and_then(Value::as_str) {
            let role = Role::HelmValues {
                chart: chart
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            };
            out.push((path.to_string(), role));
        }
    }
    for field in ["configurations", "transformers", "generators", "validators"] {
        for path in strings(k.get(field)) {
            // An entry may also be an inline configuration: only single-line names are files.
            if !path.contains('\n') {
                out.push((path.to_string(), Role::Configuration { field }));
            }
        }
    }
    for replacement in items(k, "replacements") {
        if let Some(path) = replacement.get("path").and_then(Value::as_str) {
            let role = Role::Configuration {
                field: "replacements",
            };
            out.push((path.to_string(), role));
        }
    }
    out
}

/// `Kind namespace/name` of a document, when it has a kind and a name.
fn object_name(value: &Value) -> Option<String> {
    let kind = value.get("kind")?.as_str()?;
    let meta = value.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    Some(match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) => format!(
            "{} {}/{}",
            yaml::quoted(kind),
            yaml::quoted(ns),
            yaml::quoted(name)
        ),
        None => format!("{} {}", yaml::quoted(kind), yaml::quoted(name)),
    })
}

/// Refuse a file a kustomization names, at its start, saying what it is and what to do.
/// `first` is the file's first document, when it parsed (a patch's object names its target).
pub fn refuse_named(path: &str, r: &Reference, first: Option<&Value>, diags: &mut Diagnostics) {
    let k = &r.kustomization;
    let message = match &r.role {
        Role::Patch { field, target } => {
            let what = match (first, target) {
                (Some(Value::Array(_)), Some(t)) => format!("a JSON 6902 patch of {t}"),
                (Some(Value::Array(_)), None) => "a JSON 6902 patch".to_string(),
                (Some(v), _) if object_name(v).is_some() => format!(
                    "a partial {}, merged into the object of that name",
                    object_name(v).unwrap_or_default()
                ),
                (_, Some(t)) => format!("a patch of {t}"),
                (_, None) => "a patch".to_string(),
            };
            format!(
                "this is a kustomize patch ({what}) that `{k}` applies with `{field}`, not an \
                 object of its own: Weft runs no kustomize and applies no patches. Write the \
                 change into the manifest it patches, in the directory of the cluster it is for \
                 (one root per cluster with `--path`; a HelmRelease's values go into its \
                 ArmadaChart's `values`), then delete this file; see docs/flux.md"
            )
        }
        Role::GeneratorInput { field, generator } => format!(
            "this is an input of `{k}`'s {field} `{generator}`, not a Kubernetes object: Weft \
             runs no kustomize, so nothing is generated from it. Write the {} itself (a Secret \
             encrypted with SOPS, docs/secrets.md); values a HelmRelease reads from it \
             (`valuesFrom`) go into its ArmadaChart's `values`; then delete this file; see \
             docs/flux.md",
            if *field == "secretGenerator" {
                "Secret"
            } else {
                "ConfigMap"
            }
        ),
        Role::HelmValues { chart } => format!(
            "this is the values file of `{k}`'s helmCharts entry `{chart}`, not a Kubernetes \
             object: Weft runs no kustomize; the chart is an ArmadaChart and these values its \
             `values` (docs/armada.md); then delete this file; see docs/flux.md"
        ),
        Role::Configuration { field } => format!(
            "this is kustomize's own configuration (`{k}`'s `{field}`), read by kustomize only \
             and not a Kubernetes object: Weft runs no kustomize; delete it with the \
             kustomization; see docs/flux.md"
        ),
    };
    diags.error(flux::file_start(path), message);
}

/// Refuse a document with neither `apiVersion` nor `kind` beside a kustomization: a values file
/// or a kustomize input that no kustomization names (Flux's HelmRelease `valuesFrom`, a file of
/// a generator written elsewhere), not an object missing its apiVersion.
pub fn refuse_unnamed_input(raw: &RawDoc, diags: &mut Diagnostics) {
    let dir = match parent(&raw.origin.file) {
        "" => ".",
        d => d,
    };
    diags.error(
        Origin {
            file: raw.origin.file.clone(),
            pos: raw.origin.pos,
        },
        format!(
            "this document has neither `apiVersion` nor `kind`: not a Kubernetes object but, \
             beside the kustomization of `{dir}`, a file kustomize or Flux reads (Helm values, \
             a generator's input). Weft applies only Kubernetes objects and runs no kustomize: \
             put Helm values into the ArmadaChart's `values` (docs/armada.md), write a \
             generated ConfigMap or Secret itself, then delete this file or move it out of the \
             synced path; see docs/flux.md"
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Value {
        yaml::parse_documents(text, YamlLimits::default())
            .expect("parses")
            .remove(0)
            .value
    }

    #[test]
    fn paths_are_joined_to_the_kustomization_directory() {
        assert_eq!(
            join("apps/staging", "podinfo-values.yaml").as_deref(),
            Some("apps/staging/podinfo-values.yaml")
        );
        assert_eq!(
            join("apps/staging", "./p.yaml").as_deref(),
            Some("apps/staging/p.yaml")
        );
        assert_eq!(
            join("apps/staging", "../base/v.yaml").as_deref(),
            Some("apps/base/v.yaml")
        );
        assert_eq!(join("", "v.yaml").as_deref(), Some("v.yaml"));
        assert_eq!(join("a", "../../v.yaml"), None);
        assert_eq!(join("a", "https://example.com/p.yaml"), None);
        assert_eq!(join("a", "/etc/p.yaml"), None);
    }

    #[test]
    fn every_kind_of_named_file_is_found_and_inline_patches_are_not() {
        let k = value(
            "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [release.yaml]
patches:
  - path: values-patch.yaml
    target: {kind: HelmRelease, name: podinfo}
  - patch: |
      - op: add
        path: /x
        value: 1
patchesStrategicMerge:
  - smp.yaml
  - |
    apiVersion: v1
    kind: ConfigMap
patchesJson6902:
  - path: ops.yaml
    target: {kind: Deployment}
configMapGenerator:
  - name: podinfo-values
    files: [values.yaml=podinfo-values.yaml]
secretGenerator:
  - name: creds
    envs: [creds.env]
helmCharts:
  - name: redis
    valuesFile: redis-values.yaml
configurations: [kustomizeconfig.yaml]
replacements:
  - path: replacement.yaml
",
        );
        let found: Vec<String> = named_files(&k).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            found,
            [
                "values-patch.yaml",
                "ops.yaml",
                "smp.yaml",
                "podinfo-values.yaml",
                "creds.env",
                "redis-values.yaml",
                "kustomizeconfig.yaml",
                "replacement.yaml"
            ]
        );
        let roles: Vec<Role> = named_files(&k).into_iter().map(|(_, r)| r).collect();
        assert_eq!(
            roles[0],
            Role::Patch {
                field: "patches",
                target: Some("HelmRelease podinfo".into())
            }
        );
        assert_eq!(
            roles[3],
            Role::GeneratorInput {
                field: "configMapGenerator",
                generator: "podinfo-values".into()
            }
        );
    }
}
