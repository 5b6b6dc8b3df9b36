//! What a remote has, learnt without fetching a commit: its refs as `git ls-remote` lists them,
//! the configured ref picked from them, and its tags (for a semver range).

use std::collections::BTreeMap;

use git2::Oid;

use super::{cache_lock, clip, parse_oid, GitError, GitRef, GitSource, TransferStats};

impl GitSource {
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
