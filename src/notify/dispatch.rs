//! The dispatcher: matches emitted events to Alerts and hands them to one sender per Provider,
//! which reads the Provider's Secret, builds the request and sends it — rate-limited, with a
//! timeout on every request, retried with backoff. A slow or failing provider holds only its own
//! queue; the components that emit events never wait.
//!
//! Alerts and Providers are kept in kube-runtime watch stores (a reflector each): matching an
//! event costs no API call, and a changed Alert takes effect at once. Secrets are read when a
//! request is built (one GET per delivery), so Weft needs only `get` on Secrets — no cluster-wide
//! list or watch of every Secret — and a rotated token is used at once.
//!
//! The same watch feeds the Providers' and Alerts' `Ready` condition: each is checked when it
//! changes and every [`RECHECK_INTERVAL`] (a Secret created later), and its status is written
//! only when the condition changes, with an event when it does ([`super::status`]). On a standby
//! replica those writes are refused by the write fence, and it sends nothing either: events come
//! from the leader's work only.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use super::destination_policy::NotificationPolicy;
use super::limits::{Backoff, Dedup, RateLimit, DEDUP_WINDOW};
use super::matching::AlertRule;
use super::payload::{self, Outbound};
use super::status::{self, StatusWriter};
use super::{Counters, Event, Notifier};
use crate::api::notification::{Alert, Provider};

/// How often every Provider and Alert is checked again even when none changed.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(60);
/// A provider's sender stops after this long without work (started again on the next event).
const IDLE: Duration = Duration::from_secs(300);
/// Deliveries that may wait for one provider; more are dropped with a warning.
const PROVIDER_QUEUE: usize = 100;
/// How long the first event waits for the watch stores to be filled.
const STORE_WAIT: Duration = Duration::from_secs(15);

/// How notifications are sent.
#[derive(Clone, Debug)]
pub struct DispatchConfig {
    /// Only Alerts and Providers of these namespaces are used (`--watch-namespaces`); `None`: all.
    pub namespaces: Option<BTreeSet<String>>,
    /// The deadline of one request (connection included).
    pub request_timeout: Duration,
    pub backoff: Backoff,
    pub dedup_window: Duration,
    /// Requests to one provider at once, and per second after that.
    pub rate_burst: u32,
    pub rate_per_second: f64,
    /// Where notifications may go (`--allowed-notification-urls`).
    pub policy: NotificationPolicy,
    /// Whom each Provider's Secret is read as; `None`: the dispatcher's own client.
    pub secrets_as: Option<SecretsAs>,
    /// Weft's namespace, whose key seals the status events (`notify::sealed`); `None`: unsealed.
    pub weft_namespace: Option<String>,
}

/// Whom a Provider's Secret is read as (issue 42 item 3). The daemon answers with the client of
/// the identity of the root whose pass applied the Provider (a tenant's ServiceAccount), and
/// `None` for a Provider its own identity reads (the operator's, or one made by hand). An error
/// (the root that applied it no longer exists) leaves the Provider unsent, saying why.
pub trait SecretReader: Send + Sync {
    fn client_for<'a>(
        &'a self,
        provider: &'a Provider,
    ) -> futures::future::BoxFuture<'a, Result<Option<Client>, String>>;
}

/// A [`SecretReader`], shared by the senders and the status checks.
#[derive(Clone)]
pub struct SecretsAs(pub Arc<dyn SecretReader>);

impl std::fmt::Debug for SecretsAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsAs")
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            namespaces: None,
            request_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            dedup_window: DEDUP_WINDOW,
            rate_burst: 10,
            rate_per_second: 1.0,
            policy: NotificationPolicy::default(),
            secrets_as: None,
            weft_namespace: None,
        }
    }
}

impl DispatchConfig {
    fn watches(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|set| set.contains(namespace))
    }
}

/// Why a notification could not be sent at all.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("building the notifications' HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

/// What the per-provider senders share.
struct Shared {
    client: Client,
    /// Built on the first notification sent: building it reads and parses the system's CA
    /// bundle, which a daemon that never notifies would hold for nothing.
    http: std::sync::OnceLock<reqwest::Client>,
    providers: Store<Provider>,
    config: DispatchConfig,
    counters: Counters,
}

impl Shared {
    /// The client `provider`'s Secret is read with ([`SecretReader`]).
    async fn client_for(&self, provider: &Provider) -> Result<Client, String> {
        match &self.config.secrets_as {
            None => Ok(self.client.clone()),
            Some(SecretsAs(reader)) => Ok(reader
                .client_for(provider)
                .await?
                .unwrap_or_else(|| self.client.clone())),
        }
    }
}

