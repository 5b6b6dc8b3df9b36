//! The early apply of a push for the flag root's Root (`weft run --root-object`, issue 41 item
//! 2): when a new revision changes a few plain-manifest files, their changed objects go out
//! before the full pass renders the whole repository — `daemon::early`, the flag loop's, with
//! the same rules (objects the previous render had, fields other managers own kept, nothing
//! another root holds, nothing deleted). The objects it wrote are the pass's changes too: the
//! full pass finds them unchanged, its report says `configured`, applied ahead.
//!
//! Only the flag root's Root keeps its previous render for it (a DesiredSet per root would be
//! the controller's largest memory with many roots).

use super::answer::Changes;
use crate::apply::changeset::Change;
use crate::daemon::early::{changed_first, Previous, PreviousFiles};
use crate::daemon::status::ObjectChange;
use crate::pass::PassSettings;
use crate::render::DesiredSet;
use crate::source::Snapshot;

/// Apply the objects `next` changed since `last` (rendered as `rendered`) ahead of the full
/// pass; the changes written (none when the early path does not apply).
pub async fn apply(
    client: &kube::Client,
    last: PreviousFiles,
    rendered: &DesiredSet,
    next: &Snapshot,
    settings: &PassSettings,
) -> Vec<Change> {
    // A Root is never sharded: no other shard's part.
    let elsewhere = DesiredSet::default();
    let previous = Previous {
        files: last,
        set: rendered,
        elsewhere: &elsewhere,
    };
    changed_first(client, previous, next, settings).await
}

/// The full pass's changes with the objects applied ahead counted as `configured`.
pub fn count(changes: Changes, early: &[Change]) -> Changes {
    let (mut summary, mut list) = changes;
    for c in early {
        let object = c.object.to_string();
        if list.iter().any(|x| x.object == object) {
            continue;
        }
        summary.configured += 1;
        summary.unchanged = summary.unchanged.saturating_sub(1);
        let why = c.reason.clone().unwrap_or_else(|| "changed".into());
        list.push(ObjectChange {
            object,
            action: c.action.done().to_string(),
            reason: Some(format!("{why} (applied ahead of the full pass)")),
        });
    }
    (summary, list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectRef;
    use crate::apply::changeset::Action;
    use crate::daemon::status::ChangeSummary;
    use crate::render::Owner;

    fn configured(name: &str, reason: Option<&str>) -> Change {
        Change {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "ns".into(),
                name: name.into(),
            },
            owner: Owner::root("weft-system", "weft"),
            action: Action::Configured,
            reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn objects_applied_ahead_count_as_configured_once() {
        let full = (
            ChangeSummary {
                created: 1,
                unchanged: 3,
                ..ChangeSummary::default()
            },
            vec![ObjectChange {
                object: "ConfigMap/ns/new".into(),
                action: "created".into(),
                reason: None,
            }],
        );
        let early = [
            configured("a", Some("drifted: /data/value")),
            configured("b", None),
            // Also among the full pass's changes: counted there already.
            configured("new", None),
        ];
        let (summary, list) = count(full, &early);
        assert_eq!((summary.created, summary.configured), (1, 2));
        assert_eq!(summary.unchanged, 1);
        let reasons: Vec<(&str, Option<&str>)> = list
            .iter()
            .map(|c| (c.object.as_str(), c.reason.as_deref()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("ConfigMap/ns/new", None),
                (
                    "ConfigMap/ns/a",
                    Some("drifted: /data/value (applied ahead of the full pass)")
                ),
                (
                    "ConfigMap/ns/b",
                    Some("changed (applied ahead of the full pass)")
                ),
            ]
        );
    }
}
