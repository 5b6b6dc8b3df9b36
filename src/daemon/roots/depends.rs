//! `dependsOn` (issue 41 item 3), as pure functions of the roots the controller's store holds:
//! whether a root's dependencies are Ready at their current revision, and whether its
//! dependencies lead back to it (a cycle, refused with its path).

use std::collections::{BTreeMap, BTreeSet};

use crate::api::conditions::{ConditionStatus, READY};
use crate::api::root::Root;
use crate::api::ResourceKey;
use kube::ResourceExt;

/// `namespace/name` of a root.
pub fn key_of(root: &Root) -> ResourceKey {
    ResourceKey {
        namespace: root.namespace().unwrap_or_default(),
        name: root.name_any(),
    }
}

/// The roots each root depends on, by key.
pub fn edges<'a>(
    roots: impl IntoIterator<Item = &'a Root>,
) -> BTreeMap<ResourceKey, Vec<ResourceKey>> {
    roots
        .into_iter()
        .map(|r| {
            let key = key_of(r);
            let deps = r
                .spec
                .depends_on
                .iter()
                .map(|d| d.key(&key.namespace))
                .collect();
            (key, deps)
        })
        .collect()
}

/// The shortest cycle of `dependsOn` through `start`, as the roots along it from `start` back to
/// `start` (`[a, b, a]`); `None` when its dependencies never lead back to it.
pub fn cycle_through(
    start: &ResourceKey,
    edges: &BTreeMap<ResourceKey, Vec<ResourceKey>>,
) -> Option<Vec<ResourceKey>> {
    // Breadth first from `start`, remembering how each root was reached: the first time
    // `start` is reached again closes the shortest cycle.
    let mut reached_from: BTreeMap<&ResourceKey, &ResourceKey> = BTreeMap::new();
    let mut seen: BTreeSet<&ResourceKey> = BTreeSet::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for from in frontier {
            for to in edges.get(from).into_iter().flatten() {
                if to == start {
                    let mut path = vec![start.clone()];
                    let mut at = from;
                    while at != start {
                        path.push(at.clone());
                        at = reached_from[at];
                    }
                    path.push(start.clone());
                    path.reverse();
                    return Some(path);
                }
                if seen.insert(to) {
                    reached_from.insert(to, from);
                    next.push(to);
                }
            }
        }
        frontier = next;
    }
    None
}

