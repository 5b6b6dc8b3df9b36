//! What a push webhook asks for: which ref was pushed, and whether that is the ref Weft follows.

use serde_json::Value;

/// Why a webhook delivery did not trigger a pass.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HookError {
    #[error("the body is not a JSON push event: {0}")]
    BadPayload(String),
}

/// What a verified webhook delivery means for Weft.
#[derive(Debug, PartialEq, Eq)]
pub enum HookDecision {
    /// Run a pass: the followed ref moved (or the hook does not say which ref).
    Trigger { pushed_ref: Option<String> },
    /// Nothing to do, and why (shown to the caller).
    Ignore(String),
}

/// The JSON payload of a delivery. GitHub may send `application/x-www-form-urlencoded` with the
/// JSON in a `payload` field; both are accepted.
pub fn payload_json(body: &[u8]) -> Result<Value, HookError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    if body.starts_with(b"payload=") {
        let payload = url::form_urlencoded::parse(body)
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        return serde_json::from_str(&payload).map_err(|e| HookError::BadPayload(e.to_string()));
    }
    serde_json::from_slice(body).map_err(|e| HookError::BadPayload(e.to_string()))
}

/// The repository a push names, by each URL the payload gives for it: GitHub's
/// `repository.{clone_url, ssh_url, git_url, html_url}`, GitLab's `project.{git_http_url,
/// git_ssh_url, web_url}` and `repository.{url, git_http_url, git_ssh_url, homepage}`, and a
/// generic hook's `repository` (a URL, or an object with `url`). At most 16, each at most 2 KiB.
pub fn repository_urls(payload: &Value) -> Vec<String> {
    const KEYS: [&str; 9] = [
        "clone_url",
        "ssh_url",
        "git_url",
        "html_url",
        "url",
        "git_http_url",
        "git_ssh_url",
        "web_url",
        "homepage",
    ];
    let mut urls = Vec::new();
    if let Some(url) = payload.get("repository").and_then(Value::as_str) {
        urls.push(url.to_string());
    }
    for holder in ["repository", "project"] {
        let Some(object) = payload.get(holder).and_then(Value::as_object) else {
            continue;
        };
        urls.extend(
            KEYS.iter()
                .filter_map(|k| object.get(*k).and_then(Value::as_str))
                .map(str::to_string),
        );
    }
    urls.retain(|u| u.len() <= 2048);
    urls.truncate(16);
    urls
}

/// The ref a push names (`refs/heads/main`), if it says.
pub fn pushed_ref(payload: &Value) -> Option<&str> {
    payload.get("ref").and_then(Value::as_str)
}

/// Whether a pushed ref (`refs/heads/main`, `refs/tags/v1`) is the ref Weft follows (`--ref`:
/// a branch or tag name, a full ref, or a commit SHA — which no push can move).
pub fn ref_matches(followed: &str, pushed: &str) -> bool {
    // The remote's HEAD is some branch, which the pass's fetch resolves: any branch may be it.
    if followed == "HEAD" {
        return pushed.starts_with("refs/heads/");
    }
    if followed.starts_with("refs/") {
        return followed == pushed;
    }
    pushed.strip_prefix("refs/heads/") == Some(followed)
        || pushed.strip_prefix("refs/tags/") == Some(followed)
}

fn decide_on_ref(followed: &str, pushed: Option<&str>) -> HookDecision {
    match pushed {
        None => HookDecision::Trigger { pushed_ref: None },
        Some(p) if ref_matches(followed, p) => HookDecision::Trigger {
            pushed_ref: Some(p.to_string()),
        },
        Some(p) => HookDecision::Ignore(format!("push to {p}; Weft follows {followed}")),
    }
}

/// GitHub: `X-GitHub-Event` says the kind; only `push` can move the followed ref.
pub fn github(followed: &str, event: Option<&str>, payload: &Value) -> HookDecision {
    match event {
        Some("ping") => HookDecision::Ignore("ping received; the webhook is set up".to_string()),
        Some("push") => decide_on_ref(followed, payload.get("ref").and_then(Value::as_str)),
        Some(other) => HookDecision::Ignore(format!("event `{other}` is not a push")),
        None => HookDecision::Ignore("no X-GitHub-Event header; not a GitHub delivery".to_string()),
    }
}

