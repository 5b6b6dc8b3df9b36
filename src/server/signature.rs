//! Webhook authentication: GitHub's `X-Hub-Signature-256`, GitLab's `X-Gitlab-Token`, the generic
//! hook's `X-Weft-Signature`, and the sync endpoint's bearer token. Every comparison of secret
//! material is constant-time (`subtle`), so the time of a rejection says nothing about the secret.
//!
//! The errors say why a request was refused without quoting the secret or the presented value.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Why a request was not authenticated. Shown in the daemon's log and (briefly) to the caller.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("header {0} is missing")]
    MissingHeader(&'static str),
    #[error("header {header} is malformed: {why}")]
    Malformed {
        header: &'static str,
        why: &'static str,
    },
    #[error("header {0} does not match the configured secret")]
    Mismatch(&'static str),
    #[error("no secret is configured on the daemon (--webhook-secret-file / --sync-token-file), so this endpoint is closed")]
    NotConfigured,
    /// The endpoint is closed, and why (e.g. GitLab with a single shared webhook secret).
    #[error("{0}")]
    Closed(String),
}

/// GitHub's header: `sha256=<hex HMAC-SHA256 of the body>`.
pub const GITHUB_SIGNATURE_HEADER: &str = "X-Hub-Signature-256";
/// GitLab's header: the secret token itself.
pub const GITLAB_TOKEN_HEADER: &str = "X-Gitlab-Token";
/// The generic hook's header, same form as GitHub's: `sha256=<hex HMAC-SHA256 of the body>`.
pub const GENERIC_SIGNATURE_HEADER: &str = "X-Weft-Signature";

/// The HMAC-SHA256 of `body` under `secret`, hex, in the `sha256=…` form the headers carry.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // new_from_slice accepts keys of any length for HMAC; it cannot fail here.
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The digest of a `sha256=<hex>` HMAC header (GitHub's and the generic hook's), checked for form
/// only: what can be refused before the body is read.
pub fn parse_hmac_header(
    header: &'static str,
    value: Option<&str>,
) -> Result<[u8; 32], SignatureError> {
    let value = value.ok_or(SignatureError::MissingHeader(header))?;
    let hex_digest = value
        .trim()
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed {
            header,
            why: "expected `sha256=<hex digest>`",
        })?;
    let given = hex::decode(hex_digest).map_err(|_| SignatureError::Malformed {
        header,
        why: "the digest is not hexadecimal",
    })?;
    given.try_into().map_err(|_| SignatureError::Malformed {
        header,
        why: "the digest is not 32 bytes (SHA-256)",
    })
}

/// Check a digest from [`parse_hmac_header`] against the body.
pub fn verify_hmac_digest(
    header: &'static str,
    secret: &[u8],
    given: &[u8; 32],
    body: &[u8],
) -> Result<(), SignatureError> {
    let mut mac = HmacSha256::new_from_slice(secret).map_err(|_| SignatureError::NotConfigured)?;
    mac.update(body);
    // verify_slice compares in constant time.
    mac.verify_slice(given)
        .map_err(|_| SignatureError::Mismatch(header))
}

/// Check a `sha256=<hex>` HMAC header value (GitHub's and the generic hook's) against the body.
pub fn verify_hmac_sha256(
    header: &'static str,
    secret: Option<&[u8]>,
    value: Option<&str>,
    body: &[u8],
) -> Result<(), SignatureError> {
    let secret = secret.ok_or(SignatureError::NotConfigured)?;
    let given = parse_hmac_header(header, value)?;
    verify_hmac_digest(header, secret, &given, body)
}

/// Check a header that carries the shared secret itself (GitLab's token, the bearer token).
pub fn verify_token(
    header: &'static str,
    secret: Option<&[u8]>,
    value: Option<&str>,
) -> Result<(), SignatureError> {
    let secret = secret.ok_or(SignatureError::NotConfigured)?;
    let value = value.ok_or(SignatureError::MissingHeader(header))?;
    if constant_time_eq(value.trim().as_bytes(), secret) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch(header))
    }
}

/// Check `Authorization: Bearer <token>`.
pub fn verify_bearer(
    secret: Option<&[u8]>,
    authorization: Option<&str>,
) -> Result<(), SignatureError> {
    const HEADER: &str = "Authorization";
    let secret = secret.ok_or(SignatureError::NotConfigured)?;
    let value = authorization.ok_or(SignatureError::MissingHeader(HEADER))?;
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or(SignatureError::Malformed {
            header: HEADER,
            why: "expected `Bearer <token>`",
        })?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(SignatureError::Malformed {
            header: HEADER,
            why: "the scheme is not `Bearer`",
        });
    }
    if constant_time_eq(token.trim().as_bytes(), secret) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch(HEADER))
    }
}

/// Constant-time equality of two byte strings. `subtle` compares equal-length slices in constant
/// time; comparing digests instead of the raw values also hides the secret's length.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::Digest;
    let da = Sha256::digest(a);
    let db = Sha256::digest(b);
    da.as_slice().ct_eq(db.as_slice()).into()
}

