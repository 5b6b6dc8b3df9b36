//! Everything a command prints goes through here. A reader that went away (`weft render | head`)
//! ends the output quietly: Rust ignores SIGPIPE, so `println!` would panic on the closed pipe.
//! The command itself goes on and exits with its own status; only its output is dropped. Weft
//! does not restore SIGPIPE's default action, which would kill a `weft sync` mid-pass (and the
//! git, ssh or helm processes it waits for would be left to finish alone).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once stdout could not be written: nothing more is tried.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Write `text` on stdout, as is. A closed pipe (or any other write error) drops this and every
/// later write.
pub fn write(text: &str) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// `text` and a newline on stdout (see [`write`]).
pub fn line(text: &str) {
    write(&format!("{text}\n"));
}

/// `text` and a newline on stderr; a closed stderr drops it (there is nowhere left to say so).
pub fn error_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// `println!` through [`line`].
macro_rules! outln {
    () => {
        $crate::cli::out::line("")
    };
    ($($arg:tt)*) => {
        $crate::cli::out::line(&format!($($arg)*))
    };
}

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(&format!($($arg)*))
    };
}

/// `eprintln!` through [`error_line`].
macro_rules! errln {
    () => {
        $crate::cli::out::error_line("")
    };
    ($($arg:tt)*) => {
        $crate::cli::out::error_line(&format!($($arg)*))
    };
}
