//! Progress of `weft sync` on a terminal (bars) or in a log (one line per event).

use std::time::Duration;

use crate::apply::changeset::{Action, Change};
use crate::pass::Progress;

/// Prints progress: a progress bar per phase on a terminal, one plain line per event otherwise.
pub struct ProgressPrinter {
    bar: std::sync::Mutex<Option<indicatif::ProgressBar>>,
    terminal: bool,
    dry_run: bool,
}

impl ProgressPrinter {
    /// `terminal`: stdout is a terminal (draw bars); `dry_run`: word changes as a plan.
    pub fn new(terminal: bool, dry_run: bool) -> ProgressPrinter {
        ProgressPrinter {
            bar: std::sync::Mutex::new(None),
            terminal,
            dry_run,
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

    /// Handle one progress event.
    pub fn observe(&self, p: Progress<'_>) {
        let Ok(mut bar) = self.bar.lock() else { return };
        match p {
            Progress::Phase { message, objects } => {
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
                if self.terminal && objects > 0 {
                    let b = indicatif::ProgressBar::new(objects as u64);
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "{spinner} {msg} [{bar:30}] {pos}/{len} {elapsed}",
                    ) {
                        b.set_style(style.progress_chars("=> "));
                    }
                    b.set_message(message);
                    b.enable_steady_tick(Duration::from_millis(120));
                    *bar = Some(b);
                } else {
                    println!("==> {message}");
                }
            }
            Progress::Change(c) => {
                let line = self.line(c);
                match bar.as_ref() {
                    Some(b) => {
                        b.inc(1);
                        if c.action != Action::Unchanged {
                            b.println(line);
                        }
                    }
                    None => println!("{line}"),
                }
            }
            Progress::Ready(r) => match bar.as_ref() {
                Some(b) => {
                    b.inc(1);
                    b.println(format!("{:<10} {r}", "ready"));
                }
                None => println!("{:<10} {r}", "ready"),
            },
        }
    }

    /// Clear the last bar.
    pub fn finish(&self) {
        if let Ok(mut bar) = self.bar.lock() {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
        }
    }
}
