//! Live pages: watches on what the pages show (the inventories and Leases in Weft's namespace,
//! the Roots and Weft's other custom resources, Weft's events) move a change counter; each open
//! page holds a server-sent event stream that re-renders its body when the counter moves (or
//! every [`super::UiConfig::refresh`], for object health, which has no watch) and sends it when
//! it differs from what it sent last. The page's script puts it in place; without JavaScript the
//! page is as it was served.
//!
//! Whoever reaches the port may open streams, and a tenant may change a watched resource as
//! often as they like (issue 48 items 5 and 6: 256 streams held every slot of the port at 17
//! CPU-s a minute; 32 streams and one annotation every 0.45 s made 13,159 API requests in 30 s).
//! So: at most [`MAX_LIVE_STREAMS`] streams at once (past it `503`, the page stays as served);
//! a change moves the counter only when it changes what a page shows (a custom resource's
//! generation, status or deletion, not its annotations); and one body per page and change is
//! rendered for every stream of that page, one render at a time.

use std::collections::HashMap;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as KubeEvent};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::Api;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{pages, Ui, UiError, View};
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::keys::{REQUESTED_AT_ANNOTATION, SUSPEND_MESSAGE_ANNOTATION};
use crate::api::root::Root;
use crate::api::WeaveCloud;

/// Changes that arrive together are rendered once.
const SETTLE: Duration = Duration::from_millis(300);

/// Live streams open at once, per process: each holds a connection of the status port, whose
/// other connections (probes, metrics) must still find a slot.
pub const MAX_LIVE_STREAMS: usize = 16;

/// The live streams of a process: their count, and the last body rendered per page.
pub(crate) struct LiveStreams {
    open: Arc<Semaphore>,
    /// One render at a time; a stream that waited for it finds the body another rendered.
    rendering: tokio::sync::Mutex<()>,
    /// Per page path: the change counter and time it was rendered at, and the body.
    bodies: Mutex<HashMap<String, (u64, Instant, String)>>,
}

impl Default for LiveStreams {
    fn default() -> Self {
        LiveStreams {
            open: Arc::new(Semaphore::new(MAX_LIVE_STREAMS)),
            rendering: tokio::sync::Mutex::new(()),
            bodies: Mutex::default(),
        }
    }
}

/// The body of `view` (page `path`) as of change `counter`: the one another stream rendered for
/// this change within `refresh` (object health has no watch), else rendered now.
async fn shared_body(ui: &Ui, path: &str, view: &View, counter: u64) -> String {
    let live = &ui.inner.live;
    let fresh = |live: &LiveStreams| {
        let bodies = live.bodies.lock().unwrap_or_else(|p| p.into_inner());
        bodies
            .get(path)
            .filter(|(c, at, _)| *c == counter && at.elapsed() < ui.config().refresh)
            .map(|(_, _, html)| html.clone())
    };
    if let Some(html) = fresh(live) {
        return html;
    }
    let _one_at_a_time = live.rendering.lock().await;
    if let Some(html) = fresh(live) {
        return html;
    }
    let html = match pages::main(ui, view).await {
        Ok(m) => m,
        Err(e) => pages::error_body(&e),
    }
    .into_string();
    let mut bodies = live.bodies.lock().unwrap_or_else(|p| p.into_inner());
    // Pages are few; paths with made-up queries are not kept past the stream limit's worth.
    if bodies.len() >= 4 * MAX_LIVE_STREAMS {
        bodies.clear();
    }
    bodies.insert(path.to_string(), (counter, Instant::now(), html.clone()));
    html
}

/// What of a watched object a page shows: a custom resource's generation, status and deletion,
/// and of its annotations only `shown` (the others, and its labels, which its owner may change
/// at will, do not matter).
fn shown_state<K: serde::Serialize>(object: &K, shown: &[&str]) -> Option<u64> {
    let v = serde_json::to_value(object).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for key in shown {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .map(ToString::to_string)
            .hash(&mut h);
    }
    v.pointer("/metadata/generation")
        .map(ToString::to_string)
        .hash(&mut h);
    v.pointer("/metadata/deletionTimestamp")
        .map(ToString::to_string)
        .hash(&mut h);
    v.get("status").map(ToString::to_string).hash(&mut h);
    Some(h.finish())
}

