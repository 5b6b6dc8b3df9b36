//! What suspends what, as `flux suspend` says it:
//!
//! - **a resource** (WeaveCloud, ArmadaChart, ArmadaChartGroup, ArmadaManifest):
//!   `weft.io/suspend: "true"` on it — read by the pass, which holds a suspended owner out, and
//!   by the controllers;
//! - **a root**: its Root's `spec.suspend`, with why in `weft.io/suspend-message` (written by
//!   `daemon::roots::requests::set_suspended`, which `weft suspend|resume` and `POST
//!   /api/v1/suspend|resume` call; read by the Root controller and `weft sync`).

use crate::api::conditions::{Condition, ConditionStatus};
use crate::api::keys::{SUSPEND_ANNOTATION, SUSPEND_MESSAGE_ANNOTATION};
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

/// Why the root of `meta` (a Root's metadata) is suspended, as it was told; `None`: not said.
pub fn message(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(SUSPEND_MESSAGE_ANNOTATION))
        .map(String::as_str)
        .filter(|m| !m.trim().is_empty())
}

/// Why a one-shot pass of the Root `root` must not run (`weft sync`): it is suspended.
pub fn refuses_one_shot(root: &crate::api::root::Root) -> Option<String> {
    let name = root.metadata.name.as_deref().unwrap_or_default();
    root.spec.suspend.then(|| {
        let why = message(&root.metadata).map(|m| format!(" ({m})")).unwrap_or_default();
        format!("the root {name} is suspended{why}; nothing was applied or pruned (`weft resume` first)")
    })
}

/// What a suspended root answers a request with: one line, with why when it was said.
pub fn root_refusal(message: Option<&str>) -> String {
    match message {
        Some(m) => format!("the root is suspended ({m}); nothing was fetched, applied or pruned (resume with `weft resume`)"),
        None => "the root is suspended (spec.suspend); nothing was fetched, applied or pruned (resume with `weft resume`)".to_string(),
    }
}

/// The condition type of a suspended resource.
pub const SUSPENDED: &str = "Suspended";

/// The `Suspended` condition of a resource: `True` while suspended, `False` once resumed.
pub fn condition(suspended: bool, why: &str) -> Condition {
    if suspended {
        Condition {
            type_: SUSPENDED.into(),
            status: ConditionStatus::True,
            reason: "Suspended".into(),
            message: format!("{why}: Weft changes nothing it owns until it is resumed"),
            ..Default::default()
        }
    } else {
        Condition {
            type_: SUSPENDED.into(),
            status: ConditionStatus::False,
            reason: "Resumed".into(),
            message: "reconciled as usual".into(),
            ..Default::default()
        }
    }
}

/// Does `conditions` say `Suspended=True`?
pub fn marked(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == SUSPENDED && c.status == ConditionStatus::True)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

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

    #[test]
    fn only_true_suspends() {
        for (value, expected) in [
            (Some("true"), true),
            (Some("True"), true),
            (Some(" true "), true),
            (Some("false"), false),
            (Some("yes"), false),
            (Some(""), false),
            (None, false),
        ] {
            assert_eq!(suspends(value), expected, "{value:?}");
        }
    }

    #[test]
    fn annotations_of_metadata_and_documents() {
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(
                SUSPEND_ANNOTATION.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        };
        assert!(annotated(&meta));
        assert!(!annotated(&ObjectMeta::default()));
        let doc = json!({"metadata": {"name": "a", "annotations": {"weft.io/suspend": "true"}}});
        assert!(annotated_value(&doc));
        let doc = json!({"metadata": {"name": "a", "annotations": {"weft.io/suspend": "false"}}});
        assert!(!annotated_value(&doc));
        assert!(!annotated_value(&json!({"metadata": {"name": "a"}})));
    }

    #[test]
    fn conditions_say_which_way() {
        let c = condition(true, "weft.io/suspend is \"true\"");
        assert_eq!(
            (c.type_.as_str(), c.status),
            (SUSPENDED, ConditionStatus::True)
        );
        assert!(c.message.contains("weft.io/suspend"));
        let c = condition(false, "");
        assert_eq!(c.status, ConditionStatus::False);
        assert_eq!(c.reason, "Resumed");
    }
}
