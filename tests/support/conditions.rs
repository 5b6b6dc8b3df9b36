//! A Weft object's status conditions as the tests compare them: status, reason and message as
//! strings, found by type.

use weft::api::conditions::Condition;
use weft::api::root::Root;
use weft::api::WeaveCloud;

/// The kinds whose status carries conditions.
pub trait HasConditions {
    /// Its conditions (none before its first status).
    fn conditions(&self) -> &[Condition];
}

impl HasConditions for Root {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl HasConditions for WeaveCloud {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// The `type_` condition of `obj`: (status, reason, message).
pub fn condition(obj: &impl HasConditions, type_: &str) -> Option<(String, String, String)> {
    obj.conditions().iter().find(|c| c.type_ == type_).map(|c| {
        (
            format!("{:?}", c.status),
            c.reason.clone(),
            c.message.clone(),
        )
    })
}

/// The `type_` condition of `obj`: (status, reason).
pub fn status_reason(obj: &impl HasConditions, type_: &str) -> Option<(String, String)> {
    condition(obj, type_).map(|(status, reason, _)| (status, reason))
}

/// The `Ready` condition of `obj`: (status, reason, message).
pub fn ready(obj: &impl HasConditions) -> Option<(String, String, String)> {
    condition(obj, "Ready")
}