/// One event for one provider.
struct Delivery {
    event: Event,
    summary: Option<String>,
}

/// Start the dispatcher (and the Provider/Alert status checks) on `client`; events emitted on the
/// returned notifier are sent until the process ends.
pub fn start(
    client: Client,
    config: DispatchConfig,
    counters: Counters,
) -> (Notifier, Vec<JoinHandle<()>>) {
    let (notifier, events) = Notifier::channel(counters.clone());
    let changed = Arc::new(Notify::new());
    let namespaces = config
        .namespaces
        .as_ref()
        .map(|s| s.iter().cloned().collect());
    let (alerts, alerts_task) = watch_store::<Alert>(&client, namespaces.clone(), changed.clone());
    let (providers, providers_task) = watch_store::<Provider>(&client, namespaces, changed.clone());
    let shared = Arc::new(Shared {
        client,
        http: std::sync::OnceLock::new(),
        providers,
        config,
        counters,
    });
    let status_task = tokio::spawn(check_loop(shared.clone(), alerts.clone(), changed));
    let dispatch_task = tokio::spawn(dispatch(shared, alerts, events));
    (
        notifier,
        vec![alerts_task, providers_task, status_task, dispatch_task],
    )
}

impl Shared {
    /// The notifications' HTTP client, built on first use.
    fn http(&self) -> Result<&reqwest::Client, DispatchError> {
        if let Some(http) = self.http.get() {
            return Ok(http);
        }
        let built = reqwest::Client::builder()
            .timeout(self.config.request_timeout)
            .connect_timeout(self.config.request_timeout.min(Duration::from_secs(5)))
            // A redirect would carry the token's header to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            // A name that resolves to loopback or link-local gets no connection (unless named).
            .dns_resolver(self.config.policy.resolver())
            .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(DispatchError::Http)?;
        Ok(self.http.get_or_init(|| built))
    }
}

/// A watch store of every `K` (of `namespaces` only, when listed: a Weft with a Role in each
/// cannot watch cluster-wide), and the task that feeds it (poking `changed` on each change).
fn watch_store<K>(
    client: &Client,
    namespaces: Option<Vec<String>>,
    changed: Arc<Notify>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = crate::apply::watch::watch_in::<K>(client, namespaces, watcher::Config::default())
        .reflect(writer)
        .touched_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut warned = false;
        while let Some(item) = stream.next().await {
            match item {
                Ok(_) => changed.notify_one(),
                // Without the CRDs (an older install) the watch fails until they appear.
                Err(e) if !warned => {
                    warned = true;
                    tracing::warn!(kind = %K::kind(&()), error = %crate::api::kube_error::watch_text(&e), "cannot watch notification resources; notifications are off until this works");
                }
                Err(e) => tracing::debug!(kind = %K::kind(&()), error = %e, "watch failed"),
            }
        }
    });
    (reader, task)
}

/// Match each event to the Alerts and queue it on their Providers' senders.
async fn dispatch(shared: Arc<Shared>, alerts: Store<Alert>, mut events: mpsc::Receiver<Event>) {
    let mut dedup = Dedup::new(shared.config.dedup_window);
    let mut senders: HashMap<String, mpsc::Sender<Delivery>> = HashMap::new();
    let mut waited = false;
    while let Some(event) = events.recv().await {
        if !waited {
            // The first events of a start (the first pass) must not be lost to an empty store.
            waited = true;
            let ready = async {
                let _ = alerts.wait_until_ready().await;
                let _ = shared.providers.wait_until_ready().await;
            };
            if tokio::time::timeout(STORE_WAIT, ready).await.is_err() {
                tracing::warn!("the Alert and Provider watches are not ready; events are matched against what is known");
            }
        }
        for alert in alerts.state() {
            let namespace = alert.namespace().unwrap_or_default();
            if alert.spec.suspend || !shared.config.watches(&namespace) {
                continue;
            }
            let Ok(rule) = AlertRule::new(&namespace, &alert.name_any(), &alert.spec) else {
                continue;
            };
            if !rule.matches(&event) {
                continue;
            }
            let provider_ref = ObjectRef::new(&rule.provider).within(&namespace);
            let Some(provider) = shared.providers.get(&provider_ref) else {
                tracing::debug!(alert = %format!("{namespace}/{}", rule.name), provider = %rule.provider, "the Alert's Provider does not exist");
                continue;
            };
            if provider.spec.suspend {
                continue;
            }
            let key = format!("{namespace}/{}", rule.provider);
            if !dedup.first(&key, &event, Instant::now()) {
                tracing::debug!(provider = %key, source = %event.source, reason = %event.reason, "sent recently; not sent again");
                continue;
            }
            let delivery = Delivery {
                event: event.clone(),
                summary: rule.summary.clone(),
            };
            queue(
                &shared,
                &mut senders,
                &key,
                &namespace,
                &rule.provider,
                delivery,
            );
        }
    }
}

