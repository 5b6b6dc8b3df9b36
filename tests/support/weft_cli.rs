//! Running the `weft` binary from a test: one builder for what the test files used to spell
//! each on its own (`weft(...)` helpers), and the `(exit code, stdout, stderr)` of a finished run.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

/// A `weft` command line being built.
pub struct Weft(Command);

impl Weft {
    /// `weft` with `args`.
    pub fn new<I, S>(args: I) -> Weft
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.args(args);
        Weft(cmd)
    }

    /// More arguments.
    pub fn args<I, S>(mut self, args: I) -> Weft
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.0.args(args);
        self
    }

    /// `--repo <repo>`.
    pub fn repo(mut self, repo: &Path) -> Weft {
        self.0.arg("--repo").arg(repo);
        self
    }

    /// The shared test cluster (`--kubeconfig …`), and no `KUBECONFIG` of the caller's.
    pub fn cluster(mut self) -> Weft {
        self.0
            .args(super::cluster::cluster().kube_args())
            .env_remove("KUBECONFIG");
        self
    }

    /// The root of a test: Weft's namespace and the root's name are both `ns`.
    pub fn root(mut self, ns: &str) -> Weft {
        self.0.args(["--weft-namespace", ns, "--root-name", ns]);
        self
    }

    /// Decrypt with the examples repository's test-only age key at `key`.
    pub fn age_key(self, key: impl AsRef<OsStr>) -> Weft {
        self.env("SOPS_AGE_KEY_FILE", key)
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Weft {
        self.0.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Weft {
        self.0.env_remove(key);
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Weft {
        self.0.current_dir(dir);
        self
    }

    /// Run it to the end.
    pub fn output(mut self) -> Output {
        self.0.output().expect("run weft")
    }

    /// Run it to the end: exit code (`-1` when killed), stdout, stderr.
    pub fn run(self) -> (i32, String, String) {
        let out = self.output();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
