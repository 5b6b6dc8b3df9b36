//! Every `weft.io/` key Weft writes or reads on the objects of a cluster — labels, annotations
//! and finalizers — defined once, here. A person meets these names in `kubectl get -o yaml`, in
//! the docs and in messages; a key with two definitions could drift into two spellings, and one
//! with a definition in a layer above its reader forced imports up the layers.
//!
//! Grouped by who reads them: what a person writes in a manifest (the user's vocabulary), what
//! Weft stamps on what it applies (ownership), and Weft's own records and Leases.

// What a person writes on a manifest, a chart or a resource.

/// `weft.io/suspend: "true"` suspends a resource (a WeaveCloud, an ArmadaChart, a Root's object).
pub const SUSPEND_ANNOTATION: &str = "weft.io/suspend";
/// `weft.io/prune: disabled` protects an object from pruning; `enabled` opts Namespaces and CRDs in.
pub const PRUNE_ANNOTATION: &str = "weft.io/prune";
/// `weft.io/create: if-missing`: the object is created when it does not exist, and an object of
/// that name Weft did not create is left as it is (never adopted, never pruned). Armada's release
/// namespaces (`helm install --create-namespace`) carry it.
pub const CREATE_ANNOTATION: &str = "weft.io/create";
/// `weft.io/recreate: allowed` on an object's document: when an apply is refused because it
/// changes an immutable field, delete the object and create it again.
pub const RECREATE_ANNOTATION: &str = "weft.io/recreate";
/// The per-object list of JSON pointers Weft leaves to other managers.
pub const IGNORE_ANNOTATION: &str = "weft.io/ignore-fields";
/// On a desired object: this root may take it over from the named holder.
pub const TAKE_OVER_ANNOTATION: &str = "weft.io/take-over-from";
/// The annotation (on the root's inventory ConfigMap, or on an owner custom resource) that lets
/// the pass of one revision past the fraction guard: `weft.io/force-prune: <revision>`. It allows
/// that revision only, so it cannot silently disarm the guard for later pushes.
pub const FORCE_PRUNE_ANNOTATION: &str = "weft.io/force-prune";
/// The annotation that asks for a pass now (Flux's `reconcile.fluxcd.io/requestedAt`): on a
/// Root, a WeaveCloud, an ArmadaChart, or the flag root's record; an RFC 3339 time, new per
/// request.
pub const REQUESTED_AT_ANNOTATION: &str = "weft.io/requested-at";
/// The annotation that lets the requested pass prune past `--max-prune-fraction`: honoured only
/// when it equals [`REQUESTED_AT_ANNOTATION`] (so it applies to one request, never to later ones).
pub const FORCE_PRUNE_AT: &str = "weft.io/force-prune-requested-at";
/// The `Chart.yaml` annotation that selects the template format.
pub const TEMPLATE_FORMAT_ANNOTATION: &str = "weft.io/template-format";
/// The ArmadaChart annotation with which a chart may output `{{` literally (Prometheus alert
/// templates, Grafana dashboards): `weft.io/literal-braces: allow`.
pub const LITERAL_BRACES_ANNOTATION: &str = "weft.io/literal-braces";
/// The annotation of a Root in Weft's namespace that names the namespace its manifests without
/// one go to (default: the Root's namespace). The flag root's Root carries the daemon's
/// (`default`), so that its migration leaves such objects where the flag loop put them.
pub const DEFAULT_NAMESPACE_ANNOTATION: &str = "weft.io/default-namespace";

/// The annotation of a suspended Root that says why (`weft suspend --message`, `POST
/// /api/v1/suspend?message=`): shown by `weft get root`, the daemon's status and the answer to
/// a request while the root is suspended; removed when it is resumed.
pub const SUSPEND_MESSAGE_ANNOTATION: &str = "weft.io/suspend-message";

// What Weft stamps on what it applies.

