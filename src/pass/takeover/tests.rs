//! Unit tests of the takeover's decisions.

use super::*;
use crate::api::weavecloud::WeaveCloud;

fn found(kind: &'static str, namespace: &str, name: &str) -> Found {
    Found {
        kind,
        namespace: Some(namespace.to_string()),
        name: name.to_string(),
        action: Decision::Remove("test"),
    }
}

#[test]
fn only_the_designated_weavecloud_acts_in_kube_system() {
    assert!(designated(
        Some("weave/weave-cloud"),
        "weave",
        "weave-cloud"
    ));
    for (flag, ns, name) in [
        (None, "weave", "weave-cloud"),
        (Some("weave/weave-cloud"), "team-a", "weave-cloud"),
        (Some("weave/weave-cloud"), "weave", "other"),
        (Some("weave/weave-cloud-2"), "weave", "weave-cloud"),
    ] {
        assert!(!designated(flag, ns, name), "{flag:?} {ns}/{name}");
    }
}

#[test]
fn the_deploy_key_is_carried_only_beside_a_launcher_flux_in_kube_system() {
    // A real launcher install: its flux agent in kube-system.
    assert!(launcher_flux_in_kube_system(&[
        found("Service", LAUNCHER_LEGACY_NAMESPACE, "weave-flux-memcached"),
        found("Deployment", LAUNCHER_LEGACY_NAMESPACE, "weave-flux-agent"),
    ]));
    // Nothing found, a flux in the WeaveCloud's own namespace, or other agents only: no copy.
    for f in [
        vec![],
        vec![found("Deployment", "weave", "weave-flux-agent")],
        vec![found(
            "DaemonSet",
            LAUNCHER_LEGACY_NAMESPACE,
            "weave-scope-agent",
        )],
    ] {
        assert!(!launcher_flux_in_kube_system(&f), "{f:?}");
    }
}

use kube::api::DynamicObject;
use serde_json::Value;

use super::decide::decide;
use super::live::{Key, Live};
use crate::render::{DesiredObject, Owner};

fn object(
    kind: &'static str,
    namespace: Option<&str>,
    name: &str,
    rest: Value,
) -> (Key, DynamicObject) {
    let mut v = json!({"apiVersion": api_resource(kind).api_version, "kind": kind,
        "metadata": {"name": name}});
    if let Some(ns) = namespace {
        v["metadata"]["namespace"] = json!(ns);
    }
    if let (Some(into), Some(from)) = (v.as_object_mut(), rest.as_object()) {
        for (k, x) in from {
            if k == "labels" {
                into["metadata"]["labels"] = x.clone();
            } else {
                into.insert(k.clone(), x.clone());
            }
        }
    }
    let o: DynamicObject = serde_json::from_value(v).expect("object");
    ((kind, namespace.map(str::to_string), name.to_string()), o)
}

/// A launcher agent workload: the four labels on the object, the selector and the template.
fn agent(kind: &'static str, ns: &str, name: &str, app: &str) -> (Key, DynamicObject) {
    let component = app.strip_prefix("weave-").unwrap_or(app);
    let labels = json!({"name": name, "app": app, "weave-cloud-component": component,
        format!("{app}-component"): "agent"});
    let rest = if matches!(kind, "Deployment" | "DaemonSet") {
        json!({"labels": labels, "spec": {"selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}}}})
    } else {
        json!({"labels": labels})
    };
    object(kind, Some(ns), name, rest)
}

fn all_rights() -> Value {
    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]}])
}

