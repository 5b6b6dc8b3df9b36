//! The flag root as a Root object (`weft run --root-object`, issue 41 item 2) answers what the
//! flag loop answered, on the real control plane with a real `weft run` and the real CLI:
//!
//! - `POST /api/v1/sync?wait=true` without `?root=` gets the Root's pass report (the objects it
//!   changed), `GET /api/v1/status` shows that pass, `weft trigger --wait` (over HTTP, and
//!   through the API server without `root NAME`) waits for the Root's answer;
//! - `weft suspend`, `weft get root` and `weft resume` without `root NAME` act on the Root (its
//!   `spec.suspend`), not on a root record; a request while suspended is answered `suspended`;
//! - with two replicas, the leader answers `?wait=true` with the pass of the replica that holds
//!   the Root's Lease;
//! - a push's changed objects go out ahead of the Root's full pass (`daemon/early.rs`);
//! - `?forcePrune=true` lets the pass that answers it, and only that one, prune past the guard;
//! - requests that arrive while a pass runs are answered by the next pass, one for all of them,
//!   never by the running one (it started before them);
//! - the Root fetches with the daemon's credential files (`WEFT_GIT_CREDENTIALS_DIR`) when its
//!   spec names no Secret.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use serde_json::Value;

use support::cluster::{install_crds, TestNamespace};
use support::daemon::{Daemon, DaemonOptions, SYNC_TOKEN};
use support::git_servers::{HttpAuth, HttpGitServer, RepoHost, WorkTree};
use support::manifests::configmap;
use support::repo_dir::Repo;
use support::wait::wait_for;
use support::weft_cli::Weft;
use weft::api::root::Root;

const WITHIN: Duration = Duration::from_secs(120);

/// `weft` on the test cluster, with the test's root (Weft's namespace and root name `ns`).
fn weft(ns: &str, args: &[&str]) -> (i32, String, String) {
    Weft::new(args)
        .cluster()
        .root(ns)
        .env_remove("WEFT_REPO")
        .env_remove("WEFT_ROOT_NAME")
        .env_remove("WEFT_SYNC_TOKEN_FILE")
        .run()
}

fn start(repo: &str, ns: &str, env: Vec<(String, String)>) -> Daemon {
    let mut opts = DaemonOptions::new(repo, ns);
    opts.extra = vec![
        "--root-object".into(),
        "--watch-namespaces".into(),
        ns.into(),
    ];
    opts.env = env;
    Daemon::start(opts)
}

fn ready(root: &Root) -> bool {
    root.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && format!("{:?}", c.status) == "True")
    })
}

/// A test's namespace, its repository directory, and `weft run --root-object` on it (the test
/// namespace is Weft's and the root's name), once its flag root's Root is Ready.
struct FlagRoot {
    ns: TestNamespace,
    name: String,
    repo: Repo,
    d: Daemon,
    roots: Api<Root>,
    cms: Api<ConfigMap>,
}

/// [`FlagRoot`] of a namespace named after `label`, its repository first written by `files`
/// (given the namespace).
async fn ready_flag_root(label: &str, files: impl FnOnce(&str, &Repo)) -> FlagRoot {
    let ns = TestNamespace::new(label).await;
    let client = ns.client();
    install_crds(&client).await;
    let name = ns.name().to_string();
    let repo = Repo::new();
    files(&name, &repo);
    let d = start(repo.path().to_str().unwrap(), &name, Vec::new());
    let roots: Api<Root> = Api::namespaced(client.clone(), &name);
    let cms: Api<ConfigMap> = Api::namespaced(client, &name);
    wait_for("the flag root's Root Ready", WITHIN, &d, async || {
        let root = roots.get_opt(&name).await.ok().flatten()?;
        ready(&root).then_some(())
    })
    .await;
    FlagRoot {
        ns,
        name,
        repo,
        d,
        roots,
        cms,
    }
}

/// `POST /api/v1/sync?wait=true`: the HTTP status and the JSON answer.
async fn sync_wait(d: &Daemon) -> (u16, Value) {
    sync_wait_at(d.hooks_base(), "")
        .await
        .unwrap_or_else(|e| panic!("POST /api/v1/sync?wait=true: no answer: {e}\n{}", d.logs()))
}

