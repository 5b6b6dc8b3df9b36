//! The real `sops` and `age-keygen`, built by `tests/sops/ensure`, driven from tests and the
//! bench (`#[path]`-included by `tests/it/sops_decrypt.rs` and `benches/sops.rs`). They run
//! hermetically: in the given directory, with HOME and XDG_CONFIG_HOME there, and none of the
//! caller's `SOPS_*` variables, so no user key or `.sops.yaml` leaks in.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Where the pinned binaries are.
pub struct SopsTools {
    pub sops: PathBuf,
    pub age_keygen: PathBuf,
}

/// Build (first use) or find the tools; panics naming the build log when that fails. Never
/// skips: a machine without Go fails the tests loudly.
pub fn tools() -> &'static SopsTools {
    static TOOLS: OnceLock<SopsTools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sops/ensure");
        let out = Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed:\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let tools = SopsTools {
            sops: dir.join("sops"),
            age_keygen: dir.join("age-keygen"),
        };
        assert!(
            tools.sops.is_file() && tools.age_keygen.is_file(),
            "{} has no sops/age-keygen",
            dir.display()
        );
        tools
    })
}

/// An age key pair made by `age-keygen`; `file` is its key file (comments and all).
pub struct AgeKeyPair {
    pub file: PathBuf,
    pub recipient: String,
    /// The `AGE-SECRET-KEY-1…` line, to check that no error ever prints it.
    pub secret: String,
}

fn hermetic(program: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SOPS_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

fn check(what: &str, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `age-keygen -o DIR/NAME.agekey`.
pub fn keygen(dir: &Path, name: &str) -> AgeKeyPair {
    let t = tools();
    let file = dir.join(format!("{name}.agekey"));
    check(
        "age-keygen",
        hermetic(&t.age_keygen, dir)
            .arg("-o")
            .arg(&file)
            .output()
            .unwrap(),
    );
    let out = check(
        "age-keygen -y",
        hermetic(&t.age_keygen, dir)
            .arg("-y")
            .arg(&file)
            .output()
            .unwrap(),
    );
    let recipient = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let secret = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .find(|l| l.starts_with("AGE-SECRET-KEY-1"))
        .unwrap()
        .to_string();
    AgeKeyPair {
        file,
        recipient,
        secret,
    }
}

/// `sops --encrypt` of `cleartext` (written to DIR/NAME) for `recipients`, with `extra` flags
/// (`--encrypted-regex …`); returns the encrypted file's text.
pub fn encrypt(
    dir: &Path,
    name: &str,
    cleartext: &str,
    recipients: &[&str],
    extra: &[&str],
) -> String {
    let plain = dir.join(name);
    std::fs::write(&plain, cleartext).unwrap();
    let kind = if name.ends_with(".json") {
        "json"
    } else {
        "yaml"
    };
    let out = check(
        "sops --encrypt",
        hermetic(&tools().sops, dir)
            .args(["--encrypt", "--input-type", kind, "--output-type", kind])
            .arg("--age")
            .arg(recipients.join(","))
            .args(extra)
            .arg(&plain)
            .output()
            .unwrap(),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `sops --decrypt --output-type OUTPUT` of `encrypted` with SOPS_AGE_KEY_FILE=`key_file`; the
/// raw result, for tests that expect it to fail.
pub fn try_decrypt(
    dir: &Path,
    name: &str,
    encrypted: &str,
    key_file: &Path,
    output: &str,
) -> Output {
    let path = dir.join(format!("enc-{name}"));
    std::fs::write(&path, encrypted).unwrap();
    let kind = if name.ends_with(".json") {
        "json"
    } else {
        "yaml"
    };
    hermetic(&tools().sops, dir)
        .env("SOPS_AGE_KEY_FILE", key_file)
        .args(["--decrypt", "--input-type", kind, "--output-type", output])
        .arg(&path)
        .output()
        .unwrap()
}

/// What `sops --decrypt` prints, as text.
pub fn decrypt(dir: &Path, name: &str, encrypted: &str, key_file: &Path, output: &str) -> String {
    let out = check(
        "sops --decrypt",
        try_decrypt(dir, name, encrypted, key_file, output),
    );
    String::from_utf8(out.stdout).unwrap()
}
