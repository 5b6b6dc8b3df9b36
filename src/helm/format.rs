//! Which renderer a chart is for: helm, unless the chart opts into Weft's `${}` format.
//!
//! The opt-in is an annotation in the chart's own `Chart.yaml` (a field Helm's Chart.yaml already
//! has, so the file stays a valid chart description):
//!
//! ```yaml
//! name: redis
//! version: 7.2.0
//! annotations:
//!   weft.io/template-format: substitution
//! ```
//!
//! `helm` is accepted as the explicit opposite; any other value is an error. Without the opt-in
//! every chart is a Helm chart, so a Helm chart can never pass through the `${}` renderer by
//! accident. A chart that opts in but has a `.tpl` file or `{{` in a file under `templates/` is
//! refused: either renderer would deploy it wrong. An `apiVersion: v1|v2` in an opted-in Chart.yaml
//! is allowed (the annotation is explicit; `helm create` writes apiVersion too).

use crate::api::keys::TEMPLATE_FORMAT_ANNOTATION;
use serde_json::Value;

use super::{ChartFiles, HelmError};

/// How a chart is rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChartFormat {
    /// By `helm template`; why Weft thinks so.
    Helm(HelmEvidence),
    /// By Weft's template-free `${path}` substitution (the chart opted in).
    Substitution,
}

/// Why a chart is a Helm chart (the first reason found, in this order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelmEvidence {
    /// `Chart.yaml` says `weft.io/template-format: helm`.
    Annotation,
    /// `Chart.yaml` has a Helm `apiVersion` (`v1` or `v2`).
    ChartApiVersion(String),
    /// A template helper file (`*.tpl`).
    TplFile(String),
    /// A file under `templates/` contains a template action `{{`.
    TemplateAction(String),
    /// Nothing either way: a chart is a Helm chart unless it opts out.
    Default,
}

impl HelmEvidence {
    /// The chart file that is the evidence, if it is a file.
    pub fn file(&self) -> Option<&str> {
        match self {
            HelmEvidence::TplFile(f) | HelmEvidence::TemplateAction(f) => Some(f),
            _ => None,
        }
    }
}

impl std::fmt::Display for HelmEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelmEvidence::Annotation => {
                write!(f, "Chart.yaml has {TEMPLATE_FORMAT_ANNOTATION}: helm")
            }
            HelmEvidence::ChartApiVersion(v) => write!(f, "Chart.yaml has apiVersion {v}"),
            HelmEvidence::TplFile(p) => write!(f, "{p} is a template helper file"),
            HelmEvidence::TemplateAction(p) => write!(f, "{p} contains `{{{{`"),
            HelmEvidence::Default => write!(f, "the chart does not opt into Weft's `${{}}` format"),
        }
    }
}

/// Decide how `chart` is rendered (see the module documentation for the rule).
pub fn chart_format(chart: &ChartFiles) -> Result<ChartFormat, HelmError> {
    let meta = chart_yaml(chart);
    let opted_in = match meta
        .as_ref()
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(TEMPLATE_FORMAT_ANNOTATION))
    {
        None => false,
        Some(Value::String(s)) if s.trim() == "substitution" => true,
        Some(Value::String(s)) if s.trim() == "helm" => {
            return Ok(ChartFormat::Helm(HelmEvidence::Annotation))
        }
        Some(other) => {
            return Err(HelmError::UnknownTemplateFormat {
                value: match other {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                },
            })
        }
    };

    let syntax = helm_syntax(chart);
    if opted_in {
        return match syntax {
            Some(evidence) => Err(HelmError::FormatConflict {
                file: evidence.file().unwrap_or("Chart.yaml").to_string(),
                evidence: evidence.to_string(),
            }),
            None => Ok(ChartFormat::Substitution),
        };
    }

    let api_version = meta
        .as_ref()
        .and_then(|m| m.get("apiVersion"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| matches!(*v, "v1" | "v2"));
    Ok(ChartFormat::Helm(match (api_version, syntax) {
        (Some(v), _) => HelmEvidence::ChartApiVersion(v.to_string()),
        (None, Some(evidence)) => evidence,
        (None, None) => HelmEvidence::Default,
    }))
}

