//! Issue 45: ArmadaCharts from Helm chart repositories and OCI registries, on the real control
//! plane: charts made with the real `helm package`, indexed by the real `helm repo index`, pushed
//! with the real `helm push` to a real OCI registry behind a private CA and basic auth
//! (tests/support/chart_servers.rs). A version range upgrades on the next pass; a version that
//! leaves the index is kept with a warning; bad sources fail their chart alone, pruning nothing.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;

use support::chart_servers::{
    docker_config, package, push, ChartRepo, Fault, OciRegistry, PrivateCa,
};
use support::cluster::TestNamespace;
use weft::pass::{self, PassInput, PassResult, PassSettings};
use weft::source::chart::{registries_of, CaCertificates, FetchSettings};
use weft::source::fetch_policy::{ChartSourcePolicy, UrlAllowList};
use weft::source::git::auth::{Credentials, SecretValue};
use weft::source::Snapshot;

/// An ArmadaChart whose `source` is the flow-style YAML `source`.
fn chart(ns: &str, name: &str, source: &str) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChart\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  chart_name: {name}\n  release: {name}\n  namespace: {ns}\n  source: {source}\n  wait: {{timeout: 30, resources: []}}\n"
    )
}

fn group(ns: &str, charts: &[&str]) -> String {
    format!(
        "---\napiVersion: armada.airshipit.org/v1alpha1\nkind: ArmadaChartGroup\nmetadata: {{name: apps, namespace: {ns}}}\nspec:\n  sequenced: true\n  chart_group: [{}]\n",
        charts.join(", ")
    )
}

/// A local chart beside the fetched ones, whose ConfigMap says `greeting`.
fn local_files(greeting: &str) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    files.insert(
        "charts/local/Chart.yaml".into(),
        b"apiVersion: v2\nname: local\nversion: 0.1.0\n".to_vec(),
    );
    files.insert(
        "charts/local/templates/cm.yaml".into(),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ .Release.Name }}}}\ndata:\n  greeting: {greeting}\n").into_bytes(),
    );
    files
}

fn settings(ns: &str, cache: &Path, fetch: FetchSettings) -> PassSettings {
    PassSettings {
        chart_cache_dir: Some(cache.to_path_buf()),
        chart_fetch: fetch,
        ..support::cluster::pass_settings(ns)
    }
}

async fn run(
    client: &Client,
    files: &BTreeMap<String, Vec<u8>>,
    settings: &PassSettings,
) -> PassResult {
    let snapshot = Snapshot {
        revision: None,
        files: files.clone(),
    };
    pass::run_pass(client, snapshot, settings, &PassInput::default(), &|_| {}).await
}

/// Write the ArmadaCharts' status of a pass, as `weft sync` and the daemon do.
async fn record(client: &Client, r: &PassResult) {
    let set = r.set.clone().expect("a rendered set");
    let events = weft::daemon::events::EventPublisher::new(
        client.clone(),
        weft::notify::Notifier::disabled(),
    );
    weft::daemon::armada::status::record_pass(
        client,
        &events,
        &set,
        &r.changes,
        None,
        &Default::default(),
    )
    .await;
}

fn error_text(r: &PassResult) -> String {
    r.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
}

fn warnings(r: &PassResult) -> String {
    r.diagnostics
        .warnings()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn data(ns: &TestNamespace, name: &str, key: &str) -> Option<String> {
    let api: kube::Api<ConfigMap> = ns.api();
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|c| c.data)
        .and_then(|d| d.get(key).cloned())
}

