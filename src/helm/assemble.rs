//! The chart directory helm renders, built as Armada's chart builder (`chartbuilder.py`) builds it:
//! when the Armada chart lists `dependencies` (even an empty list) its own `charts/` directory is
//! replaced, and each dependency, itself built first, goes under `charts/<name in its Chart.yaml>`.
//! Armada symlinks the dependency directories; Weft copies them, because helm warns on symlinks
//! and a copy cannot point outside the temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::{ChartFiles, ChartTree, HelmError};

/// Every file of the assembled chart directory: path relative to it → content.
pub fn assemble(tree: &ChartTree) -> Result<BTreeMap<String, &[u8]>, HelmError> {
    let mut out = BTreeMap::new();
    assemble_into(tree, "", "the chart", &mut out)?;
    Ok(out)
}

fn assemble_into<'a>(
    tree: &'a ChartTree,
    prefix: &str,
    label: &str,
    out: &mut BTreeMap<String, &'a [u8]>,
) -> Result<(), HelmError> {
    let replace_charts = tree.dependencies.is_some();
    for (path, content) in &tree.chart.files {
        check_path(path)?;
        if replace_charts && (path == "charts" || path.starts_with("charts/")) {
            continue;
        }
        out.insert(format!("{prefix}{path}"), content.as_slice());
    }
    let Some(dependencies) = &tree.dependencies else {
        return Ok(());
    };
    let mut seen = BTreeSet::new();
    for (i, dependency) in dependencies.iter().enumerate() {
        let name = dependency_name(&dependency.chart).map_err(|reason| HelmError::Dependency {
            index: i + 1,
            parent: label.to_string(),
            reason: reason.to_string(),
        })?;
        if !seen.insert(name.clone()) {
            return Err(HelmError::DuplicateDependency { name });
        }
        assemble_into(
            dependency,
            &format!("{prefix}charts/{name}/"),
            &format!("dependency {name}"),
            out,
        )?;
    }
    Ok(())
}

/// Why a dependency chart has no usable name.
#[derive(Debug, thiserror::Error)]
pub enum DependencyNameError {
    #[error("it has no Chart.yaml")]
    NoChartYaml,
    #[error("its Chart.yaml is not UTF-8")]
    NotUtf8,
    #[error("its Chart.yaml: {0}")]
    Parse(String),
    #[error("its Chart.yaml has no `name`")]
    NoName,
    #[error("its Chart.yaml name `{0}` cannot be a directory name under charts/")]
    BadName(String),
}

/// The `name` in a dependency's `Chart.yaml`: the directory it goes to under `charts/`.
pub fn dependency_name(chart: &ChartFiles) -> Result<String, DependencyNameError> {
    let bytes = chart
        .files
        .get("Chart.yaml")
        .ok_or(DependencyNameError::NoChartYaml)?;
    let text = std::str::from_utf8(bytes).map_err(|_| DependencyNameError::NotUtf8)?;
    let meta: Value =
        serde_saphyr::from_str(text).map_err(|e| DependencyNameError::Parse(e.to_string()))?;
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .ok_or(DependencyNameError::NoName)?;
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(DependencyNameError::BadName(name.to_string()));
    }
    Ok(name.to_string())
}

/// A chart file path must stay inside the chart directory.
fn check_path(path: &str) -> Result<(), HelmError> {
    let bad = |reason: &str| HelmError::BadPath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    crate::source::check_relative_path(path).map_err(|e| bad(&e.to_string()))?;
    if path.contains('\0') || path.split('/').any(|c| c.is_empty() || c == ".") {
        return Err(bad("empty, `.` or NUL path component"));
    }
    Ok(())
}

