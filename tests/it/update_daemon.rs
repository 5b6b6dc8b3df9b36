//! Agent auto-update inside `weft run` (the real binary, its WeaveCloud controller and scheduler)
//! on the real control plane, with the WeaveCloud in a git repository and its channel served over
//! HTTP on 127.0.0.1: `POST /api/v1/sync?update=true` takes the newest bundle, which never becomes
//! ready, so it is rolled back and marked bad, and `Ready=False` stays while the controller keeps
//! reconciling; the next request takes the newest good bundle; status and metrics show the versions.

use crate::support;
use crate::support::channel as channel_fixtures;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use channel_fixtures::{
    broken_bundle_files, bundle_files, flux_image, ChannelServer, Published, BUILTIN_FLUX_IMAGE,
};
use support::cluster::TestNamespace;
use support::conditions::status_reason;
use support::daemon::{Daemon, DaemonOptions, SYNC_TOKEN};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::manifests::weavecloud;
use support::wait::wait_for;
use weft::api::WeaveCloud;

const FLUX: &str = "weave-flux-agent";

fn image_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap()
}

fn available(d: &Deployment) -> bool {
    d.status.as_ref().and_then(|s| s.available_replicas) == Some(1)
        && d.metadata.generation == d.status.as_ref().and_then(|s| s.observed_generation)
}

async fn request_update(d: &Daemon) {
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/sync?update=true", d.hooks_base()))
        .bearer_auth(SYNC_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202, "{:?}", resp.text().await);
}

async fn get_text(url: String) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn weft_run_rolls_back_a_broken_bundle_then_takes_the_newest_good_one() {
    let ns = TestNamespace::new("update-daemon").await;
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    support::cluster::create_token_secret(&client, ns.name(), "weave-cloud-token", "s3cr3t").await;

    let channel = ChannelServer::start();
    channel.publish(&[
        Published::new("1.1.0", &bundle_files("1.1.0")),
        Published::new("1.2.0", &broken_bundle_files("1.2.0")),
    ]);
    let host = RepoHost::new();
    let bare = host.create("config.git");
    let git = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write(
        "weave/weave-cloud.yaml",
        weavecloud(ns.name())
            .auto_update(true)
            .general("updateSchedule", "\"0 0 1 1 *\"")
            .poll_url(&channel.channel_url())
            .token("weave-cloud-token", Some("token"))
            .only_flux()
            .yaml(),
    );
    work.commit("weave cloud with a channel");
    work.push();
    let d = Daemon::start(DaemonOptions {
        controllers: true,
        // The test channel is plain HTTP on loopback: allowed by the operator, as it must be.
        extra: vec!["--allowed-channels".into(), channel.url("")],
        ..DaemonOptions::new(&git.url("config.git"), ns.name())
    });

    let deployments: Api<Deployment> = ns.api();
    let wcs: Api<WeaveCloud> = ns.api();
    // The controller installs the built-in bundle; the yearly schedule does not fire.
    wait_for(
        "the built-in agents are ready",
        Duration::from_secs(120),
        &d,
        async || {
            let dep = deployments.get_opt(FLUX).await.ok().flatten()?;
            let wc = wcs.get_opt("weave-cloud").await.ok().flatten()?;
            (image_of(&dep) == BUILTIN_FLUX_IMAGE
                && available(&dep)
                && status_reason(&wc, "Ready") == Some(("True".into(), "Reconciled".into())))
            .then_some(())
        },
    )
    .await;
    let next = wait_for(
        "status.nextUpdateCheck",
        Duration::from_secs(30),
        &d,
        async || wcs.get("weave-cloud").await.ok()?.status?.next_update_check,
    )
    .await;
    assert!(next.ends_with("-01-01T00:00:00Z"), "{next}");

    // 1.2.0 is the newest: tried, never ready (the daemon's --timeout is 60s), rolled back.
    request_update(&d).await;
    let wc = wait_for("the rollback", Duration::from_secs(240), &d, async || {
        let wc = wcs.get("weave-cloud").await.ok()?;
        let bad = &wc.status.as_ref()?.bad_versions;
        (bad == &vec!["1.2.0".to_string()]).then_some(wc)
    })
    .await;
    assert_eq!(
        status_reason(&wc, "Ready"),
        Some(("False".into(), "AgentUpdateRolledBack".into()))
    );
    let dep = wait_for(
        "flux ready again",
        Duration::from_secs(60),
        &d,
        async || {
            let dep = deployments.get(FLUX).await.ok()?;
            available(&dep).then_some(dep)
        },
    )
    .await;
    assert_eq!(image_of(&dep), BUILTIN_FLUX_IMAGE);
    // The controller keeps reconciling (its children changed); Ready=False stays.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let wc = wcs.get("weave-cloud").await.unwrap();
    assert_eq!(
        status_reason(&wc, "Ready"),
        Some(("False".into(), "AgentUpdateRolledBack".into())),
        "logs:\n{}",
        d.logs()
    );
    let status = wc.status.unwrap();
    assert_eq!(status.agent_version.as_deref(), Some("1.0.0"));
    assert_eq!(status.available_version.as_deref(), Some("1.1.0"));
    let shown = get_text(format!("{}/api/v1/status", d.base())).await;
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    let owner = &shown["owners"][format!("WeaveCloud/{}/weave-cloud", ns.name())];
    assert_eq!(owner["availableVersion"], "1.1.0", "{shown}");
    assert_eq!(owner["version"], "1.0.0", "{shown}");

    // The next request skips the bad version and takes 1.1.0.
    request_update(&d).await;
    let want = flux_image("1.1.0");
    wait_for(
        "the update to 1.1.0",
        Duration::from_secs(180),
        &d,
        async || {
            let wc = wcs.get("weave-cloud").await.ok()?;
            let dep = deployments.get(FLUX).await.ok()?;
            (wc.status.as_ref()?.agent_version.as_deref() == Some("1.1.0")
                && image_of(&dep) == want
                && available(&dep)
                && status_reason(&wc, "Ready").is_some_and(|(s, _)| s == "True"))
            .then_some(())
        },
    )
    .await;
    // The controller renders with the updated bundle: it stays on 1.1.0.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(image_of(&deployments.get(FLUX).await.unwrap()), want);
    let metrics = get_text(format!("{}/metrics", d.base())).await;
    let labels = format!(
        "namespace=\"{}\",name=\"weave-cloud\",version=\"1.1.0\"",
        ns.name()
    );
    assert!(
        metrics.contains(&format!("weft_agent_bundle_version{{{labels}}} 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("weft_agent_bundle_available{{{labels}}} 1")),
        "{metrics}"
    );
    drop(d);
    ns.delete().await;
}
