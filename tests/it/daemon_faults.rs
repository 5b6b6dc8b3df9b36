//! Faults that production does to a controller, done for real against the real control plane,
//! and what Weft does about them. The tooling lives in `tests/support/faults.rs`.

use crate::support;

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use support::cluster::TestNamespace;
use support::daemon::{github_push, Daemon, DaemonOptions, SYNC_TOKEN};
use support::faults::{ApiProxy, Silence, SilentServer, SmallDisk, TcpRelay};
use support::git_servers::ServedRepo;
use support::manifests::configmap;

/// `POST /api/v1/sync`; a daemon that is going away may not answer, which is fine here.
async fn request_sync(d: &Daemon) {
    let _ = reqwest::Client::new()
        .post(format!("{}/api/v1/sync", d.hooks_base()))
        .bearer_auth(SYNC_TOKEN)
        .timeout(Duration::from_secs(2))
        .send()
        .await;
}

/// A leader cut off from the Lease (its renewals are accepted and never answered, while every
/// other call still works) stops writing before another replica can take the Lease, and stands
/// by (it does not exit: no crash loop). Without a deadline on each API call its renewal would
/// hang for ever, and it would go on writing beside the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_its_lease_stops_writing_before_another_can_lead() {
    let ns = TestNamespace::new("fault-lease").await;
    let repo = ServedRepo::start();
    let work = &repo.work;
    work.write("cm.yaml", configmap(ns.name(), "fault-test", "v0"));
    work.commit("v0");
    work.push();
    let url = repo.url();
    let proxy = ApiProxy::start().await;

    // 6s Lease: renew deadline 4s.
    let mut leader = Daemon::start(DaemonOptions {
        lease_duration: "6s",
        kubeconfig: Some(proxy.kubeconfig().to_path_buf()),
        ..DaemonOptions::new(&url, ns.name())
    });
    leader
        .wait_status("the first pass", Duration::from_secs(30), |s| {
            s["leader"] == true && s["lastPass"]["result"] == "succeeded"
        })
        .await;
    assert!(
        !proxy.writes().is_empty(),
        "the leader's writes did not go through the proxy"
    );

    proxy.swallow_lease_writes(true);
    let cut = Instant::now();
    // A replica that reaches the API server directly, started as the leader is cut off.
    let standby = Daemon::start(DaemonOptions {
        lease_duration: "6s",
        ..DaemonOptions::new(&url, ns.name())
    });
    // Keep the old leader busy with changes to write until it gives up.
    let mut i = 1;
    while !leader.logs().contains("leadership lost") {
        assert!(
            cut.elapsed() < Duration::from_secs(30),
            "the cut-off leader never gave up:\n{}",
            leader.logs()
        );
        work.write(
            "cm.yaml",
            configmap(ns.name(), "fault-test", &format!("v{i}")),
        );
        work.commit(&format!("v{i}"));
        work.push();
        i += 1;
        request_sync(&leader).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gave_up = cut.elapsed();
    eprintln!("the cut-off leader gave up after {gave_up:?}");
    assert!(
        gave_up < Duration::from_secs(10),
        "it gave up after {gave_up:?}"
    );
    // It stands by in the same process (no crash loop).
    leader
        .wait_status("the old leader stands by", Duration::from_secs(10), |s| {
            s["leader"] == false
        })
        .await;
    assert_eq!(leader.exited(), None, "{}", leader.logs());
    assert!(
        leader
            .logs()
            .contains("standing by for the leader Lease again"),
        "{}",
        leader.logs()
    );

    standby
        .wait_status("the standby takes over", Duration::from_secs(30), |s| {
            s["leader"] == true
        })
        .await;
    let leases: Api<Lease> = Api::namespaced(ns.client(), ns.name());
    let lease = leases
        .get(&weft::daemon::leader::lease_name(ns.name()))
        .await
        .expect("lease")
        .spec
        .expect("spec");
    let acquired: SystemTime = lease.acquire_time.expect("acquireTime").0.into();
    let last_write = proxy.writes().last().map(|(at, _)| *at).expect("writes");
    assert!(
        last_write < acquired,
        "the old leader wrote after the new one took the Lease: {:?} after",
        last_write.duration_since(acquired).unwrap_or_default()
    );
    // And within its renew deadline (4s) of the last renewal the API server answered.
    let renewed = proxy.last_lease_answer().expect("a renewal");
    assert!(
        last_write <= renewed + Duration::from_millis(4_500),
        "a write passed {:?} after the last renewal",
        last_write.duration_since(renewed).unwrap_or_default()
    );
    ns.delete().await;
}

