//! The one `error:` line of a failed command: the error and its causes, each said once.
//!
//! An error that already quotes its cause (Weft's API errors embed the API server's message)
//! would otherwise repeat it: `{e:#}` prints every `source()` after the error, so a forbidden
//! apply read "… is forbidden … (Forbidden, HTTP 403): ApiError: … is forbidden …".

/// The error and the causes whose text it does not already hold, joined with `: `.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let said = cause.to_string();
        // The API server's own message is what a kube error or its Status adds to Weft's.
        let message = cause
            .downcast_ref::<kube::Error>()
            .and_then(|k| match k {
                kube::Error::Api(s) => Some(s.message.clone()),
                _ => None,
            })
            .or_else(|| {
                // kube's error holds its Status boxed: the cause is the box.
                cause
                    .downcast_ref::<kube::core::Status>()
                    .or_else(|| {
                        cause
                            .downcast_ref::<Box<kube::core::Status>>()
                            .map(|b| &**b)
                    })
                    .map(|s| s.message.clone())
            });
        let known =
            text.contains(&said) || message.is_some_and(|m| !m.is_empty() && text.contains(&m));
        if !known {
            text.push_str(": ");
            text.push_str(&said);
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
        let e = anyhow::Error::new(ApplyError::Api {
            verb: "dry-run apply",
            object: object.to_string(),
            source: forbidden(),
        });
        // What the command line printed before: the server's message again for each cause.
        assert!(format!("{e:#}").matches("cannot patch resource").count() >= 2);
        let text = error_text(&e);
        assert_eq!(text.matches("cannot patch resource").count(), 1, "{text}");
        assert!(text.starts_with("dry-run apply Alert/ns/a1: alerts.notification.weft.io"));
        assert!(text.ends_with("(Forbidden, HTTP 403)"), "{text}");
    }

    #[test]
    fn a_cause_not_yet_said_is_kept() {
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing the cache");
        assert_eq!(error_text(&e), "writing the cache: disk full");
    }
}
