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

/// Bounds on one helm process, set as rlimits on the child before it starts: a template can
/// do any amount of work (`{{ range }}` over a doubling string reached 2 GB in seconds), and
/// helm runs beside the daemon, in its container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessLimits {
    /// `RLIMIT_AS`: the address space helm may map, in bytes (`None`: unlimited).
    pub max_memory_bytes: Option<u64>,
    /// `RLIMIT_CPU`: the CPU time helm may use, in seconds (`None`: unlimited).
    pub max_cpu_seconds: Option<u64>,
}

/// Environment variable: helm's address-space limit (`2GiB`, `1500MiB`, bytes; `unlimited`).
pub const MAX_MEMORY_ENV: &str = "WEFT_HELM_MAX_MEMORY";
/// Environment variable: helm's CPU-time limit in seconds (`unlimited` for none).
pub const MAX_CPU_ENV: &str = "WEFT_HELM_MAX_CPU_SECONDS";

impl Default for ProcessLimits {
    /// 1 GiB of address space and 60 s of CPU. helm's Go runtime maps 700 to 800 MiB of
    /// address space before it renders anything (`helm version` fails under 700 MiB, works
    /// at 800), so 1 GiB leaves it about 250 MiB of heap: far more than a large
    /// openstack-helm chart needs, and little enough that a runaway helm stays beside the
    /// daemon in its 512 MiB container. A large chart renders in about a second of CPU.
    fn default() -> Self {
        ProcessLimits {
            max_memory_bytes: Some(1024 * 1024 * 1024),
            max_cpu_seconds: Some(60),
        }
    }
}

impl ProcessLimits {
    /// The defaults, changed by [`MAX_MEMORY_ENV`] and [`MAX_CPU_ENV`] when they are set.
    pub fn from_env() -> Result<ProcessLimits, HelmError> {
        Self::from_values(
            std::env::var(MAX_MEMORY_ENV).ok().as_deref(),
            std::env::var(MAX_CPU_ENV).ok().as_deref(),
        )
    }

    /// [`ProcessLimits::from_env`] given the variables' values.
    pub fn from_values(
        memory: Option<&str>,
        cpu: Option<&str>,
    ) -> Result<ProcessLimits, HelmError> {
        let mut limits = ProcessLimits::default();
        let bad = |var: &str, value: &str, what: &str| HelmError::BadLimit {
            variable: var.to_string(),
            value: value.chars().take(40).collect(),
            expected: what.to_string(),
        };
        if let Some(v) = memory.map(str::trim).filter(|v| !v.is_empty()) {
            limits.max_memory_bytes = if v == "unlimited" {
                None
            } else {
                Some(parse_size(v).ok_or_else(|| {
                    bad(
                        MAX_MEMORY_ENV,
                        v,
                        "a size such as `2GiB`, `1500MiB` or `unlimited`",
                    )
                })?)
            };
        }
        if let Some(v) = cpu.map(str::trim).filter(|v| !v.is_empty()) {
            limits.max_cpu_seconds = if v == "unlimited" {
                None
            } else {
                Some(
                    v.parse::<u64>()
                        .ok()
                        .filter(|s| *s > 0)
                        .ok_or_else(|| bad(MAX_CPU_ENV, v, "whole seconds or `unlimited`"))?,
                )
            };
        }
        Ok(limits)
    }

    /// Set the limits on `command`'s child, between fork and exec.
    pub(crate) fn apply(&self, command: &mut Command) {
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            let limits = *self;
            // SAFETY: only `setrlimit` runs in the child before exec, which is
            // async-signal-safe; nothing is allocated or locked.
            unsafe {
                command.pre_exec(move || {
                    let set = |resource, value: u64| {
                        let limit = libc::rlimit {
                            rlim_cur: value as libc::rlim_t,
                            rlim_max: value as libc::rlim_t,
                        };
                        if libc::setrlimit(resource, &limit) == 0 {
                            Ok(())
                        } else {
                            Err(std::io::Error::last_os_error())
                        }
                    };
                    if let Some(bytes) = limits.max_memory_bytes {
                        set(libc::RLIMIT_AS, bytes)?;
                    }
                    if let Some(seconds) = limits.max_cpu_seconds {
                        set(libc::RLIMIT_CPU, seconds)?;
                    }
                    Ok(())
                });
            }
        }
        #[cfg(not(unix))]
        let _ = command;
    }

    /// Which limit a failed helm most likely ran into, from how it ended: killed by SIGXCPU
    /// or SIGKILL past the CPU limit, or Go's "out of memory" under the address-space limit.
    pub(crate) fn exceeded(&self, status: &ExitStatus, stderr: &str) -> Option<String> {
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            if let (Some(seconds), Some(signal)) = (self.max_cpu_seconds, status.signal()) {
                if signal == libc::SIGXCPU || signal == libc::SIGKILL {
                    return Some(format!("{seconds} s of CPU time ({MAX_CPU_ENV})"));
                }
            }
        }
        let out_of_memory = stderr.contains("out of memory")
            || stderr.contains("cannot allocate memory")
            || stderr.contains("runtime: cannot map pages");
        match self.max_memory_bytes {
            Some(bytes) if out_of_memory && !status.success() => Some(format!(
                "{} MiB of memory ({MAX_MEMORY_ENV})",
                bytes / (1024 * 1024)
            )),
            _ => None,
        }
    }
}