/// ServiceAccount, ClusterRole (`*`) and ClusterRoleBinding `name`, bound in `ns`.
fn launcher_rbac(name: &str, ns: &str) -> Vec<(Key, DynamicObject)> {
    let labels = json!({"name": name});
    vec![
        object("ServiceAccount", Some(ns), name, json!({"labels": labels})),
        object(
            "ClusterRole",
            None,
            name,
            json!({"labels": labels, "rules": all_rights()}),
        ),
        object(
            "ClusterRoleBinding",
            None,
            name,
            json!({"labels": labels,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        ),
    ]
}

/// The launcher's install in `ns` (FACTS.md §1, §2), as the API server returns it.
fn launcher_install(ns: &str) -> Vec<(Key, DynamicObject)> {
    let mut out = vec![object(
        "Deployment",
        Some(ns),
        "weave-agent",
        json!({
        "spec": {"selector": {"matchLabels": {"name": "weave-agent"}},
            "template": {"metadata": {"labels": {"name": "weave-agent"}}}}}),
    )];
    out.push(object("ServiceAccount", Some(ns), "weave-agent", json!({})));
    for (kind, name, app) in [
        ("Deployment", "weave-flux-agent", "weave-flux"),
        ("Deployment", "weave-flux-memcached", "weave-flux"),
        ("Service", "weave-flux-memcached", "weave-flux"),
        ("DaemonSet", "weave-scope-agent", "weave-scope"),
        ("Deployment", "prometheus", "weave-cortex"),
        ("DaemonSet", "prom-node-exporter", "weave-cortex"),
    ] {
        out.push(agent(kind, ns, name, app));
    }
    out.push(object("Secret", Some(ns), "flux-git-deploy", json!({})));
    for name in ["weave-agent", "weave-flux", "weave-scope", "weave-cortex"] {
        out.extend(
            launcher_rbac(name, ns)
                .into_iter()
                .filter(|((k, _, n), _)| !(*k == "ServiceAccount" && *n == "weave-agent")),
        );
    }
    out
}

/// Weft's agents in `ns`: flux (selecting `name` only), its ServiceAccount, Service and key.
fn weft_agents(ns: &str) -> Vec<DesiredObject> {
    let owner = crate::pass::agents::owner_of(ns, "weave-cloud");
    let sel = json!({"matchLabels": {"name": "weave-flux-agent"}});
    [
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "weave-flux-agent", "namespace": ns}, "spec": {"selector": sel}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "weave-flux", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "weave-flux-memcached", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "flux-git-deploy", "namespace": ns}}),
    ]
    .into_iter()
    .map(|v| Owner::adopt(&owner, v, 0, None))
    .collect()
}

fn plan(found: &[Found]) -> Vec<(String, Option<&'static str>)> {
    found
        .iter()
        .map(|f| {
            let why = match f.action {
                Decision::Remove(why) => Some(why),
                Decision::Adopt => None,
            };
            (f.reference(), why)
        })
        .collect()
}

#[test]
fn a_launcher_install_is_removed_recreated_and_adopted_in_order() {
    let live = Live::from_objects(launcher_install("weave"));
    let found = decide(&live, "weave", &weft_agents("weave"), false);
    let plan = plan(&found);
    let position = |r: &str| {
        plan.iter()
            .position(|(x, _)| x == r)
            .unwrap_or_else(|| panic!("{r} in {plan:?}"))
    };
    // weave-agent first, so it stops re-applying; cluster roles last.
    assert_eq!(plan[0].0, "Deployment/weave/weave-agent");
    assert!(position("ServiceAccount/weave/weave-agent") < position("Deployment/weave/prometheus"));
    assert!(position("ClusterRoleBinding/weave-flux") < position("ClusterRole/weave-flux"));
    let why = |r: &str| plan[position(r)].1;
    assert_eq!(
        why("Deployment/weave/weave-flux-agent"),
        Some("recreated by Weft: its selector cannot change")
    );
    assert_eq!(
        why("Deployment/weave/prometheus"),
        Some("replaced by Weft's agent under another name")
    );
    assert_eq!(why("ServiceAccount/weave/weave-flux"), None, "adopted");
    assert_eq!(why("Service/weave/weave-flux-memcached"), None, "adopted");
    assert_eq!(
        why("Secret/weave/flux-git-deploy"),
        None,
        "the deploy key is adopted, never removed"
    );
    // A ServiceAccount Weft does not render here is replaced in the WeaveCloud's namespace.
    assert!(why("ServiceAccount/weave/weave-scope").is_some());
    assert!(why("ClusterRole/weave-agent").is_some());
}

