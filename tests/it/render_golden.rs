//! Golden tests: `weft render examples-repo` and `weft crds` against committed files.
//! Regenerate after an intended change with `UPDATE_GOLDEN=1 cargo test --test it render_golden::`.

use crate::support;

use std::path::Path;

use support::weft_cli::Weft;

fn weft(args: &[&str]) -> (i32, String, String) {
    Weft::new(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        // The example's encrypted Secret (docs/secrets.md); render masks its values.
        .age_key("examples-repo/TEST-ONLY-age.agekey")
        .run()
}

fn check_golden(relative: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("golden file written");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    pretty_assertions::assert_eq!(
        expected,
        actual,
        "{relative} differs; UPDATE_GOLDEN=1 regenerates it"
    );
}

#[test]
fn examples_repo_renders_to_the_golden_file() {
    let (code, stdout, stderr) = weft(&["render", "examples-repo"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    check_golden("tests/golden/examples-repo.yaml", &stdout);
}

#[test]
fn deploy_crds_yaml_is_the_output_of_weft_crds() {
    let (code, stdout, stderr) = weft(&["crds"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    check_golden("deploy/crds.yaml", &stdout);
    assert!(stdout.contains("name: weaveclouds.cloud.weave.works"));
}

#[test]
fn every_rendered_object_carries_the_ownership_labels() {
    let (code, stdout, _) = weft(&["render", "examples-repo"]);
    assert_eq!(code, 0);
    let docs: Vec<&str> = stdout
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .collect();
    assert!(
        docs.len() >= 6,
        "expected the example's objects, got {}",
        docs.len()
    );
    for doc in docs {
        assert!(
            doc.contains("app.kubernetes.io/managed-by: weft"),
            "missing managed-by label:\n{doc}"
        );
        assert!(
            doc.contains("weft.io/owner: "),
            "missing owner label:\n{doc}"
        );
        assert!(
            doc.contains("weft.io/applied-hash: "),
            "missing applied hash:\n{doc}"
        );
    }
}
