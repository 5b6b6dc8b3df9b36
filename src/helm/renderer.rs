//! [`HelmRenderer`]: assemble a chart in a private temporary directory, run `helm template` on it,
//! parse and check the output, and cache the result.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::assemble::{assemble, write_chart};
use super::binary::{self, HelmLocation, ProcessLimits};
use super::cache::{render_key, RenderCache, RenderKey};
use super::failure::parse_helm_failure;
use super::output::{json_type, parse_manifests, reject_template_actions, HelmRender};
use super::{ChartTree, HelmError};

/// What helm's `.Capabilities` reports. Empty fields leave helm's defaults (the Kubernetes version
/// helm was built against: v1.37.0 for the pinned helm 3.22, and its built-in API versions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `--kube-version` (`v1.33.2`), e.g. the target cluster's server version.
    pub kube_version: Option<String>,
    /// `--api-versions` (`monitoring.coreos.com/v1`, `apps/v1/Deployment`): in addition to helm's.
    pub api_versions: Vec<String>,
}

/// One render: which chart, as which release, with which values.
#[derive(Clone)]
pub struct RenderRequest<'a> {
    pub chart: &'a ChartTree,
    /// The Helm release name (`{release_prefix}-{release}` for Armada).
    pub release: &'a str,
    /// `--namespace`: `.Release.Namespace` (helm does not set `metadata.namespace` from it).
    pub namespace: &'a str,
    /// The values file's content: a mapping, or null for none. A `null` inside removes the
    /// chart's default for that key, as in Helm.
    pub values: &'a Value,
    pub capabilities: Capabilities,
    /// `--is-upgrade`: `.Release.IsUpgrade` true, `.Release.IsInstall` false.
    pub is_upgrade: bool,
    /// How long helm may take (each process).
    pub timeout: Duration,
    /// Accept `{{` in rendered strings (a chart that outputs Go templates for another program,
    /// such as Prometheus rules). Off by default: Weft refuses unrendered template actions.
    pub allow_literal_braces: bool,
}

impl<'a> RenderRequest<'a> {
    /// A request with default capabilities, as an install, with a 60 s timeout.
    pub fn new(
        chart: &'a ChartTree,
        release: &'a str,
        namespace: &'a str,
        values: &'a Value,
    ) -> Self {
        RenderRequest {
            chart,
            release,
            namespace,
            values,
            capabilities: Capabilities::default(),
            is_upgrade: false,
            timeout: Duration::from_secs(60),
            allow_literal_braces: false,
        }
    }
}

// Written by hand so that values, which may hold secrets, never reach a log through `{:?}`.
impl std::fmt::Debug for RenderRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderRequest")
            .field("chart_files", &self.chart.chart.files.len())
            .field("release", &self.release)
            .field("namespace", &self.namespace)
            .field("values", &"<redacted>")
            .field("capabilities", &self.capabilities)
            .field("is_upgrade", &self.is_upgrade)
            .field("timeout", &self.timeout)
            .field("allow_literal_braces", &self.allow_literal_braces)
            .finish()
    }
}

/// The result of [`HelmRenderer::render`].
#[derive(Clone, Debug)]
pub struct RenderOutcome {
    pub render: Arc<HelmRender>,
    /// The cache key of this render.
    pub key: RenderKey,
    /// `helm version --short` of the helm that rendered it (`v3.22.0`).
    pub helm_version: String,
    from_cache: bool,
}

impl RenderOutcome {
    /// Whether the render came from the cache, without starting helm.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }
}

/// Renders charts with helm; one per process, shared (it is `Sync`). Blocking.
#[derive(Debug)]
pub struct HelmRenderer {
    location: HelmLocation,
    cache: Mutex<RenderCache>,
    /// `helm version --short` per binary, with the binary's size and mtime when it was asked.
    versions: Mutex<HashMap<PathBuf, (BinaryStamp, String)>>,
    launches: AtomicU64,
    max_output_bytes: usize,
    /// rlimits of each helm process; `None`: [`ProcessLimits::from_env`] at each render.
    process_limits: Option<ProcessLimits>,
}

type BinaryStamp = (u64, Option<SystemTime>);

