//! The caller's decisions about one engine run, as data — like `fluxcd/pkg/ssa`'s
//! `ApplyOptions`, the engine knows nothing of its callers: which owners only report drift,
//! which owners are waited for by their own rule, what is deleted before an owner's update, and
//! which kinds are never waited for. The pass builds an [`ApplyPolicy`] from the custom
//! resources of the desired set (see `pass::armada`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::plan::{Decision, UpdateReason};
use super::readiness::{self, Selector};
use super::ref_key::RefKey;
use crate::render::Owner;

/// Everything the caller decides, per owner.
#[derive(Clone, Debug, Default)]
pub struct ApplyPolicy {
    /// Owners whose drift is only reported, not corrected.
    pub report_drift: BTreeMap<Owner, ReportDrift>,
    /// Owners whose objects are waited for by their own rule instead of the readiness table and
    /// the run's timeout.
    pub waits: BTreeMap<Owner, WaitRule>,
    /// Objects deleted before an owner's objects are updated.
    pub pre_update_deletes: BTreeMap<Owner, PreUpdateDelete>,
    /// Kinds never waited for, besides those the readiness table says have no status (e.g.
    /// custom resources whose own children are waited for instead).
    pub unwaited_kinds: BTreeSet<String>,
    /// Owners whose upgrades run none of their Helm hooks (Armada's `upgrade.no_hooks`); their
    /// installs still run them.
    pub no_upgrade_hooks: BTreeSet<Owner>,
}

impl ApplyPolicy {
    /// Is an applied object of `kind` waited for at all?
    pub fn waits_for(&self, kind: &str) -> bool {
        readiness::needs_wait(kind) && !self.unwaited_kinds.contains(kind)
    }
}

/// An owner whose drift is reported, not corrected: an object someone changed is left as it is
/// (a changed desired object is still applied), and an object of its previous inventory that is
/// gone was deleted outside and is not recreated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportDrift {
    /// The rule as its user wrote it, for the skip reasons (e.g. `driftPolicy: report`).
    pub rule: String,
    /// What the owner applied before (its previous inventory), by [`RefKey`]; the engine reads
    /// it before applying.
    pub applied_before: BTreeSet<RefKey>,
}

impl ReportDrift {
    /// Why an object is skipped instead of written, if it is: `decision` is what the plan says,
    /// `key` the object's identity.
    pub fn skip_reason(&self, decision: &Decision, key: &RefKey) -> Option<String> {
        match decision {
            Decision::Update(UpdateReason::Drifted { .. }) => {
                Some(format!("drifted, not corrected ({})", self.rule))
            }
            Decision::Create if self.applied_before.contains(key) => Some(format!(
                "deleted outside Weft, not recreated ({})",
                self.rule
            )),
            _ => None,
        }
    }
}

/// How one owner's objects are waited for: label selectors in a namespace (plus its objects of
/// other kinds that have a status), all within the owner's own timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitRule {
    /// What the owner is called in progress messages (e.g. `chart demo/api`).
    pub subject: String,
    /// Where the selectors look.
    pub namespace: String,
    pub selectors: Vec<Selector>,
    pub timeout: Duration,
    /// A failure of this owner does not stop what comes after it (it is reported at the end).
    pub continue_on_failure: bool,
}

/// Objects deleted (and waited for until gone) before an owner's objects are updated; a first
/// install deletes nothing. Only objects that carry the owner's label are deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreUpdateDelete {
    /// Where the objects are.
    pub namespace: String,
    pub targets: Vec<DeleteTarget>,
    /// How long they may take to be gone.
    pub timeout: Duration,
    /// The reason of their entries in the change set (e.g. `upgrade.pre.delete`).
    pub reason: String,
}

/// Objects of one kind, selected by labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteTarget {
    pub api_version: String,
    pub kind: String,
    pub labels: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> RefKey {
        (
            "apps".into(),
            "Deployment".into(),
            "demo".into(),
            name.into(),
        )
    }

    #[test]
    fn report_drift_skips_drifted_and_deleted_objects_only() {
        let report = ReportDrift {
            rule: "driftPolicy: report".into(),
            applied_before: BTreeSet::from([key("web")]),
        };
        let drifted = Decision::Update(UpdateReason::Drifted {
            field: "/spec/replicas".into(),
        });
        assert_eq!(
            report.skip_reason(&drifted, &key("web")).as_deref(),
            Some("drifted, not corrected (driftPolicy: report)")
        );
        assert_eq!(
            report
                .skip_reason(&Decision::Create, &key("web"))
                .as_deref(),
            Some("deleted outside Weft, not recreated (driftPolicy: report)")
        );
        // New in this render: created.
        assert_eq!(report.skip_reason(&Decision::Create, &key("new")), None);
        // Changed in git: applied.
        let changed = Decision::Update(UpdateReason::Changed);
        assert_eq!(report.skip_reason(&changed, &key("web")), None);
        assert_eq!(report.skip_reason(&Decision::Unchanged, &key("web")), None);
    }

    #[test]
    fn unwaited_kinds_add_to_the_table() {
        let policy = ApplyPolicy {
            unwaited_kinds: BTreeSet::from(["Widget".to_string()]),
            ..ApplyPolicy::default()
        };
        assert!(!policy.waits_for("Widget"));
        assert!(!policy.waits_for("ConfigMap"));
        assert!(policy.waits_for("Deployment"));
        assert!(policy.waits_for("Gadget"));
    }
}