/// [`sync_wait`] to the hooks port at `hooks` (for a request sent from a task of its own), with
/// more of the query (`&forcePrune=true`).
async fn sync_wait_at(hooks: String, more: &str) -> Result<(u16, Value), reqwest::Error> {
    let r = reqwest::Client::new()
        .post(format!("{hooks}/api/v1/sync?wait=true{more}"))
        .bearer_auth(SYNC_TOKEN)
        // The pass takes well under a second; without an answer the daemon would hold the
        // request until its wait timeout (the pass timeout and two minutes).
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    let code = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    Ok((
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

async fn value(cms: &Api<ConfigMap>, name: &str) -> Option<String> {
    cms.get_opt(name)
        .await
        .ok()
        .flatten()?
        .data?
        .get("value")
        .cloned()
}

#[tokio::test]
async fn the_flag_roots_root_answers_the_sync_endpoint_the_status_and_the_cli() {
    // The namespace is deleted when the test ends (`_ns` dropped).
    let FlagRoot {
        ns: _ns,
        name,
        repo,
        d,
        roots,
        cms,
    } = ready_flag_root("flag-object", |name, repo| {
        repo.write("a.yaml", &configmap(name, "a", "1"));
    })
    .await;

    // `?wait=true` is answered by the Root's pass, with what it changed.
    repo.write("a.yaml", &configmap(&name, "a", "2"));
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "succeeded", "{report}");
    assert_eq!(report["summary"]["configured"], 1, "{report}");
    let changed = format!("ConfigMap/{name}/a");
    let change = report["changes"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["object"] == changed.as_str()))
        .unwrap_or_else(|| panic!("{changed} is not among the changes: {report}"));
    // The changed file's object went out ahead of the full pass (`daemon/early.rs`'s rules).
    assert!(
        change["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("(applied ahead of the full pass)")),
        "{change}"
    );
    assert!(
        d.logs()
            .contains("applied the pushed changes ahead of the full pass"),
        "{}",
        d.logs()
    );
    assert_eq!(value(&cms, "a").await.as_deref(), Some("2"));

    // The daemon's status shows the Root's pass.
    let status = d.status().await;
    assert_eq!(status["lastPass"]["pass"], report["pass"], "{status}");
    assert_eq!(status["lastPass"]["result"], "succeeded", "{status}");
    assert!(status["lastSuccessAt"].is_string(), "{status}");
    assert!(status["nextPollAt"].is_string(), "{status}");

    // `weft trigger --wait` over HTTP, and through the API server without `root NAME`.
    let token = d.token_file();
    let (code, out, err) = weft(
        &name,
        &[
            "trigger",
            "--wait",
            "--timeout",
            "60s",
            "--sync-token-file",
            token.to_str().unwrap(),
            "--url",
            &d.hooks_base(),
        ],
    );
    assert_eq!(code, 0, "weft trigger --wait over HTTP:\n{out}\n{err}");
    repo.write("a.yaml", &configmap(&name, "a", "3"));
    let (code, out, err) = weft(&name, &["trigger", "--wait", "--timeout", "60s"]);
    assert_eq!(code, 0, "weft trigger --wait:\n{out}\n{err}\n{}", d.logs());
    assert!(out.contains(&format!("Root {name}/{name}")), "{out}");
    assert_eq!(value(&cms, "a").await.as_deref(), Some("3"), "{out}");

    // `weft suspend` without `root NAME`: the Root's spec.suspend, shown by `weft get root`.
    let (code, out, err) = weft(&name, &["suspend"]);
    assert_eq!(code, 0, "weft suspend:\n{out}\n{err}");
    assert!(roots.get(&name).await.unwrap().spec.suspend, "{out}");
    // `weft get` has no --root-name: it lists the roots of Weft's namespace.
    let (_, out, err) = Weft::new(["get", "root", "-o", "json", "--weft-namespace", &name])
        .cluster()
        .run();
    let rows: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let row = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name.as_str()))
        .unwrap_or_else(|| panic!("no row for {name}: {out}"));
    assert_eq!(row["kind"], "Root", "{row}");
    assert_eq!(row["suspended"], true, "{row}");
    // A request while suspended is answered so, and applies nothing.
    repo.write("a.yaml", &configmap(&name, "a", "4"));
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}");
    assert_eq!(report["result"], "suspended", "{report}");
    assert_eq!(value(&cms, "a").await.as_deref(), Some("3"));

    // `weft resume`: the Root passes again.
    let (code, out, err) = weft(&name, &["resume"]);
    assert_eq!(code, 0, "weft resume:\n{out}\n{err}");
    assert!(!roots.get(&name).await.unwrap().spec.suspend);
    wait_for("the resumed Root applied a=4", WITHIN, &d, async || {
        (value(&cms, "a").await.as_deref() == Some("4")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flag_roots_root_fetches_with_the_daemons_credential_files() {
    const PASSWORD: &str = "fl4g-Root-pa55";
    let ns = TestNamespace::new("flag-object-creds").await;
    let client = ns.client();
    install_crds(&client).await;
    let name = ns.name().to_string();
    let host = RepoHost::new();
    host.create("private.git");
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("weft".into(), PASSWORD.into())),
            bearer: None,
        },
    );
    let work = WorkTree::new(&host.path("private.git").display().to_string());
    work.write("cm.yaml", configmap(&name, "private", "1"));
    work.commit("private config");
    work.push();
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("username"), "weft\n").unwrap();
    std::fs::write(creds.path().join("password"), format!("{PASSWORD}\n")).unwrap();
    let d = start(
        &server.url("private.git"),
        &name,
        vec![
            (
                "WEFT_GIT_CREDENTIALS_DIR".into(),
                creds.path().display().to_string(),
            ),
            // No ~/.ssh keys or other ambient credentials.
            ("HOME".into(), "/nonexistent".into()),
        ],
    );
    let roots: Api<Root> = Api::namespaced(client.clone(), &name);
    let root = wait_for(
        "the flag root's Root Ready from the private repository",
        WITHIN,
        &d,
        async || {
            let root = roots.get_opt(&name).await.ok().flatten()?;
            ready(&root).then_some(root)
        },
    )
    .await;
    // The credentials are the daemon's files, not a Secret named in the Root.
    assert!(root.spec.source.secret_ref.is_none(), "{:?}", root.spec);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    assert_eq!(value(&cms, "private").await.as_deref(), Some("1"));
    assert!(
        !d.logs().contains(PASSWORD),
        "the password is in the daemon's logs"
    );
}

