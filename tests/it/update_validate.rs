//! `weft validate` (the loader) checks a WeaveCloud's agent channel settings before anything
//! reaches the cluster: a `wcPollUrl` Weft cannot read is reported with its file and line.

use crate::support::manifests;

use std::sync::Arc;

use weft::source::Snapshot;

fn load_one(yaml: &str) -> Result<(), String> {
    let snapshot = Snapshot {
        revision: None,
        files: [("weave/wc.yaml".to_string(), yaml.as_bytes().to_vec())].into(),
    };
    weft::load::load(Arc::new(snapshot))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A WeaveCloud whose `wcPollUrl` (line 9) is `poll_url`.
fn weavecloud(poll_url: &str) -> String {
    manifests::weavecloud("weave")
        .poll_url(poll_url)
        .token("weave-cloud", None)
        .yaml()
}

#[test]
fn a_poll_url_weft_cannot_read_is_an_error_at_its_line() {
    let e = load_one(&weavecloud("ftp://example.com/channel.yaml")).unwrap_err();
    assert!(
        e.contains("weave/wc.yaml:9:") && e.contains("scheme `ftp` is not supported"),
        "{e}"
    );
    let e = load_one(&weavecloud(
        "git+https://example.com/agents.git#../channel.yaml",
    ))
    .unwrap_err();
    assert!(
        e.contains("weave/wc.yaml:9:") && e.contains("leaves the repository"),
        "{e}"
    );
}

#[test]
fn the_channel_locations_weft_reads_are_accepted() {
    for url in [
        "https://example.com/weave/channel.yaml",
        "http://127.0.0.1:8080/channel.yaml",
        "file:///srv/weave/channel.yaml",
        "git+https://example.com/agents.git?ref=stable#channels/stable.yaml",
        "git+ssh://git@example.com/org/agents.git",
    ] {
        load_one(&weavecloud(url)).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}