/// `weft.io/owner: <owner-id>`: a short hash of the owner.
pub const OWNER_LABEL: &str = "weft.io/owner";
/// `weft.io/owner-ref`: the readable owner.
pub const OWNER_REF_ANNOTATION: &str = "weft.io/owner-ref";
/// `weft.io/applied-hash`: hash of the desired object, to skip no-op writes.
pub const APPLIED_HASH_ANNOTATION: &str = "weft.io/applied-hash";
/// On a live object: another root declares it too.
pub const CLAIM_ANNOTATION: &str = "weft.io/claimed-by";
/// Pod-template annotation: hash of the token Secret's data, so that a new token rolls the agents.
pub const TOKEN_HASH_ANNOTATION: &str = "weft.io/token-hash";
/// Pod-template annotation of prometheus: hash of its rendered configuration, so that a change
/// of scrape policy or hostname restarts it (prometheus does not reload a ConfigMap by itself).
pub const CONFIG_HASH_ANNOTATION: &str = "weft.io/config-hash";
/// The finalizer that makes Weft prune a deleted WeaveCloud's agents.
pub const AGENTS_FINALIZER: &str = "weft.io/agents";
/// The finalizer that makes Weft prune a deleted ArmadaChart's children.
pub const ARMADA_CHART_FINALIZER: &str = "weft.io/armada-chart";
/// The prefix of Weft's finalizers ([`AGENTS_FINALIZER`], [`ARMADA_CHART_FINALIZER`]).
pub const FINALIZER_PREFIX: &str = "weft.io/";

// Weft's own records and Leases, in Weft's namespace.

/// The label that marks an inventory ConfigMap.
pub const INVENTORY_OF_LABEL: &str = "weft.io/inventory-of";
/// The root's name: the label every root record carries (shard records: the base root's), and
/// the annotation of a root's Lease (`namespace/name`).
pub const ROOT_KEY: &str = "weft.io/root";
/// The label on every Lease of the Root controller: `root` or `replica`.
pub const LEASE_LABEL: &str = "weft.io/lease";
/// The Lease annotation with the leader's hooks URL (`http://10.0.0.7:8081`): where standbys
/// forward webhooks and sync requests (the server checks it is a pod of Weft's own Service).
pub const HOOKS_URL_ANNOTATION: &str = "weft.io/hooks-url";
/// The annotation of the Lease that says which repository its holder syncs.
pub const SOURCE_ANNOTATION: &str = "weft.io/source";
/// The annotation of the Lease with its holder's version (`weft version` reads it).
pub const VERSION_ANNOTATION: &str = "weft.io/version";
/// Label on a cached-bundle ConfigMap: the owner id of its WeaveCloud.
pub const BUNDLE_OF_LABEL: &str = "weft.io/agent-bundle-of";
/// Label on a takeover record (in Weft's namespace): marks it for `kubectl get -l`.
pub const TAKEOVER_RECORD_LABEL: &str = "weft.io/takeover-record";
/// Annotation on a takeover record: `<namespace>/<name>` of its WeaveCloud (a record is read
/// only for the WeaveCloud it names). An earlier Weft put it as a label on records in the
/// WeaveCloud's namespace; those are never read now.
pub const TAKEOVER_RECORD_OF: &str = "weft.io/takeover-record-of";

#[cfg(test)]
mod tests {
    /// Every key is one of Weft's: a typo in the prefix would make a key nobody reads.
    #[test]
    fn every_key_is_under_weft_io_and_none_is_defined_twice() {
        let text = include_str!("keys.rs");
        let mut seen = std::collections::BTreeSet::new();
        for line in text.lines().filter(|l| l.starts_with("pub const ")) {
            let value = line.split('"').nth(1).expect("a string constant");
            assert!(value.starts_with("weft.io/"), "{line}");
            assert!(seen.insert(value), "{value} is defined twice");
        }
        assert!(seen.len() >= 30, "{}", seen.len());
    }

    /// No other file of `src/` defines a `weft.io/` key: a second definition is how two
    /// spellings of one key start (API versions such as `weft.io/v1alpha1` are not keys).
    #[test]
    fn no_other_file_defines_a_weft_io_key() {
        fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("src/ is readable") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    walk(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("api/keys.rs")
                {
                    let text = std::fs::read_to_string(&path).expect("a source file");
                    for line in text.lines() {
                        let defines =
                            line.contains("const ") && line.contains(": &str = \"weft.io/");
                        if defines && !line.contains("weft.io/v1") {
                            found.push(format!("{}: {}", path.display(), line.trim()));
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(
            found.is_empty(),
            "define these in src/api/keys.rs: {found:#?}"
        );
    }
}