/// Hand `delivery` to the sender of provider `key`, starting it if it is not running.
fn queue(
    shared: &Arc<Shared>,
    senders: &mut HashMap<String, mpsc::Sender<Delivery>>,
    key: &str,
    namespace: &str,
    name: &str,
    delivery: Delivery,
) {
    let sent = match senders.get(key) {
        Some(s) => s.try_send(delivery),
        None => Err(mpsc::error::TrySendError::Closed(delivery)),
    };
    let delivery = match sent {
        Ok(()) => return,
        Err(mpsc::error::TrySendError::Full(_)) => {
            shared.counters.dropped.inc();
            tracing::warn!(provider = %key, "the provider's queue is full (it is slow or failing); event dropped");
            return;
        }
        // Not started, or stopped after being idle.
        Err(mpsc::error::TrySendError::Closed(d)) => d,
    };
    let (tx, rx) = mpsc::channel(PROVIDER_QUEUE);
    // A fresh channel has room.
    let _ = tx.try_send(delivery);
    senders.insert(key.to_string(), tx);
    tokio::spawn(sender(
        shared.clone(),
        namespace.to_string(),
        name.to_string(),
        rx,
    ));
}

/// One provider's sender: deliveries one at a time, in order (a commit status `pending` is never
/// overtaken by its `success`), each rate-limited and retried.
async fn sender(
    shared: Arc<Shared>,
    namespace: String,
    name: String,
    mut queue: mpsc::Receiver<Delivery>,
) {
    let config = &shared.config;
    let mut limit = RateLimit::new(config.rate_burst, config.rate_per_second, Instant::now());
    while let Ok(Some(d)) = tokio::time::timeout(IDLE, queue.recv()).await {
        deliver(&shared, &namespace, &name, &d, &mut limit).await;
    }
}

