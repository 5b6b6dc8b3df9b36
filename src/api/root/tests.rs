use std::time::Duration;

use kube::CustomResourceExt;
use serde_json::{json, Value};

use super::*;

/// The schema of `spec` in the generated CRD.
fn spec_schema() -> Value {
    let crd = serde_json::to_value(Root::crd()).unwrap();
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .unwrap()
        .clone()
}

#[test]
fn the_crd_is_namespaced_in_weft_io_with_a_status_subresource() {
    let crd = Root::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("roots.weft.io"));
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["rt".to_string()]));
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<&str> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Ready", "Status", "Revision", "Suspended", "Age"]);
}

#[test]
fn the_schema_allows_at_most_one_ref_and_bounds_fields() {
    let spec = spec_schema();
    let git_ref = spec.pointer("/properties/source/properties/ref").unwrap();
    assert_eq!(git_ref["maxProperties"], json!(1));
    assert_eq!(
        spec.pointer("/properties/interval/pattern").unwrap(),
        &json!(DURATION_PATTERN)
    );
    assert_eq!(
        spec.pointer("/properties/maxPruneFraction/maximum")
            .unwrap(),
        &json!(1.0)
    );
    assert_eq!(
        spec.pointer("/properties/serviceAccountName/pattern")
            .unwrap(),
        &json!(DNS_SUBDOMAIN_PATTERN)
    );
    assert_eq!(spec["required"], json!(["source"]));
}

#[test]
fn a_full_root_reads_and_writes_back_the_same() {
    let doc = json!({
        "source": {
            "url": "https://git.example/team.git",
            "ref": {"semver": ">=1.2.0 <2.0.0"},
            "secretRef": {"name": "git-creds"}
        },
        "path": "clusters/prod",
        "interval": "5m",
        "timeout": "2m30s",
        "prune": false,
        "maxPruneFraction": 0.25,
        "suspend": true,
        "decryption": {"provider": "sops", "secretRef": {"name": "age"}},
        "targetManifest": "site",
        "dependsOn": [{"name": "infra"}, {"name": "crds", "namespace": "platform"}],
        "serviceAccountName": "team-a"
    });
    let spec: RootSpec = serde_json::from_value(doc.clone()).unwrap();
    assert_eq!(spec.interval(), Duration::from_secs(300));
    assert_eq!(spec.timeout(), Duration::from_secs(150));
    assert_eq!(spec.max_prune_fraction(), 0.25);
    assert!(!spec.prune());
    assert_eq!(
        spec.depends_on[1].key("team"),
        crate::api::ResourceKey {
            namespace: "platform".into(),
            name: "crds".into()
        }
    );
    assert_eq!(spec.depends_on[0].key("team").namespace, "team");
    assert_eq!(serde_json::to_value(&spec).unwrap(), doc);
}

#[test]
fn an_unknown_field_is_refused_naming_it() {
    let err = serde_json::from_value::<RootSpec>(json!({
        "source": {"url": "https://git.example/a.git"},
        "intervall": "1m"
    }))
    .unwrap_err();
    assert!(err.to_string().contains("intervall"), "{err}");
}

#[test]
fn defaults_apply_to_a_minimal_root() {
    let spec: RootSpec =
        serde_json::from_value(json!({"source": {"url": "https://git.example/a.git"}})).unwrap();
    assert_eq!(spec.interval(), DEFAULT_INTERVAL);
    assert_eq!(spec.timeout(), DEFAULT_TIMEOUT);
    assert_eq!(spec.max_prune_fraction(), DEFAULT_MAX_PRUNE_FRACTION);
    assert!(spec.prune());
    assert!(!spec.suspend);
    assert_eq!(spec.source.git_ref, None);
}

#[test]
fn durations_are_read_as_the_pattern_says() {
    let pattern = regex::Regex::new(DURATION_PATTERN).unwrap();
    for good in ["90s", "5m", "1h30m", "500ms", "1h"] {
        assert!(pattern.is_match(good), "{good}");
        assert!(parse_duration(good).is_some(), "{good}");
    }
    for bad in ["5 minutes", "", "1.5h", "m", "5d", "-1s", "1h 30m"] {
        assert!(!pattern.is_match(bad), "{bad}");
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
    assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
}

#[test]
fn the_ref_as_a_flag_is_its_branch_tag_or_commit() {
    let branch = GitRefSpec {
        branch: Some("main".into()),
        ..Default::default()
    };
    assert_eq!(branch.as_flag().as_deref(), Some("refs/heads/main"));
    let tag = GitRefSpec {
        tag: Some("v1".into()),
        ..Default::default()
    };
    assert_eq!(tag.as_flag().as_deref(), Some("refs/tags/v1"));
    let semver = GitRefSpec {
        semver: Some("1.x".into()),
        ..Default::default()
    };
    assert_eq!(semver.as_flag(), None);
}

#[test]
fn a_semver_range_picks_the_highest_tag_it_admits() {
    let tags = [
        "v1.0.0",
        "v1.1.0",
        "1.2.0",
        "v2.0.0",
        "v1.3.0-rc.1",
        "latest",
        "v1.10.0",
    ];
    let pick = |range: &str| {
        let req = parse_semver_range(range).unwrap();
        highest_matching_tag(&req, tags.iter().copied())
    };
    // Flux's spelling (space-separated comparators) and the crate's (commas) are one.
    assert_eq!(pick(">=1.0.0 <2.0.0"), Some("v1.10.0"));
    assert_eq!(pick(">=1.0.0, <2.0.0"), Some("v1.10.0"));
    assert_eq!(pick(">= 1.0.0 < 1.2.0"), Some("v1.1.0"));
    assert_eq!(pick("~1.2"), Some("1.2.0"));
    assert_eq!(pick("1.x"), Some("v1.10.0"));
    assert_eq!(pick(">=3"), None);
    // A pre-release only when the range names one.
    assert_eq!(pick(">=1.3.0-rc.0, <1.4.0"), Some("v1.3.0-rc.1"));
    assert!(parse_semver_range("one point two").is_err());
}
