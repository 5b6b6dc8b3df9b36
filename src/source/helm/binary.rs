//! Finding the helm binary and running it with a deadline.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::HelmError;

/// Where a renderer takes helm from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelmLocation {
    /// `$WEFT_HELM`, else `helm` on `$PATH`, looked up again for every render, so helm installed
    /// while Weft runs is picked up by the next pass.
    Environment,
    /// This binary (tests, or a path given on the command line).
    Binary(PathBuf),
}

impl HelmLocation {
    /// The helm binary to run now.
    pub fn resolve(&self) -> Result<PathBuf, HelmError> {
        match self {
            HelmLocation::Environment => locate_helm(
                std::env::var_os("WEFT_HELM").as_deref(),
                std::env::var_os("PATH").as_deref(),
                is_executable_file,
            ),
            HelmLocation::Binary(path) if is_executable_file(path) => Ok(path.clone()),
            HelmLocation::Binary(path) => Err(HelmError::BadBinary {
                path: path.clone(),
                reason: "is not an executable file".to_string(),
            }),
        }
    }
}

/// The helm to use, given the values of `WEFT_HELM` and `PATH`: `WEFT_HELM` when set and not
/// empty (a bare name is looked up on `PATH`), else the first `helm` on `PATH`.
pub fn locate_helm(
    weft_helm: Option<&OsStr>,
    path_var: Option<&OsStr>,
    is_executable: impl Fn(&Path) -> bool,
) -> Result<PathBuf, HelmError> {
    let search = |name: &OsStr| {
        path_var
            .map(std::env::split_paths)
            .into_iter()
            .flatten()
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    };
    match weft_helm.filter(|v| !v.is_empty()) {
        Some(value) => {
            let given = PathBuf::from(value);
            let found = if given.components().count() == 1 && !given.is_absolute() {
                search(value)
            } else {
                Some(given.clone()).filter(|p| is_executable(p))
            };
            found.ok_or_else(|| HelmError::BadWeftHelm {
                path: given,
                reason: "is not an executable file".to_string(),
            })
        }
        None => search(&OsString::from("helm")).ok_or(HelmError::NotFound),
    }
}

fn is_executable_file(path: &Path) -> bool {
    match std::fs::metadata(path) {
        #[cfg(unix)]
        Ok(m) => {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        }
        #[cfg(not(unix))]
        Ok(m) => m.is_file(),
        Err(_) => false,
    }
}

/// What a finished helm process wrote.
#[derive(Debug)]
pub(crate) struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// At most this much of stderr is kept; helm's messages are short.
const MAX_STDERR: usize = 1024 * 1024;

