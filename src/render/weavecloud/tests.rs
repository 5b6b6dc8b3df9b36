//! The option contract of `docs/agents.md`, clause by clause, and the golden files.

use super::*;
use crate::api::keys::OWNER_LABEL;
use crate::api::keys::OWNER_REF_ANNOTATION;
use crate::api::owner::OwnerKind;
use crate::api::weavecloud::{Environment, PodScrapePolicy};
use crate::render::bundle::CLUSTER_SCOPED_KINDS;

mod inputs;
mod preserved;

const EXAMPLE: &str = r#"
apiVersion: cloud.weave.works/v1beta1
kind: WeaveCloud
metadata: {name: weave-cloud, namespace: weave}
spec:
  general:
    environment: gke
    autoUpdate: true
    updateSchedule: "0 * * * *"
    agentVersion: "1.x"
    wcHostname: cloud.weave.works
    wcReportErrors: false
    tokenSecretRef: {name: weave-cloud, key: token}
  flux:
    disable: false
    config: {gitLabel: label, gitUrl: url, gitPath: path, gitBranch: branch}
    appendArgs: []
  scope:
    disable: false
    readOnly: true
    containerRuntimeEndpoint: /var/run/crio.sock
    kubernetesProbe: true
    appendArgs: []
  prometheus:
    disable: false
    podScrapePolicy: optIn
    appendArgs: []
"#;

fn example() -> WeaveCloud {
    serde_saphyr::from_str(EXAMPLE).unwrap()
}

fn render_with(wc: &WeaveCloud, inputs: &AgentInputs) -> RenderedAgents {
    render_agents(wc, Bundle::builtin().unwrap(), inputs).unwrap()
}

fn render(wc: &WeaveCloud) -> Vec<DesiredObject> {
    render_with(wc, &AgentInputs::default()).objects
}

/// The object `kind/name` of `objs`, parsed. Leaked so that the helpers below can hand out
/// references into it, as they did when objects were kept as `Value`s (a few KB per test).
fn find(objs: &[DesiredObject], kind: &str, name: &str) -> &'static Value {
    let value = objs
        .iter()
        .find(|o| o.kind() == kind && o.name() == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
        .object
        .value();
    Box::leak(Box::new(value))
}

fn container<'a>(obj: &'a Value, name: &str) -> &'a Value {
    obj.pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

