//! The pages, rendered on the server with maud. Every state is written as a word as well as a
//! colour; tables have headers, trees are `<details>` (keyboard-operable without a script), and
//! each action is an HTML form that works without JavaScript.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::cluster::{self, Health, Item, RootRow};
use super::{drift, Ui, UiError, View};
use crate::api::armada::{ArmadaChart, ArmadaGroupStatus, Phase};
use crate::api::conditions::{Condition, ConditionStatus};
use crate::api::keys::REQUESTED_AT_ANNOTATION;
use crate::api::root::Root;
use crate::api::suspend::annotated;
use crate::apply::diff::DiffChange;
use kube::ResourceExt;

/// Above this many objects, an inventory's namespaces start folded (those with a problem open).
const FOLD_ABOVE: usize = 500;

fn title(view: &View) -> String {
    match view {
        View::Roots => "Roots".into(),
        View::Root(name) => format!("Root {name}"),
        View::RootObject(ns, name) => format!("Root {ns}/{name}"),
        View::Armada => "Armada".into(),
        View::WeaveClouds => "WeaveClouds".into(),
        View::Events => "Events".into(),
        View::Drift(_) => "Drift".into(),
    }
}

/// The path of a view's page.
fn path(view: &View) -> String {
    match view {
        View::Roots => "/".into(),
        View::Root(name) => format!("/roots/{name}"),
        View::RootObject(ns, name) => format!("/root/{ns}/{name}"),
        View::Armada => "/armada".into(),
        View::WeaveClouds => "/weaveclouds".into(),
        View::Events => "/events".into(),
        View::Drift(None) => "/drift".into(),
        View::Drift(Some(o)) => format!(
            "/drift?{}",
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair("object", o)
                .finish()
        ),
    }
}

/// A whole page: the navigation and the view's body. The drift view is computed on request
/// (a dry-run of the whole repository) and is not live.
pub fn layout(ui: &Ui, view: &View, body: Markup) -> Markup {
    let nav = [
        (
            "/",
            "Roots",
            matches!(view, View::Roots | View::Root(_) | View::RootObject(..)),
        ),
        ("/armada", "Armada", *view == View::Armada),
        ("/weaveclouds", "WeaveClouds", *view == View::WeaveClouds),
        ("/events", "Events", *view == View::Events),
        ("/drift", "Drift", matches!(view, View::Drift(_))),
    ];
    let live = !matches!(view, View::Drift(_));
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title(view)) " · weft" }
                link rel="stylesheet" href="/assets/ui.css";
                script src="/assets/ui.js" defer {}
            }
            body data-token=[(!ui.read_only()).then(|| ui.token())] {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    span class="brand" { "weft" }
                    @if ui.read_only() { " " span class="badge idle" title="served by the daemon (weft run --ui): no actions" { "read-only" } }
                    nav aria-label="Pages" {
                        ul {
                            @for (href, label, current) in nav {
                                li { a href=(href) aria-current=[current.then_some("page")] { (label) } }
                            }
                        }
                    }
                    span id="live" role="status" aria-live="polite" {}
                }
                main id="main" tabindex="-1" data-live=[live.then(|| path(view))] data-version=(version(&body)) {
                    (body)
                }
            }
        }
    }
}

/// A short digest of a page body: the live stream sends a body only when it differs from the
/// version the page holds.
pub fn version(body: &Markup) -> String {
    version_of(&body.0)
}

/// [`version`] of a rendered body's text.
pub fn version_of(html: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(html.as_bytes())[..8])
}

