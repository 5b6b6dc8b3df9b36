//! Reconcile requests through the API server, as `flux reconcile` asks a controller: `weft
//! trigger` sets the annotation [`REQUESTED_AT_ANNOTATION`] on the root's record ConfigMap
//! (`weft-root-<root>` in Weft's namespace) to a fresh RFC 3339 time; the leader, which follows
//! that record, queues a pass for each new value and, when the pass has finished, writes the
//! answer into the record under [`answer_key`] (the request's value, the pass number and its
//! report). `weft trigger --wait` waits until the answer names its own request. So a user needs
//! only a kubeconfig allowed to patch that ConfigMap: no port-forward, no sync token. The HTTP
//! sync endpoint stays, for webhooks and scripts inside the cluster.
//!
//! Every shard holder serves the request (each runs its own pass); shard `i` answers under its
//! own key, and `weft trigger --wait` waits for shard 0's, as `POST /api/v1/sync?wait=true` waits
//! for the shard that answered.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::Client;
use serde::{Deserialize, Serialize};

pub use super::record::{answer_key, REQUEST_MANAGER};
use super::record::{answer_manager, record_name};
use super::state::DaemonState;
use super::status::{PassReport, PassResultKind, MAX_CHANGES};
use super::trigger::TriggerReason;
use crate::api::keys::{FORCE_PRUNE_AT, REQUESTED_AT_ANNOTATION};

/// The longest error kept in an answer.
const MAX_ERROR: usize = 2000;

/// What the leader answers to a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestAnswer {
    /// The value of [`REQUESTED_AT_ANNOTATION`] this answers.
    pub requested_at: String,
    /// The pass that served it (its `changes` cut to the first 100).
    pub report: PassReport,
    /// Changes left out of `report.changes`.
    #[serde(default)]
    pub changes_omitted: usize,
}

impl RequestAnswer {
    fn new(requested_at: String, mut report: PassReport) -> RequestAnswer {
        // The daemon keeps a bounded report already (`PassReport::bounded`): its own count of
        // left-out changes is part of the answer's.
        let cut = report.changes.len().saturating_sub(MAX_CHANGES);
        report.changes.truncate(MAX_CHANGES);
        report.changes_omitted += cut as u64;
        let changes_omitted = usize::try_from(report.changes_omitted).unwrap_or(usize::MAX);
        if let Some(e) = report.error.as_mut().map(|e| &mut e.message) {
            if e.len() > MAX_ERROR {
                let mut end = MAX_ERROR;
                while !e.is_char_boundary(end) {
                    end -= 1;
                }
                e.truncate(end);
                e.push('…');
            }
        }
        RequestAnswer {
            requested_at,
            report,
            changes_omitted,
        }
    }

    /// The answer of shard `shard` in a record, if any (an unreadable one counts as none).
    pub fn from_configmap(cm: &ConfigMap, shard: u32) -> Option<RequestAnswer> {
        let text = cm.data.as_ref()?.get(&answer_key(shard))?;
        serde_json::from_str(text).ok()
    }

    /// `succeeded`, `failed`, `abandoned` or `suspended`.
    pub fn result(&self) -> &'static str {
        match self.report.result {
            PassResultKind::Succeeded => "succeeded",
            PassResultKind::Failed => "failed",
            PassResultKind::Abandoned => "abandoned",
            PassResultKind::Suspended => "suspended",
        }
    }
}

/// The request a record carries: its [`REQUESTED_AT_ANNOTATION`] value and whether it may force a prune.
pub fn requested(meta: &ObjectMeta) -> Option<(String, bool)> {
    let a = meta.annotations.as_ref()?;
    let at = a
        .get(REQUESTED_AT_ANNOTATION)
        .filter(|v| !v.trim().is_empty())?;
    let force = a.get(FORCE_PRUNE_AT) == Some(at);
    Some((at.clone(), force))
}

