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
//! Trust: the URL on the Lease is not believed. A forwarded request carries the client's
//! credential (the sync token, a webhook signature) in plain http, so it goes only to an
//! address that is an endpoint of Weft's own Service (`--service-name`, default `weft`, in
//! Weft's namespace): its EndpointSlices, which the endpoint controller fills with the IPs and
//! ports of the pods the Service selects. A URL that names anything else — another host, a
//! port of the pod that is not one of the Service's, a name instead of an IP — is refused and
//! logged, and the standby answers 503. Redirects are not followed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::Api;

use super::ServerState;
use crate::api::ResourceKey;

/// The Lease annotation with the leader's hooks URL, written by the leader election.
pub use crate::api::keys::HOOKS_URL_ANNOTATION;
/// Set on a forwarded request (the standby's identity): it is not forwarded again.
pub const FORWARDED_HEADER: &str = "X-Weft-Forwarded-By";
/// Set on the answer of a forwarded request: the leader that handled it.
pub const FORWARDED_TO_HEADER: &str = "X-Weft-Forwarded-To";
/// Set on a push, or a `POST /api/v1/sync?root=`, passed on to a replica holding some of the
/// Roots it is for (the identity of the replica that passes it on): the holder passes the Roots
/// it holds and does nothing else — no pass of the flag root, no forward, no Root written. It
/// only narrows what a request does, so a client that sets it gains nothing; the holder checks
/// the request again (signature, token) as it would any.
pub const ROOTS_FORWARDED_HEADER: &str = "X-Weft-Roots-Forwarded-By";

/// Who passed this request on ([`ROOTS_FORWARDED_HEADER`]), clipped for the log: another
/// replica's identity, or anything a client wrote. `None` when the request was not passed on.
pub fn roots_forwarded_by(headers: &HeaderMap) -> Option<String> {
    let by = headers.get(ROOTS_FORWARDED_HEADER)?;
    Some(crate::api::bounded::clip(
        &String::from_utf8_lossy(by.as_bytes()),
        253,
    ))
}
/// The default of `--service-name`: Weft's Service in its namespace (deploy/30-service.yaml).
pub const DEFAULT_SERVICE_NAME: &str = "weft";
/// The label an EndpointSlice carries with the name of its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// How much of a refused URL a log line quotes (it comes from a Lease, not from Weft).
const SHOWN_URL_CHARS: usize = 120;

/// Where a standby finds the leader: the Lease of this replica's sync root (with `--shards N`,
/// the N shard Leases: every shard holder must hear of a push).
#[derive(Clone)]
pub struct LeaderLink {
    leases: Api<Lease>,
    lease_name: String,
    /// `--shards`: 1 reads the leader Lease, more read each shard's.
    shards: u32,
    /// This replica's identity (sent in [`FORWARDED_HEADER`]).
    identity: String,
    /// Weft's Service: a hooks URL must be one of its endpoints.
    endpoints: Api<EndpointSlice>,
    service: String,
    /// Built on the first forward: building it reads and parses the system's CA bundle, which
    /// a lone replica (it never forwards) would hold for nothing.
    /// Shared by the clones (each pass-on takes one): a clone's own would build a client, and
    /// read the CA bundle, for every request it passes on, with no connection kept between them.
    http: std::sync::Arc<std::sync::OnceLock<reqwest::Client>>,
    /// Requests this replica is passing on to the holders of Roots ([`PASSED_ON_AT_ONCE`]).
    passing_on: std::sync::Arc<tokio::sync::Semaphore>,
    /// The EndpointSlices of Weft's Service as last listed, and when ([`ENDPOINTS_FRESH`]).
    endpoints_seen: std::sync::Arc<std::sync::Mutex<Option<Listed>>>,
    /// The holder and hooks URL each Lease named when last read, and when ([`HOLDER_FRESH`]).
    holders_seen: std::sync::Arc<std::sync::Mutex<HashMap<String, Held>>>,
}

/// A Lease's holder and the hooks URL it publishes, as read, and when.
type Held = (Instant, (String, String));

