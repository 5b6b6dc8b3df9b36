use super::*;
use crate::api::notification::LocalRef;
use crate::notify::EventSource;

fn spec(type_: ProviderType, address: Option<&str>, secret: Option<&str>) -> ProviderSpec {
    ProviderSpec {
        type_,
        address: address.map(str::to_string),
        channel: None,
        username: None,
        secret_ref: secret.map(|n| LocalRef { name: n.into() }),
        suspend: false,
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn root_event(state: Option<CommitState>) -> Event {
    let mut e = Event::new(
        EventSource::root("weft-system", "weft"),
        Severity::Info,
        "ReconciliationSucceeded",
        "applied revision",
    )
    .with_revision(Some(SHA));
    e.commit_status = state;
    e
}

fn now() -> Timestamp {
    "2024-05-01T10:00:00Z".parse().unwrap()
}

#[test]
fn github_api_urls_from_repository_urls() {
    let t = github_target(&Url::parse("https://github.com/org/repo.git").unwrap()).unwrap();
    assert_eq!(
        t,
        Target::Github {
            api: "https://api.github.com".into(),
            owner: "org".into(),
            repo: "repo".into()
        }
    );
    let t = github_target(&Url::parse("http://127.0.0.1:4321/org/repo").unwrap()).unwrap();
    assert_eq!(
        t,
        Target::Github {
            api: "http://127.0.0.1:4321/api/v3".into(),
            owner: "org".into(),
            repo: "repo".into()
        }
    );
    // Credentials in the URL never reach the API base.
    let t = github_target(&Url::parse("https://u:p@ghe.example.com/o/r/").unwrap()).unwrap();
    assert!(matches!(t, Target::Github { ref api, .. } if api == "https://ghe.example.com/api/v3"));
    assert!(github_target(&Url::parse("https://github.com/org").unwrap()).is_err());
    assert!(github_target(&Url::parse("https://github.com/a/b/c").unwrap()).is_err());
}

#[test]
fn gitlab_projects_keep_their_subgroups_url_encoded() {
    let p = resolve(
        &spec(
            ProviderType::Gitlab,
            Some("https://gitlab.example.com:8443/group/sub/project.git"),
            Some("s"),
        ),
        Some(&data(&[("token", "glpat")])),
    )
    .unwrap();
    let out = request(&p, &root_event(Some(CommitState::Failure)), None, now()).unwrap();
    assert_eq!(
        out.url.as_str(),
        format!(
            "https://gitlab.example.com:8443/api/v4/projects/group%2Fsub%2Fproject/statuses/{SHA}"
        )
    );
    assert!(out
        .headers
        .contains(&("PRIVATE-TOKEN".to_string(), "glpat".to_string())));
    let body: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(body["state"], "failed");
    assert_eq!(body["name"], "weft/Root/weft");
}

#[test]
fn github_commit_statuses() {
    let p = resolve(
        &spec(
            ProviderType::Github,
            Some("https://github.com/org/repo"),
            Some("s"),
        ),
        Some(&data(&[("token", "ghp_x")])),
    )
    .unwrap();
    let mut e = root_event(Some(CommitState::Pending));
    e.message = "x".repeat(300);
    let out = request(&p, &e, None, now()).unwrap();
    assert_eq!(
        out.url.as_str(),
        format!("https://api.github.com/repos/org/repo/statuses/{SHA}")
    );
    assert!(out
        .headers
        .contains(&("Authorization".to_string(), "token ghp_x".to_string())));
    let body: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(body["state"], "pending");
    assert_eq!(body["context"], "weft/Root/weft");
    assert_eq!(body["description"].as_str().unwrap().chars().count(), 140);
    // No revision, no commit state, or a revision that is not a commit id: nothing to post.
    assert!(request(&p, &root_event(None), None, now()).is_none());
    let mut no_rev = root_event(Some(CommitState::Success));
    no_rev.revision = None;
    assert!(request(&p, &no_rev, None, now()).is_none());
    let mut bad_rev = root_event(Some(CommitState::Success));
    bad_rev.revision = Some("../../x".into());
    assert!(request(&p, &bad_rev, None, now()).is_none());
}

#[test]
fn generic_posts_fluxs_event_shape_with_a_bearer_token_and_extra_headers() {
    let p = resolve(
        &spec(
            ProviderType::Generic,
            Some("http://hooks.example.com/in"),
            Some("s"),
        ),
        Some(&data(&[
            ("token", "t0k"),
            ("headers", "X-Team: blue\nX-Env: prod\n"),
        ])),
    )
    .unwrap();
    let e = root_event(Some(CommitState::Success));
    let out = request(&p, &e, Some("cluster eu-1"), now()).unwrap();
    let body: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(
        body,
        json!({
            "involvedObject": {"kind": "Root", "namespace": "weft-system", "name": "weft", "apiVersion": "weft.io/v1alpha1"},
            "severity": "info",
            "timestamp": "2024-05-01T10:00:00Z",
            "message": "applied revision",
            "reason": "ReconciliationSucceeded",
            "metadata": {"revision": SHA, "summary": "cluster eu-1"},
            "reportingController": "weft",
        })
    );
    let h = |k: &str| {
        out.headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(h("Authorization"), Some("Bearer t0k"));
    assert_eq!(h("X-Team"), Some("blue"));
    assert_eq!(h("X-Signature"), None);
    // A status-only event (a revision that changed nothing) is not a webhook's business.
    let mut only = e.clone();
    only.status_only = true;
    assert!(request(&p, &only, None, now()).is_none());
}

#[test]
fn generic_hmac_signs_the_body_with_the_token() {
    let p = resolve(
        &spec(ProviderType::GenericHmac, Some("http://h/in"), Some("s")),
        Some(&data(&[("token", "key")])),
    )
    .unwrap();
    let out = request(&p, &root_event(None), None, now()).unwrap();
    let sig = out
        .headers
        .iter()
        .find(|(n, _)| n == "X-Signature")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert_eq!(
        sig,
        format!("sha256={}", hmac_sha256_hex(b"key", &out.body))
    );
    assert!(!out.headers.iter().any(|(n, _)| n == "Authorization"));
    // RFC 4231 test case 2.
    assert_eq!(
        hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
}

#[test]
fn slack_messages_are_coloured_by_severity() {
    let mut s = spec(ProviderType::Slack, None, Some("s"));
    s.channel = Some("#ops".into());
    s.username = Some("weft".into());
    let p = resolve(
        &s,
        Some(&data(&[(
            "address",
            "https://hooks.slack.com/services/T/B/secret",
        )])),
    )
    .unwrap();
    let mut e = root_event(None);
    e.severity = Severity::Error;
    let body: Value = serde_json::from_slice(&request(&p, &e, None, now()).unwrap().body).unwrap();
    assert_eq!(body["channel"], "#ops");
    assert_eq!(body["username"], "weft");
    assert_eq!(body["attachments"][0]["color"], "danger");
    assert_eq!(
        body["attachments"][0]["author_name"],
        "Root/weft-system/weft"
    );
    assert_eq!(body["attachments"][0]["text"], "applied revision");
}

#[test]
fn bad_providers_say_what_to_fix_without_the_address_or_the_token() {
    let gh = spec(
        ProviderType::Github,
        Some("https://github.com/o/r"),
        Some("gh"),
    );
    assert_eq!(
        resolve(&gh, None).unwrap_err(),
        ProviderProblem::SecretNotFound { name: "gh".into() }
    );
    let err = resolve(&gh, Some(&data(&[("address", "x")]))).unwrap_err();
    assert_eq!(err.reason(), "SecretKeyMissing");
    assert_eq!(
        err.to_string(),
        "Secret gh has no key `token`, which provider type github needs"
    );
    let no_secret = spec(ProviderType::GenericHmac, Some("http://h"), None);
    assert_eq!(
        resolve(&no_secret, None).unwrap_err().reason(),
        "SecretKeyMissing"
    );
    let no_address = spec(ProviderType::Slack, None, None);
    assert_eq!(
        resolve(&no_address, None).unwrap_err(),
        ProviderProblem::AddressMissing
    );
    let secret_url = "https://hooks.slack.com/services/T/B/sekrit";
    let not_http = spec(ProviderType::Generic, None, Some("s"));
    let err = resolve(
        &not_http,
        Some(&data(&[("address", &secret_url.replace("https", "ftp"))])),
    )
    .unwrap_err();
    assert_eq!(err.reason(), "InvalidAddress");
    assert!(!err.to_string().contains("sekrit"), "{err}");
    let bad_headers = resolve(
        &spec(ProviderType::Generic, Some("http://h"), Some("s")),
        Some(&data(&[("headers", "- a\n- b\n")])),
    )
    .unwrap_err();
    assert_eq!(bad_headers.reason(), "InvalidHeaders");
    // The Secret's address overrides the spec's.
    let p = resolve(
        &spec(ProviderType::Generic, Some("http://spec/"), Some("s")),
        Some(&data(&[("address", "http://secret/")])),
    )
    .unwrap();
    assert_eq!(
        p.target,
        Target::Webhook(Url::parse("http://secret/").unwrap())
    );
    assert!(!format!("{p:?}").contains("secret/"));
}
