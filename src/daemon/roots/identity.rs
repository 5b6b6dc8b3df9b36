//! Whom a root's pass acts as (issue 41, "Identity"): Weft itself only for a root in Weft's own
//! namespace without `serviceAccountName`; otherwise the root's ServiceAccount, through
//! Kubernetes impersonation (`Impersonate-User: system:serviceaccount:<ns>:<name>`). A tenant
//! who may create a Root in their namespace thus never gets more than their own account has.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;

use crate::api::root::Root;
use crate::apply::fence::{FenceLayer, WriteFence};
use crate::render::Owner;

/// Whom a root acts as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// Weft's own identity: a root in Weft's namespace without `serviceAccountName`.
    Weft,
    /// `system:serviceaccount:<namespace>:<name>`.
    ServiceAccount { namespace: String, name: String },
}

impl Identity {
    /// The user name the API server sees.
    pub fn user(&self) -> Option<String> {
        match self {
            Identity::Weft => None,
            Identity::ServiceAccount { namespace, name } => {
                Some(format!("system:serviceaccount:{namespace}:{name}"))
            }
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.user() {
            None => f.write_str("Weft's own ServiceAccount"),
            Some(user) => f.write_str(&user),
        }
    }
}

/// Why a root may not run at all (its `Stalled` reason and message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub reason: &'static str,
    pub message: String,
}

/// Whom `root` (in `namespace`) acts as, given Weft's namespace and the operator's
/// `--default-service-account`. The account is a name in the root's own namespace: another
/// namespace's account cannot be named.
pub fn identity_of(
    root: &Root,
    namespace: &str,
    weft_namespace: &str,
    default_account: Option<&str>,
) -> Result<Identity, Refused> {
    match &root.spec.service_account_name {
        Some(name) => Ok(Identity::ServiceAccount {
            namespace: namespace.to_string(),
            name: name.clone(),
        }),
        None if namespace == weft_namespace => Ok(Identity::Weft),
        None if default_account.is_some() => Ok(Identity::ServiceAccount {
            namespace: namespace.to_string(),
            name: default_account.unwrap_or_default().to_string(),
        }),
        None => Err(Refused {
            reason: "ServiceAccountRequired",
            message: format!(
                "a root outside Weft's namespace {weft_namespace} runs as a ServiceAccount of its own namespace: set spec.serviceAccountName; nothing was fetched or applied"
            ),
        }),
    }
}

/// Condition reason of a root that a tenant's root declared to act as more than that root.
pub const NOT_ALLOWED: &str = "ServiceAccountNotAllowed";

/// Whether the root `child` may act as `identity`, given that the root `parent` applied it and
/// acts as `parent_identity` (`None`: that root does not exist, or may not run itself). A root
/// acting as Weft may declare roots acting as anyone; any other root only roots acting as its
/// own account: a tenant never mints a root with more rights than its own (issue 42 item 2),
/// and one account of a namespace is not another's, whatever a namespace admin may do by hand.
pub fn within_parent(
    child: &crate::api::ResourceKey,
    identity: &Identity,
    parent: &crate::api::ResourceKey,
    parent_identity: Option<&Identity>,
) -> Result<(), Refused> {
    match parent_identity {
        Some(Identity::Weft) => Ok(()),
        Some(p) if p == identity => Ok(()),
        Some(p) => Err(Refused {
            reason: NOT_ALLOWED,
            message: format!(
                "Root {child} was declared by root {parent}, which acts as {p}; a root that a tenant's root declares acts as that same account, never as {identity}: set spec.serviceAccountName to {}, or have the platform's root declare it; nothing was fetched or applied",
                match p {
                    Identity::ServiceAccount { name, .. } => name.as_str(),
                    Identity::Weft => "",
                }
            ),
        }),
        None => Err(Refused {
            reason: NOT_ALLOWED,
            message: format!(
                "Root {child} was declared by root {parent}, which does not exist or may not run; it runs only when the root that declares it may act as {identity}; nothing was fetched or applied"
            ),
        }),
    }
}

/// Why an impersonating client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("this daemon has no cluster configuration to impersonate {0} with (it was started without one); nothing was fetched or applied")]
    Unavailable(String),
    #[error("building a client that acts as {user}: {source}")]
    Client {
        user: String,
        #[source]
        source: crate::apply::calls::ConnectError,
    },
}

