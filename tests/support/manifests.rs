//! Small manifests the tests (and the benches, through `#[path]`) write into their config
//! repositories: a ConfigMap builder, a Deployment and a WeaveCloud builder, so that a test says
//! only the fields it cares about.

use weft::api::weavecloud::WeaveCloud;

/// A one-replica Deployment `ns`/`name` (image `example.com/app:1`, which kwok's nodes "run"),
/// with `extra_pod_spec` (indented YAML lines) appended to its pod spec.
pub fn deployment(ns: &str, name: &str, extra_pod_spec: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: example.com/app:1
          ports:
            - containerPort: 8080
          resources:
            requests: {{cpu: 10m, memory: 16Mi}}
{extra_pod_spec}"#
    )
}

/// A ConfigMap `ns`/`name` whose key `value` holds the string `value`.
pub fn configmap(ns: &str, name: &str, value: &str) -> String {
    configmap_with(ns, name, &[], &[("value", value)])
}

/// A ConfigMap `ns`/`name` with `labels` (a flow mapping, left out when empty) and `data`
/// (each value written as a quoted string).
pub fn configmap_with(
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
) -> String {
    let labels = if labels.is_empty() {
        String::new()
    } else {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!("  labels: {{{}}}\n", pairs.join(", "))
    };
    let data: String = data
        .iter()
        .map(|(k, v)| format!("  {k}: \"{v}\"\n"))
        .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n{labels}data:\n{data}"
    )
}

/// The flux git settings the tests' WeaveClouds point at (nothing fetches them).
const FLUX_CONFIG: &str = r#"{gitUrl: "git@example.com:org/cluster.git", gitBranch: main}"#;

/// A WeaveCloud manifest: [`weavecloud`] starts one, each knob adds the field it names, and
/// [`WeaveCloudYaml::yaml`] writes it in block style with `spec.general`'s fields in the order
/// they were added (`environment` first, `tokenSecretRef` last), then `flux`, `scope` and
/// `prometheus`. Line numbers are stable: `wcPollUrl` added first stands on line 9.
pub struct WeaveCloudYaml {
    name: String,
    namespace: String,
    general: Vec<String>,
    token: Option<String>,
    flux_disable: Option<bool>,
    flux_config: bool,
    only_flux: bool,
}

/// A WeaveCloud `weave-cloud` in `ns` with `environment: generic` and nothing else.
pub fn weavecloud(ns: &str) -> WeaveCloudYaml {
    WeaveCloudYaml {
        name: "weave-cloud".into(),
        namespace: ns.into(),
        general: Vec::new(),
        token: None,
        flux_disable: None,
        flux_config: false,
        only_flux: false,
    }
}

impl WeaveCloudYaml {
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// `spec.general.autoUpdate`.
    pub fn auto_update(self, on: bool) -> Self {
        self.general("autoUpdate", &on.to_string())
    }

    /// `spec.general.wcPollUrl`, quoted (test URLs carry `#` and `?`).
    pub fn poll_url(self, url: &str) -> Self {
        self.general("wcPollUrl", &format!("\"{url}\""))
    }

    /// Any other field of `spec.general`, `value` written as YAML as it is.
    pub fn general(mut self, key: &str, value: &str) -> Self {
        self.general.push(format!("{key}: {value}"));
        self
    }

    /// `spec.general.tokenSecretRef`: the Secret `secret`, and its `key` if given.
    pub fn token(mut self, secret: &str, key: Option<&str>) -> Self {
        self.token = Some(match key {
            Some(key) => format!("{{name: {secret}, key: {key}}}"),
            None => format!("{{name: {secret}}}"),
        });
        self
    }

    /// `spec.flux.config`: a git repository on example.com (the agent is never run against it).
    pub fn flux_config(mut self) -> Self {
        self.flux_config = true;
        self
    }

    /// `spec.flux.disable`.
    pub fn flux_disabled(mut self, disable: bool) -> Self {
        self.flux_disable = Some(disable);
        self
    }

    /// Scope and prometheus disabled: flux is the only agent (fewer pods, fewer ClusterRoles).
    pub fn only_flux(mut self) -> Self {
        self.only_flux = true;
        self
    }

    /// The manifest's text.
    pub fn yaml(&self) -> String {
        let mut text = format!(
            "apiVersion: cloud.weave.works/v1beta1\nkind: WeaveCloud\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  general:\n    environment: generic\n",
            self.name, self.namespace
        );
        for field in &self.general {
            text.push_str(&format!("    {field}\n"));
        }
        if let Some(token) = &self.token {
            text.push_str(&format!("    tokenSecretRef: {token}\n"));
        }
        if self.flux_disable.is_some() || self.flux_config {
            text.push_str("  flux:\n");
            if let Some(disable) = self.flux_disable {
                text.push_str(&format!("    disable: {disable}\n"));
            }
            if self.flux_config {
                text.push_str(&format!("    config: {FLUX_CONFIG}\n"));
            }
        }
        if self.only_flux {
            text.push_str("  scope: {disable: true}\n  prometheus: {disable: true}\n");
        }
        text
    }

    /// The manifest as an object, to create through the API (read by Weft's own YAML loader).
    pub fn object(&self) -> WeaveCloud {
        let text = self.yaml();
        let docs = weft::load::yaml::parse_documents(&text, Default::default())
            .unwrap_or_else(|e| panic!("the WeaveCloud builder wrote bad YAML ({e}):\n{text}"));
        serde_json::from_value(docs[0].value.clone())
            .unwrap_or_else(|e| panic!("not a WeaveCloud ({e}):\n{text}"))
    }
}
