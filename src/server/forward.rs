//! A standby replica forwards the work it is sent to the leader, instead of answering 503
//! (GitHub and GitLab do not retry a failed delivery, and a Service spreads them over every
//! Ready replica).
//!
//! The leader publishes the URL of its hooks port on its Lease (annotation
//! [`HOOKS_URL_ANNOTATION`], from `POD_IP`, or the `--hooks-listen` address when it names one). A
//! standby that has checked a request (token, signature, body bounds — as the leader would)
//! sends it on unchanged, with its headers, and returns the leader's answer; the leader checks it
//! again and queues the pass. A forwarded request carries [`FORWARDED_HEADER`] and is never
//! forwarded twice. When no leader can be found, or it does not answer, the standby answers 503
//! as before.
//!
//! Trust: the URL comes from the Lease in Weft's namespace, which only Weft's ServiceAccount may
//! write (deploy/): whoever can write that Lease can already stop Weft from working.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::{error_body, ServerState};

/// The Lease annotation with the leader's hooks URL (`http://10.0.0.7:8081`).
pub const HOOKS_URL_ANNOTATION: &str = "weft.io/hooks-url";
/// Set on a forwarded request (the standby's identity): it is not forwarded again.
pub const FORWARDED_HEADER: &str = "X-Weft-Forwarded-By";
/// Set on the answer of a forwarded request: the leader that handled it.
pub const FORWARDED_TO_HEADER: &str = "X-Weft-Forwarded-To";

/// Where a standby finds the leader: the Lease of this replica's sync root.
#[derive(Clone)]
pub struct LeaderLink {
    leases: Api<Lease>,
    lease_name: String,
    /// This replica's identity (sent in [`FORWARDED_HEADER`]).
    identity: String,
    http: reqwest::Client,
}

impl LeaderLink {
    pub fn new(client: kube::Client, namespace: &str, lease_name: &str, identity: &str) -> Self {
        LeaderLink {
            leases: Api::namespaced(client, namespace),
            lease_name: lease_name.to_string(),
            identity: identity.to_string(),
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
        }
    }

    /// The leader's identity and hooks URL, from its Lease.
    async fn leader(&self) -> Result<(String, String), String> {
        let lease = self
            .leases
            .get_opt(&self.lease_name)
            .await
            .map_err(|e| format!("cannot read the leader Lease: {e}"))?
            .ok_or("no leader Lease yet")?;
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
            .ok_or("no replica holds the leader Lease")?;
        if holder == self.identity {
            return Err("this replica holds the Lease but is not leading yet".into());
        }
        let url = lease
            .metadata
            .annotations
            .and_then(|a| a.get(HOOKS_URL_ANNOTATION).cloned())
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .ok_or("the leader publishes no hooks URL (no POD_IP, and --hooks-listen names no address)")?;
        Ok((holder, url))
    }
}

/// The URL this replica publishes when it leads: `http://$POD_IP:<port>`, else the hooks
/// listen address itself when it names one (not `0.0.0.0` or `::`).
pub fn advertised_hooks_url(hooks_listen: &str, pod_ip: Option<&str>) -> Option<String> {
    let addr: std::net::SocketAddr = hooks_listen.parse().ok()?;
    match pod_ip.map(str::trim).filter(|ip| !ip.is_empty()) {
        Some(ip) => {
            let ip: std::net::IpAddr = ip.parse().ok()?;
            Some(format!(
                "http://{}",
                std::net::SocketAddr::new(ip, addr.port())
            ))
        }
        None if !addr.ip().is_unspecified() => Some(format!("http://{addr}")),
        None => None,
    }
}

/// Headers not sent on: hop-by-hop ones, and those the client sets itself.
fn forwardable(name: &str) -> bool {
    !matches!(
        name.to_ascii_lowercase().as_str(),
        "host" | "content-length" | "connection" | "transfer-encoding" | "keep-alive" | "upgrade"
    )
}

/// Send a checked request on to the leader and return its answer; `None` when it cannot be
/// forwarded (already forwarded once, no leader found, the leader did not answer): the caller
/// answers 503.
pub(super) async fn to_leader(
    state: &ServerState,
    endpoint: &str,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
    timeout: Duration,
) -> Option<Response> {
    let link = state.leader_link.as_ref()?;
    if headers.contains_key(FORWARDED_HEADER) {
        tracing::warn!(
            endpoint,
            "a forwarded request reached a standby; not forwarding it again"
        );
        return None;
    }
    let (leader, base) = match link.leader().await {
        Ok(l) => l,
        Err(why) => {
            tracing::warn!(endpoint, reason = %why, "standby cannot forward to the leader");
            return None;
        }
    };
    let url = format!("{}{path_and_query}", base.trim_end_matches('/'));
    let mut request = link
        .http
        .request(method, &url)
        .timeout(timeout)
        .header(FORWARDED_HEADER, &link.identity)
        .body(body);
    for (name, value) in headers {
        if forwardable(name.as_str()) {
            request = request.header(name, value);
        }
    }
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(endpoint, leader = %leader, error = %e, "the leader did not answer a forwarded request");
            return None;
        }
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = answer.headers().get(reqwest::header::CONTENT_TYPE).cloned();
    let body = match answer.bytes().await {
        Ok(b) => b,
        Err(e) => {
            return Some(error_body(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the leader {leader} answered {status} but its body could not be read: {e}"
                ),
            ))
        }
    };
    tracing::info!(endpoint, leader = %leader, status = status.as_u16(), "forwarded to the leader");
    state.daemon.metrics.count_request(endpoint, "forwarded");
    let mut response = (status, body).into_response();
    if let Some(ct) = content_type.and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
        response
            .headers_mut()
            .insert(axum::http::header::CONTENT_TYPE, ct);
    }
    if let Ok(v) = HeaderValue::from_str(&leader) {
        response.headers_mut().insert(FORWARDED_TO_HEADER, v);
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_url_prefers_the_pod_ip() {
        assert_eq!(
            advertised_hooks_url("0.0.0.0:8081", Some("10.1.2.3")).as_deref(),
            Some("http://10.1.2.3:8081")
        );
        assert_eq!(
            advertised_hooks_url("0.0.0.0:8081", Some("fd00::7")).as_deref(),
            Some("http://[fd00::7]:8081")
        );
        assert_eq!(
            advertised_hooks_url("127.0.0.1:9001", None).as_deref(),
            Some("http://127.0.0.1:9001")
        );
        assert_eq!(advertised_hooks_url("0.0.0.0:8081", None), None);
        assert_eq!(advertised_hooks_url("0.0.0.0:8081", Some("")), None);
        assert_eq!(
            advertised_hooks_url("0.0.0.0:8081", Some("not-an-ip")),
            None
        );
    }

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        assert!(!forwardable("Host"));
        assert!(!forwardable("content-length"));
        assert!(forwardable("X-Hub-Signature-256"));
        assert!(forwardable("Authorization"));
    }
}
