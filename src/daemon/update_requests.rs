//! Agent update checks asked for over HTTP, as a reconcile trigger of the WeaveCloud controller.

use tokio::sync::watch;

/// How many agent update checks were asked for (`POST /api/v1/sync?update=true`), held by the
/// HTTP server and the WeaveCloud controller. Each request reconciles every WeaveCloud
/// (`reconcile_all_on`), and a WeaveCloud's reconcile checks for an update when the count grew
/// since its last check; requests made while a check runs coalesce into one more check.
#[derive(Clone, Debug)]
pub struct UpdateRequests(watch::Sender<u64>);

impl Default for UpdateRequests {
    fn default() -> Self {
        UpdateRequests(watch::Sender::new(0))
    }
}

impl UpdateRequests {
    /// Ask for a check of every WeaveCloud now.
    pub fn request(&self) {
        self.0.send_modify(|n| *n += 1);
    }

    /// How many checks were asked for so far.
    pub fn count(&self) -> u64 {
        *self.0.borrow()
    }

    /// A stream that yields at each request (for the controller's `reconcile_all_on`).
    pub fn triggers(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let rx = self.0.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            // `changed` marks the count seen: requests between two polls yield once.
            rx.changed().await.ok()?;
            Some(((), rx))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::time::Duration;

    #[tokio::test]
    async fn requests_count_up_and_coalesce_into_one_trigger() {
        let requests = UpdateRequests::default();
        let mut triggers = Box::pin(requests.triggers());
        assert_eq!(requests.count(), 0);
        // The HTTP server holds a clone of the state's handle.
        let server = requests.clone();
        server.request();
        server.request();
        assert_eq!(requests.count(), 2);
        let within = |ms| Duration::from_millis(ms);
        let first = tokio::time::timeout(within(1000), triggers.next()).await;
        assert_eq!(first, Ok(Some(())), "a trigger");
        let second = tokio::time::timeout(within(50), triggers.next()).await;
        assert!(second.is_err(), "two requests, one reconcile of all");
        server.request();
        let third = tokio::time::timeout(within(1000), triggers.next()).await;
        assert_eq!(third, Ok(Some(())), "a later request triggers again");
    }
}
