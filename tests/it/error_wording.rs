//! What a person reads when a command meets a Kubernetes error, case by case, from the `weft`
//! binary on the real control plane: one `error:` line that names the object (or the server, or
//! the kubeconfig), carries the API server's own message, says what to do, and shows no Rust
//! debug output (`Status {`, `Some(`, `ApiError`, `ListMeta`). And a closed stdout (`| head`)
//! ends any command quietly: no panic, no backtrace, its own exit status.

use crate::support;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::Api;

use support::cluster::TestNamespace;
use support::manifests::configmap;
use support::repo_dir::Repo;
use support::weft_cli::Weft;

/// What no line a person reads may hold.
const DEBUG_OUTPUT: [&str; 4] = ["Status {", "Some(", "ApiError", "ListMeta"];

/// The one `error:` line of a failed run, checked for the rules every error follows; `what` names
/// the case in assertion messages.
fn error_line(what: &str, code: i32, out: &str, err: &str) -> String {
    assert_ne!(code, 0, "{what}: should fail\n{out}\n{err}");
    for bad in DEBUG_OUTPUT {
        assert!(
            !err.contains(bad) && !out.contains(bad),
            "{what}: `{bad}` shown:\n{out}\n{err}"
        );
    }
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{what}: one error line:\n{err}");
    let line = errors[0].to_string();
    // One line: the next line of stderr is not a continuation of it.
    let after: Vec<&str> = err
        .lines()
        .skip_while(|l| !l.starts_with("error:"))
        .skip(1)
        .collect();
    assert!(after.is_empty(), "{what}: the error goes on:\n{err}");
    eprintln!("{what}: {line}");
    line
}

/// `weft <args>` as root `ns` in Weft's namespace `ns`, on the test cluster.
fn weft_in(ns: &str, args: &[&str]) -> (i32, String, String) {
    Weft::new(args)
        .cluster()
        .root(ns)
        .env_remove("WEFT_URL")
        .env_remove("WEFT_REPO")
        .run()
}

/// `weft <args>` against the kubeconfig at `kubeconfig` (and no `KUBECONFIG`).
fn weft_with(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    Weft::new(args)
        .args(["--kubeconfig".as_ref(), kubeconfig.as_os_str()])
        .env_remove("KUBECONFIG")
        .env_remove("WEFT_CONTEXT")
        .run()
}