/// Why a request could not be made or answered.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("the root `{root}` has no record (ConfigMap {namespace}/{record}): no daemon has run it there yet; check --root-name and Weft's namespace (`weft get root` lists the roots)")]
    NoRecord {
        root: String,
        namespace: String,
        record: String,
    },
    #[error("cannot annotate ConfigMap {namespace}/{record}: {}", crate::api::kube_error::Text(.source))]
    Api {
        namespace: String,
        record: String,
        #[source]
        source: kube::Error,
    },
    #[error("no daemon answered the request {requested_at} within {}s (is `weft run` running and leading? `kubectl -n {namespace} get lease` shows the holder)", .waited.as_secs())]
    Timeout {
        requested_at: String,
        namespace: String,
        waited: std::time::Duration,
    },
}

/// Ask for a pass of root `root_name`: set [`REQUESTED_AT_ANNOTATION`] (and, with `force_prune`,
/// [`FORCE_PRUNE_AT`]) on its record to a fresh time, which is returned. The record must exist:
/// a request for a root nobody runs would never be answered.
pub async fn request(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
    force_prune: bool,
) -> Result<String, RequestError> {
    let record = record_name(root_name);
    let at = format!("{:.9}", k8s_openapi::jiff::Timestamp::now());
    let mut annotations = serde_json::Map::new();
    annotations.insert(REQUESTED_AT_ANNOTATION.into(), at.clone().into());
    annotations.insert(
        FORCE_PRUNE_AT.into(),
        if force_prune {
            at.clone().into()
        } else {
            serde_json::Value::Null
        },
    );
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let pp = PatchParams {
        field_manager: Some(REQUEST_MANAGER.to_string()),
        ..PatchParams::default()
    };
    match api.patch(&record, &pp, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(at),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(RequestError::NoRecord {
            root: root_name.to_string(),
            namespace: weft_namespace.to_string(),
            record,
        }),
        Err(source) => Err(RequestError::Api {
            namespace: weft_namespace.to_string(),
            record,
            source,
        }),
    }
}

/// Wait until shard 0 answers the request `requested_at` of root `root_name` (a watch of the
/// record), at most `timeout`.
pub async fn wait_answer(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
    requested_at: &str,
    timeout: std::time::Duration,
) -> Result<RequestAnswer, RequestError> {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", record_name(root_name)));
    let answered = async {
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(cm)) | Ok(Event::InitApply(cm)) => {
                    if let Some(a) = RequestAnswer::from_configmap(&cm, 0)
                        .filter(|a| a.requested_at.as_str() == requested_at)
                    {
                        return Some(a);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "watching the root record; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
        None
    };
    match tokio::time::timeout(timeout, answered).await {
        Ok(Some(a)) => Ok(a),
        _ => Err(RequestError::Timeout {
            requested_at: requested_at.to_string(),
            namespace: weft_namespace.to_string(),
            waited: timeout,
        }),
    }
}

/// Write shard `shard`'s answer into the record of (base) root `root_name`.
async fn write_answer(
    client: &Client,
    weft_namespace: &str,
    root_name: &str,
    shard: u32,
    answer: &RequestAnswer,
) -> Result<(), kube::Error> {
    let text = serde_json::to_string(answer).map_err(kube::Error::SerdeError)?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(root_name)),
            namespace: Some(weft_namespace.to_string()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(answer_key(shard), text)])),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), weft_namespace);
    let pp = PatchParams::apply(&answer_manager(shard)).force();
    api.patch(&record_name(root_name), &pp, &Patch::Apply(&cm))
        .await?;
    Ok(())
}

