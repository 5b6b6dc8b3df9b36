//! The name of the remote's default branch (its symbolic HEAD), for what must name a branch
//! rather than a commit: the webhooks' branch filter of a daemon that follows the remote's HEAD.

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
        self.with_connection(|connection, _| {
            // libgit2 answers "not found" when the remote advertises no symbolic HEAD.
            let Ok(head) = connection.default_branch() else {
                return Ok(None);
            };
            Ok(head
                .as_str()
                .ok()
                .and_then(|r| r.strip_prefix("refs/heads/"))
                .map(str::to_string))
        })
    }
}