/// A kubeconfig for `server` (TLS not verified) with a token that means nothing.
fn kubeconfig_for(dir: &Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\", insecure-skip-tls-verify: true}}\nusers:\n- name: u\n  user: {{token: nothing}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

#[tokio::test]
async fn an_object_into_a_namespace_that_does_not_exist_says_to_create_it() {
    let ns = TestNamespace::new("wording-ns").await;
    let n = ns.name();
    let absent = format!("{n}-absent");
    let repo = Repo::new();
    repo.write("cm.yaml", &configmap(&absent, "cm", "v"));
    let path = repo.path().display().to_string();
    let (code, out, err) = weft_in(n, &["sync", &path, "--timeout", "60s"]);
    let line = error_line("missing namespace", code, &out, &err);
    assert!(
        line.contains(&format!("ConfigMap/{absent}/cm")),
        "names the object: {line}"
    );
    assert!(
        line.contains(&format!("namespaces \"{absent}\" not found")),
        "the server's message: {line}"
    );
    assert!(
        line.contains(&format!("kubectl create namespace {absent}")),
        "what to do: {line}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn an_identity_without_rights_is_told_what_to_grant() {
    let ns = TestNamespace::new("wording-forbidden").await;
    let n = ns.name();
    // A ServiceAccount with no Role at all, and a token of it.
    let accounts: Api<ServiceAccount> = ns.api();
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "nobody"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("ServiceAccount");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request("nobody", &PostParams::default(), &request)
        .await
        .expect("token")
        .status
        .expect("token status")
        .token
        .expect("a token");
    // The test cluster's server and CA, with that token.
    let c = support::cluster::cluster();
    let kc = kube::config::Kubeconfig::read_from(c.kubeconfig_path()).expect("kubeconfig");
    let context = c
        .context()
        .map(str::to_string)
        .or(kc.current_context.clone())
        .expect("a context");
    let cluster_name = kc
        .contexts
        .iter()
        .find(|x| x.name == context)
        .and_then(|x| x.context.as_ref())
        .map(|x| x.cluster.clone())
        .expect("the context's cluster");
    let cluster = kc
        .clusters
        .iter()
        .find(|x| x.name == cluster_name)
        .and_then(|x| x.cluster.as_ref())
        .expect("the cluster");
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => format!("certificate-authority-data: {data}"),
        (None, Some(file)) => {
            let file = Path::new(file);
            let file = if file.is_relative() {
                c.kubeconfig_path().parent().expect("dir").join(file)
            } else {
                file.to_path_buf()
            };
            format!("certificate-authority: \"{}\"", file.display())
        }
        (None, None) => "insecure-skip-tls-verify: true".to_string(),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("nobody");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \"{}\"\n    {ca}\nusers:\n- name: nobody\n  user: {{token: \"{token}\"}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: nobody}}\ncurrent-context: x\n",
            cluster.server.as_deref().expect("server")
        ),
    )
    .expect("write kubeconfig");

    let (code, out, err) = weft_with(&kubeconfig, &["get", "root", "--weft-namespace", n]);
    let line = error_line("forbidden", code, &out, &err);
    let user = format!("system:serviceaccount:{n}:nobody");
    assert!(
        line.contains("is forbidden"),
        "the server's message: {line}"
    );
    assert!(
        line.contains(&format!("User \"{user}\" cannot list")),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "grant {user} `list` on roots.weft.io in namespace {n}"
        )),
        "what to do: {line}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_secret_that_does_not_exist_is_named() {
    let ns = TestNamespace::new("wording-notfound").await;
    let n = ns.name();
    let repo = Repo::new();
    repo.write("cm.yaml", &configmap(n, "cm", "v"));
    let path = repo.path().display().to_string();
    let (code, out, err) = weft_in(n, &["sync", &path, "--git-secret", "no-such-secret"]);
    let line = error_line("not found", code, &out, &err);
    assert_eq!(
        line.matches(&format!("Secret {n}/no-such-secret")).count(),
        1,
        "names it once: {line}"
    );
    assert!(
        line.contains("secrets \"no-such-secret\" not found (NotFound, HTTP 404)"),
        "the server's message: {line}"
    );
    assert!(
        line.contains("check its name and namespace, or create it first"),
        "{line}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn an_object_two_roots_declare_is_a_conflict_that_says_what_to_do() {
    // Every write of Weft's is a forced server-side apply, so the API server's own 409 does not
    // reach a command; the conflict a person meets is two roots declaring one object.
    let ns = TestNamespace::new("wording-conflict").await;
    let n = ns.name();
    let repo = Repo::new();
    repo.write("cm.yaml", &configmap(n, "shared", "v"));
    let path = repo.path().display().to_string();
    let (code, out, err) = weft_in(n, &["sync", &path, "--timeout", "60s"]);
    assert_eq!(code, 0, "the first root:\n{out}\n{err}");
    let other = format!("{n}-other");
    let (code, out, err) = Weft::new(["sync", &path, "--timeout", "60s"])
        .cluster()
        .args(["--weft-namespace", n, "--root-name", &other])
        .run();
    let line = error_line("conflict", code, &out, &err);
    assert!(
        line.contains(&format!("ConfigMap/{n}/shared: conflict")),
        "{line}"
    );
    assert!(
        line.contains("Declare it in one repository only"),
        "what to do: {line}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn an_invalid_field_is_named_to_fix() {
    let ns = TestNamespace::new("wording-invalid").await;
    let n = ns.name();
    let repo = Repo::new();
    repo.write(
        "cm.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bad, namespace: {n}}}\ndata: {{\"not a key\": v}}\n"
        ),
    );
    let path = repo.path().display().to_string();
    let (code, out, err) = weft_in(n, &["sync", &path, "--timeout", "60s"]);
    let line = error_line("invalid", code, &out, &err);
    assert!(
        line.contains(&format!("ConfigMap/{n}/bad")),
        "names the object: {line}"
    );
    assert!(line.contains("is invalid"), "the server's message: {line}");
    assert!(line.contains("(Invalid, HTTP 422)"), "{line}");
    assert!(
        line.contains("fix data[not a key] in the document in git"),
        "what to do: {line}"
    );
    ns.delete().await;
}

#[test]
fn a_server_that_never_answers_times_out_and_is_named() {
    // Accepts connections and never answers (not even the TLS handshake).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = kubeconfig_for(dir.path(), &server);
    let (code, out, err) = weft_with(&kubeconfig, &["get", "root", "--api-timeout", "2s"]);
    let line = error_line("timeout", code, &out, &err);
    assert!(line.contains(&server), "names the server: {line}");
    assert!(
        line.contains("did not answer within 2s (--api-timeout)"),
        "{line}"
    );
    assert!(line.contains("kubectl cluster-info"), "what to do: {line}");
}

#[test]
fn a_closed_port_is_said_once_with_the_server() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = kubeconfig_for(dir.path(), &server);
    let (code, out, err) = weft_with(&kubeconfig, &["get", "root"]);
    let line = error_line("unreachable", code, &out, &err);
    assert!(line.contains(&server), "names the server: {line}");
    assert_eq!(line.matches("Connection refused").count(), 1, "{line}");
    assert!(line.contains("kubectl cluster-info"), "what to do: {line}");
}

