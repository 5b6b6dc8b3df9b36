//! The small inventories this process last read or wrote, by the text of their head's manifest.
//!
//! A head's manifest names each chunk with the sha256 of its bytes, and a chunk's ConfigMap is
//! named after its content ([`format`](super::format)): a head whose manifest text is the one
//! read or written before describes the same entries, byte for byte. A reader that finds it
//! takes the entries kept here instead of getting and decoding the chunks again — one request
//! fewer in every pass of a root whose inventory did not change (a no-op round of 200 roots
//! read 200 chunks that said what the last pass had written).
//!
//! What this skips is the chunks' read, not their check: a chunk deleted or altered by hand under
//! an unchanged head is found by the next read that does not come from here (another replica,
//! this one after a restart), as damage. Only inventories of at most [`MAX_ENTRIES`] references
//! are kept, at most [`MAX_TOTAL`] in all (a few MB): a large one's chunks are one request
//! among its thousands of objects, and copying its entries out would cost more memory than the
//! request.

use std::collections::{BTreeSet, HashMap};
use std::sync::{LazyLock, Mutex};

use crate::api::ObjectRef;

/// The largest inventory kept (references).
pub const MAX_ENTRIES: usize = 2_000;
/// The references kept in all; the oldest inventories go first past it.
pub const MAX_TOTAL: usize = 40_000;

/// One kept inventory: its head's manifest text and its entries.
struct Kept {
    manifest: String,
    entries: BTreeSet<ObjectRef>,
    /// When it was kept (a counter): the oldest goes first.
    seq: u64,
}

#[derive(Default)]
struct Recent {
    by_head: HashMap<(String, String), Kept>,
    total: usize,
    seq: u64,
}

static RECENT: LazyLock<Mutex<Recent>> = LazyLock::new(Mutex::default);

fn with<T>(f: impl FnOnce(&mut Recent) -> T) -> T {
    f(&mut RECENT.lock().unwrap_or_else(|p| p.into_inner()))
}

/// The entries of the head `name` in `namespace` whose manifest text is `manifest`, when this
/// process read or wrote exactly that manifest there last.
pub fn entries(namespace: &str, name: &str, manifest: &str) -> Option<BTreeSet<ObjectRef>> {
    with(|r| r.entries(namespace, name, manifest))
}

/// Keep `entries` as what the head `name` in `namespace` with `manifest` describes (read or
/// written just now); an inventory too large to keep is forgotten instead.
pub fn keep(namespace: &str, name: &str, manifest: &str, entries: &BTreeSet<ObjectRef>) {
    with(|r| r.keep(namespace, name, manifest, entries))
}

/// Forget the head `name` in `namespace` (its inventory was deleted).
pub fn forget(namespace: &str, name: &str) {
    with(|r| r.forget(namespace, name))
}

impl Recent {
    fn entries(&self, namespace: &str, name: &str, manifest: &str) -> Option<BTreeSet<ObjectRef>> {
        let kept = self
            .by_head
            .get(&(namespace.to_string(), name.to_string()))?;
        (kept.manifest == manifest).then(|| kept.entries.clone())
    }

    fn keep(&mut self, namespace: &str, name: &str, manifest: &str, entries: &BTreeSet<ObjectRef>) {
        self.forget(namespace, name);
        if entries.len() > MAX_ENTRIES {
            return;
        }
        while self.total + entries.len() > MAX_TOTAL {
            let Some(oldest) = self
                .by_head
                .iter()
                .min_by_key(|(_, k)| k.seq)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(old) = self.by_head.remove(&oldest) {
                self.total -= old.entries.len();
            }
        }
        self.seq += 1;
        self.total += entries.len();
        let kept = Kept {
            manifest: manifest.to_string(),
            entries: entries.clone(),
            seq: self.seq,
        };
        self.by_head
            .insert((namespace.to_string(), name.to_string()), kept);
    }

    fn forget(&mut self, namespace: &str, name: &str) {
        if let Some(old) = self
            .by_head
            .remove(&(namespace.to_string(), name.to_string()))
        {
            self.total -= old.entries.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(n: usize, prefix: &str) -> BTreeSet<ObjectRef> {
        (0..n)
            .map(|i| ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "ns".into(),
                name: format!("{prefix}-{i}"),
            })
            .collect()
    }

    #[test]
    fn a_kept_inventory_is_found_only_under_the_same_manifest() {
        let mut r = Recent::default();
        let ns = "ns";
        let one = refs(3, "a");
        r.keep(ns, "head", "manifest-1", &one);
        assert_eq!(r.entries(ns, "head", "manifest-1"), Some(one.clone()));
        assert_eq!(
            r.entries(ns, "head", "manifest-2"),
            None,
            "another manifest"
        );
        assert_eq!(r.entries(ns, "other", "manifest-1"), None, "another head");
        let two = refs(4, "b");
        r.keep(ns, "head", "manifest-2", &two);
        assert_eq!(r.entries(ns, "head", "manifest-1"), None, "replaced");
        assert_eq!(r.entries(ns, "head", "manifest-2"), Some(two));
        r.forget(ns, "head");
        assert_eq!(r.entries(ns, "head", "manifest-2"), None, "forgotten");
    }

    #[test]
    fn a_large_inventory_is_not_kept_and_forgets_the_smaller_one_before_it() {
        let mut r = Recent::default();
        let ns = "ns";
        r.keep(ns, "head", "small", &refs(2, "s"));
        r.keep(ns, "head", "large", &refs(MAX_ENTRIES + 1, "l"));
        assert_eq!(r.entries(ns, "head", "large"), None);
        assert_eq!(r.entries(ns, "head", "small"), None);
    }

    #[test]
    fn past_the_total_the_oldest_goes_first() {
        let mut r = Recent::default();
        let ns = "ns";
        let per = MAX_ENTRIES;
        let heads = MAX_TOTAL / per + 1;
        for i in 0..heads {
            r.keep(ns, &format!("h{i}"), "m", &refs(per, "x"));
        }
        assert_eq!(r.entries(ns, "h0", "m"), None, "the oldest went");
        let last = format!("h{}", heads - 1);
        assert!(r.entries(ns, &last, "m").is_some(), "the newest stays");
        assert!(r.total <= MAX_TOTAL, "total {} over {MAX_TOTAL}", r.total);
    }
}
