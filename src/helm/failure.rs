//! helm's error text → the template file, line and column it names, so that Weft's error can point
//! a user at the line to fix. The shapes below are those helm 3.22 prints (see the tests).

use std::sync::LazyLock;

use regex::Regex;

/// A failed `helm template`, as helm described it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelmFailure {
    /// helm's error without the `Error: ` prefix and the `--debug` hint.
    pub message: String,
    /// Where, when helm names a template.
    pub location: Option<TemplateLocation>,
    /// Lines helm printed before the error (warnings).
    pub warnings: Vec<String>,
}

/// A template file and position in it, as helm names it: the path starts with the chart *name*
/// from `Chart.yaml` (`web/templates/deploy.yaml`, `web/charts/weft-lib/templates/_x.tpl`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateLocation {
    pub file: String,
    /// The line in the template source (absent for YAML errors: helm's line there counts in the
    /// rendered output, and stays in `message`).
    pub line: Option<u32>,
    pub column: Option<u32>,
    /// What went wrong there (`image is required`).
    pub message: String,
}

impl std::fmt::Display for HelmFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(l) => {
                write!(f, "{}", l.file)?;
                if let Some(line) = l.line {
                    write!(f, ":{line}")?;
                }
                if let Some(column) = l.column {
                    write!(f, ":{column}")?;
                }
                write!(f, ": {}", l.message)
            }
            None => write!(f, "{}", self.message),
        }
    }
}

/// The shapes of helm's template errors, most specific first. Groups: file, line, column, message.
static PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // `required` and `fail`.
        r"execution error at \((?P<file>[^()]+?):(?P<line>\d+):(?P<column>\d+)\): (?P<message>(?s).*)",
        r"parse error at \((?P<file>[^()]+?):(?P<line>\d+)\): (?P<message>(?s).*)",
        // Other execution errors (nil pointer, a missing named template …).
        r"template: (?P<file>[^\s:]+):(?P<line>\d+):(?P<column>\d+): (?P<message>(?s).*)",
        r"template: (?P<file>[^\s:]+):(?P<line>\d+): (?P<message>(?s).*)",
        r"YAML parse error on (?P<file>[^\s:]+): (?P<message>(?s).*)",
    ]
    .iter()
    // The patterns are literals covered by the tests below: compiling them cannot fail.
    .filter_map(|p| Regex::new(p).ok())
    .collect()
});

const DEBUG_HINT: &str = "Use --debug flag to render out invalid YAML";

/// Read helm's stderr of a failed run.
pub fn parse_helm_failure(stderr: &str) -> HelmFailure {
    let lines: Vec<&str> = stderr.lines().collect();
    let error_at = lines.iter().position(|l| l.starts_with("Error: "));
    let (warnings, message) = match error_at {
        Some(i) => {
            let body: Vec<&str> = lines[i..]
                .iter()
                .map(|l| l.strip_prefix("Error: ").unwrap_or(l))
                .filter(|l| l.trim() != DEBUG_HINT)
                .collect();
            (&lines[..i], body.join("\n").trim().to_string())
        }
        None => (&[][..], stderr.trim().to_string()),
    };
    let message = if message.is_empty() {
        "helm failed without a message".to_string()
    } else {
        message
    };
    HelmFailure {
        location: locate(&message),
        message,
        warnings: warnings
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    }
}

