//! The `Ready` condition of Providers and Alerts, and the events that say when it changes: a
//! Provider that cannot send (its Secret missing, a key missing, an address refused) is
//! `Ready=False` with a reason naming what is wrong, and gets a `Warning` event with the same
//! reason and message once, when it turns so (a `Normal` event `Valid` when it can send again).
//!
//! Two writers judge them the same way: the daemon's dispatcher, for every Provider and Alert it
//! watches ([`StatusWriter`] in its check loop), and `weft sync`, for those its pass applied
//! ([`record_applied`]). Neither ever fails or holds back anything else: the pass does not wait
//! for these resources (`pass::policy`), and a notification that cannot be sent blocks no
//! deployment.
//!
//! `weft sync` does not know the daemon's `--allowed-notification-urls`: it judges everything but
//! the destination, and leaves an `AddressNotAllowed` verdict of the daemon as it is (so the two
//! never write over each other).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::destination_policy::NotificationPolicy;
use super::matching::AlertRule;
use super::payload::{self, ProviderProblem, ResolvedProvider};
use crate::api::conditions::{set_condition, Condition, ConditionStatus, READY};
use crate::api::notification::{Alert, NotificationStatus, Provider, GROUP};
use crate::render::DesiredSet;

/// The reason of a Provider or Alert that is usable.
pub const VALID: &str = "Valid";
/// The reason of a Provider whose destination the daemon's allow-list refuses.
const ADDRESS_NOT_ALLOWED: &str = "AddressNotAllowed";

/// Why a Provider cannot be resolved now.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{0}")]
    Spec(#[from] ProviderProblem),
    #[error("reading the Provider's Secret: {}", crate::api::kube_error::Text(.0))]
    Api(#[source] kube::Error),
}

/// `provider` with its Secret read, its destination allowed by `policy` (`None`: not checked,
/// as `weft sync`, which does not know the daemon's allow-list).
pub async fn resolve(
    client: &Client,
    provider: &Provider,
    policy: Option<&NotificationPolicy>,
) -> Result<ResolvedProvider, ResolveError> {
    let namespace = provider.namespace().unwrap_or_default();
    let secret = match &provider.spec.secret_ref {
        Some(r) => match Api::<Secret>::namespaced(client.clone(), &namespace)
            .get_opt(&r.name)
            .await
        {
            Ok(secret) => secret.map(crate::api::secret_bytes),
            // A refusal is an answer, not an outage: the Provider cannot send until the
            // account may read it (a tenant's root reads it as the tenant).
            Err(kube::Error::Api(status)) if status.code == 403 => {
                let why = crate::api::kube_error::Text(&kube::Error::Api(status)).to_string();
                return Err(ProviderProblem::SecretForbidden {
                    name: r.name.clone(),
                    why: crate::api::bounded::clip(&why, 1000),
                }
                .into());
            }
            Err(e) => return Err(ResolveError::Api(e)),
        },
        None => None,
    };
    let resolved = payload::resolve(&provider.spec, secret.as_ref())?;
    if let Some(policy) = policy {
        policy
            .check(resolved.target.destination())
            .map_err(ProviderProblem::from)?;
    }
    Ok(resolved)
}

/// Whether `provider`'s status already says it cannot send, for the reason of `error`.
pub fn says_not_ready(provider: &Provider, error: &ResolveError) -> bool {
    let ResolveError::Spec(problem) = error else {
        return false;
    };
    current_ready(provider).is_some_and(|c| {
        c.status == ConditionStatus::False
            && c.reason == problem.reason()
            && c.message == problem.to_string()
    })
}

/// The `Ready` condition `provider` deserves; `None` when the API server could not tell (the
/// Secret could not be read): judged again later.
pub async fn judge_provider(
    client: &Client,
    provider: &Provider,
    policy: Option<&NotificationPolicy>,
) -> Option<Condition> {
    match resolve(client, provider, policy).await {
        Ok(_) => Some(ready("the provider can send")),
        Err(ResolveError::Spec(problem)) => Some(not_ready(problem.reason(), problem.to_string())),
        Err(e @ ResolveError::Api(_)) => {
            tracing::debug!(provider = %format!("{}/{}", provider.namespace().unwrap_or_default(), provider.name_any()), error = %e, "the Provider is judged again later");
            None
        }
    }
}

/// The `Ready` condition of `alert`, whose Provider exists or not.
pub fn judge_alert(alert: &Alert, provider_exists: bool) -> Condition {
    let namespace = alert.namespace().unwrap_or_default();
    match AlertRule::new(&namespace, &alert.name_any(), &alert.spec) {
        Err(problem) => not_ready(problem.reason(), problem.to_string()),
        Ok(_) if !provider_exists => not_ready(
            "ProviderNotFound",
            format!(
                "Provider {} does not exist in namespace {namespace}",
                alert.spec.provider_ref.name
            ),
        ),
        Ok(_) => ready("the alert forwards matching events"),
    }
}

fn ready(message: &str) -> Condition {
    Condition::new(READY, ConditionStatus::True, VALID, message)
}

fn not_ready(reason: &str, message: String) -> Condition {
    Condition::new(READY, ConditionStatus::False, reason, message)
}

/// A Provider or an Alert: both have a [`NotificationStatus`].
pub trait HasStatus:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
    fn status(&self) -> Option<&NotificationStatus>;
}
impl HasStatus for Provider {
    fn status(&self) -> Option<&NotificationStatus> {
        self.status.as_ref()
    }
}
impl HasStatus for Alert {
    fn status(&self) -> Option<&NotificationStatus> {
        self.status.as_ref()
    }
}

