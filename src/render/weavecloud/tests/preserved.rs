//! What a takeover keeps from a customised launcher flux besides the git settings: every other
//! flag (appendArgs semantics) and the extra volumes (a known_hosts ConfigMap), and the checks
//! of `spec.flux.volumes` (issue 29, item 3).

use super::*;

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// A launcher flux that a user customised by scaling weave-agent to 0.
fn customised() -> Vec<String> {
    strings(&[
        "--token=$(WEAVE_CLOUD_TOKEN)",
        "--connect=wss://cloud.weave.works./api/flux",
        "--memcached-hostname=weave-flux-memcached.weave.svc.cluster.local",
        "--memcached-service=",
        "--git-url=ssh://git@git.internal:2222/ops/config.git",
        "--git-readonly",
        "--sync-state=secret",
        "--manifest-generation=true",
        "--git-user",
        "weave-flux",
        "--git-email=flux@example.com",
        "--registry-disable-scanning",
        "--sync-interval=10m",
    ])
}

#[test]
fn every_flag_weft_does_not_generate_is_an_extra_in_one_element() {
    assert_eq!(
        extra_flux_args(&customised()),
        strings(&[
            "--memcached-hostname=weave-flux-memcached.weave.svc.cluster.local",
            "--memcached-service=",
            "--git-readonly",
            "--sync-state=secret",
            "--manifest-generation=true",
            "--git-user=weave-flux",
            "--git-email=flux@example.com",
            "--registry-disable-scanning",
            "--sync-interval=10m",
        ])
    );
}

#[test]
fn extras_render_after_the_generated_args_unless_the_template_or_append_args_sets_them() {
    let mut wc = example();
    wc.spec.flux.append_args = strings(&["--sync-interval=1m"]);
    let inputs = AgentInputs {
        preserved_flux_args: parse_flux_args(&customised()),
        preserved_flux_extra_args: extra_flux_args(&customised()),
        ..Default::default()
    };
    let r = render_with(&wc, &inputs);
    let a = flux_args_of(&r.objects);
    for kept in [
        "--git-readonly",
        "--sync-state=secret",
        "--manifest-generation=true",
        "--git-user=weave-flux",
        "--git-email=flux@example.com",
        "--registry-disable-scanning",
    ] {
        assert_eq!(
            a.iter().filter(|x| *x == kept).count(),
            1,
            "{kept} once in {a:?}"
        );
        assert!(
            r.preserved_flux_args.iter().any(|p| p == kept),
            "{kept} reported"
        );
    }
    // appendArgs wins, the template's memcached flags are not doubled.
    assert!(!a.iter().any(|x| x == "--sync-interval=10m"), "{a:?}");
    assert_eq!(a.last().map(String::as_str), Some("--sync-interval=1m"));
    for flag in ["--memcached-hostname", "--memcached-service"] {
        assert_eq!(
            a.iter().filter(|x| x.starts_with(flag)).count(),
            1,
            "{flag}: {a:?}"
        );
    }
    assert!(
        !a.iter().any(|x| x.contains("weave.svc.cluster.local")),
        "{a:?}"
    );
}

fn known_hosts() -> (Value, Value) {
    (
        json!({"name": "ssh-config", "configMap": {"name": "flux-ssh-config"}}),
        json!({"name": "ssh-config", "mountPath": "/root/.ssh"}),
    )
}

fn flux_pod(objs: &[DesiredObject]) -> &'static Value {
    &find(objs, "Deployment", "weave-flux-agent")["spec"]["template"]["spec"]
}

#[test]
fn a_kept_known_hosts_volume_is_mounted_into_flux_and_the_spec_wins_by_name() {
    let (volume, mount) = known_hosts();
    let inputs = AgentInputs {
        preserved_flux_volumes: vec![volume.clone()],
        preserved_flux_mounts: vec![mount.clone()],
        ..Default::default()
    };
    let pod = flux_pod(&render_with(&example(), &inputs).objects);
    assert!(
        pod["volumes"].as_array().unwrap().contains(&volume),
        "{pod}"
    );
    let c = &pod["containers"][0];
    assert!(
        c["volumeMounts"].as_array().unwrap().contains(&mount),
        "{c}"
    );
    // The deploy key stays the template's.
    assert!(pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "git-key"));

    let mut wc = example();
    let mine = json!({"name": "ssh-config", "configMap": {"name": "mine"}});
    wc.spec.flux.volumes = vec![mine.clone()];
    wc.spec.flux.volume_mounts = vec![mount.clone()];
    let pod = flux_pod(&render_with(&wc, &inputs).objects);
    let named: Vec<&Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == "ssh-config")
        .collect();
    assert_eq!(named, vec![&mine]);
    let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
    assert_eq!(
        mounts.iter().filter(|m| m["name"] == "ssh-config").count(),
        1
    );
}

