//! Armada's semantics of a pass, in one place: the ArmadaChart specs of the desired set become
//! the engine's policy data, and the engine's results become Armada's reports.
//!
//! - waits: a chart's objects are waited for by its `wait` block (`labels`, `resources` with
//!   `min_ready`, `required` and `allow_async_updates`; without `resources`, its jobs and at
//!   least one pod), until ready and stable, within its `wait.timeout` (else the deprecated
//!   `timeout`, else 900 s) — a [`WaitRule`];
//! - `upgrade.no_hooks`: an upgrade of the chart runs none of its Helm hooks;
//! - `protected.continue_processing`: a failed chart lets its group go on (the rule's
//!   `continue_on_failure`), and is reported at the end of the pass;
//! - `upgrade.pre.delete`: the listed objects are deleted before an upgrade of the chart — a
//!   [`PreUpdateDelete`];
//! - `driftPolicy: report`: the chart's objects changed or deleted outside Weft are left as they
//!   are — a [`ReportDrift`];
//! - [`failure`]: a chart that did not become ready, as the pass reports it.
//!
//! Waves (groups and sequenced charts) are rendered into each object's `wave` by
//! `render::armada`; the engine applies and waits wave by wave.

use crate::api::owner::OwnerKind;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::PassError;
use crate::api::armada::Threshold;
use crate::api::armada::{self as spec, ArmadaChartSpec, Wait, DEFAULT_WAIT_TIMEOUT_SECS};
use crate::api::DriftPolicy;
use crate::apply::apply_policy::{
    ApplyPolicy, DeleteTarget, PreUpdateDelete, ReportDrift, WaitRule,
};
use crate::apply::readiness::{self, Selection, Selector};
use crate::apply::wait::NotReady;
use crate::apply::ApplyError;
use crate::render::armada::ChartFailure;
use crate::render::{DesiredSet, Owner};

/// The drift rule of a chart that reports drift, as it appears in skip reasons.
pub const REPORT_RULE: &str = "driftPolicy: report";
/// The reason of the changes of `upgrade.pre.delete`.
pub const PRE_DELETE_REASON: &str = "upgrade.pre.delete";

/// The spec of every ArmadaChart in `set` (the CRs the sync layer applies), by the owner its
/// objects carry. A chart whose CR is not in the set is waited for by the global rules.
pub fn chart_specs(set: &DesiredSet) -> BTreeMap<Owner, ArmadaChartSpec> {
    set.objects()
        .iter()
        .filter(|o| {
            o.kind() == OwnerKind::ArmadaChart.as_str() && o.api_version().starts_with("armada.")
        })
        .filter_map(|o| {
            let spec: ArmadaChartSpec =
                serde_json::from_value(o.object.value().get_mut("spec")?.take()).ok()?;
            Some((
                Owner::resource(
                    OwnerKind::ArmadaChart,
                    o.namespace().unwrap_or(""),
                    o.name(),
                ),
                spec,
            ))
        })
        .collect()
}

/// The engine policy of every chart of `set`.
pub fn policy(set: &DesiredSet) -> ApplyPolicy {
    let mut policy = ApplyPolicy::default();
    for (owner, spec) in chart_specs(set) {
        add_chart(&mut policy, owner, &spec);
    }
    policy
}

/// Add one chart's rules to `policy`.
pub fn add_chart(policy: &mut ApplyPolicy, owner: Owner, spec: &ArmadaChartSpec) {
    if spec.drift_policy == DriftPolicy::Report {
        policy.report_drift.insert(
            owner.clone(),
            ReportDrift {
                rule: REPORT_RULE.to_string(),
                ..ReportDrift::default()
            },
        );
    }
    if spec.upgrade.as_ref().is_some_and(spec::Upgrade::no_hooks) {
        policy.no_upgrade_hooks.insert(owner.clone());
    }
    if let Some(deletes) = pre_update_delete(spec) {
        policy.pre_update_deletes.insert(owner.clone(), deletes);
    }
    let rule = wait_rule(&owner, spec);
    policy.waits.insert(owner, rule);
}

/// `namespace/name` of a chart.
fn chart_name(owner: &Owner) -> String {
    if owner.is_root() {
        owner.name.to_string()
    } else {
        format!("{}/{}", owner.namespace, owner.name)
    }
}

