//! Hostile repositories against `weft validate` (issue 30, items 3, 4 and 8), offline: each case
//! runs the real binary (and the real helm where a chart is involved) as a child process and
//! prints what it cost, peak memory (the child's maximum RSS, helm included, from `wait4`) and
//! time, next to the bound that stopped it. Run with `--nocapture` to see the figures.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::helm::helm;

/// What one `weft validate` run cost.
struct Run {
    code: i32,
    output: String,
    peak_mib: u64,
    elapsed: Duration,
}

/// Run `weft validate DIR [args]` with `env`, and measure it.
// The child is reaped by `wait4` (for its rusage), which clippy does not see.
#[allow(clippy::zombie_processes)]
fn validate(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_weft"));
    command
        .arg("validate")
        .arg(dir)
        .args(args)
        .env("WEFT_HELM", helm())
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.reopen().unwrap()))
        .stderr(Stdio::from(log.reopen().unwrap()));
    for (k, v) in env {
        command.env(k, v);
    }
    let started = Instant::now();
    let child = command.spawn().unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `usage` are valid for writes.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    let elapsed = started.elapsed();
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Run {
        code,
        output: std::fs::read_to_string(log.path()).unwrap(),
        // ru_maxrss is in KiB on Linux; with wait4 it covers the child and what it waited for.
        peak_mib: usage.ru_maxrss as u64 / 1024,
        elapsed,
    }
}

fn write(dir: &Path, files: &[(String, String)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn report(case: &str, run: &Run, bound: &str) {
    let first_error = run
        .output
        .lines()
        .find(|l| l.contains("error") || l.contains("more than") || l.contains("limit"))
        .unwrap_or("")
        .chars()
        .take(160)
        .collect::<String>();
    println!(
        "{case:<28} exit {} · peak {:>5} MiB · {:>6.2} s · bound: {bound}\n    {first_error}",
        run.code,
        run.peak_mib,
        run.elapsed.as_secs_f64()
    );
}

#[test]
fn deep_long_keys_cost_memory_bounded_by_the_file() {
    // Issue 30's shape: 146 KB of long keys nested 30 deep over 12,000 flow items. Each node
    // storing its whole JSON pointer made this 2.7 GB; positions now cost O(1) per node.
    let dir = tempfile::tempdir().unwrap();
    let key = "k".repeat(4000);
    let mut text = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx: ");
    for i in 0..30 {
        text.push_str(&format!("{{{key}{i}: "));
    }
    text.push('[');
    text.push_str(&vec!["1"; 12_000].join(","));
    text.push(']');
    text.push_str(&"}".repeat(30));
    text.push('\n');
    let size = text.len();
    write(dir.path(), &[("deep.yaml".into(), text)]);
    let run = validate(dir.path(), &[], &[]);
    report(
        &format!("deep keys ({} KB)", size / 1000),
        &run,
        "positions O(1) per node",
    );
    assert_eq!(run.code, 0, "{}", run.output);
    assert!(run.peak_mib < 200, "peak {} MiB", run.peak_mib);
}

#[test]
fn alias_files_share_one_budget() {
    // 40 small files, each copying 21,021 nodes by aliases: within a per-file budget each,
    // 644 MB together before; the load's one budget refuses the twelfth.
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, String)> = (0..40)
        .map(|i| {
            (
                format!("f{i:02}.yaml"),
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a{i}}}\nx: &x [{}]\ndata: {{{}}}\n",
                    vec!["abcdefghijklmnop"; 1000].join(", "),
                    (0..20).map(|j| format!("k{j}: *x")).collect::<Vec<_>>().join(", ")
                ),
            )
        })
        .collect();
    write(dir.path(), &files);
    let run = validate(dir.path(), &[], &[]);
    report("40 alias files", &run, "250,000 copied nodes per load");
    assert_ne!(run.code, 0, "{}", run.output);
    assert!(
        run.output
            .contains("anchors and aliases would produce more than 250000"),
        "{}",
        run.output
    );
    assert!(run.peak_mib < 300, "peak {} MiB", run.peak_mib);
}

#[test]
fn a_file_of_separators_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[("dashes.yaml".into(), "---\n".repeat(2 * 1024 * 1024))],
    );
    let run = validate(dir.path(), &[], &[]);
    report("8 MiB of ---", &run, "100,000 documents per file");
    assert_ne!(run.code, 0, "{}", run.output);
    assert!(
        run.output
            .contains("more than 100000 documents in one file"),
        "{}",
        run.output
    );
    assert!(run.peak_mib < 200, "peak {} MiB", run.peak_mib);
}

#[test]
fn substitutions_over_many_charts_share_one_budget() {
    // 40 charts, each substituting a 1,001-node value 200 times: 200,200 nodes each, within a
    // per-chart budget; the render's one budget (shared with the load) refuses the second.
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![
        (
            "charts/app/Chart.yaml".to_string(),
            "name: app\nversion: 0.1.0\nannotations: {weft.io/template-format: substitution}\n"
                .to_string(),
        ),
        (
            "charts/app/templates/many.yaml".to_string(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{release.name}}\ndata:\n{}",
                (0..200)
                    .map(|i| format!("  k{i}: ${{big}}\n"))
                    .collect::<String>()
            ),
        ),
    ];
    let big = (0..1000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut armada = String::new();
    for i in 0..40 {
        armada.push_str(&format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: c{i}, namespace: default}}\nspec:\n  release: c{i}\n  namespace: apps\n  source: {{type: local, location: charts/app}}\n  values:\n    big: [{big}]\n"
        ));
    }
    files.push(("armada.yaml".into(), armada));
    write(dir.path(), &files);
    let run = validate(dir.path(), &[], &[]);
    report(
        "40 ${}-heavy charts",
        &run,
        "250,000 produced nodes per load and render",
    );
    assert_ne!(run.code, 0, "{}", run.output);
    assert!(run.output.contains("more than 250000"), "{}", run.output);
    assert!(run.peak_mib < 300, "peak {} MiB", run.peak_mib);
}

