//! Sharding a render across replicas (`weft run --shards N`): every desired object belongs to a
//! *unit* that is never split, and every unit to one shard by a stable hash of its name.
//!
//! Units:
//! - `armada`: the Armada deployment plan as a whole — the ArmadaManifest, ArmadaChartGroup and
//!   ArmadaChart documents and every chart's objects and hooks — because its charts deploy in
//!   order, wave after wave, which one replica must drive;
//! - `dir:<top>`: any other document of the repository, by the top-level directory of its file
//!   (`dir:` for files at the top), so a team's directory moves as one.
//!
//! Shard `i` of `N` applies its units under its own sync-root owner ([`shard_root_name`]): shard 0
//! keeps the root's own name, so a root that starts sharding keeps its inventory and labels for
//! the units that stay on shard 0, and the others are relabelled by their new shard (an update,
//! never a delete).

use super::{DesiredObject, DesiredSet, Owner};
use crate::api::owner::OwnerKind;

/// Kinds of the Armada documents, which belong to the `armada` unit.
const ARMADA_KINDS: &[&str] = &["ArmadaManifest", "ArmadaChartGroup", "ArmadaChart"];

/// One replica's part: shard `index` of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The whole root (no sharding).
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Does `unit` belong to this shard?
    pub fn holds(&self, unit: &str) -> bool {
        shard_of(unit, self.count) == self.index
    }

    /// Does `object` belong to this shard?
    pub fn holds_object(&self, object: &DesiredObject) -> bool {
        self.holds(&unit_of(object))
    }
}

/// The sync-root name shard `index` applies under: the root's own for shard 0,
/// `<root>-shard-<index>` for the others.
pub fn shard_root_name(root: &str, index: u32) -> String {
    if index == 0 {
        root.to_string()
    } else {
        format!("{root}-shard-{index}")
    }
}

/// The unit of a desired object (see the module documentation).
pub fn unit_of(object: &DesiredObject) -> String {
    let chart_child = object.owner.kind == OwnerKind::ArmadaChart;
    if chart_child || ARMADA_KINDS.contains(&object.kind()) {
        return "armada".to_string();
    }
    let file = object
        .origin
        .as_ref()
        .map(|o| o.file.as_str())
        .unwrap_or("");
    let top = match file.split_once('/') {
        Some((top, _)) => top,
        None => "",
    };
    format!("dir:{top}")
}

/// The shard of `unit` among `count`: FNV-1a (64 bit) of its name, modulo `count`. Stable across
/// releases and platforms: changing it would move every unit.
pub fn shard_of(unit: &str, count: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in unit.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(count.max(1))) as u32
}

impl DesiredSet {
    /// Split a complete render into this shard's part and the other shards' part. Objects,
    /// hooks and failed charts go by their unit; an owner custom resource goes with its
    /// objects (an ArmadaChart: with the `armada` unit); the sync-root owner stays in both.
    pub fn split_shard(self, shard: Shard) -> (DesiredSet, DesiredSet) {
        let (mine_objects, other_objects): (Vec<_>, Vec<_>) = self
            .objects
            .into_iter()
            .partition(|o| shard.holds_object(o));
        let (mine_hooks, other_hooks): (Vec<_>, Vec<_>) = self
            .hooks
            .into_iter()
            .partition(|h| shard.holds_object(&h.object));
        let armada_here = shard.holds("armada");
        let (mine_failures, other_failures): (Vec<_>, Vec<_>) =
            self.failures.into_iter().partition(|_| armada_here);
        let mut mine_owners = std::collections::BTreeSet::new();
        let mut other_owners = std::collections::BTreeSet::new();
        for o in self.owners {
            let here = match &o {
                Owner {
                    kind: OwnerKind::Root,
                    ..
                } => {
                    other_owners.insert(o.clone());
                    true
                }
                Owner {
                    kind: OwnerKind::ArmadaChart,
                    ..
                } => armada_here,
                Owner { .. } => mine_objects.iter().any(|d| d.owner == o),
            };
            if here {
                mine_owners.insert(o);
            } else {
                other_owners.insert(o);
            }
        }
        let mine = DesiredSet {
            objects: mine_objects,
            owners: mine_owners,
            hooks: mine_hooks,
            warnings: self.warnings,
            failures: mine_failures,
            chart_revisions: self.chart_revisions.clone(),
            self_contained: false,
        };
        let others = DesiredSet {
            objects: other_objects,
            owners: other_owners,
            hooks: other_hooks,
            warnings: Vec::new(),
            failures: other_failures,
            chart_revisions: self.chart_revisions,
            self_contained: false,
        };
        (mine, others)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::yaml::Pos;
    use crate::load::Origin;
    use serde_json::json;

    fn doc(kind: &str, name: &str, file: &str, owner: Owner) -> DesiredObject {
        DesiredObject {
            object: json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}).into(),
            owner,
            wave: 0,
            origin: Some(Origin {
                file: file.to_string(),
                pos: Pos::default(),
            }),
        }
    }

    #[test]
    fn units_follow_the_top_directory_and_keep_armada_whole() {
        let root = Owner::root("weft-system", "weft");
        let chart = Owner::resource(OwnerKind::ArmadaChart, "openstack", "keystone");
        assert_eq!(
            unit_of(&doc("ConfigMap", "a", "team-a/x/y.yaml", root.clone())),
            "dir:team-a"
        );
        assert_eq!(
            unit_of(&doc("ConfigMap", "a", "top.yaml", root.clone())),
            "dir:"
        );
        assert_eq!(
            unit_of(&doc("ArmadaChart", "k", "team-a/k.yaml", root.clone())),
            "armada"
        );
        assert_eq!(
            unit_of(&doc("Deployment", "k", "team-a/k.yaml", chart)),
            "armada"
        );
    }

    #[test]
    fn the_hash_is_stable_and_spreads() {
        // Pinned: a change would move every unit of every sharded installation.
        assert_eq!(shard_of("dir:team-00", 3), shard_of("dir:team-00", 3));
        assert_eq!(shard_of("", 1), 0);
        let counts = (0..300).fold([0u32; 3], |mut c, i| {
            c[shard_of(&format!("dir:team-{i:03}"), 3) as usize] += 1;
            c
        });
        assert!(counts.iter().all(|&c| c > 70), "{counts:?}");
        let fnv_empty = 0xcbf2_9ce4_8422_2325u64;
        assert_eq!(u64::from(shard_of("", 1000)), fnv_empty % 1000);
    }

    #[test]
    fn split_keeps_every_object_once_and_the_root_in_both() {
        let root = Owner::root("weft-system", "weft");
        let objects: Vec<DesiredObject> = (0..40)
            .map(|i| {
                doc(
                    "ConfigMap",
                    &format!("c{i}"),
                    &format!("team-{i}/c.yaml"),
                    root.clone(),
                )
            })
            .collect();
        let set = DesiredSet::for_owners(objects, [root.clone()].into());
        let shard = Shard { index: 1, count: 3 };
        let (mine, others) = set.split_shard(shard);
        assert_eq!(mine.len() + others.len(), 40);
        assert!(mine.objects().iter().all(|o| shard.holds_object(o)));
        assert!(others.objects().iter().all(|o| !shard.holds_object(o)));
        assert!(!mine.is_empty() && !others.is_empty());
        assert!(mine.owners().contains(&root) && others.owners().contains(&root));
    }
}