/// Items 1 and 3: a range over a chart repository's index deploys the newest version in range,
/// moves to a newer one on the next pass, and keeps the last one with a warning when it leaves
/// the index; two charts naming the same chart and version cost one download.
#[tokio::test]
async fn a_helm_repository_range_upgrades_and_keeps_a_version_that_left_the_index() {
    let ns = TestNamespace::new("helm-repo").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let repo = ChartRepo::start();
    repo.publish("app", "1.0.0");
    repo.publish("app", "2.0.0");
    let cache = tempfile::tempdir().unwrap();
    let source = format!(
        "{{type: helm, location: '{}', chart: app, version: '^1.0'}}",
        repo.url()
    );
    let mut files = BTreeMap::new();
    files.insert(
        "armada.yaml".into(),
        format!(
            "{}{}",
            chart(&name, "app", &source),
            chart(&name, "twin", &source)
        )
        .into_bytes(),
    );
    let opts = settings(&name, cache.path(), FetchSettings::default());

    let r = run(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.0.0")
    );
    assert_eq!(
        data(&ns, "twin", "chartVersion").await.as_deref(),
        Some("1.0.0")
    );
    // One index and one archive for the two charts.
    assert_eq!(repo.count("/index.yaml"), 1);
    assert_eq!(repo.count("/app-1.0.0.tgz"), 1);

    // `weft diff` shows the version the next pass moves to (once the status records 1.0.0).
    record(&client, &r).await;
    repo.publish("app", "1.1.0");
    let snapshot = Snapshot {
        revision: None,
        files: files.clone(),
    };
    let diffs = weft::pass::diff_pass(&client, snapshot, &opts, &PassInput::default())
        .await
        .unwrap();
    let moved = diffs
        .iter()
        .find(|d| d.object.kind == "ArmadaChart" && d.object.name == "app")
        .unwrap_or_else(|| panic!("no source move in {diffs:#?}"));
    assert!(
        moved.text.contains("\n-1.0.0@sha256:") && moved.text.contains("\n+1.1.0@sha256:"),
        "{}",
        moved.text
    );
    // A newer version in range is deployed by the next pass; 2.0.0 stays out of range.
    let r = run(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.1.0")
    );
    // The next pass reads the index again and downloads nothing: archives are cached by digest.
    let r = run(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(repo.count("/app-1.1.0.tgz"), 1);
    // The ArmadaChart's status records the version and digest it was deployed from (what
    // `weft get charts` shows in its REVISION column).
    record(&client, &r).await;
    let charts: kube::Api<weft::api::armada::ArmadaChart> = ns.api();
    let index = std::fs::read_to_string(repo.dir.path().join("index.yaml")).unwrap();
    let entry = &index[index
        .find("version: 1.1.0")
        .map(|i| index[..i].rfind("digest: ").unwrap())
        .unwrap()..];
    let digest = entry["digest: ".len()..].split_whitespace().next().unwrap();
    let status = charts.get("app").await.unwrap().status.unwrap_or_default();
    assert_eq!(
        status.revision.as_deref(),
        Some(format!("1.1.0@sha256:{digest}").as_str())
    );
    // Item 3: `weft get charts` shows the version and digest the chart was deployed from.
    let (code, out, err) = support::weft_cli::Weft::new(["get", "charts", "-n", &name])
        .cluster()
        .run();
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("ArmadaChart") && l.split_whitespace().nth(2) == Some("app"))
        .unwrap_or_else(|| panic!("no row for app in:\n{out}"));
    assert!(
        row.split_whitespace()
            .any(|cell| cell == format!("1.1.0@sha256:{digest}")),
        "{out}"
    );

    // 1.1.0 leaves the index: the chart stays on it, with a warning naming it.
    repo.unpublish("app", "1.1.0");
    let r = run(&client, &files, &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.1.0")
    );
    let w = warnings(&r);
    assert!(
        w.contains(&format!("ArmadaChart `{name}/app`: version 1.1.0 of chart `app` is no longer in the index of {}; keeping 1.1.0", repo.url())),
        "{w}"
    );
    ns.delete().await;
}

