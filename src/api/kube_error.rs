//! A [`kube::Error`] as one line a person reads: the API server's own message, its reason and
//! code, and what to do; or, when the server never answered, why and what to check.
//!
//! kube's own `Display` of an API error embeds the `Debug` of the server's `Status`
//! (`ApiError: … (Status { status: Some(Failure), … ListMeta { … } })`), so no error, log line,
//! event or status message formats a `kube::Error` directly: they format [`text`] (or
//! [`Text`], its `Display` form for `format!` and `tracing`'s `%`).

use std::error::Error as _;
use std::fmt;

use kube::core::Status;

/// `e` as one line. An API server's refusal reads `<its message> (<Reason>, HTTP <code>)`,
/// then `; ` and what to do when the reason says it; a call that got no answer says why and
/// asks whether the API server is reachable; a kubeconfig that cannot be read says so.
pub fn text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => refusal(status),
        kube::Error::HyperError(_) | kube::Error::Service(_) => unreachable(e),
        kube::Error::InferKubeconfig(k) => format!(
            "cannot use the kubeconfig: {}; give --kubeconfig, set KUBECONFIG, or fix the file",
            kubeconfig_text(k)
        ),
        kube::Error::InferConfig(i) => format!(
            "no cluster configuration: {}; give --kubeconfig, set KUBECONFIG, or run in a pod",
            infer_text(i)
        ),
        kube::Error::Auth(_) => format!(
            "authenticating to the API server failed: {}; refresh the kubeconfig's credentials (its token, certificate or exec plugin)",
            causes(e)
        ),
        kube::Error::SerdeError(source) => format!(
            "the API server's answer could not be read: {source}; is the kubeconfig pointing at a Kubernetes API server?"
        ),
        _ => causes(e),
    }
}

/// [`text`] as a `Display` value: `format!("{}", Text(&e))`, `tracing::warn!(error = %Text(&e))`.
pub struct Text<'a>(pub &'a kube::Error);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&text(self.0))
    }
}

/// A watch's error as one line: what failed (listing, watching) and [`text`] of the call.
pub fn watch_text(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as W;
    match e {
        W::InitialListFailed(k) => format!("listing failed: {}", text(k)),
        W::WatchStartFailed(k) => format!("starting the watch failed: {}", text(k)),
        W::WatchFailed(k) => format!("the watch failed: {}", text(k)),
        W::WatchError(status) => format!("the watch failed: {}", refusal(status)),
        other => other.to_string(),
    }
}

/// kube-runtime's finalizer helper's error as one line: the reconciler's own error as it says
/// it, a failed finalizer write as [`text`].
pub fn finalizer_text<E>(e: &kube::runtime::finalizer::Error<E>) -> String
where
    E: std::error::Error + 'static,
{
    use kube::runtime::finalizer::Error as F;
    match e {
        F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner.to_string(),
        F::AddFinalizer(k) => format!("adding the finalizer failed: {}", text(k)),
        F::RemoveFinalizer(k) => format!("removing the finalizer failed: {}", text(k)),
        other => other.to_string(),
    }
}

/// A kubeconfig that could not be read or used, as one line: the file and what is wrong with
/// it (a YAML error's snippet is folded onto the line).
pub fn kubeconfig_text(e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as K;
    let said = match e {
        K::ReadConfig(io, path) => format!("cannot read {}: {io}", path.display()),
        // The parser's first line says where and what; the snippet under it repeats it.
        K::Parse(yaml) => {
            let said = yaml.to_string();
            let first = said.lines().next().unwrap_or_default();
            format!(
                "not a valid kubeconfig: {}",
                first.trim().trim_start_matches("error: ")
            )
        }
        other => other.to_string(),
    };
    one_line(&said)
}

/// [`kubeconfig_text`] for a caller that names the file itself: a file that cannot be read
/// says only why.
pub fn kubeconfig_problem(e: &kube::config::KubeconfigError) -> String {
    match e {
        kube::config::KubeconfigError::ReadConfig(io, _) => io.to_string(),
        other => kubeconfig_text(other),
    }
}