fn locate(message: &str) -> Option<TemplateLocation> {
    PATTERNS.iter().find_map(|re| {
        let c = re.captures(message)?;
        let number = |name: &str| c.name(name).and_then(|m| m.as_str().parse().ok());
        Some(TemplateLocation {
            file: c.name("file")?.as_str().to_string(),
            line: number("line"),
            column: number("column"),
            message: c.name("message")?.as_str().trim().to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// stderr of helm v3.22.0 `template`, verbatim.
    const REQUIRED: &str = "Error: execution error at (app/templates/deploy.yaml:6:8): image is required\n\nUse --debug flag to render out invalid YAML\n";
    const PARSE: &str = "Error: parse error at (app/templates/deploy.yaml:5): unclosed action started at app/templates/deploy.yaml:4\n\nUse --debug flag to render out invalid YAML\n";
    const NIL: &str = "Error: template: app/templates/deploy.yaml:4:15: executing \"app/templates/deploy.yaml\" at <.Values.x.y.z>: nil pointer evaluating interface {}.y\n\nUse --debug flag to render out invalid YAML\n";
    const YAML: &str = "Error: YAML parse error on app/templates/deploy.yaml: error converting YAML to JSON: yaml: line 5: mapping values are not allowed in this context\n\nUse --debug flag to render out invalid YAML\n";
    const UNDEFINED: &str = "Error: parse error at (app/templates/deploy.yaml:1): function \"nofunc\" not defined\n\nUse --debug flag to render out invalid YAML\n";
    const MISSING_DEP: &str = "Error: An error occurred while checking for chart dependencies. You may need to run `helm dependency build` to fetch missing dependencies: found in Chart.yaml, but missing in charts/ directory: lib\n";

    fn location(stderr: &str) -> TemplateLocation {
        parse_helm_failure(stderr).location.expect("a location")
    }

    #[test]
    fn required_and_fail_name_file_line_and_column() {
        let l = location(REQUIRED);
        assert_eq!(l.file, "app/templates/deploy.yaml");
        assert_eq!((l.line, l.column), (Some(6), Some(8)));
        assert_eq!(l.message, "image is required");
        let f = parse_helm_failure(REQUIRED);
        assert_eq!(
            f.message,
            "execution error at (app/templates/deploy.yaml:6:8): image is required"
        );
        assert_eq!(
            f.to_string(),
            "app/templates/deploy.yaml:6:8: image is required"
        );
        assert!(f.warnings.is_empty());
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        let l = location(PARSE);
        assert_eq!(
            (l.file.as_str(), l.line, l.column),
            ("app/templates/deploy.yaml", Some(5), None)
        );
        assert_eq!(
            l.message,
            "unclosed action started at app/templates/deploy.yaml:4"
        );
        let l = location(UNDEFINED);
        assert_eq!(l.line, Some(1));
        assert_eq!(l.message, "function \"nofunc\" not defined");
    }

    #[test]
    fn other_execution_errors_name_file_line_and_column() {
        let l = location(NIL);
        assert_eq!(
            (l.file.as_str(), l.line, l.column),
            ("app/templates/deploy.yaml", Some(4), Some(15))
        );
        assert!(l.message.ends_with("nil pointer evaluating interface {}.y"));
    }

    #[test]
    fn yaml_errors_name_the_file_only() {
        let l = location(YAML);
        assert_eq!(
            (l.file.as_str(), l.line),
            ("app/templates/deploy.yaml", None)
        );
        assert!(
            l.message.contains("yaml: line 5: mapping values"),
            "{}",
            l.message
        );
    }

    #[test]
    fn errors_without_a_template_keep_helms_message() {
        let f = parse_helm_failure(MISSING_DEP);
        assert_eq!(f.location, None);
        assert!(f.message.ends_with("missing in charts/ directory: lib"));
        assert_eq!(f.to_string(), f.message);
        assert_eq!(
            parse_helm_failure("").message,
            "helm failed without a message"
        );
    }

    #[test]
    fn lines_before_the_error_are_warnings() {
        let f = parse_helm_failure(&format!(
            "walk.go:75: found symbolic link in path: /x\n{REQUIRED}"
        ));
        assert_eq!(f.warnings, ["walk.go:75: found symbolic link in path: /x"]);
        assert_eq!(f.location.unwrap().line, Some(6));
    }

    #[test]
    fn subchart_templates_keep_their_full_path() {
        let l = location("Error: execution error at (web/charts/weft-lib/templates/_container.tpl:3:12): image.repository is required\n");
        assert_eq!(l.file, "web/charts/weft-lib/templates/_container.tpl");
        assert_eq!(l.message, "image.repository is required");
    }
}
