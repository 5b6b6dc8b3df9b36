//! Each agent's arguments from the WeaveCloud's options, and the flux arguments read from a
//! running flux agent (kept when `flux.config` leaves them unset).

use std::collections::{BTreeMap, BTreeSet};

use crate::api::weavecloud::WeaveCloud;

use super::patches::Context;
use super::TOKEN_ENV;

/// The flux arguments that are kept from a flux agent already running in the cluster when
/// `flux.config` does not set them (the ones the old launcher carried over).
pub const PRESERVABLE_FLUX_ARGS: &[&str] = &[
    "git-url",
    "git-branch",
    "git-path",
    "git-label",
    "git-poll-interval",
    "git-timeout",
    "git-set-author",
    "git-ci-skip",
    "sync-garbage-collection",
    "registry-ecr-region",
    "registry-require",
    "registry-exclude-image",
    "k8s-allow-namespace",
];

/// Flux flags that take a list: repeated values add up (pflag `StringSlice`).
const LIST_FLUX_ARGS: &[&str] = &[
    "git-path",
    "registry-ecr-region",
    "registry-require",
    "registry-exclude-image",
    "k8s-allow-namespace",
];
/// Flux flags that are booleans: `--flag` alone means true and never takes the next word.
const BOOL_FLUX_ARGS: &[&str] = &["git-set-author", "git-ci-skip", "sync-garbage-collection"];

/// The flag name of an argument (`--git-url=x` → `git-url`), if it is a flag.
pub fn flag_name(arg: &str) -> Option<&str> {
    let flag = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    let name = flag.split_once('=').map_or(flag, |(k, _)| k);
    (!name.is_empty()).then_some(name)
}

/// Read the preservable arguments of a running flux container (`--git-url=…` or
/// `--git-url …`), with flux's own parsing rules: a repeated list flag (`--git-path`,
/// `--k8s-allow-namespace`, …) collects its values, joined with commas (which flux accepts); a
/// repeated scalar flag keeps its last value. Other arguments are ignored.
pub fn parse_flux_args(args: &[String]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k, v.to_string()),
            None if BOOL_FLUX_ARGS.contains(&flag) => (flag, "true".to_string()),
            None if PRESERVABLE_FLUX_ARGS.contains(&flag) => match args.get(i) {
                // `--flag value`, as pflag reads it.
                Some(next) => {
                    i += 1;
                    (flag, next.clone())
                }
                None => continue,
            },
            None => continue,
        };
        if !PRESERVABLE_FLUX_ARGS.contains(&key) {
            continue;
        }
        match out.get_mut(key) {
            Some(v) if LIST_FLUX_ARGS.contains(&key) => {
                v.push(',');
                v.push_str(&value);
            }
            _ => {
                out.insert(key.to_string(), value);
            }
        }
    }
    out
}

/// Flags Weft always generates for flux: never carried over from a running agent.
const GENERATED_FLUX_FLAGS: &[&str] = &["token", "connect"];

/// The flags of a running flux's args other than [`PRESERVABLE_FLUX_ARGS`] and the ones Weft
/// generates (`--token`, `--connect`): what a launcher user added (`--git-readonly`,
/// `--sync-state=secret`, `--git-user=…`, …), each as one `--flag=value` (or `--flag` alone)
/// element. fluxd takes no positional argument, so a word after a flag that does not start
/// with `-` is that flag's value (`--git-user`, `weave`).
pub fn extra_flux_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].trim();
        i += 1;
        let Some(name) = flag_name(arg) else {
            continue;
        };
        let mut value = None;
        if !arg.contains('=') && !BOOL_FLUX_ARGS.contains(&name) {
            if let Some(next) = args.get(i).filter(|n| !n.starts_with('-')) {
                value = Some(next.trim().to_string());
                i += 1;
            }
        }
        if PRESERVABLE_FLUX_ARGS.contains(&name) || GENERATED_FLUX_FLAGS.contains(&name) {
            continue;
        }
        out.push(match value {
            Some(v) => format!("--{name}={v}"),
            None => arg.to_string(),
        });
    }
    out
}

