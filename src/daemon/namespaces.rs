//! `--watch-namespaces`: which namespaces' custom resources the controllers and the updater act on.

use std::sync::Arc;

/// `--watch-namespaces`: the namespaces whose custom resources the controllers and the updater
/// act on. A WeaveCloud elsewhere gets no agents, no finalizer, no update check: creating one
/// in a namespace the operator did not list gives nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchNamespaces(Option<Arc<std::collections::BTreeSet<String>>>);

impl WatchNamespaces {
    /// Every namespace.
    pub fn all() -> Self {
        WatchNamespaces(None)
    }
    /// Only these (an empty list means every namespace, as the flag left empty).
    pub fn only(namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let set: std::collections::BTreeSet<String> = namespaces
            .into_iter()
            .map(Into::into)
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if set.is_empty() {
            WatchNamespaces(None)
        } else {
            WatchNamespaces(Some(Arc::new(set)))
        }
    }
    /// The namespaces listed, or `None` for every namespace.
    pub fn listed(&self) -> Option<impl Iterator<Item = &str>> {
        self.0.as_ref().map(|set| set.iter().map(String::as_str))
    }
    /// The namespaces listed as owned names, or `None` for every namespace (for
    /// [`crate::apply::watch`]).
    pub fn names(&self) -> Option<Vec<String>> {
        self.0.as_ref().map(|set| set.iter().cloned().collect())
    }
    /// Whether the controllers act on resources of `namespace`.
    pub fn contains(&self, namespace: &str) -> bool {
        self.0.as_ref().is_none_or(|set| set.contains(namespace))
    }
}