/// The body of a view, read from the cluster now.
pub async fn main(ui: &Ui, view: &View) -> Result<Markup, UiError> {
    match view {
        View::Roots => Ok(roots(ui, &cluster::roots(ui).await?)),
        View::RootObject(ns, name) => Ok(root_object(&cluster::root_object(ui, ns, name).await?)),
        View::Root(name) => {
            let started = std::time::Instant::now();
            let items = cluster::inventory(ui, name).await?;
            let read = started.elapsed();
            let page = inventory(name, items.as_deref());
            tracing::debug!(
                root = %name,
                objects = items.as_ref().map_or(0, Vec::len),
                read_ms = read.as_millis() as u64,
                render_ms = (started.elapsed() - read).as_millis() as u64,
                "inventory page"
            );
            drop(items);
            // A big inventory's listed pages are freed: hand them back (as the daemon does
            // after a pass).
            crate::mem::release_free_memory();
            Ok(page)
        }
        View::Armada => Ok(armada(ui, &cluster::armada(ui).await?)),
        View::WeaveClouds => Ok(weaveclouds(ui, &cluster::weaveclouds(ui).await?)),
        View::Events => Ok(events(&cluster::events(ui).await?)),
        View::Drift(object) => drift_view(ui, object.as_deref()).await,
    }
}

/// A whole page for an error.
pub fn error_page(status: StatusCode, e: &UiError) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (status.as_u16()) " · weft" }
                link rel="stylesheet" href="/assets/ui.css";
            }
            body {
                header { span class="brand" { "weft" } nav aria-label="Pages" { ul { li { a href="/" { "Roots" } } } } }
                main id="main" { (error_body(e)) }
            }
        }
    }
}

/// The body for an error: what the API server (or the UI) said.
pub fn error_body(e: &UiError) -> Markup {
    let forbidden = e.status() == StatusCode::FORBIDDEN;
    let rbac = forbidden
        && matches!(
            e,
            UiError::Read { .. } | UiError::Write { .. } | UiError::Root(_)
        );
    html! {
        div class="error" role="alert" {
            h1 { @if forbidden { "Not allowed" } @else { "Error" } }
            p { (e.to_string()) }
            @if rbac {
                p { "Your kubeconfig's credentials and their RBAC decide what this page may read or change." }
            }
        }
    }
}

/// A state as a word in a badge: `ok`, `bad`, `warn` or `idle` colour it.
fn badge(class: &str, text: &str) -> Markup {
    html! { span class={ "badge " (class) } { (text) } }
}

fn ready_badge(c: Option<&Condition>) -> Markup {
    match c.map(|c| c.status) {
        Some(ConditionStatus::True) => badge("ok", "Ready"),
        Some(ConditionStatus::False) => badge("bad", "Not ready"),
        _ => badge("idle", "Unknown"),
    }
}

fn ready(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == "Ready")
}

/// Whether a resource's conditions say `Suspended=True` (its own annotation, or its root's
/// suspension, holds it).
fn says_suspended(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == "Suspended" && c.status == ConditionStatus::True)
}

fn health_badge(h: &Health) -> Markup {
    let class = match h {
        Health::Ready => "ok",
        Health::Progressing(_) => "warn",
        Health::Failed(_) | Health::Missing => "bad",
        Health::Unknown(_) => "idle",
    };
    badge(class, h.word())
}

/// A form that posts `action` to `target` with the page token; `extra` adds fields. None on the
/// read-only pages.
fn action_form(ui: &Ui, target: &str, back: &str, label: &str, extra: Markup) -> Markup {
    if ui.read_only() {
        return html! {};
    }
    html! {
        form class="action" method="post" action=(target) {
            input type="hidden" name="token" value=(ui.token());
            input type="hidden" name="back" value=(back);
            (extra)
            button type="submit" { (label) }
        }
    }
}

fn roots(ui: &Ui, rows: &[RootRow]) -> Markup {
    let ns = &ui.config().weft_namespace;
    // Weft's own roots (the flag root of each `weft run` is its Root there) show their last
    // passes here; every Root's page shows its own.
    let own: Vec<&RootRow> = rows.iter().filter(|r| r.key().namespace == *ns).collect();
    html! {
        h1 { "Roots" }
        @if rows.is_empty() {
            p { "No Root objects in the cluster (or none you may list): no " code { "weft run" } " or " code { "weft create root" } " has made one yet." }
        } @else {
            table {
                caption { "Root objects (weft.io/v1alpha1) in every namespace, from their status and Leases" }
                thead { tr {
                    th scope="col" { "Root" } th scope="col" { "State" } th scope="col" { "Revision" }
                    th scope="col" { "Depends on" } th scope="col" { "Last pass" } th scope="col" { "Leader" }
                    @if !ui.read_only() { th scope="col" { "Actions" } }
                } }
                tbody {
                    @for r in rows { (root_row(ui, r)) }
                }
            }
            @for r in own { (passes(&r.root)) }
        }
    }
}