/// The chart's `Chart.yaml` as data, if it parses; a broken one is left for helm to report.
fn chart_yaml(chart: &ChartFiles) -> Option<Value> {
    let text = std::str::from_utf8(chart.files.get("Chart.yaml")?).ok()?;
    serde_saphyr::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

/// The first `.tpl` file, else the first file under `templates/` with `{{`.
fn helm_syntax(chart: &ChartFiles) -> Option<HelmEvidence> {
    if let Some(p) = chart.files.keys().find(|p| p.ends_with(".tpl")) {
        return Some(HelmEvidence::TplFile(p.clone()));
    }
    chart
        .files
        .iter()
        .find(|(p, content)| p.starts_with("templates/") && contains_action(content))
        .map(|(p, _)| HelmEvidence::TemplateAction(p.clone()))
}

fn contains_action(content: &[u8]) -> bool {
    content.windows(2).any(|w| w == b"{{")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(files: &[(&str, &str)]) -> ChartFiles {
        ChartFiles::from_pairs(files.iter().map(|(p, c)| (*p, c.as_bytes())))
    }

    #[test]
    fn helm_chart_yaml_makes_a_helm_chart() {
        let c = chart(&[
            ("Chart.yaml", "apiVersion: v2\nname: web\nversion: 1.0.0\n"),
            ("templates/a.yaml", "kind: ConfigMap\n"),
        ]);
        assert_eq!(
            chart_format(&c).unwrap(),
            ChartFormat::Helm(HelmEvidence::ChartApiVersion("v2".into()))
        );
    }

    #[test]
    fn template_action_or_tpl_file_makes_a_helm_chart() {
        let c = chart(&[
            ("Chart.yaml", "name: web\nversion: 1.0.0\n"),
            ("templates/a.yaml", "port: {{ .Values.port }}\n"),
        ]);
        assert_eq!(
            chart_format(&c).unwrap(),
            ChartFormat::Helm(HelmEvidence::TemplateAction("templates/a.yaml".into()))
        );
        let c = chart(&[
            ("Chart.yaml", "name: web\n"),
            ("templates/_helpers.tpl", "nothing yet"),
        ]);
        assert_eq!(
            chart_format(&c).unwrap(),
            ChartFormat::Helm(HelmEvidence::TplFile("templates/_helpers.tpl".into()))
        );
    }

    #[test]
    fn a_chart_without_opt_in_is_a_helm_chart() {
        // Weft's old charts (no apiVersion, `${}` placeholders) must opt in now.
        let c = chart(&[
            ("Chart.yaml", "name: web\nversion: 1.0.0\n"),
            ("templates/a.yaml", "port: ${port}\n"),
        ]);
        assert_eq!(
            chart_format(&c).unwrap(),
            ChartFormat::Helm(HelmEvidence::Default)
        );
        assert_eq!(
            chart_format(&ChartFiles::default()).unwrap(),
            ChartFormat::Helm(HelmEvidence::Default)
        );
    }

    #[test]
    fn the_annotation_opts_into_substitution() {
        let c = chart(&[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: web\nannotations:\n  weft.io/template-format: substitution\n",
            ),
            ("templates/a.yaml", "port: ${port:=80}\n"),
            // `{{` outside templates/ is not template syntax (e.g. a values default).
            ("values.yaml", "message: '{{ not a template }}'\n"),
        ]);
        assert_eq!(chart_format(&c).unwrap(), ChartFormat::Substitution);
    }

    #[test]
    fn explicit_helm_annotation_and_unknown_values() {
        let c = chart(&[(
            "Chart.yaml",
            "name: web\nannotations:\n  weft.io/template-format: helm\n",
        )]);
        assert_eq!(
            chart_format(&c).unwrap(),
            ChartFormat::Helm(HelmEvidence::Annotation)
        );
        let c = chart(&[(
            "Chart.yaml",
            "name: web\nannotations:\n  weft.io/template-format: jinja\n",
        )]);
        let err = chart_format(&c).unwrap_err().to_string();
        assert!(err.contains("`jinja`"), "{err}");
        assert!(err.contains("substitution"), "{err}");
    }

    #[test]
    fn opting_in_with_helm_syntax_is_refused() {
        let c = chart(&[
            (
                "Chart.yaml",
                "name: web\nannotations:\n  weft.io/template-format: substitution\n",
            ),
            ("templates/a.yaml", "port: {{ .Values.port }}\n"),
        ]);
        let err = chart_format(&c).unwrap_err();
        assert!(
            matches!(&err, HelmError::FormatConflict { file, .. } if file == "templates/a.yaml"),
            "{err}"
        );
    }

    #[test]
    fn a_broken_chart_yaml_is_left_to_helm() {
        let c = chart(&[("Chart.yaml", "name: [unclosed\n")]);
        assert_eq!(
            chart_format(&c).unwrap(),
            ChartFormat::Helm(HelmEvidence::Default)
        );
    }
}
