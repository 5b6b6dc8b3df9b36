//! What a remote has, learnt without fetching a commit: its refs as `git ls-remote` lists them,
//! the configured ref picked from them, and its tags (for a semver range).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use git2::Oid;
use sha2::{Digest, Sha256};

use super::{cache_lock, clip, parse_oid, GitError, GitRef, GitSource, TransferStats};

/// A remote's refs as last listed in this process, and when that listing started.
type Listed = (Instant, Arc<BTreeMap<String, Oid>>);

/// The last listing of each remote, by a digest of its URL and of everything that decides what
/// a listing may see; its lock is held while a listing of that remote is made.
type Listings = Mutex<HashMap<[u8; 32], Arc<Mutex<Option<Listed>>>>>;

/// The last ref listing of each remote in this process. Roots of one repository (a path each,
/// as Flux's Kustomizations share one GitRepository) each have a cache of their own and list
/// the remote's refs on every pass: a fetch asked for before a listing of the same remote, made
/// with the same credentials and host keys, started takes that listing instead of making its
/// own (it is as fresh as the one it would have made: whatever was pushed before the fetch was
/// asked for is in it). One listing of a remote is made at a time, and a fetch waits for the one
/// under way. A listing made with other credentials is never taken: a tenant without access to
/// a repository must not learn its refs through another's. One listing is kept per remote.
fn listings() -> &'static Listings {
    static LISTINGS: OnceLock<Listings> = OnceLock::new();
    LISTINGS.get_or_init(Default::default)
}

impl GitSource {
    /// A digest of the remote's URL (with any password in it) and of everything that decides
    /// what a listing of it may see: the credentials and the host keys it accepts.
    fn listing_key(&self) -> [u8; 32] {
        let c = &self.spec.credentials;
        let mut h = Sha256::new();
        for part in [
            Some(self.spec.url.as_str()),
            c.identity.as_ref().map(|s| s.expose()),
            c.known_hosts.as_deref(),
            c.username.as_deref(),
            c.password.as_ref().map(|s| s.expose()),
            c.bearer_token.as_ref().map(|s| s.expose()),
        ] {
            // Length-prefixed, so that no two different sets of fields digest alike.
            let part = part.map(str::as_bytes);
            h.update([u8::from(part.is_some())]);
            h.update((part.map_or(0, <[u8]>::len) as u64).to_le_bytes());
            h.update(part.unwrap_or_default());
        }
        h.finalize().into()
    }