/// How many passes of the flag root `ns` a replica's logs show.
fn passes_of(d: &Daemon, ns: &str) -> usize {
    d.logs()
        .lines()
        .filter(|l| l.contains("root pass succeeded") && l.contains(&format!("root={ns}/{ns} ")))
        .count()
}

/// Two replicas, the flag root's Root held by the one that is not the leader: the leader's
/// `POST /api/v1/sync?wait=true` is answered with that replica's pass (issue 41 item 2; before,
/// the leader woke its own controller, which does not pass a root it does not hold: 504).
#[tokio::test(flavor = "multi_thread")]
async fn the_leader_answers_a_sync_with_the_pass_of_the_replica_holding_the_root() {
    let ns = TestNamespace::new("flag-object-ha").await;
    let client = ns.client();
    install_crds(&client).await;
    let name = ns.name().to_string();
    let repo = Repo::new();
    repo.write("a.yaml", &configmap(&name, "a", "1"));
    let path = repo.path().to_str().unwrap().to_string();
    let replica = || {
        let mut opts = DaemonOptions::new(&path, &name);
        opts.lease_duration = "4s";
        opts.extra = vec![
            "--root-object".into(),
            "--watch-namespaces".into(),
            name.clone(),
        ];
        Daemon::start(opts)
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &name);
    let roots: Api<Root> = Api::namespaced(client.clone(), &name);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let root_lease = format!("weft-root-{name}.{name}");
    let holder = async || -> Option<String> {
        let lease = leases.get_opt(&root_lease).await.ok()??;
        lease.spec?.holder_identity
    };

    let a = replica();
    let a_id = a.status().await["identity"].as_str().unwrap().to_string();
    wait_for(
        "replica A leads and passed the Root",
        WITHIN,
        &a,
        async || {
            let root = roots.get_opt(&name).await.ok().flatten()?;
            let leads = a.status().await["leader"] == true;
            (ready(&root) && leads && holder().await? == a_id).then_some(())
        },
    )
    .await;
    let b = replica();
    let b_id = b.status().await["identity"].as_str().unwrap().to_string();
    let both = || format!("--- A (leader) ---\n{}\n--- B ---\n{}", a.logs(), b.logs());

    // Hand the Root's Lease to B: A drops it at its next renewal, B takes it as its own. A
    // renews the Lease meanwhile: a write that conflicts with a renewal is made again on the
    // Lease as renewed.
    wait_for("the Root's Lease written to B", WITHIN, &both, async || {
        let mut lease = leases.get(&root_lease).await.ok()?;
        let spec = lease.spec.as_mut()?;
        spec.holder_identity = Some(b_id.clone());
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        match leases
            .replace(&root_lease, &Default::default(), &lease)
            .await
        {
            Ok(_) => Some(()),
            Err(kube::Error::Api(s)) if s.code == 409 => None,
            Err(e) => panic!("writing the Root's Lease: {e}"),
        }
    })
    .await;
    wait_for("B holds the Root, A let it go", WITHIN, &both, async || {
        let taken = b.logs().contains("took the root's Lease");
        // A finds it out at its next renewal (refused: the Lease changed) or reading the Lease.
        let logs = a.logs();
        let dropped = logs.contains("another replica holds its Lease now")
            || logs.contains("its Lease changed under this replica");
        (taken && dropped && holder().await? == b_id).then_some(())
    })
    .await;
    assert_eq!(a.status().await["leader"], true, "{}", both());
    assert_eq!(b.status().await["leader"], false, "{}", both());

    // The leader is asked; B passes; the leader answers with B's pass.
    let (a_passes, b_passes) = (passes_of(&a, &name), passes_of(&b, &name));
    repo.write("a.yaml", &configmap(&name, "a", "2"));
    let (code, report) = sync_wait(&a).await;
    assert_eq!(code, 200, "{report}\n{}", both());
    assert_eq!(report["result"], "succeeded", "{report}");
    assert!(report["revision"].is_string(), "{report}");
    assert_eq!(value(&cms, "a").await.as_deref(), Some("2"), "{report}");
    assert_eq!(
        passes_of(&a, &name),
        a_passes,
        "A passed the root:\n{}",
        both()
    );
    assert!(
        passes_of(&b, &name) > b_passes,
        "B did not pass the root:\n{}",
        both()
    );
    let root = roots.get(&name).await.unwrap();
    assert_eq!(
        root.status.unwrap().last_applied_revision.as_ref(),
        report["revision"].as_str().map(str::to_string).as_ref(),
        "{report}"
    );
    // The leader's status shows that pass.
    let status = a.status().await;
    assert_eq!(status["lastPass"]["pass"], report["pass"], "{status}");
    assert_eq!(status["lastPass"]["result"], "succeeded", "{status}");

    // Suspended: answered so through the Root too, nothing applied.
    let (code, out, err) = weft(&name, &["suspend"]);
    assert_eq!(code, 0, "weft suspend:\n{out}\n{err}");
    repo.write("a.yaml", &configmap(&name, "a", "3"));
    let (code, report) = sync_wait(&a).await;
    assert_eq!(code, 200, "{report}");
    assert_eq!(report["result"], "suspended", "{report}");
    assert_eq!(value(&cms, "a").await.as_deref(), Some("2"));
}

