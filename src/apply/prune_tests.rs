//! Unit tests of `apply::prune`: protections, candidates and the guard.
use super::*;
use crate::api::keys::PRUNE_ANNOTATION;
use crate::api::owner::OwnerKind;
use crate::apply::inventory::InventorySource;
use serde_json::json;

fn r(kind: &str, ns: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn root() -> Owner {
    Owner::root("weft-system", "weft")
}

fn live(labels: Value, annotations: Value, managed: Value) -> Value {
    json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations, "managedFields": managed}})
}

#[test]
fn protections() {
    let plain = live(json!({}), json!({}), json!([]));
    assert_eq!(protection("ConfigMap", &plain), None);
    assert_eq!(
        protection(
            "ConfigMap",
            &live(json!({}), json!({PRUNE_ANNOTATION: "disabled"}), json!([]))
        )
        .as_deref(),
        Some("weft.io/prune: disabled")
    );
    assert!(protection("Namespace", &plain).is_some());
    assert!(protection("CustomResourceDefinition", &plain).is_some());
    assert_eq!(
        protection(
            "Namespace",
            &live(json!({}), json!({PRUNE_ANNOTATION: "enabled"}), json!([]))
        ),
        None
    );
}

fn inventory(owner: Owner, n: usize, force_prune: Option<&str>) -> Inventory {
    Inventory {
        owner,
        entries: (0..n)
            .map(|i| r("ConfigMap", "a", &i.to_string()))
            .collect(),
        source: InventorySource::Stored,
        force_prune: force_prune.map(str::to_string),
    }
}

fn chart(name: &str) -> Owner {
    Owner::resource(OwnerKind::ArmadaChart, "a", name)
}

#[test]
fn candidates_are_the_entries_nobody_desires() {
    let inv = inventory(root(), 3, None);
    let desired = BTreeSet::from([r("ConfigMap", "a", "0"), r("ConfigMap", "a", "1")]);
    let c = candidates(std::slice::from_ref(&inv), &desired.iter().collect());
    assert_eq!(c[&root()], vec![r("ConfigMap", "a", "2")]);
}

#[test]
fn small_changes_pass_the_guard_up_to_half_of_the_inventories() {
    // A chart of two objects whose namespace changes: its inventory, written ahead, holds the
    // two old and the two new objects; 2 deletions are half of it.
    let invs = [inventory(chart("small"), 4, None)];
    let deletions = BTreeMap::from([(chart("small"), 2)]);
    assert!(guard(&invs, &deletions, 2, &PruneOptions::default()).is_none());
    // A custom resource's small change is not a root being emptied: the floor holds.
    let invs = [inventory(chart("small"), 2, None)];
    let deletions = BTreeMap::from([(chart("small"), 2)]);
    assert!(guard(&invs, &deletions, 2, &PruneOptions::default()).is_none());
    // A large root: the floor of 10 holds whatever the fraction limit.
    let large = [inventory(root(), 2 * GUARD_FLOOR, None)];
    let deletions = BTreeMap::from([(root(), GUARD_FLOOR)]);
    let strict = PruneOptions {
        max_fraction: 0.1,
        ..PruneOptions::default()
    };
    assert!(guard(&large, &deletions, 10, &strict).is_none());
}

#[test]
fn the_floor_never_lets_a_small_root_be_emptied() {
    // 3 of a root's 5 objects: under the floor, but more than half.
    let invs = [inventory(root(), 5, None)];
    let deletions = BTreeMap::from([(root(), 3)]);
    let err = guard(&invs, &deletions, 2, &PruneOptions::default()).expect("refused");
    assert!(
        err.to_string()
            .starts_with("refusing to prune 3 of the 5 objects"),
        "{err}"
    );
    let forced = PruneOptions {
        force: true,
        ..PruneOptions::default()
    };
    assert!(guard(&invs, &deletions, 2, &forced).is_none());
    // 2 of 5 is fine.
    let deletions = BTreeMap::from([(root(), 2)]);
    assert!(guard(&invs, &deletions, 3, &PruneOptions::default()).is_none());
}

