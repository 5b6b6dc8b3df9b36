//! Bundles: the built-in one, fetched ones, and what a bundle may not hold.

use super::*;

fn builtin_files() -> BTreeMap<String, Vec<u8>> {
    BUILTIN_FILES
        .iter()
        .map(|(p, t)| (p.to_string(), t.as_bytes().to_vec()))
        .collect()
}

fn with(mut files: BTreeMap<String, Vec<u8>>, path: &str, text: &str) -> BTreeMap<String, Vec<u8>> {
    files.insert(path.to_string(), text.as_bytes().to_vec());
    files
}

fn replace_in(
    files: &BTreeMap<String, Vec<u8>>,
    path: &str,
    from: &str,
    to: &str,
) -> BTreeMap<String, Vec<u8>> {
    let text = String::from_utf8(files[path].clone()).unwrap();
    assert!(text.contains(from), "{path} does not contain {from:?}");
    with(files.clone(), path, &text.replacen(from, to, 1))
}

#[test]
fn the_builtin_bundle_parses_with_every_agent() {
    let b = Bundle::builtin().unwrap();
    assert_eq!(b.version, semver::Version::new(1, 0, 0));
    let names = |a: Agent| -> Vec<String> {
        b.agent(a)
            .templates
            .iter()
            .map(|t| format!("{}/{}", t.kind(), t.name()))
            .collect()
    };
    assert!(names(Agent::Flux).contains(&"Deployment/weave-flux-agent".to_string()));
    assert!(names(Agent::Flux).contains(&"Deployment/weave-flux-memcached".to_string()));
    assert!(names(Agent::Scope).contains(&"DaemonSet/weave-scope-agent".to_string()));
    assert!(names(Agent::Scope).contains(&"Deployment/weave-scope-cluster-agent".to_string()));
    assert_eq!(b.scope.container().name, "weave-scope-agent");
    assert_eq!(
        b.scope
            .container_of("Deployment", "weave-scope-cluster-agent")
            .map(|(i, c)| (i, c.container.as_str())),
        Some((1, "scope-cluster-agent"))
    );
    assert_eq!(b.flux.containers.len(), 1);
    for n in [
        "Deployment/weave-cortex-agent",
        "ConfigMap/weave-cortex-agent-config",
        "Deployment/weave-cortex-kube-state-metrics",
        "DaemonSet/weave-cortex-node-exporter",
    ] {
        assert!(names(Agent::Prometheus).contains(&n.to_string()), "{n}");
    }
    assert!(b.scope.environments.contains_key("openshift"));
    assert_eq!(b.digest.len(), 64);
    assert!(b.cluster_role_names().contains("weave-flux"));
}

/// Every file under `agents/` is embedded, so the built-in bundle is what the directory says.
#[test]
fn every_file_of_the_agents_directory_is_embedded() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("agents");
    let mut on_disk = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                on_disk.push(
                    path.strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    on_disk.sort();
    let mut embedded: Vec<String> = BUILTIN_FILES.iter().map(|(p, _)| p.to_string()).collect();
    embedded.sort();
    assert_eq!(on_disk, embedded);
    for (path, text) in BUILTIN_FILES {
        assert_eq!(
            std::fs::read_to_string(root.join(path)).unwrap(),
            *text,
            "{path}"
        );
    }
}

#[test]
fn a_bundle_inside_one_directory_with_dot_slash_paths_is_found() {
    let files: BTreeMap<String, Vec<u8>> = builtin_files()
        .into_iter()
        .map(|(p, t)| (format!("./agents/{p}"), t))
        .collect();
    let b = Bundle::from_files(files).unwrap();
    assert_eq!(b.digest, Bundle::builtin().unwrap().digest);
}

#[test]
fn the_digest_follows_the_content() {
    let changed = replace_in(
        &builtin_files(),
        "flux/flux.yaml",
        "fluxcd/flux:1.25.4",
        "fluxcd/flux:1.25.5",
    );
    let b = Bundle::from_files(changed).unwrap();
    assert_ne!(b.digest, Bundle::builtin().unwrap().digest);
}