/// A CRD of Widgets whose status the test writes (its readiness: `Ready` at the generation).
fn widget_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#
    )
}

fn widget(group: &str, ns: &str, size: u32) -> String {
    format!("apiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: {ns}\nspec:\n  size: {size}\n")
}

/// Whether `report` (a pass report) lists a change of `object`.
fn changed(report: &Value, object: &str) -> bool {
    report["changes"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["object"] == object))
}

/// Two `?wait=true` requests made while a pass runs (waiting for a Widget to become ready) are
/// answered by the next pass, both by the same one, with what the repository held after the
/// running pass had read it; the running pass answers only the request that started it.
#[tokio::test(flavor = "multi_thread")]
async fn requests_during_a_pass_are_answered_by_the_next_pass_not_the_running_one() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let group_of = |name: &str| format!("{name}.weft.test");
    let FlagRoot {
        ns,
        name,
        repo,
        d,
        cms,
        ..
    } = ready_flag_root("flag-object-next", |name, repo| {
        repo.write("crd.yaml", &widget_crd(&group_of(name)));
        repo.write("b.yaml", &configmap(name, "b", "1"));
    })
    .await;
    let client = ns.client();
    let group = group_of(&name);
    // The Widget, at generation 1 with no status: ready at once.
    repo.write("widget.yaml", &widget(&group, &name, 1));
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "succeeded", "{report}");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &name, &ar);
    let status = |observed: i64, ready: &str, reason: &str| {
        serde_json::json!({"status": {"observedGeneration": observed, "conditions": [{
            "type": "Ready", "status": ready, "reason": reason, "message": reason,
            "lastTransitionTime": "2026-12-06T00:00:00Z"}]}})
    };
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&status(1, "False", "Progressing")),
        )
        .await
        .expect("the Widget's status");

    // Request A starts a pass that applies generation 2 and waits for the Widget.
    repo.write("widget.yaml", &widget(&group, &name, 2));
    let first = tokio::spawn(sync_wait_at(d.hooks_base(), ""));
    wait_for(
        "the pass applied the Widget's generation 2",
        WITHIN,
        &d,
        async || {
            let w = widgets.get_opt("w").await.ok().flatten()?;
            (w.metadata.generation == Some(2)).then_some(())
        },
    )
    .await;
    // B and C arrive while it waits; then the repository changes.
    let later = [
        tokio::spawn(sync_wait_at(d.hooks_base(), "")),
        tokio::spawn(sync_wait_at(d.hooks_base(), "")),
    ];
    wait_for("the daemon took requests B and C", WITHIN, &d, async || {
        (d.logs().matches("sync requested over the API").count() >= 4).then_some(())
    })
    .await;
    assert!(
        !first.is_finished(),
        "the pass of A still waits\n{}",
        d.logs()
    );
    repo.write("b.yaml", &configmap(&name, "b", "2"));
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&status(2, "True", "Ready")),
        )
        .await
        .expect("the Widget's status");

    let (code, a) = first.await.expect("request A").expect("an answer to A");
    assert_eq!(code, 200, "{a}\n{}", d.logs());
    assert_eq!(a["result"], "succeeded", "{a}");
    let b_object = format!("ConfigMap/{name}/b");
    assert!(
        !changed(&a, &b_object),
        "A's pass read b before it changed: {a}"
    );
    let mut answers = Vec::new();
    for request in later {
        let (code, report) = request.await.expect("request").expect("an answer");
        assert_eq!(code, 200, "{report}\n{}", d.logs());
        answers.push(report);
    }
    let a_pass = a["pass"].as_u64().expect("A's pass number");
    for report in &answers {
        assert_eq!(report["result"], "succeeded", "{report}");
        assert_eq!(
            report["pass"].as_u64(),
            Some(a_pass + 1),
            "B and C are answered by the pass after A's: {report}\n{a}"
        );
        assert!(
            changed(report, &b_object),
            "the next pass applied b=2: {report}"
        );
    }
    assert_eq!(value(&cms, "b").await.as_deref(), Some("2"));
    let status = d.status().await;
    assert_eq!(
        status["lastPass"]["pass"].as_u64(),
        Some(a_pass + 1),
        "{status}"
    );

    drop(d);
    let _ = widgets.delete("w", &Default::default()).await;
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    let _ = crds
        .delete(&format!("widgets.{group}"), &Default::default())
        .await;
    ns.delete().await;
}

