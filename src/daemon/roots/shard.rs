//! The flag root's Root split into shards (`weft run --shards N --root-object`, issue 41 item
//! 2): one Root object, passed in parts. The shard Leases stay what they were for the flag loop
//! (`daemon::shards`: `<leader Lease>-shard-<i>`, one per replica, a dead holder's taken over by
//! a standby within the lease duration); the Root has no root Lease of its own. The holder of
//! shard `i` passes the Root with the render split by `render::shard` — its part applied and
//! pruned under the owner `<root>-shard-<i>` (`<root>` for shard 0) with that owner's
//! inventory, the other shards' part never pruned — and shard 0 finishes the shards retired
//! when N shrank. Only shard 0 writes the Root's status (the other shards' passes are in their
//! logs, events and their own `?wait=true` answers): one writer, no status fought over.

use std::sync::Arc;
use std::time::Duration;

use super::identity::Impersonation;
use super::lease::HeldRoot;
use crate::daemon::state::DaemonState;
use crate::pass::ShardPass;
use crate::render::shard::{shard_root_name, Shard};

/// The writers of the flag root's Root while this replica holds a shard Lease: the daemon's
/// own client, behind the fence the shard Lease keeps open. `None`: a standby.
pub fn held(state: &DaemonState, api_timeout: Duration) -> Option<HeldRoot> {
    state.shard_claim()?;
    Some(HeldRoot {
        client: state.client().clone(),
        events: state.events().clone(),
        impersonation: Arc::new(Impersonation::new(None, state.fence().clone(), api_timeout)),
    })
}

/// This replica's part of the flag root's Root: its shard, the owner name it applies under,
/// and (shard 0) the retired shards to finish.
pub struct Part {
    pub shard: Shard,
    pub root_name: String,
    pub pass: ShardPass,
}

/// The part this replica holds now; `None`: it holds no shard Lease any more.
pub async fn part(state: &DaemonState) -> Option<Part> {
    let claim = state.shard_claim()?;
    let shard = claim.shard;
    let retired = if shard.index == 0 {
        let lease = crate::daemon::leader::lease_name(&claim.root_name);
        let found = crate::daemon::shards::retired_roots(
            state.client(),
            &lease,
            &claim.root_name,
            &claim.weft_namespace,
            shard.count,
        )
        .await;
        match found {
            Ok(r) => r.free,
            Err(e) => {
                tracing::warn!(error = %crate::api::kube_error::Text(&e), "cannot list the shard Leases; retired shards are finished at a later pass");
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    Some(Part {
        shard,
        root_name: shard_root_name(&claim.root_name, shard.index),
        pass: ShardPass {
            elsewhere: Arc::default(),
            retired,
        },
    })
}

/// Whether this replica writes the status of the sharded flag root's Root (shard 0 only).
pub fn writes_status(state: &DaemonState) -> bool {
    state.shard_claim().is_some_and(|c| c.shard.index == 0)
}