#[test]
fn a_missing_index_is_refused() {
    let mut files = builtin_files();
    files.remove(INDEX_FILE);
    assert_eq!(
        Bundle::from_files(files).unwrap_err(),
        BundleError::MissingIndex
    );
}

#[test]
fn a_file_named_by_the_index_must_exist() {
    let mut files = builtin_files();
    files.remove("scope/openshift.yaml");
    let err = Bundle::from_files(files).unwrap_err();
    assert_eq!(
            err.to_string(),
            "bundle.yaml: `agents.scope.environments.openshift` names `scope/openshift.yaml`, which is not in the bundle"
        );
}

#[test]
fn a_bad_version_is_refused_with_the_field() {
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "version: 1.0.0",
        "version: one",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with("bundle.yaml: `version: one` is not a semantic version"),
        "{err}"
    );
}

#[test]
fn an_unknown_index_field_is_refused() {
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "agents:",
        "agnets: {}\nagents:",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with("bundle.yaml: ") && err.contains("agnets"),
        "{err}"
    );
}

#[test]
fn an_unknown_environment_is_refused() {
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "      openshift:\n        - scope",
        "      openshfit:\n        - scope",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.contains("`agents.scope.environments.openshfit`: unknown environment"),
        "{err}"
    );
}

#[test]
fn yaml_errors_name_the_file_and_line() {
    let files = with(
        builtin_files(),
        "flux/memcached.yaml",
        "apiVersion: v1\nkind: [\n",
    );
    let err = Bundle::from_files(files).unwrap_err();
    match err {
        BundleError::Template { path, pos, .. } => {
            assert_eq!(path, "flux/memcached.yaml");
            assert!(pos.line >= 2, "{pos}");
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn a_template_with_a_namespace_is_refused() {
    let files = replace_in(
        &builtin_files(),
        "flux/memcached.yaml",
        "  name: weave-flux-memcached\n",
        "  name: weave-flux-memcached\n  namespace: weave\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "flux/memcached.yaml:2:1: Deployment `weave-flux-memcached` sets `metadata.namespace`"
        ),
        "{err}"
    );
}

#[test]
fn a_template_without_a_name_is_refused() {
    let files = with(
        builtin_files(),
        "flux/memcached.yaml",
        "# c\napiVersion: v1\nkind: Service\nmetadata: {}\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert_eq!(err, "flux/memcached.yaml:2:1: missing `metadata.name`");
}

#[test]
fn a_namespace_in_a_bundle_is_refused() {
    let files = with(
        builtin_files(),
        "flux/memcached.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: weave}\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.contains("a bundle may not contain a Namespace"),
        "{err}"
    );
}

#[test]
fn the_same_object_twice_is_refused() {
    let files = with(
        builtin_files(),
        "flux/memcached.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: weave-flux}\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
            err.starts_with("flux/memcached.yaml:1:1: ServiceAccount `weave-flux` is already defined at flux/rbac.yaml:"),
            "{err}"
        );
}

#[test]
fn list_documents_are_expanded() {
    let list = "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: extra-a}\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: extra-b}\n";
    let files = with(builtin_files(), "flux/extra.yaml", list);
    let files = replace_in(
        &files,
        INDEX_FILE,
        "      - flux/flux.yaml\n",
        "      - flux/flux.yaml\n      - flux/extra.yaml\n",
    );
    let b = Bundle::from_files(files).unwrap();
    let extra: Vec<_> = b
        .flux
        .templates
        .iter()
        .filter(|t| t.file == "flux/extra.yaml")
        .collect();
    assert_eq!(extra.len(), 2);
    assert_eq!(extra[1].name(), "extra-b");
    assert_eq!(extra[1].pos.line, 7);
}

#[test]
fn the_agent_container_must_exist() {
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "container: flux-agent",
        "container: fluxd",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "bundle.yaml: `agents.flux.container`: Deployment `weave-flux-agent` (flux/flux.yaml:"
        ),
        "{err}"
    );
    assert!(err.ends_with("has no container `fluxd`"), "{err}");
}

#[test]
fn every_listed_container_must_exist_and_container_and_containers_exclude_each_other() {
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "container: scope-cluster-agent",
        "container: cluster-probe",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with("bundle.yaml: `agents.scope.containers[1]`: Deployment `weave-scope-cluster-agent` (scope/cluster-agent.yaml:")
            && err.ends_with("has no container `cluster-probe`"),
        "{err}"
    );
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "    containers:\n",
        "    container: {kind: DaemonSet, name: weave-scope-agent, container: scope-agent}\n    containers:\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert_eq!(
        err,
        "bundle.yaml: `agents.scope`: write either `container` or `containers`, not both"
    );
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "    container: {kind: Deployment, name: weave-flux-agent, container: flux-agent}\n",
        "",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "bundle.yaml: `agents.flux`: `container` (or a non-empty `containers`) is missing"
        ),
        "{err}"
    );
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "{kind: Deployment, name: weave-scope-cluster-agent, container: scope-cluster-agent}",
        "{kind: DaemonSet, name: weave-scope-agent, container: scope-agent}",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.contains("DaemonSet `weave-scope-agent` is named twice"),
        "{err}"
    );
}

