//! The API server's health as this replica sees it: probed every few seconds (`GET /readyz`,
//! bounded like every call), recorded as the root condition `ApiServerReady`, which `/readyz`
//! reports. An API server that cannot reach etcd answers its own `/readyz` with an error, so an
//! etcd outage shows as `ApiServerReady=False` within one probe, and clears as soon as it ends.
//! The daemon keeps running through it: passes fail and are retried, nothing is pruned.

use std::time::Duration;

use crate::api::conditions::{set_condition, Condition, ConditionStatus};

use super::state::DaemonState;
use super::status::now_rfc3339;

/// The root condition that says whether the API server answers and is ready.
pub const API_SERVER_READY: &str = "ApiServerReady";

/// How often the API server is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Probe the API server every `every` (at most `every` per probe) until the task is dropped.
pub async fn probe_api_server(state: DaemonState, every: Duration) {
    let mut timer = tokio::time::interval(every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        timer.tick().await;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("a GET request");
        let answer = tokio::time::timeout(every, state.client().request_text(request)).await;
        let failure = match answer {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(crate::api::kube_error::text(&e)),
            Err(_) => Some(format!("no answer within {}s", every.as_secs())),
        };
        record(&state, failure);
    }
}

/// Record the outcome of one probe (`None`: healthy).
pub fn record(state: &DaemonState, failure: Option<String>) {
    let condition = match failure {
        None => Condition {
            type_: API_SERVER_READY.into(),
            status: ConditionStatus::True,
            reason: "Ready".into(),
            message: "the API server answers /readyz".into(),
            ..Default::default()
        },
        Some(why) => {
            tracing::warn!(reason = %why, "the API server is not ready");
            Condition {
                type_: API_SERVER_READY.into(),
                status: ConditionStatus::False,
                reason: "Unreachable".into(),
                message: format!("GET /readyz of the API server: {why}"),
                ..Default::default()
            }
        }
    };
    let now = now_rfc3339();
    state.update_status(|s| set_condition(&mut s.conditions, condition, &now));
}
