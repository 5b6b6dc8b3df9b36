//! Renders are kept in memory, keyed by everything that can change helm's output: the assembled
//! chart files (dependencies included), the values, the helm version, release, namespace,
//! capabilities and install/upgrade. An unchanged pass therefore starts no helm process.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::output::HelmRender;
use super::renderer::RenderRequest;

/// The digest of one render's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RenderKey(pub [u8; 32]);

impl std::fmt::Display for RenderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// Bump when the meaning of a key changes (e.g. the arguments given to helm).
const KEY_VERSION: &[u8] = b"weft-helm-render-v1";

/// The key of rendering `files` (the assembled chart directory) for `request` with helm
/// `helm_version`. Every field is length-prefixed, so no two different inputs share a byte stream.
pub fn render_key(
    files: &BTreeMap<String, &[u8]>,
    request: &RenderRequest<'_>,
    helm_version: &str,
) -> RenderKey {
    let mut h = Sha256::new();
    field(&mut h, KEY_VERSION);
    field(&mut h, helm_version.as_bytes());
    field(&mut h, request.release.as_bytes());
    field(&mut h, request.namespace.as_bytes());
    field(&mut h, &[u8::from(request.is_upgrade)]);
    let caps = &request.capabilities;
    field(
        &mut h,
        caps.kube_version.as_deref().unwrap_or("").as_bytes(),
    );
    // helm treats --api-versions as a set.
    let mut api_versions: Vec<&str> = caps.api_versions.iter().map(String::as_str).collect();
    api_versions.sort_unstable();
    api_versions.dedup();
    count(&mut h, api_versions.len());
    for v in api_versions {
        field(&mut h, v.as_bytes());
    }
    let mut values = Vec::new();
    canonical_json(request.values, &mut values);
    field(&mut h, &values);
    count(&mut h, files.len());
    for (path, content) in files {
        field(&mut h, path.as_bytes());
        field(&mut h, content);
    }
    RenderKey(h.finalize().into())
}

fn count(h: &mut Sha256, n: usize) {
    h.update((n as u64).to_le_bytes());
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    count(h, bytes.len());
    h.update(bytes);
}

/// JSON with object keys sorted, whatever order the map keeps them in.
fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(key, out);
                out.push(b':');
                canonical_json(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        Value::String(s) => string(s, out),
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(Value::String(s.to_string()).to_string().as_bytes());
}

/// A bounded map of renders; when full, the least recently used entry goes.
#[derive(Debug)]
pub(crate) struct RenderCache {
    capacity: usize,
    clock: u64,
    entries: HashMap<RenderKey, (Arc<HelmRender>, u64)>,
}

impl RenderCache {
    pub(crate) fn new(capacity: usize) -> Self {
        RenderCache {
            capacity,
            clock: 0,
            entries: HashMap::new(),
        }
    }

    pub(crate) fn get(&mut self, key: &RenderKey) -> Option<Arc<HelmRender>> {
        self.clock += 1;
        let clock = self.clock;
        self.entries.get_mut(key).map(|(render, used)| {
            *used = clock;
            Arc::clone(render)
        })
    }

