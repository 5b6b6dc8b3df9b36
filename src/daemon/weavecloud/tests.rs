//! Unit tests of the WeaveCloud controller: pure parts, and reconciles against a scripted
//! fake API server.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;

use super::agents::{drifted, has_desired_changes};
use super::*;
use crate::apply::changeset::{Change, ChangeSet};

fn cm(name: &str) -> crate::api::ObjectRef {
    crate::api::ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: "weave".into(),
        name: name.into(),
    }
}

fn change(name: &str, action: ChangeAction, reason: Option<&str>) -> Change {
    Change {
        object: cm(name),
        owner: Owner::Resource {
            kind: "WeaveCloud".into(),
            namespace: "weave".into(),
            name: "wc".into(),
        },
        action,
        reason: reason.map(str::to_string),
    }
}

#[test]
fn drift_is_an_edited_field_or_a_deleted_child_not_a_spec_change() {
    let inventory: BTreeSet<_> = [cm("a"), cm("b")].into();
    let changes = ChangeSet {
        entries: vec![
            change("a", ChangeAction::Configured, Some("drifted: data.k")),
            change("b", ChangeAction::Created, None),
            change("c", ChangeAction::Unchanged, None),
        ],
    };
    assert_eq!(
        drifted(&changes, &inventory),
        vec![
            "ConfigMap/weave/a (drifted: data.k)".to_string(),
            "ConfigMap/weave/b (deleted)".to_string()
        ]
    );
    assert!(!has_desired_changes(&changes, &inventory));
    let spec_change = ChangeSet {
        entries: vec![
            change("a", ChangeAction::Configured, Some("changed")),
            change("new", ChangeAction::Created, None),
        ],
    };
    assert!(drifted(&spec_change, &inventory).is_empty());
    assert!(has_desired_changes(&spec_change, &inventory));
}

#[test]
fn children_map_to_their_weavecloud_by_annotation() {
    let mut d = Deployment::default();
    d.metadata.annotations = Some(
        [(
            OWNER_REF_ANNOTATION.to_string(),
            "WeaveCloud/weave/wc".to_string(),
        )]
        .into(),
    );
    let r = owner_ref_of(&d).unwrap();
    assert_eq!(r.name, "wc");
    assert_eq!(r.namespace.as_deref(), Some("weave"));
    d.metadata.annotations =
        Some([(OWNER_REF_ANNOTATION.to_string(), "root/weft".to_string())].into());
    assert!(owner_ref_of(&d).is_none());
}