/// How long a reading of the leader's Lease (its holder and hooks URL, checked against the
/// endpoints) is used for the forwards after it: a burst of requests to a standby reads it
/// once, not once a request. Leadership moves only once the Lease expired (its duration, 15 s
/// by default), so this adds at most this long to the time forwards reach an old leader.
const HOLDER_FRESH: Duration = Duration::from_secs(1);

/// EndpointSlices as listed, and when.
type Listed = (Instant, Vec<EndpointSlice>);

/// How long a listing of Weft's Service's endpoints vouches for an address found in it: a burst
/// of requests passed on (200 `POST /api/v1/sync?root=`) lists them once, not once a request.
/// An address not found is listed again at once, so a new pod is never refused for it; one
/// that left the Service is trusted at most this long after.
const ENDPOINTS_FRESH: Duration = Duration::from_secs(2);

/// How many pushes and sync requests a replica passes on to the holders of Roots at once: half
/// of what a replica accepts from one peer (`max_connections_per_peer`, 32), so that a burst
/// (200 `POST /api/v1/sync?root=` at once) is passed on in turn instead of being refused by the
/// holder and asked through the API server. A forward to the leader is not counted: it answers
/// one client's request, which may wait for a whole pass (`?wait=true`).
const PASSED_ON_AT_ONCE: usize = 16;

/// How long the holder of Roots may take to answer a request passed on to it.
const PASS_ON_TIMEOUT: Duration = Duration::from_secs(10);

impl LeaderLink {
    pub fn new(client: kube::Client, namespace: &str, lease_name: &str, identity: &str) -> Self {
        LeaderLink {
            leases: Api::namespaced(client.clone(), namespace),
            lease_name: lease_name.to_string(),
            shards: 1,
            identity: identity.to_string(),
            endpoints: Api::namespaced(client, namespace),
            service: DEFAULT_SERVICE_NAME.to_string(),
            http: Default::default(),
            passing_on: std::sync::Arc::new(tokio::sync::Semaphore::new(PASSED_ON_AT_ONCE)),
            endpoints_seen: Default::default(),
            holders_seen: Default::default(),
        }
    }