/// Items 1, 2 and 5: an OCI registry behind a private CA with basic auth; a range over its tags,
/// a pinned digest, credentials from a `.dockerconfigjson`; without them a 401 on that chart
/// alone, with no password anywhere in the error.
#[tokio::test]
async fn an_oci_registry_behind_a_private_ca_with_basic_auth() {
    let ns = TestNamespace::new("oci-repo").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let ca = PrivateCa::new();
    let password = "s3cret-registry-pw";
    let registry = OciRegistry::start(&ca, "weft", password);
    let packages = tempfile::tempdir().unwrap();
    let first = push(
        &registry,
        &ca,
        "weft",
        password,
        &support::chart_servers::package("app", "1.0.0", packages.path()),
    );
    push(
        &registry,
        &ca,
        "weft",
        password,
        &support::chart_servers::package("app", "1.2.0", packages.path()),
    );
    let cache = tempfile::tempdir().unwrap();
    let location = format!("oci://{}/charts/app", registry.host);
    let mut files = local_files("hi");
    files.insert(
        "armada.yaml".into(),
        format!(
            "{}{}{}",
            chart(
                &name,
                "ranged",
                &format!("{{type: oci, location: '{location}', version: '>=1.0 <2'}}")
            ),
            chart(
                &name,
                "pinned",
                &format!("{{type: oci, location: '{location}', version: '{first}'}}")
            ),
            chart(&name, "local", "{type: local, location: charts/local}"),
        )
        .into_bytes(),
    );
    let credentials = Credentials {
        docker_config: Some(SecretValue::new(docker_config(
            &registry.host,
            "weft",
            password,
        ))),
        ..Credentials::default()
    };
    let fetch = FetchSettings {
        ca: Some(CaCertificates::load(&ca.ca_file()).unwrap()),
        registries: registries_of(&credentials).unwrap(),
        ..FetchSettings::default()
    };
    let r = run(
        &client,
        &files,
        &settings(&name, cache.path(), fetch.clone()),
    )
    .await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(
        data(&ns, "ranged", "chartVersion").await.as_deref(),
        Some("1.2.0")
    );
    assert_eq!(
        data(&ns, "pinned", "chartVersion").await.as_deref(),
        Some("1.0.0")
    );

    // Without credentials (and a fresh cache): the registry's 401, one line on each chart.
    let cold = tempfile::tempdir().unwrap();
    let without = FetchSettings {
        registries: Default::default(),
        ..fetch
    };
    let r = run(&client, &files, &settings(&name, cold.path(), without)).await;
    let e = error_text(&r);
    assert!(e.contains(&format!("ArmadaChart `{name}/ranged`")), "{e}");
    assert!(e.contains("HTTP 401"), "{e}");
    assert!(e.contains("no credentials for this host"), "{e}");
    assert!(!e.contains(password), "{e}");
    // Nothing pruned: what the first pass deployed is still there.
    assert_eq!(
        data(&ns, "ranged", "chartVersion").await.as_deref(),
        Some("1.2.0")
    );
    ns.delete().await;
}

