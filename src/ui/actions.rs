//! The actions: HTML forms posted to the UI, carried out as the user's own API-server writes, so
//! their RBAC decides (a 403 from the API server is shown as such).
//!
//! - Sync a root (a Root in Weft's namespace, such as a `weft run`'s flag root): a new
//!   `weft.io/requested-at` on the Root, as `weft trigger root` writes it; its status's
//!   `lastHandledRequestedAt` answers it.
//! - Suspend / resume it: its `spec.suspend` (with why in `weft.io/suspend-message`), as `weft
//!   suspend` / `weft resume` write it; resuming also asks for a pass.
//! - Sync a resource (WeaveCloud, ArmadaChart, ArmadaChartGroup, ArmadaManifest): its
//!   `weft.io/requested-at` annotation, which its controller reconciles on; suspend / resume it:
//!   its `weft.io/suspend` annotation.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use kube::api::{Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use super::{Ui, UiError};
use crate::api::armada::{ArmadaChart, ArmadaChartGroup, ArmadaManifest};
use crate::api::keys::REQUESTED_AT_ANNOTATION;
use crate::api::keys::SUSPEND_ANNOTATION;
use crate::api::WeaveCloud;
use crate::daemon::roots::requests;
use crate::daemon::status::now_rfc3339;

/// The field manager of the UI's annotation writes.
const UI_MANAGER: &str = "weft-ui";

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(UI_MANAGER.to_string()),
        ..Default::default()
    }
}

/// The longest suspend message kept.
const MAX_MESSAGE: usize = 500;

/// What every form posts.
#[derive(Deserialize)]
pub struct ActionForm {
    /// The page's token ([`Ui::token`]).
    token: String,
    /// Where to go afterwards: a path of this UI.
    #[serde(default)]
    back: String,
    /// A suspend's reason.
    #[serde(default)]
    message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Sync,
    Suspend,
    Resume,
}

fn action(name: &str) -> Result<Action, UiError> {
    match name {
        "sync" => Ok(Action::Sync),
        "suspend" => Ok(Action::Suspend),
        "resume" => Ok(Action::Resume),
        _ => Err(UiError::NotFound(format!("no action {}", bounded(name)))),
    }
}

/// At most 100 characters of something the request named.
fn bounded(s: &str) -> String {
    let mut out: String = s.chars().take(100).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Check the form's token; the page to return to (this UI's own paths only).
fn checked(ui: &Ui, form: &ActionForm) -> Result<String, UiError> {
    let same = form.token.len() == ui.token().len()
        && subtle::ConstantTimeEq::ct_eq(form.token.as_bytes(), ui.token().as_bytes()).into();
    if !same {
        return Err(UiError::Refused(
            "the form's token is not this UI's (reload the page)",
        ));
    }
    let back = &form.back;
    Ok(
        if back.starts_with('/') && !back.starts_with("//") && !back.contains('\\') {
            back.clone()
        } else {
            "/".to_string()
        },
    )
}

/// `POST /roots/{name}/{sync|suspend|resume}`: the Root `name` in Weft's namespace.
pub async fn root_action(
    State(ui): State<Ui>,
    Path((name, act)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let result = async {
        let back = checked(&ui, &form)?;
        let act = action(&act)?;
        let ns = &ui.config().weft_namespace;
        match act {
            Action::Sync => {
                requests::request(ui.client(), ns, &name).await?;
            }
            Action::Suspend | Action::Resume => {
                let message: String = form.message.chars().take(MAX_MESSAGE).collect();
                let message = Some(message).filter(|m| !m.trim().is_empty());
                let message = message.unwrap_or_else(|| "suspended from weft ui".to_string());
                let suspended = act == Action::Suspend;
                requests::set_suspended(ui.client(), ns, &name, suspended, Some(&message)).await?;
            }
        }
        tracing::info!(root = %format!("{ns}/{name}"), action = ?act, "done from weft ui");
        Ok::<_, UiError>(back)
    }
    .await;
    match result {
        Ok(back) => Redirect::to(&back).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /resources/{kind}/{namespace}/{name}/{sync|suspend|resume}`.
pub async fn resource_action(
    State(ui): State<Ui>,
    Path((kind, namespace, name, act)): Path<(String, String, String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let result = async {
        let back = checked(&ui, &form)?;
        let act = action(&act)?;
        let annotations = match act {
            Action::Sync => json!({REQUESTED_AT_ANNOTATION: now_rfc3339()}),
            Action::Suspend => json!({SUSPEND_ANNOTATION: "true"}),
            Action::Resume => json!({SUSPEND_ANNOTATION: null}),
        };
        let patch = json!({"metadata": {"annotations": annotations}});
        match kind.as_str() {
            "WeaveCloud" => annotate::<WeaveCloud>(&ui, &namespace, &name, &patch).await,
            "ArmadaChart" => annotate::<ArmadaChart>(&ui, &namespace, &name, &patch).await,
            "ArmadaChartGroup" => {
                annotate::<ArmadaChartGroup>(&ui, &namespace, &name, &patch).await
            }
            "ArmadaManifest" => annotate::<ArmadaManifest>(&ui, &namespace, &name, &patch).await,
            other => Err(UiError::NotFound(format!(
                "no action on kind {}",
                bounded(other)
            ))),
        }?;
        tracing::info!(%kind, %namespace, %name, action = ?act, "done from weft ui");
        Ok::<_, UiError>(back)
    }
    .await;
    match result {
        Ok(back) => Redirect::to(&back).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn annotate<K>(
    ui: &Ui,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), UiError>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(ui.client().clone(), namespace);
    let what = format!(
        "annotating {}/{}/{}",
        K::kind(&K::DynamicType::default()),
        bounded(namespace),
        bounded(name)
    );
    api.patch(name, &patch_params(), &Patch::Merge(patch))
        .await
        .map_err(UiError::write(what))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded() {
        assert_eq!(bounded("abc"), "abc");
        let long = "x".repeat(500);
        assert_eq!(bounded(&long).chars().count(), 101);
    }

    #[test]
    fn actions_are_known_by_name() {
        assert_eq!(action("sync").ok(), Some(Action::Sync));
        assert!(action("delete").is_err());
    }
}