fn args(obj: &Value, name: &str) -> Vec<String> {
    container(obj, name)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn flux_args_of(objs: &[DesiredObject]) -> Vec<String> {
    args(find(objs, "Deployment", "weave-flux-agent"), "flux-agent")
}
fn scope_args_of(objs: &[DesiredObject]) -> Vec<String> {
    args(find(objs, "DaemonSet", "weave-scope-agent"), "scope-agent")
}
fn prometheus_yml(objs: &[DesiredObject]) -> Value {
    let text = find(objs, "ConfigMap", "weave-cortex-agent-config")["data"]["prometheus.yml"]
        .as_str()
        .unwrap();
    serde_saphyr::from_str(text).unwrap()
}
fn pods_job_rules(objs: &[DesiredObject]) -> Vec<Value> {
    let config = prometheus_yml(objs);
    let jobs = config["scrape_configs"].as_array().unwrap();
    let pods = jobs
        .iter()
        .find(|j| j["job_name"] == "kubernetes-pods")
        .unwrap();
    pods["relabel_configs"].as_array().unwrap().clone()
}
fn names(objs: &[DesiredObject]) -> Vec<String> {
    objs.iter()
        .map(|o| format!("{}/{}", o.kind(), o.name()))
        .collect()
}

// ---- flux ----

#[test]
fn flux_gets_its_git_settings_connect_url_and_token_reference() {
    let objs = render(&example());
    let a = flux_args_of(&objs);
    let tail: Vec<&str> = a
        .iter()
        .map(String::as_str)
        .skip_while(|a| !a.starts_with("--token"))
        .collect();
    assert_eq!(
        tail,
        vec![
            "--token=$(WEAVE_CLOUD_TOKEN)",
            "--connect=wss://cloud.weave.works/api/flux",
            "--git-url=url",
            "--git-branch=branch",
            "--git-path=path",
            "--git-label=label",
        ]
    );
    // The template's own arguments come first, untouched.
    assert_eq!(a[0], "--memcached-hostname=weave-flux-memcached");
}

#[test]
fn unset_flux_config_fields_are_omitted() {
    let mut wc = example();
    wc.spec.flux.config = Default::default();
    wc.spec.flux.config.git_url = Some("git@github.com:org/repo".into());
    wc.spec.flux.config.git_branch = Some(String::new());
    let a = flux_args_of(&render(&wc));
    assert!(a.contains(&"--git-url=git@github.com:org/repo".to_string()));
    for flag in ["--git-branch", "--git-path", "--git-label"] {
        assert!(!a.iter().any(|x| x.starts_with(flag)), "{flag} in {a:?}");
    }
}

#[test]
fn memcached_runs_alongside_flux() {
    let objs = render(&example());
    let names = names(&objs);
    assert!(names.contains(&"Deployment/weave-flux-memcached".to_string()));
    assert!(names.contains(&"Service/weave-flux-memcached".to_string()));
}

// ---- scope ----

#[test]
fn scope_read_only_adds_no_controls_and_false_leaves_it_out() {
    let mut wc = example();
    assert!(scope_args_of(&render(&wc)).contains(&"--probe.no-controls=true".to_string()));
    wc.spec.scope.read_only = false;
    let a = scope_args_of(&render(&wc));
    assert!(
        !a.iter().any(|x| x.starts_with("--probe.no-controls")),
        "{a:?}"
    );
}

#[test]
fn scope_container_runtime_endpoint_enables_cri_and_mounts_the_socket() {
    let mut wc = example();
    let objs = render(&wc);
    let a = scope_args_of(&objs);
    assert!(a.contains(&"--probe.cri=true".to_string()));
    assert!(a.contains(&"--probe.cri.endpoint=unix:///var/run/crio.sock".to_string()));
    let ds = find(&objs, "DaemonSet", "weave-scope-agent");
    let volumes = ds
        .pointer("/spec/template/spec/volumes")
        .unwrap()
        .as_array()
        .unwrap();
    assert!(volumes.contains(
        &json!({"name": "cri-socket", "hostPath": {"path": "/var/run/crio.sock", "type": "Socket"}})
    ));
    let mounts = container(ds, "scope-agent")["volumeMounts"]
        .as_array()
        .unwrap();
    assert!(mounts.contains(&json!({"name": "cri-socket", "mountPath": "/var/run/crio.sock"})));
    // No Docker with a CRI runtime: the Docker probe is off and its socket is not mounted.
    assert!(a.contains(&"--probe.docker=false".to_string()));
    assert!(!a.contains(&"--probe.docker=true".to_string()));
    assert!(!ds.to_string().contains("docker.sock"));

    // A user who wrote the unix:// scheme gets the same, not unix://unix://.
    wc.spec.scope.container_runtime_endpoint =
        Some("unix:///run/containerd/containerd.sock".into());
    assert!(scope_args_of(&render(&wc))
        .contains(&"--probe.cri.endpoint=unix:///run/containerd/containerd.sock".to_string()));

    wc.spec.scope.container_runtime_endpoint = None;
    let objs = render(&wc);
    assert!(!scope_args_of(&objs)
        .iter()
        .any(|x| x.starts_with("--probe.cri")));
    let ds = find(&objs, "DaemonSet", "weave-scope-agent");
    assert!(!ds.to_string().contains("cri-socket"));
    assert!(ds.to_string().contains("/var/run/docker.sock"));
    assert!(scope_args_of(&objs).contains(&"--probe.docker=true".to_string()));
}

#[test]
fn scope_kubernetes_probe_true_and_false() {
    let mut wc = example();
    assert!(scope_args_of(&render(&wc)).contains(&"--probe.kubernetes=true".to_string()));
    wc.spec.scope.kubernetes_probe = false;
    let a = scope_args_of(&render(&wc));
    assert!(a.contains(&"--probe.kubernetes=false".to_string()));
    assert!(!a.contains(&"--probe.kubernetes=true".to_string()));
}

#[test]
fn scope_has_one_cluster_agent_with_its_own_rbac_beside_the_node_probe() {
    let mut wc = example();
    wc.spec.scope.append_args = vec!["--probe.spy.interval=5s".into()];
    let objs = render(&wc);
    let dep = find(&objs, "Deployment", "weave-scope-cluster-agent");
    assert_eq!(dep["spec"]["replicas"], 1);
    assert_eq!(
        dep.pointer("/spec/template/spec/serviceAccountName")
            .unwrap(),
        "weave-scope-cluster-agent"
    );
    let a = args(dep, "scope-cluster-agent");
    assert_eq!(
        a,
        vec![
            "--mode=probe",
            "--probe-only",
            "--probe.kubernetes.role=cluster",
            "--probe.token=$(WEAVE_CLOUD_TOKEN)",
            "--probe.kubernetes=true",
            "--probe.no-controls=true",
            "https://cloud.weave.works",
        ],
        "no CRI flags, no appendArgs (those are the node probe's), the target last"
    );
    assert!(!dep.to_string().contains("cri-socket"), "{dep}");
    let env = container(dep, "scope-cluster-agent")["env"]
        .as_array()
        .unwrap()
        .clone();
    assert!(env.contains(&json!({"name": "WEAVE_CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "weave-cloud", "key": "token"}}})));
    assert!(dep
        .pointer(&format!(
            "/spec/template/metadata/annotations/{}",
            TOKEN_HASH_ANNOTATION.replace('/', "~1")
        ))
        .is_some());
    // Its RBAC: a ServiceAccount, a ClusterRole that lists and watches what Scope shows, and a
    // binding of the two in this WeaveCloud's namespace.
    let role = find(&objs, "ClusterRole", "weave-scope-cluster-agent:weave");
    let rules = role["rules"].as_array().unwrap();
    for (group, resource) in [
        ("", "pods"),
        ("", "services"),
        ("", "nodes"),
        ("apps", "deployments"),
        ("batch", "jobs"),
    ] {
        assert!(
            rules.iter().any(
                |r| r["apiGroups"].as_array().unwrap().contains(&json!(group))
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(resource))
                    && r["verbs"].as_array().unwrap().contains(&json!("list"))
                    && r["verbs"].as_array().unwrap().contains(&json!("watch"))
            ),
            "list/watch {group}/{resource}"
        );
    }
    let binding = find(
        &objs,
        "ClusterRoleBinding",
        "weave-scope-cluster-agent:weave",
    );
    assert_eq!(
        binding["roleRef"]["name"],
        "weave-scope-cluster-agent:weave"
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "weave-scope-cluster-agent", "namespace": "weave"}])
    );
    find(&objs, "ServiceAccount", "weave-scope-cluster-agent");

    // readOnly false: controls on, in both probes.
    wc.spec.scope.read_only = false;
    let objs = render(&wc);
    let dep = find(&objs, "Deployment", "weave-scope-cluster-agent");
    assert!(!args(dep, "scope-cluster-agent").contains(&"--probe.no-controls=true".to_string()));
    // scope disabled: none of it.
    wc.spec.scope.disable = true;
    assert!(!names(&render(&wc))
        .iter()
        .any(|n| n.contains("weave-scope")));
}

#[test]
fn scope_reports_to_the_weave_cloud_hostname_as_its_last_argument() {
    let mut wc = example();
    wc.spec.general.wc_hostname = "frontend.dev.weave.works".into();
    let a = scope_args_of(&render(&wc));
    assert_eq!(a.last().unwrap(), "https://frontend.dev.weave.works");
}

#[test]
fn disabled_scope_renders_no_scope_object_at_all() {
    let mut wc = example();
    wc.spec.scope.disable = true;
    let objs = render(&wc);
    for o in &objs {
        assert!(!o.name().contains("scope"), "{} {}", o.kind(), o.name());
        let v = o.object.value();
        let component = v.pointer("/metadata/labels/weave-cloud-component");
        assert_ne!(component, Some(&json!("scope")));
    }
    assert!(names(&objs).contains(&"Deployment/weave-flux-agent".to_string()));
}

#[test]
fn disabled_flux_and_prometheus_render_none_of_their_objects() {
    let mut wc = example();
    wc.spec.flux.disable = true;
    wc.spec.prometheus.disable = true;
    let objs = render(&wc);
    for o in &objs {
        let v = o.object.value();
        let component = v
            .pointer("/metadata/labels/weave-cloud-component")
            .and_then(Value::as_str);
        assert_eq!(component, Some("scope"), "{} {}", o.kind(), o.name());
    }
    assert!(!objs.is_empty());
}

// ---- prometheus ----

#[test]
fn opt_in_keeps_only_pods_annotated_true() {
    let objs = render(&example());
    let rules = pods_job_rules(&objs);
    assert_eq!(
        rules[0],
        json!({"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"], "action": "keep", "regex": "true"})
    );
    assert!(!rules
        .iter()
        .any(|r| r["action"] == "drop" && r["regex"] == "false"));
}

