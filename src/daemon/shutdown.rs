//! The daemon's stop signal and the grace period running work gets after it.

use std::time::Duration;

use tokio::sync::watch;

/// How long running work may go on once the daemon is asked to stop, and the signal itself.
#[derive(Clone, Debug)]
pub struct Shutdown {
    stop: watch::Receiver<bool>,
    grace: Duration,
}

impl Shutdown {
    pub fn new(stop: watch::Receiver<bool>, grace: Duration) -> Shutdown {
        Shutdown { stop, grace }
    }

    /// Never asked to stop (tests, one-shot tools).
    pub fn never() -> Shutdown {
        let (tx, stop) = watch::channel(false);
        // Dropping the sender: `stopped` then never resolves (see there).
        drop(tx);
        Shutdown {
            stop,
            grace: Duration::ZERO,
        }
    }

    /// Whether the daemon was asked to stop.
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// The stop signal.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.stop.clone()
    }

    /// Resolves when the daemon is asked to stop.
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                // The sender is gone: nobody can ask us to stop any more.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves the grace period after the daemon was asked to stop: running work is then
    /// abandoned (dropped between two API calls).
    pub async fn abandoned(&self) {
        self.stopped().await;
        tokio::time::sleep(self.grace).await;
    }

    /// The grace period.
    pub fn grace(&self) -> Duration {
        self.grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shutdown_abandons_after_the_grace_period() {
        let (tx, rx) = watch::channel(false);
        let s = Shutdown::new(rx, Duration::from_millis(30));
        let early = tokio::time::timeout(Duration::from_millis(30), s.abandoned()).await;
        assert!(early.is_err(), "not asked to stop yet");
        tx.send(true).unwrap();
        assert!(s.is_stopping());
        let t = std::time::Instant::now();
        s.abandoned().await;
        assert!(t.elapsed() >= Duration::from_millis(30));
        let never = Shutdown::never();
        let r = tokio::time::timeout(Duration::from_millis(30), never.abandoned()).await;
        assert!(r.is_err());
    }
}