/// How many renders the cache keeps unless told otherwise.
pub const DEFAULT_CACHE_CAPACITY: usize = 256;

/// The most helm output one render may produce.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024 * 1024;

impl HelmRenderer {
    /// A renderer taking helm from `location`, caching [`DEFAULT_CACHE_CAPACITY`] renders.
    pub fn new(location: HelmLocation) -> Self {
        HelmRenderer {
            location,
            cache: Mutex::new(RenderCache::new(DEFAULT_CACHE_CAPACITY)),
            versions: Mutex::new(HashMap::new()),
            launches: AtomicU64::new(0),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            process_limits: None,
        }
    }

    /// Run helm within `limits` instead of the defaults and the environment's.
    pub fn with_process_limits(mut self, limits: ProcessLimits) -> Self {
        self.process_limits = Some(limits);
        self
    }

    /// How many helm processes this renderer started (`template` and `version`), for metrics
    /// and for tests that prove a pass started none.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// How many renders the cache holds.
    pub fn cached_renders(&self) -> usize {
        lock(&self.cache).len()
    }

    /// The helm binary to use now and its version (asked once per binary, again if the file
    /// changes).
    pub fn helm(&self, timeout: Duration) -> Result<(PathBuf, String), HelmError> {
        let path = self.location.resolve()?;
        let stamp = std::fs::metadata(&path)
            .ok()
            .map(|m| (m.len(), m.modified().ok()));
        if let Some(stamp) = stamp {
            if let Some((known, version)) = lock(&self.versions).get(&path) {
                if *known == stamp {
                    return Ok((path, version.clone()));
                }
            }
        }
        let version = binary::version(&path, timeout, &self.launches)?;
        if let Some(stamp) = stamp {
            lock(&self.versions).insert(path.clone(), (stamp, version.clone()));
        }
        Ok((path, version))
    }

    /// Render `request`'s chart, from the cache when its inputs are unchanged.
    pub fn render(&self, request: &RenderRequest<'_>) -> Result<RenderOutcome, HelmError> {
        let args = TemplateArgs::check(request)?;
        let files = assemble(request.chart)?;
        let (helm, helm_version) = self.helm(request.timeout)?;
        let key = render_key(&files, request, &helm_version);
        let cached = lock(&self.cache).get(&key);
        let (render, from_cache) = match cached {
            Some(render) => (render, true),
            None => {
                let started = Instant::now();
                let render = Arc::new(self.run_template(&helm, &files, request, &args)?);
                tracing::debug!(
                    release = request.release,
                    namespace = request.namespace,
                    objects = render.objects.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "helm template"
                );
                lock(&self.cache).insert(key, Arc::clone(&render));
                (render, false)
            }
        };
        // Checked on every use, cached or not: the flag is not part of the key.
        if !request.allow_literal_braces {
            reject_template_actions(&render.objects)?;
        }
        Ok(RenderOutcome {
            render,
            key,
            helm_version,
            from_cache,
        })
    }