async fn readyz(d: &Daemon) -> (u16, String) {
    let r = reqwest::get(format!("{}/readyz", d.base()))
        .await
        .expect("GET /readyz");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// A git server that accepts connections and never answers: every fetch ends at
/// `--fetch-timeout`, the last good revision stays applied (nothing pruned), `/readyz` and the
/// root's `SourceReady` condition say why, and the daemon recovers by itself once the server
/// answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_server_that_never_answers_fails_the_fetch_at_its_deadline() {
    let ns = TestNamespace::new("fault-git").await;
    let repo = ServedRepo::start();
    let relay = TcpRelay::start(([127, 0, 0, 1], repo.server.port).into());
    let work = &repo.work;
    work.write("cm.yaml", configmap(ns.name(), "fault-test", "v0"));
    work.commit("v0");
    work.push();
    let url = format!("git://127.0.0.1:{}/config.git", relay.port);
    let d = Daemon::start(DaemonOptions {
        extra: vec!["--fetch-timeout".into(), "3s".into()],
        ..DaemonOptions::new(&url, ns.name())
    });
    d.wait_status("the first pass", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    assert_eq!(readyz(&d).await.0, 200);

    relay.hang(true);
    // The ConfigMap leaves git: were the fetch mistaken for an empty repository, it would go.
    work.remove("cm.yaml");
    work.write(
        "other.yaml",
        configmap(ns.name(), "fault-test", "v1").replace("fault-test", "other"),
    );
    work.commit("v1");
    work.push();
    let asked = Instant::now();
    request_sync(&d).await;
    let status = d
        .wait_status("a failed fetch", Duration::from_secs(30), |s| {
            s["lastPass"]["result"] == "failed"
        })
        .await;
    let took = asked.elapsed();
    let error = status["lastPass"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("did not finish within 3s"), "{error}");
    assert!(took < Duration::from_secs(15), "the fetch took {took:?}");
    let condition = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "SourceReady"))
        .cloned()
        .expect("SourceReady condition");
    assert_eq!(condition["status"], "False", "{condition}");
    assert_eq!(condition["reason"], "FetchTimeout", "{condition}");
    let (code, body) = readyz(&d).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("FetchTimeout"), "{body}");
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ns.client(), ns.name());
    assert!(api.get_opt("fault-test").await.expect("GET").is_some());

    // The server answers again: the next pass applies what was pushed meanwhile.
    relay.hang(false);
    request_sync(&d).await;
    d.wait_status("recovery", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded" && s["lastPass"]["headUnchanged"] == false
    })
    .await;
    assert!(api.get_opt("other").await.expect("GET").is_some());
    assert!(api.get_opt("fault-test").await.expect("GET").is_none());
    assert_eq!(readyz(&d).await.0, 200);
    ns.delete().await;
}

/// `weft sync` against a server that accepts and trickles bytes for ever still ends at
/// `--fetch-timeout`, with an error that says so.
#[test]
fn weft_sync_gives_up_on_a_trickling_git_server_at_its_deadline() {
    let silent = SilentServer::start(Silence::Trickle(Duration::from_millis(200)));
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["render", "--repo", &silent.url("config.git")])
        .args(["--fetch-timeout", "2s"])
        .env("XDG_CACHE_HOME", tempfile::tempdir().expect("tmp").path())
        .output()
        .expect("weft render");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("did not finish within 2s"), "{stderr}");
    assert!(took < Duration::from_secs(20), "took {took:?}: {stderr}");
}