/// Run `command` to completion, killing it after `timeout`; count the launch in `launches`.
pub(crate) fn run(
    mut command: Command,
    program: &Path,
    timeout: Duration,
    max_stdout: usize,
    launches: &AtomicU64,
) -> Result<Finished, HelmError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    launches.fetch_add(1, Ordering::Relaxed);
    let mut child = command.spawn().map_err(|source| HelmError::Launch {
        path: program.to_path_buf(),
        source,
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    // Both pipes are drained while helm runs, so helm never blocks on a full pipe.
    let stdout = std::thread::spawn(move || read_capped(stdout, max_stdout));
    let stderr = std::thread::spawn(move || read_capped(stderr, MAX_STDERR));

    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HelmError::Io {
                    context: "waiting for helm".to_string(),
                    source,
                });
            }
        }
        let now = Instant::now();
        if now >= deadline {
            // helm starts no processes of its own, so its pipes close when it dies.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    };

    let joined = |handle: std::thread::JoinHandle<std::io::Result<(Vec<u8>, bool)>>| {
        handle
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the reader thread panicked")))
            .map_err(|source| HelmError::Io {
                context: "reading helm's output".to_string(),
                source,
            })
    };
    let (stdout, stdout_overflow) = joined(stdout)?;
    let (stderr, _) = joined(stderr)?;
    let Some(status) = status else {
        return Err(HelmError::Timeout { after: timeout });
    };
    if stdout_overflow {
        return Err(HelmError::OutputTooLarge { limit: max_stdout });
    }
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// Read up to `limit` bytes, then drain the rest; `true` when there was more.
fn read_capped(pipe: Option<impl Read>, limit: usize) -> std::io::Result<(Vec<u8>, bool)> {
    let Some(mut pipe) = pipe else {
        return Ok((Vec::new(), false));
    };
    let mut kept = Vec::new();
    (&mut pipe).take(limit as u64 + 1).read_to_end(&mut kept)?;
    let overflow = kept.len() > limit;
    if overflow {
        kept.truncate(limit);
        std::io::copy(&mut pipe, &mut std::io::sink())?;
    }
    Ok((kept, overflow))
}

/// `helm version --short` of `program` (`v3.22.0`).
pub(crate) fn version(
    program: &Path,
    timeout: Duration,
    launches: &AtomicU64,
) -> Result<String, HelmError> {
    let mut command = Command::new(program);
    command.args(["version", "--short"]);
    let out = run(command, program, timeout, 64 * 1024, launches)?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.is_empty() {
        return Err(HelmError::Version {
            path: program.to_path_buf(),
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists<'a>(paths: &'a [&'a str]) -> impl Fn(&Path) -> bool + 'a {
        move |p: &Path| paths.iter().any(|x| Path::new(x) == p)
    }

    #[test]
    fn weft_helm_wins_over_path() {
        let found = locate_helm(
            Some(OsStr::new("/opt/helm/bin/helm")),
            Some(OsStr::new("/usr/bin")),
            exists(&["/opt/helm/bin/helm", "/usr/bin/helm"]),
        );
        assert_eq!(found.unwrap(), PathBuf::from("/opt/helm/bin/helm"));
    }

    #[test]
    fn path_is_searched_in_order() {
        let found = locate_helm(
            None,
            Some(OsStr::new("/a::/b:/c")),
            exists(&["/b/helm", "/c/helm"]),
        );
        assert_eq!(found.unwrap(), PathBuf::from("/b/helm"));
        // An empty WEFT_HELM counts as unset.
        let found = locate_helm(
            Some(OsStr::new("")),
            Some(OsStr::new("/c")),
            exists(&["/c/helm"]),
        );
        assert_eq!(found.unwrap(), PathBuf::from("/c/helm"));
        // A bare name in WEFT_HELM is looked up on PATH.
        let found = locate_helm(
            Some(OsStr::new("helm3")),
            Some(OsStr::new("/c")),
            exists(&["/c/helm3"]),
        );
        assert_eq!(found.unwrap(), PathBuf::from("/c/helm3"));
    }

    #[test]
    fn missing_helm_says_how_to_get_it() {
        let err = locate_helm(None, Some(OsStr::new("/usr/bin")), exists(&[])).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, HelmError::NotFound));
        for hint in [
            "tests/helm/ensure",
            "deploy/Containerfile",
            "WEFT_HELM",
            "Helm v3",
        ] {
            assert!(text.contains(hint), "{hint} missing in: {text}");
        }
        let err = locate_helm(Some(OsStr::new("/nope/helm")), None, exists(&[])).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("WEFT_HELM is /nope/helm, which is not an executable file"),
            "{text}"
        );
        assert!(text.contains("tests/helm/ensure"), "{text}");
    }

    #[test]
    fn a_slow_process_is_stopped_at_the_deadline() {
        let launches = AtomicU64::new(0);
        let mut command = Command::new("sleep");
        command.arg("5");
        let started = Instant::now();
        let err = run(
            command,
            Path::new("sleep"),
            Duration::from_millis(100),
            1024,
            &launches,
        )
        .unwrap_err();
        assert!(matches!(err, HelmError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(4));
        assert_eq!(launches.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn output_beyond_the_limit_is_an_error() {
        let launches = AtomicU64::new(0);
        let mut command = Command::new("head");
        command.args(["-c", "100000", "/dev/zero"]);
        let err = run(
            command,
            Path::new("head"),
            Duration::from_secs(10),
            1000,
            &launches,
        )
        .unwrap_err();
        assert!(
            matches!(err, HelmError::OutputTooLarge { limit: 1000 }),
            "{err}"
        );
    }
}
