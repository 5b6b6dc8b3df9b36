//! A root's git source: the credentials Secret read as the root's identity, a semver ref
//! resolved to the highest matching tag, and the source (one git cache per root) opened again
//! only when its URL, ref, path or credentials changed.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::reconcile::failure;
use super::repository::{LastFetched, RootSource};
use super::status::Failure;
use super::Context;
use crate::api::root::Root;
use crate::api::ResourceKey;
use crate::source::git::auth::Credentials;

/// What a root's source was opened from: a change of any reopens it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceKey {
    url: String,
    git_ref: Option<String>,
    path: Option<String>,
    /// The credentials Secret's name and `resourceVersion`.
    secret: Option<(String, String)>,
}

/// The tag a semver ref follows now: the highest tag of the remote its range admits, as
/// `refs/tags/<tag>` (a new such tag opens the source anew, so the next pass applies it).
async fn semver_tag(
    root: &Root,
    key: &ResourceKey,
    secret: &Option<(String, Secret)>,
    ctx: &Context,
) -> Result<String, Failure> {
    let spec = &root.spec;
    let range_text = spec
        .source
        .git_ref
        .as_ref()
        .and_then(|r| r.semver.as_deref())
        .unwrap_or_default();
    // Checked by the refusal before a pass: a bad range never gets here.
    let range = crate::api::root::parse_semver_range(range_text)
        .map_err(|e| failure("InvalidSemver", e.to_string()))?;
    let credentials = credentials_for(secret, key, ctx)?;
    let lister = RootSource::open(
        &spec.source.url,
        None,
        None,
        Some(cache_dir_of(key, ctx)),
        credentials,
        ctx.config.fetch_timeout,
    )
    .map_err(|e| failure("FetchFailed", e.to_string()))?;
    let tags = lister.remote_tags().await.map_err(|e| {
        failure(
            "FetchFailed",
            format!("listing the tags of the repository: {e}"),
        )
    })?;
    match crate::api::root::highest_matching_tag(&range, tags.iter().map(String::as_str)) {
        Some(tag) => Ok(format!("refs/tags/{tag}")),
        None => {
            let some: Vec<&str> = tags.iter().map(String::as_str).take(10).collect();
            Err(failure(
                "NoMatchingTag",
                format!(
                    "no tag of the repository satisfies spec.source.ref.semver `{range_text}` (its tags: {}); push one, or widen the range",
                    if some.is_empty() { "none".to_string() } else { some.join(", ") }
                ),
            ))
        }
    }
}

/// The credentials of the root's Secret (none: anonymous).
pub fn credentials_of(
    secret: &Option<(String, Secret)>,
    key: &ResourceKey,
) -> Result<Credentials, Failure> {
    match secret {
        None => Ok(Credentials::default()),
        Some((name, s)) => Credentials::from_secret_data(&crate::api::secret_bytes(s.clone()))
            .map_err(|e| {
                failure(
                    "SecretInvalid",
                    format!("the credentials Secret {}/{name}: {e}", key.namespace),
                )
            }),
    }
}

/// The credentials a root's fetch uses: its Secret's; for the flag root's Root without one, the
/// daemon's files (`WEFT_GIT_CREDENTIALS_DIR`, [`super::RootsConfig::flag_credentials`]).
fn credentials_for(
    secret: &Option<(String, Secret)>,
    key: &ResourceKey,
    ctx: &Context,
) -> Result<Credentials, Failure> {
    match (secret, &ctx.config.flag_credentials) {
        (None, Some(files)) if *key == ctx.flag_root => Ok(files.clone()),
        _ => credentials_of(secret, key),
    }
}

/// The root's own git cache: `<cache-dir>/roots/<namespace>/<name>`; the flag root's Root's is
/// the flag loop's (`<cache-dir>/git`, [`super::RootsConfig::flag_cache_dir`]).
fn cache_dir_of(key: &ResourceKey, ctx: &Context) -> std::path::PathBuf {
    if *key == ctx.flag_root {
        return ctx
            .config
            .flag_cache_dir
            .clone()
            .unwrap_or_else(crate::source::git::default_cache_dir);
    }
    ctx.config
        .git_cache_dir
        .clone()
        .unwrap_or_else(|| crate::source::git::default_cache_dir().join("roots"))
        .join(&key.namespace)
        .join(&key.name)
}

/// The root's source, opened again when its URL, ref, path or credentials changed; and the last
/// snapshot fetched from it.
pub(super) async fn open_source(
    root: &Root,
    key: &ResourceKey,
    client: &Client,
    ctx: &Context,
) -> Result<(RootSource, Option<LastFetched>), Failure> {
    let spec = &root.spec;
    let secret = match &spec.source.secret_ref {
        None => None,
        Some(r) => {
            // Read as the root's identity: a tenant names only Secrets it may read.
            let api: Api<Secret> = Api::namespaced(client.clone(), &key.namespace);
            let secret = api.get(&r.name).await.map_err(|e| {
                failure(
                    "SecretNotReadable",
                    format!(
                        "reading the credentials Secret {}/{}: {}",
                        key.namespace,
                        r.name,
                        crate::apply::describe(&e).0
                    ),
                )
            })?;
            Some((r.name.clone(), secret))
        }
    };
    let git_ref = match spec.source.git_ref.as_ref() {
        Some(r) if r.semver.is_some() => Some(semver_tag(root, key, &secret, ctx).await?),
        Some(r) => r.as_flag(),
        None => None,
    };
    let source_key = SourceKey {
        url: spec.source.url.clone(),
        git_ref,
        path: spec.path.clone(),
        secret: secret
            .as_ref()
            .map(|(n, s)| (n.clone(), s.resource_version().unwrap_or_default())),
    };
    let cached = ctx.with_memory(key, |m| match &m.source {
        Some((k, source)) if *k == source_key => Some((source.clone(), m.last.clone())),
        _ => None,
    });
    if let Some(cached) = cached {
        return Ok(cached);
    }
    let credentials = credentials_for(&secret, key, ctx)?;
    let cache_dir = cache_dir_of(key, ctx);
    let source = RootSource::open(
        &spec.source.url,
        source_key.git_ref.as_deref(),
        spec.path.as_deref(),
        Some(cache_dir),
        credentials,
        ctx.config.fetch_timeout,
    )
    .map_err(|e| failure("FetchFailed", e.to_string()))?;
    ctx.with_memory(key, |m| {
        m.source = Some((source_key, source.clone()));
        m.last = None;
    });
    Ok((source, None))
}
