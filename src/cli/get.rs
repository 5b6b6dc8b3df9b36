//! `weft get`: Weft's resources at a glance, read from the cluster as `flux get` does: one row
//! per sync root (its Root in Weft's namespace), WeaveCloud, ArmadaChart,
//! ArmadaChartGroup and ArmadaManifest with its `Ready` condition, what it runs (revision, agent
//! version, chart revision, phase), whether it is suspended, since when, and why when it is not
//! ready.
//! Exit 0 when every row is ready, 1 when one is not (`--wait` waits for them first), 2 on error.
//! The resources are read by `daemon::overview`; this file chooses what to list, waits, and
//! prints.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use kube::{Client, ResourceExt};

use super::args::ClusterArgs;
use crate::api::conditions::ConditionStatus;
use crate::api::root::Root;
use crate::daemon::overview::{self, root_object_row, Listed, Row};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// The sync roots: the Roots in Weft's namespace (`--weft-namespace`).
    Root,
    /// Root objects (`weft.io/v1alpha1`), as `kubectl get roots` with Weft's columns.
    Roots,
    Weaveclouds,
    Charts,
    Groups,
    Manifests,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// What to list.
    #[arg(value_enum, default_value = "all")]
    pub what: What,
    /// Only the rows of this name (`weft get root prod`); none of that name is an error that
    /// names the ones there are.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Only the resources of this namespace, as kubectl's `-n` (default: every namespace).
    /// Weft's own namespace is `--weft-namespace`.
    #[arg(
        long = "namespace",
        short = 'n',
        alias = "in-namespace",
        conflicts_with = "all_namespaces"
    )]
    pub in_namespace: Option<String>,
    /// Every namespace (the default), as kubectl's `-A`.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
    /// Wait until every listed resource is ready (or `--timeout` passes), then print.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The rows of `what`, sorted by kind, namespace and name.
pub async fn rows(
    client: &Client,
    what: What,
    namespace: Option<&str>,
    weft_namespace: &str,
) -> Result<Vec<Row>, kube::Error> {
    let all = what == What::All;
    let mut rows = Vec::new();
    // The roots live in Weft's namespace: `-n other` leaves them out, unless asked for by name.
    if what == What::Root || (what == What::All && namespace.is_none_or(|n| n == weft_namespace)) {
        rows.extend(root_rows(client, weft_namespace).await?);
    }
    let kinds: &[Listed] = match what {
        What::Root => &[],
        What::Roots => &[Listed::Roots],
        What::Weaveclouds => &[Listed::WeaveClouds],
        What::Charts => &[Listed::Charts],
        What::Groups => &[Listed::Groups],
        What::Manifests => &[Listed::Manifests],
        What::All => &[
            Listed::Roots,
            Listed::WeaveClouds,
            Listed::Charts,
            Listed::Groups,
            Listed::Manifests,
        ],
    };
    let listed = overview::rows(client, kinds, namespace, all).await?;
    // A flag root's Root is listed with the roots already.
    let listed_already = |x: &Row| {
        x.kind == "Root"
            && rows
                .iter()
                .any(|r: &Row| r.kind == "Root" && r.namespace == x.namespace && r.name == x.name)
    };
    let listed: Vec<Row> = listed.into_iter().filter(|x| !listed_already(x)).collect();
    rows.extend(listed);
    Ok(rows)
}