/// Write `files` under `dir` (which must exist).
pub fn write_chart(dir: &Path, files: &BTreeMap<String, &[u8]>) -> Result<(), HelmError> {
    for (path, content) in files {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| HelmError::Io {
                context: format!("creating the directory of chart file {path}"),
                source,
            })?;
        }
        std::fs::write(&target, content).map_err(|source| HelmError::Io {
            context: format!("writing chart file {path}"),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(files: &[(&str, &str)]) -> ChartTree {
        ChartTree::new(ChartFiles::from_pairs(
            files.iter().map(|(p, c)| (*p, c.as_bytes())),
        ))
    }

    fn paths(files: &BTreeMap<String, &[u8]>) -> Vec<String> {
        files.keys().cloned().collect()
    }

    #[test]
    fn without_dependencies_the_chart_is_used_as_it_is() {
        let tree = chart(&[
            ("Chart.yaml", "name: web\n"),
            ("charts/old/Chart.yaml", "name: old\n"),
        ]);
        assert_eq!(
            paths(&assemble(&tree).unwrap()),
            ["Chart.yaml", "charts/old/Chart.yaml"]
        );
    }

    #[test]
    fn dependencies_replace_charts_and_go_under_their_chart_yaml_name() {
        let lib = chart(&[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: weft-lib\ntype: library\n",
            ),
            ("templates/_labels.tpl", "{{- define \"x\" -}}{{- end -}}"),
            // The dependency's own charts/ stays: it has no Armada dependencies of its own.
            ("charts/inner/Chart.yaml", "name: inner\n"),
        ]);
        let tree = chart(&[
            ("Chart.yaml", "name: web\n"),
            ("charts/old/Chart.yaml", "name: old\n"),
            ("charts", "a file named charts"),
            ("templates/a.yaml", "a: 1\n"),
        ])
        .with_dependencies(vec![lib]);
        let files = assemble(&tree).unwrap();
        assert_eq!(
            paths(&files),
            [
                "Chart.yaml",
                "charts/weft-lib/Chart.yaml",
                "charts/weft-lib/charts/inner/Chart.yaml",
                "charts/weft-lib/templates/_labels.tpl",
                "templates/a.yaml",
            ]
        );
        assert_eq!(files["templates/a.yaml"], b"a: 1\n");
    }

    #[test]
    fn dependencies_are_built_recursively_and_an_empty_list_clears_charts() {
        let toolkit = chart(&[("Chart.yaml", "name: toolkit\n")]);
        let lib = chart(&[
            ("Chart.yaml", "name: lib\n"),
            ("charts/stale/Chart.yaml", "name: stale\n"),
        ])
        .with_dependencies(vec![toolkit]);
        let tree = chart(&[("Chart.yaml", "name: web\n")]).with_dependencies(vec![lib]);
        assert_eq!(
            paths(&assemble(&tree).unwrap()),
            [
                "Chart.yaml",
                "charts/lib/Chart.yaml",
                "charts/lib/charts/toolkit/Chart.yaml"
            ]
        );
        let tree = chart(&[
            ("Chart.yaml", "name: web\n"),
            ("charts/old/Chart.yaml", "name: old\n"),
        ])
        .with_dependencies(vec![]);
        assert_eq!(paths(&assemble(&tree).unwrap()), ["Chart.yaml"]);
    }

    #[test]
    fn bad_dependencies_are_named() {
        let tree = chart(&[("Chart.yaml", "name: web\n")]).with_dependencies(vec![
            chart(&[("Chart.yaml", "name: a\n")]),
            chart(&[("values.yaml", "")]),
        ]);
        let err = assemble(&tree).unwrap_err().to_string();
        assert_eq!(
            err,
            "dependency chart 2 (of the chart): it has no Chart.yaml"
        );

        let tree = chart(&[("Chart.yaml", "name: web\n")])
            .with_dependencies(vec![chart(&[("Chart.yaml", "name: ../../etc\n")])]);
        let err = assemble(&tree).unwrap_err().to_string();
        assert!(err.contains("cannot be a directory name"), "{err}");

        let tree = chart(&[("Chart.yaml", "name: web\n")]).with_dependencies(vec![
            chart(&[("Chart.yaml", "name: a\n")]),
            chart(&[("Chart.yaml", "name: a\nversion: 2.0.0\n")]),
        ]);
        assert!(matches!(
            assemble(&tree).unwrap_err(),
            HelmError::DuplicateDependency { name } if name == "a"
        ));
    }

    #[test]
    fn paths_must_stay_inside_the_chart() {
        for path in ["../x", "/etc/passwd", "a//b", "./a", "a\\b"] {
            let tree = chart(&[("Chart.yaml", "name: web\n"), (path, "x")]);
            assert!(
                matches!(assemble(&tree), Err(HelmError::BadPath { .. })),
                "{path}"
            );
        }
    }

    #[test]
    fn written_files_are_plain_copies() {
        let tree = chart(&[("Chart.yaml", "name: web\n")])
            .with_dependencies(vec![chart(&[("Chart.yaml", "name: lib\n")])]);
        let dir = tempfile::tempdir().unwrap();
        write_chart(dir.path(), &assemble(&tree).unwrap()).unwrap();
        let dep = dir.path().join("charts/lib/Chart.yaml");
        assert_eq!(std::fs::read_to_string(&dep).unwrap(), "name: lib\n");
        assert!(!std::fs::symlink_metadata(dir.path().join("charts/lib"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
