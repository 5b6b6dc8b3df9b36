//! A Root's pass settings: the daemon's (or `weft sync root`'s) with the root's own — its owner,
//! default namespace, timeout, prune guard, target manifest, override files and decryption.

use std::sync::Arc;

use kube::{Client, ResourceExt};

use crate::api::root::Root;
use crate::api::ResourceKey;
use crate::pass::PassSettings;

/// The pass settings of `root` over `base` (the daemon's, or `weft sync root`'s): `own` when
/// it acts as Weft (else no launcher takeover and no operator key file).
pub fn root_settings(
    base: &PassSettings,
    root: &Root,
    key: &ResourceKey,
    own: bool,
    client: &Client,
) -> PassSettings {
    let spec = &root.spec;
    let mut s = PassSettings::clone(base);
    s.root_name.clone_from(&key.name);
    s.default_namespace = default_namespace(root, key, &base.weft_namespace);
    s.weft_namespace.clone_from(&key.namespace);
    s.timeout = spec.timeout();
    s.max_prune_fraction = spec.max_prune_fraction();
    if !spec.prune() {
        // Nothing may be pruned: a pass that would prune stops at the guard and says so.
        s.max_prune_fraction = 0.0;
        s.force_prune = false;
    }
    s.repo_location.clone_from(&spec.source.url);
    s.target_manifest.clone_from(&spec.target_manifest);
    // The root's own override files, never the daemon's (`--armada-values` is the flag root's,
    // carried into its Root's spec).
    s.armada_values.clone_from(&spec.armada_values);
    if !own {
        // A tenant's root never acts in kube-system for the launcher takeover, and never uses
        // the operator's key file.
        s.launcher_takeover = None;
    }
    s.decryption = crate::sops::Decryption {
        key_file: if own {
            Arc::clone(&base.decryption.key_file)
        } else {
            Arc::default()
        },
        secret: spec
            .decryption
            .as_ref()
            .and_then(|d| d.secret_ref.as_ref())
            .map(|r| {
                Arc::new(crate::sops::DecryptionSecret::new(
                    client.clone(),
                    &key.namespace,
                    &r.name,
                ))
            }),
    };
    s
}

/// Where the root's manifests without a namespace go: its own namespace, or for a Root in
/// Weft's namespace acting as Weft the namespace its `weft.io/default-namespace` annotation
/// names (the flag root's Root: the flag loop's `default`, so that its migration moves none).
pub fn default_namespace(root: &Root, key: &ResourceKey, weft_namespace: &str) -> String {
    let named = root
        .annotations()
        .get(crate::api::keys::DEFAULT_NAMESPACE_ANNOTATION)
        .filter(|n| !n.is_empty())
        .filter(|_| key.namespace == weft_namespace && root.spec.service_account_name.is_none());
    named.cloned().unwrap_or_else(|| key.namespace.clone())
}
