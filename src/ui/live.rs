//! Live pages: watches on what the pages show (the root records, inventories and Leases in
//! Weft's namespace, Weft's custom resources, Weft's events) move a change counter; each open
//! page holds a server-sent event stream that re-renders its body when the counter moves (or
//! every [`super::UiConfig::refresh`], for object health, which has no watch) and sends it when
//! it differs from what it sent last. The page's script puts it in place; without JavaScript the
//! page is as it was served.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
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

use super::{pages, Ui, UiError, View};
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::WeaveCloud;

/// Changes that arrive together are rendered once.
const SETTLE: Duration = Duration::from_millis(300);

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
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let ui = ui.clone();
    tokio::spawn(async move {
        // Only the objects' metadata moves the counter: their content is read by the pages.
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => {
                    ui.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
                }
                // Not allowed to watch it (RBAC), or its CRD is not installed: the pages say
                // what they cannot read; the watch retries with backoff.
                Err(e) => tracing::debug!(what, error = %e, "watching for the live pages"),
            }
        }
    });
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
    Sse::new(bodies(ui, view, q.version))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn bodies(ui: Ui, view: View, held: String) -> impl Stream<Item = Result<Event, Infallible>> {
    let changes = ui.inner.changes.subscribe();
    let stop = ui.inner.stop.clone();
    futures::stream::unfold(
        (ui, view, changes, None::<String>, held, stop),
        |(ui, view, mut changes, mut last, held, mut stop)| async move {
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
                    changes.borrow_and_update();
                }
                let body = match pages::main(&ui, &view).await {
                    Ok(m) => m,
                    Err(e) => pages::error_body(&e),
                };
                // The page already holds this body: nothing to send the first time.
                let first_and_held = last.is_none() && pages::version(&body) == held;
                let html = body.into_string();
                if last.as_deref() != Some(html.as_str()) && !first_and_held {
                    let event = Event::default().event("main").data(html.clone());
                    return Some((Ok(event), (ui, view, changes, Some(html), held, stop)));
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