#[test]
fn the_prometheus_pods_job_must_exist() {
    let files = replace_in(
        &builtin_files(),
        INDEX_FILE,
        "podsJob: kubernetes-pods",
        "podsJob: pods",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.starts_with("prometheus/config.yaml:") && err.ends_with("has no scrape job `pods`"),
        "{err}"
    );
}

#[test]
fn binary_or_huge_files_are_refused() {
    let mut files = builtin_files();
    files.insert("flux/flux.yaml".into(), vec![0xff, 0xfe, 0x00]);
    assert_eq!(
        Bundle::from_files(files).unwrap_err(),
        BundleError::NotText {
            path: "flux/flux.yaml".into()
        }
    );
    let mut files = builtin_files();
    files.insert("flux/flux.yaml".into(), vec![b'#'; MAX_FILE_BYTES + 1]);
    assert!(matches!(
        Bundle::from_files(files).unwrap_err(),
        BundleError::TooLarge { .. }
    ));
}

// ---- what a bundle may grant (issue 14: creating a WeaveCloud must not be cluster-admin) ----

fn refusal(path: &str, text: &str) -> String {
    let files = with(builtin_files(), path, text);
    Bundle::from_files(files).unwrap_err().to_string()
}

#[test]
fn a_bundle_binding_cluster_admin_to_everyone_is_refused() {
    let evil = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: weave-flux}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: everyone-admin}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n  - {kind: Group, name: 'system:authenticated', apiGroup: rbac.authorization.k8s.io}\n";
    let files = replace_in(
        &builtin_files(),
        "flux/rbac.yaml",
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole",
        &format!(
            "---\n{}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole",
            &evil[evil.find("apiVersion: rbac").unwrap()..]
        ),
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(err.starts_with("flux/rbac.yaml:"), "{err}");
    assert!(
        err.contains("ClusterRoleBinding `everyone-admin`: `roleRef` ClusterRole `cluster-admin` is not a role of this agent in the bundle"),
        "{err}"
    );
}

