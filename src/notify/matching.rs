//! Which Alerts want an event: source kind, name (with `*` globs) and namespace, severity,
//! exclusions. Pure.
//!
//! Namespaces: an event source's `namespace` defaults to the Alert's own namespace, so an Alert
//! sees only its namespace's custom resources unless it names another. The sync root is not a
//! namespaced resource: a `Root` source matches the root's name (`--root-name`) and ignores the
//! namespace unless the Alert gives one (then it must be Weft's namespace, where the root's
//! inventory lives).

use regex::Regex;

use super::{Event, Severity};
use crate::api::notification::{AlertSpec, EventSourceRef, SeverityFilter, SourceKind};

/// Why an Alert's spec cannot be used (its `Ready=False` reason and message).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AlertProblem {
    #[error("exclusionList[{index}] is not a valid regular expression: {error}")]
    BadExclusion { index: usize, error: String },
}

impl AlertProblem {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            AlertProblem::BadExclusion { .. } => "InvalidExclusion",
        }
    }
}

/// An Alert's spec, checked and ready to match events.
#[derive(Clone, Debug)]
pub struct AlertRule {
    /// The Alert's namespace (the default of its sources, and the Provider's).
    pub namespace: String,
    pub name: String,
    pub provider: String,
    pub severity: SeverityFilter,
    pub sources: Vec<EventSourceRef>,
    pub exclusions: Vec<Regex>,
    pub summary: Option<String>,
}

