//! Label-selector waits: "every `kind` with these labels, `min_ready` of its pods" judged
//! against listed objects, by the rules of the table. An owner's wait rule is a list of
//! [`Selector`]s (Armada's `wait.resources` become these in the pass).

use std::collections::BTreeMap;

use serde_json::Value;

use super::workloads::async_update_refused;
use super::{excluded, readiness_with, text, Readiness, Threshold};
use crate::api::ObjectRef;

/// What to wait for: objects of one kind whose labels include `labels`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub kind: String,
    /// All must match the object's labels.
    pub labels: BTreeMap<String, String>,
    pub min_ready: Threshold,
    /// Finding no such object is "not ready" (else it is fine).
    pub required: bool,
    /// DaemonSets and StatefulSets: an update that is not a rolling update (`OnDelete`, a
    /// partitioned rollout) may be ready before every pod runs the new revision. Without it,
    /// such an update is never ready (Armada's `allow_async_updates: false`).
    pub allow_async_updates: bool,
}

impl Selector {
    /// Does `v` match (kind and labels)?
    pub fn matches(&self, v: &Value) -> bool {
        if v.get("kind").and_then(Value::as_str) != Some(self.kind.as_str()) {
            return false;
        }
        let labels = v.pointer("/metadata/labels").and_then(Value::as_object);
        self.labels.iter().all(|(k, want)| {
            labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(want.as_str())
        })
    }

    /// What a required selector that found nothing says, as Armada does: `no Pod with labels
    /// {app=api}: are `wait.labels` correct? …`.
    fn describe_missing(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let found = if labels.is_empty() {
            format!("no {} in the namespace (no labels to select by)", self.kind)
        } else {
            format!("no {} with labels {{{}}}", self.kind, labels.join(","))
        };
        format!(
            "{found}: are `wait.labels` correct? Does `wait.resources` need to exclude `type: {}`?",
            self.kind.to_ascii_lowercase()
        )
    }
}

/// The readiness of a set of selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Objects that are ready.
    pub ready: Vec<ObjectRef>,
    /// Objects not ready yet, with why.
    pub not_ready: Vec<(ObjectRef, String)>,
    /// Objects that will not become ready by waiting.
    pub failed: Vec<(ObjectRef, String)>,
    /// Required selectors that matched nothing, described.
    pub missing: Vec<String>,
}

impl Selection {
    /// Everything the selectors ask for is ready.
    pub fn is_ready(&self) -> bool {
        self.not_ready.is_empty() && self.failed.is_empty() && self.missing.is_empty()
    }
    /// Something failed: waiting longer will not help.
    pub fn has_failed(&self) -> bool {
        !self.failed.is_empty()
    }
}

fn object_ref(v: &Value) -> ObjectRef {
    ObjectRef {
        api_version: text(v, "/apiVersion").unwrap_or("").to_string(),
        kind: text(v, "/kind").unwrap_or("").to_string(),
        namespace: text(v, "/metadata/namespace").unwrap_or("").to_string(),
        name: text(v, "/metadata/name").unwrap_or("").to_string(),
    }
}

/// Judge `selectors` against `live` (objects of any kind, with `apiVersion` and `kind` set). An
/// object matched by several selectors is judged by each; objects the table leaves out of
/// selector waits (e.g. Pods run by a Job) are not judged.
pub fn judge(selectors: &[Selector], live: &[Value]) -> Selection {
    let mut out = Selection::default();
    for selector in selectors {
        let mut found = 0;
        for v in live
            .iter()
            .filter(|v| selector.matches(v) && !excluded(&selector.kind, v))
        {
            found += 1;
            let refused = if selector.allow_async_updates {
                None
            } else {
                async_update_refused(&selector.kind, v)
            };
            let verdict = match refused {
                Some(why) => Readiness::InProgress(why),
                None => readiness_with(&selector.kind, v, selector.min_ready),
            };
            match verdict {
                Readiness::Ready => out.ready.push(object_ref(v)),
                Readiness::InProgress(why) => out.not_ready.push((object_ref(v), why)),
                Readiness::Failed(why) => out.failed.push((object_ref(v), why)),
            }
        }
        if found == 0 && selector.required {
            out.missing.push(selector.describe_missing());
        }
    }
    out
}