#[test]
fn opt_out_drops_only_pods_annotated_false() {
    let mut wc = example();
    wc.spec.prometheus.pod_scrape_policy = PodScrapePolicy::OptOut;
    let rules = pods_job_rules(&render(&wc));
    assert_eq!(
        rules[0],
        json!({"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"], "action": "drop", "regex": "false"})
    );
    let scrape_rules: Vec<_> = rules
        .iter()
        .filter(|r| {
            r["source_labels"] == json!(["__meta_kubernetes_pod_annotation_prometheus_io_scrape"])
        })
        .collect();
    assert_eq!(
        scrape_rules.len(),
        1,
        "no keep rule left under optOut: {rules:?}"
    );
}

#[test]
fn prometheus_remote_writes_to_the_weave_cloud_hostname_with_the_mounted_token() {
    let mut wc = example();
    wc.spec.general.wc_hostname = "cloud.example.com:8443".into();
    let objs = render(&wc);
    let config = prometheus_yml(&objs);
    assert_eq!(
        config["remote_write"][0]["url"],
        "https://cloud.example.com:8443/api/prom/push"
    );
    assert_eq!(
        config["remote_write"][0]["basic_auth"]["password_file"],
        "/etc/weave-cloud/token"
    );
    let dep = find(&objs, "Deployment", "weave-cortex-agent");
    let volumes = dep
        .pointer("/spec/template/spec/volumes")
        .unwrap()
        .as_array()
        .unwrap();
    assert!(volumes.contains(&json!({"name": "weave-cloud-token", "secret": {"secretName": "weave-cloud", "items": [{"key": "token", "path": "token"}]}})));
    let mounts = container(dep, "prometheus")["volumeMounts"]
        .as_array()
        .unwrap();
    assert!(mounts.contains(
        &json!({"name": "weave-cloud-token", "mountPath": "/etc/weave-cloud", "readOnly": true})
    ));
}