/// Item 4: each bad source fails its own chart with one line naming it; the chart before it in
/// the group is still applied and nothing of the failing chart is pruned.
#[tokio::test]
async fn bad_chart_repositories_fail_their_chart_alone() {
    let ns = TestNamespace::new("helm-bad").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let repo = ChartRepo::start();
    repo.publish("app", "1.0.0");
    let cache = tempfile::tempdir().unwrap();
    let docs = |greeting: &str, source: &str| {
        let mut files = local_files(greeting);
        files.insert(
            "armada.yaml".into(),
            format!(
                "{}{}{}",
                chart(&name, "local", "{type: local, location: charts/local}"),
                chart(&name, "app", source),
                group(&name, &["local", "app"])
            )
            .into_bytes(),
        );
        files
    };
    let good = format!(
        "{{type: helm, location: '{}', chart: app, version: 1.0.0}}",
        repo.url()
    );
    // `--fetch-timeout` bounds a repository that never answers.
    let fetch = FetchSettings {
        fetch_timeout: Some(std::time::Duration::from_secs(3)),
        ..FetchSettings::default()
    };
    let opts = settings(&name, cache.path(), fetch);
    let r = run(&client, &docs("one", &good), &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.0.0")
    );

    let url = repo.url();
    // The index as `helm repo index` wrote it, with another digest for the archive.
    let index = std::fs::read_to_string(repo.dir.path().join("index.yaml")).unwrap();
    let digest = index
        .lines()
        .find_map(|l| l.trim().strip_prefix("digest: "))
        .unwrap()
        .to_string();
    let forged = index.replace(&digest, &"0".repeat(64));
    let cases: Vec<(&str, String, Fault, String)> = vec![
        ("a missing chart", format!("{{type: helm, location: '{url}', chart: nope}}"), Fault::None, format!("chart `nope` is not in the index of {url}")),
        ("an unmatched range", format!("{{type: helm, location: '{url}', chart: app, version: '^3'}}"), Fault::None, format!("no version of `app` in {url} satisfies `version: ^3` (the newest is 1.0.0)")),
        ("an index that does not parse", good.clone(), Fault::Index("entries: [nope".into()), format!("index {url}/index.yaml does not parse")),
        ("a 500", good.clone(), Fault::Status(500), format!("downloading {url}/index.yaml: HTTP 500")),
        ("a 404", good.clone(), Fault::Status(404), format!("downloading {url}/index.yaml: HTTP 404")),
        ("a digest mismatch", good.clone(), Fault::Index(forged), format!("{url}/app-1.0.0.tgz has sha256:{digest}, but the index says sha256:{}; refusing it", "0".repeat(64))),
        ("no answer", good.clone(), Fault::Hang, format!("downloading {url}/index.yaml: ")),
        ("no chart name", format!("{{type: helm, location: '{url}'}}"), Fault::None, "a helm source needs `chart`".into()),
    ];
    for (i, (what, source, fault, expected)) in cases.into_iter().enumerate() {
        *repo.fault.lock().unwrap() = fault;
        let greeting = format!("pass-{i}");
        let r = run(&client, &docs(&greeting, &source), &opts).await;
        *repo.fault.lock().unwrap() = Fault::None;
        let e = error_text(&r);
        assert!(
            e.contains(&format!("ArmadaChart `{name}/app`: {expected}")),
            "{what}: {e}"
        );
        let line = e.lines().find(|l| l.contains(&expected)).unwrap();
        assert!(
            line.contains("armada.yaml:"),
            "{what}: the line names where the source is written: {line}"
        );
        // The chart before it was applied; the failing chart's objects were not pruned.
        assert_eq!(
            data(&ns, "local", "greeting").await.as_deref(),
            Some(greeting.as_str()),
            "{what}"
        );
        assert_eq!(
            data(&ns, "app", "chartVersion").await.as_deref(),
            Some("1.0.0"),
            "{what}"
        );
    }

    ns.delete().await;
}

/// The credentials of a `.dockerconfigjson` with basic auth for `host`.
fn registry_login(host: &str, user: &str, password: &str) -> FetchSettings {
    let credentials = Credentials {
        docker_config: Some(SecretValue::new(docker_config(host, user, password))),
        ..Credentials::default()
    };
    FetchSettings {
        registries: registries_of(&credentials).unwrap(),
        ..FetchSettings::default()
    }
}