#[test]
fn a_sops_file_with_a_huge_age_entry_is_refused_at_once() {
    // Thousands of stanzas for one recipient in one `enc`: age reads its header again per line
    // (quadratic; 48,000 stanzas ran past 150 s). The entry is bounded before age reads it.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kat = std::fs::read_to_string(root.join("src/sops/testdata/kat.enc.yaml")).unwrap();
    let stanza = "-> X25519 ZnV6enl3dXp6eXd1enp5d3V6enl3dXp6eXd1enp5d3V6eg\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n";
    let header = format!("age-encryption.org/v1\n{}--- AAAA\n", stanza.repeat(48_000));
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(header.as_bytes());
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let armored = format!(
        "-----BEGIN AGE ENCRYPTED FILE-----\\n{}\\n-----END AGE ENCRYPTED FILE-----\\n",
        lines.join("\\n")
    );
    // Replace the file's one `enc` by the hostile one (a double-quoted YAML string).
    let start = kat.find("enc: |").expect("the KAT file has an age entry");
    let end = kat[start..]
        .find("-----END AGE ENCRYPTED FILE-----\n")
        .map(|i| start + i + "-----END AGE ENCRYPTED FILE-----\n".len())
        .unwrap();
    let hostile = format!("{}enc: \"{armored}\"\n{}", &kat[..start], &kat[end..]);
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), &[("secret.yaml".into(), hostile.clone())]);
    let key = root.join("src/sops/testdata/kat.agekey");
    let run = validate(dir.path(), &["--age-key-file", key.to_str().unwrap()], &[]);
    report(
        &format!("48,000 age stanzas ({} KB)", hostile.len() / 1000),
        &run,
        "16 KiB per age entry",
    );
    assert_ne!(run.code, 0, "{}", run.output);
    assert!(
        run.output
            .contains("more than the 16384 bytes sops ever writes for one recipient"),
        "{}",
        run.output
    );
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

#[test]
fn a_hostile_helm_template_is_stopped_at_its_memory_limit() {
    // A template doubling a string: 2 GB in seconds without a bound on helm.
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &[
            (
                "charts/bomb/Chart.yaml".into(),
                "apiVersion: v2\nname: bomb\nversion: 0.1.0\n".into(),
            ),
            (
                "charts/bomb/templates/cm.yaml".into(),
                "{{- $s := \"xxxxxxxxxxxxxxxx\" }}{{- range until 40 }}{{- $s = print $s $s }}{{- end }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n  s: {{ $s | quote }}\n".into(),
            ),
            (
                "armada.yaml".into(),
                "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: bomb, namespace: default}\nspec:\n  release: bomb\n  namespace: apps\n  source: {type: local, location: charts/bomb}\n".into(),
            ),
        ],
    );
    // The default limit: 1 GiB of address space.
    let run = validate(dir.path(), &[], &[]);
    report("helm string doubling", &run, "helm RLIMIT_AS 1 GiB");
    assert_ne!(run.code, 0, "{}", run.output);
    assert!(
        run.output.contains("ArmadaChart default/bomb")
            && run.output.contains(
                "helm was stopped at its limit of 1024 MiB of memory (WEFT_HELM_MAX_MEMORY)"
            ),
        "{}",
        run.output
    );
    assert!(run.peak_mib < 512, "peak {} MiB", run.peak_mib);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

#[test]
fn aliases_in_the_templates_of_many_charts_share_one_budget() {
    // One Weft-format chart whose template copies 21,021 nodes by aliases, deployed 40 times:
    // each parse had a budget of its own; now they spend the render's one budget.
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![
        (
            "charts/app/Chart.yaml".to_string(),
            "name: app\nversion: 0.1.0\nannotations: {weft.io/template-format: substitution}\n"
                .to_string(),
        ),
        (
            "charts/app/templates/cm.yaml".to_string(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ${{release.name}}\nx: &x [{}]\ndata: {{{}}}\n",
                vec!["abcdefghijklmnop"; 1000].join(", "),
                (0..20).map(|j| format!("k{j}: *x")).collect::<Vec<_>>().join(", ")
            ),
        ),
    ];
    let mut armada = String::new();
    for i in 0..40 {
        armada.push_str(&format!(
            "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: c{i}, namespace: default}}\nspec:\n  release: c{i}\n  namespace: apps\n  source: {{type: local, location: charts/app}}\n"
        ));
    }
    files.push(("armada.yaml".into(), armada));
    write(dir.path(), &files);
    let run = validate(dir.path(), &[], &[]);
    report(
        "40 alias-heavy charts",
        &run,
        "250,000 copied nodes per load and render",
    );
    assert_ne!(run.code, 0, "{}", run.output);
    assert!(
        run.output
            .contains("anchors and aliases would produce more than 250000"),
        "{}",
        run.output
    );
    assert!(run.peak_mib < 300, "peak {} MiB", run.peak_mib);
}
