//! Agent update checks asked for over HTTP.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// A handle to ask the update scheduler for a check of every WeaveCloud now; held by the HTTP
/// server (`POST /api/v1/sync?update=true`). Requests made while a check runs coalesce into one.
#[derive(Clone, Debug, Default)]
pub struct UpdateRequests {
    notify: Arc<Notify>,
    pending: Arc<AtomicBool>,
}

impl UpdateRequests {
    /// Ask for a check now.
    pub fn request(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Whether a check was asked for since the last call.
    pub fn take(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
    }

    /// Resolves at the next request.
    pub async fn requested(&self) {
        self.notify.notified().await
    }
}