/// No configuration found (not in a pod, no kubeconfig): why the kubeconfig could not be used.
pub fn infer_text(e: &kube::config::InferConfigError) -> String {
    match e
        .source()
        .and_then(|s| s.downcast_ref::<kube::config::KubeconfigError>())
    {
        Some(k) => format!("not in a pod, and {}", kubeconfig_text(k)),
        None => one_line(&e.to_string()),
    }
}

/// `text` with its lines joined: a snippet under a parse error stays on the error's line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The server's message, reason and code, and the hint for its reason.
fn refusal(s: &Status) -> String {
    let message = if s.message.is_empty() {
        "the API server refused the call without a message".to_string()
    } else {
        s.message.clone()
    };
    let reason = if s.reason.is_empty() {
        String::new()
    } else {
        format!("{}, ", s.reason)
    };
    let said = format!("{message} ({reason}HTTP {})", s.code);
    match hint(s) {
        Some(h) => format!("{said}; {h}"),
        None => said,
    }
}

/// What to do about a refusal, by its reason (and code, which some servers send alone).
fn hint(s: &Status) -> Option<String> {
    let details = s.details.as_ref();
    let mut kind = details.map(|d| d.kind.as_str()).unwrap_or_default();
    let mut name = details.map(|d| d.name.as_str()).unwrap_or_default();
    // Without details, the message still says it: `namespaces "shop" not found`.
    if kind.is_empty() {
        if let Some(ns) = s
            .message
            .strip_prefix("namespaces \"")
            .and_then(|r| r.strip_suffix("\" not found"))
        {
            (kind, name) = ("namespaces", ns);
        }
    }
    let reason = s.reason.as_str();
    Some(match (reason, s.code) {
        ("NotFound", _) | ("", 404) => {
            if kind == "namespaces" && !name.is_empty() {
                format!("create the namespace (`kubectl create namespace {name}`), or run `weft install` when it is Weft's own")
            } else if s.message.contains("could not find the requested resource") {
                "the cluster does not serve this kind: install its CRD first".to_string()
            } else {
                "check its name and namespace, or create it first".to_string()
            }
        }
        ("Forbidden", _) | ("", 403) => forbidden(&s.message),
        ("Unauthorized", _) | ("", 401) => {
            "the API server refused the credentials: refresh the kubeconfig's token or certificate"
                .to_string()
        }
        ("AlreadyExists", _) => {
            "it exists already: delete it, or let its owner manage it".to_string()
        }
        ("Conflict", _) | ("", 409) => {
            "it changed meanwhile or another writer holds it: retry (a daemon retries on its own)"
                .to_string()
        }
        ("Invalid", _) | ("", 422) => invalid(s),
        ("BadRequest", _) | ("", 400) => "fix the document the message names".to_string(),
        ("Timeout" | "ServerTimeout", _) | ("", 504) => {
            "the API server timed out: retry, and check its load (`kubectl get --raw /readyz`)"
                .to_string()
        }
        ("TooManyRequests", _) | ("", 429) => {
            "the API server is throttling requests: retry later".to_string()
        }
        ("Gone" | "Expired", _) | ("", 410) => {
            "what was read is too old: retry (a daemon retries on its own)".to_string()
        }
        ("MethodNotAllowed", _) | ("", 405) => {
            "the API server does not allow this call on this kind".to_string()
        }
        // The API server answers 500 for a field the kind's schema does not have in an apply
        // (`failed to create typed patch object (…): .spec.colour: field not declared in
        // schema`): the document's mistake, not the server's.
        (_, 500) if s.message.contains("field not declared in schema") => {
            "the kind has no such field: correct its name or remove it from the document"
                .to_string()
        }
        ("InternalError" | "ServiceUnavailable", _) | ("", 500 | 503) => {
            "the API server failed: check its health (`kubectl get --raw /readyz`) and retry"
                .to_string()
        }
        _ => return None,
    })
}