/// Replace a secret file the way the kubelet updates a mounted Secret: a new file swapped in.
fn rotate(path: &std::path::Path, value: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{value}\n")).expect("write");
    std::fs::rename(&tmp, path).expect("swap");
}

async fn sync_status(d: &Daemon, token: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("{}/api/v1/sync", d.hooks_base()))
        .bearer_auth(token)
        .send()
        .await
        .expect("POST /api/v1/sync")
        .status()
        .as_u16()
}

/// The sync token and a webhook secret are rotated in their files (as a mounted Secret is): the
/// new ones work within seconds, without a restart, and the old ones stop.
#[tokio::test]
async fn rotated_secrets_take_effect_without_a_restart() {
    let ns = TestNamespace::new("fault-rotate").await;
    let repo = ServedRepo::start();
    let work = &repo.work;
    work.write("cm.yaml", configmap(ns.name(), "fault-test", "v0"));
    work.commit("v0");
    work.push();
    let url = repo.url();
    let d = Daemon::start(DaemonOptions::new(&url, ns.name()));
    d.wait_status("the first pass", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    assert_eq!(sync_status(&d, SYNC_TOKEN).await, 202);
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 202, "{body}");

    rotate(&d.token_file(), "rotated-sync-token");
    let new_secret = "rotated-webhook-secret";
    rotate(&d.webhook_dir().join("github"), new_secret);
    let rotated = Instant::now();
    while sync_status(&d, "rotated-sync-token").await != 202 {
        assert!(
            rotated.elapsed() < Duration::from_secs(30),
            "the new sync token never worked:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "the rotated sync token worked after {:?}",
        rotated.elapsed()
    );
    assert_eq!(sync_status(&d, SYNC_TOKEN).await, 401);

    // The old webhook secret is refused, the new one accepted.
    let (status, body) = github_push(&d, "refs/heads/main", None).await;
    assert_eq!(status, 401, "{body}");
    let body_text = serde_json::json!({
        "ref": "refs/heads/main",
        "after": "1111111111111111111111111111111111111111",
    })
    .to_string();
    let signature = weft::server::signature::sign(new_secret.as_bytes(), body_text.as_bytes());
    let r = reqwest::Client::new()
        .post(format!("{}/hooks/github", d.hooks_base()))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", support::daemon::delivery_id())
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body_text)
        .send()
        .await
        .expect("POST /hooks/github");
    assert_eq!(r.status().as_u16(), 202);
    assert!(
        d.logs().contains("the sync token changed in its file"),
        "{}",
        d.logs()
    );
    ns.delete().await;
}

/// `weft run` killed (SIGKILL) after it applied new objects and before it recorded them in the
/// final inventory write, then started again: nothing is orphaned (the objects it created are
/// pruned once git drops them) and nothing still in git is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_apply_and_inventory_write_orphans_nothing() {
    let ns = TestNamespace::new("fault-kill").await;
    let name = ns.name().to_string();
    let repo = ServedRepo::start();
    let work = &repo.work;
    work.write(
        "keep.yaml",
        configmap(&name, "fault-test", "v0").replace("fault-test", "keep"),
    );
    work.commit("v0");
    work.push();
    let url = repo.url();
    let proxy = ApiProxy::start().await;
    let mut d = Daemon::start(DaemonOptions {
        kubeconfig: Some(proxy.kubeconfig().to_path_buf()),
        ..DaemonOptions::new(&url, &name)
    });
    d.wait_status("the first pass", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;

    // Ten new objects; once the first of them is written, inventory writes hang.
    for i in 0..10 {
        work.write(
            &format!("new/n{i}.yaml"),
            configmap(&name, "fault-test", "v1").replace("fault-test", &format!("new-{i}")),
        );
    }
    work.commit("v1");
    work.push();
    proxy.swallow_after("/configmaps/new-", "weft-inventory-");
    request_sync(&d).await;
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ns.client(), &name);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = futures::future::join_all((0..10).map(|i| {
            let api = api.clone();
            async move {
                api.get_opt(&format!("new-{i}"))
                    .await
                    .ok()
                    .flatten()
                    .is_some()
            }
        }))
        .await;
        if all.iter().all(|b| *b) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new objects were never applied:\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(proxy.triggered());
    // Give the pass time to reach the (swallowed) final inventory write, then kill it there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    d.signal("KILL");
    assert_eq!(
        d.wait_exit(Duration::from_secs(10)),
        None,
        "killed by a signal"
    );
    drop(d);

    // Git drops half of them; the restarted daemon (straight to the API server) prunes exactly
    // those, and keeps the rest and `keep`.
    for i in 0..5 {
        work.remove(&format!("new/n{i}.yaml"));
    }
    work.commit("v2");
    work.push();
    let d = Daemon::start(DaemonOptions::new(&url, &name));
    d.wait_status("the pass after the restart", Duration::from_secs(60), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    for i in 0..10 {
        let exists = api
            .get_opt(&format!("new-{i}"))
            .await
            .expect("get")
            .is_some();
        assert_eq!(exists, i >= 5, "new-{i}: exists = {exists}\n{}", d.logs());
    }
    assert!(api.get_opt("keep").await.expect("get").is_some());
    ns.delete().await;
}