/// `POST /api/v1/sync?wait=true&forcePrune=true`: the pass that answers it prunes past the
/// fraction guard (which refused the same removal a moment before), and says why in its reasons.
#[tokio::test(flavor = "multi_thread")]
async fn force_prune_lets_the_pass_that_answers_it_prune_past_the_guard() {
    let FlagRoot {
        ns, repo, d, cms, ..
    } = ready_flag_root("flag-object-force", |name, repo| {
        for n in ["a", "b", "c", "d"] {
            repo.write(&format!("{n}.yaml"), &configmap(name, n, "1"));
        }
    })
    .await;
    for n in ["b", "c", "d"] {
        repo.remove(&format!("{n}.yaml"));
    }
    // 3 of 4 is more than half: refused, nothing pruned.
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "failed", "{report}");
    assert!(
        report["error"]
            .to_string()
            .contains("refusing to prune 3 of the 4 objects"),
        "{report}"
    );
    assert_eq!(value(&cms, "d").await.as_deref(), Some("1"));
    // Forced, once.
    let (code, report) = sync_wait_at(d.hooks_base(), "&forcePrune=true")
        .await
        .unwrap_or_else(|e| panic!("no answer: {e}\n{}", d.logs()));
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "succeeded", "{report}");
    assert!(
        report["reasons"].to_string().contains("api/force-prune"),
        "{report}"
    );
    assert_eq!(report["summary"]["pruned"], 3, "{report}");
    for n in ["b", "c", "d"] {
        assert_eq!(value(&cms, n).await, None, "{n} was pruned: {report}");
    }
    assert_eq!(value(&cms, "a").await.as_deref(), Some("1"));
    ns.delete().await;
}