    fn run_template(
        &self,
        helm: &Path,
        files: &BTreeMap<String, &[u8]>,
        request: &RenderRequest<'_>,
        args: &TemplateArgs,
    ) -> Result<HelmRender, HelmError> {
        let io = |context: &str| {
            let context = context.to_string();
            move |source| HelmError::Io { context, source }
        };
        // Private (0700) and removed on drop: the values file may hold secrets.
        let work = tempfile::Builder::new()
            .prefix("weft-helm-")
            .tempdir()
            .map_err(io("creating a temporary directory for helm"))?;
        let chart_dir = work.path().join("chart");
        std::fs::create_dir(&chart_dir).map_err(io("creating the chart directory"))?;
        write_chart(&chart_dir, files)?;
        let values_file = work.path().join("values.json");
        std::fs::write(&values_file, &args.values).map_err(io("writing the values file"))?;

        let mut command = Command::new(helm);
        command.args(args.to_args(&chart_dir, &values_file));
        // helm reads plugins, repositories and caches from these: keep it away from the host's.
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            command.env(var, work.path().join("helm").join(dir));
        }
        let limits = match self.process_limits {
            Some(limits) => limits,
            None => ProcessLimits::from_env()?,
        };
        let finished = binary::run_limited(
            command,
            helm,
            request.timeout,
            self.max_output_bytes,
            Some(&limits),
            &self.launches,
        )?;
        let stderr = String::from_utf8_lossy(&finished.stderr);
        if !finished.status.success() {
            if let Some(limit) = limits.exceeded(&finished.status, &stderr) {
                return Err(HelmError::ResourceLimit { limit });
            }
            return Err(HelmError::Template(parse_helm_failure(&stderr)));
        }
        let stdout = String::from_utf8(finished.stdout).map_err(|_| HelmError::OutputYaml {
            template: "helm output".to_string(),
            message: "not UTF-8".to_string(),
        })?;
        let mut render = parse_manifests(&stdout)?;
        let mut warnings: Vec<String> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        warnings.append(&mut render.warnings);
        render.warnings = warnings;
        Ok(render)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded maps are consistent after every statement, so a panic elsewhere leaves them
    // usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The checked arguments of `helm template`.
#[derive(Debug)]
pub(crate) struct TemplateArgs {
    release: String,
    namespace: String,
    kube_version: Option<String>,
    api_versions: Vec<String>,
    is_upgrade: bool,
    /// The values file's content (JSON, which helm reads as YAML).
    values: Vec<u8>,
}

impl TemplateArgs {
    /// Check the request: names as helm and Kubernetes accept them, values a mapping.
    pub(crate) fn check(request: &RenderRequest<'_>) -> Result<TemplateArgs, HelmError> {
        check_release(request.release)?;
        check_namespace(request.namespace)?;
        let caps = &request.capabilities;
        let capability = |value: &str| {
            if value.is_empty() || value.starts_with('-') || value.contains(char::is_whitespace) {
                Err(HelmError::BadCapability {
                    value: value.to_string(),
                    reason: "must be non-empty, without spaces, not starting with `-`".into(),
                })
            } else {
                Ok(value.to_string())
            }
        };
        let kube_version = caps.kube_version.as_deref().map(capability).transpose()?;
        let api_versions = caps
            .api_versions
            .iter()
            .map(|v| capability(v))
            .collect::<Result<Vec<_>, _>>()?;
        let values = match request.values {
            Value::Null => b"{}".to_vec(),
            v @ Value::Object(_) => serde_json::to_vec(v).map_err(|e| HelmError::Io {
                context: "encoding the values".to_string(),
                source: std::io::Error::other(e),
            })?,
            other => {
                return Err(HelmError::BadValues {
                    found: json_type(other),
                })
            }
        };
        Ok(TemplateArgs {
            release: request.release.to_string(),
            namespace: request.namespace.to_string(),
            kube_version,
            api_versions,
            is_upgrade: request.is_upgrade,
            values,
        })
    }

    /// `template <release> <dir> --namespace=… --values=… --include-crds [...]`. Every flag value
    /// is attached with `=`, so no value can be read as a flag.
    pub(crate) fn to_args(&self, chart_dir: &Path, values_file: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "template".into(),
            self.release.clone().into(),
            chart_dir.into(),
            format!("--namespace={}", self.namespace).into(),
        ];
        let mut values = OsString::from("--values=");
        values.push(values_file);
        args.push(values);
        args.push("--include-crds".into());
        if self.is_upgrade {
            args.push("--is-upgrade".into());
        }
        if let Some(v) = &self.kube_version {
            args.push(format!("--kube-version={v}").into());
        }
        for v in &self.api_versions {
            args.push(format!("--api-versions={v}").into());
        }
        args
    }
}