#[test]
fn a_kubeconfig_that_is_missing_or_does_not_parse_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-kubeconfig");
    let (code, out, err) = weft_with(&missing, &["get", "root"]);
    let line = error_line("missing kubeconfig", code, &out, &err);
    assert!(
        line.contains(&missing.display().to_string()),
        "names the file: {line}"
    );
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
    assert!(
        line.contains("give --kubeconfig a readable kubeconfig file"),
        "{line}"
    );

    let broken = dir.path().join("broken");
    std::fs::write(&broken, "clusters: [this is: not: yaml\n").expect("write");
    let (code, out, err) = weft_with(&broken, &["get", "root"]);
    let line = error_line("kubeconfig that does not parse", code, &out, &err);
    assert!(
        line.contains(&broken.display().to_string()),
        "names the file: {line}"
    );
    assert!(
        line.contains("not a valid kubeconfig: line 1 column 24: while parsing a flow mapping"),
        "{line}"
    );
    assert_eq!(
        line.matches("while parsing").count(),
        1,
        "said once: {line}"
    );

    // Through KUBECONFIG, without --kubeconfig.
    let (code, out, err) = Weft::new(["get", "root"])
        .env("KUBECONFIG", &missing)
        .env_remove("WEFT_CONTEXT")
        .run();
    let line = error_line("KUBECONFIG missing", code, &out, &err);
    assert!(
        line.contains(&missing.display().to_string()),
        "names the file: {line}"
    );
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
}

#[test]
fn version_without_a_cluster_says_so_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-kubeconfig");
    let (code, out, err) = Weft::new(["version"])
        .env("KUBECONFIG", &missing)
        .env_remove("WEFT_CONTEXT")
        .run();
    assert_eq!(code, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "client and daemon, one line each:\n{out}");
    assert!(lines[0].starts_with("client: weft "), "{out}");
    assert!(lines[1].starts_with("daemon: version not read: "), "{out}");
    assert_eq!(
        lines[1].matches("No such file or directory").count(),
        1,
        "{out}"
    );
    for bad in DEBUG_OUTPUT {
        assert!(
            !out.contains(bad) && !err.contains(bad),
            "{bad}:\n{out}\n{err}"
        );
    }

    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = kubeconfig_for(dir.path(), &server);
    let (code, out, err) = weft_with(&kubeconfig, &["version"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[1].starts_with("daemon: version not read: "), "{out}");
    assert!(lines[1].contains(&server), "{out}");
    assert_eq!(lines[1].matches("Connection refused").count(), 1, "{out}");
}

/// Run `weft <args>` with its stdout a pipe read for a few bytes then closed; its exit code and
/// stderr.
fn closed_early(args: &[&str], dir: Option<&Path>) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "1");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().expect("spawn weft");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("some output first");
    drop(stdout);
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    let status = child.wait().expect("wait");
    (status.code(), err)
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    // More than a pipe holds (64 KiB), so the writes go on after the reader is gone.
    let repo = Repo::new();
    let mut many = String::new();
    for i in 0..2000 {
        many.push_str(&configmap(
            "default",
            &format!("cm-{i}"),
            "a value of some length",
        ));
        many.push_str("---\n");
    }
    repo.write("many.yaml", &many);
    let path = repo.path().display().to_string();
    let cases: [&[&str]; 5] = [
        &["install", "-o", "yaml"],
        &["render", &path],
        &["crds"],
        &["completion", "bash"],
        &["completion", "zsh"],
    ];
    for args in cases {
        let (code, err) = closed_early(args, None);
        assert!(
            !err.contains("panicked")
                && !err.contains("stack backtrace")
                && !err.contains("Broken pipe"),
            "weft {args:?} on a closed pipe:\n{err}"
        );
        assert_eq!(
            code,
            Some(0),
            "weft {args:?} exits as it would have:\n{err}"
        );
    }
}

/// Every error enum variant that holds a `kube::Error` says it through
/// `weft::api::kube_error` (or `apply::describe`), never as `{0}` / `{source}`: kube's own
/// `Display` embeds the `Debug` of the server's Status.
#[test]
fn no_error_variant_formats_a_kube_error_with_kube_s_display() {
    let mut offenders = Vec::new();
    let mut files = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read src") {
                files.push(entry.expect("entry").path());
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let attribute = line.trim_start();
            if !attribute.starts_with("#[error(") || attribute.contains("transparent") {
                continue;
            }
            // The variant's fields: up to its end (`},` or `…),`), or the next variant's attribute.
            let mut fields = false;
            for l in &lines[i + 1..] {
                let t = l.trim();
                if t.starts_with("#[error(") {
                    break;
                }
                fields |= t.contains("kube::Error") && !t.contains("Result<");
                if t == "}," || t.ends_with("),") {
                    break;
                }
            }
            if fields && (attribute.contains("{0}") || attribute.contains("{source}")) {
                offenders.push(format!("{}:{}: {attribute}", path.display(), i + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "kube errors shown with kube's Display:\n{}",
        offenders.join("\n")
    );
}