/// flux: token, `--connect`, the git settings (or the preserved ones), the other preserved
/// flags (unless the template, `template_flags`, or `appendArgs` sets them), then `appendArgs`.
pub(super) fn flux_args(
    wc: &WeaveCloud,
    ctx: &Context,
    inputs: &super::AgentInputs,
    template_flags: &[String],
) -> (Vec<String>, Vec<String>) {
    let preserved = &inputs.preserved_flux_args;
    let flux = &wc.spec.flux;
    let config = &flux.config;
    let mut args = vec![
        format!("--token=$({TOKEN_ENV})"),
        format!("--connect=wss://{}/api/flux", ctx.hostname),
    ];
    let configured: BTreeMap<&str, &str> = [
        ("git-url", &config.git_url),
        ("git-branch", &config.git_branch),
        ("git-path", &config.git_path),
        ("git-label", &config.git_label),
    ]
    .into_iter()
    .filter_map(|(flag, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (flag, v)))
    .collect();
    // A flag the user sets in appendArgs is theirs: not carried over from the running agent
    // (it would also come back from the running agent's args at every reconcile).
    let appended: BTreeSet<&str> = flux
        .append_args
        .iter()
        .filter_map(|a| flag_name(a))
        .collect();
    let mut kept = Vec::new();
    for flag in PRESERVABLE_FLUX_ARGS {
        if let Some(value) = configured.get(flag) {
            args.push(format!("--{flag}={value}"));
        } else if appended.contains(flag) {
            continue;
        } else if let Some(value) = preserved.get(*flag) {
            let arg = format!("--{flag}={value}");
            kept.push(arg.clone());
            args.push(arg);
        }
    }
    for extra in &inputs.preserved_flux_extra_args {
        let Some(flag) = flag_name(extra) else {
            continue;
        };
        let taken = appended.contains(flag)
            || template_flags.iter().any(|t| t == flag)
            || GENERATED_FLUX_FLAGS.contains(&flag)
            || PRESERVABLE_FLUX_ARGS.contains(&flag)
            || kept.contains(extra);
        if !taken {
            kept.push(extra.clone());
            args.push(extra.clone());
        }
    }
    args.extend(flux.append_args.iter().cloned());
    (args, kept)
}

/// scope: token, probe flags, `appendArgs`, then the target. The target is positional and scope
/// parses flags with Go's `flag` package, which stops at the first positional argument: so it
/// must stay last, and `appendArgs` go just before it.
pub(super) fn scope_args(wc: &WeaveCloud, ctx: &Context) -> Vec<String> {
    let scope = &wc.spec.scope;
    let mut args = vec![
        format!("--probe.token=$({TOKEN_ENV})"),
        format!("--probe.kubernetes={}", scope.kubernetes_probe),
    ];
    if scope.read_only {
        args.push("--probe.no-controls=true".to_string());
    }
    if let Some(endpoint) = &ctx.cri {
        args.push("--probe.cri=true".to_string());
        args.push(format!("--probe.cri.endpoint=unix://{endpoint}"));
    }
    args.extend(scope.append_args.iter().cloned());
    args.push(format!("https://{}", ctx.hostname));
    args
}

/// scope's cluster agent (`--probe.kubernetes.role=cluster`): the token, `--probe.kubernetes`
/// and `--probe.no-controls` as the per-node probe has them, then the target. No CRI flags (it
/// reads the API server, not a node's runtime) and no `appendArgs` (those are the node probe's).
pub(super) fn scope_cluster_args(wc: &WeaveCloud, ctx: &Context) -> Vec<String> {
    let scope = &wc.spec.scope;
    let mut args = vec![
        format!("--probe.token=$({TOKEN_ENV})"),
        format!("--probe.kubernetes={}", scope.kubernetes_probe),
    ];
    if scope.read_only {
        args.push("--probe.no-controls=true".to_string());
    }
    args.push(format!("https://{}", ctx.hostname));
    args
}

/// The container runtime socket path, without a `unix://` a user may have written: the
/// WeaveCloud's `containerRuntimeEndpoint`, else the socket of the runtime detected on the nodes
/// (`detected`, see [`runtime_socket`]); `None` is Docker.
pub(super) fn cri_socket(wc: &WeaveCloud, detected: Option<&str>) -> Option<String> {
    let endpoint = match wc.spec.scope.container_runtime_endpoint.as_deref() {
        Some(e) => e.trim(),
        None => detected?.trim(),
    };
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    (!path.is_empty()).then(|| path.to_string())
}

