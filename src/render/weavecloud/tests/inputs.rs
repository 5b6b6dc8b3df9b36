//! What the agents keep from the cluster: flux and memcached arguments read from the agents
//! that run now (and from a launcher install), the launcher's defaults, the detected container
//! runtime, and the checks that keep those inputs and the CRD in agreement.

use super::*;

#[test]
fn running_flux_args_fill_unset_fields_and_are_reported() {
    let mut wc = example();
    wc.spec.flux.config.git_path = None;
    wc.spec.flux.config.git_label = None;
    let running: Vec<String> = [
        "--token=secret-from-old-manifest",
        "--git-url=git@old:repo",
        "--git-path=k8s",
        "--git-path=apps",
        "--git-poll-interval",
        "5m",
        "--k8s-allow-namespace=default",
        "--connect=wss://old/api/flux",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let inputs = AgentInputs {
        token_hash: None,
        preserved_flux_args: parse_flux_args(&running),
        ..Default::default()
    };
    let r = render_with(&wc, &inputs);
    let a = flux_args_of(&r.objects);
    // Configured wins over running; unset is taken from the running agent.
    assert!(a.contains(&"--git-url=url".to_string()));
    assert!(!a.contains(&"--git-url=git@old:repo".to_string()));
    assert!(a.contains(&"--git-path=k8s,apps".to_string()));
    assert!(a.contains(&"--git-poll-interval=5m".to_string()));
    assert!(a.contains(&"--k8s-allow-namespace=default".to_string()));
    // The old token and connect URL are never carried over.
    assert!(!a
        .iter()
        .any(|x| x.contains("secret-from-old-manifest") || x.contains("wss://old")));
    assert_eq!(
        r.preserved_flux_args,
        vec![
            "--git-path=k8s,apps",
            "--git-poll-interval=5m",
            "--k8s-allow-namespace=default"
        ]
    );
}

#[test]
fn nothing_is_preserved_when_flux_is_disabled() {
    let mut wc = example();
    wc.spec.flux.disable = true;
    wc.spec.flux.config = Default::default();
    let inputs = AgentInputs {
        token_hash: None,
        preserved_flux_args: BTreeMap::from([("git-url".to_string(), "u".to_string())]),
        ..Default::default()
    };
    assert!(render_with(&wc, &inputs).preserved_flux_args.is_empty());
}

#[test]
fn parse_flux_args_reads_both_forms_and_ignores_the_rest() {
    let args: Vec<String> = [
        "--git-url",
        "git@x:y",
        "--git-ci-skip",
        "--git-branch=main",
        "--token=t",
        "-git-label=l",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let got = parse_flux_args(&args);
    assert_eq!(
        got,
        BTreeMap::from([
            ("git-url".to_string(), "git@x:y".to_string()),
            ("git-ci-skip".to_string(), "true".to_string()),
            ("git-branch".to_string(), "main".to_string()),
            ("git-label".to_string(), "l".to_string()),
        ])
    );
}
#[test]
fn repeated_flux_flags_follow_flux_parsing() {
    let args: Vec<String> = [
        "--git-poll-interval=1m",
        "--git-poll-interval=2m",
        "--k8s-allow-namespace=a",
        "--k8s-allow-namespace",
        "b",
        "--git-ci-skip",
        "positional",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let got = parse_flux_args(&args);
    // A scalar flag keeps its last value (a comma list would not be a duration).
    assert_eq!(got["git-poll-interval"], "2m");
    assert_eq!(got["k8s-allow-namespace"], "a,b");
    // A boolean flag never takes the next word.
    assert_eq!(got["git-ci-skip"], "true");
}

#[test]
fn a_flag_in_append_args_is_not_also_preserved() {
    let mut wc = example();
    wc.spec.flux.append_args = vec!["--git-poll-interval=2m".into()];
    let inputs = AgentInputs {
        token_hash: None,
        preserved_flux_args: BTreeMap::from([
            ("git-poll-interval".to_string(), "1m".to_string()),
            ("git-timeout".to_string(), "30s".to_string()),
        ]),
        ..Default::default()
    };
    let r = render_with(&wc, &inputs);
    let a = flux_args_of(&r.objects);
    assert!(!a.contains(&"--git-poll-interval=1m".to_string()), "{a:?}");
    assert_eq!(a.last().unwrap(), "--git-poll-interval=2m");
    assert_eq!(r.preserved_flux_args, vec!["--git-timeout=30s"]);
    // Rendering again from the agent this produced keeps the same arguments: no drift loop.
    let again = AgentInputs {
        token_hash: None,
        preserved_flux_args: parse_flux_args(&a),
        ..Default::default()
    };
    assert_eq!(flux_args_of(&render_with(&wc, &again).objects), a);
}
/// The CRD pattern (what the API server and `weft validate` check) and the renderer agree
/// on what a hostname is.
#[test]
fn the_crd_hostname_pattern_and_the_renderer_agree() {
    let re = regex::Regex::new(crate::api::weavecloud::HOSTNAME_PATTERN).unwrap();
    for good in [
        "cloud.weave.works",
        "cloud.weave.works.",
        "cloud.example.com:8443",
        "10.0.0.1:443",
        "localhost",
    ] {
        assert!(re.is_match(good), "{good}");
        assert!(check_hostname(good).is_ok(), "{good}");
    }
    for bad in [
        "https://cloud.weave.works",
        "cloud.weave.works/api",
        "",
        "cloud weave",
        "-x",
    ] {
        assert!(!re.is_match(bad), "{bad}");
    }
    for bad in [
        "https://cloud.weave.works",
        "cloud.weave.works/api",
        "",
        "cloud weave",
    ] {
        assert!(check_hostname(bad).is_err(), "{bad}");
    }
}
#[test]
fn a_token_in_append_args_is_refused() {
    for (set, flag) in [
        (
            (|wc: &mut WeaveCloud| wc.spec.flux.append_args = vec!["--token=abc".into()])
                as fn(&mut WeaveCloud),
            "--token",
        ),
        (
            |wc: &mut WeaveCloud| wc.spec.scope.append_args = vec!["--service-token=abc".into()],
            "--service-token",
        ),
        (
            |wc: &mut WeaveCloud| {
                wc.spec.scope.append_args = vec!["--probe.token".into(), "abc".into()]
            },
            "--probe.token",
        ),
    ] {
        let mut wc = example();
        set(&mut wc);
        let err = render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "appendArgs` sets `{flag}`: the token must not be written into a manifest"
            )),
            "{err}"
        );
        assert!(
            !err.contains("abc"),
            "the error must not echo the token: {err}"
        );
    }
}
#[test]
fn only_known_container_runtime_sockets_pass_the_crd_and_the_renderer() {
    // The path is mounted from the host into scope's privileged probe: a tenant's WeaveCloud must
    // not mount `/` or `/etc` through it.
    let re = regex::Regex::new(crate::api::weavecloud::CRI_ENDPOINT_PATTERN).unwrap();
    for good in crate::api::weavecloud::KNOWN_RUNTIME_SOCKETS {
        assert!(re.is_match(good), "{good}");
        assert!(re.is_match(&format!("unix://{good}")), "{good}");
    }
    for bad in [
        "var/run/crio.sock",
        "unix://var/run/crio.sock",
        "tcp://10.0.0.1:2375",
        "/",
        "/etc",
        "/var/run/docker.sock/../../../etc",
        "/var/run/docker.sock\n",
        "/var/run/dockerXsock",
        "",
    ] {
        assert!(!re.is_match(bad), "{bad}");
        // The renderer trims what it mounts: a trailing newline names the same socket.
        if bad.trim() != "/var/run/docker.sock" {
            assert!(
                crate::api::weavecloud::known_runtime_socket(bad).is_none(),
                "{bad}"
            );
        }
    }
    for bad in ["run/crio.sock", "/etc", "/"] {
        let mut wc = example();
        wc.spec.scope.container_runtime_endpoint = Some(bad.into());
        let err = render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "`spec.scope.containerRuntimeEndpoint: {bad}` is not a known container runtime socket"
            )),
            "{err}"
        );
    }
}

