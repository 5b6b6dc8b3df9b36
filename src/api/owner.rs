//! The kinds of Weft's own resources that own objects: one typed list instead of kind strings
//! compared across the layers.
//!
//! An owner is what applied an object and keeps it in an inventory: a root (a `Root` object, or
//! the root of `weft run`'s flags, which has the same identity), or a custom resource a root
//! applied that renders children of its own (a WeaveCloud's agents, an ArmadaChart's release).

use std::fmt;

use serde_json::Value;

/// A kind of owner.
///
/// The order (root first, then the custom resources alphabetically) is the order owners are
/// listed in: it is what the kind strings sorted to before the kinds were typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OwnerKind {
    /// A root: its repository's plain manifests and custom resources. Its inventory is a
    /// ConfigMap (`weft-root-<name>`) of the root's namespace.
    Root,
    /// An `ArmadaChart` (`armada.airshipit.org/v1alpha1`): its release's objects, its inventory
    /// in its `status.inventory`.
    ArmadaChart,
    /// A `WeaveCloud` (`cloud.weave.works/v1beta1`): its agents, its inventory in its
    /// `status.inventory`.
    WeaveCloud,
}

impl OwnerKind {
    /// Every owner kind.
    pub const ALL: [OwnerKind; 3] = [
        OwnerKind::Root,
        OwnerKind::ArmadaChart,
        OwnerKind::WeaveCloud,
    ];

    /// The custom resources a root declares that render children and keep their inventory in
    /// their own `status.inventory`.
    pub const RENDERING: [OwnerKind; 2] = [OwnerKind::ArmadaChart, OwnerKind::WeaveCloud];

    /// The Kubernetes kind.
    pub const fn as_str(self) -> &'static str {
        match self {
            OwnerKind::Root => "Root",
            OwnerKind::ArmadaChart => "ArmadaChart",
            OwnerKind::WeaveCloud => "WeaveCloud",
        }
    }

    /// The API version of the kind's objects.
    pub fn api_version(self) -> &'static str {
        match self {
            OwnerKind::Root => "weft.io/v1alpha1",
            OwnerKind::ArmadaChart => "armada.airshipit.org/v1alpha1",
            OwnerKind::WeaveCloud => "cloud.weave.works/v1beta1",
        }
    }

    /// The owner kind of a Kubernetes kind, if it is one.
    pub fn from_kind(kind: &str) -> Option<OwnerKind> {
        OwnerKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// A custom resource a root declares that renders children of its own (not a root).
    pub fn renders_children(self) -> bool {
        OwnerKind::RENDERING.contains(&self)
    }

    /// Where an owner of this kind keeps its inventory: the policy the apply engine is given
    /// with each owner, so that it names no kind of Weft's and no status field itself.
    pub const fn inventory_home(self) -> InventoryHome {
        match self {
            OwnerKind::Root => InventoryHome::ConfigMaps,
            OwnerKind::ArmadaChart | OwnerKind::WeaveCloud => {
                InventoryHome::Status(&["status", "inventory"])
            }
        }
    }

    /// The first segment of an owner's readable reference (`root/<ns>/<name>`,
    /// `ArmadaChart/<ns>/<name>`). A root's is lower case, as it was before roots were objects:
    /// the reference is hashed into every applied object's owner label, so it never changes.
    pub fn reference_prefix(self) -> &'static str {
        match self {
            OwnerKind::Root => "root",
            other => other.as_str(),
        }
    }
}

/// Where an owner keeps the inventory of what it applied, read back before its next prune.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InventoryHome {
    /// ConfigMaps in Weft's namespace named after the owner (a root, which has no status a pass
    /// writes).
    ConfigMaps,
    /// A list in the owner object's own status, at this path from the object's top
    /// (`status.inventory`); in ConfigMaps of the object's namespace when it outgrows it.
    Status(&'static [&'static str]),
}

impl InventoryHome {
    /// The field's name as a person reads it (`status.inventory`); `None` for ConfigMaps.
    pub fn field(self) -> Option<String> {
        match self {
            InventoryHome::ConfigMaps => None,
            InventoryHome::Status(path) => Some(path.join(".")),
        }
    }

    /// The field's value in `object` (a live owner object as JSON), if it has one.
    pub fn find(self, object: &Value) -> Option<&Value> {
        match self {
            InventoryHome::ConfigMaps => None,
            InventoryHome::Status(path) => path.iter().try_fold(object, |v, key| v.get(key)),
        }
    }

    /// A merge patch that sets the field to `list` (`{"status": {"inventory": list}}`); `None`
    /// for ConfigMaps.
    pub fn patch(self, list: Value) -> Option<Value> {
        match self {
            InventoryHome::ConfigMaps => None,
            InventoryHome::Status(path) => Some(path.iter().rev().fold(list, |inner, key| {
                Value::Object([(key.to_string(), inner)].into_iter().collect())
            })),
        }
    }
}

impl fmt::Display for OwnerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_only_custom_resources_render_children() {
        for k in OwnerKind::ALL {
            assert_eq!(OwnerKind::from_kind(k.as_str()), Some(k));
        }
        assert_eq!(OwnerKind::from_kind("ConfigMap"), None);
        assert_eq!(OwnerKind::from_kind("ArmadaChartGroup"), None);
        assert!(!OwnerKind::Root.renders_children());
        assert!(OwnerKind::WeaveCloud.renders_children());
        assert_eq!(OwnerKind::Root.reference_prefix(), "root");
        assert_eq!(OwnerKind::ArmadaChart.reference_prefix(), "ArmadaChart");
    }

    #[test]
    fn a_root_keeps_its_inventory_in_configmaps_a_custom_resource_in_its_status() {
        assert_eq!(OwnerKind::Root.inventory_home(), InventoryHome::ConfigMaps);
        assert_eq!(OwnerKind::Root.inventory_home().field(), None);
        for k in OwnerKind::RENDERING {
            let home = k.inventory_home();
            assert_eq!(home.field().as_deref(), Some("status.inventory"));
            let list = serde_json::json!([{"kind": "ConfigMap", "name": "a"}]);
            let patch = home.patch(list.clone()).expect("a status field");
            assert_eq!(patch, serde_json::json!({"status": {"inventory": list}}));
            assert_eq!(home.find(&patch), Some(&list));
            assert_eq!(home.find(&serde_json::json!({"status": {}})), None);
        }
    }

    #[test]
    fn the_order_is_the_order_of_the_old_kind_strings() {
        let mut kinds = OwnerKind::RENDERING.to_vec();
        kinds.sort();
        let mut names: Vec<_> = kinds.iter().map(|k| k.as_str()).collect();
        let sorted = {
            let mut n = names.clone();
            n.sort();
            n
        };
        assert_eq!(names, sorted);
        names.clear();
        assert!(OwnerKind::Root < OwnerKind::ArmadaChart);
    }
}
