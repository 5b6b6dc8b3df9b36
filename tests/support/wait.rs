//! Waiting for something the daemon does, with its logs when it does not happen.

use std::time::{Duration, Instant};

/// Where the logs shown on a timeout come from: a [`super::daemon::Daemon`], or any closure.
pub trait Logs {
    fn logs(&self) -> String;
}

impl Logs for super::daemon::Daemon {
    fn logs(&self) -> String {
        super::daemon::Daemon::logs(self)
    }
}

impl<F: Fn() -> String> Logs for F {
    fn logs(&self) -> String {
        self()
    }
}

/// Poll `probe` every 250 ms until it yields a value (printed as `<what>: after …`); panic after
/// `within` with the logs.
pub async fn wait_for<T>(
    what: &str,
    within: Duration,
    logs: &impl Logs,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    poll(what, within, Duration::from_millis(250), logs, &mut probe)
        .await
        .0
}

/// [`wait_for`] every 100 ms, also returning how long it took (for tests that measure it).
pub async fn wait_timed<T>(
    what: &str,
    within: Duration,
    logs: &impl Logs,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> (T, Duration) {
    poll(what, within, Duration::from_millis(100), logs, &mut probe).await
}

async fn poll<T>(
    what: &str,
    within: Duration,
    every: Duration,
    logs: &impl Logs,
    probe: &mut impl AsyncFnMut() -> Option<T>,
) -> (T, Duration) {
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            let took = start.elapsed();
            eprintln!("{what}: after {took:.1?}");
            return (v, took);
        }
        if start.elapsed() > within {
            panic!(
                "{what} did not happen within {within:?}\nlogs:\n{}",
                logs.logs()
            );
        }
        tokio::time::sleep(every).await;
    }
}