/// Start the watches that move the change counter; they run as long as the process.
pub fn watch_cluster(ui: Ui) {
    let client = ui.client().clone();
    let ns = ui.config().weft_namespace.clone();
    spawn_watch(
        &ui,
        "configmaps",
        Api::<ConfigMap>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    );
    spawn_watch(
        &ui,
        "leases",
        Api::<Lease>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    );
    let all = watcher::Config::default;
    spawn_watch(&ui, "roots", Api::<Root>::all(client.clone()), all());
    spawn_watch(
        &ui,
        "weaveclouds",
        Api::<WeaveCloud>::all(client.clone()),
        all(),
    );
    spawn_watch(
        &ui,
        "armadacharts",
        Api::<ArmadaChart>::all(client.clone()),
        all(),
    );
    spawn_watch(
        &ui,
        "armadachartgroups",
        Api::<ArmadaChartGroup>::all(client.clone()),
        all(),
    );
    spawn_watch(
        &ui,
        "armadamanifests",
        Api::<ArmadaManifest>::all(client.clone()),
        all(),
    );
    spawn_watch(
        &ui,
        "events",
        Api::<KubeEvent>::all(client),
        all().fields("reportingComponent=weft"),
    );
}

fn spawn_watch<K>(ui: &Ui, what: &'static str, api: Api<K>, config: watcher::Config)
where
    K: kube::Resource
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let ui = ui.clone();
    // Custom resources are anyone's to annotate: only a change of what a page shows counts.
    let only_shown = WATCHED_FOR_WHAT_IS_SHOWN.contains(&what);
    let shown: &'static [&'static str] = match what {
        "roots" => &ROOT_ANNOTATIONS_SHOWN,
        _ => &[],
    };
    tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        let mut seen = ShownStates::default();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => seen.init.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    if only_shown {
                        seen.init.insert(key_of(&o), shown_state(&o, shown));
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    // A re-list: what changed while the watch was down is not known.
                    seen.now = std::mem::take(&mut seen.init);
                    ui.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
                }
                Ok(watcher::Event::Apply(o)) => {
                    let moved = !only_shown || {
                        let state = shown_state(&o, shown);
                        seen.now.insert(key_of(&o), state) != Some(state)
                    };
                    if moved {
                        ui.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.now.remove(&key_of(&o));
                    ui.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
                }
                // Not allowed to watch it (RBAC), or its CRD is not installed: the pages say
                // what they cannot read; the watch retries with backoff.
                Err(e) => tracing::debug!(what, error = %e, "watching for the live pages"),
            }
        }
    });
}

/// The watches whose objects' annotations and labels their owners may change at will.
const WATCHED_FOR_WHAT_IS_SHOWN: [&str; 5] = [
    "roots",
    "weaveclouds",
    "armadacharts",
    "armadachartgroups",
    "armadamanifests",
];

/// The annotations of a Root the roots page shows: why it is suspended, the last sync asked for.
const ROOT_ANNOTATIONS_SHOWN: [&str; 2] = [SUSPEND_MESSAGE_ANNOTATION, REQUESTED_AT_ANNOTATION];

/// What a watch last saw of each object ([`shown_state`]), and what a re-list is gathering.
#[derive(Default)]
struct ShownStates {
    now: HashMap<String, Option<u64>>,
    init: HashMap<String, Option<u64>>,
}

fn key_of<K: kube::Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or_default(),
        o.meta().name.as_deref().unwrap_or_default()
    )
}

#[derive(Deserialize)]
pub struct LiveQuery {
    /// The page's path and query (`/roots/weft`).
    path: String,
    /// The version of the body the page holds ([`pages::version`]).
    #[serde(default)]
    version: String,
}

/// `GET /live?path=…`: the stream of the page's re-rendered bodies.
pub async fn stream(State(ui): State<Ui>, Query(q): Query<LiveQuery>) -> Response {
    let Some(view) = View::parse(&q.path) else {
        return UiError::NotFound("no such page".into()).into_response();
    };
    let Ok(permit) = ui.inner.live.open.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_LIVE_STREAMS} live pages are open already: this page does not update itself; reload it later"),
        )
            .into_response();
    };
    let open = MAX_LIVE_STREAMS - ui.inner.live.open.available_permits();
    tracing::debug!(path = %q.path, open, "live stream opened");
    let stream = OpenStream {
        _permit: permit,
        path: q.path,
        opened: Instant::now(),
    };
    Sse::new(bodies(ui, view, q.version, stream))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// An open stream's place among [`MAX_LIVE_STREAMS`]: freed (and said) when its page closes it.
