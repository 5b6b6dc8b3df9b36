//! How the roots' Leases are named, how many of them a replica may hold, and when a root just
//! taken is first renewed: the arithmetic of `super::lease`, without its API calls.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::api::ResourceKey;

/// Roots a replica may hold above an even split, so a split that does not divide evenly (and
/// a replica that just joined) never leaves a root without a taker.
pub const SLACK: usize = 1;
/// The longest Lease name (a DNS subdomain).
pub(super) const MAX_NAME: usize = 253;

/// The Lease of the root `key` in Weft's namespace.
pub fn root_lease_name(key: &ResourceKey) -> String {
    let plain = format!("weft-root-{}.{}", key.namespace, key.name);
    if plain.len() <= MAX_NAME {
        plain
    } else {
        format!(
            "weft-root-{}",
            digest(&format!("{}/{}", key.namespace, key.name))
        )
    }
}

/// The Lease by which the replica `identity` says it is alive.
pub fn replica_lease_name(identity: &str) -> String {
    format!("weft-replica-{}", digest(identity))
}

pub(super) fn digest(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..10])
}

/// How many roots one of `replicas` live replicas may hold.
pub fn fair_share(roots: usize, replicas: usize) -> usize {
    roots.div_ceil(replicas.max(1)) + SLACK
}

/// How many roots a replica may hold this round, when the live replica holding fewest of the
/// others holds `fewest_other`: [`fair_share`], without its slack while that one holds fewer
/// than an even split's floor (so the roots it lacks are left for it to take).
pub fn share_now(roots: usize, replicas: usize, fewest_other: Option<usize>) -> usize {
    let share = fair_share(roots, replicas);
    match fewest_other {
        Some(n) if n < roots / replicas.max(1) => share - SLACK,
        _ => share,
    }
}

/// How much sooner than a third of the lease duration (`every`) the first renewal of a root just
/// taken comes: none, a third or two thirds of `every`, by the root's Lease name. Roots taken
/// together (a replica's start, a dead replica's share) would otherwise be renewed together, every
/// third round, in one burst of PUTs (156 of them in one second of the roots bench); staggered,
/// about a third of them is renewed in each round. Sooner only: a renewal opens the fence from
/// when it was sent, so none comes later than before.
pub(super) fn first_renewal_early(every: Duration, lease: &str) -> Duration {
    let slot = u32::from(Sha256::digest(lease.as_bytes())[0]) % 3;
    every * slot / 3
}