/// `2GiB`, `1500MiB`, `512Mi`, `1G`, `1048576` → bytes.
fn parse_size(text: &str) -> Option<u64> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KB" | "Ki" | "KiB" => 1 << 10,
        "M" | "MB" | "Mi" | "MiB" => 1 << 20,
        "G" | "GB" | "Gi" | "GiB" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(factor).filter(|b| *b > 0)
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
    command: Command,
    program: &Path,
    timeout: Duration,
    max_stdout: usize,
    launches: &AtomicU64,
) -> Result<Finished, HelmError> {
    run_limited(command, program, timeout, max_stdout, None, launches)
}

/// [`run`] with `limits` set on the child.
pub(crate) fn run_limited(
    mut command: Command,
    program: &Path,
    timeout: Duration,
    max_stdout: usize,
    limits: Option<&ProcessLimits>,
    launches: &AtomicU64,
) -> Result<Finished, HelmError> {
    if let Some(limits) = limits {
        limits.apply(&mut command);
    }
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
    fn limits_come_from_the_environment_values() {
        assert_eq!(
            ProcessLimits::from_values(None, None).unwrap(),
            ProcessLimits::default()
        );
        let l = ProcessLimits::from_values(Some("1500MiB"), Some("unlimited")).unwrap();
        assert_eq!(l.max_memory_bytes, Some(1500 << 20));
        assert_eq!(l.max_cpu_seconds, None);
        let l = ProcessLimits::from_values(Some("unlimited"), Some("5")).unwrap();
        assert_eq!((l.max_memory_bytes, l.max_cpu_seconds), (None, Some(5)));
        let err = ProcessLimits::from_values(Some("lots"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "WEFT_HELM_MAX_MEMORY is `lots`: expected a size such as `2GiB`, `1500MiB` or `unlimited`"
        );
        assert!(ProcessLimits::from_values(None, Some("0")).is_err());
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("0"), None);
    }

    #[test]
    fn a_child_over_its_cpu_limit_is_stopped_and_named() {
        let launches = AtomicU64::new(0);
        let limits = ProcessLimits {
            max_memory_bytes: None,
            max_cpu_seconds: Some(1),
        };
        let mut command = Command::new("sh");
        command.args(["-c", "while :; do :; done"]);
        let started = Instant::now();
        let finished = run_limited(
            command,
            Path::new("sh"),
            Duration::from_secs(30),
            1024,
            Some(&limits),
            &launches,
        )
        .unwrap();
        assert!(!finished.status.success());
        assert!(started.elapsed() < Duration::from_secs(20));
        let what = limits.exceeded(&finished.status, "").unwrap();
        assert_eq!(what, "1 s of CPU time (WEFT_HELM_MAX_CPU_SECONDS)");
    }

    #[test]
    fn a_child_over_its_memory_limit_fails_to_allocate() {
        let launches = AtomicU64::new(0);
        let limits = ProcessLimits {
            max_memory_bytes: Some(64 << 20),
            max_cpu_seconds: None,
        };
        // `head -c` of 512 MiB into one buffer would need more than 64 MiB of address space.
        let mut command = Command::new("sh");
        command.args([
            "-c",
            "x=$(head -c 536870912 /dev/zero | tr '\\0' x); echo ${#x}",
        ]);
        let finished = run_limited(
            command,
            Path::new("sh"),
            Duration::from_secs(60),
            1024,
            Some(&limits),
            &launches,
        )
        .unwrap();
        let stdout = String::from_utf8_lossy(&finished.stdout);
        assert_ne!(stdout.trim(), "536870912", "the limit did not hold");
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