    /// The client that forwards, built on first use.
    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                // A redirect would take the credential somewhere the endpoint check never saw.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default()
        })
    }

    /// Forward only to endpoints of this Service (`--service-name`) in Weft's namespace.
    pub fn with_service(mut self, service: &str) -> Self {
        self.service = service.to_string();
        self
    }

    /// Whether `url` is `http(s)://<ip>:<port>` of a ready or serving endpoint of Weft's
    /// Service, at one of its ports; else why not.
    async fn check_endpoint(&self, url: &str) -> Result<(), String> {
        let shown: String = url.chars().take(SHOWN_URL_CHARS).collect();
        let refuse = |why: String| {
            format!("the hooks URL `{shown}` on the Lease is not forwarded to: {why}")
        };
        let parsed = url::Url::parse(url).map_err(|e| refuse(e.to_string()))?;
        let ip: std::net::IpAddr = match parsed.host() {
            Some(url::Host::Ipv4(v4)) => v4.into(),
            Some(url::Host::Ipv6(v6)) => v6.into(),
            _ => return Err(refuse("it does not name a pod IP".into())),
        };
        let port = parsed
            .port_or_known_default()
            .ok_or_else(|| refuse("no port".into()))?;
        if self.seen_lately(ip, port) {
            return Ok(());
        }
        let params =
            ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={}", self.service));
        let slices = self.endpoints.list(&params).await.map_err(|e| {
            refuse(format!(
                "cannot list the endpoints of Service {}: {}",
                self.service,
                crate::api::kube_error::Text(&e)
            ))
        })?;
        let found = endpoint_of(&slices.items, ip, port);
        *self
            .endpoints_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), slices.items));
        if found {
            return Ok(());
        }
        Err(refuse(format!(
            "{ip} port {port} is not an endpoint of Weft's Service {} (--service-name)",
            self.service
        )))
    }

    /// Whether `ip`:`port` was an endpoint of Weft's Service in a listing younger than
    /// [`ENDPOINTS_FRESH`].
    fn seen_lately(&self, ip: std::net::IpAddr, port: u16) -> bool {
        let seen = self
            .endpoints_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        seen.as_ref().is_some_and(|(at, slices)| {
            at.elapsed() < ENDPOINTS_FRESH && endpoint_of(slices, ip, port)
        })
    }

    /// Forward to the holders of the `shards` shard Leases (`--shards`).
    pub fn with_shards(mut self, shards: u32) -> Self {
        self.shards = shards.max(1);
        self
    }

    /// Whether the root is sharded (a holder passes requests on to the other shards too).
    pub fn sharded(&self) -> bool {
        self.shards > 1
    }

    /// The holder's identity and hooks URL, from the Lease `name` (as read within
    /// [`HOLDER_FRESH`]).
    async fn holder(&self, name: &str) -> Result<(String, String), String> {
        if let Some(held) = self.holder_seen_lately(name) {
            return Ok(held);
        }
        let held = self.read_holder(name).await?;
        self.holders_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), (Instant::now(), held.clone()));
        Ok(held)
    }

    /// The holder of the Lease `name` as read within [`HOLDER_FRESH`] (an older reading is
    /// dropped).
    fn holder_seen_lately(&self, name: &str) -> Option<(String, String)> {
        let mut seen = self.holders_seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, (at, _)| at.elapsed() < HOLDER_FRESH);
        seen.get(name).map(|(_, held)| held.clone())
    }

    /// The holder's identity and hooks URL, read from the Lease `name` now.
    async fn read_holder(&self, name: &str) -> Result<(String, String), String> {
        let lease = self
            .leases
            .get_opt(name)
            .await
            .map_err(|e| {
                format!(
                    "cannot read the Lease {name}: {}",
                    crate::api::kube_error::Text(&e)
                )
            })?
            .ok_or_else(|| format!("no Lease {name} yet"))?;
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("no replica holds the Lease {name}"))?;
        if holder == self.identity {
            return Err(format!("this replica holds the Lease {name}"));
        }
        let url = lease
            .metadata
            .annotations
            .and_then(|a| a.get(HOOKS_URL_ANNOTATION).cloned())
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .ok_or("the holder publishes no hooks URL (no POD_IP, and --hooks-listen names no address)")?;
        self.check_endpoint(&url).await?;
        Ok((holder, url))
    }

    /// Where to send a request: the leader, or every other shard holder.
    async fn targets(&self) -> Result<Vec<(String, String)>, String> {
        if self.shards <= 1 {
            return self.holder(&self.lease_name).await.map(|t| vec![t]);
        }
        let mut out = Vec::new();
        let mut why = Vec::new();
        for i in 0..self.shards {
            let name = crate::daemon::shards::shard_lease_name(&self.lease_name, i);
            match self.holder(&name).await {
                Ok(t) if !out.contains(&t) => out.push(t),
                Ok(_) => {}
                Err(e) => why.push(e),
            }
        }
        if out.is_empty() {
            return Err(why.join("; "));
        }
        Ok(out)
    }
}

/// Whether `ip`:`port` is an endpoint of these EndpointSlices (one of their addresses, at one
/// of their ports). Readiness does not matter: a leader whose repository cannot be fetched is
/// not Ready, and is still a pod of Weft's Service.
fn endpoint_of(slices: &[EndpointSlice], ip: std::net::IpAddr, port: u16) -> bool {
    slices.iter().any(|slice| {
        let has_port = slice
            .ports
            .iter()
            .flatten()
            .any(|p| p.port == Some(i32::from(port)));
        has_port
            && slice.endpoints.iter().flatten().any(|e| {
                e.addresses
                    .iter()
                    .any(|a| a.parse::<std::net::IpAddr>().is_ok_and(|a| a == ip))
            })
    })
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

/// A checked request to pass on.
#[derive(Clone)]
pub(super) struct Forward<'a> {
    pub endpoint: &'a str,
    pub method: Method,
    pub path_and_query: &'a str,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    pub timeout: Duration,
}

