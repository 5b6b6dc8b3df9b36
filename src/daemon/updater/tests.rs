//! Unit tests of the updater: checks against a scripted fake API server.

use super::*;

#[test]
fn cache_names_are_per_weavecloud_and_valid() {
    let a = cache_configmap_name("weave", "weave-cloud");
    let b = cache_configmap_name("weave2", "weave-cloud");
    assert_ne!(a, b);
    assert!(a.len() <= 63 && a.starts_with("weft-agent-bundle-"), "{a}");
}

#[test]
fn roll_outs_run_with_the_daemons_prune_and_concurrency_flags() {
    let opts = UpdateOptions {
        health_timeout: Duration::from_secs(42),
        pass: std::sync::Arc::new(PassSettings {
            weft_namespace: "weft".into(),
            max_prune_fraction: 0.1,
            force_prune: true,
            concurrency: 3,
            default_namespace: "elsewhere".into(),
            timeout: Duration::from_secs(1),
            poll_interval: Duration::from_secs(3),
            ..PassSettings::default()
        }),
        ..UpdateOptions::default()
    };
    let (s, p) = (&*opts.pass, opts.rollout_input("weave"));
    assert_eq!(s.max_prune_fraction, 0.1);
    assert!(p.force_prune(s));
    assert_eq!(s.concurrency, 3);
    assert_eq!(s.weft_namespace, "weft");
    assert_eq!(s.poll_interval, Duration::from_secs(3));
    // What the updater decides itself.
    assert_eq!(p.default_namespace(s), "weave");
    assert_eq!(p.timeout(s), Duration::from_secs(42), "the health timeout");
    assert!(!p.dry_run, "a roll-out writes");
    assert!(
        !p.force_prune,
        "no one-shot force: the flag is the settings'"
    );
    // Without the daemon's settings, the engine's defaults (the prune guard on).
    let defaults = UpdateOptions::default();
    assert!(!defaults.rollout_input("weave").force_prune(&defaults.pass));
    assert_eq!(
        defaults.pass.max_prune_fraction,
        PassSettings::default().max_prune_fraction
    );
}

mod against_a_fake_api_server {
    use http::Method;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::super::*;
    use crate::daemon::fixtures::{mock_client, Expect, Scenario};
    use crate::daemon::status::{DaemonStatus, OwnerStatus};
    use crate::render::bundle::Bundle;

    fn weavecloud(status: serde_json::Value) -> WeaveCloud {
        serde_json::from_value(json!({
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "metadata": {"name": "wc", "namespace": "weave", "uid": "0000-wc", "generation": 1},
            "spec": {
                "general": {
                    "environment": "generic",
                    "autoUpdate": false,
                    "updateSchedule": "0 0 1 1 *",
                    "tokenSecretRef": {"name": "weave-cloud", "key": "token"},
                },
            },
            "status": status,
        }))
        .expect("a WeaveCloud")
    }

    fn builtin_version() -> String {
        Bundle::builtin()
            .expect("the built-in bundle")
            .version
            .to_string()
    }

    const STATUS: &str = "/apis/cloud.weave.works/v1beta1/namespaces/weave/weaveclouds/wc/status";

    fn cache() -> Expect {
        Expect::not_found(format!(
            "/api/v1/namespaces/weft-system/configmaps/{}",
            cache_configmap_name("weave", "wc")
        ))
    }

