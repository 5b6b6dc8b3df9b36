//! The deletes a pass makes before its prune, within the prune guard: the old object of a kind
//! change, pruned before its replacement is created ([`crate::apply::replaced`]), and an object
//! recreated because its document changes an immutable field and allows it
//! ([`crate::apply::recreate`]). Each is counted against the guard with what the pass deleted
//! so far, before it is made; the prune at the end counts them too.

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

    /// Prune the old objects of the kind changes whose new object is among `objects`, before
    /// they are applied. Returns the new objects that must not be applied (the guard refused
    /// their old objects' prune, or it failed), with the errors.
    pub(super) async fn replace_before_apply(
        &mut self,
        objects: &[PlannedObject],
        catalog: &Catalog,
    ) -> (BTreeSet<crate::apply::inventory::RefKey>, Vec<ApplyError>) {
        let mut held = BTreeSet::new();
        let mut errors = Vec::new();
        if self.input.dry_run {
            return (held, errors);
        }
        let mut due: Vec<Replacement> = Vec::new();
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
        if due.is_empty() {
            return (held, errors);
        }
        let mut more: BTreeMap<Owner, usize> = BTreeMap::new();
        for r in &due {
            *more.entry(r.owner.clone()).or_default() += 1;
        }
        if let Err(refused) = self.guard_allows(&more) {
            held.extend(due.iter().map(|r| ref_key(&r.new)));
            errors.push(refused);
            return (held, errors);
        }
        let opts = self.recreate_options();
        for r in &due {
            match replaced::prune_old(self.client, catalog, r, &opts).await {
                Ok(change) => self.record(change.into_iter().collect()),
                Err(e) => {
                    held.insert(ref_key(&r.new));
                    errors.push(e);
                }
            }
        }
        (held, errors)
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