#[test]
fn an_empty_desired_set_prunes_nothing_without_an_override() {
    // One of a large root's objects, but nothing desired at all: a wrong --path.
    let invs = [inventory(root(), 100, None)];
    let deletions = BTreeMap::from([(root(), 1)]);
    let err = guard(&invs, &deletions, 0, &PruneOptions::default()).expect("refused");
    let text = err.to_string();
    assert!(text.contains("desired set is empty"), "{text}");
    assert!(text.contains("--allow-empty"), "{text}");
    for opts in [
        PruneOptions {
            allow_empty: true,
            ..PruneOptions::default()
        },
        PruneOptions {
            force: true,
            ..PruneOptions::default()
        },
    ] {
        assert!(guard(&invs, &deletions, 0, &opts).is_none());
    }
    // A custom resource that desires nothing (every agent disabled) is not refused.
    let invs = [inventory(chart("off"), 3, None)];
    let deletions = BTreeMap::from([(chart("off"), 3)]);
    assert!(guard(&invs, &deletions, 0, &PruneOptions::default()).is_none());
}

#[test]
fn the_fraction_is_of_the_whole_pass() {
    // 12 of one owner's 12 objects, but 12 of the pass's 100: allowed.
    let invs = [
        inventory(chart("gone"), 12, None),
        inventory(root(), 88, None),
    ];
    let deletions = BTreeMap::from([(chart("gone"), 12)]);
    assert!(guard(&invs, &deletions, 1, &PruneOptions::default()).is_none());
    // 60 of 100: refused, and the error says how to allow it once.
    let deletions = BTreeMap::from([(chart("gone"), 12), (root(), 48)]);
    let opts = PruneOptions {
        revision: Some("0123456789abcdef0123456789abcdef01234567".into()),
        ..PruneOptions::default()
    };
    let err = guard(&invs, &deletions, 1, &opts).expect("refused");
    let text = err.to_string();
    assert!(
        text.starts_with("refusing to prune 60 of the 100 objects in this pass's inventories (48 of root/weft-system/weft, 12 of ArmadaChart/a/gone: 60% > 50% allowed by --max-prune-fraction); nothing was pruned."),
        "{text}"
    );
    for hint in [
        "`weft sync --force-prune`",
        "`weft trigger --force-prune`",
        "POST /api/v1/sync?forcePrune=true",
        "`weft.io/force-prune: 0123456789abcdef0123456789abcdef01234567`",
    ] {
        assert!(text.contains(hint), "{hint} missing from: {text}");
    }
    let forced = PruneOptions {
        force: true,
        ..opts.clone()
    };
    assert!(guard(&invs, &deletions, 1, &forced).is_none());
    let nan = PruneOptions {
        max_fraction: f64::NAN,
        ..opts.clone()
    };
    assert!(
        guard(&invs, &deletions, 1, &nan).is_some(),
        "NaN must not disarm the guard"
    );
}

#[test]
fn the_annotation_allows_one_revision_for_every_owner_that_loses_objects() {
    let rev = "0123456789abcdef0123456789abcdef01234567";
    let opts = PruneOptions {
        revision: Some(rev.into()),
        ..PruneOptions::default()
    };
    let deletions = BTreeMap::from([(chart("gone"), 12), (root(), 48)]);
    let both = [
        inventory(chart("gone"), 12, Some("0123456")),
        inventory(root(), 88, Some(rev)),
    ];
    assert!(guard(&both, &deletions, 1, &opts).is_none());
    let one = [
        inventory(chart("gone"), 12, None),
        inventory(root(), 88, Some(rev)),
    ];
    assert!(guard(&one, &deletions, 1, &opts).is_some());
    let stale = [
        inventory(chart("gone"), 12, Some("fedcba9")),
        inventory(root(), 88, Some("fedcba9876")),
    ];
    assert!(guard(&stale, &deletions, 1, &opts).is_some());
    let too_short = [
        inventory(chart("gone"), 12, Some("0123")),
        inventory(root(), 88, Some("0123")),
    ];
    assert!(guard(&too_short, &deletions, 1, &opts).is_some());
}