#[test]
fn a_binding_of_the_bundle_s_own_role_to_a_group_or_a_foreign_account_is_refused() {
    for (subject, shown) in [
        (
            "{kind: Group, name: 'system:authenticated', apiGroup: rbac.authorization.k8s.io}",
            "Group `system:authenticated`",
        ),
        (
            "{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}",
            "User `alice`",
        ),
        (
            "{kind: ServiceAccount, name: default}",
            "ServiceAccount `default`",
        ),
    ] {
        let files = replace_in(
            &builtin_files(),
            "flux/rbac.yaml",
            "subjects:\n  - kind: ServiceAccount\n    name: weave-flux",
            &format!("subjects:\n  - {subject}"),
        );
        let err = Bundle::from_files(files).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "`subjects[0]` {shown} is not a ServiceAccount of this agent in the bundle"
            )),
            "{err}"
        );
    }
    // A ServiceAccount of another namespace (kube-system's, say) is not the bundle's either.
    let files = replace_in(
        &builtin_files(),
        "flux/rbac.yaml",
        "  - kind: ServiceAccount\n    name: weave-flux\n",
        "  - kind: ServiceAccount\n    name: weave-flux\n    namespace: kube-system\n",
    );
    let text = String::from_utf8(files["flux/rbac.yaml"].clone()).unwrap();
    assert!(text.contains("namespace: kube-system"));
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(err.contains("sets a `namespace`"), "{err}");
}

#[test]
fn aggregated_roles_are_refused() {
    let files = replace_in(
        &builtin_files(),
        "flux/rbac.yaml",
        "    weave-cloud-component: flux\nrules:",
        "    weave-cloud-component: flux\n    rbac.authorization.k8s.io/aggregate-to-admin: \"true\"\nrules:",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.contains("label `rbac.authorization.k8s.io/aggregate-to-admin` is not allowed"),
        "{err}"
    );
    let files = replace_in(
        &builtin_files(),
        "flux/rbac.yaml",
        "    weave-cloud-component: flux\nrules:",
        "    weave-cloud-component: flux\naggregationRule:\n  clusterRoleSelectors: [{matchLabels: {x: y}}]\nrules:",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(err.contains("`aggregationRule` is not allowed"), "{err}");
}

#[test]
fn only_the_kinds_agents_are_made_of_are_allowed() {
    for (doc, kind) in [
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "Pod (v1)"),
        ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n", "Job (batch/v1)"),
        ("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: x}\n", "MutatingWebhookConfiguration (admissionregistration.k8s.io/v1)"),
        // The right kind in someone else's API group is not the kind agents need.
        ("apiVersion: evil.example/v1\nkind: Deployment\nmetadata: {name: x}\n", "Deployment (evil.example/v1)"),
    ] {
        let err = refusal("flux/memcached.yaml", doc);
        assert!(err.contains(&format!("a bundle may not contain a {kind}")), "{err}");
        assert!(err.starts_with("flux/memcached.yaml:1:1:"), "{err}");
    }
}

// ---- the per-agent allow-list of rules (issue 30 item 2) ----

#[test]
fn every_role_of_the_builtin_bundle_is_within_its_agent_s_allow_list() {
    let b = Bundle::builtin().unwrap();
    let mut roles = 0;
    for agent in Agent::ALL {
        for t in b.agent(agent).all() {
            if matches!(t.kind(), "ClusterRole" | "Role") {
                roles += 1;
                for r in t.object["rules"].as_array().unwrap() {
                    assert_eq!(
                        contents_policy::check_rule(agent, r),
                        Ok(()),
                        "{} {r}",
                        t.name()
                    );
                }
            }
        }
    }
    assert!(roles >= 7, "{roles} roles checked");
}