/// Same status, reason and message (the times differ).
fn same(a: &Condition, b: &Condition) -> bool {
    a.status == b.status && a.reason == b.reason && a.message == b.message
}

/// The `Ready` condition in `obj`'s status.
fn current_ready<K: HasStatus>(obj: &K) -> Option<&Condition> {
    obj.status()?.conditions.iter().find(|c| c.type_ == READY)
}

/// Writes the `Ready` condition of Providers and Alerts, only when it changes, with an event
/// when it does.
pub struct StatusWriter {
    client: Client,
    recorder: super::sealed::SealedRecorders,
    /// The last condition written (or read) per object: a write only when it changes.
    known: BTreeMap<(String, String, String), (Option<i64>, Condition)>,
}

impl StatusWriter {
    /// A writer on `client`, publishing events as the controller `weft`.
    pub fn new(client: Client) -> StatusWriter {
        StatusWriter {
            recorder: super::sealed::SealedRecorders::new(client.clone()),
            client,
            known: BTreeMap::new(),
        }
    }

    /// The same writer, sealing its events with the key of Weft's namespace `namespace`
    /// (`notify::sealed`), as every event of Weft's is.
    pub fn sealed_in(mut self, namespace: &str) -> StatusWriter {
        self.recorder = self.recorder.sealed_in(namespace);
        self
    }

    /// Write `condition` as `obj`'s `Ready`, unless it already says so; on a change, an event
    /// (`Warning` with the condition's reason when it is `False`, `Normal` `Valid` when it turns
    /// `True` again). `true` when this write turned it `False` (the caller may log it). A
    /// failure is logged, never returned: a standby's writes are refused by its write fence, and
    /// the leader writes them.
    pub async fn write<K: HasStatus>(&mut self, obj: &K, condition: Condition) -> bool {
        let namespace = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let kind = K::kind(&()).to_string();
        let generation = obj.meta().generation;
        let key = (kind.clone(), namespace.clone(), name.clone());
        let current = obj.status().cloned().unwrap_or_default();
        let before = current_ready(obj).cloned();
        let in_status = current.observed_generation == generation
            && before.as_ref().is_some_and(|c| same(c, &condition));
        let remembered = self
            .known
            .get(&key)
            .is_some_and(|(g, c)| *g == generation && same(c, &condition));
        if in_status || remembered {
            return false;
        }
        let mut conditions = current.conditions.clone();
        let now = format!("{:.0}", k8s_openapi::jiff::Timestamp::now());
        set_condition(
            &mut conditions,
            Condition {
                observed_generation: generation,
                ..condition.clone()
            },
            &now,
        );
        let patch = json!({"status": {"conditions": conditions, "observedGeneration": generation}});
        let api: Api<K> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(kind = %kind, object = %format!("{namespace}/{name}"), error = %e, "cannot write status");
            return false;
        }
        self.known.insert(key, (generation, condition.clone()));
        let changed = before.as_ref().is_none_or(|b| !same(b, &condition));
        let turned_false = condition.status == ConditionStatus::False;
        let turned_true = before
            .as_ref()
            .is_some_and(|b| b.status == ConditionStatus::False);
        if changed && turned_false {
            self.event(
                obj,
                EventType::Warning,
                &condition.reason,
                &condition.message,
            )
            .await;
        } else if changed && turned_true {
            self.event(obj, EventType::Normal, VALID, &condition.message)
                .await;
        }
        changed && turned_false
    }

    async fn event<K: HasStatus>(&self, obj: &K, type_: EventType, reason: &str, note: &str) {
        let e = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note.to_string()),
            action: "Check".to_string(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&e, &obj.object_ref(&())).await {
            tracing::warn!(kind = %K::kind(&()), object = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()), reason, error = %err, "cannot publish event");
        }
    }
}

/// A Provider or Alert that `weft sync` found unusable: what it prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unusable {
    /// `Provider/namespace/name`.
    pub object: String,
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is not ready ({}): {}; notifications through it are not sent, nothing else is held back",
            self.object, self.reason, self.message
        )
    }
}

