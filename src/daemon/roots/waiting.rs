//! A pass's long waits, said at info level: a wait for readiness that lasts longer than a few
//! seconds logs what it waits for (the subject of the wait, and each object still not ready with
//! why), then again every half minute, so that a daemon whose pass waits for a terminating
//! namespace or a chart's pods does not look hung (issue 49 item 7). Short waits say nothing.
//! The root loop's passes and the Roots' passes (the flag root's Root among them) say the same.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::ObjectRef;

/// How long a wait goes unsaid.
const FIRST: Duration = Duration::from_secs(5);
/// How often a long wait is said again.
const EVERY: Duration = Duration::from_secs(30);
/// How many objects a line names.
const NAMED: usize = 5;

/// The wait in progress: since when, what it is for, and when it was last said.
struct Current {
    since: Instant,
    what: String,
    said: Option<Instant>,
}

/// Whose pass a wait log is: the root loop's numbered pass, or a Root's.
enum Of {
    Pass(u64),
    Root(String),
}

/// The wait log of one pass.
pub struct WaitLog {
    of: Of,
    current: Mutex<Current>,
}

impl WaitLog {
    /// The wait log of the root loop's pass `pass`.
    pub fn new(pass: u64) -> WaitLog {
        WaitLog::of(Of::Pass(pass))
    }

    /// The wait log of a pass of the Root `root` (`namespace/name`).
    pub fn of_root(root: &impl std::fmt::Display) -> WaitLog {
        WaitLog::of(Of::Root(root.to_string()))
    }

    fn of(of: Of) -> WaitLog {
        WaitLog {
            of,
            current: Mutex::new(Current {
                since: Instant::now(),
                what: String::new(),
                said: None,
            }),
        }
    }

    /// A new phase of the pass: a wait starts its clock (`waiting for chart armada/keystone`).
    pub fn phase(&self, message: &str) {
        let mut c = self.current.lock().unwrap_or_else(|p| p.into_inner());
        *c = Current {
            since: Instant::now(),
            what: message.to_string(),
            said: None,
        };
    }

    /// A wait looked again and `still` is not ready: said when the wait is long.
    pub fn waiting(&self, still: &[(ObjectRef, String)]) {
        let now = Instant::now();
        let line = {
            let mut c = self.current.lock().unwrap_or_else(|p| p.into_inner());
            let due = match c.said {
                None => now.duration_since(c.since) >= FIRST,
                Some(said) => now.duration_since(said) >= EVERY,
            };
            if !due {
                return;
            }
            c.said = Some(now);
            line(&c.what, now.duration_since(c.since), still)
        };
        match &self.of {
            Of::Pass(pass) => tracing::info!(pass, "{line}"),
            Of::Root(root) => tracing::info!(root = %root, "{line}"),
        }
    }
}

/// `waiting for chart armada/db: 35s so far; still not ready: Pod/… (why), …; and 3 more`.
fn line(what: &str, waited: Duration, still: &[(ObjectRef, String)]) -> String {
    let what = if what.starts_with("waiting") {
        what.to_string()
    } else {
        "waiting".to_string()
    };
    if still.is_empty() {
        // A required selector found nothing yet (pods a quota or a scheduling rule keeps from
        // being created, wrong `wait.labels`).
        return format!(
            "{what}: {}s so far; nothing it waits for exists yet",
            waited.as_secs()
        );
    }
    let named: Vec<String> = still
        .iter()
        .take(NAMED)
        .map(|(r, why)| format!("{r} ({why})"))
        .collect();
    let mut out = format!(
        "{what}: {}s so far; still not ready: {}",
        waited.as_secs(),
        named.join(", ")
    );
    if still.len() > NAMED {
        out.push_str(&format!("; and {} more", still.len() - NAMED));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_wait_names_the_subject_and_the_objects() {
        let ns = ObjectRef {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: String::new(),
            name: "openstack".into(),
        };
        let still: Vec<(ObjectRef, String)> = (0..7)
            .map(|_| (ns.clone(), "phase Terminating".to_string()))
            .collect();
        let l = line(
            "waiting for 1 object(s) to become ready",
            Duration::from_secs(12),
            &still,
        );
        assert!(
            l.starts_with("waiting for 1 object(s) to become ready: 12s so far; still not ready: Namespace/openstack (phase Terminating), "),
            "{l}"
        );
        assert!(l.ends_with("; and 2 more"), "{l}");
        assert_eq!(
            line("waiting for chart armada/db", Duration::from_secs(6), &[]),
            "waiting for chart armada/db: 6s so far; nothing it waits for exists yet"
        );
    }
}