/// The CRI socket of a node's `status.nodeInfo.containerRuntimeVersion` (`containerd://1.7.2`),
/// as the launcher's installer chose it: cri-o → `/var/run/crio/crio.sock`, containerd →
/// `/run/containerd/containerd.sock`, anything else (docker) → `None` (the Docker socket).
pub fn runtime_socket(container_runtime_version: &str) -> Option<&'static str> {
    let runtime = container_runtime_version
        .split_once("://")
        .map_or(container_runtime_version, |(r, _)| r);
    match runtime.trim() {
        "cri-o" => Some("/var/run/crio/crio.sock"),
        "containerd" => Some("/run/containerd/containerd.sock"),
        _ => None,
    }
}

/// The memcached flags kept from a running memcached: `-m` (memory, MB) and `-I` (item size).
pub const PRESERVABLE_MEMCACHED_FLAGS: &[&str] = &["m", "I"];

/// Read `-m`/`-I` from a memcached container's args, in every shape they were written: one
/// element (`-m 512`, the launcher's shape, or `-m512`), two elements (`-m`, `512`), or the
/// long names `--memory-limit=512` / `--max-item-size=5m`. Later values win, as with getopt.
pub fn parse_memcached_args(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].trim();
        i += 1;
        let long = [("--memory-limit", "m"), ("--max-item-size", "I")]
            .into_iter()
            .find_map(|(name, short)| {
                let rest = arg.strip_prefix(name)?;
                Some((short, rest.strip_prefix('=').unwrap_or(rest)))
            });
        let (flag, inline) = match long {
            Some(found) => found,
            None => {
                let Some(flag) = PRESERVABLE_MEMCACHED_FLAGS
                    .iter()
                    .find(|f| arg.strip_prefix('-').is_some_and(|r| r.starts_with(**f)))
                else {
                    continue;
                };
                (*flag, &arg[1 + flag.len()..])
            }
        };
        let inline = inline.trim();
        let value = if inline.is_empty() {
            match args.get(i) {
                Some(next) if !next.starts_with('-') => {
                    i += 1;
                    next.trim().to_string()
                }
                _ => continue,
            }
        } else {
            inline.to_string()
        };
        if !value.is_empty() {
            out.insert(flag.to_string(), value);
        }
    }
    out
}

/// The memcached args of the bundle's template with `-m`/`-I` taken from `preserved`, in the
/// template's shape (`-m 512`); a preserved flag the template lacks is appended. Returns the
/// args and the preserved ones, for status.
pub(super) fn memcached_args(
    template_args: &[String],
    preserved: &BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>) {
    let mut args = Vec::new();
    let mut kept = Vec::new();
    let mut done = BTreeSet::new();
    let mut i = 0;
    while i < template_args.len() {
        let arg = &template_args[i];
        i += 1;
        let found = parse_memcached_args(std::slice::from_ref(arg));
        let flag = found.keys().next().cloned().or_else(|| {
            // `-m` alone, its value in the next element.
            PRESERVABLE_MEMCACHED_FLAGS
                .iter()
                .find(|f| arg.trim() == format!("-{f}"))
                .map(|f| f.to_string())
        });
        match flag.and_then(|f| preserved.get(&f).map(|v| (f, v))) {
            Some((flag, value)) => {
                if found.is_empty() {
                    i += 1; // skip the template's value element
                }
                let a = format!("-{flag} {value}");
                kept.push(a.clone());
                args.push(a);
                done.insert(flag);
            }
            None => args.push(arg.clone()),
        }
    }
    for (flag, value) in preserved {
        if !done.contains(flag) {
            let a = format!("-{flag} {value}");
            kept.push(a.clone());
            args.push(a);
        }
    }
    (args, kept)
}

/// One entry of `spec.flux.memcachedArgs` ([`crate::api::weavecloud::is_memcached_size_arg`]),
/// as flag → value; `None` for anything else (memcached takes no other flag from a WeaveCloud).
pub(super) fn parse_spec_memcached_arg(arg: &str) -> Option<BTreeMap<String, String>> {
    if !crate::api::weavecloud::is_memcached_size_arg(arg) {
        return None;
    }
    let (flag, value) = arg.trim().split_once(' ')?;
    Some(
        [(
            flag.trim_start_matches('-').to_string(),
            value.trim().to_string(),
        )]
        .into(),
    )
}
