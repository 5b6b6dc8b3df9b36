//! Armada charts end to end, offline: `examples-repo/armada/` rendered against a golden file,
//! the same deployment as native Armada documents rendering to identical objects, chart sources
//! from a real git repository and from a real HTTP server on loopback, and the errors a user sees.
//! Regenerate the golden file after an intended change with
//! `UPDATE_GOLDEN=1 cargo test --test it armada_render::`.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use weft::api::owner::OwnerKind;

use serde_json::Value;
use support::helm::helm;
use support::weft_cli::Weft;
use weft::helm::{HelmLocation, HelmRenderer};
use weft::load::{self, LoadedRepo};
use weft::render::armada::HelmRenders;
use weft::render::{self, DesiredObject, Owner, RenderInputs, RenderOptions};
use weft::source::chart::{self, ChartCache};
use weft::source::{local, Snapshot, SnapshotLimits};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The age identity of the examples repository's encrypted Secret (docs/secrets.md).
fn examples_key() -> load::LoadOptions {
    let file = root().join("examples-repo/TEST-ONLY-age.agekey");
    load::LoadOptions {
        identities: Arc::new(weft::sops::identities_from_key_file(&file).unwrap()),
        ..load::LoadOptions::default()
    }
}

fn load_snapshot(snapshot: Snapshot) -> LoadedRepo {
    match load::load_with(Arc::new(snapshot), &examples_key()) {
        Ok((repo, _)) => repo,
        Err(load::LoadError(d)) => panic!(
            "load failed: {:?}",
            d.0.iter().map(|d| d.to_string()).collect::<Vec<_>>()
        ),
    }
}

/// The source stage for the charts of `repo`, as a pass runs it.
fn resolve(
    repo: &LoadedRepo,
    location: &str,
    cache: &ChartCache,
) -> Result<chart::ChartSources, chart::ChartSourceError> {
    chart::resolve(
        &repo.armada.chart_requests(),
        &repo.snapshot,
        location,
        cache,
    )
}