/// A root's last passes, newest first, as its status keeps them.
fn passes(root: &Root) -> Markup {
    let title = format!(
        "{}/{}",
        root.namespace().unwrap_or_default(),
        root.name_any()
    );
    let id = format!("passes-{}", title.replace('/', "-"));
    let passes = root.status.as_ref().map_or(&[][..], |s| &s.passes[..]);
    html! {
        section class="passes" aria-labelledby=(id) {
            h2 id=(id) { "Last passes of " (title) }
            @if passes.is_empty() {
                p class="sub" { "None yet (a pass of the root adds itself to its status)." }
            } @else {
                table {
                    caption { "The last " (passes.len()) " passes, newest first" }
                    thead { tr {
                        th scope="col" { "Started" } th scope="col" { "Duration" }
                        th scope="col" { "Result" } th scope="col" { "Revision" } th scope="col" { "Trigger" }
                    } }
                    tbody {
                        @for p in passes {
                            tr {
                                td { (p.started_at) }
                                td { (duration(p.duration_ms)) }
                                td { @if p.result == "Succeeded" { (badge("ok", "Succeeded")) } @else { (badge("bad", &p.result)) } }
                                td { code { (p.revision.as_deref().unwrap_or("-")) } }
                                td { (p.reasons.join(", ")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `850 ms`, `12.3 s`, `4 min 05 s`.
fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// One Root: its state, revision, dependencies, last pass and holder; the actions for the
/// roots of Weft's namespace (`/roots/{name}/…`).
fn root_row(ui: &Ui, row: &RootRow) -> Markup {
    let r = &row.root;
    let key = row.key();
    let (ns, name) = (&key.namespace, &key.name);
    let status = r.status.clone().unwrap_or_default();
    let ready = ready(&status.conditions);
    let requested = r.annotations().get(REQUESTED_AT_ANNOTATION);
    let acts = !ui.read_only() && *ns == ui.config().weft_namespace;
    let target = |a: &str| format!("/roots/{name}/{a}");
    html! {
        tr id={ "root-" (ns) "-" (name) } {
            th scope="row" { a href={ "/root/" (ns) "/" (name) } { (ns) "/" (name) } }
            td {
                @if r.spec.suspend {
                    (badge("warn", "Suspended"))
                    @if let Some(m) = crate::api::suspend::message(&r.metadata) { " " span class="sub" { (m) } }
                } @else {
                    (ready_badge(ready))
                    @if let Some(c) = ready { " " span class="sub" { (c.reason) } @if !c.message.is_empty() { pre class="msg" { (c.message) } } }
                }
            }
            td { code { (status.last_applied_revision.as_deref().unwrap_or("-")) } }
            td {
                @if r.spec.depends_on.is_empty() { span class="sub" { "—" } }
                @for d in &r.spec.depends_on {
                    @let dns = d.namespace.clone().unwrap_or(ns.clone());
                    a href={ "/root/" (dns) "/" (d.name) } { (dns) "/" (d.name) } " "
                }
            }
            td {
                @match status.passes.first() {
                    Some(p) => {
                        (p.result) " " span class="sub" { (p.reasons.join(", ")) }
                        div class="sub" { "last pass started " (p.started_at) ", took " (duration(p.duration_ms)) }
                    }
                    None => span class="sub" { "none yet" },
                }
                @if let Some(at) = requested {
                    div class="sub" { "sync requested at " (at)
                        @if status.last_handled_requested_at.as_ref() == Some(at) { ", answered" } }
                }
                @if let Some(at) = &status.next_poll_at { div class="sub" { "next poll " (at) } }
            }
            td {
                @if row.leaders.is_empty() { span class="sub" { "no Lease held" } }
                @for l in &row.leaders {
                    div { (l.holder) br; span class="sub" { "Lease " (l.lease) @if let Some(t) = &l.renewed { ", renewed " (t) } } }
                }
            }
            @if !ui.read_only() { td class="actions" { @if acts {
                (action_form(ui, &target("sync"), "/", "Sync now", html! {}))
                @if r.spec.suspend {
                    (action_form(ui, &target("resume"), "/", "Resume", html! {}))
                } @else {
                    (action_form(ui, &target("suspend"), "/", "Suspend", html! {
                        label { span class="visually-hidden" { "Why suspend " (name) } input type="text" name="message" placeholder="why (optional)" size="14"; }
                    }))
                }
            } } }
        }
    }
}

/// A Root object's page: its state and what it holds, with the objects of each chart and
/// WeaveCloud it applied.
fn root_object(view: &cluster::RootObjectView) -> Markup {
    let r = &view.root;
    let ns = r.namespace().unwrap_or_default();
    let name = r.name_any();
    let status = r.status.clone().unwrap_or_default();
    let title = format!("{ns}/{name}");
    html! {
        h1 { "Root " (title) }
        p class="summary" {
            @if r.spec.suspend { (badge("warn", "Suspended")) " " } @else { (ready_badge(ready(&status.conditions))) " " }
            "source " code { (crate::api::redact::redact_url_passwords(&r.spec.source.url)) }
            @if let Some(p) = &r.spec.path { ", path " code { (p) } }
            ", revision " code { (status.last_applied_revision.as_deref().unwrap_or("-")) }
        }
        @for c in &status.conditions {
            p class="sub" { (c.type_) "=" (c.status) " (" (c.reason) "): " (c.message) }
        }
        (passes(r))
        @match &view.items {
            None => p { "No stored inventory yet: the root has not passed." },
            Some(items) => {
                h2 { "Objects of the root" }
                (objects(items, "root-"))
            }
        }
        @for (i, (owner, items)) in view.children.iter().enumerate() {
            section class="children" aria-label={ "objects of " (owner) } {
                h2 { "Objects of " (owner.kind) " " (owner.namespace) "/" (owner.name) }
                (objects(items, &format!("child{i}-")))
            }
        }
    }
}

fn inventory(root: &str, items: Option<&[Item]>) -> Markup {
    let Some(items) = items else {
        return html! { h1 { "Root " (root) } p { "No stored inventory for root " code { (root) } "." } };
    };
    html! {
        h1 { "Root " (root) ": inventory" }
        (objects(items, ""))
    }
}

/// A list of objects with their health, by namespace and kind (folded when long); element ids
/// start with `prefix` (several lists on one page).
fn objects(items: &[Item], prefix: &str) -> Markup {
    let mut tree: BTreeMap<&str, BTreeMap<&str, Vec<&Item>>> = BTreeMap::new();
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i.health.word()).or_default() += 1;
        tree.entry(i.object.namespace.as_str())
            .or_default()
            .entry(i.object.kind.as_str())
            .or_default()
            .push(i);
    }
    let fold = items.len() > FOLD_ABOVE;
    html! {
        p class="summary" {
            (items.len()) " objects: "
            @for (word, n) in &counts { span class="count" { (n) " " (word) } " " }
        }
        @for (ns, kinds) in &tree {
            @let n: usize = kinds.values().map(Vec::len).sum();
            @let bad = kinds.values().flatten().filter(|i| i.health != Health::Ready).count();
            details id={ (prefix) "ns-" (ns) } open[!fold || bad > 0] {
                summary { span class="ns" { @if ns.is_empty() { "(cluster-scoped)" } @else { "namespace " (ns) } } " " span class="sub" { (n) " objects" @if bad > 0 { ", " (bad) " not ready" } } }
                @for (kind, objects) in kinds {
                    details id={ (prefix) "kind-" (ns) "-" (kind) } open[!fold || objects.iter().any(|i| i.health != Health::Ready)] {
                        summary { (kind) " " span class="sub" { "(" (objects.len()) ")" } }
                        ul class="objects" {
                            @for i in objects {
                                li {
                                    (health_badge(&i.health)) " " (i.object.name)
                                    @if let Some(c) = &i.controller { " " span class="sub" { "owned by " (c) } }
                                    @if !i.health.reason().is_empty() { " " span class="why" { (i.health.reason()) } }
                                    " " a class="sub" aria-label={ "drift of " (i.object) } href={ "/drift?object=" (url::form_urlencoded::byte_serialize(i.object.to_string().as_bytes()).collect::<String>()) } { "diff" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn phase_badge(p: Option<Phase>) -> Markup {
    match p {
        Some(Phase::Deployed) => badge("ok", "deployed"),
        Some(Phase::Failed) => badge("bad", "failed"),
        Some(Phase::Deploying) => badge("warn", "deploying"),
        Some(Phase::Pending) | None => badge("idle", "pending"),
    }
}

fn resource_actions(
    ui: &Ui,
    kind: &str,
    ns: &str,
    name: &str,
    suspended: bool,
    back: &str,
) -> Markup {
    let target = |a: &str| format!("/resources/{kind}/{ns}/{name}/{a}");
    html! {
        span class="actions" {
            (action_form(ui, &target("sync"), back, "Sync", html! {}))
            @if suspended { (action_form(ui, &target("resume"), back, "Resume", html! {})) }
            @else { (action_form(ui, &target("suspend"), back, "Suspend", html! {})) }
        }
    }
}

fn group_state(status: &Option<ArmadaGroupStatus>) -> Markup {
    let s = status.clone().unwrap_or_default();
    html! { (phase_badge(s.phase)) " " (ready_badge(ready(&s.conditions))) }
}

fn armada(ui: &Ui, a: &cluster::Armada) -> Markup {
    let chart = |ns: &str, name: &str| {
        a.charts.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(ns) && c.metadata.name.as_deref() == Some(name)
        })
    };
    let mut listed = std::collections::BTreeSet::new();
    html! {
        h1 { "Armada" }
        @if a.manifests.is_empty() && a.charts.is_empty() {
            p { "No ArmadaManifests or ArmadaCharts in the cluster (or none you may list)." }
        }
        @for m in &a.manifests {
            @let ns = m.metadata.namespace.clone().unwrap_or_default();
            @let name = m.metadata.name.clone().unwrap_or_default();
            section class="manifest" aria-labelledby={ "m-" (ns) "-" (name) } {
                h2 id={ "m-" (ns) "-" (name) } { "ArmadaManifest " (ns) "/" (name) " " (group_state(&m.status)) }
                (resource_actions(ui, "ArmadaManifest", &ns, &name, annotated(&m.metadata), "/armada"))
                ol class="groups" {
                    @for gname in &m.spec.chart_groups {
                        @let g = a.groups.iter().find(|g| g.metadata.namespace.as_deref() == Some(ns.as_str()) && g.metadata.name.as_deref() == Some(gname.as_str()));
                        li {
                            h3 { "group " (gname) " "
                                @match g { Some(g) => { (group_state(&g.status)) @if g.spec.sequenced { " " span class="sub" { "sequenced" } } }, None => (badge("bad", "missing")) }
                            }
                            @if let Some(g) = g {
                                ol class="charts" {
                                    @for cname in &g.spec.chart_group {
                                        @let _ = listed.insert((ns.clone(), cname.clone()));
                                        li { @match chart(&ns, cname) {
                                            Some(c) => (chart_row(ui, c)),
                                            None => { (cname) " " (badge("bad", "missing")) },
                                        } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @let others: Vec<&ArmadaChart> = a.charts.iter().filter(|c| !listed.contains(&(c.metadata.namespace.clone().unwrap_or_default(), c.metadata.name.clone().unwrap_or_default()))).collect();
        @if !others.is_empty() {
            section aria-labelledby="other-charts" {
                h2 id="other-charts" { "Charts in no manifest" }
                ul class="charts" { @for c in others { li { (chart_row(ui, c)) } } }
            }
        }
    }
}

fn chart_row(ui: &Ui, c: &ArmadaChart) -> Markup {
    let ns = c.metadata.namespace.clone().unwrap_or_default();
    let name = c.metadata.name.clone().unwrap_or_default();
    let s = c.status.clone().unwrap_or_default();
    let r = ready(&s.conditions);
    let suspended = annotated(&c.metadata) || says_suspended(&s.conditions);
    html! {
        div class="chart" id={ "chart-" (ns) "-" (name) } {
            strong { (name) } " "
            span class="sub" { "release " (c.spec.release) " in " (c.spec.namespace) } " "
            (phase_badge(s.phase)) " " (ready_badge(r))
            @if suspended { " " (badge("warn", "suspended")) }
            @if let Some(rev) = &s.revision { " " span class="sub" { "revision " code { (rev) } } }
            (resource_actions(ui, "ArmadaChart", &ns, &name, annotated(&c.metadata), "/armada"))
            @if let Some(w) = &c.spec.wait {
                div class="sub" {
                    "waits " (w.timeout.unwrap_or(900)) "s"
                    @if !w.labels.is_empty() { " for " code { (w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")) } }
                    @if let Some(res) = &w.resources { " on " (res.len()) " resource kinds" }
                }
            }
            @if let Some(r) = r.filter(|r| r.status != ConditionStatus::True) {
                pre class="msg" { (r.reason) ": " (r.message) }
            }
            @if !s.not_ready.is_empty() {
                div class="sub" { "not ready when the wait ended: " (s.not_ready.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", ")) }
            }
        }
    }
}

fn weaveclouds(ui: &Ui, clouds: &[(crate::api::WeaveCloud, Vec<cluster::Agent>)]) -> Markup {
    html! {
        h1 { "WeaveClouds" }
        @if clouds.is_empty() { p { "No WeaveClouds in the cluster (or none you may list)." } }
        @for (wc, agents) in clouds {
            @let ns = wc.metadata.namespace.clone().unwrap_or_default();
            @let name = wc.metadata.name.clone().unwrap_or_default();
            @let s = wc.status.clone().unwrap_or_default();
            @let r = ready(&s.conditions);
            section class="weavecloud" aria-labelledby={ "wc-" (ns) "-" (name) } {
                h2 id={ "wc-" (ns) "-" (name) } { "WeaveCloud " (ns) "/" (name) " " (ready_badge(r))
                    @if annotated(&wc.metadata) || says_suspended(&s.conditions) { " " (badge("warn", "suspended")) } }
                (resource_actions(ui, "WeaveCloud", &ns, &name, annotated(&wc.metadata), "/weaveclouds"))
                dl {
                    dt { "Agent version" } dd { (s.agent_version.as_deref().unwrap_or("-")) }
                    dt { "Channel's latest" } dd { (s.available_version.as_deref().unwrap_or("-")) }
                    dt { "Next update check" } dd { (s.next_update_check.as_deref().unwrap_or("-")) }
                    @if !s.bad_versions.is_empty() { dt { "Bad versions" } dd { (s.bad_versions.join(", ")) } }
                    dt { "Last takeover" } dd {
                        @match &s.takeover {
                            Some(t) => { (t.removed.len()) " launcher objects removed, " (t.left.len()) " left"
                                @if !t.removed.is_empty() { span class="sub" { " (" (t.removed.join(", ")) ")" } } },
                            None => "none",
                        }
                    }
                }
                @if let Some(r) = r.filter(|r| r.status != ConditionStatus::True) { pre class="msg" { (r.reason) ": " (r.message) } }
                table {
                    caption { "Agents" }
                    thead { tr { th scope="col" { "Workload" } th scope="col" { "Image" } th scope="col" { "Health" } } }
                    tbody {
                        @for a in agents {
                            tr { th scope="row" { (a.object.kind) " " (a.object.namespace) "/" (a.object.name) }
                                 td { @for i in &a.images { code { (i) } " " } }
                                 td { (health_badge(&a.health)) @if !a.health.reason().is_empty() { " " span class="why" { (a.health.reason()) } } } }
                        }
                    }
                }
            }
        }
    }
}

fn events(list: &[k8s_openapi::api::core::v1::Event]) -> Markup {
    html! {
        h1 { "Events" }
        @if list.is_empty() { p { "No events reported by Weft (or none you may list)." } }
        @else {
            table {
                caption { "What Weft reported, newest first (at most 300)" }
                thead { tr { th scope="col" { "When" } th scope="col" { "Type" } th scope="col" { "Reason" } th scope="col" { "Object" } th scope="col" { "Message" } } }
                tbody {
                    @for e in list {
                        @let warning = e.type_.as_deref() == Some("Warning");
                        tr {
                            td { (cluster::event_time(e)) }
                            td { @if warning { (badge("bad", "Warning")) } @else { (badge("idle", e.type_.as_deref().unwrap_or("Normal"))) } }
                            td { (e.reason.as_deref().unwrap_or("")) }
                            td { (e.involved_object.kind.as_deref().unwrap_or("")) " " (e.involved_object.namespace.as_deref().unwrap_or("")) "/" (e.involved_object.name.as_deref().unwrap_or("")) }
                            td { (e.message.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

/// The drift view: the repository's dry-run diff (filtered by `object`), or the reported drift.
async fn drift_view(ui: &Ui, object: Option<&str>) -> Result<Markup, UiError> {
    let Some(source) = &ui.config().drift else {
        let reported = drift::reported(ui).await?;
        return Ok(html! {
            h1 { "Drift" }
            @if ui.read_only() {
                p class="note" { "These read-only pages show what the controllers reported; " code { "weft ui PATH" } " (with your kubeconfig) shows each object's diff, as " code { "weft diff" } " does." }
            } @else {
                p class="note" { "Start " code { "weft ui" } " with the repository (" code { "weft ui PATH" } " or " code { "--repo URL" } ") to see each object's diff, as " code { "weft diff" } " shows it. Reported by the controllers:" }
            }
            @if reported.is_empty() { p { "No resource reports drift." } }
            ul { @for r in &reported { li { (r.kind) " " (r.namespace) "/" (r.name) ": " (r.message) } } }
        });
    };
    let report = drift::diffs(ui, source, object).await?;
    let shown = &report.diffs;
    Ok(html! {
        h1 { "Drift" }
        p class="note" { "Server-side dry-run of " code { (source.location) } " (revision " code { (report.revision) } ") against the cluster, as " code { "weft diff" } " computes it; Secrets' values are masked. Computed when the page was loaded." }
        form method="get" action="/drift" class="filter" {
            label for="object" { "Object (Kind/namespace/name) contains " }
            input id="object" type="text" name="object" value=(object.unwrap_or(""));
            button type="submit" { "Diff" }
        }
        @for f in &report.failed_charts { pre class="msg" { "not diffed: " (f) } }
        @if shown.is_empty() { p { (badge("ok", "No drift")) " the cluster matches the repository" @if object.is_some() { " for the objects named" } "." } }
        @else { p { (shown.len()) " object(s) differ from the repository." } }
        @for d in shown {
            section class="diff" {
                h2 { (d.object.to_string()) " "
                    @match d.change { DiffChange::Create => (badge("warn", "would be created")), DiffChange::Update => (badge("bad", "drifted")), DiffChange::Prune => (badge("warn", "would be pruned")) } }
                pre class="diff" { @for line in d.text.lines() {
                    @let class = if line.starts_with("+++") || line.starts_with("---") { "file" } else if line.starts_with('+') { "ins" } else if line.starts_with('-') { "del" } else if line.starts_with("@@") { "hunk" } else { "ctx" };
                    span class=(class) { (line) } (PreEscaped("\n"))
                } }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_are_written_for_people() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_345), "12.3 s");
        assert_eq!(duration(245_000), "4 min 05 s");
    }
}