async fn deliver(
    shared: &Shared,
    namespace: &str,
    name: &str,
    d: &Delivery,
    limit: &mut RateLimit,
) {
    let key = format!("{namespace}/{name}");
    let Some(provider) = shared
        .providers
        .get(&ObjectRef::new(name).within(namespace))
    else {
        return;
    };
    let client = match shared.client_for(&provider).await {
        Ok(client) => client,
        Err(e) => {
            shared.counters.failed.inc();
            tracing::warn!(provider = %key, error = %e, "cannot send a notification");
            return;
        }
    };
    let resolved = match status::resolve(&client, &provider, Some(&shared.config.policy)).await {
        Ok(p) => p,
        Err(e) => {
            shared.counters.failed.inc();
            // Once the Provider's status says why (with its own warning and event), each
            // event it cannot take is not one more warning.
            if status::says_not_ready(provider.as_ref(), &e) {
                tracing::debug!(provider = %key, error = %e, "cannot send a notification");
            } else {
                tracing::warn!(provider = %key, error = %e, "cannot send a notification");
            }
            return;
        }
    };
    let Some(out) = payload::request(
        &resolved,
        &d.event,
        d.summary.as_deref(),
        k8s_openapi::jiff::Timestamp::now(),
    ) else {
        return;
    };
    // The request's own URL passes the policy too (the resolved target did, in `resolve`).
    if let Err(why) = shared.config.policy.check(out.url.as_str()) {
        shared.counters.failed.inc();
        tracing::warn!(provider = %key, reason = %why, "notification not sent");
        return;
    }
    let http = match shared.http() {
        Ok(http) => http,
        Err(e) => {
            shared.counters.failed.inc();
            tracing::warn!(provider = %key, error = %e, "notification not sent");
            return;
        }
    };
    let backoff = shared.config.backoff;
    let mut attempt = 1;
    loop {
        tokio::time::sleep(limit.take(Instant::now())).await;
        let outcome = send(http, &out).await;
        match outcome {
            Sent::Accepted(status) => {
                shared.counters.sent.inc();
                tracing::debug!(provider = %key, source = %d.event.source, reason = %d.event.reason, status = status.as_u16(), attempt, "notification sent");
                return;
            }
            Sent::Refused(status) => {
                shared.counters.failed.inc();
                tracing::warn!(provider = %key, source = %d.event.source, reason = %d.event.reason, status = status.as_u16(), "the provider refused the notification; not retried");
                return;
            }
            Sent::Failed(why) => match backoff.after(attempt) {
                Some(wait) => {
                    tracing::info!(provider = %key, source = %d.event.source, reason = %d.event.reason, error = %why, attempt, retry_in_ms = wait.as_millis() as u64, "notification failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                None => {
                    shared.counters.failed.inc();
                    tracing::warn!(provider = %key, source = %d.event.source, reason = %d.event.reason, error = %why, attempts = attempt, "notification failed; given up");
                    return;
                }
            },
        }
    }
}

/// What one request came to.
enum Sent {
    /// 2xx.
    Accepted(http::StatusCode),
    /// A 4xx other than 408 and 429: sending it again cannot help.
    Refused(http::StatusCode),
    /// A connection error, a timeout, 408, 429 or 5xx: retried. The text holds no URL.
    Failed(String),
}

async fn send(http: &reqwest::Client, out: &Outbound) -> Sent {
    let mut req = http.post(out.url.clone()).body(out.body.clone());
    for (k, v) in &out.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status();
            if status.is_success() {
                Sent::Accepted(status)
            } else if status.is_client_error()
                && status != http::StatusCode::REQUEST_TIMEOUT
                && status != http::StatusCode::TOO_MANY_REQUESTS
            {
                Sent::Refused(status)
            } else {
                Sent::Failed(format!("HTTP {}", status.as_u16()))
            }
        }
        // The URL may carry a token (a Slack webhook): never in the error.
        Err(e) => Sent::Failed(error_chain(&e.without_url())),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Check every Provider and Alert when one changes, and every [`RECHECK_INTERVAL`].
async fn check_loop(shared: Arc<Shared>, alerts: Store<Alert>, changed: Arc<Notify>) {
    if alerts.wait_until_ready().await.is_err()
        || shared.providers.wait_until_ready().await.is_err()
    {
        return;
    }
    let mut writer = StatusWriter::new(shared.client.clone());
    if let Some(ns) = &shared.config.weft_namespace {
        writer = writer.sealed_in(ns);
    }
    loop {
        let providers = shared.providers.state();
        tracing::debug!(
            providers = providers.len(),
            "checking the Providers and Alerts"
        );
        for p in providers {
            let namespace = p.namespace().unwrap_or_default();
            if !shared.config.watches(&namespace) {
                continue;
            }
            // As whom its Secret is read: as the tenant for a tenant's root's Provider.
            let client = match shared.client_for(&p).await {
                Ok(client) => client,
                Err(why) => {
                    tracing::debug!(provider = %format!("{namespace}/{}", p.name_any()), %why, "cannot tell whom the Provider's Secret is read as; checked again later");
                    continue;
                }
            };
            // `None`: the API server's trouble, not the Provider's; checked again later.
            if let Some(condition) =
                status::judge_provider(&client, &p, Some(&shared.config.policy)).await
            {
                let (reason, message) = (condition.reason.clone(), condition.message.clone());
                if writer.write(p.as_ref(), condition).await {
                    tracing::warn!(provider = %format!("{namespace}/{}", p.name_any()), %reason, %message, "the Provider cannot send; notifications through it are not sent");
                }
            }
        }
        for a in alerts.state() {
            let namespace = a.namespace().unwrap_or_default();
            if !shared.config.watches(&namespace) {
                continue;
            }
            let provider = ObjectRef::new(&a.spec.provider_ref.name).within(&namespace);
            let condition = status::judge_alert(&a, shared.providers.get(&provider).is_some());
            let (reason, message) = (condition.reason.clone(), condition.message.clone());
            if writer.write(a.as_ref(), condition).await {
                tracing::warn!(alert = %format!("{namespace}/{}", a.name_any()), %reason, %message, "the Alert forwards nothing");
            }
        }
        tokio::select! {
            _ = changed.notified() => {
                // A burst of changes (our own status writes among them) is checked once.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ = tokio::time::sleep(RECHECK_INTERVAL) => {}
        }
    }
}
