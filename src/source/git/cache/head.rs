//! The name of the remote's default branch (its symbolic HEAD), for what must name a branch
//! rather than a commit: the webhooks' branch filter of a daemon that follows the remote's HEAD.

use std::cell::RefCell;

use git2::{Direction, Remote};

use super::super::auth::{remote_callbacks, AuthState};
use super::super::GitError;
use super::GitSource;

impl GitSource {
    /// The branch the remote's HEAD points to (`main`, `trunk`), as `git ls-remote --symref`
    /// shows it; `None` when the remote's HEAD is detached or unborn, or when the refs can only
    /// be learnt by a fetch (a bearer token: libgit2 sends its header only when fetching).
    pub fn remote_default_branch(&self) -> Result<Option<String>, GitError> {
        if self.lists_by_fetching() {
            return Ok(None);
        }
        self.deadline.start(self.spec.fetch_timeout);
        let mut remote = Remote::create_detached(self.remote.fetch_url.as_str())
            .map_err(|e| self.transport_error(&e, None))?;
        let auth = RefCell::new(AuthState::default());
        let mut callbacks = remote_callbacks(&self.spec.credentials, &self.remote, &auth);
        self.bounded(&mut callbacks);
        let connection = remote
            .connect_auth(Direction::Fetch, Some(callbacks), None)
            .map_err(|e| self.transport_error(&e, Some(&auth)))?;
        // libgit2 answers "not found" when the remote advertises no symbolic HEAD.
        let Ok(head) = connection.default_branch() else {
            return Ok(None);
        };
        Ok(head
            .as_str()
            .ok()
            .and_then(|r| r.strip_prefix("refs/heads/"))
            .map(str::to_string))
    }
}
