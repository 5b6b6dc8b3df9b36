//! Small manifests the tests write into their config repositories.

/// A ConfigMap `ns`/`name` whose key `value` holds the string `value`.
pub fn configmap(ns: &str, name: &str, value: &str) -> String {
    labelled_configmap(ns, name, &[], value)
}

/// [`configmap`] with `labels` (`key: value` pairs, as YAML flow mapping entries).
pub fn labelled_configmap(ns: &str, name: &str, labels: &[(&str, &str)], value: &str) -> String {
    let labels = if labels.is_empty() {
        String::new()
    } else {
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!("  labels: {{{}}}\n", pairs.join(", "))
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n{labels}data:\n  value: \"{value}\"\n"
    )
}
