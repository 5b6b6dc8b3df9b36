//! Commands about one root, given a root that does not exist, on the real control plane:
//! `weft suspend`, `resume`, `trigger`, `get root NAME` and `uninstall --prune` fail (exit 2),
//! name the roots that do exist, and write nothing (no phantom Root, nothing pruned);
//! `weft suspend --create` suspends a root before its first pass, on purpose.

use crate::support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use support::cluster::TestNamespace;
use support::manifests::configmap;
use support::weft_cli::Weft;
use weft::api::root::Root;

/// `weft <args>` on the test cluster, Weft's namespace `ns`, root `root`.
fn weft(args: &[&str], ns: &str, root: &str) -> (i32, String, String) {
    Weft::new(args)
        .cluster()
        .args(["--weft-namespace", ns, "--root-name", root])
        .env_remove("WEFT_ROOT_NAME")
        .env_remove("WEFT_NAMESPACE")
        .env_remove("WEFT_URL")
        .env_remove("WEFT_REPO")
        .env_remove("WEFT_SYNC_TOKEN_FILE")
        .run()
}

/// Sync a directory holding one ConfigMap `cm` into `ns` as root `root`: its Root is made.
fn sync_root(ns: &str, root: &str, cm: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("cm.yaml"), configmap(ns, cm, "v")).expect("write");
    let path = dir.path().display().to_string();
    let (code, out, err) = weft(&["sync", &path, "--timeout", "60s"], ns, root);
    assert_eq!(code, 0, "weft sync of root {root}:\n{out}\n{err}");
}

#[tokio::test]
async fn commands_on_a_missing_root_fail_name_the_roots_there_and_write_nothing() {
    let ns = TestNamespace::new("missing-root").await;
    let n = ns.name();
    let second = format!("{n}-b");
    sync_root(n, n, "first");
    sync_root(n, &second, "second");
    let records: Api<ConfigMap> = Api::namespaced(ns.client(), n);
    let roots: Api<Root> = Api::namespaced(ns.client(), n);

    let cases: [&[&str]; 5] = [
        &["suspend", "-m", "typo"],
        &["resume"],
        &["trigger"],
        &["get", "root", "nope"],
        &["uninstall", "--prune", "--ignore-running"],
    ];
    for args in cases {
        let root = "nope";
        // `get` takes the name as its argument; its --root-name is not a flag of get.
        let (code, out, err) = if args[0] == "get" {
            Weft::new(args)
                .cluster()
                .args(["--weft-namespace", n])
                .env_remove("WEFT_NAMESPACE")
                .run()
        } else {
            weft(args, n, root)
        };
        assert_eq!(code, 2, "weft {args:?} on a missing root:\n{out}\n{err}");
        assert!(
            err.contains(&format!(
                "no root `nope` in namespace {n} (no Root {n}/nope)"
            )) && err.contains(&format!("`{n}`, `{second}`")),
            "weft {args:?} names the roots there:\n{err}"
        );
        assert!(
            roots.get_opt("nope").await.expect("GET").is_none(),
            "weft {args:?} created a phantom Root"
        );
        assert!(
            records
                .get_opt("weft-root-nope")
                .await
                .expect("GET")
                .is_none(),
            "weft {args:?} created a phantom record"
        );
    }
    let (_, _, err) = weft(&["suspend"], n, "nope");
    assert!(err.contains("weft suspend --create"), "{err}");
    // Nothing of the existing roots was pruned or suspended.
    for cm in ["first", "second"] {
        assert!(
            records.get_opt(cm).await.expect("GET").is_some(),
            "{cm} pruned"
        );
    }
    let (code, out, err) = Weft::new(["get", "root", n, "-o", "json"])
        .cluster()
        .args(["--weft-namespace", n])
        .env_remove("WEFT_NAMESPACE")
        .run();
    // 1 would be a root whose Root says no pass outcome (`Unknown`), which is not ready.
    assert!(code == 0 || code == 1, "weft get root {n}:\n{out}\n{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("rows");
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(
        (&rows[0]["name"], &rows[0]["suspended"]),
        (&serde_json::json!(n), &serde_json::json!(false))
    );

    // A root before its first pass: suspended on purpose with --create (its Root made from the
    // repository, as `weft run --repo` would make it), then an existing root.
    let repo = tempfile::tempdir().expect("tempdir");
    let repo_path = repo.path().display().to_string();
    let (code, out, err) = weft(
        &["suspend", "--create", "--repo", &repo_path, "-m", "not yet"],
        n,
        "fresh",
    );
    assert_eq!(code, 0, "weft suspend --create:\n{out}\n{err}");
    let fresh = roots.get("fresh").await.expect("the created Root");
    assert!(fresh.spec.suspend, "{fresh:?}");
    let (code, out, err) = weft(&["resume"], n, "fresh");
    assert_eq!(code, 0, "weft resume of the created root:\n{out}\n{err}");

    // A namespace without any root says so.
    let empty = TestNamespace::new("no-roots").await;
    let (code, _, err) = weft(&["trigger"], empty.name(), "weft");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("there is no root there"), "{err}");
    empty.delete().await;
    ns.delete().await;
}
