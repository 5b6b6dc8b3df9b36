//! Unit tests of the updater: checks against a scripted fake API server.

use super::*;

#[test]
fn cache_names_are_per_weavecloud_and_valid() {
    let a = cache_configmap_name("weave", "weave-cloud");
    let b = cache_configmap_name("weave2", "weave-cloud");
    assert_ne!(a, b);
    assert!(a.len() <= 63 && a.starts_with("weft-agent-bundle-"), "{a}");
}