/// An answer from another replica.
struct Answer {
    holder: String,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

async fn send(
    link: &LeaderLink,
    req: &Forward<'_>,
    holder: String,
    base: &str,
) -> Result<Answer, String> {
    let url = format!("{}{}", base.trim_end_matches('/'), req.path_and_query);
    let mut request = link
        .http()
        .request(req.method.clone(), &url)
        .timeout(req.timeout)
        .header(FORWARDED_HEADER, &link.identity)
        .body(req.body.clone());
    for (name, value) in req.headers {
        if forwardable(name.as_str()) {
            request = request.header(name, value);
        }
    }
    let answer = request
        .send()
        .await
        .map_err(|e| format!("{holder} did not answer: {e}"))?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = answer
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok());
    let body = answer
        .bytes()
        .await
        .map_err(|e| format!("{holder} answered {status} but its body could not be read: {e}"))?;
    Ok(Answer {
        holder,
        status,
        content_type,
        body,
    })
}

/// Send `req` to every target at once; the answers that came, and why the others did not.
async fn send_all(link: &LeaderLink, req: &Forward<'_>) -> Result<Vec<Answer>, String> {
    let targets = link.targets().await?;
    let sent = futures::future::join_all(
        targets
            .into_iter()
            .map(|(holder, base)| async move { send(link, req, holder, &base).await }),
    )
    .await;
    let mut answers = Vec::new();
    for a in sent {
        match a {
            Ok(a) => answers.push(a),
            Err(why) => {
                tracing::warn!(endpoint = req.endpoint, reason = %why, "a forwarded request was not answered")
            }
        }
    }
    Ok(answers)
}

/// Send a checked request on to the leader (every shard holder, when the root is sharded) and
/// return its answer (the first shard's that answered); `None` when it cannot be forwarded
/// (already forwarded once, no holder found, none answered): the caller answers 503.
pub(super) async fn to_leader(state: &ServerState, req: Forward<'_>) -> Option<Response> {
    let link = state.leader_link.as_ref()?;
    let endpoint = req.endpoint;
    if req.headers.contains_key(FORWARDED_HEADER) {
        tracing::warn!(
            endpoint,
            "a forwarded request reached a standby; not forwarding it again"
        );
        return None;
    }
    let answers = match send_all(link, &req).await {
        Ok(a) => a,
        Err(why) => {
            tracing::warn!(endpoint, reason = %why, "standby cannot forward to the leader");
            return None;
        }
    };
    let holders: Vec<&str> = answers.iter().map(|a| a.holder.as_str()).collect();
    let holders = holders.join(",");
    let first = answers.into_iter().next()?;
    tracing::info!(endpoint, leader = %holders, status = first.status.as_u16(), "forwarded to the leader");
    state.daemon.metrics().count_request(endpoint, "forwarded");
    let mut response = (first.status, first.body).into_response();
    if let Some(ct) = first.content_type {
        response
            .headers_mut()
            .insert(axum::http::header::CONTENT_TYPE, ct);
    }
    if let Ok(v) = HeaderValue::from_str(&holders) {
        response.headers_mut().insert(FORWARDED_TO_HEADER, v);
    }
    Some(response)
}

/// A shard holder that took a request passes it on to the other shard holders, in the
/// background (each shard fetches and applies its own part); nothing when the root is not
/// sharded or the request was forwarded already.
pub(super) fn to_other_shards(state: &ServerState, req: Forward<'_>) {
    let Some(link) = state.leader_link.clone().filter(LeaderLink::sharded) else {
        return;
    };
    if req.headers.contains_key(FORWARDED_HEADER) {
        return;
    }
    let endpoint = req.endpoint.to_string();
    let method = req.method.clone();
    let path = req.path_and_query.to_string();
    let headers = req.headers.clone();
    let body = req.body.clone();
    let timeout = req.timeout;
    tokio::spawn(async move {
        let req = Forward {
            endpoint: &endpoint,
            method,
            path_and_query: &path,
            headers: &headers,
            body,
            timeout,
        };
        match send_all(&link, &req).await {
            Ok(answers) => {
                for a in answers {
                    tracing::info!(endpoint = %endpoint, shard_holder = %a.holder, status = a.status.as_u16(), "passed on to another shard");
                }
            }
            Err(why) => {
                tracing::debug!(endpoint = %endpoint, reason = %why, "no other shard holder to pass the request on to")
            }
        }
    });
}

