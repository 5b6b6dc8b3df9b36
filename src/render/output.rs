//! Multi-document YAML output of desired objects (`weft render`).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::DesiredObject;

/// Top-level keys first in this order, as `kubectl` users read manifests; the rest alphabetical.
const LEADING_KEYS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// A Kubernetes object serialised with `apiVersion`, `kind`, `metadata` first.
struct ManifestOrder<'a>(&'a Value);

impl Serialize for ManifestOrder<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(map) = self.0 else {
            return self.0.serialize(serializer);
        };
        let mut out = serializer.serialize_map(Some(map.len()))?;
        for key in LEADING_KEYS {
            if let Some(v) = map.get(key) {
                out.serialize_entry(key, v)?;
            }
        }
        for (k, v) in map
            .iter()
            .filter(|(k, _)| !LEADING_KEYS.contains(&k.as_str()))
        {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

/// Serialise objects as a multi-document YAML stream, each document introduced by `---`.
pub fn to_yaml_stream(objects: &[DesiredObject]) -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&to_yaml(&o.object.value())?);
    }
    Ok(out)
}

/// One object as YAML.
pub fn to_yaml(value: &Value) -> Result<String, serde_saphyr::ser::Error> {
    let mut s = serde_saphyr::to_string(&ManifestOrder(value))?;
    if !s.ends_with('\n') {
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identity_keys_come_first_and_the_yaml_parses_back() {
        let v = json!({"data": {"b": "2", "a": "true"}, "metadata": {"name": "x"}, "kind": "ConfigMap", "apiVersion": "v1"});
        let text = to_yaml(&v).unwrap();
        assert!(
            text.starts_with("apiVersion: v1\nkind: ConfigMap\nmetadata:"),
            "{text}"
        );
        let back = crate::load::yaml::parse_documents(&text, Default::default()).unwrap();
        assert_eq!(
            back[0].value, v,
            "a string that looks like a boolean must stay quoted"
        );
    }
}