/// GitLab: `X-Gitlab-Event: Push Hook` or `Tag Push Hook`.
pub fn gitlab(followed: &str, event: Option<&str>, payload: &Value) -> HookDecision {
    match event {
        Some("Push Hook") | Some("Tag Push Hook") | Some("System Hook") => {
            decide_on_ref(followed, payload.get("ref").and_then(Value::as_str))
        }
        Some(other) => HookDecision::Ignore(format!("event `{other}` is not a push")),
        None => HookDecision::Ignore("no X-Gitlab-Event header; not a GitLab delivery".to_string()),
    }
}

/// Generic: any body; if it is JSON with a `ref`, the branch filter applies.
pub fn generic(followed: &str, payload: &Value) -> HookDecision {
    decide_on_ref(followed, payload.get("ref").and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_push_names_its_repository_by_every_url_the_forge_gives() {
        let github = json!({"ref": "refs/heads/main", "repository": {
            "clone_url": "https://github.com/o/r.git", "ssh_url": "git@github.com:o/r.git",
            "html_url": "https://github.com/o/r", "id": 1}});
        assert_eq!(
            repository_urls(&github),
            [
                "https://github.com/o/r.git",
                "git@github.com:o/r.git",
                "https://github.com/o/r"
            ]
        );
        let gitlab = json!({"project": {"git_http_url": "https://gitlab.com/o/r.git",
            "git_ssh_url": "git@gitlab.com:o/r.git"}});
        assert_eq!(repository_urls(&gitlab).len(), 2);
        let generic = json!({"repository": "https://git.example/o/r"});
        assert_eq!(repository_urls(&generic), ["https://git.example/o/r"]);
        assert!(repository_urls(&json!({"ref": "x"})).is_empty());
        let long = json!({"repository": "x".repeat(4096)});
        assert!(repository_urls(&long).is_empty());
    }

    #[test]
    fn branch_filter() {
        assert!(ref_matches("main", "refs/heads/main"));
        assert!(!ref_matches("main", "refs/heads/main2"));
        assert!(!ref_matches("main", "refs/heads/feature/main"));
        assert!(ref_matches("HEAD", "refs/heads/trunk"));
        assert!(!ref_matches("HEAD", "refs/tags/v1"));
        assert!(ref_matches("v1.0", "refs/tags/v1.0"));
        assert!(ref_matches("refs/heads/main", "refs/heads/main"));
        assert!(!ref_matches("refs/heads/main", "refs/tags/main"));
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert!(!ref_matches(sha, "refs/heads/main"));
    }

    #[test]
    fn github_push_to_another_branch_is_ignored_with_a_reason() {
        let p = json!({"ref": "refs/heads/dev"});
        match github("main", Some("push"), &p) {
            HookDecision::Ignore(why) => assert!(
                why.contains("refs/heads/dev") && why.contains("main"),
                "{why}"
            ),
            d => panic!("{d:?}"),
        }
        assert_eq!(
            github("main", Some("push"), &json!({"ref": "refs/heads/main"})),
            HookDecision::Trigger {
                pushed_ref: Some("refs/heads/main".into())
            }
        );
        assert!(matches!(
            github("main", Some("ping"), &p),
            HookDecision::Ignore(_)
        ));
        assert!(matches!(
            github("main", Some("issues"), &p),
            HookDecision::Ignore(_)
        ));
    }

    #[test]
    fn gitlab_and_generic() {
        let p = json!({"ref": "refs/heads/main"});
        assert!(matches!(
            gitlab("main", Some("Push Hook"), &p),
            HookDecision::Trigger { .. }
        ));
        assert!(matches!(
            gitlab("main", Some("Merge Request Hook"), &p),
            HookDecision::Ignore(_)
        ));
        assert!(matches!(
            generic("main", &Value::Null),
            HookDecision::Trigger { pushed_ref: None }
        ));
        assert!(matches!(
            generic("main", &json!({"ref": "refs/heads/x"})),
            HookDecision::Ignore(_)
        ));
    }

    #[test]
    fn form_encoded_github_payloads_are_read() {
        let body = b"payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D";
        assert_eq!(
            payload_json(body).unwrap(),
            json!({"ref": "refs/heads/main"})
        );
        assert_eq!(payload_json(b"").unwrap(), Value::Null);
        assert!(payload_json(b"{not json").is_err());
    }
}
