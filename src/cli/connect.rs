//! Connection errors as kubectl words them: the server URL and what to check, said once; a
//! kubeconfig context that does not exist is answered with the contexts that do.

use std::path::Path;
use std::sync::OnceLock;

/// The API server URL of the client this command made (set by [`remember_server`]).
static SERVER: OnceLock<String> = OnceLock::new();

/// Remember the API server this command talks to, for [`explain`].
pub fn remember_server(url: &str) {
    let _ = SERVER.set(url.trim_end_matches('/').to_string());
}

/// When `e` is a failure to reach the API server: one line naming the server and what to check,
/// as kubectl says `The connection to the server … was refused - did you specify the right host
/// or port?`. `None` for any other error.
pub fn explain(e: &anyhow::Error) -> Option<String> {
    let reached = e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<kube::Error>(),
            Some(kube::Error::HyperError(_)) | Some(kube::Error::Service(_))
        )
    });
    if !reached {
        return None;
    }
    let server = SERVER.get()?;
    // The innermost cause says why (refused, no such host, timed out, certificate).
    let why = e.chain().last().map(|c| c.to_string()).unwrap_or_default();
    Some(format!(
        "cannot reach the Kubernetes API server at {server}: {why}. Check that the cluster is \
         running and that --kubeconfig / --context (or KUBECONFIG) name the right one; \
         `kubectl cluster-info` should answer from the same kubeconfig"
    ))
}

/// The contexts of a kubeconfig (`--kubeconfig`, else `KUBECONFIG`'s files, else
/// `~/.kube/config`), for a context that was not found.
pub fn contexts(kubeconfig: Option<&Path>) -> Vec<String> {
    let read = match kubeconfig {
        Some(p) => kube::config::Kubeconfig::read_from(p),
        None => kube::config::Kubeconfig::read(),
    };
    read.map(|k| k.contexts.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

/// The error for context `wanted` that `kubeconfig` does not have, listing those it has.
pub fn missing_context(wanted: &str, kubeconfig: Option<&Path>) -> String {
    let known = contexts(kubeconfig);
    let wanted: String = wanted.chars().take(100).collect();
    if known.is_empty() {
        format!("context \"{wanted}\" does not exist: the kubeconfig has no context")
    } else {
        format!(
            "context \"{wanted}\" does not exist; the kubeconfig has: {} (`kubectl config get-contexts` lists them)",
            known.join(", ")
        )
    }
}