    #[tokio::test]
    async fn a_check_with_auto_update_off_only_records_the_available_version() {
        let (client, api) = mock_client();
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default());
        state.update_status(|s| {
            s.set_owner(OwnerStatus {
                kind: "WeaveCloud".into(),
                namespace: "weave".into(),
                name: "wc".into(),
                ..Default::default()
            })
        });
        let updater = Updater::new(state.clone(), UpdateOptions::default());
        let wc = weavecloud(json!({}));
        let live = json!(wc);
        let patched = live.clone();
        let want = builtin_version();
        let expected = want.clone();
        let server = api.run(
            Scenario::new()
                .then(cache())
                .then(Expect::call(Method::GET, STATUS, live))
                .then(Expect::with(Method::PATCH, STATUS, move |seen| {
                    assert_eq!(
                        seen.body,
                        json!({"status": {"availableVersion": expected}}),
                        "only the available version: no agentVersion, conditions or badVersions"
                    );
                    patched
                })),
        );
        let report = updater.check(&wc).await;
        assert_eq!(report.outcome, UpdateOutcome::AutoUpdateOff);
        assert_eq!(report.available.as_deref(), Some(want.as_str()));
        assert_eq!(report.current, want);
        server
            .await
            .expect("exactly the expected calls: nothing applied");
        let shown = state.status_snapshot();
        let entry = &shown.owners["WeaveCloud/weave/wc"];
        assert_eq!(entry.available_version.as_deref(), Some(want.as_str()));
        assert_eq!(entry.version.as_deref(), Some(want.as_str()));
    }

    #[tokio::test]
    async fn a_channel_the_operator_did_not_allow_is_never_fetched() {
        // Issue 14: a WeaveCloud names its channel; by default only Weave Cloud's host is
        // allowed, so a cloud metadata endpoint (or any other host) is refused before any fetch.
        let (client, api) = mock_client();
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default());
        let updater = Updater::new(state, UpdateOptions::default());
        let mut wc = weavecloud(json!({}));
        wc.spec.general.wc_poll_url = Some("http://169.254.169.254/latest/meta-data".into());
        // The refusal is reported (event, daemon status); nothing is fetched or written.
        let server = api.run(Scenario::new().then(cache()).then(Expect::event("weave")));
        let report = updater.check(&wc).await;
        match &report.outcome {
            UpdateOutcome::Failed { reason } => assert!(
                reason.contains("`spec.general.wcPollUrl: http://169.254.169.254/latest/meta-data` is not an allowed agent channel (by default only https://cloud.weave.works/)"),
                "{reason}"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
        server.await.expect("no fetch, nothing applied");
    }

    #[tokio::test]
    async fn the_default_channel_policy_is_not_taken_from_the_weavecloud_s_wc_hostname() {
        // Issue 30: the default allowed `https://<wcHostname>/`, a field the WeaveCloud's author
        // sets: naming their own host there let them choose the channel (and its bundles).
        let (client, api) = mock_client();
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default());
        let updater = Updater::new(state, UpdateOptions::default());
        let mut wc = weavecloud(json!({}));
        wc.spec.general.wc_hostname = "attacker.example".into();
        wc.spec.general.wc_poll_url = Some("https://attacker.example/channel.yaml".into());
        let server = api.run(Scenario::new().then(cache()).then(Expect::event("weave")));
        let report = updater.check(&wc).await;
        match &report.outcome {
            UpdateOutcome::Failed { reason } => assert!(
                reason.contains("`spec.general.wcPollUrl: https://attacker.example/channel.yaml` is not an allowed agent channel (by default only https://cloud.weave.works/)"),
                "{reason}"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
        server.await.expect("no fetch, nothing applied");
    }

    #[tokio::test]
    async fn the_reconciles_update_step_records_the_next_check_and_checks_only_when_due() {
        let (client, api) = mock_client();
        let state = DaemonState::new(client, "weft-system", DaemonStatus::default());
        let updater = Updater::new(state, UpdateOptions::default());
        let running = builtin_version();
        let wc = weavecloud(json!({"agentVersion": running}));
        let year = {
            Timestamp::now()
                .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
                .year()
                + 1
        };
        let next = format!("{year}-01-01T00:00:00Z");
        let expected = next.clone();
        let patched = json!(wc);
        let server = api.run(
            Scenario::new()
                // Not due (yearly): no check, only the active bundle and the next check.
                .then(cache())
                .then(Expect::call(Method::GET, STATUS, json!(wc)))
                .then(Expect::with(Method::PATCH, STATUS, move |seen| {
                    assert_eq!(
                        seen.body,
                        json!({"status": {"nextUpdateCheck": expected}}),
                        "only the next check: the version it runs is already recorded"
                    );
                    patched
                })),
        );
        let earliest = updater.when_due(&wc, false, true).await;
        assert_eq!(earliest.map(|t| format!("{t:.0}")), Some(next.clone()));
        server.await.expect("exactly the expected calls");
        let v = &updater.versions()["weave/wc"];
        assert_eq!(v.next_update_check.as_deref(), Some(next.as_str()));
    }
}
