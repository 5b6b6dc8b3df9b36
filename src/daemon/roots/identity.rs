//! Whom a root's pass acts as (issue 41, "Identity"): Weft itself only for a root in Weft's own
//! namespace without `serviceAccountName`; otherwise the root's ServiceAccount, through
//! Kubernetes impersonation (`Impersonate-User: system:serviceaccount:<ns>:<name>`). A tenant
//! who may create a Root in their namespace thus never gets more than their own account has.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;

use crate::api::root::Root;
use crate::apply::fence::{FenceLayer, WriteFence};

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
    config: Option<kube::Config>,
    fence: WriteFence,
    timeout: Duration,
    clients: Mutex<HashMap<String, Client>>,
}

impl Impersonation {
    pub fn new(
        config: Option<kube::Config>,
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
        let mut config = config.clone();
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
