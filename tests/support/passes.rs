//! One pass of the engine over files held in memory, as the pass-level tests run it: no git, no
//! daemon, the real API server. One home for what seven test files wrote each for themselves.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::Client;
use weft::pass::{self, PassInput, PassResult, PassSettings, Progress};
use weft::source::Snapshot;

/// The files (path → text) as a snapshot without a revision.
pub fn snapshot<K: AsRef<str>>(files: &BTreeMap<K, String>) -> Snapshot {
    Snapshot {
        revision: None,
        files: files
            .iter()
            .map(|(k, v)| (k.as_ref().to_string(), v.as_bytes().to_vec()))
            .collect(),
    }
}

/// One pass over `files`.
pub async fn pass<K: AsRef<str>>(
    client: &Client,
    files: &BTreeMap<K, String>,
    opts: &PassSettings,
) -> PassResult {
    pass::run_pass(
        client,
        snapshot(files),
        opts,
        &PassInput::default(),
        &|_| {},
    )
    .await
}

/// One pass; also returns its changes and readiness events in order (`created
/// Deployment/ns/a`, `ready …`).
pub async fn pass_logged<K: AsRef<str>>(
    client: &Client,
    files: &BTreeMap<K, String>,
    opts: &PassSettings,
) -> (PassResult, Vec<String>) {
    logged(client, files, opts, false).await
}

/// [`pass_logged`], each change with its reason when it has one (`configured Deployment/ns/a
/// (…)`).
pub async fn pass_logged_with_reasons<K: AsRef<str>>(
    client: &Client,
    files: &BTreeMap<K, String>,
    opts: &PassSettings,
) -> (PassResult, Vec<String>) {
    logged(client, files, opts, true).await
}

async fn logged<K: AsRef<str>>(
    client: &Client,
    files: &BTreeMap<K, String>,
    opts: &PassSettings,
    reasons: bool,
) -> (PassResult, Vec<String>) {
    let events = Mutex::new(Vec::new());
    let r = pass::run_pass(client, snapshot(files), opts, &PassInput::default(), &|p| {
        let line = match p {
            Progress::Change(c) => {
                let reason = match (&c.reason, reasons) {
                    (Some(r), true) => format!(" ({r})"),
                    _ => String::new(),
                };
                format!("{} {}{reason}", c.action.done(), c.object)
            }
            Progress::Ready(r) => format!("ready {r}"),
            Progress::Phase { .. } | Progress::Waiting(_) => return,
        };
        events.lock().expect("events").push(line);
    })
    .await;
    (r, events.into_inner().expect("events"))
}