impl AlertRule {
    /// Check `spec` of Alert `namespace/name`.
    pub fn new(namespace: &str, name: &str, spec: &AlertSpec) -> Result<AlertRule, AlertProblem> {
        let exclusions = spec
            .exclusion_list
            .iter()
            .enumerate()
            .map(|(index, re)| {
                // Bounded: a hostile pattern cannot make the regex engine's automaton unbounded.
                regex::RegexBuilder::new(re)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| AlertProblem::BadExclusion {
                        index,
                        error: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AlertRule {
            namespace: namespace.to_string(),
            name: name.to_string(),
            provider: spec.provider_ref.name.clone(),
            severity: spec.event_severity,
            sources: spec.event_sources.clone(),
            exclusions,
            summary: spec.summary.clone().filter(|s| !s.is_empty()),
        })
    }

    /// Whether this Alert forwards `event`.
    pub fn matches(&self, event: &Event) -> bool {
        if self.severity == SeverityFilter::Error && event.severity != Severity::Error {
            return false;
        }
        if !self.sources.iter().any(|s| self.source_matches(s, event)) {
            return false;
        }
        !self.exclusions.iter().any(|re| re.is_match(&event.message))
    }

    fn source_matches(&self, s: &EventSourceRef, event: &Event) -> bool {
        if s.kind != event.source.kind || !glob_matches(&s.name, &event.source.name) {
            return false;
        }
        match (&s.namespace, s.kind) {
            (Some(ns), _) => glob_matches(ns, &event.source.namespace),
            (None, SourceKind::Root) => true,
            (None, _) => self.namespace == event.source.namespace,
        }
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters (also none).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if name.len() < first.len() + last.len() || !name.starts_with(first) || !name.ends_with(last) {
        return false;
    }
    // Greedy left-to-right search of the middle parts between the fixed prefix and suffix: the
    // leftmost match of each part leaves the most room for the rest, so this is exact.
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::notification::LocalRef;
    use crate::notify::EventSource;

    #[test]
    fn globs() {
        assert!(glob_matches("*", ""));
        assert!(glob_matches("*", "anything"));
        assert!(glob_matches("web", "web"));
        assert!(!glob_matches("web", "web2"));
        assert!(glob_matches("web-*", "web-1"));
        assert!(!glob_matches("web-*", "api-1"));
        assert!(glob_matches("*-db", "orders-db"));
        assert!(glob_matches("a*b*c", "abc"));
        assert!(glob_matches("a*b*c", "a-x-b-y-c"));
        assert!(!glob_matches("a*b*c", "a-x-c-y-b"));
        // Prefix and suffix may not overlap.
        assert!(!glob_matches("ab*ba", "aba"));
        assert!(glob_matches("weft*", "weft-shard-1"));
    }

    fn alert(sources: Vec<EventSourceRef>) -> AlertSpec {
        AlertSpec {
            provider_ref: LocalRef { name: "p".into() },
            event_severity: SeverityFilter::Info,
            event_sources: sources,
            exclusion_list: Vec::new(),
            summary: None,
            suspend: false,
        }
    }

    fn src(kind: SourceKind, name: &str, ns: Option<&str>) -> EventSourceRef {
        EventSourceRef {
            kind,
            name: name.into(),
            namespace: ns.map(str::to_string),
        }
    }

    fn ev(kind: SourceKind, ns: &str, name: &str, severity: Severity, message: &str) -> Event {
        Event::new(
            EventSource {
                kind,
                namespace: ns.into(),
                name: name.into(),
            },
            severity,
            "R",
            message,
        )
    }

    #[test]
    fn sources_default_to_the_alerts_namespace_except_the_root() {
        let spec = alert(vec![
            src(SourceKind::ArmadaChart, "web-*", None),
            src(SourceKind::Root, "weft", None),
        ]);
        let rule = AlertRule::new("team", "a", &spec).unwrap();
        let info = Severity::Info;
        assert!(rule.matches(&ev(SourceKind::ArmadaChart, "team", "web-1", info, "m")));
        assert!(!rule.matches(&ev(SourceKind::ArmadaChart, "other", "web-1", info, "m")));
        assert!(!rule.matches(&ev(SourceKind::ArmadaChart, "team", "api", info, "m")));
        assert!(!rule.matches(&ev(SourceKind::WeaveCloud, "team", "web-1", info, "m")));
        // The root lives in Weft's namespace, not the Alert's.
        assert!(rule.matches(&ev(SourceKind::Root, "weft-system", "weft", info, "m")));
        assert!(!rule.matches(&ev(SourceKind::Root, "weft-system", "other", info, "m")));

        let pinned = alert(vec![src(SourceKind::Root, "*", Some("weft-system"))]);
        let rule = AlertRule::new("team", "a", &pinned).unwrap();
        assert!(rule.matches(&ev(SourceKind::Root, "weft-system", "weft", info, "m")));
        assert!(!rule.matches(&ev(SourceKind::Root, "elsewhere", "weft", info, "m")));

        let any_ns = alert(vec![src(SourceKind::WeaveCloud, "*", Some("*"))]);
        let rule = AlertRule::new("team", "a", &any_ns).unwrap();
        assert!(rule.matches(&ev(SourceKind::WeaveCloud, "weave", "wc", info, "m")));
    }

    #[test]
    fn an_error_alert_gets_no_info_events() {
        let mut spec = alert(vec![src(SourceKind::Root, "*", None)]);
        spec.event_severity = SeverityFilter::Error;
        let rule = AlertRule::new("ns", "a", &spec).unwrap();
        assert!(!rule.matches(&ev(SourceKind::Root, "x", "weft", Severity::Info, "m")));
        assert!(rule.matches(&ev(SourceKind::Root, "x", "weft", Severity::Error, "m")));
    }

    #[test]
    fn exclusions_drop_matching_messages_and_bad_ones_are_reported() {
        let mut spec = alert(vec![src(SourceKind::Root, "*", None)]);
        spec.exclusion_list = vec!["^no changes".into(), "timeout.*helm".into()];
        let rule = AlertRule::new("ns", "a", &spec).unwrap();
        let info = Severity::Info;
        assert!(!rule.matches(&ev(SourceKind::Root, "x", "w", info, "no changes here")));
        assert!(!rule.matches(&ev(SourceKind::Root, "x", "w", info, "a timeout in helm")));
        assert!(rule.matches(&ev(SourceKind::Root, "x", "w", info, "applied 3 objects")));

        spec.exclusion_list = vec!["ok".into(), "(unclosed".into()];
        let err = AlertRule::new("ns", "a", &spec).unwrap_err();
        assert_eq!(err.reason(), "InvalidExclusion");
        assert!(err.to_string().starts_with("exclusionList[1]"), "{err}");
    }
}