/// The sync roots' rows: the Roots in Weft's namespace (the root of `weft run`'s and `weft
/// sync`'s flags is the Root `--root-name` there). None when the API server serves no Roots
/// (no CRD: no root was ever made).
async fn root_rows(client: &Client, weft_namespace: &str) -> Result<Vec<Row>, kube::Error> {
    let roots = match overview::roots(client, Some(weft_namespace)).await {
        Ok(roots) => roots,
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(roots.iter().map(root_object_row).collect())
}

/// The rows as a table with a header, columns padded to their widest cell.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "KIND",
        "NAMESPACE",
        "NAME",
        "READY",
        "REVISION",
        "SUSPENDED",
        "SINCE",
        "MESSAGE",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.kind.to_string(),
                r.namespace.clone(),
                r.name.clone(),
                format!("{:?}", r.ready),
                r.revision.clone(),
                r.suspended.to_string(),
                r.since.clone(),
                r.message.replace('\n', " "),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: Vec<&str>| {
        let mut out = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            if i + 1 == cols.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &cells {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The rows of `weft get roots`: kubectl's columns (NAMESPACE NAME READY STATUS REVISION
/// SUSPENDED AGE), the status being `Ready`'s message, the age that of the object.
pub fn roots_table(roots: &[Root], now: k8s_openapi::jiff::Timestamp) -> String {
    let header = [
        "NAMESPACE",
        "NAME",
        "READY",
        "STATUS",
        "REVISION",
        "SUSPENDED",
        "AGE",
    ];
    let cells: Vec<Vec<String>> = roots
        .iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
            let age = r
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| age(now.as_second() - t.0.as_second()))
                .unwrap_or_default();
            vec![
                r.namespace().unwrap_or_default(),
                r.name_any(),
                ready
                    .map(|c| format!("{:?}", c.status))
                    .unwrap_or_else(|| "Unknown".into()),
                ready.map(|c| status_cell(&c.message)).unwrap_or_default(),
                status.last_applied_revision.unwrap_or_default(),
                r.spec.suspend.to_string(),
                age,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: Vec<&str>| {
        let mut out = String::new();
        for (c, w) in cols.iter().zip(widths) {
            out.push_str(&format!("{c:<w$}   "));
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &cells {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The first line of a message, at most 80 characters (the rest: `-o yaml`).
fn status_cell(message: &str) -> String {
    let first = message
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches(':');
    if first.chars().count() > 80 {
        first.chars().take(79).chain(['…']).collect()
    } else if message.lines().nth(1).is_some() {
        format!("{first} …")
    } else {
        first.to_string()
    }
}

/// An age of `secs` seconds as kubectl shows it: `45s`, `12m`, `3h`, `5d`.
fn age(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

/// `weft get roots`: the Root objects of `-n` (or every namespace), as a table or as the
/// objects themselves (`-o json|yaml`); exit 1 when one is not Ready.
async fn get_roots(client: &Client, args: &GetArgs) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + args.timeout;
    let ready = |r: &Root| {
        r.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
        })
    };
    let roots = loop {
        let mut roots = overview::roots(client, args.in_namespace.as_deref()).await?;
        if let Some(name) = &args.name {
            roots.retain(|r| &r.name_any() == name);
            if roots.is_empty() {
                let place = args
                    .in_namespace
                    .as_deref()
                    .map(|n| format!(" in namespace {n}"))
                    .unwrap_or_default();
                anyhow::bail!("no Root named `{name}`{place}");
            }
        }
        roots.sort_by_key(|r| (r.namespace(), r.name_any()));
        if !args.wait || roots.iter().all(ready) || Instant::now() >= deadline {
            break roots;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    match args.output {
        Output::Table if roots.is_empty() => eprintln!("no Roots found"),
        Output::Table => print!(
            "{}",
            roots_table(&roots, k8s_openapi::jiff::Timestamp::now())
        ),
        Output::Json => println!("{}", serde_json::to_string_pretty(&roots)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&roots)?),
    }
    Ok(if roots.iter().all(ready) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The rows called `name`; none is an error naming the ones there are (for the root, the
/// Roots in Weft's namespace).
async fn named(
    client: &Client,
    args: &GetArgs,
    rows: Vec<Row>,
    name: &str,
) -> anyhow::Result<Vec<Row>> {
    let (found, others): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| r.name == name);
    if !found.is_empty() {
        return Ok(found);
    }
    if args.what == What::Root {
        let ns = &args.cluster.weft_namespace;
        crate::daemon::roots::requests::require(client, ns, name).await?;
        // Made since the rows were read: the next read shows it.
        return Ok(found);
    }
    let what = match args.what {
        What::Root => "root",
        What::Roots => "Root",
        What::Weaveclouds => "WeaveCloud",
        What::Charts => "ArmadaChart",
        What::Groups => "ArmadaChartGroup",
        What::Manifests => "ArmadaManifest",
        What::All => "resource",
    };
    let place = args
        .in_namespace
        .as_deref()
        .map(|n| format!(" in namespace {n}"))
        .unwrap_or_default();
    let mut names: Vec<String> = others
        .iter()
        .map(|r| match args.in_namespace {
            Some(_) => r.name.clone(),
            None if r.namespace.is_empty() => r.name.clone(),
            None => format!("{}/{}", r.namespace, r.name),
        })
        .collect();
    names.dedup();
    if names.is_empty() {
        anyhow::bail!("no {what} named `{name}`{place}: there are none");
    }
    anyhow::bail!(
        "no {what} named `{name}`{place}: there are {}",
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let (client, _) = args.cluster.connect().await?;
        if args.what == What::Roots {
            return get_roots(&client, &args).await;
        }
        let namespace = args.in_namespace.as_deref();
        let deadline = Instant::now() + args.timeout;
        let rows = loop {
            let rows = rows(&client, args.what, namespace, &args.cluster.weft_namespace).await?;
            let rows = match &args.name {
                Some(name) => named(&client, &args, rows, name).await?,
                None => rows,
            };
            if !args.wait || rows.iter().all(Row::is_ready) || Instant::now() >= deadline {
                break rows;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        match args.output {
            Output::Table if rows.is_empty() => errln!("no resources found"),
            Output::Table => out!("{}", table(&rows)),
            Output::Json => outln!("{}", serde_json::to_string_pretty(&rows)?),
            Output::Yaml => out!("{}", serde_saphyr::to_string(&rows)?),
        }
        Ok(if rows.iter().all(Row::is_ready) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, ready: ConditionStatus, message: &str) -> Row {
        Row {
            kind: "ArmadaChart",
            namespace: "apps".into(),
            name: name.into(),
            ready,
            revision: "abc123".into(),
            suspended: false,
            since: "2026-12-02T01:00:00Z".into(),
            message: message.into(),
        }
    }

    #[test]
    fn the_table_pads_every_column_but_the_last() {
        let t = table(&[
            row("web", ConditionStatus::True, ""),
            row(
                "database",
                ConditionStatus::False,
                "Failed: armada.yaml:3:1: oops",
            ),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "KIND         NAMESPACE  NAME      READY  REVISION  SUSPENDED  SINCE                 MESSAGE"
        );
        assert_eq!(
            lines[1],
            "ArmadaChart  apps       web       True   abc123    false      2026-12-02T01:00:00Z"
        );
        assert!(lines[2].ends_with(
            "False  abc123    false      2026-12-02T01:00:00Z  Failed: armada.yaml:3:1: oops"
        ));
    }

    #[test]
    fn the_roots_table_has_kubectl_columns_and_ages() {
        use crate::api::conditions::Condition;
        use crate::api::root::RootStatus;
        let now: k8s_openapi::jiff::Timestamp = "2026-12-02T01:00:00Z".parse().unwrap();
        let mut ready = Root::of_repository("team-a", "apps", "https://git.example/a.git");
        ready.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now - k8s_openapi::jiff::SignedDuration::from_mins(3),
            ));
        ready.status = Some(RootStatus {
            conditions: vec![Condition::new(
                "Ready",
                ConditionStatus::True,
                "ReconciliationSucceeded",
                "applied revision abc",
            )],
            last_applied_revision: Some("abc".into()),
            ..Default::default()
        });
        let mut fresh = ready.clone();
        fresh.metadata.name = Some("infra".into());
        fresh.status = None;
        fresh.spec.suspend = true;
        let t = roots_table(&[ready, fresh], now);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "NAMESPACE   NAME    READY     STATUS                 REVISION   SUSPENDED   AGE"
        );
        assert_eq!(
            lines[1],
            "team-a      apps    True      applied revision abc   abc        false       3m"
        );
        assert_eq!(
            lines[2],
            "team-a      infra   Unknown                                     true        3m"
        );
        assert_eq!(age(3 * 86400), "3d");
        assert_eq!(
            status_cell("2 object(s) could not be applied:\n  ConfigMap/a/b: forbidden"),
            "2 object(s) could not be applied …"
        );
        assert_eq!(status_cell(&"x".repeat(100)).chars().count(), 80);
        assert_eq!(age(7199), "119m");
        assert_eq!(age(-5), "0s");
    }
}
