//! One redaction for every text that leaves Weft (errors, logs, status, events): the password of
//! any URL in it. Here, at the root of the layers, so that status conditions
//! ([`super::conditions::set_condition`]) apply it too.

/// Replace the password of every `scheme://user:password@host` inside `text` with `***`; an
/// `http(s)://` userinfo without a password (`https://<token>@github.com`, a token used as the user
/// name) is replaced entirely.
pub fn redact_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (before, after) = rest.split_at(pos + 3);
        out.push_str(before);
        // The scheme, without a `git+` prefix (`git+https://` is https).
        let scheme = before[..before.len() - 3]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.'))
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let scheme = scheme.strip_prefix("git+").unwrap_or(&scheme);
        // The authority ends at the first `/`, whitespace or quote; userinfo ends at its last `@`.
        let end = after
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'' || c == '`')
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    None if scheme == "http" || scheme == "https" => out.push_str("***"),
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_used_as_the_user_name_is_redacted_in_http_urls_only() {
        assert_eq!(
            redact_url_passwords("fetch https://ghp_abc123@github.com/o/r.git failed"),
            "fetch https://***@github.com/o/r.git failed"
        );
        assert_eq!(
            redact_url_passwords("ssh://git@host/r.git"),
            "ssh://git@host/r.git"
        );
        assert_eq!(
            redact_url_passwords("git+HTTPS://tok@h/x"),
            "git+HTTPS://***@h/x"
        );
        assert_eq!(
            redact_url_passwords("ssh+https://tok@h"),
            "ssh+https://tok@h"
        );
    }
}
