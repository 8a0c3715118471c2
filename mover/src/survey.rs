//! What a destination already holds, told before a copy starts (`mover
//! inspect`): how much it holds at all, and, when the source can be read
//! beside it, how much of the source a copy would find there already by
//! the quick check (same size and modification time), the test a session
//! applies to decide that a file need not be sent.
//!
//! Both walk metadata only, never file contents. An entry that cannot be
//! read is left out of the counts: these are estimates for a plan, and the
//! session decides file by file again.

use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::filter::Filter;
use crate::meta::{Kind, Meta};
use crate::protocol::Entry;
use crate::walk::{is_temp_name, WalkItem, Walker};

/// The regular files under a root (`.volmig` and temporary files left out;
/// a file with several names counted once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Holdings {
    pub files: u64,
    pub bytes: u64,
}

/// The source's regular files, and those of them the destination already
/// holds with the same size and modification time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QuickCheck {
    pub files_total: u64,
    pub bytes_total: u64,
    pub files_up_to_date: u64,
    pub bytes_up_to_date: u64,
}

/// The regular files `root` holds.
pub fn holdings(root: &Path) -> Holdings {
    let mut held = Holdings::default();
    for entry in files(root) {
        if !is_temp_name(entry.path.file_name()) {
            held.files += 1;
            held.bytes += entry.meta.size;
        }
    }
    held
}

/// How much of `source` a session into `dest` would find up to date there.
pub fn quick_check(source: &Path, dest: &Path) -> QuickCheck {
    let mut found = QuickCheck::default();
    for entry in files(source) {
        found.files_total += 1;
        found.bytes_total += entry.meta.size;
        let there = fs::symlink_metadata(entry.path.under(dest));
        let same = there.is_ok_and(|md| {
            md.is_file()
                && md.len() == entry.meta.size
                && Meta::from_fs(&md).mtime == entry.meta.mtime
        });
        if same {
            found.files_up_to_date += 1;
            found.bytes_up_to_date += entry.meta.size;
        }
    }
    found
}

/// The regular files of a walk of `root` (hard links to an earlier name
/// are not files of their own, as in a session's summary).
fn files(root: &Path) -> impl Iterator<Item = Entry> {
    Walker::new(root.to_path_buf(), Filter::default(), false).filter_map(|item| match item {
        WalkItem::Entry(e) if e.kind == Kind::File => Some(e),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn write(root: &Path, rel: &str, bytes: usize) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, vec![7u8; bytes]).unwrap();
    }

    fn copy_times(from: &Path, to: &Path) {
        let mtime = fs::metadata(from).unwrap().modified().unwrap();
        let file = fs::File::options().write(true).open(to).unwrap();
        file.set_modified(mtime).unwrap();
    }

    #[test]
    fn counts_what_a_session_would_not_send_again() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let (s, d) = (src.path(), dst.path());
        write(s, "same", 1000);
        write(s, "dir/same", 300);
        write(s, "other-time", 50);
        write(s, "other-size", 70);
        write(s, "missing", 5);
        write(s, "now-a-dir", 9);
        for (rel, len) in [("same", 1000), ("dir/same", 300), ("other-time", 50)] {
            write(d, rel, len);
        }
        write(d, "other-size", 71);
        fs::create_dir_all(d.join("now-a-dir")).unwrap();
        copy_times(&s.join("same"), &d.join("same"));
        copy_times(&s.join("dir/same"), &d.join("dir/same"));
        copy_times(&s.join("other-size"), &d.join("other-size"));
        let earlier = SystemTime::now() - Duration::from_secs(3600);
        let file = fs::File::options()
            .write(true)
            .open(d.join("other-time"))
            .unwrap();
        file.set_modified(earlier).unwrap();

        assert_eq!(
            quick_check(s, d),
            QuickCheck {
                files_total: 6,
                bytes_total: 1434,
                files_up_to_date: 2,
                bytes_up_to_date: 1300,
            }
        );
    }

    #[test]
    fn holdings_leave_out_the_checkpoint_temporaries_and_second_names() {
        let dst = tempfile::tempdir().unwrap();
        let d = dst.path();
        write(d, "a", 100);
        write(d, "sub/b", 20);
        write(d, ".volmig/checkpoint", 4000);
        fs::hard_link(d.join("a"), d.join("a-again")).unwrap();
        assert_eq!(
            holdings(d),
            Holdings {
                files: 2,
                bytes: 120
            }
        );
    }

    #[test]
    fn an_empty_or_missing_tree_holds_nothing() {
        let dst = tempfile::tempdir().unwrap();
        assert_eq!(holdings(dst.path()), Holdings::default());
        assert_eq!(
            quick_check(&dst.path().join("absent"), dst.path()),
            QuickCheck::default()
        );
    }
}
