//! What the transfer preserves about an entry, and how it is read and applied.
//!
//! Mirrors `rsync -aH --numeric-ids`: type, permission bits (including setuid,
//! setgid, sticky), numeric owner and group, modification time to the
//! nanosecond, symlink targets, device numbers and hard-link identity.

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Gid, Mode, Timespec, Timestamps, Uid, CWD};
use serde::{Deserialize, Serialize};

use crate::path::RelPath;

/// A point in time as the file system stores it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Mtime {
    pub sec: i64,
    pub nsec: u32,
}

impl Mtime {
    /// Whether the nanoseconds are a real fraction of a second (from a peer
    /// they could also mean "now" or "leave alone" to the kernel).
    pub fn is_valid(&self) -> bool {
        self.nsec < 1_000_000_000
    }
}

/// The kind of an entry, with what the kind needs to be recreated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    File,
    Dir,
    /// Target bytes, stored verbatim and never followed.
    Symlink(Vec<u8>),
    Fifo,
    Socket,
    CharDev(u64),
    BlockDev(u64),
    /// Another name for a regular file listed earlier in the same transfer.
    HardLink(RelPath),
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "directory",
            Kind::Symlink(_) => "symlink",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDev(_) => "character device",
            Kind::BlockDev(_) => "block device",
            Kind::HardLink(_) => "hard link",
        }
    }
}

/// Metadata preserved for every entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Meta {
    /// Permission bits, `mode & 0o7777`.
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: Mtime,
    /// Length in bytes for regular files, 0 otherwise.
    pub size: u64,
}

impl Meta {
    pub fn from_fs(md: &fs::Metadata) -> Meta {
        Meta {
            perm: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            mtime: Mtime {
                sec: md.mtime(),
                nsec: md.mtime_nsec() as u32,
            },
            size: if md.is_file() { md.len() } else { 0 },
        }
    }
}

