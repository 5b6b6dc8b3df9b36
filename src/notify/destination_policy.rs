//! Where notifications may go (`--allowed-notification-urls`). A Provider is written by whoever
//! may create one in a watched namespace, and its address is then reached from Weft's own network
//! position, with a token attached: without a policy a tenant could make Weft post to the
//! kubelet, a cloud metadata endpoint or any service on the node's loopback.
//!
//! - The destination must match one of the operator's URL prefixes (the rules of
//!   [`UrlAllowList`]); the default, [`DEFAULT_NOTIFICATION_URLS`], is `https://`.
//! - Its host may not be loopback, link-local (169.254.0.0/16 holds the cloud metadata
//!   endpoints; fe80::/10), unspecified or `localhost` — neither written in the URL nor what a
//!   name resolves to when the request is made ([`GuardedResolver`]) — unless a prefix names that
//!   very host (`http://127.0.0.1:9000/`): the operator opted in for it.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::source::fetch_policy::{PrefixError, UrlAllowList};

/// The default of `--allowed-notification-urls`: https to any host that is not loopback or
/// link-local.
pub const DEFAULT_NOTIFICATION_URLS: &str = "https://";

/// Why a destination is refused. It never holds the address (a Slack URL carries a token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressRefused {
    #[error("the address is not allowed by --allowed-notification-urls ({allowed})")]
    NotListed { allowed: String },
    #[error("the address's host is {what}, which --allowed-notification-urls does not name (list it there to allow it)")]
    PrivateHost { what: &'static str },
}

/// The operator's policy for notification destinations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotificationPolicy {
    /// The prefixes; `None`: the default, [`DEFAULT_NOTIFICATION_URLS`].
    allowed: Option<UrlAllowList>,
    /// Hosts that a prefix names (lowercased): these may be loopback or link-local.
    named_hosts: Arc<BTreeSet<String>>,
}

impl NotificationPolicy {
    /// A comma-separated list of URL prefixes (the flag's form).
    pub fn parse(list: &str) -> Result<Self, PrefixError> {
        let allowed = UrlAllowList::parse(list)?;
        let named_hosts = allowed
            .prefixes()
            .iter()
            .filter_map(|p| url::Url::parse(p).ok())
            .filter_map(|u| u.host_str().map(host_key))
            .filter(|h| !h.is_empty())
            .collect();
        Ok(NotificationPolicy {
            allowed: Some(allowed),
            named_hosts: Arc::new(named_hosts),
        })
    }

    fn listed(&self, url: &str) -> bool {
        match &self.allowed {
            Some(list) => list.allows(url),
            None => url::Url::parse(url).is_ok_and(|u| u.scheme() == "https"),
        }
    }

    /// The prefixes, as the flag would be written.
    pub fn allowed(&self) -> String {
        match &self.allowed {
            Some(list) => list.to_string(),
            None => DEFAULT_NOTIFICATION_URLS.to_string(),
        }
    }

    /// Whether a request to `url` may be made.
    pub fn check(&self, url: &str) -> Result<(), AddressRefused> {
        if !self.listed(url) {
            return Err(AddressRefused::NotListed {
                allowed: self.allowed(),
            });
        }
        let host = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(host_key))
            .unwrap_or_default();
        if self.named_hosts.contains(&host) {
            return Ok(());
        }
        match private_host(&host) {
            Some(what) => Err(AddressRefused::PrivateHost { what }),
            None => Ok(()),
        }
    }

    /// The resolver the notification client uses: it drops loopback and link-local addresses
    /// of every name the policy does not name.
    pub fn resolver(&self) -> Arc<GuardedResolver> {
        Arc::new(GuardedResolver {
            named_hosts: self.named_hosts.clone(),
        })
    }
}

/// A host as compared: lowercase, without IPv6 brackets.
fn host_key(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// What a host is when it is one the policy refuses unless named.
fn private_host(host: &str) -> Option<&'static str> {
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("localhost");
    }
    host.parse::<IpAddr>().ok().and_then(private_ip)
}

/// Loopback, link-local or unspecified (an IPv4-mapped IPv6 address as its IPv4 address).
pub fn private_ip(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some("a loopback address"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address"),
        IpAddr::V4(v4) if v4.is_unspecified() => Some("an unspecified address"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("a loopback address"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("an unspecified address"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("a link-local address"),
        _ => None,
    }
}

/// DNS for notifications: a name's loopback and link-local addresses are dropped (a name may
/// point anywhere, and is looked up again for every connection), unless the policy names it.
#[derive(Debug)]
pub struct GuardedResolver {
    named_hosts: Arc<BTreeSet<String>>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = host_key(name.as_str());
        let named = self.named_hosts.contains(&host);
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| named || private_ip(a.ip()).is_none())
                .collect();
            if kept.is_empty() {
                return Err(Box::new(std::io::Error::other(
                    "the host resolves only to loopback or link-local addresses, which --allowed-notification-urls does not name",
                )) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_allows_https_to_public_hosts_only() {
        let p = NotificationPolicy::default();
        assert_eq!(p.check("https://hooks.slack.com/services/T/B/x"), Ok(()));
        assert!(matches!(
            p.check("http://hooks.example.com/x"),
            Err(AddressRefused::NotListed { .. })
        ));
        for private in [
            "https://127.0.0.1:8443/x",
            "https://localhost/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/x",
            "https://[fe80::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://0.0.0.0/x",
        ] {
            assert!(
                matches!(p.check(private), Err(AddressRefused::PrivateHost { .. })),
                "{private}"
            );
        }
    }

    #[test]
    fn a_prefix_that_names_a_loopback_host_opts_in_for_it_only() {
        let p = NotificationPolicy::parse("https://,http://127.0.0.1:9000/").unwrap();
        assert_eq!(p.check("http://127.0.0.1:9000/hook"), Ok(()));
        assert!(p.check("http://127.0.0.1:9001/hook").is_err());
        assert!(p.check("https://[::1]/x").is_err());
    }

    #[test]
    fn the_refusal_never_quotes_the_address() {
        let p = NotificationPolicy::default();
        let e = p.check("http://hooks.example.com/T0K3N").unwrap_err();
        assert!(!e.to_string().contains("T0K3N"), "{e}");
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_gets_no_address() {
        use reqwest::dns::Resolve;
        let p = NotificationPolicy::default();
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(p.resolver().resolve(name).await.is_err());
        let named = NotificationPolicy::parse("http://localhost:1/").unwrap();
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(named.resolver().resolve(name).await.is_ok());
    }
}