/// How a chart is waited for: its `wait` block in its namespace, within its timeout.
pub fn wait_rule(owner: &Owner, spec: &ArmadaChartSpec) -> WaitRule {
    WaitRule {
        subject: format!("chart {}", chart_name(owner)),
        namespace: spec.namespace.clone(),
        selectors: selectors(spec.wait.as_ref()),
        timeout: timeout(spec),
        continue_on_failure: spec
            .protected
            .as_ref()
            .is_some_and(|p| p.continue_processing),
    }
}

/// The selectors of a chart's `wait` block, as Armada's `wait.py` builds them: each of
/// `wait.resources` with `wait.labels` added (`required` unless it says `false`); without
/// `resources`, Armada's default: the jobs matching `wait.labels` if there are any, and the
/// pods matching them, at least one of which must exist (a chart whose pods a quota or a
/// scheduling rule keeps from being created never becomes ready); `resources: []` waits for
/// nothing.
pub fn selectors(wait: Option<&Wait>) -> Vec<Selector> {
    let base = wait.map(|w| w.labels.clone()).unwrap_or_default();
    let Some(resources) = wait.and_then(|w| w.resources.as_ref()) else {
        return [
            (spec::WaitResourceType::Job, false),
            (spec::WaitResourceType::Pod, true),
        ]
        .into_iter()
        .map(|(type_, required)| Selector {
            kind: type_.kind().to_string(),
            labels: base.clone(),
            min_ready: Threshold::default(),
            required,
            allow_async_updates: false,
        })
        .collect();
    };
    resources
        .iter()
        .map(|r| {
            let mut labels = base.clone();
            labels.extend(r.labels.clone());
            Selector {
                kind: r.type_.kind().to_string(),
                labels,
                min_ready: min_ready(r.min_ready.as_ref()),
                required: r.required.unwrap_or(true),
                allow_async_updates: r.allow_async_updates.unwrap_or(false),
            }
        })
        .collect()
}

/// A chart's `min_ready`; the loader rejected invalid values, and the default (100%) covers a
/// repository it did not check.
pub fn min_ready(m: Option<&spec::MinReady>) -> Threshold {
    m.and_then(|m| m.threshold().ok()).unwrap_or_default()
}

/// How long a chart may take to become ready: `wait.timeout`, else the deprecated `timeout`,
/// else 900 s.
pub fn timeout(spec: &ArmadaChartSpec) -> Duration {
    let secs = spec
        .wait
        .as_ref()
        .and_then(|w| w.timeout)
        .or(spec.timeout)
        .unwrap_or(DEFAULT_WAIT_TIMEOUT_SECS);
    Duration::from_secs(secs.max(1) as u64)
}

/// `upgrade.pre.delete` of a chart: what is deleted (in the chart's namespace) before an
/// upgrade, waited for until gone within the chart's timeout. `None` without actions.
pub fn pre_update_delete(spec: &ArmadaChartSpec) -> Option<PreUpdateDelete> {
    let actions = spec.upgrade.as_ref()?.pre.as_ref()?.delete.as_slice();
    let targets: Vec<DeleteTarget> = actions
        .iter()
        // The loader refuses types without a target; skip rather than guess.
        .filter_map(|a| {
            let (api_version, kind) = a.target()?;
            Some(DeleteTarget {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                labels: a.labels.clone(),
            })
        })
        .collect();
    (!targets.is_empty()).then(|| PreUpdateDelete {
        namespace: spec.namespace.clone(),
        targets,
        timeout: timeout(spec),
        reason: PRE_DELETE_REASON.to_string(),
    })
}