/// Reads the kind of an entry from `lstat` data (`HardLink` is decided by the walker).
pub fn kind_of(path: &Path, md: &fs::Metadata) -> io::Result<Kind> {
    let ft = md.file_type();
    Ok(if ft.is_file() {
        Kind::File
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink(
            std::os::unix::ffi::OsStrExt::as_bytes(fs::read_link(path)?.as_os_str()).to_vec(),
        )
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_socket() {
        Kind::Socket
    } else if ft.is_char_device() {
        Kind::CharDev(md.rdev())
    } else {
        Kind::BlockDev(md.rdev())
    })
}

/// Whether this process may give files away to other owners: it holds
/// CAP_CHOWN in its effective set. rsync asks "am I root?"; in a container
/// root may have had its capabilities dropped, and a non-root user may have
/// been granted this one.
pub fn can_preserve_owner() -> bool {
    use rustix::thread::{capabilities, CapabilitySet};
    match capabilities(None) {
        Ok(caps) => caps.effective.contains(CapabilitySet::CHOWN),
        Err(_) => rustix::process::geteuid().is_root(),
    }
}

fn ts(m: Mtime) -> Timestamps {
    let t = Timespec {
        tv_sec: m.sec,
        tv_nsec: m.nsec as _,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// A destination that will not give files away even to root (NFS with
/// root_squash, an id not mapped in a user namespace) leaves them with the
/// receiver's owner: said once, and the transfer goes on. Returns whether the
/// owner was set.
fn tolerate_refusal(r: rustix::io::Result<()>) -> io::Result<bool> {
    use rustix::io::Errno;
    static SAID: std::sync::Once = std::sync::Once::new();
    match r {
        Ok(()) => Ok(true),
        Err(e @ (Errno::PERM | Errno::INVAL)) => {
            SAID.call_once(|| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "mover: the destination refuses to set owners ({e}); files keep the receiver's owner, without setuid/setgid");
            });
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// The permission bits to apply: setuid and setgid only on the owner they were meant for.
fn perm_for(meta: &Meta, owner_set: bool) -> u32 {
    if owner_set {
        meta.perm
    } else {
        meta.perm & !0o6000
    }
}

/// Applies owner, permissions and mtime to an open regular file (before it is renamed into place).
pub fn apply_to_fd<Fd: AsFd>(fd: Fd, meta: &Meta, owner: bool) -> io::Result<()> {
    let owner_set = !owner
        || tolerate_refusal(rustix::fs::fchown(
            &fd,
            Some(Uid::from_raw(meta.uid)),
            Some(Gid::from_raw(meta.gid)),
        ))?;
    // chown clears setuid/setgid, so permissions come after it.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(perm_for(meta, owner_set) as _))?;
    rustix::fs::futimens(&fd, &ts(meta.mtime))?;
    Ok(())
}

/// Applies metadata by path without following a final symlink.
pub fn apply_to_path(path: &Path, kind: &Kind, meta: &Meta, owner: bool) -> io::Result<()> {
    let is_link = matches!(kind, Kind::Symlink(_));
    let owner_set = !owner
        || tolerate_refusal(rustix::fs::chownat(
            CWD,
            path,
            Some(Uid::from_raw(meta.uid)),
            Some(Gid::from_raw(meta.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        ))?;
    if !is_link {
        let perm = perm_for(meta, owner_set);
        rustix::fs::chmodat(CWD, path, Mode::from_raw_mode(perm as _), AtFlags::empty())?;
    }
    rustix::fs::utimensat(CWD, path, &ts(meta.mtime), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Whether the destination's metadata already matches (ignoring size and owner when not preserved).
pub fn meta_matches(have: &Meta, want: &Meta, kind: &Kind, owner: bool) -> bool {
    let perm_ok = matches!(kind, Kind::Symlink(_)) || have.perm == want.perm;
    let owner_ok = !owner || (have.uid == want.uid && have.gid == want.gid);
    perm_ok && owner_ok && have.mtime == want.mtime
}

/// What `lstat` says of an entry, read relative to the directory handle it
/// is in (`fstatat`): the receiver's generator looks at every listed entry,
/// and a path through `/proc/self/fd` cost it a sixth of a no-op re-sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lstat {
    mode: u32,
    rdev: u64,
    len: u64,
    meta: Meta,
}

impl Lstat {
    /// `name` in `dir`, not followed; `None` when there is nothing.
    // libc's `stat` field types differ between architectures.
    #[allow(clippy::unnecessary_cast)]
    pub fn at(dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<Option<Lstat>> {
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let mode = st.st_mode as u32;
                let len = st.st_size as u64;
                let is_file = FileType::from_raw_mode(mode) == FileType::RegularFile;
                Ok(Some(Lstat {
                    mode,
                    rdev: st.st_rdev as u64,
                    len,
                    meta: Meta {
                        perm: mode & 0o7777,
                        uid: st.st_uid,
                        gid: st.st_gid,
                        mtime: Mtime {
                            sec: st.st_mtime as i64,
                            nsec: st.st_mtime_nsec as u32,
                        },
                        size: if is_file { len } else { 0 },
                    },
                }))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    /// The whole `st_mode`, type bits included.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    pub fn rdev(&self) -> u64 {
        self.rdev
    }

    /// `st_size`, whatever the type.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// As [`Meta::from_fs`] reads it.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_applies_metadata_on_files_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        fs::write(&f, b"hello").unwrap();
        let want = Meta {
            perm: 0o4751,
            uid: 0,
            gid: 0,
            mtime: Mtime {
                sec: 1_234_567_890,
                nsec: 123_456_789,
            },
            size: 5,
        };
        let file = fs::File::open(&f).unwrap();
        apply_to_fd(&file, &want, false).unwrap();
        let got = Meta::from_fs(&fs::symlink_metadata(&f).unwrap());
        assert_eq!(got.perm, 0o4751);
        assert_eq!(got.mtime, want.mtime);
        assert_eq!(got.size, 5);

        let l = dir.path().join("l");
        std::os::unix::fs::symlink("nowhere", &l).unwrap();
        let kind = kind_of(&l, &fs::symlink_metadata(&l).unwrap()).unwrap();
        assert_eq!(kind, Kind::Symlink(b"nowhere".to_vec()));
        apply_to_path(&l, &kind, &want, false).unwrap();
        assert_eq!(
            Meta::from_fs(&fs::symlink_metadata(&l).unwrap()).mtime,
            want.mtime
        );
        assert!(meta_matches(
            &Meta::from_fs(&fs::symlink_metadata(&l).unwrap()),
            &want,
            &kind,
            false
        ));
    }

    /// `Lstat::at` says what `symlink_metadata` says, for every kind.
    #[test]
    fn lstat_at_a_handle_equals_lstat_by_path() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        fs::write(p.join("f"), b"hello").unwrap();
        fs::create_dir(p.join("d")).unwrap();
        std::os::unix::fs::symlink("d", p.join("l")).unwrap();
        rustix::fs::mknodat(
            CWD,
            p.join("p"),
            FileType::Fifo,
            Mode::from_raw_mode(0o640),
            0,
        )
        .unwrap();
        let handle = fs::File::open(p).unwrap();
        for name in ["f", "d", "l", "p"] {
            let md = fs::symlink_metadata(p.join(name)).unwrap();
            let at = Lstat::at(handle.as_fd(), name.as_ref()).unwrap().unwrap();
            assert_eq!(at.meta(), &Meta::from_fs(&md), "{name}");
            assert_eq!(
                (at.mode(), at.rdev(), at.size()),
                (md.mode(), md.rdev(), md.len())
            );
            assert_eq!(
                (at.is_file(), at.is_dir(), at.is_symlink()),
                (md.is_file(), md.is_dir(), md.file_type().is_symlink()),
                "{name}"
            );
        }
        assert_eq!(Lstat::at(handle.as_fd(), "gone".as_ref()).unwrap(), None);
    }
}
