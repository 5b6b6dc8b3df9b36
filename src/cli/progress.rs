//! Progress of `weft sync` on a terminal (bars) or in a log or pipe (plain lines).
//!
//! On a pipe each change gets a line and unchanged objects only a count, so that a pass over a
//! thousand objects where one changed says what changed; a wait says every few seconds what it
//! still waits for, and why, instead of staying silent until the timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::api::ObjectRef;
use crate::apply::changeset::{Action, Change};
use crate::pass::Progress;

/// How often a wait says what it still waits for.
pub const WAITING_EVERY: Duration = Duration::from_secs(5);
/// The most objects named on one "still waiting" line.
const NAMED: usize = 5;

/// Prints progress: a progress bar per phase on a terminal, plain lines otherwise.
pub struct ProgressPrinter {
    state: std::sync::Mutex<State>,
    terminal: bool,
    dry_run: bool,
    /// Where the lines go: stdout, or stderr when stdout carries `-o json|yaml`.
    to_stderr: bool,
}

#[derive(Default)]
struct State {
    bar: Option<indicatif::ProgressBar>,
    /// Objects changed by this pass: their "ready" lines are printed, the others' counted.
    changed: BTreeSet<ObjectRef>,
    /// Unchanged objects and ready unchanged objects not yet reported (a pipe).
    unchanged: usize,
    ready_unchanged: usize,
    /// What the running waits still wait for, and why.
    pending: BTreeMap<ObjectRef, String>,
    /// When the current phase started, and when "still waiting" was last printed.
    phase_started: Option<Instant>,
    last_waiting: Option<Instant>,
}

impl ProgressPrinter {
    /// `terminal`: the output is a terminal (draw bars); `dry_run`: word changes as a plan.
    pub fn new(terminal: bool, dry_run: bool) -> ProgressPrinter {
        ProgressPrinter {
            state: std::sync::Mutex::new(State::default()),
            terminal,
            dry_run,
            to_stderr: false,
        }
    }

    /// Print on stderr (stdout is kept for a machine-readable result).
    pub fn on_stderr(mut self) -> ProgressPrinter {
        self.to_stderr = true;
        self
    }

    fn print(&self, line: &str) {
        if self.to_stderr {
            errln!("{line}");
        } else {
            outln!("{line}");
        }
    }

    fn line(&self, c: &Change) -> String {
        let verb = if self.dry_run {
            c.action.planned()
        } else {
            c.action.done()
        };
        let mut line = format!("{verb:<10} {}", c.object);
        if let Some(r) = &c.reason {
            line.push_str(&format!(" ({r})"));
        }
        line
    }

    /// The counts not printed yet, as lines.
    fn flush_counts(&self, s: &mut State) {
        if s.unchanged > 0 {
            self.print(&format!("{:<10} {} object(s)", "unchanged", s.unchanged));
            s.unchanged = 0;
        }
        if s.ready_unchanged > 0 {
            self.print(&format!(
                "{:<10} {} unchanged object(s)",
                "ready", s.ready_unchanged
            ));
            s.ready_unchanged = 0;
        }
    }

    /// Handle one progress event.
    pub fn observe(&self, p: Progress<'_>) {
        let Ok(mut s) = self.state.lock() else { return };
        let s = &mut *s;
        match p {
            Progress::Phase { message, objects } => {
                if let Some(b) = s.bar.take() {
                    b.finish_and_clear();
                }
                self.flush_counts(s);
                s.pending.clear();
                s.phase_started = Some(Instant::now());
                s.last_waiting = s.phase_started;
                if self.terminal && objects > 0 {
                    let b = indicatif::ProgressBar::new(objects as u64);
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "{spinner} {msg} [{bar:30}] {pos}/{len} {elapsed}",
                    ) {
                        b.set_style(style.progress_chars("=> "));
                    }
                    b.set_message(message);
                    b.enable_steady_tick(Duration::from_millis(120));
                    s.bar = Some(b);
                } else {
                    self.print(&format!("==> {message}"));
                }
            }
            Progress::Change(c) => {
                if c.action != Action::Unchanged {
                    s.changed.insert(c.object.clone());
                }
                match s.bar.as_ref() {
                    Some(b) => {
                        b.inc(1);
                        if c.action != Action::Unchanged || c.reason.is_some() {
                            b.println(self.line(c));
                        }
                    }
                    // An unchanged object with a reason (left as it is because …) says so.
                    None if c.action == Action::Unchanged
                        && c.reason.is_none()
                        && !self.terminal =>
                    {
                        s.unchanged += 1
                    }
                    None => self.print(&self.line(c)),
                }
            }
            Progress::Ready(r) => {
                s.pending.remove(r);
                let line = format!("{:<10} {r}", "ready");
                match s.bar.as_ref() {
                    Some(b) => {
                        b.inc(1);
                        b.println(line);
                    }
                    None if !self.terminal && !s.changed.contains(r) => s.ready_unchanged += 1,
                    None => self.print(&line),
                }
            }
            Progress::Waiting(still) => {
                for (o, why) in still {
                    s.pending.insert(o.clone(), why.clone());
                }
                let now = Instant::now();
                if let Some(b) = s.bar.as_ref() {
                    if let Some((o, why)) = s.pending.iter().next() {
                        b.set_message(format!("waiting for {o} ({why})"));
                    }
                    return;
                }
                let due = s
                    .last_waiting
                    .is_none_or(|at| now.duration_since(at) >= WAITING_EVERY);
                if !due || s.pending.is_empty() {
                    return;
                }
                s.last_waiting = Some(now);
                let waited = s
                    .phase_started
                    .map(|at| now.duration_since(at).as_secs())
                    .unwrap_or(0);
                let named: Vec<String> = s
                    .pending
                    .iter()
                    .take(NAMED)
                    .map(|(o, why)| format!("{o} ({why})"))
                    .collect();
                let more = s.pending.len().saturating_sub(NAMED);
                self.print(&format!(
                    "{:<10} {} object(s) not ready after {waited}s: {}{}",
                    "waiting",
                    s.pending.len(),
                    named.join("; "),
                    if more > 0 {
                        format!("; and {more} more")
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }

    /// Clear the last bar and print the counts left.
    pub fn finish(&self) {
        if let Ok(mut s) = self.state.lock() {
            if let Some(b) = s.bar.take() {
                b.finish_and_clear();
            }
            self.flush_counts(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_still_waiting_line_comes_after_the_interval_and_names_why() {
        let p = ProgressPrinter::new(false, false);
        p.observe(Progress::Phase {
            message: "waiting".into(),
            objects: 1,
        });
        let o = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "a".into(),
            name: "web".into(),
        };
        let still = vec![(o.clone(), "0/1 replicas available".to_string())];
        p.observe(Progress::Waiting(&still));
        let s = p.state.lock().unwrap();
        assert_eq!(
            s.pending.get(&o).map(String::as_str),
            Some("0/1 replicas available")
        );
        // Not printed yet: the interval since the phase started has not passed.
        assert!(s
            .last_waiting
            .is_some_and(|at| at.elapsed() < WAITING_EVERY));
    }
}