/// Builds (once per account) clients that act as a root's ServiceAccount: the daemon's own
/// cluster configuration with `Impersonate-User` set, behind the same write fence and API
/// deadline as the daemon's client.
pub struct Impersonation {
    /// Shared by every held root's `Impersonation` (a `kube::Config` with its certificates is
    /// several KiB; one copy per held root was kept before).
    config: Option<Arc<kube::Config>>,
    fence: WriteFence,
    timeout: Duration,
    clients: Mutex<HashMap<String, Client>>,
}

impl Impersonation {
    pub fn new(
        config: Option<Arc<kube::Config>>,
        fence: WriteFence,
        timeout: Duration,
    ) -> Impersonation {
        Impersonation {
            config,
            fence,
            timeout,
            clients: Mutex::default(),
        }
    }

    /// The client `identity` acts with: `own` for Weft, else an impersonating one.
    pub fn client(&self, identity: &Identity, own: &Client) -> Result<Client, IdentityError> {
        let Some(user) = identity.user() else {
            return Ok(own.clone());
        };
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&user) {
            return Ok(c.clone());
        }
        let Some(config) = &self.config else {
            return Err(IdentityError::Unavailable(user));
        };
        let mut config = kube::Config::clone(config);
        config.auth_info.impersonate = Some(user.clone());
        // Only the account's own groups, as the API server derives them from the user name.
        config.auth_info.impersonate_groups = None;
        let layer = FenceLayer {
            fence: self.fence.clone(),
            timeout: self.timeout,
        };
        let (client, _) =
            crate::apply::calls::counting_client_with(config, layer).map_err(|source| {
                IdentityError::Client {
                    user: user.clone(),
                    source,
                }
            })?;
        clients.insert(user, client.clone());
        Ok(client)
    }
}

/// The identity of the root whose pass applied an object, for the work that object causes
/// outside any pass: a notification Provider's Secret, read by the dispatcher when it sends.
/// Its owner label and reference name the root; the root's identity is read from the Root
/// object itself (its `serviceAccountName`, or the default account), never from anything on the
/// object. An object no Root object applied (made by hand, or applied by the `weft run` flags'
/// root, its shards or the operator's `weft sync`, all in Weft's namespace) is read as Weft, as
/// before.
pub struct AppliedAs {
    own: Client,
    impersonation: Impersonation,
    weft_namespace: String,
    flag_root: crate::api::ResourceKey,
    default_account: Option<String>,
}

impl AppliedAs {
    /// For the daemon's `own` client, its namespace and the flag root's name, and its roots'
    /// configuration.
    pub fn new(
        own: Client,
        fence: WriteFence,
        weft_namespace: &str,
        flag_root: &str,
        config: &super::RootsConfig,
    ) -> AppliedAs {
        AppliedAs {
            own,
            impersonation: Impersonation::new(
                config.cluster.clone().map(Arc::new),
                fence,
                config.api_timeout,
            ),
            weft_namespace: weft_namespace.to_string(),
            flag_root: crate::api::ResourceKey {
                namespace: weft_namespace.to_string(),
                name: flag_root.to_string(),
            },
            default_account: config.default_service_account.clone(),
        }
    }