/// The leader passes a verified push (or a `POST /api/v1/sync?root=`: `what` says which, for
/// the logs) on to the replicas holding the Roots it is for (`keys`, which another replica
/// holds or nobody does), so that no Root is written for it: each holder is sent the request as
/// it came, with [`ROOTS_FORWARDED_HEADER`], at the hooks URL it publishes on its replica Lease
/// (an endpoint of Weft's Service only, as for the leader), and answers with the Roots it woke.
/// A Root nobody holds, whose holder publishes no URL or cannot be reached, or that its holder
/// did not wake (it lost the Lease meanwhile) is asked through the API server instead
/// (`weft.io/requested-at`). In the background: the request is answered without waiting.
pub(super) fn to_root_holders(
    state: &ServerState,
    req: Forward<'_>,
    keys: Vec<ResourceKey>,
    what: &'static str,
) {
    if keys.is_empty() {
        return;
    }
    let daemon = state.daemon.clone();
    let pushes = daemon.root_pushes();
    let mut by_holder: BTreeMap<(String, String), Vec<ResourceKey>> = BTreeMap::new();
    let mut asked = Vec::new();
    for key in keys {
        match state.leader_link.as_ref().and(pushes.holder_of(&key)) {
            Some(holder) => by_holder.entry(holder).or_default().push(key),
            None => asked.push(key),
        }
    }
    crate::daemon::roots::answer::ask_through_the_roots(&daemon, asked, what);
    let Some(link) = state.leader_link.clone().filter(|_| !by_holder.is_empty()) else {
        return;
    };
    let endpoint = req.endpoint.to_string();
    let path = req.path_and_query.to_string();
    let mut headers = req.headers.clone();
    if let Ok(v) = HeaderValue::from_str(&link.identity) {
        headers.insert(ROOTS_FORWARDED_HEADER, v);
    }
    let body = req.body.clone();
    // The holder answers at once (it only wakes Roots): one that does not within this holds a
    // place of the 16 no longer, and its Roots are asked through the API server.
    let timeout = req.timeout.min(PASS_ON_TIMEOUT);
    tokio::spawn(async move {
        let req = Forward {
            endpoint: &endpoint,
            method: Method::POST,
            path_and_query: &path,
            headers: &headers,
            body,
            timeout,
        };
        let sent = futures::future::join_all(by_holder.into_iter().map(
            |((holder, url), keys)| {
                let (link, req) = (&link, &req);
                async move {
                    // Held until the answer's body is read; never closed, so the wait
                    // cannot fail.
                    let _turn = link.passing_on.acquire().await;
                    let answer = match link.check_endpoint(&url).await {
                        Ok(()) => send(link, req, holder.clone(), &url).await,
                        Err(why) => Err(why),
                    };
                    let woken = match answer {
                        Ok(a) if a.status.is_success() => woken_roots(&a.body),
                        Ok(a) => {
                            tracing::warn!(endpoint = req.endpoint, replica = %holder, status = a.status.as_u16(), "the replica holding Roots of a {what} refused it; asking them through the API server");
                            HashSet::new()
                        }
                        Err(why) => {
                            tracing::warn!(endpoint = req.endpoint, replica = %holder, reason = %why, "cannot pass a {what} on to the replica holding Roots of it; asking them through the API server");
                            HashSet::new()
                        }
                    };
                    let (passed, missed): (Vec<ResourceKey>, Vec<ResourceKey>) =
                        keys.into_iter().partition(|k| woken.contains(&k.to_string()));
                    if !passed.is_empty() {
                        tracing::debug!(endpoint = req.endpoint, replica = %holder, roots = passed.len(), "{what} passed on to the replica holding its Roots");
                    }
                    missed
                }
            },
        ))
        .await;
        let missed: Vec<ResourceKey> = sent.into_iter().flatten().collect();
        crate::daemon::roots::answer::ask_through_the_roots(&daemon, missed, what);
    });
}