/// `User "u" cannot patch resource "alerts" in API group "g" in the namespace "ns"` → grant it.
fn forbidden(message: &str) -> String {
    if message.contains("because it is being terminated") {
        return "the namespace is being deleted: wait until it is gone, then create it again"
            .to_string();
    }
    let quoted = |after: &str| -> Option<String> {
        let rest = &message[message.find(after)? + after.len()..];
        let rest = rest.strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    };
    let user = quoted("User ");
    let verb = message
        .find("\" cannot ")
        .map(|i| &message[i + "\" cannot ".len()..])
        .and_then(|r| r.split_whitespace().next())
        .map(str::to_string);
    let resource = quoted("resource ");
    let group = quoted("in API group ").filter(|g| !g.is_empty());
    let namespace = quoted("in the namespace ");
    match (user, verb, resource) {
        (Some(user), Some(verb), Some(resource)) => {
            let resource = match group {
                Some(g) => format!("{resource}.{g}"),
                None => resource,
            };
            let (place, flag) = match namespace {
                Some(ns) => (format!(" in namespace {ns}"), format!(" -n {ns}")),
                None => (" cluster-wide".to_string(), String::new()),
            };
            // A ServiceAccount refused cluster-wide is usually a root of one namespace (a
            // tenant) reaching past it: granting it cluster-wide rights is the operator's call,
            // not the fix.
            if message.contains("at the cluster scope") && user.starts_with("system:serviceaccount:")
            {
                return format!(
                    "{user} may not `{verb}` {resource} cluster-wide: a root acting as a namespace's account cannot declare or read it; remove it from that root's repository, or an operator may bind the account a ClusterRole; `kubectl auth can-i {verb} {resource} --as {user}` checks it"
                );
            }
            format!(
                "grant {user} `{verb}` on {resource}{place} (a Role or ClusterRole and its binding), or use a kubeconfig context that has it; `kubectl auth can-i {verb} {resource}{flag} --as {user}` checks it"
            )
        }
        _ => "the identity in use lacks this right: check its RBAC (`kubectl auth can-i`), or use a kubeconfig context that has it".to_string(),
    }
}

/// The fields an `Invalid` refusal names, to fix.
fn invalid(s: &Status) -> String {
    let mut fields: Vec<&str> = s
        .details
        .as_ref()
        .map(|d| d.causes.iter().map(|c| c.field.as_str()).collect())
        .unwrap_or_default();
    fields.retain(|f| !f.is_empty());
    fields.dedup();
    if fields.is_empty() {
        "fix the field the message names, in the document in git".to_string()
    } else {
        format!("fix {} in the document in git", fields.join(", "))
    }
}

/// A call that got no answer: why (the innermost cause: refused, no such host, timed out,
/// certificate) and what to check.
fn unreachable(e: &kube::Error) -> String {
    let why = one_line(&causes(e));
    if why.contains("did not answer") {
        // Weft's own deadline (--api-timeout) says it already.
        return format!("{why}; is the API server overloaded or unreachable? (`kubectl cluster-info` with the same kubeconfig checks it)");
    }
    let timed_out = why.contains("timed out") || why.contains("deadline");
    let what = if timed_out {
        "the API server did not answer in time"
    } else {
        "the API server could not be reached"
    };
    format!(
        "{what}: {why}; is the API server running and reachable from here? (`kubectl cluster-info` with the same kubeconfig checks it)"
    )
}

