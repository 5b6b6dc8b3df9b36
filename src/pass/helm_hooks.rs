//! Helm hooks of Armada charts, run as Helm runs them on an install or upgrade — and only then:
//! a hook is never applied as a plain object, is in no inventory, and is not re-applied by a pass
//! that changes nothing of its chart.
//!
//! A chart is installed when none of its objects of the wave exists yet, upgraded when some exist
//! and one of them is created or changed (a changed render); a pass that only corrects drift, or
//! changes nothing, runs no hook. Its `pre-install`/`pre-upgrade` hooks run before the wave's
//! objects are applied, its `post-install`/`post-upgrade` hooks after they are ready; within a
//! phase, by `helm.sh/hook-weight`, then kind and name. Each hook is applied, waited for (Jobs
//! until complete, Pods until succeeded or ready; other kinds are only applied), and deleted per
//! its `helm.sh/hook-delete-policy` (default `before-hook-creation`: the previous copy is deleted
//! before it is created again).

use std::time::{Duration, Instant};

use kube::api::{DeleteParams, PropagationPolicy};
use kube::Client;

use super::{Observer, PassError, PassInput, PassSettings, Progress};
use crate::apply::apply::apply_one;
use crate::apply::changeset::{Action, Change};
use crate::apply::plan::{self, Catalog, Decision, LiveState, PlannedObject};
use crate::apply::readiness;
use crate::apply::wait::{self, WaitOptions, WaitTarget};
use crate::apply::ApplyError;
use crate::helm::HookDeletePolicy;
use crate::render::{DesiredHook, Owner};

/// What happens to an owner's hooks in one wave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// None of its objects exists: `*-install` hooks.
    Install,
    /// Some exist and the render changed: `*-upgrade` hooks.
    Upgrade,
}

/// Is `owner` installed or upgraded by applying its `objects` (read as `live`)? `None` when the
/// pass changes nothing of it (or only corrects drift): no hook runs.
pub fn release_of(
    live: &LiveState<'_>,
    owner: &Owner,
    objects: &[PlannedObject],
) -> Option<Release> {
    let decisions: Vec<Decision> = objects
        .iter()
        .filter(|p| &p.desired.owner == owner)
        .map(|p| live.decide(p))
        .collect();
    if decisions.is_empty() {
        return None;
    }
    if decisions.iter().all(|d| *d == Decision::Create) {
        return Some(Release::Install);
    }
    let changed = decisions.iter().any(|d| match d {
        Decision::Create => true,
        Decision::Update(plan::UpdateReason::Drifted { .. }) => false,
        Decision::Update(_) => true,
        Decision::Unchanged => false,
    });
    changed.then_some(Release::Upgrade)
}

/// The hooks of `owner` in `wave` that run before (`pre`) or after its objects for `release`, in
/// Helm's order.
pub fn hooks_for<'h>(
    hooks: &'h [DesiredHook],
    owner: &Owner,
    wave: u32,
    pre: bool,
    release: Release,
) -> Vec<&'h DesiredHook> {
    let mut out: Vec<&DesiredHook> = hooks
        .iter()
        .filter(|h| &h.object.owner == owner && h.object.wave == wave)
        .filter(|h| h.runs(pre, release == Release::Upgrade))
        .collect();
    out.sort_by(|a, b| {
        (a.hook.weight, a.object.kind(), a.object.name()).cmp(&(
            b.hook.weight,
            b.object.kind(),
            b.object.name(),
        ))
    });
    out
}