/// Item 2: a registry that authenticates as Docker Hub and GHCR do (a `401` with `Bearer
/// realm=…,service=…,scope=…`, a token realm that trades basic auth for a token, and a registry
/// that takes only tokens for the repository the scope named). The realm is a URL the registry
/// chose, so it must satisfy `--allowed-chart-sources` too.
#[tokio::test]
async fn an_oci_registry_with_a_bearer_token_realm() {
    let ns = TestNamespace::new("oci-token").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let ca = PrivateCa::new();
    let password = "t0ken-realm-pw";
    let registry = OciRegistry::start_with_token_realm(&ca, "weft", password);
    let packages = tempfile::tempdir().unwrap();
    for version in ["1.0.0", "1.1.0"] {
        push(
            &registry,
            &ca,
            "weft",
            password,
            &package("app", version, packages.path()),
        );
    }
    let location = format!("oci://{}/charts/app", registry.host);
    let mut files = BTreeMap::new();
    files.insert(
        "armada.yaml".into(),
        chart(
            &name,
            "app",
            &format!("{{type: oci, location: '{location}', version: '^1'}}"),
        )
        .into_bytes(),
    );
    let ca_certs = CaCertificates::load(&ca.ca_file()).unwrap();
    let fetch = FetchSettings {
        ca: Some(ca_certs.clone()),
        ..registry_login(&registry.host, "weft", password)
    };
    let cache = tempfile::tempdir().unwrap();
    let r = run(&client, &files, &settings(&name, cache.path(), fetch)).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.1.0")
    );

    // A password the realm refuses: one line on the chart, no password in it.
    let wrong = FetchSettings {
        ca: Some(ca_certs.clone()),
        ..registry_login(&registry.host, "weft", "not-the-pw")
    };
    let cold = tempfile::tempdir().unwrap();
    let r = run(&client, &files, &settings(&name, cold.path(), wrong)).await;
    let e = error_text(&r);
    assert!(
        e.contains(&format!("ArmadaChart `{name}/app`: downloading https://{}/v2/charts/app/tags/list?n=10000: HTTP 401; the token realm answered HTTP 401", registry.host)),
        "{e}"
    );
    assert!(!e.contains(password) && !e.contains("not-the-pw"), "{e}");

    // The location is allowed, the realm (`https://HOST/token`) is not: no credential goes there.
    let fenced = PassSettings {
        chart_sources: ChartSourcePolicy::Remote(
            UrlAllowList::parse(&format!("https://{}/charts/", registry.host)).unwrap(),
        ),
        ..settings(
            &name,
            cold.path(),
            FetchSettings {
                ca: Some(ca_certs),
                ..registry_login(&registry.host, "weft", password)
            },
        )
    };
    let r = run(&client, &files, &fenced).await;
    let e = error_text(&r);
    assert!(
        e.contains(&format!("HTTP 401; the token realm: `https://{}/token` is not allowed by --allowed-chart-sources (https://{}/charts/)", registry.host, registry.host)),
        "{e}"
    );
    // Nothing pruned.
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.1.0")
    );
    ns.delete().await;
}