/// A pass of the revision and Root its last pass rendered applies that render again, without
/// loading or rendering the files (issue 47 item 3: a no-op pass of a large root): a drifted
/// object is still restored from it; a new revision is rendered anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_revision_applies_the_last_render_again_and_a_new_one_is_rendered() {
    const AGAIN: &str = "applying the last render again";
    let FlagRoot {
        ns,
        name,
        repo,
        d,
        cms,
        roots,
    } = ready_flag_root("flag-object-again", |name, repo| {
        for n in ["a", "b"] {
            repo.write(&format!("{n}.yaml"), &configmap(name, n, "1"));
        }
    })
    .await;
    let again = |d: &Daemon| d.logs().matches(AGAIN).count();
    assert_eq!(again(&d), 0, "the first pass renders\n{}", d.logs());

    // The same files: the last render is applied again, and it restores what drifted.
    cms.delete("b", &Default::default())
        .await
        .expect("delete b");
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "succeeded", "{report}");
    assert_eq!(report["summary"]["created"], 1, "{report}");
    assert_eq!(value(&cms, "b").await.as_deref(), Some("1"));
    assert_eq!(again(&d), 1, "{}", d.logs());

    // A new revision is rendered, not the last render applied.
    repo.write("a.yaml", &configmap(&name, "a", "2"));
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "succeeded", "{report}");
    assert_eq!(report["summary"]["configured"], 1, "{report}");
    assert_eq!(value(&cms, "a").await.as_deref(), Some("2"));
    assert_eq!(again(&d), 1, "{}", d.logs());

    // Issue 47 item 3: a pass that finds everything as the Root's status says writes nothing,
    // not even that status; the daemon's answer has it.
    let before = roots.get(&name).await.expect("the Root");
    let (code, report) = sync_wait(&d).await;
    assert_eq!(code, 200, "{report}\n{}", d.logs());
    assert_eq!(report["result"], "succeeded", "{report}");
    assert_eq!(report["summary"]["unchanged"], 2, "{report}");
    assert_eq!(again(&d), 2, "{}", d.logs());
    let after = roots.get(&name).await.expect("the Root");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the no-op pass wrote the Root: {:?}",
        after.status
    );
    ns.delete().await;
}