#[test]
fn a_workload_whose_selector_fits_is_adopted_not_recreated() {
    let mut objects = launcher_install("weave");
    let labels = json!({"name": "weave-flux-agent", "app": "weave-flux",
        "weave-cloud-component": "flux", "weave-flux-component": "agent"});
    objects.push(object(
        "Deployment",
        Some("weave"),
        "weave-flux-agent",
        json!({"labels": labels,
        "spec": {"selector": {"matchLabels": {"name": "weave-flux-agent"}}}}),
    ));
    let found = decide(
        &Live::from_objects(objects),
        "weave",
        &weft_agents("weave"),
        false,
    );
    let flux = found
        .iter()
        .find(|f| f.name == "weave-flux-agent")
        .expect("flux");
    assert_eq!(flux.action, Decision::Adopt);
}

#[test]
fn standalone_scope_and_objects_weft_or_another_tool_owns_are_never_the_launchers() {
    let mut objects = launcher_install("weave");
    objects.push(object(
        "Deployment",
        Some("weave"),
        "weave-scope-app",
        json!({}),
    ));
    // Weft's own prometheus, and a weave-cortex role another tool binds.
    let (k, mut p) = agent("Deployment", "weave", "prometheus", "weave-cortex");
    p.metadata.labels.get_or_insert_default().insert(
        crate::render::ownership::MANAGED_BY_LABEL.into(),
        crate::render::ownership::MANAGED_BY_VALUE.into(),
    );
    objects.retain(|(key, _)| {
        *key != k && !(key.0 == "ClusterRoleBinding" && key.2 == "weave-cortex")
    });
    objects.push((k, p));
    objects.push(object("ClusterRoleBinding", None, "weave-cortex", json!({"labels": {"name": "weave-cortex"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "weave-cortex"},
        "subjects": [{"kind": "ServiceAccount", "name": "monitoring", "namespace": "other"}]})));
    let found = decide(
        &Live::from_objects(objects),
        "weave",
        &weft_agents("weave"),
        false,
    );
    let refs: Vec<String> = found.iter().map(Found::reference).collect();
    for absent in [
        "DaemonSet/weave/weave-scope-agent",
        "ServiceAccount/weave/weave-scope",
        "ClusterRole/weave-scope",
        "ClusterRoleBinding/weave-scope",
        "Deployment/weave/prometheus",
        "ClusterRole/weave-cortex",
        "ClusterRoleBinding/weave-cortex",
    ] {
        assert!(
            !refs.iter().any(|r| r == absent),
            "{absent} is not the launcher's: {refs:?}"
        );
    }
    assert!(
        refs.iter()
            .any(|r| r == "DaemonSet/weave/prom-node-exporter"),
        "{refs:?}"
    );
}

#[test]
fn kube_system_is_looked_at_only_for_the_designated_weavecloud() {
    let mut objects: Vec<_> = launcher_install(LAUNCHER_LEGACY_NAMESPACE)
        .into_iter()
        .filter(|(k, _)| k.2 != "weave-agent")
        .collect();
    objects.retain(|(k, _)| k.0 != "Secret");
    let live = Live::from_objects(objects);
    assert!(decide(&live, "weave", &weft_agents("weave"), false).is_empty());
    assert!(decide(&live, LAUNCHER_LEGACY_NAMESPACE, &[], false).is_empty());
    let found = decide(&live, "weave", &weft_agents("weave"), true);
    let flux = found
        .iter()
        .find(|f| f.reference() == "Deployment/kube-system/weave-flux-agent")
        .expect("kube-system's flux");
    assert_eq!(
        flux.action,
        Decision::Remove("replaced by Weft's agent in the WeaveCloud's namespace")
    );
    assert!(
        found.iter().all(|f| f.action != Decision::Adopt),
        "nothing in kube-system is adopted: {found:?}"
    );
    assert!(found
        .iter()
        .any(|f| f.reference() == "ClusterRoleBinding/weave-flux"));
}

