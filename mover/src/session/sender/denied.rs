//! Source entries the sender may not read: permission denied to the
//! identity it runs as. A copy that leaves them out is not a copy, and no
//! retry changes who the sender is, so the session ends with
//! [`SessionError::Unreadable`] naming the first of them, once the rest
//! has been sent.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::path::RelPath;
use crate::session::SessionError;

/// How many of the denied paths the error names.
pub const NAMED: usize = 5;

/// What was denied during one session (shared by the walk and the delta
/// thread).
#[derive(Debug, Default)]
pub struct Denied {
    count: AtomicU64,
    first: Mutex<Vec<String>>,
}

impl Denied {
    /// Notes `path` if `e` is a denial; whether it was.
    pub fn note(&self, path: &RelPath, e: &io::Error) -> bool {
        if !is_denial(e) {
            return false;
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if first.len() < NAMED {
            first.push(path.to_string());
        }
        true
    }

    /// The error to end the session with, if anything was denied.
    pub fn error(&self) -> Option<SessionError> {
        let count = self.count.load(Ordering::Relaxed);
        if count == 0 {
            return None;
        }
        let mut paths = self.first.lock().unwrap_or_else(|p| p.into_inner()).clone();
        paths.sort();
        Some(SessionError::Unreadable {
            count,
            paths,
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        })
    }
}

/// EACCES or EPERM: the identity, not the file's state, is the problem.
fn is_denial(e: &io::Error) -> bool {
    use rustix::io::Errno;
    e.kind() == io::ErrorKind::PermissionDenied
        || matches!(
            e.raw_os_error().map(Errno::from_raw_os_error),
            Some(Errno::ACCESS | Errno::PERM)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_counted_and_the_first_named_other_errors_are_not() {
        let denied = Denied::default();
        let eacces = || io::Error::from_raw_os_error(rustix::io::Errno::ACCESS.raw_os_error());
        for i in 0..7 {
            let path = RelPath::new(format!("d/f{i}").into_bytes()).expect("path");
            assert!(denied.note(&path, &eacces()));
        }
        let eio = io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error());
        assert!(!denied.note(&RelPath::root(), &eio));
        let Some(SessionError::Unreadable { count, paths, .. }) = denied.error() else {
            panic!("an error");
        };
        assert_eq!(count, 7);
        assert_eq!(paths, ["d/f0", "d/f1", "d/f2", "d/f3", "d/f4"]);
        assert!(Denied::default().error().is_none());
    }

    #[test]
    fn the_error_names_the_files_and_is_not_retried() {
        let e = SessionError::Unreadable {
            count: 7,
            paths: vec!["a/secret".into(), "b/key".into()],
            uid: 1000,
            gid: 2000,
        };
        assert_eq!(
            e.to_string(),
            "7 source entries could not be read as uid 1000 gid 2000 (permission denied): \
             a/secret, b/key and 5 more"
        );
        assert!(!e.is_retryable());
        assert_eq!(e.exit_code(), 23);
    }
}