#[test]
fn a_role_beyond_its_agent_s_needs_is_refused_before_anything_is_applied() {
    use serde_json::json;
    let cases = [
        // prometheus lists Secrets (kube-state-metrics), but never reads one by name.
        (
            Agent::Prometheus,
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
            "`get` on `secrets` (API group core)",
        ),
        (
            Agent::Prometheus,
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
            "`*` on `*` (API group *)",
        ),
        (
            Agent::Scope,
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}),
            "`create` on `pods`",
        ),
        (
            Agent::Scope,
            json!({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]}),
            "`get` on `pods/*`",
        ),
        (
            Agent::Scope,
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]}),
            "`escalate` on `clusterroles`",
        ),
        // The SCC only by name, and only `privileged`'s `use`.
        (
            Agent::Scope,
            json!({"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"], "verbs": ["use"]}),
            "`use` on `securitycontextconstraints`",
        ),
        (
            Agent::Prometheus,
            json!({"nonResourceURLs": ["/api/*"], "verbs": ["get"]}),
            "non-resource URL `/api/*`",
        ),
        (
            Agent::Scope,
            json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
            "non-resource URL `/metrics`",
        ),
    ];
    for (agent, rule, shown) in cases {
        let err = contents_policy::check_rule(agent, &rule).expect_err(&rule.to_string());
        assert!(err.contains(shown), "{agent}: {err}");
        assert!(
            err.contains(&format!("the {agent} agent does not need")),
            "{err}"
        );
    }
    // Within the list: a subset of what the built-in agents hold.
    for (agent, rule) in [
        (
            Agent::Scope,
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}),
        ),
        (
            Agent::Scope,
            json!({"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"], "resourceNames": ["privileged"], "verbs": ["use"]}),
        ),
        (
            Agent::Prometheus,
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}),
        ),
        (
            Agent::Flux,
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
        ),
    ] {
        assert_eq!(contents_policy::check_rule(agent, &rule), Ok(()), "{rule}");
    }
    // In a bundle: the whole bundle is refused, naming file, line, role and rule.
    let files = replace_in(
        &builtin_files(),
        "prometheus/rbac.yaml",
        "  - nonResourceURLs: [/metrics]\n    verbs: [get]\n",
        "  - nonResourceURLs: [/metrics]\n    verbs: [get]\n  - apiGroups: ['']\n    resources: [secrets]\n    verbs: [get]\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(err.starts_with("prometheus/rbac.yaml:"), "{err}");
    assert!(
        err.contains("ClusterRole `weave-cortex`: `rules[3]` grants `get` on `secrets`"),
        "{err}"
    );
}

#[test]
fn a_flux_role_is_the_built_in_one_exactly() {
    use serde_json::json;
    // Issue 48 item 2: a flux role that reads Secrets and nothing else is within `*`, but no
    // built-in flux holds it: with a forged WeaveCloud it read every namespace's Secrets.
    for (rule, shown) in [
        (
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}),
            "grants `get` on `secrets` (API group core), which is not the built-in flux role",
        ),
        (
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}),
            "grants `get` on `*` (API group *)",
        ),
        (
            json!({"apiGroups": ["*"], "resources": ["*"], "resourceNames": ["x"], "verbs": ["*"]}),
            "not the built-in flux role",
        ),
        (
            json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
            "`get` on the non-resource URL `/metrics`",
        ),
    ] {
        let err = contents_policy::check_rule(Agent::Flux, &rule).expect_err(&rule.to_string());
        assert!(err.contains(shown), "{err}");
    }
    for rule in [
        json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
        json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
    ] {
        assert_eq!(
            contents_policy::check_rule(Agent::Flux, &rule),
            Ok(()),
            "{rule}"
        );
    }
    // In a bundle: refused before anything is applied, naming file, role and rule.
    let mut files = builtin_files();
    let mut rbac = files["flux/rbac.yaml"].clone();
    rbac.extend_from_slice(b"---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: weave-flux-secrets}\nrules:\n  - apiGroups: ['']\n    resources: [secrets]\n    verbs: [get, list, watch]\n");
    files.insert("flux/rbac.yaml".to_string(), rbac);
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.contains("ClusterRole `weave-flux-secrets`: `rules[0]` grants `get` on `secrets`"),
        "{err}"
    );
}

#[test]
fn an_agent_may_not_bind_another_agent_s_role() {
    // scope's account bound to flux's `*` role: both are the bundle's, but not the same agent's.
    let files = replace_in(
        &builtin_files(),
        "scope/rbac.yaml",
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: weave-scope\n",
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: weave-flux\n",
    );
    let err = Bundle::from_files(files).unwrap_err().to_string();
    assert!(
        err.contains(
            "`roleRef` ClusterRole `weave-flux` is not a role of this agent in the bundle"
        ),
        "{err}"
    );
}
