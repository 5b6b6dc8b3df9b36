//! One bound for every text Weft repeats that someone else wrote (a file or entry name, a
//! server's or helm's words, an error that quotes them): cut once, where the text enters, to a
//! size a person can read, saying how long it was. Errors, logs, status fields, events and the
//! daemon's `/api/v1/status` then carry at most that much of it (issue 48 item 4: a 16 MiB name
//! made a 16 MiB error, status write and log line).

/// The most of a status message (a condition's, an owner's in `/api/v1/status`, a pass's error)
/// kept, in characters. A Kubernetes condition message may hold 32,768; this leaves room for
/// several in one status and keeps a status write far under the API server's 3 MiB.
pub const MESSAGE_CHARS: usize = 4096;

/// `text` cut to at most `max` characters, saying how long it was: for messages that quote what
/// a remote party wrote (a file name, a link target, a ref name, a server's words), so that no
/// input can make an error (a log line, a status field) as large as itself.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}… ({} bytes in all)", &text[..end], text.len()),
    }
}

/// A message for a status field anyone who may read the resource reads: URL passwords
/// redacted, then at most [`MESSAGE_CHARS`] characters.
pub fn message(text: &str) -> String {
    clip(&super::redact::redact_url_passwords(text), MESSAGE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_clipped_on_a_character_boundary() {
        assert_eq!(clip("abcdef", 3), "abc… (6 bytes in all)");
        assert_eq!(clip("ééé", 2), "éé… (6 bytes in all)");
        assert_eq!(clip("abc", 3), "abc");
    }

    #[test]
    fn a_message_is_redacted_then_bounded() {
        let long = format!("fetching https://u:secret@h/r: {}", "x".repeat(1 << 20));
        let m = message(&long);
        assert!(
            m.starts_with("fetching https://u:***@h/r: xxx"),
            "{}",
            &m[..60]
        );
        assert!(m.len() < MESSAGE_CHARS + 40, "{} bytes", m.len());
        assert!(m.ends_with("bytes in all)"), "{}", &m[m.len() - 40..]);
    }
}