/// The Roots a holder says it woke: the `roots` of its JSON answer, as `namespace/name`.
fn woken_roots(body: &[u8]) -> HashSet<String> {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    answer["roots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_s_answer_names_the_roots_it_woke() {
        let woken = woken_roots(br#"{"status":"queued","roots":["team-a/apps","team-b/db"]}"#);
        assert_eq!(
            woken,
            HashSet::from(["team-a/apps".to_string(), "team-b/db".to_string()])
        );
        // Anything else names none: those Roots are asked through the API server.
        assert!(woken_roots(b"<html>bad gateway</html>").is_empty());
        assert!(woken_roots(br#"{"roots":"team-a/apps"}"#).is_empty());
        assert!(woken_roots(br#"{"status":"queued"}"#).is_empty());
    }

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

    fn slice(addresses: &[&str], ready: bool, port: i32) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "weft-abc", "labels": {SERVICE_NAME_LABEL: "weft"}},
            "addressType": "IPv4",
            "endpoints": addresses.iter().map(|a| serde_json::json!({
                "addresses": [a], "conditions": {"ready": ready}
            })).collect::<Vec<_>>(),
            "ports": [{"name": "hooks", "port": port}, {"name": "http", "port": 8080}],
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_listing_of_the_endpoints_and_a_reading_of_the_lease_serve_only_while_fresh() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let link = LeaderLink::new(client, "weft", "weft-leader", "me");
        let ip = |s: &str| s.parse().unwrap();
        assert!(
            !link.seen_lately(ip("10.0.0.7"), 8081),
            "nothing listed yet"
        );
        let listed = |age: Duration| {
            *link.endpoints_seen.lock().unwrap() =
                Some((Instant::now() - age, vec![slice(&["10.0.0.7"], true, 8081)]));
        };
        listed(Duration::ZERO);
        assert!(link.seen_lately(ip("10.0.0.7"), 8081));
        assert!(
            !link.seen_lately(ip("10.0.0.8"), 8081),
            "not in the listing"
        );
        assert!(
            !link.seen_lately(ip("10.0.0.7"), 10250),
            "not a Service port"
        );
        listed(ENDPOINTS_FRESH + Duration::from_millis(1));
        assert!(!link.seen_lately(ip("10.0.0.7"), 8081), "a stale listing");

        // A reading of the leader's Lease is used while fresh, then read again.
        let held = ("other_1".to_string(), "http://10.0.0.7:8081".to_string());
        let read = |age: Duration| {
            link.holders_seen
                .lock()
                .unwrap()
                .insert("weft-leader".into(), (Instant::now() - age, held.clone()));
        };
        read(Duration::ZERO);
        assert_eq!(link.holder_seen_lately("weft-leader"), Some(held.clone()));
        assert_eq!(
            link.holder_seen_lately("weft-leader-1"),
            None,
            "another Lease"
        );
        read(HOLDER_FRESH + Duration::from_millis(1));
        assert_eq!(
            link.holder_seen_lately("weft-leader"),
            None,
            "a stale reading"
        );
        assert!(link.holders_seen.lock().unwrap().is_empty(), "and dropped");

        // A clone (each pass-on takes one) shares what it learns and builds with the original.
        let passing_on = link.clone();
        listed(Duration::ZERO);
        assert!(passing_on.seen_lately(ip("10.0.0.7"), 8081));
        assert!(link.http.get().is_none());
        passing_on.http();
        assert!(link.http.get().is_some(), "the client is built once");
    }

    #[test]
    fn only_an_endpoint_at_a_service_port_is_a_target() {
        let ip = |s: &str| s.parse().unwrap();
        let slices = [slice(&["10.0.0.7", "10.0.0.8"], true, 8081)];
        assert!(endpoint_of(&slices, ip("10.0.0.7"), 8081));
        assert!(endpoint_of(&slices, ip("10.0.0.8"), 8080));
        assert!(
            !endpoint_of(&slices, ip("10.0.0.9"), 8081),
            "another address"
        );
        assert!(!endpoint_of(&slices, ip("10.0.0.7"), 10250), "another port");
        let not_ready = [slice(&["10.0.0.7"], false, 8081)];
        assert!(
            endpoint_of(&not_ready, ip("10.0.0.7"), 8081),
            "a pod that is not Ready"
        );
        assert!(
            !endpoint_of(&[], ip("10.0.0.7"), 8081),
            "no Service, no target"
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
