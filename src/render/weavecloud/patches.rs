//! The patches of the agents' templates: what every object gets (namespace, bindings, token
//! hash, OpenShift), what each agent's own container gets (arguments, token, volumes), and
//! prometheus' configuration (remote write, scrape policy).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::api::weavecloud::{Environment, PodScrapePolicy, WeaveCloud};
use crate::load::budget::Budget;
use crate::render::bundle::{
    container_index, pod_template_pointer, prometheus_config_of, scrape_job_index, Agent, Bundle,
    ContainerRef, Template, CLUSTER_SCOPED_KINDS,
};
use crate::render::RenderError;

use super::{
    escape, merge_at, CRI_VOLUME, REPORT_ERRORS_ENV, TOKEN_ENV, TOKEN_FILE, TOKEN_HASH_ANNOTATION,
    TOKEN_MOUNT_DIR, TOKEN_VOLUME,
};

/// What the patches of one WeaveCloud's render share.
pub(super) struct Context<'a> {
    pub(super) wc: &'a WeaveCloud,
    pub(super) bundle: &'a Bundle,
    pub(super) namespace: &'a str,
    /// `wcHostname`, checked.
    pub(super) hostname: &'a str,
    pub(super) token_hash: &'a str,
    /// The bundle's ClusterRoles, renamed per WeaveCloud.
    pub(super) cluster_roles: BTreeSet<String>,
    /// The CRI socket scope mounts (configured or detected); `None`: Docker.
    pub(super) cri: Option<String>,
}

