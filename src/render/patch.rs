//! RFC 6902 JSON patches from the repository (Armada `values.overlays`), applied within a
//! [`Budget`]: each operation is charged for what it adds before it runs. `copy` of `/spec`
//! into `/spec/x` doubles an object per operation, so forty operations of an unbounded patch
//! would fill memory; `add` at ever deeper paths nests past what a recursive serializer's
//! stack survives.

use json_patch::{PatchError, PatchOperation};
use serde_json::Value;

use crate::load::budget::{measure, pointer_depth, Budget, Exceeded};

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchFailure {
    #[error("JSON patch failed: {0}")]
    Patch(#[source] PatchError),
    #[error("operation {op} would exceed the render budget: it {source} (see docs/security.md)")]
    Budget {
        op: usize,
        #[source]
        source: Exceeded,
    },
}

/// Apply `ops` to `object` one at a time, each charged to `budget` before it runs. On failure
/// `object` holds the operations before the failing one (callers discard it: the render fails).
pub fn apply_within(
    object: &mut Value,
    ops: &[PatchOperation],
    budget: &mut Budget,
) -> Result<(), PatchFailure> {
    for (i, op) in ops.iter().enumerate() {
        charge(object, op, budget).map_err(|source| PatchFailure::Budget { op: i, source })?;
        json_patch::patch(object, std::slice::from_ref(op)).map_err(PatchFailure::Patch)?;
    }
    Ok(())
}

fn charge(object: &Value, op: &PatchOperation, budget: &mut Budget) -> Result<(), Exceeded> {
    match op {
        PatchOperation::Add(a) => budget.copy(&a.value, pointer_depth(a.path.as_str())),
        PatchOperation::Replace(r) => budget.copy(&r.value, pointer_depth(r.path.as_str())),
        PatchOperation::Copy(c) => match object.pointer(c.from.as_str()) {
            Some(v) => budget.copy(v, pointer_depth(c.path.as_str())),
            None => Ok(()), // json_patch reports the missing `from`
        },
        // Nothing new, but a move can nest deeper.
        PatchOperation::Move(m) => match object.pointer(m.from.as_str()) {
            Some(v) => {
                budget.depth(pointer_depth(m.path.as_str()) + measure(v, budget.limits()).depth)
            }
            None => Ok(()),
        },
        PatchOperation::Remove(_) | PatchOperation::Test(_) => Ok(()),
    }
}

/// An RFC 7386 merge patch within `budget` (charged for the whole patch: it may add all of it).
pub fn merge_within(
    object: &mut Value,
    patch: &Value,
    budget: &mut Budget,
) -> Result<(), Exceeded> {
    budget.copy(patch, 0)?;
    json_patch::merge(object, patch);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(v: Value) -> Vec<PatchOperation> {
        serde_json::from_value::<json_patch::Patch>(v).unwrap().0
    }

    #[test]
    fn a_failing_operation_after_a_replace_is_an_error_not_a_panic() {
        // Found by tests/it/proptest_render.rs: json-patch 4.2 applies a whole patch atomically and
        // panics ("unable to undo applied patches") when this second operation fails. One
        // operation at a time, nothing needs undoing: the overlay fails with an error.
        let mut doc = json!({"a": null, "a0": [null, null, null, null], "aa": null});
        let patch = ops(json!([
            {"op": "replace", "path": "/aa", "value": false},
            {"op": "move", "from": "/aa", "path": "/a/k1"},
        ]));
        let err = apply_within(&mut doc, &patch, &mut Budget::default()).unwrap_err();
        assert!(matches!(err, PatchFailure::Patch(_)), "{err}");
    }

    #[test]
    fn each_operation_is_charged_before_it_runs() {
        let mut doc = json!({"spec": {"a": [1, 2, 3]}});
        let doubling: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/c{i}")}))
            .collect();
        let mut budget = Budget::new(crate::load::budget::Limits {
            max_nodes: 10_000,
            ..Default::default()
        });
        let err = apply_within(&mut doc, &ops(Value::Array(doubling)), &mut budget).unwrap_err();
        // 5 nodes doubling: operation 11 would pass 10,000 nodes in all.
        match err {
            PatchFailure::Budget { op, .. } => assert!((8..=12).contains(&op), "op {op}"),
            other => panic!("{other}"),
        }
        assert!(measure(&doc, &Default::default()).nodes <= 10_000 + 5);
    }
}
