//! The result of every verb: per object, what happened. The CLI output, CR status, events and
//! metrics are views of one [`ChangeSet`].

use std::fmt;

use crate::api::ObjectRef;
use crate::render::Owner;

/// What happened to one object (or, in a dry run, what would happen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// The object did not exist and was created.
    Created,
    /// The object existed and was written (changed in git, drifted, or adopted).
    Configured,
    /// The object was already as desired: no write.
    Unchanged,
    /// The object was pruned.
    Deleted,
    /// The object was left alone on purpose (protected, not owned, prune guard); see the reason.
    Skipped,
}

impl Action {
    /// Past tense, for a pass that was carried out.
    pub fn done(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Deleted => "deleted",
            Action::Skipped => "skipped",
        }
    }
    /// Imperative, for `--dry-run`'s plan.
    pub fn planned(self) -> &'static str {
        match self {
            Action::Created => "create",
            Action::Configured => "update",
            Action::Unchanged => "unchanged",
            Action::Deleted => "prune",
            Action::Skipped => "skip",
        }
    }
}

/// One object's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub object: ObjectRef,
    /// Who applied (or pruned) it; `owner.reference()` is the readable form
    /// (`root/weft-system/weft`, `WeaveCloud/weave/weave-cloud`).
    pub owner: Owner,
    pub action: Action,
    /// Why, when it is not obvious: `drifted`, `adopted`, `prune disabled`, …
    pub reason: Option<String>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.object, self.action.done())?;
        if let Some(r) = &self.reason {
            write!(f, " ({r})")?;
        }
        Ok(())
    }
}

/// Every change of a verb or a pass, in the order they happened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    pub entries: Vec<Change>,
    /// Objects this owner holds and applied that another Weft root declares too: each object
    /// with what is said of it. Reported on both roots; they stop nothing (`apply::conflict`).
    pub conflicts: Vec<(ObjectRef, String)>,
}

/// Counts per action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub created: usize,
    pub configured: usize,
    pub unchanged: usize,
    pub deleted: usize,
    pub skipped: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} created, {} configured, {} unchanged, {} deleted, {} skipped",
            self.created, self.configured, self.unchanged, self.deleted, self.skipped
        )
    }
}

impl ChangeSet {
    pub fn push(&mut self, change: Change) {
        self.entries.push(change);
    }
    /// `other`'s changes after these; moved, not copied, into an empty set (a wave of 100,000
    /// objects is not held twice).
    pub fn extend(&mut self, other: ChangeSet) {
        if self.entries.is_empty() {
            self.entries = other.entries;
        } else {
            self.entries.extend(other.entries);
        }
        self.conflicts.extend(other.conflicts);
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Entries with this action.
    pub fn with_action(&self, action: Action) -> impl Iterator<Item = &Change> {
        self.entries.iter().filter(move |c| c.action == action)
    }
    /// The entry of one object, if any.
    pub fn find(&self, object: &ObjectRef) -> Option<&Change> {
        self.entries.iter().find(|c| &c.object == object)
    }
    /// `true` when the pass created, configured or deleted something.
    pub fn has_changes(&self) -> bool {
        self.entries.iter().any(|c| {
            matches!(
                c.action,
                Action::Created | Action::Configured | Action::Deleted
            )
        })
    }
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.entries {
            match c.action {
                Action::Created => s.created += 1,
                Action::Configured => s.configured += 1,
                Action::Unchanged => s.unchanged += 1,
                Action::Deleted => s.deleted += 1,
                Action::Skipped => s.skipped += 1,
            }
        }
        s
    }
    /// The plan view (`weft sync --dry-run`): one line per object, `create ConfigMap/ns/name`.
    pub fn plan_lines(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|c| {
                let mut line = format!("{:<9} {}", c.action.planned(), c.object);
                if let Some(r) = &c.reason {
                    line.push_str(&format!(" ({r})"));
                }
                line
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn views_of_one_changeset() {
        let mut cs = ChangeSet::default();
        cs.push(Change {
            object: r("ConfigMap", "a", "x"),
            owner: Owner::root("weft-system", "weft"),
            action: Action::Unchanged,
            reason: None,
        });
        assert!(!cs.has_changes());
        cs.push(Change {
            object: r("Namespace", "", "a"),
            owner: Owner::root("weft-system", "weft"),
            action: Action::Skipped,
            reason: Some("Namespaces are pruned only with weft.io/prune: enabled".into()),
        });
        assert!(!cs.has_changes());
        cs.push(Change {
            object: r("Secret", "a", "s"),
            owner: Owner::root("weft-system", "weft"),
            action: Action::Deleted,
            reason: None,
        });
        assert!(cs.has_changes());
        assert_eq!(
            cs.summary().to_string(),
            "0 created, 0 configured, 1 unchanged, 1 deleted, 1 skipped"
        );
        assert_eq!(cs.entries[2].to_string(), "Secret/a/s deleted");
        assert_eq!(cs.plan_lines()[0], "unchanged ConfigMap/a/x");
        assert_eq!(cs.plan_lines()[2], "prune     Secret/a/s");
    }
}