    pub(crate) fn insert(&mut self, key: RenderKey, render: Arc<HelmRender>) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            // A linear scan: the cache holds a few hundred entries at most.
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (render, self.clock));
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::renderer::Capabilities;
    use super::super::{ChartFiles, ChartTree};
    use super::*;

    fn key_of(
        files: &[(&str, &str)],
        values: &Value,
        edit: impl FnOnce(&mut RenderRequest<'_>),
    ) -> RenderKey {
        let files: BTreeMap<String, &[u8]> = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes()))
            .collect();
        let tree = ChartTree::new(ChartFiles::default());
        let mut request = RenderRequest::new(&tree, "armada-web", "web", values);
        edit(&mut request);
        render_key(&files, &request, "v3.22.0")
    }

    const FILES: &[(&str, &str)] = &[
        ("Chart.yaml", "name: web\n"),
        ("charts/lib/Chart.yaml", "name: lib\n"),
    ];

    #[test]
    fn the_key_is_stable_and_ignores_map_order() {
        let a = json!({"image": {"tag": "1", "repository": "r"}, "replicas": 2});
        let mut b = serde_json::Map::new();
        b.insert("replicas".into(), json!(2));
        b.insert("image".into(), json!({"repository": "r", "tag": "1"}));
        let b = Value::Object(b);
        assert_eq!(key_of(FILES, &a, |_| {}), key_of(FILES, &b, |_| {}));
        // A fixed input keeps its key across builds and platforms: a changed digest here means
        // every cache entry changes meaning (bump KEY_VERSION deliberately).
        assert_eq!(
            key_of(FILES, &a, |_| {}).to_string(),
            "3f79c56715503f1e3e25a9404dd183225c042ec75b0ab99bed44ed6eaacd58b4"
        );
        let caps = |r: &mut RenderRequest<'_>| {
            r.capabilities = Capabilities {
                kube_version: Some("v1.33.0".into()),
                api_versions: vec!["b/v1".into(), "a/v1".into(), "b/v1".into()],
            }
        };
        let caps_reordered = |r: &mut RenderRequest<'_>| {
            r.capabilities = Capabilities {
                kube_version: Some("v1.33.0".into()),
                api_versions: vec!["a/v1".into(), "b/v1".into()],
            }
        };
        assert_eq!(key_of(FILES, &a, caps), key_of(FILES, &a, caps_reordered));
    }

    #[test]
    fn every_input_changes_the_key() {
        let values = json!({"a": 1});
        let base = key_of(FILES, &values, |_| {});
        let mut others = vec![
            key_of(FILES, &json!({"a": 2}), |_| {}),
            key_of(FILES, &json!({"a": null}), |_| {}),
            key_of(FILES, &json!({"a": "1"}), |_| {}),
            key_of(&FILES[..1], &values, |_| {}),
            key_of(
                &[
                    ("Chart.yaml", "name: web\n"),
                    ("charts/lib/Chart.yaml", "name: lib2\n"),
                ],
                &values,
                |_| {},
            ),
            // A path/content split moved by one byte.
            key_of(
                &[
                    ("Chart.yamlname: web\n", ""),
                    ("charts/lib/Chart.yaml", "name: lib\n"),
                ],
                &values,
                |_| {},
            ),
            key_of(FILES, &values, |r| r.release = "armada-web2"),
            key_of(FILES, &values, |r| r.namespace = "other"),
            key_of(FILES, &values, |r| r.is_upgrade = true),
            key_of(FILES, &values, |r| {
                r.capabilities.kube_version = Some("v1.30.0".into())
            }),
            key_of(FILES, &values, |r| {
                r.capabilities.api_versions = vec!["x/v1".into()]
            }),
        ];
        let files: BTreeMap<String, &[u8]> = FILES
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes()))
            .collect();
        let tree = ChartTree::new(ChartFiles::default());
        let request = RenderRequest::new(&tree, "armada-web", "web", &values);
        others.push(render_key(&files, &request, "v3.22.1"));
        for (i, other) in others.iter().enumerate() {
            assert_ne!(&base, other, "input {i} did not change the key");
        }
        // The timeout and the brace check do not change helm's output.
        assert_eq!(
            base,
            key_of(FILES, &values, |r| {
                r.timeout = std::time::Duration::from_secs(1);
                r.allow_literal_braces = true;
            })
        );
    }

    #[test]
    fn canonical_json_escapes_and_sorts() {
        let mut out = Vec::new();
        canonical_json(
            &json!({"b": [1, 2.5, null, true], "a": "q\"\n", "é": {}}),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":"q\"\n","b":[1,2.5,null,true],"é":{}}"#
        );
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_the_least_recently_used() {
        let mut cache = RenderCache::new(2);
        let render = Arc::new(HelmRender::default());
        let k = |b: u8| RenderKey([b; 32]);
        cache.insert(k(1), render.clone());
        cache.insert(k(2), render.clone());
        assert!(cache.get(&k(1)).is_some()); // 2 is now the oldest
        cache.insert(k(3), render.clone());
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&k(2)).is_none());
        assert!(cache.get(&k(1)).is_some());
        assert!(cache.get(&k(3)).is_some());
        let mut none = RenderCache::new(0);
        none.insert(k(1), render);
        assert!(none.get(&k(1)).is_none());
    }
}