/// Run `hooks` one after another; stop at the first that fails. Every hook applied or deleted
/// is a change (reason: the phase, or the delete policy).
#[allow(clippy::too_many_arguments)]
pub async fn run_hooks(
    client: &Client,
    catalog: &Catalog,
    hooks: &[&DesiredHook],
    phase: &str,
    timeout: Duration,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
    changes: &mut Vec<Change>,
) -> Result<(), PassError> {
    if hooks.is_empty() {
        return Ok(());
    }
    observer(Progress::Phase {
        message: format!("running {} {phase} hook(s)", hooks.len()),
        objects: hooks.len(),
    });
    for hook in hooks {
        run_one(
            client, catalog, hook, phase, timeout, settings, input, observer, changes,
        )
        .await?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    client: &Client,
    catalog: &Catalog,
    hook: &DesiredHook,
    phase: &str,
    timeout: Duration,
    settings: &PassSettings,
    input: &PassInput,
    observer: &Observer<'_>,
    changes: &mut Vec<Change>,
) -> Result<(), PassError> {
    let resolved = plan::resolve(
        std::slice::from_ref(&hook.object),
        &[],
        catalog,
        input.default_namespace(settings),
    )?;
    let Some(planned) = resolved.planned.into_iter().next() else {
        return Err(PassError::Apply(ApplyError::UnknownKind {
            origin: String::new(),
            object: Box::new(hook.object.object_ref()),
            api_version: hook.object.api_version().to_string(),
            kind: hook.object.kind().to_string(),
        }));
    };
    let mut record = |action: Action, reason: String| {
        let c = Change {
            object: planned.object_ref.clone(),
            owner: hook.object.owner.clone(),
            action,
            reason: Some(reason),
        };
        observer(Progress::Change(&c));
        changes.push(c);
    };
    let policies = hook.hook.effective_delete_policies();
    if input.dry_run {
        record(Action::Created, format!("{phase} hook"));
        return Ok(());
    }
    if policies.contains(&HookDeletePolicy::BeforeHookCreation)
        && delete_and_wait(client, &planned, timeout, settings.poll_interval).await?
    {
        record(Action::Deleted, "hook before-hook-creation".into());
    }
    apply_one(client, &planned).await?;
    record(Action::Created, format!("{phase} hook"));
    let result = if readiness::needs_wait(&planned.object_ref.kind) {
        let target = WaitTarget {
            object: planned.object_ref.clone(),
            resource: planned.resource.clone(),
            namespaced: planned.namespaced,
        };
        let wait_opts = WaitOptions {
            timeout,
            poll_interval: settings.poll_interval,
            concurrency: 1,
        };
        wait::wait_ready(client, &[target], &wait_opts, &|r| {
            observer(Progress::Ready(r))
        })
        .await
    } else {
        Ok(())
    };
    let (policy, label) = match result {
        Ok(()) => (HookDeletePolicy::HookSucceeded, "hook-succeeded"),
        Err(_) => (HookDeletePolicy::HookFailed, "hook-failed"),
    };
    if policies.contains(&policy)
        && delete_and_wait(client, &planned, timeout, settings.poll_interval).await?
    {
        record(Action::Deleted, format!("hook {label}"));
    }
    result.map_err(|e| {
        let owner = &hook.object.owner;
        PassError::Many(vec![
            PassError::Chart {
                chart: if owner.is_root() {
                    owner.name.to_string()
                } else {
                    format!("{}/{}", owner.namespace, owner.name)
                },
                summary: format!(
                    "{phase} hook {} failed; the chart's objects after it were not applied",
                    planned.object_ref
                ),
            },
            PassError::Apply(e),
        ])
    })
}

/// Delete the live copy of `p` (with its dependents, in the foreground) and wait until it is gone.
/// `false` when there was none.
async fn delete_and_wait(
    client: &Client,
    p: &PlannedObject,
    timeout: Duration,
    poll: Duration,
) -> Result<bool, ApplyError> {
    let api = p.api(client);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    match api.delete(&p.object_ref.name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
        Err(e) => return Err(ApplyError::api("delete", &p.object_ref, e)),
    }
    let start = Instant::now();
    loop {
        match api.get_opt(&p.object_ref.name).await {
            Ok(None) => return Ok(true),
            Ok(Some(_)) if start.elapsed() < timeout => tokio::time::sleep(poll).await,
            Ok(Some(_)) => {
                return Err(ApplyError::WaitTimeout {
                    timeout,
                    not_ready: vec![(p.object_ref.clone(), "still being deleted".into())],
                })
            }
            Err(e) => return Err(ApplyError::api("get", &p.object_ref, e)),
        }
    }
}