/// Follow the record of (base) root `root_name` while this replica leads shard `shard`: queue a
/// pass for each new request and answer it when that pass has finished. A request made while no
/// replica led (one the record has not answered yet) is served at once. Runs until aborted.
pub async fn follow(state: DaemonState, weft_namespace: String, root_name: String, shard: u32) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::runtime::WatchStreamExt;
    let api: Api<ConfigMap> = Api::namespaced(state.client().clone(), &weft_namespace);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", record_name(&root_name)));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    // The request last queued by this term (answered, or being answered).
    let mut queued: Option<String> = None;
    while let Some(event) = events.next().await {
        let cm = match event {
            Ok(Event::Apply(cm)) | Ok(Event::InitApply(cm)) => cm,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "watching the root record for requests; retrying");
                continue;
            }
        };
        let Some((at, force_prune)) = requested(&cm.metadata) else {
            continue;
        };
        let answered = RequestAnswer::from_configmap(&cm, shard).map(|a| a.requested_at);
        if queued.as_ref() == Some(&at) || answered.as_ref() == Some(&at) {
            continue;
        }
        queued = Some(at.clone());
        let reason = if force_prune {
            TriggerReason::ApiForcePrune
        } else {
            TriggerReason::Requested
        };
        let ticket = match state.queue().trigger(reason) {
            Ok(t) => t,
            Err(_) => return,
        };
        tracing::info!(root = %root_name, requested_at = %at, pass = ticket.0, "a pass was requested through the root record");
        let (state, ns, root) = (state.clone(), weft_namespace.clone(), root_name.clone());
        tokio::spawn(async move {
            let Ok((_, report)) = state.queue().wait(ticket).await else {
                return;
            };
            let answer = RequestAnswer::new(at, (*report).clone());
            if let Err(e) = write_answer(state.client(), &ns, &root, shard, &answer).await {
                tracing::warn!(error = %crate::api::kube_error::Text(&e), root = %root, "cannot write the answer to a requested pass");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::status::{ChangeSummary, ObjectChange};

    fn report(changes: usize) -> PassReport {
        PassReport {
            pass: 3,
            reasons: vec!["requested".into()],
            started_at: "2026-12-03T00:00:00Z".into(),
            duration_seconds: 0.1,
            revision: Some("abc".into()),
            result: PassResultKind::Suspended,
            // As read back from the ConfigMap: the line alone.
            error: Some(crate::daemon::status::PassFailure::new(
                crate::daemon::status::UNKNOWN_STAGE,
                "x".repeat(5000),
            )),
            head_unchanged: false,
            summary: ChangeSummary::default(),
            changes: (0..changes)
                .map(|i| ObjectChange {
                    object: format!("ConfigMap/a/c{i}"),
                    action: "created".into(),
                    reason: None,
                })
                .collect(),
            changes_omitted: 0,
        }
    }

    #[test]
    fn an_answer_is_bounded_and_reads_back_from_its_shards_key() {
        let a = RequestAnswer::new("t1".into(), report(250));
        assert_eq!(a.report.changes.len(), MAX_CHANGES);
        assert_eq!(a.changes_omitted, 150);
        // As the daemon keeps it (already cut): the same answer.
        let kept = RequestAnswer::new("t1".into(), report(250).bounded());
        assert_eq!(kept.report.changes.len(), MAX_CHANGES);
        assert_eq!(kept.changes_omitted, 150);
        assert!(a
            .report
            .error
            .as_ref()
            .is_some_and(|e| e.message.len() <= MAX_ERROR + 3));
        assert_eq!(a.result(), "suspended");
        let cm = ConfigMap {
            data: Some(BTreeMap::from([(
                answer_key(2),
                serde_json::to_string(&a).unwrap(),
            )])),
            ..Default::default()
        };
        assert_eq!(RequestAnswer::from_configmap(&cm, 2), Some(a));
        assert_eq!(RequestAnswer::from_configmap(&cm, 0), None);
        assert_eq!(answer_key(0), "lastHandledRequest");
    }

    #[test]
    fn force_prune_counts_only_for_the_request_it_names() {
        let meta = |pairs: &[(&str, &str)]| ObjectMeta {
            annotations: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        };
        assert_eq!(requested(&ObjectMeta::default()), None);
        assert_eq!(
            requested(&meta(&[(REQUESTED_AT_ANNOTATION, "t2")])),
            Some(("t2".into(), false))
        );
        assert_eq!(
            requested(&meta(&[
                (REQUESTED_AT_ANNOTATION, "t2"),
                (FORCE_PRUNE_AT, "t2")
            ])),
            Some(("t2".into(), true))
        );
        assert_eq!(
            requested(&meta(&[
                (REQUESTED_AT_ANNOTATION, "t3"),
                (FORCE_PRUNE_AT, "t2")
            ])),
            Some(("t3".into(), false))
        );
    }
}