/// The disk of the cache fills up: the fetch fails with a clear error, the cache is kept (no
/// re-clone loop), the last good revision stays applied, and the daemon recovers by itself when
/// space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cache_disk_fails_fetches_clearly_and_recovers_when_space_returns() {
    let ns = TestNamespace::new("fault-disk").await;
    let name = ns.name().to_string();
    let repo = ServedRepo::start();
    let work = &repo.work;
    work.write("cm.yaml", configmap(&name, "fault-test", "v0"));
    work.commit("v0");
    work.push();
    let url = repo.url();
    let disk = SmallDisk::mount("1m");
    let d = Daemon::start(DaemonOptions {
        cache_dir: Some(disk.path().to_path_buf()),
        ..DaemonOptions::new(&url, &name)
    });
    d.wait_status("the first pass", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded"
    })
    .await;
    let cache = std::fs::read_dir(disk.path().join("git"))
        .expect("the git cache is on the small disk")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "git") && p.is_dir())
        .expect("a cache repository");

    let filler = disk.fill();
    // 64 KiB that do not compress: the fetch needs room for them.
    let noise: String = (0..65_536u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    work.write(
        "cm.yaml",
        configmap(&name, "fault-test", "v1")
            .replace("value: \"v1\"", &format!("value: \"v1\"\n  noise: {noise}")),
    );
    work.commit("v1");
    work.push();
    for attempt in 0..2 {
        let before = d.status().await["lastPass"]["pass"].as_u64().unwrap_or(0);
        request_sync(&d).await;
        let status = d
            .wait_status("a failed fetch", Duration::from_secs(30), |s| {
                s["lastPass"]["pass"].as_u64().unwrap_or(0) > before
            })
            .await;
        assert_eq!(
            status["lastPass"]["result"], "failed",
            "attempt {attempt}: {status}"
        );
        let error = status["lastPass"]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("out of disk space"),
            "attempt {attempt}: {error}"
        );
        assert!(cache.is_dir(), "the cache was deleted (a re-clone loop)");
    }
    let (code, body) = readyz(&d).await;
    assert_eq!(code, 503, "{body}");
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(ns.client(), &name);
    let value =
        |c: k8s_openapi::api::core::v1::ConfigMap| c.data.unwrap_or_default()["value"].clone();
    assert_eq!(value(api.get("fault-test").await.expect("get")), "v0");

    std::fs::remove_file(filler).expect("free the disk");
    request_sync(&d).await;
    d.wait_status("recovery", Duration::from_secs(30), |s| {
        s["lastPass"]["result"] == "succeeded" && s["lastPass"]["headUnchanged"] == false
    })
    .await;
    assert_eq!(value(api.get("fault-test").await.expect("get")), "v1");
    assert_eq!(readyz(&d).await.0, 200);
    drop(d);
    ns.delete().await;
}
