//! The annotation that suspends one resource (`weft.io/suspend: "true"`, see
//! `daemon::suspend` for what suspending does): read by the pass, which holds a suspended owner
//! out, and by the controllers, the CLI and the daemon.

use crate::api::keys::SUSPEND_ANNOTATION;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// Is `value` the annotation value that suspends (`"true"`, any case, spaces trimmed)?
pub fn suspends(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Does `meta` carry `weft.io/suspend: "true"`?
pub fn annotated(meta: &ObjectMeta) -> bool {
    suspends(
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(SUSPEND_ANNOTATION))
            .map(String::as_str),
    )
}

/// Does the document `object` (a desired object, JSON) carry `weft.io/suspend: "true"`?
pub fn annotated_value(object: &Value) -> bool {
    suspends(
        object
            .pointer("/metadata/annotations/weft.io~1suspend")
            .and_then(Value::as_str),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_true_suspends_whatever_its_case_and_spaces() {
        for (value, suspended) in [
            ("true", true),
            (" True ", true),
            ("false", false),
            ("yes", false),
        ] {
            let object =
                serde_json::json!({"metadata": {"annotations": {SUSPEND_ANNOTATION: value}}});
            assert_eq!(annotated_value(&object), suspended, "{value:?}");
            let meta: ObjectMeta = serde_json::from_value(object["metadata"].clone()).unwrap();
            assert_eq!(annotated(&meta), suspended, "{value:?}");
        }
        assert!(!annotated_value(&serde_json::json!({"metadata": {}})));
    }
}
