//! Before the apply: the write-ahead of the inventories (what the pass is about to create, recorded
//! before it is created), what was applied before by the owners that only report drift, and
//! what the prune guard and the kind changes of the pass need to know of the inventories.

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::super::inventories::read_inventories;
use super::super::PassError;
use super::Engine;
use crate::api::ObjectRef;
use crate::apply::inventory::{self, Inventory};
use crate::apply::plan::{self, Catalog, PlannedObject};
use crate::apply::prune::GuardScope;
use crate::apply::replaced;
use crate::apply::ApplyError;
use crate::render::{DesiredSet, Owner};

impl Engine<'_> {
    /// Write-ahead: record in each stored inventory what this pass is about to create, before
    /// creating it. A process killed between the apply and the final inventory write then
    /// orphans nothing: the next pass finds every object this one may have created in the
    /// inventory, and prunes those that git no longer has. Only an inventory that grows is
    /// written (a no-op pass writes nothing); an owner custom resource not stored yet (created
    /// in this pass) is recorded by the final write. A failure stops the pass before it applies.
    pub(super) async fn record_ahead(
        &mut self,
        set: &DesiredSet,
        catalog: &Catalog,
    ) -> Result<(), Vec<PassError>> {
        let settings = self.settings;
        let desired = plan::desired_refs(set, catalog, self.default_namespace());
        let (inventories, errors) =
            read_inventories(self.client, set, catalog, &settings.weft_namespace).await;
        if !errors.is_empty() {
            return Err(errors.into_iter().map(PassError::Apply).collect());
        }
        // Before the inventories grow: what a kind change replaces, from what was applied before.
        self.replacements = replaced::find(&inventories, &desired, &OwnerKind::RENDERING);
        for inv in inventories {
            let root = matches!(
                inv.owner,
                Owner {
                    kind: OwnerKind::Root,
                    ..
                }
            );
            let stored = root || inv.source == inventory::InventorySource::Stored;
            let Some(wanted) = desired.get(&inv.owner).filter(|_| stored) else {
                self.guard_scopes.push(GuardScope::of(&inv));
                // An Armada chart without a stored inventory (its CR is created by this pass, in
                // wave 0): its objects are recorded once it exists, before the first of them is
                // created. (Other owners' are recorded by the final write.)
                let chart = inv.owner.as_chart().is_some();
                if let Some(wanted) = desired.get(&inv.owner).filter(|w| !w.is_empty() && chart) {
                    self.unrecorded
                        .insert(inv.owner.clone(), (wanted.clone(), inv));
                }
                continue;
            };
            // Borrowed and hashed: a copy of every entry's four strings, and a tree lookup with
            // another copy per desired object, were 9 % of a no-op pass over 100,000 objects.
            let keys: HashSet<_> = inv.entries.iter().map(inventory::ref_key_of).collect();
            let new: Vec<&ObjectRef> = wanted
                .iter()
                .filter(|r| !keys.contains(&inventory::ref_key_of(r)))
                .collect();
            if new.is_empty() {
                self.guard_scopes.push(GuardScope::of(&inv));
                if root {
                    self.root_inventories.push(inv);
                }
                continue;
            }
            let mut union = inv.entries.clone();
            union.extend(new.into_iter().cloned());
            inventory::write(
                self.client,
                catalog,
                &inv.owner,
                &settings.weft_namespace,
                &union,
                &inv,
            )
            .await
            .map_err(|e| vec![PassError::Apply(e)])?;
            self.guard_scopes.push(GuardScope {
                owner: inv.owner.clone(),
                entries: union.len(),
                force_prune: inv.force_prune.clone(),
            });
            if root {
                // As stored now: the final write compares against it.
                self.root_inventories.push(Inventory {
                    entries: union,
                    source: inventory::InventorySource::Stored,
                    ..inv
                });
            }
        }
        Ok(())
    }

    /// The write-ahead of the owners of `objects` that had no stored inventory before the pass
    /// (their custom resource is created by it, in an earlier wave): each is recorded now, before
    /// the first of its objects is created. The owners whose custom resource still does not
    /// exist, each with its error: their objects must not be created (nothing could record
    /// them, so neither the next pass nor `weft uninstall --prune` would find them). Stage 0
    /// records nothing here (see below).
    pub(super) async fn record_late(
        &mut self,
        objects: &[PlannedObject],
        catalog: &Catalog,
    ) -> Result<BTreeMap<Owner, ApplyError>, ApplyError> {
        let mut missing = BTreeMap::new();
        // Before the waves no CR that this pass creates exists yet: a chart's CRDs (and a
        // Namespace an earlier wave needs) are recorded by the final write.
        if self.unrecorded.is_empty() || self.before_waves {
            return Ok(missing);
        }
        let owners: BTreeSet<&Owner> = objects
            .iter()
            .map(|p| &p.desired.owner)
            .filter(|o| self.unrecorded.contains_key(*o))
            .collect();
        for owner in owners {
            // A CR applied in the same batch as its objects cannot be recorded first.
            let reference = owner.reference();
            if objects
                .iter()
                .any(|p| p.object_ref.to_string() == reference)
            {
                continue;
            }
            let (wanted, previous) = &self.unrecorded[owner];
            let mut union = previous.entries.clone();
            union.extend(wanted.iter().cloned());
            let written = inventory::write(
                self.client,
                catalog,
                owner,
                &self.settings.weft_namespace,
                &union,
                &Inventory {
                    // Never "unchanged": the custom resource has no inventory stored yet.
                    source: inventory::InventorySource::Rebuilt,
                    entries: BTreeSet::new(),
                    ..previous.clone()
                },
            )
            .await?;
            if written {
                self.unrecorded.remove(owner);
            } else {
                missing.insert(
                    owner.clone(),
                    ApplyError::Inventory {
                        owner: reference,
                        problem: crate::apply::InventoryProblem::OwnerMissing,
                    },
                );
            }
        }
        Ok(missing)
    }

    /// What each owner that only reports drift applied before: its stored inventory.
    pub(super) async fn read_applied_before(&mut self, catalog: &Catalog) {
        for (owner, report) in &mut self.policy.report_drift {
            match inventory::read_stored(self.client, catalog, owner, &self.settings.weft_namespace)
                .await
            {
                Ok(entries) => {
                    report.applied_before = entries
                        .map(|(entries, _)| entries)
                        .unwrap_or_default()
                        .iter()
                        .map(inventory::ref_key)
                        .collect();
                }
                // Without it, objects deleted outside are recreated: a pass goes on.
                Err(e) => tracing::warn!(owner = %owner.reference(), "{e}"),
            }
        }
    }
}
