//! A treasuremap-shaped site of openstack-helm-shaped charts deployed into the real control plane
//! (tests/control-plane; kwok nodes run the pods and complete the Jobs' pods), rendered by the
//! pinned helm (`tests/helm/ensure`, `WEFT_HELM`).
//!
//! The site is written as treasuremap writes it: native Armada v1 documents with Deckhand
//! metadata (`metadata.schema`, `layeringDefinition`, `storagePolicy`), two manifests listing
//! the same groups (`full-site` and `cluster-bootstrap`) chosen with `--target-manifest`, two
//! sequenced groups (the database, then identity), and charts from sources on loopback: a git
//! repository holding `helm-toolkit/` and `keystone/` (`subpath`) behind a real `git daemon`, and
//! `mariadb.tgz` (`subpath: mariadb`) behind a real HTTP server. helm-toolkit is each chart's
//! Armada `dependencies` chart. The charts are fixtures that reproduce openstack-helm's shapes
//! (tests/fixtures/armada-site/README.md): ConfigMaps and Secrets mounted with YAML 1.1 octal
//! `defaultMode: 0555`/`0444`, labels from the library's helpers, a Deployment, a StatefulSet, a
//! Job.
//!
//! What a user would check: every object is in the cluster with what `helm install` gives
//! (0555 → 365, 0444 → 292), the groups deployed in order (the database ready before identity's
//! first object), the chart no group of the target lists is not deployed (nor fetched), and a
//! second pass makes no API write.

use crate::support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, Volume};

use support::cluster::{counting_client, install_crds, TestNamespace};
use support::git_servers::{GitDaemon, RepoHost, WorkTree};
use support::helm::helm;
use support::passes::pass_logged as pass;
use weft::helm::{HelmLocation, HelmRenderer};
use weft::pass::PassSettings;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/armada-site")
}

/// The files of fixture chart `name`, relative to the fixture directory (`name/…`).
fn chart_files(name: &str) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let rel = format!("{rel}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &rel, out);
            } else {
                out.insert(rel, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&fixtures().join(name), name, &mut out);
    out
}

