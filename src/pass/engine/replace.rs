//! The deletes a pass makes before its prune, within the prune guard: the old object of a kind
//! change, pruned before its replacement is created and only once the rest of its batch applied
//! ([`crate::apply::replaced`]: a pass whose apply fails replaces nothing), and an object
//! recreated because its document changes an immutable field and allows it
//! ([`crate::apply::recreate`]). Each is counted against the guard with what the pass deleted
//! so far, before it is made; the prune at the end counts them too.

use crate::api::owner::OwnerKind;
use std::collections::{BTreeMap, BTreeSet};

use super::super::Progress;
use super::Engine;
use crate::apply::changeset::Change;
use crate::apply::inventory::ref_key;
use crate::apply::plan::{Catalog, PlannedObject};
use crate::apply::prune::{self, PruneOptions};
use crate::apply::recreate::{self, RecreateOptions};
use crate::apply::replaced::{self, Replacement};
use crate::apply::ApplyError;
use crate::render::Owner;

impl Engine<'_> {
    fn recreate_options(&self) -> RecreateOptions {
        RecreateOptions {
            timeout: self.timeout(),
            poll_interval: self.settings.poll_interval,
        }
    }

    /// The prune guard's verdict on deleting `more` (per owner) besides what the pass deleted
    /// already.
    fn guard_allows(&self, more: &BTreeMap<Owner, usize>) -> Result<(), ApplyError> {
        let mut deletions = self.deleted_early.clone();
        for (owner, n) in more {
            *deletions.entry(owner.clone()).or_default() += n;
        }
        let opts = PruneOptions {
            owner_kinds: OwnerKind::RENDERING.to_vec(),
            max_fraction: self.settings.max_prune_fraction,
            force: self.input.force_prune(self.settings),
            revision: self.input.revision.clone(),
            allow_empty: self.settings.allow_empty,
            ..PruneOptions::default()
        };
        // Something is desired: the objects these deletes make room for.
        match prune::guard_scoped(&self.guard_scopes, &deletions, usize::MAX, &opts) {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    fn record(&mut self, changes: Vec<Change>) {
        for c in changes {
            if c.action == crate::apply::changeset::Action::Deleted {
                *self.deleted_early.entry(c.owner.clone()).or_default() += 1;
            }
            (self.observer)(Progress::Change(&c));
            self.changes.push(c);
        }
    }

    /// The kind changes whose new object is among `objects` and does not exist yet: their old
    /// object is pruned, and the new one created, only after the rest of the batch applied
    /// ([`Self::replace_old`]). Also the new objects that must not be applied at all (whether
    /// they exist could not be read), with the errors.
    pub(super) async fn kind_changes_due(
        &self,
        objects: &[PlannedObject],
    ) -> (
        Vec<Replacement>,
        BTreeSet<crate::apply::inventory::RefKey>,
        Vec<ApplyError>,
    ) {
        let mut due: Vec<Replacement> = Vec::new();
        let mut held = BTreeSet::new();
        let mut errors = Vec::new();
        if self.input.dry_run {
            return (due, held, errors);
        }
        for (r, new) in replaced::due(&self.replacements, objects) {
            // A new object that exists already: its old one is a plain prune, at the end.
            match replaced::new_exists(self.client, new).await {
                Ok(true) => {}
                Ok(false) => due.push(r.clone()),
                Err(e) => {
                    held.insert(ref_key(&r.new));
                    errors.push(e);
                }
            }
        }
        (due, held, errors)
    }

    /// Prune the old objects of the kind changes `due` (within the guard), once the rest of
    /// their batch applied. Returns the new objects that may be created now (their old object is
    /// gone), with the errors of the others.
    pub(super) async fn replace_old(
        &mut self,
        due: &[Replacement],
        catalog: &Catalog,
    ) -> (BTreeSet<crate::apply::inventory::RefKey>, Vec<ApplyError>) {
        let mut ready = BTreeSet::new();
        let mut errors = Vec::new();
        if due.is_empty() {
            return (ready, errors);
        }
        let mut more: BTreeMap<Owner, usize> = BTreeMap::new();
        for r in due {
            *more.entry(r.owner.clone()).or_default() += 1;
        }
        if let Err(refused) = self.guard_allows(&more) {
            errors.push(refused);
            return (ready, errors);
        }
        let opts = self.recreate_options();
        for r in due {
            match replaced::prune_old(self.client, catalog, r, &opts).await {
                Ok(change) => {
                    self.record(change.into_iter().collect());
                    ready.insert(ref_key(&r.new));
                }
                Err(e) => errors.push(e),
            }
        }
        (ready, errors)
    }

    /// The kind changes `due` left as they are because their batch failed: the old object stays
    /// and the new one is not created, reported so that the pass output says why.
    pub(super) fn kind_changes_stopped(&mut self, due: &[Replacement]) {
        for r in due {
            let c = Change {
                object: r.new.clone(),
                owner: r.owner.clone(),
                action: crate::apply::changeset::Action::Skipped,
                reason: Some(format!(
                    "not created: it replaces {} only in a pass whose other objects applied; {} is left as it is",
                    r.old, r.old
                )),
            };
            (self.observer)(Progress::Change(&c));
            self.changes.push(c);
        }
    }

    /// `errors` of an apply, with every [`ApplyError::Immutable`] of an object that allows it
    /// recreated instead (within the guard): what is left are the errors of the batch.
    pub(super) async fn recreate_refused(
        &mut self,
        objects: &[PlannedObject],
        errors: Vec<ApplyError>,
    ) -> Vec<ApplyError> {
        let (mut to_recreate, mut left): (Vec<_>, Vec<_>) = (Vec::new(), Vec::new());
        for e in errors {
            let planned = match &e {
                ApplyError::Immutable { object, .. } => objects
                    .iter()
                    .find(|p| p.object_ref == **object)
                    .filter(|p| recreate::allowed(p)),
                _ => None,
            };
            match planned {
                Some(p) => to_recreate.push((p, e)),
                None => left.push(e),
            }
        }
        if to_recreate.is_empty() {
            return left;
        }
        let mut more: BTreeMap<Owner, usize> = BTreeMap::new();
        for (p, _) in &to_recreate {
            *more.entry(p.desired.owner.clone()).or_default() += 1;
        }
        if let Err(refused) = self.guard_allows(&more) {
            let why = format!("the prune guard refused the delete: {refused}");
            left.extend(
                to_recreate
                    .into_iter()
                    .map(|(_, e)| recreate::not_recreated(e, why.clone())),
            );
            return left;
        }
        let opts = self.recreate_options();
        for (p, refused) in to_recreate {
            match recreate::recreate(self.client, p, refused, &opts).await {
                Ok(changes) => self.record(changes),
                Err(e) => left.push(e),
            }
        }
        left
    }
}