// ---- launcher defaults and what is kept from a launcher install ----

const MINIMAL: &str = r#"
apiVersion: cloud.weave.works/v1beta1
kind: WeaveCloud
metadata: {name: weave-cloud, namespace: weave}
spec:
  general: {environment: generic}
"#;

#[test]
fn defaults_are_those_of_a_launcher_install() {
    let wc: WeaveCloud = serde_saphyr::from_str(MINIMAL).unwrap();
    assert_eq!(
        wc.spec.general.token_secret_ref,
        crate::api::weavecloud::SecretKeyRef {
            name: "weave-cloud".into(),
            key: "token".into()
        }
    );
    assert!(wc.spec.general.takeover);
    assert!(!wc.spec.scope.read_only);
    assert_eq!(
        wc.spec.prometheus.pod_scrape_policy,
        PodScrapePolicy::OptOut
    );
    let objs = render(&wc);
    // Scope controls on, as the launcher's default `-agent.read-only=false`.
    assert!(!scope_args_of(&objs)
        .iter()
        .any(|a| a.starts_with("--probe.no-controls")));
    // The token comes from the launcher's Secret.
    let flux = find(&objs, "Deployment", "weave-flux-agent");
    assert!(flux
        .to_string()
        .contains(r#"{"key":"token","name":"weave-cloud"}"#));
}

#[test]
fn memcached_flags_are_read_in_every_shape_the_launcher_and_users_wrote() {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let want = BTreeMap::from([
        ("I".to_string(), "5m".to_string()),
        ("m".to_string(), "512".to_string()),
    ]);
    assert_eq!(
        parse_memcached_args(&s(&["-m 512", "-I 5m", "-p 11211"])),
        want
    );
    assert_eq!(
        parse_memcached_args(&s(&["-m", "512", "-I", "5m", "-vv"])),
        want
    );
    assert_eq!(parse_memcached_args(&s(&["-m512", "-I5m"])), want);
    assert_eq!(
        parse_memcached_args(&s(&["--memory-limit=512", "--max-item-size=5m"])),
        want
    );
    // getopt: the last one wins; unrelated flags are ignored.
    assert_eq!(
        parse_memcached_args(&s(&["-m 64", "-p 11211", "-m 1024"])),
        BTreeMap::from([("m".to_string(), "1024".to_string())])
    );
    assert!(parse_memcached_args(&s(&["-p 11211", "-vv", "-m"])).is_empty());
}

#[test]
fn running_memcached_flags_replace_the_bundle_values_and_are_reported() {
    let inputs = AgentInputs {
        preserved_memcached_args: BTreeMap::from([
            ("m".to_string(), "2048".to_string()),
            ("I".to_string(), "10m".to_string()),
        ]),
        ..Default::default()
    };
    let r = render_with(&example(), &inputs);
    let d = find(&r.objects, "Deployment", "weave-flux-memcached");
    assert_eq!(args(d, "memcached"), vec!["-m 2048", "-p 11211", "-I 10m"]);
    assert_eq!(r.preserved_memcached_args, vec!["-m 2048", "-I 10m"]);
    // Rendering again from what this produced keeps the same args: no drift loop.
    let again = AgentInputs {
        preserved_memcached_args: parse_memcached_args(&args(d, "memcached")),
        ..Default::default()
    };
    let r2 = render_with(&example(), &again);
    assert_eq!(
        args(
            find(&r2.objects, "Deployment", "weave-flux-memcached"),
            "memcached"
        ),
        vec!["-m 2048", "-p 11211", "-I 10m"]
    );
    // Nothing running: the bundle's flags, nothing reported.
    let plain = render_with(&example(), &AgentInputs::default());
    assert_eq!(
        args(
            find(&plain.objects, "Deployment", "weave-flux-memcached"),
            "memcached"
        ),
        vec!["-m 512", "-p 11211", "-I 5m"]
    );
    assert!(plain.preserved_memcached_args.is_empty());
}

#[test]
fn the_runtime_is_detected_from_the_node_as_the_launcher_did() {
    assert_eq!(
        runtime_socket("cri-o://1.28.1"),
        Some("/var/run/crio/crio.sock")
    );
    assert_eq!(
        runtime_socket("containerd://1.7.2"),
        Some("/run/containerd/containerd.sock")
    );
    assert_eq!(runtime_socket("docker://24.0.5"), None);
    assert_eq!(runtime_socket("kwok-v0.6.0"), None);

    let mut wc = example();
    wc.spec.scope.container_runtime_endpoint = None;
    let detected = AgentInputs {
        detected_cri_socket: Some("/run/containerd/containerd.sock".into()),
        ..Default::default()
    };
    let objs = render_with(&wc, &detected).objects;
    let a = scope_args_of(&objs);
    assert!(a.contains(&"--probe.cri.endpoint=unix:///run/containerd/containerd.sock".to_string()));
    assert!(a.contains(&"--probe.docker=false".to_string()));
    let ds = find(&objs, "DaemonSet", "weave-scope-agent");
    assert!(!ds.to_string().contains("docker.sock"));
    // An explicit endpoint wins over the detected runtime.
    wc.spec.scope.container_runtime_endpoint = Some("/var/run/crio.sock".into());
    let a = scope_args_of(&render_with(&wc, &detected).objects);
    assert!(a.contains(&"--probe.cri.endpoint=unix:///var/run/crio.sock".to_string()));
    assert!(!a.iter().any(|x| x.contains("containerd")));
}

#[test]
fn spec_memcached_args_win_over_the_running_ones_and_nothing_else_is_accepted() {
    let inputs = AgentInputs {
        preserved_memcached_args: BTreeMap::from([
            ("m".to_string(), "2048".to_string()),
            ("I".to_string(), "10m".to_string()),
        ]),
        ..Default::default()
    };
    let mut wc = example();
    wc.spec.flux.memcached_args = vec!["-m 64".into()];
    let r = render_with(&wc, &inputs);
    let d = find(&r.objects, "Deployment", "weave-flux-memcached");
    assert_eq!(args(d, "memcached"), vec!["-m 64", "-p 11211", "-I 10m"]);
    // Committed without a record: the same memcached.
    wc.spec.flux.memcached_args = vec!["-m 64".into(), "-I 10m".into()];
    let r = render_with(&wc, &AgentInputs::default());
    let d = find(&r.objects, "Deployment", "weave-flux-memcached");
    assert_eq!(args(d, "memcached"), vec!["-m 64", "-p 11211", "-I 10m"]);
    for bad in [
        "-p 11211",
        "-m lots",
        "-m",
        "--memory-limit=64",
        "-m 64 -vv",
    ] {
        wc.spec.flux.memcached_args = vec![bad.into()];
        let err = render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default())
            .expect_err(bad)
            .to_string();
        assert!(
            err.contains("spec.flux.memcachedArgs[0]") && err.contains(bad),
            "{err}"
        );
    }
}
