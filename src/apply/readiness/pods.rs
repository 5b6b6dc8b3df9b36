//! Pods and Jobs.
//!
//! - Pod: `Running` with condition `Ready=True`, or `Succeeded`; `Failed` fails.
//! - Job: `succeeded >= completions` (default 1), or the Job controller's `Complete` /
//!   `SuccessCriteriaMet`; a `Failed=True` condition fails.
//!
//! A label-selector wait leaves out Pods run by a Job (the Job is waited for), Helm test pods,
//! evicted Pods, and Jobs run by a CronJob (they come and go on a schedule).

use serde_json::Value;

use super::{condition_message, condition_status, int, owned_by, text, Readiness};

fn condition_is(v: &Value, type_: &str, status: &str) -> bool {
    condition_status(v, type_) == Some(status)
}

/// A Pod: `Running` and `Ready`, or `Succeeded`.
pub fn pod(v: &Value) -> Readiness {
    match text(v, "/status/phase") {
        Some("Succeeded") => Readiness::Ready,
        Some("Failed") => Readiness::Failed(format!(
            "pod failed{}",
            text(v, "/status/reason")
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        )),
        Some("Running") if condition_is(v, "Ready", "True") => Readiness::Ready,
        Some("Running") => Readiness::InProgress(
            format!("running but not Ready {}", condition_message(v, "Ready"))
                .trim_end()
                .to_string(),
        ),
        phase => Readiness::InProgress(format!("phase is {}", phase.unwrap_or("unknown"))),
    }
}

/// A Job: succeeded ≥ completions.
pub fn job(v: &Value) -> Readiness {
    if condition_is(v, "Failed", "True") {
        return Readiness::Failed(format!("job failed: {}", condition_message(v, "Failed")));
    }
    let completions = int(v, "/spec/completions").unwrap_or(1);
    let succeeded = int(v, "/status/succeeded").unwrap_or(0);
    // `Complete` (or, with a success policy, `SuccessCriteriaMet`) is the Job controller's own
    // verdict, e.g. for an indexed Job that succeeded by policy before all completions.
    let complete =
        condition_is(v, "Complete", "True") || condition_is(v, "SuccessCriteriaMet", "True");
    if complete || succeeded >= completions {
        Readiness::Ready
    } else {
        Readiness::InProgress(format!(
            "{succeeded} of {completions} completions succeeded"
        ))
    }
}

/// Pods a label-selector wait leaves out: run by a Job (the Job's rule judges them), Helm test
/// pods (`helm.sh/hook: test…`), and evicted pods (their controller replaced them; Armada's
/// `wait.py` means to skip them too), which stay `Failed` until they are collected.
pub fn left_to_another_rule(v: &Value) -> bool {
    owned_by(v, "Job")
        || text(v, "/metadata/annotations/helm.sh~1hook")
            .is_some_and(|h| h.split(',').any(|h| h.trim().starts_with("test")))
        || text(v, "/status/reason") == Some("Evicted")
}

/// Jobs a label-selector wait leaves out: run by a CronJob.
pub fn run_by_a_cronjob(v: &Value) -> bool {
    owned_by(v, "CronJob")
}

#[cfg(test)]
mod tests {
    use super::super::{excluded, readiness};
    use super::*;
    use serde_json::json;

    fn in_progress(r: Readiness) -> String {
        match r {
            Readiness::InProgress(why) => why,
            other => panic!("expected in progress, got {other:?}"),
        }
    }

    #[test]
    fn pods() {
        let running_ready = json!({"kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(readiness("Pod", &running_ready), Readiness::Ready);
        let running = json!({"kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [api]"}]}});
        assert_eq!(
            in_progress(pod(&running)),
            "running but not Ready containers with unready status: [api]"
        );
        assert_eq!(
            pod(&json!({"kind": "Pod", "status": {"phase": "Succeeded"}})),
            Readiness::Ready
        );
        assert_eq!(
            in_progress(pod(&json!({"kind": "Pod", "status": {"phase": "Pending"}}))),
            "phase is Pending"
        );
        assert!(
            matches!(pod(&json!({"kind": "Pod", "status": {"phase": "Failed", "reason": "Evicted"}})), Readiness::Failed(w) if w == "pod failed: Evicted")
        );
    }

    #[test]
    fn jobs() {
        let done = json!({"kind": "Job", "spec": {"completions": 3}, "status": {"succeeded": 3}});
        assert_eq!(readiness("Job", &done), Readiness::Ready);
        assert_eq!(
            readiness(
                "Job",
                &json!({"spec": {"completions": 1}, "status": {"succeeded": 1}})
            ),
            Readiness::Ready
        );
        assert_eq!(
            in_progress(job(
                &json!({"kind": "Job", "spec": {"completions": 3}, "status": {"succeeded": 1, "active": 2}})
            )),
            "1 of 3 completions succeeded"
        );
        let failed = json!({"kind": "Job", "status": {"failed": 6, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}});
        assert!(matches!(job(&failed), Readiness::Failed(w) if w.contains("backoff limit")));
        let by_policy = json!({"kind": "Job", "spec": {"completions": 5, "completionMode": "Indexed"},
            "status": {"succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}});
        assert_eq!(job(&by_policy), Readiness::Ready);
    }

    #[test]
    fn selector_waits_leave_out_job_pods_helm_tests_and_cronjob_jobs() {
        let job_pod =
            json!({"metadata": {"ownerReferences": [{"kind": "Job", "name": "migrate"}]}});
        let test_pod = json!({"metadata": {"annotations": {"helm.sh/hook": "test-success"}}});
        let plain = json!({"metadata": {"name": "api-1"}});
        let evicted = json!({"metadata": {"name": "api-2"}, "status": {"phase": "Failed", "reason": "Evicted"}});
        assert!(excluded("Pod", &evicted));
        assert!(excluded("Pod", &job_pod));
        assert!(excluded("Pod", &test_pod));
        assert!(!excluded("Pod", &plain));
        let nightly =
            json!({"metadata": {"ownerReferences": [{"kind": "CronJob", "name": "nightly"}]}});
        assert!(excluded("Job", &nightly));
        assert!(!excluded("Job", &plain));
        assert!(!excluded("Deployment", &nightly));
    }
}
