//! Acting as another identity (a tenant, a ServiceAccount) in a test: a client that impersonates
//! it, as `kubectl --as` does, and the one wait every such test makes before it acts: until the
//! API server's authorizer, asked *as that identity* (a SelfSubjectAccessReview), says the grant
//! just created is live. A RoleBinding reaches the RBAC authorizer through its informer a moment
//! after the create returns; on a loaded machine that moment was long enough for a 403 (issue 40
//! item 10).

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// One access to ask about: `verb` on `resource` (of API group `group`, `""` for the core
/// group), in `namespace` (`None`: cluster-wide).
#[derive(Clone, Debug)]
pub struct Access {
    pub verb: String,
    pub group: String,
    pub resource: String,
    /// A subresource (`status`), or none.
    pub subresource: Option<String>,
    /// One object by name (a rule with `resourceNames`), or any.
    pub name: Option<String>,
    pub namespace: Option<String>,
}

impl Access {
    /// `verb` on `resource` (`"configmaps"`, `"weaveclouds.cloud.weave.works"`: a group after
    /// the first dot, as `kubectl auth can-i` writes it) in `namespace`.
    pub fn new(verb: &str, resource: &str, namespace: Option<&str>) -> Access {
        let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
        Access {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            subresource: None,
            name: None,
            namespace: namespace.map(str::to_string),
        }
    }

    /// The same access to subresource `subresource` (`status`).
    pub fn subresource(mut self, subresource: &str) -> Access {
        self.subresource = Some(subresource.to_string());
        self
    }

    /// The same access to the object named `name` only.
    pub fn named(mut self, name: &str) -> Access {
        self.name = Some(name.to_string());
        self
    }

    fn shown(&self) -> String {
        let mut resource = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        if let Some(sub) = &self.subresource {
            resource = format!("{resource}/{sub}");
        }
        if let Some(name) = &self.name {
            resource = format!("{resource} {name}");
        }
        match &self.namespace {
            Some(ns) => format!("{} {resource} in {ns}", self.verb),
            None => format!("{} {resource} cluster-wide", self.verb),
        }
    }
}

/// A client of the test cluster that acts as `user` (impersonation, as `kubectl --as=user`; a
/// `system:serviceaccount:NS:NAME` user gets that account's groups from the API server).
pub async fn client_as(user: &str) -> Client {
    let c = super::cluster::cluster();
    let kubeconfig = kube::config::Kubeconfig::read_from(c.kubeconfig_path()).expect("kubeconfig");
    let options = kube::config::KubeConfigOptions {
        context: c.context().map(str::to_string),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .expect("config");
    config.headers.push((
        http::HeaderName::from_static("impersonate-user"),
        http::HeaderValue::from_str(user).expect("a user name"),
    ));
    Client::try_from(config).expect("client")
}

/// Whether the identity of `client` may do `access` now, as the API server's authorizer answers
/// that identity itself.
pub async fn allowed(client: &Client, access: &Access) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(access.verb.clone()),
                group: Some(access.group.clone()),
                resource: Some(access.resource.clone()),
                subresource: access.subresource.clone(),
                name: access.name.clone(),
                namespace: access.namespace.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Wait (up to 120 s) until the identity of `client` (`who`, for the message) may do every one
/// of `accesses`: the grants a test just created are live in the authorizer. Panics naming
/// what is still refused.
pub async fn wait_until_granted(client: &Client, who: &str, accesses: &[Access]) {
    let within = Duration::from_secs(120);
    let start = Instant::now();
    loop {
        let mut refused = Vec::new();
        for a in accesses {
            match allowed(client, a).await {
                Ok(true) => {}
                Ok(false) => refused.push(a.shown()),
                Err(e) => refused.push(format!("{} (review failed: {e})", a.shown())),
            }
        }
        if refused.is_empty() {
            if start.elapsed() > Duration::from_secs(1) {
                eprintln!("{who}'s grants are live: after {:.1?}", start.elapsed());
            }
            return;
        }
        assert!(
            start.elapsed() < within,
            "{who} still may not {} after {within:?}",
            refused.join(", ")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The test cluster's kubeconfig, acting as `user` (`as:`, as `kubectl --as` does), written at
/// a path in `dir`: for a `weft` process that must run as that identity.
pub fn kubeconfig_as(user: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let c = super::cluster::cluster();
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(c.kubeconfig_path()).expect("kubeconfig");
    for named in &mut kubeconfig.auth_infos {
        if let Some(info) = named.auth_info.as_mut() {
            info.impersonate = Some(user.to_string());
        }
    }
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        serde_json::to_string(&kubeconfig).expect("kubeconfig as JSON"),
    )
    .expect("write kubeconfig");
    path
}