    /// The client to act for the object of `meta` with; `None`: Weft's own.
    pub async fn client_of(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Result<Option<Client>, String> {
        let (labels, annotations) = (
            meta.labels.clone().unwrap_or_default(),
            meta.annotations.clone().unwrap_or_default(),
        );
        let Some(owner) = Owner::claimed_by(&labels, &annotations).filter(Owner::is_root) else {
            return Ok(None);
        };
        let key = crate::api::ResourceKey {
            namespace: owner.namespace.to_string(),
            name: owner.name.to_string(),
        };
        if key == self.flag_root {
            return Ok(None);
        }
        let root = kube::Api::<Root>::namespaced(self.own.clone(), &key.namespace)
            .get_opt(&key.name)
            .await
            .map_err(|e| {
                format!(
                    "reading Root {key}, which applied it: {}",
                    crate::api::kube_error::Text(&e)
                )
            })?;
        let root = match root {
            Some(root) => root,
            // No Root object in Weft's namespace: the operator's `weft sync` or a shard of the
            // flag root, which act as Weft.
            None if key.namespace == self.weft_namespace => return Ok(None),
            None => {
                return Err(format!(
                    "Root {key}, which applied it, no longer exists: nothing is read for it"
                ))
            }
        };
        let identity = identity_of(
            &root,
            &key.namespace,
            &self.weft_namespace,
            self.default_account.as_deref(),
        )
        .map_err(|r| format!("Root {key}, which applied it, may not run: {}", r.message))?;
        match identity {
            Identity::Weft => Ok(None),
            other => self
                .impersonation
                .client(&other, &self.own)
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }
}

impl crate::notify::dispatch::SecretReader for AppliedAs {
    fn client_for<'a>(
        &'a self,
        provider: &'a crate::api::notification::Provider,
    ) -> futures::future::BoxFuture<'a, Result<Option<Client>, String>> {
        Box::pin(self.client_of(&provider.metadata))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::root::{GitSource, RootSpec};

    fn root(sa: Option<&str>) -> Root {
        Root::new(
            "apps",
            RootSpec {
                source: GitSource {
                    url: "https://git.example/a.git".into(),
                    ..Default::default()
                },
                service_account_name: sa.map(str::to_string),
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_tenant_root_without_an_account_is_refused() {
        let refused = identity_of(&root(None), "team-a", "weft-system", None).unwrap_err();
        // With --default-service-account, that account of the root's own namespace; Weft's
        // namespace keeps Weft.
        assert_eq!(
            identity_of(&root(None), "team-a", "weft-system", Some("tenant")).unwrap(),
            Identity::ServiceAccount {
                namespace: "team-a".into(),
                name: "tenant".into()
            }
        );
        assert_eq!(
            identity_of(&root(None), "weft-system", "weft-system", Some("tenant")).unwrap(),
            Identity::Weft
        );
        assert_eq!(refused.reason, "ServiceAccountRequired");
        assert!(refused.message.contains("spec.serviceAccountName"));
    }

    #[test]
    fn the_account_is_always_of_the_roots_own_namespace() {
        let id = identity_of(&root(Some("deployer")), "team-a", "weft-system", None).unwrap();
        assert_eq!(id.user().unwrap(), "system:serviceaccount:team-a:deployer");
        let id = identity_of(&root(Some("deployer")), "weft-system", "weft-system", None).unwrap();
        assert_eq!(
            id.user().unwrap(),
            "system:serviceaccount:weft-system:deployer"
        );
    }

    #[test]
    fn only_a_root_in_wefts_namespace_runs_as_weft() {
        assert_eq!(
            identity_of(&root(None), "weft-system", "weft-system", None).unwrap(),
            Identity::Weft
        );
    }

    #[test]
    fn a_root_declared_by_a_tenant_s_root_acts_as_that_root_at_most() {
        let key = |ns: &str, name: &str| crate::api::ResourceKey {
            namespace: ns.into(),
            name: name.into(),
        };
        let sa = |ns: &str, name: &str| Identity::ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
        };
        let (child, parent) = (key("team-a", "escape"), key("team-a", "apps"));
        let tenant = sa("team-a", "team-a");
        // Weft's roots (the platform's) declare tenants' roots with their accounts.
        assert!(within_parent(
            &child,
            &tenant,
            &key("weft-system", "platform"),
            Some(&Identity::Weft)
        )
        .is_ok());
        // A tenant's root declares roots acting as its own account only.
        assert!(within_parent(&child, &tenant, &parent, Some(&tenant)).is_ok());
        let refused = within_parent(&child, &sa("team-a", "weft"), &parent, Some(&tenant))
            .expect_err("another account of the namespace");
        assert_eq!(refused.reason, NOT_ALLOWED);
        for part in [
            "Root team-a/escape was declared by root team-a/apps",
            "acts as system:serviceaccount:team-a:team-a",
            "never as system:serviceaccount:team-a:weft",
            "set spec.serviceAccountName to team-a",
        ] {
            assert!(
                refused.message.contains(part),
                "{part}: {}",
                refused.message
            );
        }
        let refused = within_parent(&child, &Identity::Weft, &parent, Some(&tenant)).unwrap_err();
        assert!(
            refused
                .message
                .contains("never as Weft's own ServiceAccount"),
            "{}",
            refused.message
        );
        let refused = within_parent(&child, &tenant, &parent, None).unwrap_err();
        assert!(
            refused.message.contains("does not exist or may not run"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn without_a_configuration_no_account_is_impersonated() {
        let imp = Impersonation::new(None, WriteFence::unenforced(), Duration::from_secs(5));
        let id = Identity::ServiceAccount {
            namespace: "t".into(),
            name: "sa".into(),
        };
        // A client is needed only to be returned for Weft; an account without a
        // configuration fails before any client is used.
        let err = match tokio::runtime::Runtime::new().unwrap().block_on(async {
            let own =
                kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                    .unwrap();
            imp.client(&id, &own).map(|_| ())
        }) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("impersonated without a configuration"),
        };
        assert!(err.contains("system:serviceaccount:t:sa"), "{err}");
    }
}