    /// The remote's refs for a fetch asked for at `asked`: a listing of this remote (same URL,
    /// credentials and host keys) that started since is taken, waiting for one under way;
    /// otherwise the refs are listed now.
    pub(super) fn list_remote_since(
        &self,
        asked: Instant,
    ) -> Result<Arc<BTreeMap<String, Oid>>, GitError> {
        let slot = listings()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(self.listing_key())
            .or_default()
            .clone();
        let mut last = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, refs)) = last.as_ref().filter(|(started, _)| *started >= asked) {
            tracing::debug!(url = %self.remote.display, "git: refs taken from a listing that started after this fetch was asked for");
            return Ok(refs.clone());
        }
        let started = Instant::now();
        let refs = Arc::new(self.list_remote()?);
        *last = Some((started, refs.clone()));
        Ok(refs)
    }

    /// The remote's tags (`git ls-remote --tags`), their names without `refs/tags/`. With a
    /// bearer token or the same-host redirect policy the tags are fetched into the cache first
    /// (see [`Self::remote_head`]).
    pub fn remote_tags(&self) -> Result<Vec<String>, GitError> {
        self.deadline.start(self.spec.fetch_timeout);
        if self.lists_by_fetching() {
            let lock = cache_lock(&self.cache_path);
            let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let _across = self.lock_across_processes()?;
            let repo = self.open_cache()?;
            let refspecs = ["+refs/tags/*:refs/tags/*".to_string()];
            self.run_fetch(&repo, &refspecs, false, &mut TransferStats::default())?;
            let names = repo.tag_names(None).map_err(|e| GitError::Cache {
                path: self.cache_path.clone(),
                message: e.message().to_string(),
            })?;
            return Ok(names
                .iter()
                .filter_map(|n| n.ok().flatten())
                .map(str::to_string)
                .collect());
        }
        let refs = self.list_remote()?;
        Ok(refs
            .keys()
            .filter_map(|r| r.strip_prefix("refs/tags/"))
            .map(str::to_string)
            .collect())
    }

    /// `git ls-remote`: the remote's refs and the commits they point to (annotated tags peeled).
    pub(super) fn list_remote(&self) -> Result<BTreeMap<String, Oid>, GitError> {
        self.with_connection(|connection, auth| {
            let mut refs = BTreeMap::new();
            let mut peeled = BTreeMap::new();
            for head in connection
                .list()
                .map_err(|e| self.transport_error(&e, Some(auth)))?
            {
                match head.name().strip_suffix("^{}") {
                    Some(tag) => {
                        peeled.insert(tag.to_string(), head.oid());
                    }
                    None => {
                        refs.insert(head.name().to_string(), head.oid());
                    }
                }
            }
            refs.extend(peeled);
            Ok(refs)
        })
    }

    /// Pick the configured ref from a ref listing: (commit, branch name if it is a branch).
    pub(super) fn resolve_listed(
        &self,
        refs: &BTreeMap<String, Oid>,
    ) -> Result<(Oid, Option<String>), GitError> {
        let (branch, tag) = match &self.spec.reference {
            GitRef::Branch(b) => (Some(b), None),
            GitRef::Tag(t) => (None, Some(t)),
            GitRef::Name(n) => (Some(n), Some(n)),
            GitRef::Commit(c) => return Ok((parse_oid(c)?, None)),
            // The listing advertises HEAD with the commit of the branch it points to; followed
            // as a branch (so a force-push of the default branch is caught, as for any branch).
            // A HEAD on an unborn branch is not advertised: then `main`, Weft's old default.
            GitRef::Head => {
                for (name, branch) in [("HEAD", "HEAD"), ("refs/heads/main", "main")] {
                    if let Some(oid) = refs.get(name) {
                        return Ok((*oid, Some(branch.to_string())));
                    }
                }
                return Err(self.missing_ref(refs));
            }
        };
        if let Some(b) = branch {
            if let Some(oid) = refs.get(&format!("refs/heads/{b}")) {
                return Ok((*oid, Some(b.clone())));
            }
        }
        if let Some(t) = tag {
            if let Some(oid) = refs.get(&format!("refs/tags/{t}")) {
                return Ok((*oid, None));
            }
        }
        Err(self.missing_ref(refs))
    }

    pub(super) fn missing_ref(&self, refs: &BTreeMap<String, Oid>) -> GitError {
        let wanted_tags = matches!(self.spec.reference, GitRef::Tag(_));
        let prefix = if wanted_tags {
            "refs/tags/"
        } else {
            "refs/heads/"
        };
        // Ref names are the server's words: a few, each quoted up to a bound.
        let names: Vec<String> = refs
            .keys()
            .filter_map(|r| r.strip_prefix(prefix))
            .take(10)
            .map(|n| clip(n, 100))
            .collect();
        let available = if refs.is_empty() {
            " (the repository is empty)".to_string()
        } else if names.is_empty() {
            String::new()
        } else {
            let what = if wanted_tags { "tags" } else { "branches" };
            format!(" (its {what}: {})", names.join(", "))
        };
        GitError::MissingRef {
            url: self.remote.display.clone(),
            reference: self.spec.reference.to_string(),
            available,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::git::auth::{Credentials, SecretValue};
    use crate::source::git::GitSourceSpec;
    use std::time::Duration;

    /// A source of a remote nobody listens on: any listing it made itself would fail.
    fn source(cache: &std::path::Path, url: &str, token: Option<&str>) -> GitSource {
        let mut spec = GitSourceSpec::new(url, cache);
        spec.credentials = Credentials {
            password: token.map(SecretValue::new),
            username: token.map(|_| "weft".to_string()),
            ..Credentials::default()
        };
        spec.fetch_timeout = Duration::from_secs(5);
        GitSource::new(spec).expect("source")
    }

    #[test]
    fn a_listing_is_shared_only_with_fetches_asked_before_it_and_with_the_same_credentials() {
        const URL: &str = "http://127.0.0.1:9/shared.git";
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let holder = source(one.path(), URL, Some("one"));
        let asked_before = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let refs = Arc::new(BTreeMap::from([(
            "refs/heads/main".to_string(),
            Oid::from_str("0123456789abcdef0123456789abcdef01234567").expect("oid"),
        )]));
        let slot = Arc::new(Mutex::new(Some((Instant::now(), refs.clone()))));
        listings()
            .lock()
            .expect("listings")
            .insert(holder.listing_key(), slot);
        // Asked for before that listing started, same remote and credentials, another root's
        // cache: taken.
        let same = source(two.path(), URL, Some("one"));
        assert_eq!(same.list_remote_since(asked_before).expect("shared"), refs);
        // Asked for after it started: listed anew (and the remote is not there).
        std::thread::sleep(Duration::from_millis(5));
        assert!(same.list_remote_since(Instant::now()).is_err());
        // Other credentials, none, or another repository: never taken.
        let other = source(two.path(), URL, Some("two"));
        assert!(other.list_remote_since(asked_before).is_err());
        let anonymous = source(two.path(), URL, None);
        assert!(anonymous.list_remote_since(asked_before).is_err());
        let elsewhere = source(one.path(), "http://127.0.0.1:9/other.git", Some("one"));
        assert!(elsewhere.list_remote_since(asked_before).is_err());
    }
}