/// Item 2: `--allowed-chart-sources` refuses a chart repository and an OCI registry on a host
/// (and port) it does not list, before any request, each with one line naming the location as
/// written; redirects are followed on the same host and port only.
#[tokio::test]
async fn chart_repositories_keep_the_allowed_hosts_and_same_host_redirects() {
    let ns = TestNamespace::new("helm-fence").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let repo = ChartRepo::start();
    repo.publish("app", "1.0.0");
    let url = repo.url();
    let oci = format!("oci://127.0.0.1:{}/charts/app", repo.port);
    let mut files = BTreeMap::new();
    files.insert(
        "armada.yaml".into(),
        format!(
            "{}{}",
            chart(
                &name,
                "app",
                &format!("{{type: helm, location: '{url}', chart: app, version: 1.0.0}}")
            ),
            chart(
                &name,
                "pushed",
                &format!("{{type: oci, location: '{oci}', version: 1.0.0}}")
            ),
        )
        .into_bytes(),
    );
    let cache = tempfile::tempdir().unwrap();
    // The same host on another port is another source.
    let other_port = format!("http://127.0.0.1:{}/", repo.port + 1);
    let fenced = PassSettings {
        chart_sources: ChartSourcePolicy::Remote(UrlAllowList::parse(&other_port).unwrap()),
        ..settings(&name, cache.path(), FetchSettings::default())
    };
    let r = run(&client, &files, &fenced).await;
    let e = error_text(&r);
    assert!(
        e.contains(&format!("ArmadaChart `{name}/app`: `{url}` is not allowed by --allowed-chart-sources ({other_port})")),
        "{e}"
    );
    assert!(
        e.contains(&format!("ArmadaChart `{name}/pushed`: `{oci}` is not allowed by --allowed-chart-sources ({other_port}): an oci:// location is checked as `https://127.0.0.1:{}/charts/app`", repo.port)),
        "{e}"
    );
    assert!(
        repo.requests.lock().unwrap().is_empty(),
        "refused before any request"
    );

    // The archive moved on the same host and port: followed.
    let opts = settings(&name, cache.path(), FetchSettings::default());
    let helm_only = {
        let mut f = BTreeMap::new();
        f.insert(
            "armada.yaml".into(),
            chart(
                &name,
                "app",
                &format!("{{type: helm, location: '{url}', chart: app, version: 1.0.0}}"),
            )
            .into_bytes(),
        );
        f
    };
    std::fs::create_dir(repo.dir.path().join("moved")).unwrap();
    std::fs::copy(
        repo.dir.path().join("app-1.0.0.tgz"),
        repo.dir.path().join("moved/app-1.0.0.tgz"),
    )
    .unwrap();
    *repo.fault.lock().unwrap() = Fault::Redirect {
        from: "/app-1.0.0.tgz".into(),
        to: format!("{url}/moved/app-1.0.0.tgz"),
    };
    let r = run(&client, &helm_only, &opts).await;
    assert!(r.succeeded(), "{}", error_text(&r));
    assert_eq!(repo.count("/moved/app-1.0.0.tgz"), 1);
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.0.0")
    );

    // The index moved to another port of the same host: refused, one line, nothing asked there.
    let elsewhere = ChartRepo::start();
    elsewhere.publish("app", "1.0.0");
    *repo.fault.lock().unwrap() = Fault::Redirect {
        from: "/index.yaml".into(),
        to: format!("{}/index.yaml", elsewhere.url()),
    };
    let r = run(&client, &helm_only, &opts).await;
    let e = error_text(&r);
    let line = e
        .lines()
        .find(|l| l.contains(&format!("ArmadaChart `{name}/app`")))
        .unwrap_or_else(|| panic!("no line on the chart: {e}"));
    assert!(
        line.contains(&format!("downloading {url}/index.yaml: "))
            && line.contains(&format!(
                "a redirect to http://127.0.0.1:{} was refused: downloads follow redirects only on the same host and port",
                elsewhere.port
            )),
        "{line}"
    );
    assert_eq!(
        elsewhere.count("/index.yaml"),
        0,
        "the other port was asked"
    );
    // Nothing pruned.
    assert_eq!(
        data(&ns, "app", "chartVersion").await.as_deref(),
        Some("1.0.0")
    );
    ns.delete().await;
}

