//! An agent channel kept in a git repository (`git+git://…?ref=…#path`), served by a real
//! `git daemon` on loopback: the index is read at the ref, bundles are files of the same
//! repository named relative to the channel file, digests are checked, and a path that leaves the
//! repository is refused. No cluster needed.

use crate::support;
use crate::support::channel as channel_fixtures;

use channel_fixtures::{bundle_files, in_directory, pack, sha256};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use weft::render::bundle::Bundle;
use weft::source::channel::{ChannelError, ChannelOptions, ChannelSource};

fn options(dir: &tempfile::TempDir) -> ChannelOptions {
    ChannelOptions {
        git_cache_dir: dir.path().join("cache"),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_git_channel_is_read_at_its_ref_and_its_bundles_verified() {
    let host = RepoHost::new();
    let bare = host.create("agents.git");
    let daemon = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());

    let archive = pack(&in_directory("agents", bundle_files("1.1.0")));
    work.write("bundles/agents-1.1.0.tar.gz", &archive);
    work.write(
        "channels/stable.yaml",
        format!(
            "channel: stable\nbundles:\n  - version: 1.1.0\n    url: ../bundles/agents-1.1.0.tar.gz\n    sha256: {}\n  - version: 1.2.0\n    url: ../bundles/agents-1.1.0.tar.gz\n    sha256: {}\n",
            sha256(&archive),
            sha256(b"not this archive"),
        ),
    );
    work.commit("stable channel");
    work.push();
    // A later commit on main: the channel pinned to the tag must not see it.
    work.git(&["tag", "v1"]);
    work.git(&["push", "origin", "v1"]);
    work.write("channels/stable.yaml", "channel: stable\nbundles: []\n");
    work.commit("empty the channel on main");
    work.push();

    let cache = tempfile::tempdir().unwrap();
    let url = format!(
        "git+{}?ref=v1#channels/stable.yaml",
        daemon.url("agents.git")
    );
    let source = ChannelSource::new(&url, options(&cache)).unwrap();
    let channel = source.fetch_index().await.unwrap();
    assert_eq!(channel.name, "stable");
    let versions: Vec<String> = channel
        .bundles
        .iter()
        .map(|b| b.version.to_string())
        .collect();
    assert_eq!(versions, ["1.2.0", "1.1.0"]);
    assert_eq!(channel.bundles[1].url, "bundles/agents-1.1.0.tar.gz");

    let good = source.fetch_bundle(&channel.bundles[1]).await.unwrap();
    assert_eq!(good.archive, archive);
    let bundle = Bundle::from_files(good.files).unwrap();
    assert_eq!(bundle.version.to_string(), "1.1.0");

    let bad = source.fetch_bundle(&channel.bundles[0]).await.unwrap_err();
    assert!(
        matches!(&bad, ChannelError::DigestMismatch { version, .. } if version == "1.2.0"),
        "{bad}"
    );

    // main has no bundles any more.
    let main = ChannelSource::new(
        &format!("git+{}#channels/stable.yaml", daemon.url("agents.git")),
        options(&cache),
    )
    .unwrap();
    assert!(main.fetch_index().await.unwrap().bundles.is_empty());
}

#[tokio::test]
async fn a_git_channel_may_not_name_files_outside_its_repository() {
    let host = RepoHost::new();
    let bare = host.create("agents.git");
    let daemon = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    work.write(
        "channel.yaml",
        format!(
            "channel: s\nbundles:\n  - {{version: 1.0.0, url: ../../etc/passwd, sha256: {}}}\n",
            "0".repeat(64)
        ),
    );
    work.commit("hostile channel");
    work.push();
    let cache = tempfile::tempdir().unwrap();
    let source = ChannelSource::new(
        &format!("git+{}", daemon.url("agents.git")),
        options(&cache),
    )
    .unwrap();
    let e = source.fetch_index().await.unwrap_err().to_string();
    assert!(
        e.contains("`bundles[0].url` `../../etc/passwd`: `../../etc/passwd` leaves the repository"),
        "{e}"
    );
}
