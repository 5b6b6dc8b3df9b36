//! The root record of a Weft from before Roots: the ConfigMap `weft-root-<name>` in Weft's
//! namespace, where the flag loop kept a root's suspension, its `weft trigger` request, its last
//! passes and the repository it synced. Nothing writes it any more; it is read only to carry a
//! cluster over: the flag root's Root created from it (`flag::adopt`), and a daemon of another
//! repository than the one it names refused before it leads (`leader`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use serde::Deserialize;

use crate::api::keys::REQUESTED_AT_ANNOTATION;
use crate::api::suspend::suspends;

/// The name of the root record of root `root_name`.
pub fn record_name(root_name: &str) -> String {
    format!("weft-root-{root_name}")
}

/// One pass, as the record kept it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedPass {
    #[serde(default)]
    pub reasons: Vec<String>,
    pub started_at: String,
    pub duration_ms: u64,
    /// `Succeeded` or `Failed`.
    pub result: String,
    #[serde(default)]
    pub revision: Option<String>,
}

/// The answer of the loop to a `weft trigger` request: which request it handled.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    requested_at: String,
}

/// What a root record holds that a Root carries over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub suspended: bool,
    /// Whether the last pass applied `revision` (`ready: True`).
    pub ready: bool,
    /// The revision of the last pass, applied or tried.
    pub revision: Option<String>,
    /// The last passes, newest first (a history that does not parse, written by hand, is none).
    pub passes: Vec<RecordedPass>,
    /// The `weft trigger` request on the record (`weft.io/requested-at`), answered or not.
    pub requested_at: Option<String>,
    /// The request the loop's answer says was handled.
    pub handled: Option<String>,
    /// The repository `weft sync` or the daemon recorded.
    pub repository: Option<String>,
}

impl Record {
    /// What the ConfigMap `cm` (a root record) holds.
    pub fn of(cm: &ConfigMap) -> Record {
        let empty = BTreeMap::new();
        let data = cm.data.as_ref().unwrap_or(&empty);
        let text = |key: &str| data.get(key).filter(|v| !v.is_empty()).cloned();
        Record {
            suspended: suspends(data.get("suspended").map(String::as_str)),
            ready: data.get("ready").is_some_and(|r| r == "True"),
            revision: text("revision"),
            passes: data
                .get("passes")
                .and_then(|p| serde_json::from_str(p).ok())
                .unwrap_or_default(),
            requested_at: cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REQUESTED_AT_ANNOTATION))
                .filter(|v| !v.trim().is_empty())
                .cloned(),
            handled: data
                .get("lastHandledRequest")
                .and_then(|a| serde_json::from_str::<Answer>(a).ok())
                .map(|a| a.requested_at),
            repository: text("repository"),
        }
    }
}

/// The root record of `root` in `namespace`, if there is one.
pub async fn read(
    client: &Client,
    namespace: &str,
    root: &str,
) -> Result<Option<ConfigMap>, kube::Error> {
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    records.get_opt(&record_name(root)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    #[test]
    fn a_record_says_what_the_loop_kept() {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([(
                    REQUESTED_AT_ANNOTATION.to_string(),
                    "2026-12-05T01:00:00Z".to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("suspended".to_string(), "true".to_string()),
                ("ready".to_string(), "True".to_string()),
                ("revision".to_string(), "abc".to_string()),
                ("repository".to_string(), "https://git.example/config".to_string()),
                (
                    "lastHandledRequest".to_string(),
                    r#"{"requestedAt":"2026-12-04T00:00:00Z","report":{}}"#.to_string(),
                ),
                (
                    "passes".to_string(),
                    r#"[{"pass":3,"startedAt":"2026-12-04T00:00:00Z","durationMs":12,"result":"Succeeded","revision":"abc"}]"#.to_string(),
                ),
            ])),
            ..Default::default()
        };
        let r = Record::of(&cm);
        assert!(r.suspended && r.ready);
        assert_eq!(r.revision.as_deref(), Some("abc"));
        assert_eq!(r.requested_at.as_deref(), Some("2026-12-05T01:00:00Z"));
        assert_eq!(r.handled.as_deref(), Some("2026-12-04T00:00:00Z"));
        assert_eq!(r.repository.as_deref(), Some("https://git.example/config"));
        assert_eq!(r.passes.len(), 1);
        assert_eq!(r.passes[0].duration_ms, 12);
        assert_eq!(Record::of(&ConfigMap::default()), Record::default());
    }
}