/// The labels every selector of `kind` asks for: one list call per kind can use them.
pub fn common_labels(selectors: &[Selector], kind: &str) -> BTreeMap<String, String> {
    let mut of_kind = selectors.iter().filter(|s| s.kind == kind);
    let Some(first) = of_kind.next() else {
        return BTreeMap::new();
    };
    let mut common = first.labels.clone();
    for s in of_kind {
        common.retain(|k, v| s.labels.get(k) == Some(v));
    }
    common
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(kind: &str, labels: &[(&str, &str)], min_ready: Threshold) -> Selector {
        Selector {
            kind: kind.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            min_ready,
            required: true,
            allow_async_updates: false,
        }
    }

    fn live() -> Vec<Value> {
        vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "demo", "generation": 4, "labels": {"app": "api"}},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "demo", "labels": {"app": "api"}},
                "spec": {"completions": 1}, "status": {"succeeded": 1}}),
            // Run by a CronJob and still going: left out.
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly-2900", "namespace": "demo", "labels": {"app": "api"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u"}]},
                "spec": {"completions": 1}, "status": {"active": 1}}),
            // Another app's deployment: not selected.
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "other", "namespace": "demo", "generation": 1, "labels": {"app": "other"}},
                "spec": {"replicas": 1}, "status": {"observedGeneration": 1}}),
        ]
    }

    #[test]
    fn selectors_judge_by_kind_labels_and_min_ready() {
        let app = [("app", "api")];
        let half = [
            selector("Deployment", &app, Threshold::Percent(50)),
            selector("Job", &app, Threshold::default()),
        ];
        let r = judge(&half, &live());
        assert!(r.is_ready(), "{r:?}");
        let names: Vec<&str> = r.ready.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, vec!["api", "migrate"]);

        let strict = [
            selector("Deployment", &app, Threshold::default()),
            selector("StatefulSet", &app, Threshold::default()),
        ];
        let r = judge(&strict, &live());
        assert!(!r.is_ready() && !r.has_failed());
        assert_eq!(r.not_ready[0].0.to_string(), "Deployment/demo/api");
        assert_eq!(
            r.not_ready[0].1,
            "1 of 2 replicas available, 2 needed (min_ready)"
        );
        assert_eq!(
            r.missing,
            vec!["no StatefulSet with labels {app=api}: are `wait.labels` correct? Does `wait.resources` need to exclude `type: statefulset`?"]
        );

        let optional = [Selector {
            required: false,
            ..selector("StatefulSet", &app, Threshold::default())
        }];
        assert!(judge(&optional, &live()).is_ready());
        assert!(judge(&[], &[]).is_ready());
    }

    #[test]
    fn a_failed_object_fails_the_selection() {
        let failing = vec![
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crash", "namespace": "demo"}, "status": {"phase": "Failed", "reason": "Error"}}),
        ];
        let r = judge(&[selector("Pod", &[], Threshold::default())], &failing);
        assert!(r.has_failed() && !r.is_ready());
    }

    #[test]
    fn one_list_per_kind_uses_the_labels_all_its_selectors_share() {
        let s = [
            selector(
                "Pod",
                &[("app", "api"), ("tier", "web")],
                Threshold::default(),
            ),
            selector(
                "Pod",
                &[("app", "api"), ("tier", "db")],
                Threshold::default(),
            ),
            selector("Job", &[("app", "api")], Threshold::default()),
        ];
        assert_eq!(
            common_labels(&s, "Pod"),
            BTreeMap::from([("app".to_string(), "api".to_string())])
        );
        assert!(common_labels(&s, "Deployment").is_empty());
    }
}