/// A chart's failure as the pass reports it: a line naming the chart (and what happened to its
/// group), then the objects not ready or failed, each with why. The not-ready objects follow
/// as [`ApplyError`]s, inside the same [`PassError::Many`], so that views which look for them
/// (the chart's status) find them.
pub fn failure(owner: &Owner, rule: &WaitRule, why: NotReady) -> PassError {
    let mut summary = match why.timed_out {
        Some(t) => format!(
            "did not become ready within {}s (its wait.timeout)",
            t.as_secs()
        ),
        None => "failed".to_string(),
    };
    summary.push_str(if rule.continue_on_failure {
        "; it is protected with continue_processing, so the charts after it were deployed"
    } else {
        "; the charts after it were not deployed"
    });
    for m in &why.missing {
        summary.push_str(&format!("\n  {m}"));
    }
    let mut all = vec![PassError::Chart {
        chart: chart_name(owner),
        summary,
    }];
    if !why.failed.is_empty() {
        all.push(PassError::Apply(ApplyError::Failed(why.failed)));
    }
    if !why.not_ready.is_empty() {
        all.push(PassError::Apply(ApplyError::WaitTimeout {
            timeout: why.timed_out.unwrap_or_default(),
            not_ready: why.not_ready,
        }));
    }
    PassError::Many(all)
}

/// A chart that could not be rendered, as the pass reports it: like a chart that failed, plus
/// helm's (or the renderer's) words.
pub fn render_failure(f: &ChartFailure, continue_on_failure: bool) -> PassError {
    PassError::Chart {
        chart: chart_name(&f.owner),
        summary: format!(
            "could not be rendered{}; nothing was pruned: {}",
            if continue_on_failure {
                "; it is protected with continue_processing, so the charts after it were deployed"
            } else {
                ", so the charts after it were not deployed"
            },
            f.error
        ),
    }
}

/// What kept a chart from being deployed in a pass, for its `Blocked` message: always named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// A chart before it that failed (and is not protected with `continue_processing`), with
    /// how: `did not become ready`, `could not be rendered`, `could not be applied`.
    Chart { chart: Owner, how: &'static str },
    /// An object before it, of no chart, that did not become ready or failed, with why.
    Object { object: String, why: String },
    /// Something else stopped the pass: the first line of its error.
    Pass(String),
}

/// The `namespace/name` of the group (`ArmadaChartGroup` of `set`, in the chart's namespace)
/// that lists `chart`, if any.
pub fn group_of(set: &DesiredSet, chart: &Owner) -> Option<String> {
    let (namespace, name) = chart.as_chart()?;
    set.objects()
        .iter()
        .filter(|o| o.kind() == "ArmadaChartGroup" && o.api_version().starts_with("armada."))
        .filter(|o| o.namespace().unwrap_or("") == namespace)
        .find(|o| {
            o.object
                .value()
                .pointer("/spec/chart_group")
                .and_then(Value::as_array)
                .is_some_and(|members| members.iter().any(|m| m.as_str() == Some(name)))
        })
        .map(|o| format!("{namespace}/{}", o.name()))
}

/// The `Blocked` message of a chart that `blockers` kept from being deployed: each blocker
/// named (a chart with its group), at most [`MAX_BLOCKERS`] of them and then a count.
pub fn blocked_message(set: &DesiredSet, blockers: &[Blocker]) -> String {
    let named: Vec<String> = blockers
        .iter()
        .take(MAX_BLOCKERS)
        .map(|b| match b {
            Blocker::Chart { chart, how } => match group_of(set, chart) {
                Some(group) => format!("chart {} (group {group}), which {how}", chart_name(chart)),
                None => format!("chart {}, which {how}", chart_name(chart)),
            },
            Blocker::Object { object, why } => {
                format!("{object}, which did not become ready ({why})")
            }
            Blocker::Pass(line) => format!("the pass, which stopped before it: {line}"),
        })
        .collect();
    let more = blockers.len().saturating_sub(MAX_BLOCKERS);
    // Without a blocker (never: the caller always has the pass's error at least).
    let mut message = if named.is_empty() {
        "not deployed: the pass stopped before it".to_string()
    } else {
        format!("not deployed: blocked by {}", named.join("; "))
    };
    if more > 0 {
        message.push_str(&format!("; and {more} more"));
    }
    message
}

/// How many blockers a `Blocked` message names.
pub const MAX_BLOCKERS: usize = 3;

/// Judge a chart's `wait` block against live objects (e.g. everything listed in the chart's
/// namespace), as a pass does.
pub fn chart_readiness(wait: Option<&Wait>, live: &[Value]) -> Selection {
    readiness::judge(&selectors(wait), live)
}

#[cfg(test)]
#[path = "armada_tests.rs"]
mod tests;
