//! Running the mover as an unprivileged user.

use std::ffi::OsString;
use std::process::Command;

use super::is_root;

/// The `nobody` user and group.
pub const NOBODY: u32 = 65534;

/// `setpriv` arguments for `nobody` with no capabilities at all (the
/// program first), or `None` when this machine cannot run the test (it
/// needs root to set up entries of two owners, and util-linux's setpriv).
pub fn as_nobody() -> Option<Vec<OsString>> {
    as_user(NOBODY)
}

/// [`as_nobody`] for user and group `uid`.
pub fn as_user(uid: u32) -> Option<Vec<OsString>> {
    if !is_root() || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs root and setpriv (util-linux)");
        return None;
    }
    let id = uid.to_string();
    let args = [
        "setpriv",
        "--reuid",
        &id,
        "--regid",
        &id,
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ];
    Some(args.map(OsString::from).into())
}
