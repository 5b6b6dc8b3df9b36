//! The per-owner pass locks the WeaveCloud controller and the updater share.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::render::Owner;

/// One async lock per owner: the WeaveCloud controller and the updater hold it around render,
/// apply, prune and wait of that owner's objects (the updater: a whole roll-out with its
/// rollback), so they never run passes for the same owner at once. Nothing holds two owners'
/// locks; the updater takes its own one-check-at-a-time lock before this one, never after.
#[derive(Clone, Debug, Default)]
pub struct PassLocks(Arc<Mutex<BTreeMap<Owner, Arc<tokio::sync::Mutex<()>>>>>);

impl PassLocks {
    /// Wait for `owner`'s lock.
    pub async fn lock(&self, owner: &Owner) -> OwnedMutexGuard<()> {
        let lock = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(owner.clone())
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// Forget a deleted owner's lock, unless someone holds it or waits for it: a pass that got
    /// the old lock after a new one was made for the same owner (a WeaveCloud deleted and
    /// created again) would run beside the holder of the new one.
    pub fn forget(&self, owner: &Owner) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Holders and waiters each keep a clone; `lock` clones under this same map lock, so no
        // one can start waiting between the count and the removal.
        if map.get(owner).is_some_and(|l| Arc::strong_count(l) == 1) {
            map.remove(owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::api::owner::OwnerKind;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_pass_lock_of_one_owner_excludes_only_that_owner() {
        let locks = PassLocks::default();
        let a = Owner::resource(OwnerKind::WeaveCloud, "a", "wc");
        let b = Owner::resource(OwnerKind::WeaveCloud, "b", "wc");
        let held = locks.lock(&a).await;
        let other = tokio::time::timeout(Duration::from_millis(50), locks.lock(&b)).await;
        assert!(other.is_ok(), "another owner's lock is free");
        let same = tokio::time::timeout(Duration::from_millis(50), locks.lock(&a)).await;
        assert!(same.is_err(), "the same owner's lock is held");
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock(&a)).await;
        assert!(again.is_ok());
    }

    #[tokio::test]
    async fn forgetting_a_lock_someone_waits_for_keeps_excluding_them() {
        let locks = PassLocks::default();
        let a = Owner::resource(OwnerKind::WeaveCloud, "a", "wc");
        // The WeaveCloud's cleanup holds the lock while the updater waits for it.
        let cleanup = locks.lock(&a).await;
        let (acquired_tx, acquired) = tokio::sync::oneshot::channel();
        let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
        let updater = {
            let locks = locks.clone();
            let a = a.clone();
            tokio::spawn(async move {
                let _held = locks.lock(&a).await;
                acquired_tx.send(()).unwrap();
                let _ = release.await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(cleanup);
        locks.forget(&a);
        acquired.await.expect("the waiting updater gets the lock");
        // A reconcile of a WeaveCloud of the same name must still wait for the updater.
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock(&a)).await;
        assert!(again.is_err(), "the updater still holds the owner's lock");
        release_tx.send(()).unwrap();
        updater.await.unwrap();
        // Nobody holds or waits any more: forgotten for good.
        locks.forget(&a);
        assert!(locks.0.lock().unwrap().is_empty());
    }
}