/// A launcher flux a user customised: a known_hosts ConfigMap, a hostPath volume, a sidecar.
fn customised_launcher_flux() -> Value {
    json!({"spec": {"template": {"spec": {
        "containers": [
            {"name": "flux-agent", "args": [
                "--token=$(WEAVE_CLOUD_TOKEN)", "--connect=wss://cloud.weave.works./api/flux",
                "--git-url=ssh://git@git.internal:2222/ops/config.git", "--git-branch=prod",
                "--git-poll-interval=2m", "--git-readonly", "--sync-state=secret"],
             "env": [{"name": "WEAVE_CLOUD_TOKEN"}, {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
             "volumeMounts": [
                {"name": "git-key", "mountPath": "/etc/fluxd/ssh"},
                {"name": "ssh-config", "mountPath": "/root/.ssh"},
                {"name": "docker", "mountPath": "/var/run/docker.sock"}]},
            {"name": "logger", "image": "busybox"}],
        "volumes": [
            {"name": "git-key", "secret": {"secretName": "flux-git-deploy"}},
            {"name": "ssh-config", "configMap": {"name": "flux-ssh-config"}},
            {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}]}}}})
}

#[test]
fn the_record_keeps_every_flag_and_configmap_volume_and_names_what_it_drops() {
    let memcached = vec![
        "-m 1024".to_string(),
        "-I 8m".to_string(),
        "-p 11211".to_string(),
    ];
    let r = record::Record::from_launcher(&customised_launcher_flux(), "flux-agent", &memcached);
    assert_eq!(
        r.flux_args,
        [
            "--git-url=ssh://git@git.internal:2222/ops/config.git",
            "--git-branch=prod",
            "--git-poll-interval=2m",
            "--git-readonly",
            "--sync-state=secret"
        ]
    );
    assert_eq!(r.memcached_args, ["-I 8m", "-m 1024"]);
    assert_eq!(
        r.volumes,
        [json!({"name": "ssh-config", "configMap": {"name": "flux-ssh-config"}})]
    );
    assert_eq!(
        r.volume_mounts,
        [json!({"name": "ssh-config", "mountPath": "/root/.ssh"})]
    );
    assert_eq!(
        r.extra_flux_args(),
        ["--git-readonly", "--sync-state=secret"]
    );
    // The proxy is carried over (issue 44 item 4); the token's variable is Weft's own.
    assert_eq!(
        r.env,
        [json!({"name": "HTTPS_PROXY", "value": "http://proxy:3128"})]
    );
    assert!(
        !r.dropped.iter().any(|d| d.starts_with("env")),
        "{:?}",
        r.dropped
    );
    for dropped in ["volume docker (hostPath", "container logger"] {
        assert!(
            r.dropped.iter().any(|d| d.starts_with(dropped)),
            "{dropped} in {:?}",
            r.dropped
        );
    }
}

#[test]
fn the_yaml_to_commit_holds_what_the_spec_does_not_say_yet() {
    let r = record::Record::from_launcher(&customised_launcher_flux(), "flux-agent", &[]);
    let mut wc: WeaveCloud = serde_json::from_value(json!({
        "apiVersion": "cloud.weave.works/v1beta1", "kind": "WeaveCloud",
        "metadata": {"name": "weave-cloud", "namespace": "weave"},
        "spec": {"general": {"environment": "generic"},
                 "flux": {"config": {"gitBranch": "main"}, "appendArgs": ["--git-readonly"]}}
    }))
    .expect("a WeaveCloud");
    let yaml = record::commit_yaml(&r, &wc);
    let doc: Value = serde_saphyr::from_str(&yaml).expect("YAML");
    let flux = &doc["spec"]["flux"];
    // gitBranch is the spec's already; gitUrl is not.
    assert_eq!(
        flux["config"],
        json!({"gitUrl": "ssh://git@git.internal:2222/ops/config.git"})
    );
    assert_eq!(
        flux["appendArgs"],
        json!([
            "--git-readonly",
            "--git-poll-interval=2m",
            "--sync-state=secret"
        ]),
        "{yaml}"
    );
    assert_eq!(flux["volumes"][0]["name"], "ssh-config");
    assert_eq!(flux["volumeMounts"][0]["mountPath"], "/root/.ssh");
    // Committed: the WeaveCloud with that spec needs nothing more.
    wc.spec.flux.config.git_url = Some("ssh://git@git.internal:2222/ops/config.git".into());
    wc.spec.flux.append_args = serde_json::from_value(flux["appendArgs"].clone()).expect("args");
    wc.spec.flux.volumes = serde_json::from_value(flux["volumes"].clone()).expect("volumes");
    wc.spec.flux.volume_mounts =
        serde_json::from_value(flux["volumeMounts"].clone()).expect("mounts");
    // The proxy is carried over, and so asked for (issue 44 item 4).
    assert_eq!(
        flux["env"],
        json!([{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}])
    );
    wc.spec.flux.env = serde_json::from_value(flux["env"].clone()).expect("env");
    assert_eq!(record::commit_yaml(&r, &wc), "");
}

#[test]
fn a_record_is_named_by_namespace_and_name_within_a_configmap_name() {
    assert_eq!(
        record::record_name("weave", "weave-cloud"),
        "weft-takeover-weave.weave-cloud"
    );
    // A namespace has no dot: `a-b`/`c` and `a`/`b-c` never meet.
    assert_ne!(
        record::record_name("a-b", "c"),
        record::record_name("a", "b-c")
    );
    let long = "x".repeat(253);
    let name = record::record_name("weave", &long);
    assert!(
        name.len() <= 253 && name.starts_with("weft-takeover-"),
        "{name}"
    );
    assert_ne!(name, record::record_name("weave2", &long));
}

#[test]
fn a_captured_record_reads_back_and_a_planted_one_is_refused() {
    let r =
        record::Record::from_launcher(&customised_launcher_flux(), "flux-agent", &["-m 64".into()]);
    assert_eq!(record::validate(&r), Ok(()));
    // Issue 48 item 1: what a record may hold is what a takeover keeps, within bounds.
    let refused = |r: record::Record, why: &str| {
        let err = record::validate(&r).expect_err(why);
        assert!(err.contains(why), "{err}");
    };
    let with_args = |args: &[&str]| record::Record {
        flux_args: args.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    refused(
        with_args(&["--token=stolen"]),
        "--token is generated by Weft",
    );
    refused(
        with_args(&["--connect=wss://evil.example"]),
        "--connect is generated by Weft",
    );
    refused(with_args(&["git-url=x"]), "not a --flag");
    refused(with_args(&["--git-url=a\nb"]), "control character");
    refused(
        with_args(&[&format!("--git-url={}", "x".repeat(2000))]),
        "longer than 1024 bytes",
    );
    let many: Vec<String> = (0..65).map(|i| format!("--f{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    refused(with_args(&many), "more than 64 flux flags");
    refused(
        record::Record {
            memcached_args: vec!["-p 11211".into()],
            ..Default::default()
        },
        "memcached flag -p 11211",
    );
    let with_volume = |v: Value, m: Value| record::Record {
        volumes: vec![v],
        volume_mounts: vec![m],
        ..Default::default()
    };
    refused(
        with_volume(
            json!({"name": "root", "hostPath": {"path": "/"}}),
            json!({"name": "root", "mountPath": "/host"}),
        ),
        "only configMap, secret, emptyDir volumes",
    );
    refused(
        with_volume(
            json!({"name": "key", "secret": {"secretName": "flux-git-deploy"}}),
            json!({"name": "key", "mountPath": "/k"}),
        ),
        "the deploy key's volume is Weft's own",
    );
    refused(
        with_volume(
            json!({"name": "c", "configMap": {"name": "c"}}),
            json!({"name": "c", "mountPath": "/c", "mountPropagation": "Bidirectional"}),
        ),
        "`mountPropagation` is not carried over",
    );
    refused(
        with_volume(
            json!({"name": "c", "configMap": {"name": "c"}}),
            json!({"name": "other", "mountPath": "/c"}),
        ),
        "not of a kept volume",
    );
    refused(
        with_volume(
            json!({"name": "c", "configMap": {"name": "c"}}),
            json!({"name": "c", "mountPath": "/c", "subPath": "../../etc"}),
        ),
        "subPath leaves the volume",
    );
    refused(
        record::Record {
            dropped: vec!["x".repeat(600)],
            ..Default::default()
        },
        "longer than 512 bytes",
    );
}

#[test]
fn a_capture_beyond_the_bounds_keeps_what_fits_and_says_what_it_dropped() {
    let mut flux = customised_launcher_flux();
    let args = flux["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap();
    for i in 0..80 {
        args.push(json!(format!("--extra-{i}=v")));
    }
    args.push(json!("--token=$(OTHER)"));
    args.push(json!(format!("--long={}", "y".repeat(5000))));
    let r = record::Record::from_launcher(&flux, "flux-agent", &[]);
    assert_eq!(r.flux_args.len(), 64);
    assert!(r.flux_args.iter().all(|a| !a.starts_with("--long")));
    assert!(
        r.dropped.iter().any(|d| d.contains("more than 64 flags")),
        "{:?}",
        r.dropped
    );
    assert!(r.dropped.len() <= 32 && r.dropped.iter().all(|d| d.len() <= 512));
    assert_eq!(record::validate(&r), Ok(()));
}

/// The kube-system launcher's flux (issue 44 item 3): what the bundle generates itself is not
/// asked for, memcached's `-m`/`-I` are, and a commit leaves nothing more to commit.
#[test]
fn the_yaml_to_commit_leaves_out_what_the_bundle_generates_and_keeps_memcached_sizes() {
    let flux = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "args": [
        "--token=literal", "--connect=wss://cloud.weave.works/api/flux",
        "--memcached-hostname=weave-flux-memcached.kube-system.svc.cluster.local",
        "--memcached-service=", "--git-url=git@github.com:example/config.git",
        "--git-poll-interval=2m", "--git-readonly"]}]}}}});
    let memcached = vec!["-m 64".to_string(), "-I 8m".to_string()];
    let r = record::Record::from_launcher(&flux, "flux-agent", &memcached);
    let mut wc: WeaveCloud = serde_json::from_value(json!({
        "apiVersion": "cloud.weave.works/v1beta1", "kind": "WeaveCloud",
        "metadata": {"name": "weave-cloud", "namespace": "weave"},
        "spec": {"general": {"environment": "generic"}}
    }))
    .expect("a WeaveCloud");
    let yaml = record::commit_yaml(&r, &wc);
    assert!(!yaml.contains("memcached-hostname"), "{yaml}");
    assert!(!yaml.contains("memcached-service"), "{yaml}");
    assert!(!yaml.contains("kube-system"), "{yaml}");
    let doc: Value = serde_saphyr::from_str(&yaml).expect("YAML");
    let flux = &doc["spec"]["flux"];
    assert_eq!(
        flux["appendArgs"],
        json!(["--git-poll-interval=2m", "--git-readonly"]),
        "{yaml}"
    );
    assert_eq!(flux["memcachedArgs"], json!(["-I 8m", "-m 64"]), "{yaml}");
    wc.spec.flux.config.git_url = flux["config"]["gitUrl"].as_str().map(str::to_string);
    wc.spec.flux.append_args = serde_json::from_value(flux["appendArgs"].clone()).expect("args");
    wc.spec.flux.memcached_args =
        serde_json::from_value(flux["memcachedArgs"].clone()).expect("memcached");
    assert_eq!(record::commit_yaml(&r, &wc), "");
}