#[test]
fn spec_flux_volumes_may_not_reach_the_node_or_reuse_a_name() {
    for (volume, mount, expected) in [
        (json!({"name": "root", "hostPath": {"path": "/"}}), json!({"name": "root", "mountPath": "/host"}), "`spec.flux.volumes[0]` (`root`): the source must be one of configMap, secret, emptyDir (found `hostPath`)"),
        (json!({"name": "git-key", "emptyDir": {}}), json!({"name": "git-key", "mountPath": "/x"}), "the name `git-key` is already used"),
        (json!({"name": "a", "emptyDir": {}}), json!({"name": "b", "mountPath": "/x"}), "`spec.flux.volumeMounts[0]` mounts `b`"),
        (json!({"configMap": {"name": "x"}}), json!({"name": "x", "mountPath": "/x"}), "`spec.flux.volumes[0]` has no `name`"),
    ] {
        let mut wc = example();
        wc.spec.flux.volumes = vec![volume];
        wc.spec.flux.volume_mounts = vec![mount];
        let err = render_agents(&wc, Bundle::builtin().unwrap(), &AgentInputs::default())
            .expect_err("refused")
            .to_string();
        assert!(err.contains(expected), "{expected:?} in {err}");
    }
}

/// The labels of one target after `rules` (Prometheus `replace` rules only: `source_labels`
/// joined with `;`, an anchored `regex`, default `(.*)`, `$1` into `target_label`).
fn relabel(rules: &[Value], mut labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    for r in rules {
        if r.get("action").is_some_and(|a| a != "replace") || r.get("target_label").is_none() {
            continue;
        }
        let value: Vec<String> = r["source_labels"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| labels.get(l.as_str().unwrap()).cloned().unwrap_or_default())
            .collect();
        let value = value.join(";");
        let re =
            regex::Regex::new(&format!("^(?:{})$", r["regex"].as_str().unwrap_or("(.*)"))).unwrap();
        if let Some(c) = re.captures(&value) {
            let replacement = r["replacement"].as_str().unwrap_or("$1");
            let mut out = String::new();
            c.expand(&replacement.replace("${1}", "$1"), &mut out);
            labels.insert(r["target_label"].as_str().unwrap().to_string(), out);
        }
    }
    labels
}

/// Weave Cloud's dashboards query `kubernetes_namespace`, `kubernetes_pod_name` and
/// `_weave_service` on pod metrics and `_weave_pod_name` on cAdvisor's, as the launcher's
/// prometheus labelled them (issue 44 item 7): the workload's name, from each kind of pod name.
#[test]
fn prometheus_labels_targets_and_containers_as_weave_cloud_s_dashboards_query_them() {
    let config = prometheus_yml(&render(&example()));
    let job = |name: &str| -> Value {
        config["scrape_configs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_name"] == name)
            .unwrap()
            .clone()
    };
    let pods = job("kubernetes-pods")["relabel_configs"]
        .as_array()
        .unwrap()
        .clone();
    let cadvisor = job("kubernetes-cadvisor")["metric_relabel_configs"]
        .as_array()
        .expect("cadvisor's metric relabelling")
        .clone();
    for (pod, workload) in [
        ("my-app-5f7b8c9d4f-x7k2p", "my-app"),
        ("node-exporter-abcde", "node-exporter"),
        ("web-0", "web"),
        ("standalone", "standalone"),
    ] {
        let target = relabel(
            &pods,
            BTreeMap::from([
                (
                    "__meta_kubernetes_namespace".to_string(),
                    "shop".to_string(),
                ),
                ("__meta_kubernetes_pod_name".to_string(), pod.to_string()),
            ]),
        );
        assert_eq!(target["kubernetes_namespace"], "shop");
        assert_eq!(target["kubernetes_pod_name"], pod);
        assert_eq!(target["_weave_service"], workload, "{pod}");
        for label in ["pod_name", "pod"] {
            let series = relabel(
                &cadvisor,
                BTreeMap::from([(label.to_string(), pod.to_string())]),
            );
            assert_eq!(series["_weave_pod_name"], workload, "{label}={pod}");
        }
    }
}