/// The error's sources, each said once, without kube's variant prefixes (`HyperError: `,
/// `ServiceError: `): what the lower layers (hyper, rustls, the kubeconfig reader) said.
fn causes(e: &kube::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !said.iter().any(|s| s.contains(&text)) {
            said.push(text);
        }
        next = cause.source();
    }
    if said.is_empty() {
        return e.to_string();
    }
    // An outer cause that already quotes the inner one is enough; keep the most specific.
    let mut kept: Vec<String> = Vec::new();
    for s in said {
        if let Some(last) = kept.last_mut() {
            if s.contains(last.as_str()) {
                *last = s;
                continue;
            }
        }
        kept.push(s);
    }
    kept.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: serde_json::Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value(v).expect("status")))
    }

    fn no_debug(t: &str) {
        for bad in ["Status {", "Some(", "ApiError", "ListMeta", "None"] {
            assert!(!t.contains(bad), "{bad} in {t}");
        }
        assert!(!t.contains('\n'), "more than one line: {t}");
    }

    #[test]
    fn kube_s_own_display_shows_the_status_debug() {
        // Why this module exists: if kube stops embedding the Debug, it may go.
        let e = status(
            serde_json::json!({"status": "Failure", "code": 404, "reason": "NotFound", "message": "x"}),
        );
        assert!(e.to_string().contains("Status {"));
    }

    #[test]
    fn a_missing_namespace_says_how_to_create_it() {
        let e = status(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "namespaces \"weft-system\" not found",
            "details": {"name": "weft-system", "kind": "namespaces"},
            "metadata": {}
        }));
        let t = text(&e);
        no_debug(&t);
        assert_eq!(
            t,
            "namespaces \"weft-system\" not found (NotFound, HTTP 404); create the namespace (`kubectl create namespace weft-system`), or run `weft install` when it is Weft's own"
        );
        assert_eq!(Text(&e).to_string(), t);
    }

    #[test]
    fn a_field_the_schema_does_not_have_is_the_document_s_mistake() {
        let e = status(serde_json::json!({"status": "Failure", "code": 500,
            "message": "failed to create typed patch object (ns/odd; /v1, Kind=ConfigMap): .extra: field not declared in schema"}));
        let t = text(&e);
        no_debug(&t);
        assert!(
            t.ends_with(".extra: field not declared in schema (HTTP 500); the kind has no such field: correct its name or remove it from the document"),
            "{t}"
        );
        let e = status(
            serde_json::json!({"code": 500, "reason": "InternalError", "message": "etcd is down"}),
        );
        assert!(text(&e).contains("check its health"), "{}", text(&e));
    }

    #[test]
    fn a_missing_namespace_is_read_from_the_message_without_details() {
        let e = status(serde_json::json!({"code": 404, "reason": "NotFound",
            "message": "namespaces \"shop\" not found"}));
        assert!(
            text(&e).contains("`kubectl create namespace shop`"),
            "{}",
            text(&e)
        );
    }

    #[test]
    fn watch_and_finalizer_errors_say_the_call_once() {
        let forbidden = || {
            status(serde_json::json!({"code": 403, "reason": "Forbidden",
                "message": "alerts is forbidden: User \"u\" cannot watch resource \"alerts\" in API group \"notification.weft.io\" at the cluster scope"}))
        };
        let w = watch_text(&kube::runtime::watcher::Error::InitialListFailed(
            forbidden(),
        ));
        no_debug(&w);
        assert!(w.starts_with("listing failed: alerts is forbidden"), "{w}");
        assert!(
            w.contains("grant u `watch` on alerts.notification.weft.io cluster-wide"),
            "{w}"
        );
        let f = finalizer_text::<std::io::Error>(&kube::runtime::finalizer::Error::AddFinalizer(
            forbidden(),
        ));
        no_debug(&f);
        assert!(
            f.starts_with("adding the finalizer failed: alerts is forbidden"),
            "{f}"
        );
        let f = finalizer_text(&kube::runtime::finalizer::Error::ApplyFailed(
            std::io::Error::other("its own words"),
        ));
        assert_eq!(f, "its own words");
    }

    #[test]
    fn a_missing_object_and_a_missing_kind() {
        let e = status(serde_json::json!({"code": 404, "reason": "NotFound",
            "message": "configmaps \"c\" not found", "details": {"name": "c", "kind": "configmaps"}}));
        assert!(text(&e).ends_with("; check its name and namespace, or create it first"));
        let e = status(serde_json::json!({"code": 404, "reason": "NotFound",
            "message": "the server could not find the requested resource"}));
        assert!(text(&e).ends_with("install its CRD first"), "{}", text(&e));
    }

    #[test]
    fn forbidden_names_who_to_grant_what() {
        let e = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "alerts.notification.weft.io \"a1\" is forbidden: User \"system:serviceaccount:ns:weft\" cannot patch resource \"alerts\" in API group \"notification.weft.io\" in the namespace \"ns\""}));
        let t = text(&e);
        no_debug(&t);
        assert!(t.starts_with("alerts.notification.weft.io \"a1\" is forbidden: User"));
        assert!(t.contains("(Forbidden, HTTP 403); grant system:serviceaccount:ns:weft `patch` on alerts.notification.weft.io in namespace ns"), "{t}");
        assert!(t.contains("`kubectl auth can-i patch alerts.notification.weft.io -n ns --as system:serviceaccount:ns:weft`"), "{t}");
        let e = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "namespaces is forbidden: User \"bob\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"}));
        assert!(
            text(&e).contains("grant bob `list` on namespaces cluster-wide"),
            "{}",
            text(&e)
        );
        let e = status(serde_json::json!({"code": 403, "reason": "Forbidden",
            "message": "clusterrolebindings.rbac.authorization.k8s.io is forbidden: User \"system:serviceaccount:team-a:team-a\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"}));
        let t = text(&e);
        assert!(
            t.contains("system:serviceaccount:team-a:team-a may not `create` clusterrolebindings.rbac.authorization.k8s.io cluster-wide: a root acting as a namespace's account cannot declare or read it; remove it from that root's repository"),
            "{t}"
        );
        assert!(!t.contains("grant"), "{t}");
        let e = status(serde_json::json!({"code": 403, "reason": "Forbidden", "message": "no"}));
        assert!(text(&e).ends_with(
            "check its RBAC (`kubectl auth can-i`), or use a kubeconfig context that has it"
        ));
    }

    #[test]
    fn conflict_and_invalid_say_what_to_do() {
        let e = status(serde_json::json!({"code": 409, "reason": "Conflict",
            "message": "Operation cannot be fulfilled on configmaps \"c\": the object has been modified"}));
        assert!(text(&e).ends_with("(Conflict, HTTP 409); it changed meanwhile or another writer holds it: retry (a daemon retries on its own)"));
        let e = status(serde_json::json!({"code": 422, "reason": "Invalid",
            "message": "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1",
            "details": {"causes": [{"field": "spec.replicas", "message": "Invalid value: -1", "reason": "FieldValueInvalid"}]}}));
        assert!(text(&e).ends_with("(Invalid, HTTP 422); fix spec.replicas in the document in git"));
    }

    #[test]
    fn an_unknown_reason_keeps_the_message_and_code() {
        let e = status(
            serde_json::json!({"code": 418, "reason": "Teapot", "message": "short and stout"}),
        );
        assert_eq!(text(&e), "short and stout (Teapot, HTTP 418)");
        let e = status(serde_json::json!({"code": 418}));
        assert_eq!(
            text(&e),
            "the API server refused the call without a message (HTTP 418)"
        );
    }

    #[test]
    fn an_unanswered_call_says_the_cause_once_and_what_to_check() {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        );
        let e = kube::Error::Service(Box::new(io));
        let t = text(&e);
        no_debug(&t);
        assert_eq!(
            t,
            "the API server could not be reached: Connection refused (os error 111); is the API server running and reachable from here? (`kubectl cluster-info` with the same kubeconfig checks it)"
        );
        let e = kube::Error::Service(Box::new(std::io::Error::other("request timed out")));
        assert!(text(&e).starts_with("the API server did not answer in time: request timed out;"));
    }

    #[test]
    fn a_kubeconfig_that_cannot_be_read_is_named() {
        let e = kube::Error::InferKubeconfig(kube::config::KubeconfigError::ReadConfig(
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "No such file or directory (os error 2)",
            ),
            "/nowhere/config".into(),
        ));
        let t = text(&e);
        no_debug(&t);
        assert_eq!(
            t,
            "cannot use the kubeconfig: cannot read /nowhere/config: No such file or directory (os error 2); give --kubeconfig, set KUBECONFIG, or fix the file"
        );
    }
}