#[test]
fn a_change_of_prometheus_config_changes_its_pod_template() {
    let hash = |objs: &[DesiredObject]| {
        find(objs, "Deployment", "weave-cortex-agent")
            .pointer("/spec/template/metadata/annotations/weft.io~1config-hash")
            .unwrap()
            .clone()
    };
    let mut wc = example();
    let before = hash(&render(&wc));
    wc.spec.prometheus.pod_scrape_policy = PodScrapePolicy::OptOut;
    assert_ne!(before, hash(&render(&wc)));
}

#[test]
fn kube_state_metrics_and_node_exporter_come_with_prometheus() {
    let names = names(&render(&example()));
    assert!(names.contains(&"Deployment/weave-cortex-kube-state-metrics".to_string()));
    assert!(names.contains(&"DaemonSet/weave-cortex-node-exporter".to_string()));
}

// ---- appendArgs ----

#[test]
fn append_args_come_last_and_in_order() {
    let mut wc = example();
    wc.spec.flux.append_args = vec![
        "--registry-disable-scanning".into(),
        "--git-poll-interval=1m".into(),
    ];
    wc.spec.prometheus.append_args =
        vec!["--log.level=debug".into(), "--web.enable-lifecycle".into()];
    wc.spec.scope.append_args = vec!["--probe.docker=false".into(), "--weave=false".into()];
    let objs = render(&wc);
    let flux = flux_args_of(&objs);
    assert_eq!(
        flux[flux.len() - 2..],
        ["--registry-disable-scanning", "--git-poll-interval=1m"]
    );
    let prom = args(
        find(&objs, "Deployment", "weave-cortex-agent"),
        "prometheus",
    );
    assert_eq!(
        prom[prom.len() - 2..],
        ["--log.level=debug", "--web.enable-lifecycle"]
    );
    // scope: after every generated flag, before only the positional target.
    let scope = scope_args_of(&objs);
    assert_eq!(
        scope[scope.len() - 3..],
        [
            "--probe.docker=false",
            "--weave=false",
            "https://cloud.weave.works"
        ]
    );
}