/// A gzipped tar of `files`, as `helm package` or a chart publisher makes one.
fn tgz(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (path, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, bytes.as_slice())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// A real HTTP server on loopback that serves `body` at every path; counts the requests.
fn serve(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/charts/mariadb.tgz",
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
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    (url, hits)
}

/// The site's Armada documents, as treasuremap writes them (native v1, Deckhand metadata), with
/// the chart sources its `versions.yaml` would substitute written in place. Each document names
/// the test's namespace (`metadata.namespace`, which treasuremap leaves out: its CRs would go to
/// `default`, shared by every test of the cluster).
fn site_documents(ns: &str, git: &str, tar: &str) -> String {
    format!(
        r#"---
schema: armada/Manifest/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: full-site
  labels: {{name: full-site-global}}
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  release_prefix: airship
  chart_groups:
    - openstack-mariadb
    - openstack-keystone
---
schema: armada/Manifest/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: cluster-bootstrap
  labels: {{name: cluster-bootstrap-global}}
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  release_prefix: airship
  chart_groups:
    - openstack-mariadb
    - openstack-keystone
    - ingress-kube-system
---
schema: armada/ChartGroup/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: openstack-mariadb
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  description: Deploy the database
  sequenced: true
  chart_group: [mariadb]
---
schema: armada/ChartGroup/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: openstack-keystone
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  description: Deploy Keystone
  sequenced: true
  chart_group: [keystone]
---
schema: armada/ChartGroup/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: ingress-kube-system
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  description: Only the bootstrap manifest lists this group
  chart_group: [ingress-kube-system]
---
schema: armada/Chart/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: helm-toolkit
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  chart_name: helm-toolkit
  release: helm-toolkit
  namespace: helm-toolkit
  values: {{}}
  source:
    type: git
    location: {git}
    subpath: helm-toolkit
    reference: main
  dependencies: []
---
schema: armada/Chart/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: mariadb
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  chart_name: mariadb
  release: mariadb
  namespace: {ns}
  wait:
    timeout: 120
    labels:
      release_group: airship-mariadb
  install:
    no_hooks: false
  upgrade:
    no_hooks: false
  values:
    pod:
      replicas:
        server: 1
  source:
    type: tar
    location: {tar}
    subpath: mariadb
  dependencies:
    - helm-toolkit
---
schema: armada/Chart/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: keystone
  labels: {{name: keystone-global, component: keystone}}
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  chart_name: keystone
  release: keystone
  namespace: {ns}
  wait:
    timeout: 120
    labels:
      release_group: airship-keystone
  install:
    no_hooks: false
  upgrade:
    no_hooks: false
    pre:
      delete:
        - type: job
          labels:
            release_group: airship-keystone
  values:
    pod:
      replicas:
        api: 2
    conf:
      keystone:
        DEFAULT:
          debug: true
  source:
    type: git
    location: {git}
    subpath: keystone
    reference: main
  dependencies:
    - helm-toolkit
---
schema: armada/Chart/v1
metadata:
  schema: metadata/Document/v1
  namespace: {ns}
  name: ingress-kube-system
  layeringDefinition: {{abstract: false, layer: global}}
  storagePolicy: cleartext
data:
  chart_name: ingress
  release: ingress-kube-system
  namespace: {ns}
  values: {{}}
  source:
    type: git
    location: git://127.0.0.1:1/nowhere.git
    subpath: ingress
  dependencies:
    - helm-toolkit
"#
    )
}

fn position(events: &[String], prefix: &str) -> usize {
    events
        .iter()
        .position(|e| e.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}…` in {events:#?}"))
}

fn volume<'a>(volumes: &'a [Volume], name: &str) -> &'a Volume {
    volumes
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name} in {volumes:#?}"))
}

#[tokio::test]
async fn a_treasuremap_shaped_site_deploys_in_order_and_a_second_pass_writes_nothing() {
    let ns = TestNamespace::new("armada-site").await;
    let name = ns.name().to_string();
    let (client, counts) = counting_client().await;
    install_crds(&client).await;

    // The chart repositories: helm-toolkit and keystone in one git repository (as
    // openstack-helm holds both), mariadb as an archive over HTTP.
    let host = RepoHost::new();
    let bare = host.create("openstack-helm.git");
    let git_daemon = GitDaemon::start(&host);
    let work = WorkTree::new(&bare.display().to_string());
    for chart in ["helm-toolkit", "keystone"] {
        for (path, bytes) in chart_files(chart) {
            work.write(&path, bytes);
        }
    }
    work.write("README.rst", "charts\n");
    work.write("tools/deployment/common/setup.sh", "#!/bin/sh\n");
    work.commit("charts");
    work.push();
    let git_url = git_daemon.url("openstack-helm.git");
    let (tar_url, tar_hits) = serve(tgz(&chart_files("mariadb")));

    let renderer = Arc::new(HelmRenderer::new(HelmLocation::Binary(
        helm().to_path_buf(),
    )));
    let cache = tempfile::tempdir().unwrap();
    let opts = PassSettings {
        helm: Arc::clone(&renderer),
        chart_cache_dir: Some(cache.path().to_path_buf()),
        target_manifest: Some("full-site".into()),
        timeout: Duration::from_secs(120),
        ..support::cluster::pass_settings(&name)
    };
    let mut files = BTreeMap::new();
    files.insert(
        "site/software/armada.yaml".to_string(),
        site_documents(&name, &git_url, &tar_url),
    );

    // 1. The first pass deploys the target manifest's groups, the database first.
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(
        r.succeeded(),
        "{}\n{events:#?}",
        r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
    let database_ready = position(&events, &format!("ready Pod/{name}/mariadb-server-0"));
    let identity_first = events
        .iter()
        .position(|e| {
            e.starts_with("created ")
                && (e.contains(&format!("/{name}/keystone-"))
                    || e.ends_with(&format!("/{name}/airship-keystone")))
        })
        .unwrap_or_else(|| panic!("keystone was not deployed: {events:#?}"));
    assert!(database_ready < identity_first, "{events:#?}");
    position(&events, &format!("ready Job/{name}/keystone-db-init"));
    assert_eq!(tar_hits.load(Ordering::SeqCst), 1);
    // The chart that only the other manifest's group lists: a warning names it.
    assert!(
        r.diagnostics.0.iter().any(|d| d
            .to_string()
            .contains(&format!("ArmadaChart `{name}/ingress-kube-system` is not deployed: no chart group of the target manifest `full-site` lists it"))),
        "{:#?}",
        r.diagnostics.0
    );

    // 2. In the cluster: the modes `helm install` gives (0555 = 365, 0444 = 292), the labels of
    //    the library's helpers, the values of the site.
    let deployments: kube::Api<Deployment> = ns.api();
    let api = deployments.get("keystone-api").await.unwrap();
    let labels = api.metadata.labels.clone().unwrap_or_default();
    for (k, v) in [
        ("release_group", "airship-keystone"),
        ("application", "keystone"),
        ("component", "api"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "{labels:?}");
    }
    let spec = api.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    let volumes = pod.volumes.unwrap_or_default();
    let bin = volume(&volumes, "keystone-bin");
    assert_eq!(bin.config_map.as_ref().unwrap().default_mode, Some(365));
    let etc = volume(&volumes, "keystone-etc");
    assert_eq!(etc.secret.as_ref().unwrap().default_mode, Some(292));
    let status = api.status.unwrap_or_default();
    assert_eq!(status.available_replicas, Some(2), "{status:?}");

    let jobs: kube::Api<Job> = ns.api();
    let job = jobs.get("keystone-db-init").await.unwrap();
    assert_eq!(job.status.unwrap_or_default().succeeded, Some(1));
    let job_volumes = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert_eq!(
        volume(&job_volumes, "keystone-bin")
            .config_map
            .as_ref()
            .unwrap()
            .default_mode,
        Some(365)
    );

    let secrets: kube::Api<Secret> = ns.api();
    let conf = secrets.get("keystone-etc").await.unwrap();
    let conf = String::from_utf8(conf.data.unwrap()["keystone.conf"].0.clone()).unwrap();
    assert!(conf.contains("[DEFAULT]\ndebug = true\n"), "{conf}");
    let config_maps: kube::Api<ConfigMap> = ns.api();
    let bin = config_maps.get("keystone-bin").await.unwrap();
    assert!(
        bin.data.unwrap()["db-init.sh"].contains("database of release airship-keystone"),
        "the library rendered the chart's .tpl"
    );

    let statefulsets: kube::Api<StatefulSet> = ns.api();
    let server = statefulsets.get("mariadb-server").await.unwrap();
    let server_volumes = server.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert_eq!(
        volume(&server_volumes, "mariadb-bin")
            .config_map
            .as_ref()
            .unwrap()
            .default_mode,
        Some(365)
    );
    assert_eq!(
        volume(&server_volumes, "mariadb-etc")
            .config_map
            .as_ref()
            .unwrap()
            .default_mode,
        Some(292)
    );
    let services: kube::Api<Service> = ns.api();
    assert!(services.get_opt("keystone-api").await.unwrap().is_some());
    assert!(services
        .get_opt("mariadb-discovery")
        .await
        .unwrap()
        .is_some());
    // Nothing of the chart that the target's groups do not list, not even its CR.
    let charts: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        &name,
        &kube::api::ApiResource::erase::<weft::api::armada::ArmadaChart>(&()),
    );
    let stray = charts.get_opt("ingress-kube-system").await.unwrap();
    assert!(
        stray.is_none_or(|c| !c
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("weft.io/owner")),
        "the chart no group of the target lists was applied"
    );

    // 3. A second pass over the unchanged site: no API write at all.
    let before = counts.snapshot();
    let (r, events) = pass(&client, &files, &opts).await;
    assert!(
        r.succeeded(),
        "{}\n{events:#?}",
        r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
    let used = counts.snapshot() - before;
    assert_eq!(used.writes, 0, "a no-op pass wrote: {events:#?}");
    assert!(!r.changes.has_changes(), "{:#?}", r.changes);
    ns.delete().await;
}
