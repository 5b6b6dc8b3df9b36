//! The daemon's stop signal and the grace period running work gets after it. The signal is
//! tokio-util's `CancellationToken` (cloneable, awaitable, never lost when a sender goes away);
//! what is Weft's own is the grace period and `abandoned`.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long running work may go on once the daemon is asked to stop, and the signal itself.
#[derive(Clone, Debug)]
pub struct Shutdown {
    stop: CancellationToken,
    grace: Duration,
}

impl Shutdown {
    pub fn new(stop: CancellationToken, grace: Duration) -> Shutdown {
        Shutdown { stop, grace }
    }

    /// Never asked to stop (tests, one-shot tools): nobody holds the token to cancel it.
    pub fn never() -> Shutdown {
        Shutdown {
            stop: CancellationToken::new(),
            grace: Duration::ZERO,
        }
    }

    /// Whether the daemon was asked to stop.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The stop signal.
    pub fn token(&self) -> &CancellationToken {
        &self.stop
    }

    /// Resolves when the daemon is asked to stop.
    pub async fn stopped(&self) {
        self.stop.cancelled().await
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
        let stop = CancellationToken::new();
        let s = Shutdown::new(stop.clone(), Duration::from_millis(30));
        let early = tokio::time::timeout(Duration::from_millis(30), s.abandoned()).await;
        assert!(early.is_err(), "not asked to stop yet");
        stop.cancel();
        assert!(s.is_stopping());
        let t = std::time::Instant::now();
        s.abandoned().await;
        assert!(t.elapsed() >= Duration::from_millis(30));
        let never = Shutdown::never();
        let r = tokio::time::timeout(Duration::from_millis(30), never.abandoned()).await;
        assert!(r.is_err());
    }
}