// ---- token ----

#[test]
fn the_token_comes_only_from_the_secret() {
    let mut wc = example();
    wc.spec.general.token_secret_ref.name = "wc-credentials".into();
    wc.spec.general.token_secret_ref.key = "service-token".into();
    let objs = render(&wc);
    for (kind, name, c) in [
        ("Deployment", "weave-flux-agent", "flux-agent"),
        ("DaemonSet", "weave-scope-agent", "scope-agent"),
        (
            "Deployment",
            "weave-scope-cluster-agent",
            "scope-cluster-agent",
        ),
    ] {
        let env = container(find(&objs, kind, name), c)["env"]
            .as_array()
            .unwrap()
            .clone();
        assert!(env.contains(&json!({"name": "WEAVE_CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "wc-credentials", "key": "service-token"}}})), "{name}");
    }
    let dep = find(&objs, "Deployment", "weave-cortex-agent");
    assert_eq!(
        dep.pointer("/spec/template/spec/volumes/2/secret/secretName")
            .unwrap(),
        "wc-credentials"
    );
    // No object refers to a Secret in any other way, and no env var carries a literal token.
    for o in &objs {
        let text = o.object.to_string();
        assert!(!text.contains("password\":"), "{}", o.name());
        assert!(
            !text.contains("\"WEAVE_CLOUD_TOKEN\",\"value\""),
            "{}",
            o.name()
        );
    }
}

#[test]
fn a_token_from_an_old_manifest_never_appears_in_the_output() {
    let secret = "eyJhbGciOi-the-real-service-token";
    let inputs = AgentInputs {
        token_hash: Some(secret_data_hash(&BTreeMap::from([(
            "token".to_string(),
            secret.as_bytes().to_vec(),
        )]))),
        preserved_flux_args: parse_flux_args(&[
            format!("--token={secret}"),
            "--git-url=u".to_string(),
        ]),
        ..Default::default()
    };
    let objs = render_with(&example(), &inputs).objects;
    let all = super::super::output::to_yaml_stream(&objs).unwrap();
    assert!(!all.contains(secret));
    assert!(!all.contains("the-real-service-token"));
}

#[test]
fn every_pod_template_carries_the_token_hash() {
    let inputs = AgentInputs {
        token_hash: Some(secret_data_hash(&BTreeMap::from([(
            "token".to_string(),
            b"t1".to_vec(),
        )]))),
        ..Default::default()
    };
    let expected = inputs.token_hash.clone().unwrap();
    let objs = render_with(&example(), &inputs).objects;
    let mut workloads = 0;
    for o in &objs {
        if let Some(pod) = pod_template_pointer(o.kind()) {
            workloads += 1;
            let v = o.object.value();
            let got = v.pointer(&format!("{pod}/metadata/annotations/weft.io~1token-hash"));
            assert_eq!(got, Some(&json!(expected)), "{} {}", o.kind(), o.name());
        }
    }
    assert_eq!(workloads, 7, "flux, memcached, scope probe and cluster agent, prometheus, kube-state-metrics, node exporter");
    // Offline, the annotation says the Secret was not read.
    let offline = render(&example());
    let flux = find(&offline, "Deployment", "weave-flux-agent");
    assert_eq!(
        flux.pointer("/spec/template/metadata/annotations/weft.io~1token-hash")
            .unwrap(),
        "offline"
    );
}

#[test]
fn the_secret_hash_follows_the_secret_data() {
    let a = secret_data_hash(&BTreeMap::from([("token".to_string(), b"t1".to_vec())]));
    let b = secret_data_hash(&BTreeMap::from([("token".to_string(), b"t2".to_vec())]));
    let c = secret_data_hash(&BTreeMap::from([("token2".to_string(), b"t1".to_vec())]));
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 32);
}

// ---- general ----

#[test]
fn report_errors_reaches_every_agent_container() {
    let mut wc = example();
    wc.spec.general.wc_report_errors = true;
    let objs = render(&wc);
    for (kind, name, c) in [
        ("Deployment", "weave-flux-agent", "flux-agent"),
        ("DaemonSet", "weave-scope-agent", "scope-agent"),
        (
            "Deployment",
            "weave-scope-cluster-agent",
            "scope-cluster-agent",
        ),
        ("Deployment", "weave-cortex-agent", "prometheus"),
    ] {
        let env = container(find(&objs, kind, name), c)["env"]
            .as_array()
            .unwrap()
            .clone();
        assert!(
            env.contains(&json!({"name": "WEAVE_CLOUD_REPORT_ERRORS", "value": "true"})),
            "{name}"
        );
    }
}

#[test]
fn children_are_owned_by_the_weavecloud_and_live_in_its_namespace() {
    let objs = render(&example());
    let owner = Owner::resource(OwnerKind::WeaveCloud, "weave", "weave-cloud");
    for o in &objs {
        assert_eq!(o.owner, owner);
        assert_eq!(
            o.object.value()["metadata"]["labels"][OWNER_LABEL],
            owner.id().0.as_str()
        );
        assert_eq!(
            o.object.value()["metadata"]["annotations"][OWNER_REF_ANNOTATION],
            "WeaveCloud/weave/weave-cloud"
        );
        if CLUSTER_SCOPED_KINDS.contains(&o.kind()) {
            assert_eq!(o.namespace(), None, "{}", o.name());
            assert!(o.name().ends_with(":weave"), "{}", o.name());
        } else {
            assert_eq!(o.namespace(), Some("weave"), "{} {}", o.kind(), o.name());
        }
    }
}

#[test]
fn bindings_point_at_this_namespace_and_the_renamed_cluster_roles() {
    let mut wc = example();
    wc.metadata.namespace = Some("team-a".into());
    let objs = render(&wc);
    let crb = find(&objs, "ClusterRoleBinding", "weave-flux:team-a");
    assert_eq!(crb["roleRef"]["name"], "weave-flux:team-a");
    assert_eq!(
        crb["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "weave-flux", "namespace": "team-a"})
    );
    find(&objs, "ClusterRole", "weave-flux:team-a");
}

#[test]
fn two_weaveclouds_in_two_namespaces_do_not_share_an_object() {
    let a = render(&example());
    let mut wc = example();
    wc.metadata.namespace = Some("weave-staging".into());
    let b = render(&wc);
    for o in &a {
        assert!(
            !b.iter().any(|p| p.object_ref() == o.object_ref()),
            "{}",
            o.object_ref()
        );
    }
}

#[test]
fn openshift_grants_the_privileged_scc_and_drops_fixed_uids() {
    let mut wc = example();
    wc.spec.general.environment = Environment::Openshift;
    let objs = render(&wc);
    let rb = find(&objs, "RoleBinding", "weave-scope-scc");
    assert_eq!(rb["roleRef"]["name"], "weave-scope-scc:weave");
    assert_eq!(rb["subjects"][0]["namespace"], "weave");
    find(&objs, "ClusterRole", "weave-cortex-scc:weave");
    let memcached = find(&objs, "Deployment", "weave-flux-memcached");
    let sc = memcached
        .pointer("/spec/template/spec/securityContext")
        .unwrap();
    assert_eq!(sc, &json!({"runAsNonRoot": true}));
    let prom = find(&objs, "Deployment", "weave-cortex-agent");
    assert!(prom
        .pointer("/spec/template/spec/securityContext/fsGroup")
        .is_none());

    // Elsewhere: no SCC objects, and the images' fixed UIDs stay.
    let objs = render(&example());
    assert!(!names(&objs).iter().any(|n| n.contains("scc")));
    let memcached = find(&objs, "Deployment", "weave-flux-memcached");
    assert_eq!(
        memcached.pointer("/spec/template/spec/securityContext/runAsUser"),
        Some(&json!(11211))
    );
}

#[test]
fn a_url_as_hostname_is_refused() {
    let mut wc = example();
    wc.spec.general.wc_hostname = "https://cloud.weave.works".into();
    let err = render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default()).unwrap_err();
    assert_eq!(
            err.to_string(),
            "WeaveCloud `weave/weave-cloud`: `spec.general.wcHostname: https://cloud.weave.works` must be a host name such as `cloud.weave.works`, not a URL"
        );
}

#[test]
fn output_is_in_apply_order_and_deterministic() {
    let a = render(&example());
    let b = render(&example());
    assert_eq!(a, b);
    let first_workload = a
        .iter()
        .position(|o| pod_template_pointer(o.kind()).is_some())
        .unwrap();
    let last_account = a
        .iter()
        .rposition(|o| o.kind() == "ServiceAccount")
        .unwrap();
    assert!(last_account < first_workload);
    assert_eq!(a[0].kind(), "ClusterRole");
}

/// Golden files: `tests/golden/weavecloud/<case>.input.yaml` rendered offline with the
/// built-in bundle must equal `<case>.yaml`. `UPDATE_GOLDEN=1 cargo test --lib
/// render::weavecloud` rewrites them (review the diff before committing).
#[test]
fn golden_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/weavecloud");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut cases = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for input in entries {
        let Some(case) = input
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".input.yaml"))
        else {
            continue;
        };
        cases += 1;
        let wc: WeaveCloud =
            serde_saphyr::from_str(&std::fs::read_to_string(&input).unwrap()).unwrap();
        let objs = render(&wc);
        let got = super::super::output::to_yaml_stream(&objs).unwrap();
        let golden = dir.join(format!("{case}.yaml"));
        if update {
            std::fs::write(&golden, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
                golden.display()
            )
        });
        if got != want {
            let diff = similar::TextDiff::from_lines(&want, &got);
            panic!(
                "{case}: rendered objects differ from {} (UPDATE_GOLDEN=1 to accept):\n{}",
                golden.display(),
                diff.unified_diff()
                    .context_radius(3)
                    .header("golden", "rendered")
            );
        }
    }
    assert!(cases >= 2, "golden cases found: {cases}");
}

#[test]
fn cluster_scoped_names_of_two_namespaces_never_meet() {
    // Issue 30: with `<name>-<namespace>`, namespace `cluster-agent-weave` rendered
    // `weave-scope-cluster-agent-weave`, the cluster agent's binding of namespace `weave`.
    let names = |ns: &str| -> Vec<String> {
        let mut wc = example();
        wc.metadata.namespace = Some(ns.into());
        render(&wc)
            .iter()
            .filter(|o| CLUSTER_SCOPED_KINDS.contains(&o.kind()))
            .map(|o| format!("{}/{}", o.kind(), o.name()))
            .collect()
    };
    let weave = names("weave");
    let other = names("cluster-agent-weave");
    assert!(weave.contains(&"ClusterRoleBinding/weave-scope-cluster-agent:weave".to_string()));
    assert!(other.contains(&"ClusterRoleBinding/weave-scope:cluster-agent-weave".to_string()));
    for n in &other {
        assert!(!weave.contains(n), "{n} is rendered for both namespaces");
    }
}