/// Item 2 in the daemon: `weft run --git-secret` reads the chart sources' credentials from that
/// Secret, as it reads the git credentials: its `username`/`password` go to a Helm repository on
/// the config repository's own host and port (as GitLab and Gitea serve one beside the
/// repositories, and as a git chart source there gets them), its `.dockerconfigjson` to an OCI
/// registry behind a token realm and the private CA of `--ca-file`.
#[tokio::test]
async fn the_daemon_reads_chart_credentials_from_its_git_secret() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::PostParams;
    use support::daemon::{Daemon, DaemonOptions};
    use support::git_servers::{HttpAuth, HttpGitServer, RepoHost, WorkTree};

    let ns = TestNamespace::new("chart-secret").await;
    let name = ns.name().to_string();
    let client = ns.client();
    support::cluster::install_crds(&client).await;
    let git_password = "git-basic-pw";
    let host = RepoHost::new();
    let server = HttpGitServer::start(
        &host,
        HttpAuth {
            basic: Some(("weft".into(), git_password.into())),
            bearer: None,
        },
    );
    // The Helm repository beside the config repository, behind the same basic auth.
    let helm_dir = host.root().join("helm");
    std::fs::create_dir_all(&helm_dir).unwrap();
    package("web", "1.0.0", &helm_dir);
    let helm_url = format!("http://127.0.0.1:{}/helm", server.port);
    support::chart_servers::helm_ok(
        &[
            "repo",
            "index",
            &helm_dir.display().to_string(),
            "--url",
            &helm_url,
        ],
        None,
    );
    let ca = PrivateCa::new();
    let registry_password = "registry-token-pw";
    let registry = OciRegistry::start_with_token_realm(&ca, "puller", registry_password);
    let packages = tempfile::tempdir().unwrap();
    push(
        &registry,
        &ca,
        "puller",
        registry_password,
        &package("api", "2.0.0", packages.path()),
    );
    let config = host.create("config.git");
    let work = WorkTree::new(config.to_str().unwrap());
    work.write(
        "armada.yaml",
        format!(
            "{}{}{}",
            chart(
                &name,
                "web",
                &format!("{{type: helm, location: '{helm_url}', chart: web, version: '^1'}}")
            ),
            chart(
                &name,
                "api",
                &format!(
                    "{{type: oci, location: 'oci://{}/charts/api', version: 2.0.0}}",
                    registry.host
                )
            ),
            group(&name, &["web", "api"])
        ),
    );
    work.commit("charts from a helm repository and a registry");
    work.push();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "git-creds"},
        "stringData": {
            "username": "weft",
            "password": git_password,
            ".dockerconfigjson": docker_config(&registry.host, "puller", registry_password),
        }
    }))
    .unwrap();
    kube::Api::<Secret>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let d = Daemon::start(DaemonOptions {
        extra: vec![
            "--git-secret".into(),
            "git-creds".into(),
            "--ca-file".into(),
            ca.ca_file().display().to_string(),
            "--allowed-chart-sources".into(),
            format!(
                "http://127.0.0.1:{}/,https://{}/",
                server.port, registry.host
            ),
        ],
        ..DaemonOptions::new(&server.url("config.git"), &name)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let web = data(&ns, "web", "chartVersion").await;
        let api = data(&ns, "api", "chartVersion").await;
        if web.is_some() && api.is_some() {
            assert_eq!(web.as_deref(), Some("1.0.0"));
            assert_eq!(api.as_deref(), Some("2.0.0"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the charts' ConfigMaps did not appear within 90 s:\n{}",
            d.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let logs = d.logs();
    assert!(
        !logs.contains(git_password) && !logs.contains(registry_password),
        "a password reached the log"
    );
    drop(d);
    ns.delete().await;
}

/// Item 6's measurement (docs/benchmarks.md): `weft render` of 20 ArmadaCharts from one chart
/// repository index, with a cold and a warm chart cache, next to `helm template` of the same 20
/// archives. `cargo test --release --test it chart_repositories::bench_ -- --nocapture`.
#[test]
// Runs in CI too (about 10 s): the figures it prints are docs/benchmarks.md's.
fn bench_twenty_charts_from_one_index() {
    use std::time::Instant;
    let repo = ChartRepo::start();
    let mut docs = String::new();
    let mut archives = Vec::new();
    for i in 0..20 {
        let name = format!("app{i:02}");
        archives.push(repo.publish(&name, "1.0.0"));
        docs.push_str(&chart(
            "bench",
            &name,
            &format!(
                "{{type: helm, location: '{}', chart: {name}, version: '^1'}}",
                repo.url()
            ),
        ));
    }
    let config = tempfile::tempdir().unwrap();
    std::fs::write(config.path().join("armada.yaml"), docs).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let render = || {
        let start = Instant::now();
        let (code, out, err) = support::weft_cli::Weft::new(["render"])
            .repo(config.path())
            .env("XDG_CACHE_HOME", cache.path())
            .env("WEFT_HELM", support::helm::helm())
            .run();
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.matches("kind: ConfigMap").count(), 20, "{out}");
        start.elapsed()
    };
    let cold = render();
    let archives_fetched = repo
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.ends_with(".tgz"))
        .count();
    let warm = render();
    let after = repo
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.ends_with(".tgz"))
        .count();
    let start = Instant::now();
    for tgz in &archives {
        support::chart_servers::helm_ok(&["template", "x", &tgz.display().to_string()], None);
    }
    let helm = start.elapsed();
    println!(
        "20 charts from one index: weft render cold cache {cold:.2?} ({archives_fetched} archives fetched), warm cache {warm:.2?} ({} archives fetched, {} index reads in all); helm template x20 {helm:.2?}",
        after - archives_fetched,
        repo.count("/index.yaml")
    );
    assert_eq!(after, archives_fetched, "a warm cache downloads no archive");
}