/// The `(kind, namespace, name)` of the Providers and Alerts of `set`.
fn notification_resources(set: &DesiredSet) -> Vec<(String, String, String)> {
    set.objects()
        .iter()
        .filter(|o| o.api_version().split('/').next() == Some(GROUP))
        .filter(|o| matches!(o.kind(), "Provider" | "Alert"))
        .map(|o| {
            (
                o.kind().to_string(),
                o.namespace().unwrap_or_default().to_string(),
                o.name().to_string(),
            )
        })
        .collect()
}

/// After a `weft sync` pass: judge the Providers and Alerts the pass applied (from `set`), as
/// the daemon does (but for its allow-list), write their `Ready` and an event when it changes,
/// and return those that cannot be used. Never fails: what cannot be read is left for later.
pub async fn record_applied(
    client: &Client,
    weft_namespace: &str,
    set: &DesiredSet,
) -> Vec<Unusable> {
    let mut writer = StatusWriter::new(client.clone()).sealed_in(weft_namespace);
    let mut unusable = Vec::new();
    for (kind, namespace, name) in notification_resources(set) {
        let providers: Api<Provider> = Api::namespaced(client.clone(), &namespace);
        let condition = match kind.as_str() {
            "Provider" => {
                let Ok(Some(p)) = providers.get_opt(&name).await else {
                    continue;
                };
                let Some(condition) = judge_provider(client, &p, None).await else {
                    continue;
                };
                // The daemon's allow-list refused it: `weft sync` cannot tell otherwise.
                let refused = current_ready(&p).is_some_and(|c| c.reason == ADDRESS_NOT_ALLOWED);
                if condition.status == ConditionStatus::True && refused {
                    continue;
                }
                writer.write(&p, condition.clone()).await;
                condition
            }
            _ => {
                let alerts: Api<Alert> = Api::namespaced(client.clone(), &namespace);
                let Ok(Some(a)) = alerts.get_opt(&name).await else {
                    continue;
                };
                let Ok(exists) = providers.get_opt(&a.spec.provider_ref.name).await else {
                    continue;
                };
                let condition = judge_alert(&a, exists.is_some());
                writer.write(&a, condition.clone()).await;
                condition
            }
        };
        if condition.status == ConditionStatus::False {
            unusable.push(Unusable {
                object: format!("{kind}/{namespace}/{name}"),
                reason: condition.reason,
                message: condition.message,
            });
        }
    }
    unusable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::notification::{AlertSpec, LocalRef, SeverityFilter};
    use crate::render::Owner;

    #[test]
    fn only_weft_s_providers_and_alerts_of_a_set_are_judged() {
        let root = Owner::root("weft-system", "weft");
        let object = |api_version: &str, kind: &str, name: &str| {
            root.adopt(
                json!({"apiVersion": api_version, "kind": kind,
                    "metadata": {"name": name, "namespace": "apps"}}),
                0,
                None,
            )
        };
        let set = DesiredSet::for_owners(
            vec![
                object("notification.weft.io/v1alpha1", "Provider", "slack"),
                object("notification.weft.io/v1alpha1", "Alert", "failures"),
                object("pkg.crossplane.io/v1", "Provider", "aws"),
                object("v1", "Secret", "slack"),
            ],
            [root.clone()].into(),
        );
        assert_eq!(
            notification_resources(&set),
            vec![
                ("Alert".into(), "apps".into(), "failures".into()),
                ("Provider".into(), "apps".into(), "slack".into()),
            ]
        );
    }

    #[test]
    fn an_alert_without_its_provider_says_which() {
        let mut a = Alert::new(
            "failures",
            AlertSpec {
                provider_ref: LocalRef {
                    name: "slack".into(),
                },
                event_severity: SeverityFilter::Error,
                event_sources: Vec::new(),
                exclusion_list: Vec::new(),
                summary: None,
                suspend: false,
            },
        );
        a.metadata.namespace = Some("apps".into());
        let c = judge_alert(&a, false);
        assert_eq!(c.reason, "ProviderNotFound");
        assert_eq!(c.message, "Provider slack does not exist in namespace apps");
        assert_eq!(judge_alert(&a, true).reason, VALID);
    }

    #[test]
    fn what_weft_sync_prints_names_the_object_and_what_is_wrong() {
        let u = Unusable {
            object: "Provider/apps/slack".into(),
            reason: "SecretNotFound".into(),
            message: ProviderProblem::SecretNotFound {
                name: "slack-webhook".into(),
            }
            .to_string(),
        };
        assert_eq!(
            u.to_string(),
            "Provider/apps/slack is not ready (SecretNotFound): Secret slack-webhook (secretRef) \
             does not exist in the Provider's namespace; notifications through it are not sent, \
             nothing else is held back"
        );
    }
}
