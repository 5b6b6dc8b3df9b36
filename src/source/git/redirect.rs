//! Redirects of a git remote someone else chose (a chart source), refused before libgit2 sees
//! them: libgit2 follows a redirect to the same host *name*, another port or path of it
//! included (issue 48 item 7), and offers no stricter policy than that.

use std::time::Duration;

use super::GitError;
use crate::api::bounded::clip;
use crate::api::redact::redact_url_passwords;

/// A remote someone else chose (a chart source) is asked first, without credentials and
/// without following, what libgit2 would be told: a redirect is refused before libgit2 sees
/// it (libgit2 follows any redirect to the same host *name*: another port or path of it
/// included, issue 48 item 7). Any other answer, or none, is for the fetch to judge.
pub(super) fn refuse_a_redirect(
    fetch_url: &str,
    display: &str,
    timeout: Duration,
) -> Result<(), GitError> {
    let Ok(mut url) = url::Url::parse(fetch_url) else {
        return Ok(());
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Ok(());
    }
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let probe = format!(
        "{}/info/refs?service=git-upload-pack",
        url.as_str().trim_end_matches('/')
    );
    // Only the status and Location are read, and nothing secret is sent: the server's
    // certificate does not matter here (the fetch checks it, with --ca-file).
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .danger_accept_invalid_certs(true)
        .timeout(timeout.min(Duration::from_secs(30)))
        .build();
    let Ok(answer) = client.and_then(|c| c.get(&probe).send()) else {
        return Ok(());
    };
    if !answer.status().is_redirection() {
        return Ok(());
    }
    let location = answer
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let to = match url::Url::parse(&probe).and_then(|base| base.join(location)) {
        Ok(t) => format!(
            "{}://{}:{}{}",
            t.scheme(),
            t.host_str().unwrap_or_default(),
            t.port_or_known_default().unwrap_or_default(),
            t.path()
        ),
        Err(_) => location.to_string(),
    };
    Err(GitError::RedirectRefused {
        url: display.to_string(),
        message: format!(
            "{} to {}",
            answer.status().as_u16(),
            clip(&redact_url_passwords(&to), 200)
        ),
    })
}