/// A secret read from a file: surrounding whitespace (the trailing newline of `echo > file`)
/// is not part of it.
pub fn secret_from_file_contents(contents: &[u8]) -> Vec<u8> {
    let start = contents
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(contents.len());
    let end = contents
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    contents[start..end].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example from GitHub's documentation ("Validating webhook deliveries").
    const GH_SECRET: &[u8] = b"It's a Secret to Everybody";
    const GH_BODY: &[u8] = b"Hello, World!";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn github_documented_example_verifies() {
        assert_eq!(sign(GH_SECRET, GH_BODY), GH_SIG);
        assert_eq!(
            verify_hmac_sha256(
                GITHUB_SIGNATURE_HEADER,
                Some(GH_SECRET),
                Some(GH_SIG),
                GH_BODY
            ),
            Ok(())
        );
    }

    #[test]
    fn a_changed_body_or_secret_is_a_mismatch() {
        assert_eq!(
            verify_hmac_sha256(
                GITHUB_SIGNATURE_HEADER,
                Some(GH_SECRET),
                Some(GH_SIG),
                b"Hello, World?"
            ),
            Err(SignatureError::Mismatch(GITHUB_SIGNATURE_HEADER))
        );
        assert_eq!(
            verify_hmac_sha256(
                GITHUB_SIGNATURE_HEADER,
                Some(b"other"),
                Some(GH_SIG),
                GH_BODY
            ),
            Err(SignatureError::Mismatch(GITHUB_SIGNATURE_HEADER))
        );
    }

    #[test]
    fn malformed_and_missing_headers_say_why() {
        let h = GENERIC_SIGNATURE_HEADER;
        assert_eq!(
            verify_hmac_sha256(h, Some(b"s"), None, b""),
            Err(SignatureError::MissingHeader(h))
        );
        let sha1 = "sha1=0123456789abcdef0123456789abcdef01234567";
        assert!(matches!(
            verify_hmac_sha256(h, Some(b"s"), Some(sha1), b""),
            Err(SignatureError::Malformed { why, .. }) if why.contains("sha256=")
        ));
        assert!(matches!(
            verify_hmac_sha256(h, Some(b"s"), Some("sha256=zz"), b""),
            Err(SignatureError::Malformed { why, .. }) if why.contains("hexadecimal")
        ));
        assert!(matches!(
            verify_hmac_sha256(h, Some(b"s"), Some("sha256=abcd"), b""),
            Err(SignatureError::Malformed { why, .. }) if why.contains("32 bytes")
        ));
    }

    #[test]
    fn without_a_configured_secret_everything_is_refused() {
        assert_eq!(
            verify_hmac_sha256(GITHUB_SIGNATURE_HEADER, None, Some(GH_SIG), GH_BODY),
            Err(SignatureError::NotConfigured)
        );
        assert_eq!(
            verify_token(GITLAB_TOKEN_HEADER, None, Some("x")),
            Err(SignatureError::NotConfigured)
        );
        assert_eq!(
            verify_bearer(None, Some("Bearer x")),
            Err(SignatureError::NotConfigured)
        );
    }

    #[test]
    fn gitlab_token_must_match_exactly() {
        let h = GITLAB_TOKEN_HEADER;
        assert_eq!(verify_token(h, Some(b"tok"), Some("tok")), Ok(()));
        assert_eq!(
            verify_token(h, Some(b"tok"), Some("tok2")),
            Err(SignatureError::Mismatch(h))
        );
        assert_eq!(
            verify_token(h, Some(b"tok"), Some("to")),
            Err(SignatureError::Mismatch(h))
        );
        assert_eq!(
            verify_token(h, Some(b"tok"), None),
            Err(SignatureError::MissingHeader(h))
        );
    }

    #[test]
    fn bearer_token_needs_the_scheme_and_the_token() {
        assert_eq!(verify_bearer(Some(b"t0k"), Some("Bearer t0k")), Ok(()));
        assert_eq!(verify_bearer(Some(b"t0k"), Some("bearer t0k")), Ok(()));
        assert_eq!(
            verify_bearer(Some(b"t0k"), Some("Bearer nope")),
            Err(SignatureError::Mismatch("Authorization"))
        );
        assert!(matches!(
            verify_bearer(Some(b"t0k"), Some("Basic dTpw")),
            Err(SignatureError::Malformed { .. })
        ));
        assert!(matches!(
            verify_bearer(Some(b"t0k"), Some("t0k")),
            Err(SignatureError::Malformed { .. })
        ));
    }

    #[test]
    fn error_messages_never_contain_the_secret_or_the_presented_value() {
        let secret = b"hunter2-secret";
        let errs = [
            verify_token(GITLAB_TOKEN_HEADER, Some(secret), Some("hunter2-guess")).unwrap_err(),
            verify_bearer(Some(secret), Some("Bearer hunter2-guess")).unwrap_err(),
            verify_hmac_sha256(GITHUB_SIGNATURE_HEADER, Some(secret), Some(GH_SIG), b"x")
                .unwrap_err(),
        ];
        for e in errs {
            let msg = e.to_string();
            assert!(!msg.contains("hunter2"), "{msg}");
            assert!(!msg.contains("757107ea"), "{msg}");
        }
    }

    #[test]
    fn secret_files_lose_surrounding_whitespace_only() {
        assert_eq!(
            secret_from_file_contents(b"  s3 cret\n"),
            b"s3 cret".to_vec()
        );
        assert_eq!(secret_from_file_contents(b"\n\n"), Vec::<u8>::new());
    }
}
