//! The one `error:` line of a failed command: the error and its causes, each said once.
//!
//! An error that already quotes its cause (Weft's API errors embed the API server's message)
//! would otherwise repeat it: `{e:#}` prints every `source()` after the error, so a forbidden
//! apply read "… is forbidden … (Forbidden, HTTP 403): ApiError: … is forbidden …".

use crate::api::kube_error;

/// The error and the causes whose text it does not already hold, joined with `: `. A kube
/// error is said as [`kube_error::text`] (never kube's own `Display`, which embeds the `Debug`
/// of the server's Status), and what lies under it (hyper, the Status) is not said again.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let kube = cause.downcast_ref::<kube::Error>();
        let kubeconfig = cause.downcast_ref::<kube::config::KubeconfigError>();
        let infer = cause.downcast_ref::<kube::config::InferConfigError>();
        let said = match (kube, kubeconfig, infer) {
            (Some(k), _, _) => kube_error::text(k),
            (_, Some(k), _) => kube_error::kubeconfig_problem(k),
            (_, _, Some(i)) => kube_error::infer_text(i),
            _ => cause.to_string(),
        };
        // The API server's own message is what a kube error adds to Weft's.
        let message = match kube {
            Some(kube::Error::Api(s)) => Some(s.message.as_str()),
            _ => None,
        };
        let known = text.contains(&said)
            || message.is_some_and(|m| !m.is_empty() && text.contains(m))
            || kubeconfig.is_some_and(|k| text.contains(&kube_error::kubeconfig_text(k)));
        if text.is_empty() {
            text = said;
        } else if !known {
            text.push_str(": ");
            text.push_str(&said);
        }
        // What lies under kube's errors (hyper, the Status, the kubeconfig's reader) is said.
        if kube.is_some() || kubeconfig.is_some() || infer.is_some() {
            break;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectRef;
    use crate::apply::ApplyError;

    fn forbidden() -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": "alerts.notification.weft.io \"a1\" is forbidden: User \"system:serviceaccount:ns:weft\" cannot patch resource \"alerts\""
        }))
        .expect("status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn an_api_error_that_quotes_the_server_is_said_once() {
        let object = ObjectRef {
            api_version: "notification.weft.io/v1alpha1".into(),
            kind: "Alert".into(),
            namespace: "ns".into(),
            name: "a1".into(),
        };
        let e = anyhow::Error::new(ApplyError::api("dry-run apply", &object, forbidden()));
        // What the command line printed before: the server's message again for each cause.
        assert!(format!("{e:#}").matches("cannot patch resource").count() >= 2);
        let text = error_text(&e);
        assert_eq!(text.matches("cannot patch resource").count(), 1, "{text}");
        assert!(text.starts_with("dry-run apply Alert/ns/a1: alerts.notification.weft.io"));
        assert!(
            text.contains(
                "(Forbidden, HTTP 403); grant system:serviceaccount:ns:weft `patch` on alerts"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_raw_kube_error_is_said_without_its_debug() {
        let e = anyhow::Error::new(forbidden()).context("reading the Lease weft-system/weft");
        assert!(format!("{e:#}").contains("Status {"), "kube's own Display");
        let text = error_text(&e);
        for bad in ["Status {", "Some(", "ApiError", "ListMeta"] {
            assert!(!text.contains(bad), "{bad} in {text}");
        }
        assert!(text.starts_with("reading the Lease weft-system/weft: alerts.notification.weft.io \"a1\" is forbidden"), "{text}");
        assert_eq!(text.matches("cannot patch resource").count(), 1, "{text}");
        // Alone, too.
        let alone = error_text(&anyhow::Error::new(forbidden()));
        assert!(
            alone.starts_with("alerts.notification.weft.io") && !alone.contains("Status {"),
            "{alone}"
        );
    }

    #[test]
    fn an_unreachable_server_is_said_once() {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        );
        let e = anyhow::Error::new(kube::Error::Service(Box::new(io))).context("listing roots");
        let text = error_text(&e);
        assert_eq!(text.matches("Connection refused").count(), 1, "{text}");
        assert!(!text.contains("ServiceError"), "{text}");
    }

    #[test]
    fn a_cause_not_yet_said_is_kept() {
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing the cache");
        assert_eq!(error_text(&e), "writing the cache: disk full");
    }
}