#[test]
fn what_is_dropped_is_acknowledged_by_the_start_of_its_entry() {
    let r = record::Record::from_launcher(&customised_launcher_flux(), "flux-agent", &[]);
    let ack = |list: &[&str]| -> Vec<String> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        r.dropped
            .iter()
            .filter(|d| !record::acknowledged(d, &list))
            .cloned()
            .collect()
    };
    assert_eq!(ack(&[]).len(), 2, "{:?}", r.dropped);
    assert_eq!(
        ack(&["volume docker", "container logger"]),
        Vec::<String>::new()
    );
    // Not a prefix of a word: `volume dock` is not `volume docker`.
    assert_eq!(ack(&["volume dock", "container logger"]).len(), 1);
    assert_eq!(ack(&["", " "]).len(), 2);
}

#[test]
fn a_record_with_an_env_var_weft_would_not_set_is_refused() {
    for (env, why) in [
        (
            json!({"name": "WEAVE_CLOUD_TOKEN", "value": "x"}),
            "set by Weft",
        ),
        (
            json!({"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}),
            "valueFrom",
        ),
        (
            json!({"name": "1X", "value": "x"}),
            "not an environment variable name",
        ),
    ] {
        let r = record::Record {
            env: vec![env.clone()],
            ..Default::default()
        };
        let err = record::validate(&r).expect_err("refused");
        assert!(err.contains(why), "{env}: {err}");
    }
}

/// weave-agent installed with the `weave-cloud` Helm chart: its ClusterRole and binding are
/// named after the release and labelled by the chart (issue 44 item 7); they go with it. A role
/// of another release, or one bound to someone else, stays.
#[test]
fn the_helm_chart_s_release_named_rbac_goes_with_weave_agent() {
    let helm = json!({"app": "weave-cloud", "chart": "weave-cloud-0.3.0", "release": "wc", "heritage": "Tiller"});
    let mut objects = launcher_install("weave");
    objects.retain(|((k, _, n), _)| !(*k == "Deployment" && n == "weave-agent"));
    objects.push(object(
        "Deployment",
        Some("weave"),
        "weave-agent",
        json!({"labels": helm, "spec": {"selector": {"matchLabels": {"name": "weave-agent"}},
            "template": {"metadata": {"labels": {"name": "weave-agent"}},
                "spec": {"serviceAccountName": "wc-weave-cloud"}}}}),
    ));
    objects.push(object(
        "ServiceAccount",
        Some("weave"),
        "wc-weave-cloud",
        json!({"labels": helm}),
    ));
    objects.push(object(
        "ClusterRole",
        None,
        "wc-weave-cloud",
        json!({"labels": helm, "rules": all_rights()}),
    ));
    let binding = |subject: &str| {
        object(
            "ClusterRoleBinding",
            None,
            "wc-weave-cloud",
            json!({"labels": helm,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "wc-weave-cloud"},
                "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": "weave"}]}),
        )
    };
    let mut ours = objects.clone();
    ours.push(binding("wc-weave-cloud"));
    let taken = plan(&decide(
        &Live::from_objects(ours),
        "weave",
        &weft_agents("weave"),
        false,
    ));
    for removed in [
        "ServiceAccount/weave/wc-weave-cloud",
        "ClusterRoleBinding/wc-weave-cloud",
        "ClusterRole/wc-weave-cloud",
    ] {
        assert!(
            taken.iter().any(|(r, why)| r == removed && why.is_some()),
            "{removed} in {taken:?}"
        );
    }
    // Bound to another account: neither the binding nor its role is the chart's to remove.
    let mut other = objects;
    other.push(binding("someone-else"));
    let left = plan(&decide(
        &Live::from_objects(other),
        "weave",
        &weft_agents("weave"),
        false,
    ));
    assert!(
        !left
            .iter()
            .any(|(r, _)| r.ends_with("/wc-weave-cloud") && r.starts_with("Cluster")),
        "{left:?}"
    );
}