impl Context<'_> {
    /// Apply an RFC 6902 patch, naming the template on failure (a bundle that does not fit
    /// the renderer).
    fn json_patch(
        &self,
        template: &Template,
        object: &mut Value,
        ops: Value,
    ) -> Result<(), RenderError> {
        let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|e| {
            RenderError::Other(format!(
                "agent bundle {}: {} {} ({}): invalid patch: {e}",
                self.bundle.version,
                template.kind(),
                template.name(),
                template.location()
            ))
        })?;
        // One operation per call, as overlays: a fetched bundle's template that makes a later
        // operation fail must give an error, not json-patch's undo panic.
        crate::render::patch::apply_within(object, &patch.0, &mut Budget::default()).map_err(|e| {
            RenderError::Other(format!(
                "agent bundle {}: cannot render {} `{}` ({}): {e}",
                self.bundle.version,
                template.kind(),
                template.name(),
                template.location()
            ))
        })
    }

    /// Namespace (or a per-WeaveCloud name for cluster-scoped objects), bindings, token hash,
    /// platform adjustments: what every object of every agent gets.
    pub(super) fn common_patches(
        &self,
        template: &Template,
        object: &mut Value,
    ) -> Result<(), RenderError> {
        let ns = self.namespace;
        let kind = template.kind();
        if CLUSTER_SCOPED_KINDS.contains(&kind) {
            // Two WeaveClouds (two namespaces) must not fight over one ClusterRole.
            json_patch::merge(
                object,
                &json!({"metadata": {"name": super::cluster_scoped_name(template.name(), ns)}}),
            );
        } else {
            json_patch::merge(object, &json!({"metadata": {"namespace": ns}}));
        }
        if kind == "ClusterRoleBinding" || kind == "RoleBinding" {
            let mut ops = Vec::new();
            let subjects = object
                .get("subjects")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (i, s) in subjects.iter().enumerate() {
                if s.get("kind").and_then(Value::as_str) == Some("ServiceAccount") {
                    ops.push(json!({"op": "add", "path": format!("/subjects/{i}/namespace"), "value": ns}));
                }
            }
            let role_kind = object.pointer("/roleRef/kind").and_then(Value::as_str);
            let role_name = object
                .pointer("/roleRef/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if role_kind == Some("ClusterRole") && self.cluster_roles.contains(role_name) {
                ops.push(json!({"op": "replace", "path": "/roleRef/name", "value": super::cluster_scoped_name(role_name, ns)}));
            }
            self.json_patch(template, object, Value::Array(ops))?;
        }
        if let Some(pod) = pod_template_pointer(kind) {
            if object.pointer(pod).is_some() {
                merge_at(
                    object,
                    pod,
                    json!({"metadata": {"annotations": {TOKEN_HASH_ANNOTATION: self.token_hash}}}),
                );
                if self.wc.spec.general.environment == Environment::Openshift {
                    self.openshift_pod_patches(template, object, pod)?;
                }
            }
        }
        Ok(())
    }

    /// OpenShift's `restricted` SCC assigns each namespace its own UID range: a fixed
    /// `runAsUser`/`runAsGroup`/`fsGroup` is refused. Drop them from unprivileged pods and let
    /// the SCC choose (privileged pods are admitted by the `privileged` SCC the bundle grants).
    fn openshift_pod_patches(
        &self,
        template: &Template,
        object: &mut Value,
        pod: &str,
    ) -> Result<(), RenderError> {
        let spec = format!("{pod}/spec");
        let containers = object
            .pointer(&format!("{spec}/containers"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let privileged =
            |c: &Value| c.pointer("/securityContext/privileged") == Some(&Value::Bool(true));
        if containers.iter().any(privileged) {
            return Ok(());
        }
        let mut ops = Vec::new();
        for field in ["runAsUser", "runAsGroup", "fsGroup"] {
            let path = format!("{spec}/securityContext/{field}");
            if object.pointer(&path).is_some() {
                ops.push(json!({"op": "remove", "path": path}));
            }
        }
        for (i, _) in containers.iter().enumerate() {
            for field in ["runAsUser", "runAsGroup"] {
                let path = format!("{spec}/containers/{i}/securityContext/{field}");
                if object.pointer(&path).is_some() {
                    ops.push(json!({"op": "remove", "path": path}));
                }
            }
        }
        self.json_patch(template, object, Value::Array(ops))
    }

    /// A configured container of an agent (`target`): arguments appended after the template's,
    /// the token from the Secret, `wcReportErrors`; in the agent's own container (`own`) also,
    /// for scope, the CRI socket, and for prometheus the token volume.
    pub(super) fn agent_container_patches(
        &self,
        agent: Agent,
        target: &ContainerRef,
        own: bool,
        template: &Template,
        object: &mut Value,
        args: &[String],
    ) -> Result<(), RenderError> {
        let pod = pod_template_pointer(&target.kind).unwrap_or("/spec/template");
        let index = container_index(object, &target.kind, &target.container).ok_or_else(|| {
            RenderError::Other(format!(
                "agent bundle {}: {} `{}` ({}) has no container `{}`",
                self.bundle.version,
                target.kind,
                target.name,
                template.location(),
                target.container
            ))
        })?;
        let c = format!("{pod}/spec/containers/{index}");
        let secret = &self.wc.spec.general.token_secret_ref;
        let mut ops = Vec::new();
        if object.pointer(&format!("{c}/args")).is_none() {
            ops.push(json!({"op": "add", "path": format!("{c}/args"), "value": []}));
        }
        for arg in args {
            ops.push(json!({"op": "add", "path": format!("{c}/args/-"), "value": arg}));
        }
        if object.pointer(&format!("{c}/env")).is_none() {
            ops.push(json!({"op": "add", "path": format!("{c}/env"), "value": []}));
        }
        if agent != Agent::Prometheus {
            ops.push(json!({"op": "add", "path": format!("{c}/env/-"), "value": {
                "name": TOKEN_ENV,
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }}));
        }
        ops.push(json!({"op": "add", "path": format!("{c}/env/-"), "value": {
            "name": REPORT_ERRORS_ENV,
            "value": self.wc.spec.general.wc_report_errors.to_string(),
        }}));

        let mut volume = None;
        if agent == Agent::Scope && own {
            if let Some(socket) = &self.cri {
                // With a CRI runtime there is no Docker: switch the Docker probe off (as the
                // launcher's CRI manifests did) and drop the Docker socket mount, whose host
                // path would not exist. Removals go last-index-first so indexes stay valid.
                let template_args = object
                    .pointer(&format!("{c}/args"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, a) in template_args.iter().enumerate() {
                    if a.as_str().is_some_and(|a| a.starts_with("--probe.docker=")) {
                        ops.insert(0, json!({"op": "replace", "path": format!("{c}/args/{i}"), "value": "--probe.docker=false"}));
                    }
                }
                let is_docker_socket = |v: &Value| {
                    v.pointer("/hostPath/path")
                        .and_then(Value::as_str)
                        .is_some_and(|p| p.ends_with("/docker.sock"))
                };
                let volumes = object
                    .pointer(&format!("{pod}/spec/volumes"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let docker_volumes: Vec<String> = volumes
                    .iter()
                    .filter(|v| is_docker_socket(v))
                    .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect();
                let mounts = object
                    .pointer(&format!("{c}/volumeMounts"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, m) in mounts.iter().enumerate().rev() {
                    if m.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| docker_volumes.iter().any(|d| d == n))
                    {
                        ops.push(json!({"op": "remove", "path": format!("{c}/volumeMounts/{i}")}));
                    }
                }
                for (i, v) in volumes.iter().enumerate().rev() {
                    if is_docker_socket(v) {
                        ops.push(
                            json!({"op": "remove", "path": format!("{pod}/spec/volumes/{i}")}),
                        );
                    }
                }
                volume = Some((
                    json!({"name": CRI_VOLUME, "hostPath": {"path": socket, "type": "Socket"}}),
                    json!({"name": CRI_VOLUME, "mountPath": socket}),
                ));
            }
        }
        if agent == Agent::Prometheus && own {
            volume = Some((
                json!({"name": TOKEN_VOLUME, "secret": {
                    "secretName": secret.name,
                    "items": [{"key": secret.key, "path": TOKEN_FILE}],
                }}),
                json!({"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_DIR, "readOnly": true}),
            ));
        }
        if let Some((vol, mount)) = volume {
            if object.pointer(&format!("{pod}/spec/volumes")).is_none() {
                ops.push(json!({"op": "add", "path": format!("{pod}/spec/volumes"), "value": []}));
            }
            ops.push(json!({"op": "add", "path": format!("{pod}/spec/volumes/-"), "value": vol}));
            if object.pointer(&format!("{c}/volumeMounts")).is_none() {
                ops.push(json!({"op": "add", "path": format!("{c}/volumeMounts"), "value": []}));
            }
            ops.push(json!({"op": "add", "path": format!("{c}/volumeMounts/-"), "value": mount}));
        }
        self.json_patch(template, object, Value::Array(ops))
    }

    /// prometheus.yml: remote write to `https://<wcHostname>/api/prom/push` with the mounted
    /// token, and the `podScrapePolicy` rule first in the pods job's relabel rules.
    pub(super) fn prometheus_config_patches(
        &self,
        template: &Template,
        object: &mut Value,
    ) -> Result<(), RenderError> {
        let cfg_ref = &self.bundle.prometheus_config;
        let mut config = prometheus_config_of(template, &cfg_ref.key)
            .map_err(|e| RenderError::Other(e.to_string()))?;
        let job = scrape_job_index(&config, &cfg_ref.pods_job).ok_or_else(|| {
            RenderError::Other(format!(
                "{}: `data.{}` has no scrape job `{}`",
                template.location(),
                cfg_ref.key,
                cfg_ref.pods_job
            ))
        })?;
        let rule = match self.wc.spec.prometheus.pod_scrape_policy {
            PodScrapePolicy::OptIn => json!({
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "keep",
                "regex": "true",
            }),
            PodScrapePolicy::OptOut => json!({
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "action": "drop",
                "regex": "false",
            }),
        };
        let relabel = format!("/scrape_configs/{job}/relabel_configs");
        let mut ops = vec![
            json!({"op": "replace", "path": "/remote_write/0/url", "value": format!("https://{}/api/prom/push", self.hostname)}),
            json!({"op": "add", "path": "/remote_write/0/basic_auth", "value": {
                "password_file": format!("{TOKEN_MOUNT_DIR}/{TOKEN_FILE}"),
            }}),
        ];
        if config.pointer(&relabel).is_none() {
            ops.push(json!({"op": "add", "path": relabel, "value": []}));
        }
        ops.push(json!({"op": "add", "path": format!("{relabel}/0"), "value": rule}));
        self.json_patch(template, &mut config, Value::Array(ops))?;
        let text = crate::render::output::to_yaml(&config).map_err(|e| {
            RenderError::Other(format!(
                "{}: cannot write prometheus' configuration: {e}",
                template.location()
            ))
        })?;
        self.json_patch(
            template,
            object,
            json!([{"op": "replace", "path": format!("/data/{}", escape(&cfg_ref.key)), "value": text}]),
        )
    }
}