/// The helm step of a pass (`pass::helm`), offline: the Helm charts of `repo` rendered by helm.
fn helm_renders(repo: &LoadedRepo, sources: &chart::ChartSources) -> HelmRenders {
    let renderer = Arc::new(HelmRenderer::new(HelmLocation::Binary(
        helm().to_path_buf(),
    )));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(weft::pass::helm::render_helm_charts(
            repo, sources, &renderer, None,
        ))
        .map(|outcome| {
            let failed: Vec<String> = outcome.failures.values().map(|e| e.to_string()).collect();
            assert!(failed.is_empty(), "{failed:#?}");
            outcome.renders
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Render as a pass does: chart sources, helm for the Helm charts, then the pure render.
fn render_sources(repo: &LoadedRepo, sources: chart::ChartSources) -> Vec<DesiredObject> {
    let inputs = RenderInputs {
        helm: helm_renders(repo, &sources),
        charts: sources,
        ..RenderInputs::default()
    };
    render::render_desired(repo, &inputs, &RenderOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn render_with(repo: &LoadedRepo, location: &Path, cache: &ChartCache) -> Vec<DesiredObject> {
    let sources =
        resolve(repo, &location.display().to_string(), cache).unwrap_or_else(|e| panic!("{e}"));
    render_sources(repo, sources)
}

/// The Armada part of a render: the CRs of the sync layer and the charts' objects, in order.
fn armada_part(objects: &[DesiredObject]) -> Vec<&DesiredObject> {
    objects
        .iter()
        .filter(|o| o.kind().starts_with("Armada") || o.owner.kind == OwnerKind::ArmadaChart)
        .collect()
}

fn check_golden(relative: &str, actual: &str) {
    let path = root().join(relative);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
    pretty_assertions::assert_eq!(
        expected,
        actual,
        "{relative} differs; UPDATE_GOLDEN=1 regenerates it"
    );
}

fn examples_repo() -> (LoadedRepo, Vec<DesiredObject>) {
    let dir = root().join("examples-repo");
    let repo = load_snapshot(local::read_dir(&dir, SnapshotLimits::default()).unwrap());
    let cache_dir = tempfile::tempdir().unwrap();
    let objects = render_with(&repo, &dir, &ChartCache::new(cache_dir.path()));
    (repo, objects)
}

#[test]
fn examples_repo_armada_renders_to_the_golden_file() {
    let (_, objects) = examples_repo();
    let part: Vec<DesiredObject> = armada_part(&objects).into_iter().cloned().collect();
    check_golden(
        "tests/golden/armada/examples-repo.yaml",
        &render::output::to_yaml_stream(&part).unwrap(),
    );
}

#[test]
fn charts_come_in_deployment_order_after_their_crs() {
    let (_, objects) = examples_repo();
    let part = armada_part(&objects);
    // The CRs (sync layer, wave 0) first, then redis (group demo-data), then the sequenced
    // group demo-apps chart by chart: api, then web.
    let owners: Vec<(String, u32)> = part
        .iter()
        .map(|o| match o.owner.kind {
            OwnerKind::Root => (format!("cr:{}", o.kind()), o.wave),
            _ => (o.owner.name.to_string(), o.wave),
        })
        .collect();
    let mut compressed: Vec<(String, u32)> = Vec::new();
    for o in owners {
        if compressed.last() != Some(&o) {
            compressed.push(o);
        }
    }
    assert_eq!(
        compressed,
        vec![
            ("cr:ArmadaChart".into(), 0),
            ("cr:ArmadaChartGroup".into(), 0),
            ("cr:ArmadaManifest".into(), 0),
            ("redis".into(), 1),
            ("api".into(), 2),
            ("web".into(), 3),
        ]
    );
}

#[test]
fn values_substitution_and_overlays_reach_the_objects() {
    let (_, objects) = examples_repo();
    let find = |kind: &str, name: &str| -> Value {
        objects
            .iter()
            .find(|o| o.kind() == kind && o.name() == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .object
            .value()
    };
    let api = find("Deployment", "demo-api");
    assert_eq!(api["metadata"]["namespace"], "demo");
    assert_eq!(
        api["spec"]["replicas"], 3,
        "ArmadaChart values override values.yaml, as a number"
    );
    assert_eq!(
        api["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/example/demo-api:1.4.0"
    );
    assert_eq!(
        api["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        8080
    );
    assert_eq!(
        api["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "128Mi"
    );
    assert_eq!(
        api["spec"]["template"]["metadata"]["annotations"]["example.com/rollout"], "2024-06-01",
        "merge patch overlay"
    );
    assert_eq!(
        api["metadata"]["labels"]["weft.io/owner"],
        Owner::resource(OwnerKind::ArmadaChart, "default", "api")
            .id()
            .0
    );
    assert_eq!(
        api["metadata"]["annotations"]["weft.io/owner-ref"],
        "ArmadaChart/default/api"
    );
    let config = find("ConfigMap", "demo-api-config");
    assert_eq!(config["data"]["REDIS_ADDR"], "demo-redis:6379");
    assert_eq!(config["data"]["STARTUP"], "echo starting ${HOSTNAME}");
    assert_eq!(
        config["data"]["FEATURES"], "cache,metrics",
        "JSON patch overlay"
    );
    // The migration Job is a pre-install/pre-upgrade hook, and the test Pods are Helm tests:
    // neither is a plain object of the set.
    for (kind, name) in [
        ("Job", "demo-api-migrate"),
        ("Pod", "demo-api-test"),
        ("Pod", "demo-web-test"),
    ] {
        assert!(
            !objects.iter().any(|o| o.kind() == kind && o.name() == name),
            "{kind} {name} is in the set"
        );
    }
    assert_eq!(find("Service", "demo-web")["spec"]["type"], "NodePort");
    let redis = find("StatefulSet", "demo-redis");
    assert_eq!(
        redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert!(find("ConfigMap", "demo-redis-config")["data"]["redis.conf"]
        .as_str()
        .unwrap()
        .contains("maxmemory 128mb"));
}

/// examples-repo with `armada/` replaced by the native documents of the fixture.
fn native_snapshot() -> Snapshot {
    let mut snap =
        local::read_dir(&root().join("examples-repo"), SnapshotLimits::default()).unwrap();
    snap.files.retain(|p, _| !p.starts_with("armada/"));
    let native = std::fs::read(root().join("tests/fixtures/armada-native/site.yaml")).unwrap();
    snap.files.insert("armada/site.yaml".into(), native);
    snap
}

#[test]
fn native_armada_documents_render_the_same_objects() {
    let (_, from_crs) = examples_repo();
    let (repo, diags) = load::load_with(Arc::new(native_snapshot()), &examples_key())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(repo.armada.charts.len(), 4);
    assert!(repo.armada.charts.iter().all(|c| c.native_schema.is_some()));
    // The v2 map form of wait.resources is converted, with a warning that says where.
    assert!(
        diags
            .warnings()
            .any(|w| w.origin.file == "armada/site.yaml" && w.message.contains("wait.resources")),
        "{:?}",
        diags.0
    );
    let cache_dir = tempfile::tempdir().unwrap();
    let from_native = render_with(
        &repo,
        &root().join("examples-repo"),
        &ChartCache::new(cache_dir.path()),
    );
    let values = |objs: &[DesiredObject]| -> Vec<(Value, u32, Owner)> {
        armada_part(objs)
            .into_iter()
            .map(|o| (o.object.value(), o.wave, o.owner.clone()))
            .collect()
    };
    let (a, b) = (values(&from_crs), values(&from_native));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        pretty_assertions::assert_eq!(x, y);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A git repository with the files of `dir`, committed on branch `main`; returns the commit.
fn git_repo_from(dir: &Path) -> String {
    let repo = git2::Repository::init(dir).unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("test", "test@example.com").unwrap();
    let oid = repo
        .commit(Some("refs/heads/main"), &sig, &sig, "charts", &tree, &[])
        .unwrap();
    repo.set_head("refs/heads/main").unwrap();
    oid.to_string()
}

#[test]
fn git_chart_source_from_a_real_repository_next_to_the_config_repository() {
    let (_, plain) = examples_repo();
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("examples-repo");
    copy_dir(&root().join("examples-repo"), &config);
    let charts = work.path().join("examples-charts");
    copy_dir(&root().join("examples-charts"), &charts);
    let commit = git_repo_from(&charts);

    let repo = load_snapshot(local::read_dir(&config, SnapshotLimits::default()).unwrap());
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path());
    let sources =
        resolve(&repo, &config.display().to_string(), &cache).unwrap_or_else(|e| panic!("{e}"));
    let redis = sources
        .by_chart
        .iter()
        .find(|(k, _)| k.name == "redis")
        .unwrap()
        .1;
    assert_eq!(redis.revision.as_deref(), Some(commit.as_str()));
    assert!(
        redis.root.ends_with(&format!("@{}/redis", &commit[..12])),
        "{}",
        redis.root
    );
    let from_git = render_sources(&repo, sources.clone());
    let objects = |objs: &[DesiredObject]| -> Vec<Value> {
        armada_part(objs)
            .into_iter()
            .map(|o| o.object.value())
            .collect()
    };
    assert_eq!(
        objects(&plain),
        objects(&from_git),
        "a git repository and the plain directory give the same objects"
    );

    // A second pass with the same cache reuses the fetched repository.
    let again = resolve(&repo, &config.display().to_string(), &cache).unwrap();
    assert_eq!(again, sources);

    // A reference that does not exist is an error naming the chart and where its source is.
    let mut broken = repo.clone();
    let redis_chart = broken
        .armada
        .charts
        .iter_mut()
        .find(|c| c.resource.metadata.name.as_deref() == Some("redis"))
        .unwrap();
    redis_chart.resource.spec.source.reference = Some("no-such-branch".into());
    let err = resolve(
        &broken,
        &config.display().to_string(),
        &ChartCache::new(cache_dir.path().join("other")),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("armada/charts.yaml:"), "{err}");
    assert!(
        err.contains("ArmadaChart `default/redis`") && err.contains("no-such-branch"),
        "{err}"
    );
}

/// A one-file HTTP server on loopback that counts its requests.
fn serve(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/charts/web-2.0.1.tgz",
        listener.local_addr().unwrap()
    );
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            counter.fetch_add(1, Ordering::SeqCst);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    (url, hits)
}

fn tgz_of(dir: &Path, prefix: &str) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    builder.append_dir_all(prefix, dir).unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

fn repo_with_tar_chart(url: &str, reference: Option<&str>) -> LoadedRepo {
    let mut snap = Snapshot::default();
    let reference = reference
        .map(|r| format!("\n    reference: \"{r}\""))
        .unwrap_or_default();
    let doc = format!(
        "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: web, namespace: default}}\nspec:\n  release: web\n  namespace: demo\n  source:\n    type: tar\n    location: {url}{reference}\n  values: {{apiService: api}}\n"
    );
    snap.files.insert("web.yaml".into(), doc.into_bytes());
    load_snapshot(snap)
}

/// The `web` chart as `helm package` makes it after `helm dependency build`: the library chart
/// inside, under `charts/demo-lib`.
fn packaged_web() -> Vec<u8> {
    let work = tempfile::tempdir().unwrap();
    let web = work.path().join("web");
    copy_dir(&root().join("examples-repo/charts/web"), &web);
    copy_dir(
        &root().join("examples-repo/charts/demo-lib"),
        &web.join("charts/demo-lib"),
    );
    tgz_of(&web, "web")
}

#[test]
fn tar_chart_source_over_http_with_digest_pinning_and_cache() {
    let bytes = packaged_web();
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    let (url, hits) = serve(bytes);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path());

    let repo = repo_with_tar_chart(&url, None);
    let sources = resolve(&repo, "/nowhere", &cache).unwrap_or_else(|e| panic!("{e}"));
    let files = sources.by_chart.values().next().unwrap();
    assert_eq!(
        files.revision.as_deref(),
        Some(format!("sha256:{digest}").as_str())
    );
    assert!(
        files.files.contains_key("templates/deployment.yaml"),
        "the top-level chart directory is entered"
    );
    let objects = render_sources(&repo, sources.clone());
    let deploy = objects.iter().find(|o| o.kind() == "Deployment").unwrap();
    assert_eq!(deploy.name(), "web");
    assert_eq!(
        deploy.object.value()["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
        "http://api"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Pinned to the digest it has: served from the cache, no download.
    let pinned = repo_with_tar_chart(&url, Some(&format!("sha256:{digest}")));
    resolve(&pinned, "/nowhere", &cache).unwrap();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "a pinned archive in the cache is not downloaded again"
    );

    // Pinned to another digest: refused, naming both digests.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let err = resolve(&repo_with_tar_chart(&url, Some(&wrong)), "/nowhere", &cache)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("has sha256:{digest}")) && err.contains(&wrong),
        "{err}"
    );
    assert!(err.starts_with("web.yaml:"), "{err}");
}

#[test]
fn tar_archives_over_the_size_limit_are_refused() {
    let bytes = packaged_web();
    let (url, _) = serve(bytes);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path()).with_archive_limits(chart::ArchiveLimits {
        max_archive_bytes: 100,
        ..Default::default()
    });
    let err = resolve(&repo_with_tar_chart(&url, None), "/nowhere", &cache)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is larger than 100 bytes"), "{err}");
}

fn weft(args: &[&str], dir: &Path) -> (i32, String, String) {
    Weft::new(args)
        .current_dir(dir)
        .age_key(root().join("examples-repo/TEST-ONLY-age.agekey"))
        .run()
}

/// A config repository whose local chart has a placeholder without value or default.
fn repo_with_unresolved_placeholder() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("repo");
    std::fs::create_dir_all(config.join("charts/cache/templates")).unwrap();
    std::fs::write(
        config.join("charts/cache/Chart.yaml"),
        "name: cache\nversion: 0.1.0\nannotations: {weft.io/template-format: substitution}\n",
    )
    .unwrap();
    std::fs::write(
        config.join("charts/cache/values.yaml"),
        "image: {repository: memcached}\n",
    )
    .unwrap();
    std::fs::write(
        config.join("charts/cache/templates/pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ${release.name}\nspec:\n  containers:\n    - name: cache\n      image: ${image.repository}:${image.tag}\n",
    )
    .unwrap();
    std::fs::write(
        config.join("cache.yaml"),
        "apiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {name: cache, namespace: default}\nspec:\n  release: cache\n  namespace: demo\n  source: {type: local, location: charts/cache}\n",
    )
    .unwrap();
    work
}

const UNRESOLVED_PLACEHOLDER: &str = "charts/cache/templates/pod.yaml:8:7: ArmadaChart `default/cache`: unresolved placeholder `${image.tag}`: no value at `image.tag` and no default";

#[test]
fn an_unresolved_placeholder_names_chart_file_line_and_path() {
    let work = repo_with_unresolved_placeholder();
    let (code, stdout, stderr) = weft(&["render", "repo"], work.path());
    assert_ne!(code, 0, "stdout: {stdout}");
    assert!(
        stdout.is_empty(),
        "nothing is printed when a chart fails: {stdout}"
    );
    assert!(stderr.contains(UNRESOLVED_PLACEHOLDER), "{stderr}");
}

#[test]
fn validate_fails_on_what_only_the_render_finds() {
    let work = repo_with_unresolved_placeholder();
    let (code, stdout, stderr) = weft(&["validate", "repo"], work.path());
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        !stdout.contains("no errors"),
        "validate does not say ok: {stdout}"
    );
    assert!(stderr.contains(UNRESOLVED_PLACEHOLDER), "{stderr}");
}

#[test]
fn validate_reports_dangling_references_with_positions() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("repo");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("site.yaml"),
        "schema: armada/Manifest/v1\nmetadata: {name: site}\ndata:\n  release_prefix: x\n  chart_groups:\n    - apps\n---\nschema: armada/ChartGroup/v1\nmetadata: {name: apps}\ndata:\n  chart_group: [web, wep]\n---\nschema: armada/Chart/v2\nmetadata: {name: web}\ndata:\n  release: web\n  namespace: demo\n  test: {enabled: true}\n  source: {type: local, location: charts/web}\n",
    )
    .unwrap();
    let (code, _, stderr) = weft(&["validate", "repo"], work.path());
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("site.yaml:11:22: ArmadaChartGroup `default/apps` lists chart `wep`, but there is no ArmadaChart `wep` in namespace `default` (did you mean `web`?)"),
        "{stderr}"
    );
    assert!(stderr.contains("site.yaml:18:3: warning: `data.test` is accepted but ignored: Weft does not run Helm tests"), "{stderr}");
}

#[test]
fn a_missing_sibling_chart_repository_is_named() {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("examples-repo");
    copy_dir(&root().join("examples-repo"), &config);
    let repo = load_snapshot(local::read_dir(&config, SnapshotLimits::default()).unwrap());
    let cache_dir = tempfile::tempdir().unwrap();
    let err = resolve(
        &repo,
        &config.display().to_string(),
        &ChartCache::new(cache_dir.path()),
    )
    .unwrap_err()
    .to_string();
    let missing = work.path().join("examples-charts");
    assert!(err.starts_with("armada/charts.yaml:"), "{err}");
    assert!(
        err.contains(&format!(
            "{}: no such directory or repository (location `../examples-charts`",
            missing.display()
        )),
        "{err}"
    );
}

/// `weft validate` (or `render` with `args`) of a repository made of `files`, with the pinned
/// helm and `env`.
fn weft_on(files: &[(&str, &str)], args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("repo");
    for (path, content) in files {
        let p = config.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .arg("repo")
        .current_dir(work.path())
        .env("WEFT_HELM", helm())
        .env_remove("WEFT_TARGET_MANIFEST")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A native chart may be annotated as a CR is: `weft.io/literal-braces: allow` lets helm's `{{`
/// through, as the error tells users to do.
#[test]
fn a_native_chart_s_annotations_are_kept() {
    let chart_yaml = "apiVersion: v2\nname: rules\nversion: 1.0.0\n";
    // In an annotation: in a ConfigMap's data, braces are the workload's and only warned about.
    let template = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rules\n  annotations:\n    summary: {{ \"{{ $labels.instance }} is down\" | quote }}\n";
    let doc = |annotations: &str| {
        format!(
            "schema: armada/Chart/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: rules\n{annotations}  storagePolicy: cleartext\ndata:\n  chart_name: rules\n  release: rules\n  namespace: monitoring\n  source: {{type: local, location: charts/rules, subpath: .}}\n"
        )
    };
    let refused = doc("");
    let (code, out) = weft_on(
        &[
            ("charts/rules/Chart.yaml", chart_yaml),
            ("charts/rules/templates/cm.yaml", template),
            ("site.yaml", &refused),
        ],
        &["validate"],
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("`weft.io/literal-braces: allow`"), "{out}");
    let allowed = doc("  annotations:\n    weft.io/literal-braces: allow\n");
    let (code, out) = weft_on(
        &[
            ("charts/rules/Chart.yaml", chart_yaml),
            ("charts/rules/templates/cm.yaml", template),
            ("site.yaml", &allowed),
        ],
        &["render"],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("{{ $labels.instance }} is down"), "{out}");
}

/// A site of treasuremap's shape: Pegleg/Deckhand documents beside Armada's are an unsupported
/// schema at their file and line, not Kubernetes objects without `apiVersion`.
#[test]
fn pegleg_documents_are_reported_as_an_unsupported_schema() {
    let versions = "---\nschema: pegleg/SoftwareVersions/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: software-versions\n  layeringDefinition:\n    abstract: false\n    layer: global\n  storagePolicy: cleartext\ndata:\n  charts: {}\n...\n";
    let passphrase = "---\nschema: deckhand/Passphrase/v1\nmetadata:\n  schema: metadata/Document/v1\n  name: osh_keystone_admin_password\n  layeringDefinition: {abstract: false, layer: site}\n  storagePolicy: cleartext\ndata: password123\n...\n";
    let (code, out) = weft_on(
        &[
            ("global/software/config/versions.yaml", versions),
            ("site/secrets/passphrases/keystone.yaml", passphrase),
        ],
        &["validate"],
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("global/software/config/versions.yaml:2:1: unsupported document schema `pegleg/SoftwareVersions/v1`: this is a Pegleg/Deckhand document"),
        "{out}"
    );
    assert!(
        out.contains("site/secrets/passphrases/keystone.yaml:2:1: unsupported document schema `deckhand/Passphrase/v1`"),
        "{out}"
    );
    assert!(!out.contains("missing required field"), "{out}");
    assert!(!out.contains("password123"), "{out}");
}

/// Two manifests listing the same groups, as treasuremap's `full-site` and `cluster-bootstrap`:
/// refused without a target (as Armada refuses them); with `--target-manifest` (or
/// `WEFT_TARGET_MANIFEST`) only the target's groups are rendered.
#[test]
fn the_target_manifest_chooses_what_renders() {
    let chart = |name: &str| {
        (
            format!("charts/{name}/Chart.yaml"),
            format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\n"),
            format!("charts/{name}/templates/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  chart: {{ .Chart.Name }}\n".to_string(),
        )
    };
    let site = "schema: armada/Manifest/v1\nmetadata: {schema: metadata/Document/v1, name: full-site}\ndata: {release_prefix: airship, chart_groups: [db, identity]}\n---\nschema: armada/Manifest/v1\nmetadata: {schema: metadata/Document/v1, name: cluster-bootstrap}\ndata: {release_prefix: airship, chart_groups: [db, identity, ingress]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {schema: metadata/Document/v1, name: db}\ndata: {sequenced: true, chart_group: [mariadb]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {schema: metadata/Document/v1, name: identity}\ndata: {sequenced: true, chart_group: [keystone]}\n---\nschema: armada/ChartGroup/v1\nmetadata: {schema: metadata/Document/v1, name: ingress}\ndata: {chart_group: [ingress]}\n---\nschema: armada/Chart/v1\nmetadata: {schema: metadata/Document/v1, name: mariadb}\ndata: {release: mariadb, namespace: openstack, source: {type: local, location: charts/mariadb}}\n---\nschema: armada/Chart/v1\nmetadata: {schema: metadata/Document/v1, name: keystone}\ndata: {release: keystone, namespace: openstack, source: {type: local, location: charts/keystone}}\n---\nschema: armada/Chart/v1\nmetadata: {schema: metadata/Document/v1, name: ingress}\ndata: {release: ingress, namespace: kube-system, source: {type: local, location: charts/ingress}}\n";
    let mut owned: Vec<(String, String)> = vec![("site.yaml".into(), site.into())];
    for name in ["mariadb", "keystone", "ingress"] {
        let (c, cv, t, tv) = chart(name);
        owned.push((c, cv));
        owned.push((t, tv));
    }
    let files: Vec<(&str, &str)> = owned
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();

    let (code, out) = weft_on(&files, &["render"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("2 ArmadaManifests: `default/cluster-bootstrap` (site.yaml:5:1), `default/full-site` (site.yaml:1:1)")
            && out.contains("choose it with --target-manifest NAME (or WEFT_TARGET_MANIFEST)"),
        "{out}"
    );

    let (code, out) = weft_on(&files, &["render", "--target-manifest", "full-site"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("name: airship-mariadb"), "{out}");
    assert!(out.contains("name: airship-keystone"), "{out}");
    assert!(!out.contains("airship-ingress"), "{out}");
    assert!(out.contains("ArmadaChart `default/ingress` is not deployed: no chart group of the target manifest `full-site` lists it"), "{out}");
    // Groups in order: the database before identity.
    assert!(
        out.find("name: airship-mariadb").unwrap() < out.find("name: airship-keystone").unwrap(),
        "{out}"
    );

    let (code, out) = weft_on(
        &files,
        &["render"],
        &[("WEFT_TARGET_MANIFEST", "cluster-bootstrap")],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("name: airship-ingress"), "{out}");
}
