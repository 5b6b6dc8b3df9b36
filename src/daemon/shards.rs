//! Sharding the sync root across replicas (`weft run --shards N`) on Kubernetes Leases: shard `i`
//! has the Lease `<leader Lease>-shard-<i>`, a replica holds at most one of them at a time (the
//! client-go election of [`super::leader`], tried shard after shard), and the holder of shard `i`
//! applies the units of the repository that hash to `i` (see [`crate::render::shard`]) under its
//! own sync-root owner, with its own inventory. A holder that dies stops renewing; a standby
//! takes its Lease within the lease duration. Shards that no longer exist after N shrank are
//! finished by shard 0 ([`retired_roots`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use super::leader::{LeaderElector, LeaderError, LeaseConfig};
use super::state::DaemonState;
use crate::render::shard::{shard_of, shard_root_name, Shard};
use crate::render::Owner;

/// The shard a replica holds, and how to tell which custom resources are its own.
#[derive(Clone, Debug)]
pub struct ShardClaim {
    pub shard: Shard,
    /// The root's own name (`--root-name`), shard 0's.
    pub root_name: String,
    pub weft_namespace: String,
}

impl ShardClaim {
    pub(crate) fn owner_of(&self, index: u32) -> Owner {
        Owner::root(
            &self.weft_namespace,
            shard_root_name(&self.root_name, index),
        )
    }

    /// Does this shard act on the custom resource `kind` `namespace`/`name` with `labels`? The
    /// shard whose root applied it (its `weft.io/owner` label) does; one that no shard applied
    /// (created by hand) goes by the hash of its identity.
    pub fn handles(
        &self,
        labels: &BTreeMap<String, String>,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        if self.shard.count <= 1 {
            return true;
        }
        if let Some(label) = labels.get(crate::api::keys::OWNER_LABEL) {
            if let Some(j) = (0..self.shard.count).find(|j| self.owner_of(*j).id().0 == *label) {
                return j == self.shard.index;
            }
        }
        self.shard.holds(&format!("{kind}:{namespace}/{name}"))
    }
}

/// The Lease of shard `index` of the root whose leader Lease is `leader_lease`.
pub fn shard_lease_name(leader_lease: &str, index: u32) -> String {
    format!("{leader_lease}-shard-{index}")
}

/// Wait until this replica holds one of the `count` shard Leases of `base` (`Some`), or until
/// `stop` is cancelled (`None`). Each replica starts trying at a shard picked by its identity, so
/// that replicas starting together spread over the shards instead of racing for shard 0.
pub async fn acquire(
    state: &DaemonState,
    base: &LeaseConfig,
    count: u32,
    stop: &CancellationToken,
) -> Result<Option<(LeaderElector, Shard)>, LeaderError> {
    let mut electors: Vec<Option<LeaderElector>> = (0..count)
        .map(|i| {
            Some(
                LeaderElector::new(
                    state.client().clone(),
                    base.clone().named(shard_lease_name(&base.name, i)),
                )
                .with_fence(state.fence().clone()),
            )
        })
        .collect();
    let start = shard_of(&base.identity, count);
    let mut announced = false;
    loop {
        if stop.is_cancelled() {
            return Ok(None);
        }
        for k in 0..count {
            let i = (start + k) % count;
            let Some(elector) = electors[i as usize].as_mut() else {
                continue;
            };
            match elector.attempt_once().await {
                Ok(true) => {
                    let elector = electors[i as usize].take().expect("tried above");
                    return Ok(Some((elector, Shard { index: i, count })));
                }
                Err(e @ (LeaderError::Claimed { .. } | LeaderError::Switch { .. })) => {
                    return Err(e)
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(shard = i, error = %e, "shard Lease attempt failed; retrying")
                }
            }
        }
        if !announced {
            tracing::info!(shards = count, "standing by: every shard is held");
            announced = true;
        }
        tokio::select! {
            _ = tokio::time::sleep(base.retry_period) => {}
            _ = stop.cancelled() => {}
        }
    }
}

/// Shards at or above the shard count, from their Leases.
#[derive(Debug, Default)]
pub struct Retired {
    /// The sync-root owners of those no live replica holds, for shard 0 to finish.
    pub free: Vec<Owner>,
    /// Whether any such Lease exists at all (held or not): when none does, nothing can retire
    /// until the shard count changes, which starts a new term.
    pub any: bool,
}

/// The shards that no longer exist — a shard Lease of this root with an index at or above
/// `count` — and which of them no live replica holds (not renewed within its duration, or
/// released), for shard 0 to finish their inventories. A Lease renewed recently is still a
/// replica of the old count (a rolling update): its shard is left alone until it stops.
pub async fn retired_roots(
    client: &Client,
    leader_lease: &str,
    root_name: &str,
    weft_namespace: &str,
    count: u32,
) -> Result<Retired, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), weft_namespace);
    let prefix = format!("{leader_lease}-shard-");
    let now = Timestamp::now();
    let mut out = Retired::default();
    for lease in api.list(&ListParams::default()).await?.items {
        let Some(index) = lease
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|i| i.parse::<u32>().ok())
        else {
            continue;
        };
        if index < count {
            continue;
        }
        out.any = true;
        if held(&lease, now) {
            continue;
        }
        out.free.push(Owner::root(
            weft_namespace,
            shard_root_name(root_name, index),
        ));
    }
    Ok(out)
}

/// Whether a live replica holds `lease` at `now`.
fn held(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    if spec.holder_identity.as_deref().unwrap_or("").is_empty() {
        return false;
    }
    let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return false;
    };
    let expires = renewed.0 + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    expires > now
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: &str, renewed_secs_ago: i64, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(
                    Timestamp::now() - Duration::from_secs(renewed_secs_ago as u64),
                )),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_held_while_fresh_and_named() {
        let now = Timestamp::now();
        assert!(held(&lease("a", 1, 15), now));
        assert!(!held(&lease("a", 20, 15), now));
        assert!(!held(&lease("", 1, 15), now));
        assert_eq!(shard_lease_name("weft-leader", 2), "weft-leader-shard-2");
    }
}
