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