struct OpenStream {
    _permit: OwnedSemaphorePermit,
    path: String,
    opened: Instant,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let secs = self.opened.elapsed().as_secs();
        tracing::debug!(path = %self.path, open_for_s = secs, "live stream closed");
    }
}

fn bodies(
    ui: Ui,
    view: View,
    held: String,
    stream: OpenStream,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let changes = ui.inner.changes.subscribe();
    let stop = ui.inner.stop.clone();
    // The open stream (its path and permit) lives as long as the stream: a closed page frees
    // its place.
    let page = (view, stream);
    futures::stream::unfold(
        (ui, page, changes, None::<String>, held, stop),
        |(ui, page, mut changes, mut last, held, mut stop)| async move {
            loop {
                if last.is_some() {
                    let refresh = ui.config().refresh;
                    tokio::select! {
                        changed = changes.changed() => changed.ok()?,
                        _ = tokio::time::sleep(refresh) => {}
                        // The server is stopping: the stream ends, so its answer is complete.
                        () = stopped(&mut stop) => return None,
                    }
                    tokio::time::sleep(SETTLE).await;
                }
                let counter = *changes.borrow_and_update();
                let html = shared_body(&ui, &page.1.path, &page.0, counter).await;
                // The page already holds this body: nothing to send the first time.
                let first_and_held = last.is_none() && pages::version_of(&html) == held;
                if last.as_deref() != Some(html.as_str()) && !first_and_held {
                    let event = Event::default().event("main").data(html.clone());
                    return Some((Ok(event), (ui, page, changes, Some(html), held, stop)));
                }
                last = Some(html);
            }
        },
    )
}

/// Resolves once `stop` is true; never when no one can say so (`weft ui` stops with its process).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weavecloud(annotation: &str, ready: &str) -> WeaveCloud {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "metadata": {"name": "wc", "namespace": "t", "generation": 1,
                         "annotations": {"note": annotation}},
            "spec": {"general": {
                "environment": "generic",
                "tokenSecretRef": {"name": "weave-cloud", "key": "token"},
            }},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "NotReconciled", "message": ""}]},
        }))
        .expect("a WeaveCloud")
    }

    /// Issue 48 item 6: a tenant annotating their own WeaveCloud every 0.45 s re-rendered every
    /// open page each time.
    #[test]
    fn an_annotation_is_not_a_change_a_page_shows() {
        let before = shown_state(&weavecloud("1", "False"), &[]);
        assert_eq!(before, shown_state(&weavecloud("2", "False"), &[]));
        assert_ne!(before, shown_state(&weavecloud("1", "True"), &[]));
        // An annotation the page shows is a change.
        assert_ne!(
            shown_state(&weavecloud("1", "False"), &["note"]),
            shown_state(&weavecloud("2", "False"), &["note"])
        );
    }

    /// Issue 48 item 5: 256 live streams held every slot of the status port.
    #[tokio::test]
    async fn live_streams_are_capped_and_a_closed_one_frees_its_place() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let ui = Ui::new(
            kube::Client::try_from(config).expect("client"),
            super::super::UiConfig {
                weft_namespace: "weft".into(),
                drift: None,
                refresh: Duration::from_secs(5),
                read_only: true,
            },
        );
        let open = |ui: Ui| {
            stream(
                State(ui),
                Query(LiveQuery {
                    path: "/".into(),
                    version: String::new(),
                }),
            )
        };
        let mut streams = Vec::new();
        for _ in 0..MAX_LIVE_STREAMS {
            let r = open(ui.clone()).await;
            assert_eq!(r.status(), StatusCode::OK);
            streams.push(r);
        }
        let refused = open(ui.clone()).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        streams.pop();
        assert_eq!(open(ui.clone()).await.status(), StatusCode::OK);
    }
}
