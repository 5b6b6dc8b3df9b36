//! `git` chart sources: a chart directory of another repository, through the git source
//! ([`crate::source::git`]), or of a plain local directory (development). Which of the config
//! repository's credentials go with it is [`credentials_for`]'s rule (see the module above).

use std::path::Path;

use super::{clean_relative, join, subtree, ChartCache, ChartFiles, SourceFailure, QUOTE_CHARS};
use crate::api::armada::ChartSource;
use crate::source::fetch_policy::clip;
use crate::source::git::auth::Credentials;
use crate::source::git::{self, GitError, GitRef, GitSourceSpec, Redirects};

fn is_git_repository(dir: &Path) -> bool {
    dir.join(".git").exists() || (dir.join("HEAD").is_file() && dir.join("objects").is_dir())
}

pub(super) fn git_files(
    source: &ChartSource,
    repo_location: &str,
    cache: &ChartCache,
) -> Result<ChartFiles, SourceFailure> {
    let subpath = clean_relative(source.subpath.as_deref().unwrap_or(""))?;
    let url = git::resolve_relative_location(repo_location, &source.location)?;
    cache.policy.check(&url)?;
    let local = Path::new(&url);
    if !git::is_git_url(&url) && !local.exists() {
        // Shown in logs and status: never the config repository's password.
        return Err(SourceFailure::Directory {
            path: crate::api::redact::redact_url_passwords(&url),
            message: format!(
                "no such directory or repository (location `{}` relative to `{}`)",
                clip(&source.location, QUOTE_CHARS),
                crate::api::redact::redact_url_passwords(repo_location)
            ),
        });
    }
    if !url.contains("://") && local.is_dir() && !is_git_repository(local) {
        // A plain directory, as `--repo DIR` allows for the config repository itself.
        let snap = crate::source::local::read_dir(local, cache.snapshot_limits).map_err(|e| {
            SourceFailure::Directory {
                path: url.clone(),
                message: e.to_string(),
            }
        })?;
        let files = subtree(&snap, &subpath);
        let root = join(&url, &subpath);
        if !files.contains_key("Chart.yaml") {
            return Err(SourceFailure::NotAChart { root });
        }
        return Ok(ChartFiles {
            root,
            revision: None,
            files,
        });
    }
    let reference = source
        .reference
        .clone()
        .unwrap_or_else(|| "master".to_string());
    let mut sources = cache
        .git
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = (url.clone(), reference.clone(), subpath.clone());
    if !sources.contains_key(&key) {
        let mut spec = GitSourceSpec::new(url.clone(), cache.dir.join("git"));
        spec.reference = GitRef::parse(&reference);
        // Only the chart directory is read: the chart is judged by what it holds.
        spec.path = (!subpath.is_empty()).then(|| subpath.clone());
        spec.credentials = credentials_for(&cache.credentials, repo_location, &url);
        spec.limits = cache.snapshot_limits;
        spec.fetch_timeout = cache.fetch_timeout;
        spec.redirects = Redirects::SameHost;
        sources.insert(key.clone(), git::GitSource::new(spec)?);
    }
    let Some(git_source) = sources.get_mut(&key) else {
        // Inserted just above.
        return Err(SourceFailure::Cache {
            path: cache.dir.clone(),
            message: "git source vanished".into(),
        });
    };
    // Unchanged: the last good snapshot is still current; a fixed commit is never fetched twice.
    let cached = matches!(GitRef::parse(&reference), GitRef::Commit(_))
        && git_source.last_good_revision().is_some();
    if !cached {
        git_source.fetch().map_err(|e| match e {
            GitError::PathNotFound { path, revision } => SourceFailure::SubpathMissing {
                subpath: path,
                url: git_source.display_url().to_string(),
                revision,
            },
            GitError::PathNotADirectory { path, revision } => SourceFailure::NotAChart {
                root: format!(
                    "{}@{}/{path} (a file, not a directory)",
                    git_source.display_url(),
                    revision.chars().take(12).collect::<String>()
                ),
            },
            e => SourceFailure::Git(e),
        })?;
    }
    let snapshot = git_source.last_good().ok_or_else(|| SourceFailure::Cache {
        path: git_source.cache_path().to_path_buf(),
        message: "fetch returned no snapshot".into(),
    })?;
    let revision = snapshot.revision.clone().unwrap_or_default();
    let files = snapshot.files.clone();
    if files.is_empty() && !subpath.is_empty() {
        return Err(SourceFailure::SubpathMissing {
            subpath,
            url: git_source.display_url().to_string(),
            revision,
        });
    }
    let short: String = revision.chars().take(12).collect();
    let root = join(&format!("{}@{short}", git_source.display_url()), &subpath);
    if !files.contains_key("Chart.yaml") {
        return Err(SourceFailure::NotAChart { root });
    }
    Ok(ChartFiles {
        root,
        revision: Some(revision),
        files,
    })
}

/// Scheme, host and port of a remote URL (scp-style read as ssh), for comparing origins.
pub(super) fn origin(url: &str) -> Option<(String, String, u16)> {
    let parsed = url::Url::parse(&crate::source::fetch_policy::normalise(url)?).ok()?;
    let scheme = parsed.scheme().to_string();
    let port = parsed.port_or_known_default().or(match scheme.as_str() {
        "ssh" => Some(22),
        "git" => Some(9418),
        _ => None,
    })?;
    Some((scheme, parsed.host_str()?.to_ascii_lowercase(), port))
}

/// Which of the config repository's credentials a git chart source at `chart_url` gets: all of
/// them on the config repository's own scheme, host and port (a private chart repository beside
/// the config repository); elsewhere only what cannot leak — over ssh the key (public-key
/// authentication proves it without handing it over) and known_hosts (the host is still
/// checked); never a password or token to another host, nor over a weaker scheme.
pub fn credentials_for(config: &Credentials, repo_location: &str, chart_url: &str) -> Credentials {
    let chart = origin(chart_url);
    if chart.is_some() && chart == origin(repo_location) {
        return config.clone();
    }
    match chart {
        Some((scheme, _, _)) if scheme == "ssh" => Credentials {
            identity: config.identity.clone(),
            known_hosts: config.known_hosts.clone(),
            username: config.username.clone(),
            password: None,
            bearer_token: None,
            docker_config: None,
        },
        _ => Credentials {
            known_hosts: config.known_hosts.clone(),
            ..Credentials::default()
        },
    }
}