/// A DNS-1123 subdomain's characters, as helm requires of release names (at most 53 characters).
fn check_release(name: &str) -> Result<(), HelmError> {
    let bad = |reason: &str| HelmError::BadRelease {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() || name.len() > 53 {
        return Err(bad("must be 1 to 53 characters (a Helm release name)"));
    }
    if !name.split('.').all(dns_label) {
        return Err(bad(
            "must be lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit",
        ));
    }
    Ok(())
}

fn check_namespace(name: &str) -> Result<(), HelmError> {
    if name.len() <= 63 && dns_label(name) {
        Ok(())
    } else {
        Err(HelmError::BadNamespace {
            name: name.to_string(),
            reason: "must be a DNS-1123 label (lowercase letters, digits, `-`, at most 63)"
                .to_string(),
        })
    }
}

fn dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars().all(|c| alnum(c) || c == '-')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::ChartFiles;
    use super::*;

    fn args(edit: impl FnOnce(&mut RenderRequest<'_>)) -> Result<Vec<String>, HelmError> {
        args_named("armada-web", "web", edit)
    }

    fn args_named(
        release: &str,
        namespace: &str,
        edit: impl FnOnce(&mut RenderRequest<'_>),
    ) -> Result<Vec<String>, HelmError> {
        let tree = ChartTree::new(ChartFiles::default());
        let values = json!({"image": "x"});
        let mut request = RenderRequest::new(&tree, release, namespace, &values);
        edit(&mut request);
        let checked = TemplateArgs::check(&request)?;
        Ok(checked
            .to_args(Path::new("/tmp/w/chart"), Path::new("/tmp/w/values.json"))
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect())
    }

    #[test]
    fn template_arguments() {
        assert_eq!(
            args(|_| {}).unwrap(),
            [
                "template",
                "armada-web",
                "/tmp/w/chart",
                "--namespace=web",
                "--values=/tmp/w/values.json",
                "--include-crds"
            ]
        );
        let with_caps = args(|r| {
            r.is_upgrade = true;
            r.capabilities = Capabilities {
                kube_version: Some("v1.33.2".into()),
                api_versions: vec!["monitoring.coreos.com/v1".into()],
            };
        })
        .unwrap();
        assert_eq!(
            with_caps[6..],
            [
                "--is-upgrade",
                "--kube-version=v1.33.2",
                "--api-versions=monitoring.coreos.com/v1"
            ]
        );
    }

    #[test]
    fn names_that_helm_or_kubernetes_refuse_are_refused_first() {
        for release in [
            "",
            "--post-renderer=/bin/sh",
            "Web",
            "web-",
            "a_b",
            &"a".repeat(54),
        ] {
            assert!(
                matches!(
                    args_named(release, "web", |_| {}),
                    Err(HelmError::BadRelease { .. })
                ),
                "{release}"
            );
        }
        args_named("armada.blog-1", "web", |_| {}).unwrap();
        for namespace in ["", "-n", "a.b", "Web", &"a".repeat(64)] {
            assert!(
                matches!(
                    args_named("web", namespace, |_| {}),
                    Err(HelmError::BadNamespace { .. })
                ),
                "{namespace}"
            );
        }
        let err = args(|r| r.capabilities.kube_version = Some("-x".into())).unwrap_err();
        assert!(matches!(err, HelmError::BadCapability { .. }), "{err}");
        let err = args(|r| r.capabilities.api_versions = vec!["a b".into()]).unwrap_err();
        assert!(matches!(err, HelmError::BadCapability { .. }), "{err}");
    }

    #[test]
    fn values_must_be_a_mapping_or_null() {
        let tree = ChartTree::new(ChartFiles::default());
        let list = json!([1]);
        let err = TemplateArgs::check(&RenderRequest::new(&tree, "r", "n", &list)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "values must be a mapping (or null), not sequence"
        );
        let null = Value::Null;
        let checked = TemplateArgs::check(&RenderRequest::new(&tree, "r", "n", &null)).unwrap();
        assert_eq!(checked.values, b"{}");
    }

    #[test]
    fn debug_output_never_shows_values() {
        let tree = ChartTree::new(ChartFiles::default());
        let values = json!({"password": "hunter2"});
        let request = RenderRequest::new(&tree, "r", "n", &values);
        let text = format!("{request:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn a_missing_binary_is_reported_before_anything_runs() {
        let renderer = HelmRenderer::new(HelmLocation::Binary("/nonexistent/helm".into()));
        let tree = ChartTree::new(ChartFiles::from_pairs([("Chart.yaml", "name: a\n")]));
        let values = json!({});
        let err = renderer
            .render(&RenderRequest::new(&tree, "r", "n", &values))
            .unwrap_err();
        assert!(matches!(err, HelmError::BadBinary { .. }), "{err}");
        assert_eq!(renderer.launches(), 0);
    }
}