/// A cycle as the status says it: `a -> b -> a`, each root by name when it is in `namespace`,
/// else as `namespace/name`.
pub fn describe_cycle(cycle: &[ResourceKey], namespace: &str) -> String {
    cycle
        .iter()
        .map(|k| name_in(k, namespace))
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// A root as seen from `namespace`: its name, or `namespace/name` when it is elsewhere.
pub fn name_in(key: &ResourceKey, namespace: &str) -> String {
    if key.namespace == namespace {
        key.name.clone()
    } else {
        key.to_string()
    }
}

/// Why a dependency is not Ready at its current revision (`None`: it is): missing, not Ready,
/// its last pass not at the revision it last tried, or its status older than its spec.
pub fn not_ready(dependency: Option<&Root>) -> Option<String> {
    let Some(root) = dependency else {
        return Some("does not exist".into());
    };
    let Some(status) = &root.status else {
        return Some("has not been reconciled yet".into());
    };
    if status.observed_generation.is_none()
        || status.observed_generation != root.metadata.generation
    {
        return Some("has not been reconciled since its last change".into());
    }
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    match ready {
        Some(c) if c.status == ConditionStatus::True => {}
        Some(c) if !c.message.is_empty() => {
            return Some(format!("is not Ready ({}: {})", c.reason, c.message))
        }
        Some(c) => return Some(format!("is not Ready ({})", c.reason)),
        None => return Some("is not Ready".into()),
    }
    match (
        &status.last_applied_revision,
        &status.last_attempted_revision,
    ) {
        (Some(applied), Some(attempted)) if applied == attempted => None,
        (_, Some(attempted)) => Some(format!("has not applied revision {attempted} yet")),
        _ => Some("has applied no revision yet".into()),
    }
}

/// The first dependency of `root` that is not Ready at its current revision, with why, read
/// from `lookup` (the controller's store).
pub fn waiting_for(
    root: &Root,
    lookup: impl Fn(&ResourceKey) -> Option<std::sync::Arc<Root>>,
) -> Option<(ResourceKey, String)> {
    let namespace = root.namespace().unwrap_or_default();
    root.spec.depends_on.iter().find_map(|d| {
        let key = d.key(&namespace);
        let dependency = lookup(&key);
        not_ready(dependency.as_deref()).map(|why| (key, why))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::Condition;
    use crate::api::root::{GitSource, RootReference, RootSpec, RootStatus};

    fn key(ns: &str, name: &str) -> ResourceKey {
        ResourceKey {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn root(ns: &str, name: &str, deps: &[&str]) -> Root {
        let mut r = Root::new(
            name,
            RootSpec {
                source: GitSource {
                    url: "https://git.example/a.git".into(),
                    ..Default::default()
                },
                depends_on: deps
                    .iter()
                    .map(|d| match d.split_once('/') {
                        Some((ns, n)) => RootReference {
                            name: n.into(),
                            namespace: Some(ns.into()),
                        },
                        None => RootReference {
                            name: d.to_string(),
                            namespace: None,
                        },
                    })
                    .collect(),
                ..Default::default()
            },
        );
        r.metadata.namespace = Some(ns.into());
        r.metadata.generation = Some(1);
        r
    }

    fn ready(mut r: Root, applied: &str, attempted: &str) -> Root {
        r.status = Some(RootStatus {
            conditions: vec![Condition::new(
                READY,
                ConditionStatus::True,
                "Succeeded",
                "",
            )],
            observed_generation: Some(1),
            last_applied_revision: Some(applied.into()),
            last_attempted_revision: Some(attempted.into()),
            ..Default::default()
        });
        r
    }

    #[test]
    fn a_two_root_cycle_is_found_from_either_end() {
        let roots = [root("t", "a", &["b"]), root("t", "b", &["a"])];
        let e = edges(&roots);
        let cycle = cycle_through(&key("t", "a"), &e).unwrap();
        assert_eq!(describe_cycle(&cycle, "t"), "a -> b -> a");
        let cycle = cycle_through(&key("t", "b"), &e).unwrap();
        assert_eq!(describe_cycle(&cycle, "t"), "b -> a -> b");
    }

    #[test]
    fn a_longer_cycle_across_namespaces_names_each_root() {
        let roots = [
            root("t", "a", &["b"]),
            root("t", "b", &["other/c"]),
            root("other", "c", &["t/a"]),
        ];
        let cycle = cycle_through(&key("t", "a"), &edges(&roots)).unwrap();
        assert_eq!(describe_cycle(&cycle, "t"), "a -> b -> other/c -> a");
    }

    #[test]
    fn a_root_depending_on_itself_is_a_cycle() {
        let roots = [root("t", "a", &["a"])];
        let cycle = cycle_through(&key("t", "a"), &edges(&roots)).unwrap();
        assert_eq!(describe_cycle(&cycle, "t"), "a -> a");
    }

    #[test]
    fn a_chain_or_a_diamond_is_no_cycle_and_a_cycle_elsewhere_is_not_ours() {
        let roots = [
            root("t", "a", &["b", "c"]),
            root("t", "b", &["d"]),
            root("t", "c", &["d"]),
            root("t", "d", &["e"]),
            root("t", "e", &["f"]),
            root("t", "f", &["e"]),
        ];
        let e = edges(&roots);
        assert_eq!(cycle_through(&key("t", "a"), &e), None);
        assert_eq!(cycle_through(&key("t", "d"), &e), None);
        assert!(cycle_through(&key("t", "e"), &e).is_some());
    }

    #[test]
    fn a_dependency_is_ready_only_at_its_current_revision_and_generation() {
        assert_eq!(not_ready(None).unwrap(), "does not exist");
        let fresh = root("t", "a", &[]);
        assert_eq!(
            not_ready(Some(&fresh)).unwrap(),
            "has not been reconciled yet"
        );
        let good = ready(root("t", "a", &[]), "main@sha1:1", "main@sha1:1");
        assert_eq!(not_ready(Some(&good)), None);
        let behind = ready(root("t", "a", &[]), "main@sha1:1", "main@sha1:2");
        assert_eq!(
            not_ready(Some(&behind)).unwrap(),
            "has not applied revision main@sha1:2 yet"
        );
        let mut edited = good.clone();
        edited.metadata.generation = Some(2);
        assert_eq!(
            not_ready(Some(&edited)).unwrap(),
            "has not been reconciled since its last change"
        );
        let mut failed = good.clone();
        failed.status.as_mut().unwrap().conditions = vec![Condition::new(
            READY,
            ConditionStatus::False,
            "ReconciliationFailed",
            "ConfigMap t/x: forbidden",
        )];
        assert_eq!(
            not_ready(Some(&failed)).unwrap(),
            "is not Ready (ReconciliationFailed: ConfigMap t/x: forbidden)"
        );
    }

    #[test]
    fn waiting_for_names_the_first_dependency_not_ready() {
        let a = std::sync::Arc::new(ready(root("t", "a", &[]), "r1", "r1"));
        let b = root("t", "b", &["a", "c"]);
        let found = waiting_for(&b, |k| (k.name == "a").then(|| a.clone())).unwrap();
        assert_eq!(found, (key("t", "c"), "does not exist".to_string()));
        let only_a = root("t", "b", &["a"]);
        assert_eq!(waiting_for(&only_a, |_| Some(a.clone())), None);
    }
}
