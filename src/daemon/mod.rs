//! The reconcile loops of the daemon (`weft run`): the sync root, the custom resource
//! controllers, the coalescing trigger queue and leader election.

pub mod armada;
pub mod leader;
pub mod metrics;
pub mod root;
pub mod run;
pub mod status;
pub mod trigger;
pub mod updater;
pub mod weavecloud;

use std::future::Future;
use std::sync::{Arc, RwLock};

use kube::Client;
use tokio::sync::watch;

use crate::apply::changeset::ChangeSet;
use crate::daemon::metrics::Metrics;
use crate::daemon::updater::{AgentBundles, UpdateOptions, Updater};
use crate::pass::{Observer, PassOptions, SyncError};
use crate::render::DesiredSet;
use status::DaemonStatus;

/// Run `pass::reconcile` (the apply engine: apply, prune, wait) on a blocking thread that drives
/// the current runtime, so that the caller's future stays `Send` (the engine's own future cannot
/// be proven `Send` by the compiler: higher-ranked lifetimes in its stream combinators). `None`
/// when `cancel` resolved first: the work is dropped between two API calls. `Err` if it panicked.
pub async fn reconcile_detached(
    client: Client,
    set: Arc<DesiredSet>,
    opts: PassOptions,
    observer: Arc<Observer<'static>>,
    cancel: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<(ChangeSet, Option<SyncError>)>, String> {
    let handle = tokio::runtime::Handle::current();
    let joined = tokio::task::spawn_blocking(move || {
        handle.block_on(async move {
            tokio::select! {
                r = crate::pass::reconcile(&client, &set, &opts, &*observer) => Some(r),
                _ = cancel => None,
            }
        })
    })
    .await;
    joined.map_err(|e| format!("the apply task failed: {e}"))
}

/// Run the custom resource controllers (WeaveCloud, with the agent update scheduler) until
/// `stop` turns true.
pub async fn start_controllers(
    client: Client,
    pass_options: PassOptions,
    status: Arc<RwLock<DaemonStatus>>,
    metrics: Arc<Metrics>,
    update_requests: crate::daemon::updater::UpdateRequests,
    stop: watch::Receiver<bool>,
) {
    let bundles = AgentBundles::new(client.clone(), pass_options.weft_namespace.clone());
    let updater = Arc::new(
        Updater::new(
            client.clone(),
            bundles.clone(),
            UpdateOptions {
                weft_namespace: pass_options.weft_namespace.clone(),
                health_timeout: pass_options.timeout,
                ..UpdateOptions::default()
            },
        )
        .with_daemon(metrics.clone(), status.clone())
        .with_requests(update_requests),
    );
    let ctx = Arc::new(weavecloud::Context {
        client: client.clone(),
        pass_options,
        bundles,
        rollbacks: updater.rollbacks().clone(),
        recorder: weavecloud::recorder(client),
        status,
        metrics,
        stop: stop.clone(),
    });
    let updates = {
        let updater = updater.clone();
        let stop = stop.clone();
        tokio::spawn(async move { updater.run(stop).await })
    };
    weavecloud::run(ctx, stop).await;
    let _ = updates.await;
}
