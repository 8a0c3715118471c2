//! What runs in the forked child, between `fork` and `exec`.
//!
//! The sandbox is a multi-threaded tokio process, so after `fork` the child
//! may only do async-signal-safe work: no allocation (another thread may have
//! held the allocator's lock), no locks. [`Container::prepare`] therefore
//! decides and allocates everything in the parent: the [`Op`]s over
//! `CString` paths, the program found in the container's `PATH`, and the
//! `argv` and `envp` pointer arrays. [`Container::enter`] then only makes
//! raw system calls (rustix's, plus `mount_setattr` and `execve` through
//! libc) on that data. It calls `execve` itself, so that when a step fails
//! the parent learns which one: the step and the errno travel back in the
//! error code, which `pre_exec` documents as communicated to the parent.

use std::ffi::{CStr, CString};
use std::io;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::process::{Gid, Uid};
use rustix::thread::{CapabilitySet, CapabilitySets};

use super::rootfs::{c, Plan};
use super::{create, Launch, RuntimeError};

/// Steps of [`Container::enter`] other than the [`Op`]s, which follow.
const STEP_NAMESPACE: usize = 0;
const STEP_CHROOT: usize = 1;
const STEP_CHDIR: usize = 2;
const STEP_EXEC: usize = 3;
const STEP_USER: usize = 4;
const STEP_CAPABILITIES: usize = 5;
const STEP_FIRST_OP: usize = 6;
/// A failed step is sent as `(step + 1) << 16 | errno` in an `i32`.
const MAX_STEPS: usize = 0x7ffe;

/// One mount-namespace operation, on host paths, before `chroot`.
#[derive(Debug)]
pub(super) enum Op {
    /// A tmpfs of ours (mode 755, nosuid, nodev).
    Tmpfs {
        target: CString,
    },
    /// The container's `/dev/shm`, as runc mounts it: a tmpfs of 64 MiB,
    /// mode 1777, nosuid, nodev, noexec.
    Shm {
        target: CString,
    },
    Mkdir {
        path: CString,
    },
    /// An empty file, as the mount point of a file.
    Mkfile {
        path: CString,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    /// A recursive bind mount.
    Bind {
        source: CString,
        target: CString,
    },
    ReadOnly {
        target: CString,
        recursive: bool,
    },
    /// Moves the mount at `source` to `target`.
    Move {
        source: CString,
        target: CString,
    },
}

impl Op {
    /// The mount point to create at `path`: a directory, or else an empty
    /// file.
    pub(super) fn mount_point(path: CString, dir: bool) -> Op {
        if dir {
            Op::Mkdir { path }
        } else {
            Op::Mkfile { path }
        }
    }

    fn apply(&self) -> io::Result<()> {
        use rustix::{fs, mount};
        match self {
            Op::Tmpfs { target } => {
                let flags = MountFlags::NOSUID | MountFlags::NODEV;
                mount::mount(c"tmpfs", target.as_c_str(), c"tmpfs", flags, c"mode=755")?;
            }
            Op::Shm { target } => {
                let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
                let data = c"mode=1777,size=65536k";
                mount::mount(c"shm", target.as_c_str(), c"tmpfs", flags, data)?;
            }
            Op::Mkdir { path } => fs::mkdir(path.as_c_str(), Mode::from_raw_mode(0o755))?,
            Op::Mkfile { path } => {
                let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC;
                drop(fs::open(
                    path.as_c_str(),
                    flags,
                    Mode::from_raw_mode(0o644),
                )?);
            }
            Op::Symlink { target, link } => fs::symlink(target.as_c_str(), link.as_c_str())?,
            Op::Bind { source, target } => {
                mount::mount_bind_recursive(source.as_c_str(), target.as_c_str())?;
            }
            Op::ReadOnly { target, recursive } => set_read_only(target, *recursive)?,
            Op::Move { source, target } => mount::mount_move(source.as_c_str(), target.as_c_str())?,
        }
        Ok(())
    }

    fn describe(&self) -> String {
        match self {
            Op::Tmpfs { target } => format!("mounting a tmpfs on {target:?}"),
            Op::Shm { target } => format!("mounting the shm tmpfs on {target:?}"),
            Op::Mkdir { path } => format!("creating directory {path:?}"),
            Op::Mkfile { path } => format!("creating mount point {path:?}"),
            Op::Symlink { target, link } => format!("creating symlink {link:?} -> {target:?}"),
            Op::Bind { source, target } => format!("bind-mounting {source:?} on {target:?}"),
            Op::ReadOnly { target, .. } => format!("making {target:?} read-only"),
            Op::Move { source, target } => format!("moving mount {source:?} to {target:?}"),
        }
    }
}

/// Makes the mount at `target` read-only, and the mounts below it too when
/// `recursive`. Unlike `MS_REMOUNT`, `mount_setattr` keeps the mount's other
/// flags (nosuid, nodev...) and can reach submounts.
fn set_read_only(target: &CStr, recursive: bool) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    let size = std::mem::size_of::<libc::mount_attr>();
    // SAFETY: a NUL-terminated path and a `mount_attr` of the size given.
    let done = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &attr,
            size,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A string array for `execve`: owned strings and a null-terminated array
/// of pointers to them.
struct CStrings {
    _owned: Vec<CString>,
    pointers: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into the heap buffers of `_owned`, which are
// never changed or freed while the pointers exist: sharing them shares
// immutable bytes.
unsafe impl Send for CStrings {}
// SAFETY: as for `Send`.
unsafe impl Sync for CStrings {}

impl CStrings {
    fn new(strings: impl IntoIterator<Item = String>) -> Result<Self, RuntimeError> {
        let owned = strings
            .into_iter()
            .map(|s| {
                CString::new(s)
                    .map_err(|e| create(format!("NUL byte in command or environment: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pointers = owned
            .iter()
            .map(|s| s.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        Ok(CStrings {
            _owned: owned,
            pointers,
        })
    }
}

/// A container ready to be entered by the forked child.
pub(super) struct Container {
    ops: Vec<Op>,
    root: CString,
    cwd: CString,
    pub(super) program: CString,
    argv: CStrings,
    env: CStrings,
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
    /// The identity's capabilities, less those the kernel does not have.
    capabilities: CapabilitySet,
    no_new_privs: bool,
}

impl Container {
    /// Everything the child needs, decided and allocated before the fork.
    pub(super) fn prepare(launch: &Launch) -> Result<Self, RuntimeError> {
        let name = launch
            .argv
            .first()
            .ok_or_else(|| create("the container has no command"))?;
        let mut plan = Plan::new(&launch.scratch_dir, launch.image_root.as_deref())?;
        for mount in &launch.mounts {
            plan.mount_volume(mount)?;
        }
        let cwd = match &launch.working_dir {
            Some(dir) => plan.ensure_dir(dir)?,
            None => "/".into(),
        };
        let program = plan.find_executable(name, &launch.env, &cwd)?;
        let root = c(plan.root())?;
        let ops = plan.into_ops();
        if ops.len() + STEP_FIRST_OP > MAX_STEPS {
            return Err(create("too many mounts to set up"));
        }
        // One variable per name, the last definition winning, as Kubernetes.
        let mut env: Vec<&(String, String)> = Vec::new();
        for pair in &launch.env {
            match env.iter_mut().find(|(name, _)| *name == pair.0) {
                Some(earlier) => *earlier = pair,
                None => env.push(pair),
            }
        }
        let identity = &launch.identity;
        Ok(Container {
            ops,
            root,
            cwd: c(&cwd)?,
            program: c(&program)?,
            argv: CStrings::new(launch.argv.iter().cloned())?,
            env: CStrings::new(
                env.into_iter()
                    .map(|(name, value)| format!("{name}={value}")),
            )?,
            uid: Uid::from_raw(identity.uid),
            gid: Gid::from_raw(identity.gid),
            groups: identity.groups.iter().map(|g| Gid::from_raw(*g)).collect(),
            capabilities: identity.capabilities & kernel_capabilities(),
            no_new_privs: identity.no_new_privs,
        })
    }

    /// Runs in the forked child: a new session, a new mount namespace with
    /// the container's tree, `chroot`, `chdir`, then `execve`. Returns only
    /// on failure.
    ///
    /// Async-signal-safe: system calls on prepared data only. The errors are
    /// `io::Error`s made from raw codes, which allocate nothing.
    pub(super) fn enter(&self) -> io::Result<()> {
        let failed = |step: usize| move |e: rustix::io::Errno| step_error(step, e.into());
        rustix::process::umask(Mode::empty());
        rustix::process::setsid().map_err(failed(STEP_NAMESPACE))?;
        // SAFETY: only the mount namespace is unshared, by a child that has a
        // single thread.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
            .map_err(failed(STEP_NAMESPACE))?;
        let private = MountPropagationFlags::PRIVATE | MountPropagationFlags::REC;
        rustix::mount::mount_change(c"/", private).map_err(failed(STEP_NAMESPACE))?;
        for (index, op) in self.ops.iter().enumerate() {
            op.apply()
                .map_err(|e| step_error(STEP_FIRST_OP + index, e))?;
        }
        rustix::process::chroot(self.root.as_c_str()).map_err(failed(STEP_CHROOT))?;
        rustix::process::chdir(self.cwd.as_c_str()).map_err(failed(STEP_CHDIR))?;
        self.become_user()?;
        rustix::process::umask(Mode::from_raw_mode(0o022));
        // SAFETY: a NUL-terminated path and two null-terminated arrays of
        // NUL-terminated strings, all alive until `execve` replaces us.
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv.pointers.as_ptr(),
                self.env.pointers.as_ptr(),
            )
        };
        Err(step_error(STEP_EXEC, io::Error::last_os_error()))
    }

    /// runc's `finalizeNamespace` and what follows it, in its order: the
    /// bounding set dropped to the container's (which takes
    /// CAP_SETPCAP, so before anything else), the capabilities kept
    /// across the change of user, `setgroups`, `setgid`, `setuid`, then
    /// the effective and permitted sets set and the inheritable and
    /// ambient ones emptied, and `no_new_privs` last. Raw system calls
    /// that change this thread only, which is the whole child.
    fn become_user(&self) -> io::Result<()> {
        use rustix::thread as t;
        let failed = |step: usize| move |e: Errno| step_error(step, e.into());
        for bit in 0..64 {
            let cap = CapabilitySet::from_bits_retain(1 << bit);
            if self.capabilities.contains(cap) {
                continue;
            }
            match t::remove_capability_from_bounding_set(cap) {
                // Beyond the kernel's last capability.
                Ok(()) | Err(Errno::INVAL) => {}
                Err(e) => return Err(step_error(STEP_CAPABILITIES, e.into())),
            }
        }
        t::set_keep_capabilities(true).map_err(failed(STEP_USER))?;
        t::set_thread_groups(&self.groups).map_err(failed(STEP_USER))?;
        t::set_thread_res_gid(self.gid, self.gid, self.gid).map_err(failed(STEP_USER))?;
        t::set_thread_res_uid(self.uid, self.uid, self.uid).map_err(failed(STEP_USER))?;
        t::set_keep_capabilities(false).map_err(failed(STEP_USER))?;
        let sets = CapabilitySets {
            effective: self.capabilities,
            permitted: self.capabilities,
            inheritable: CapabilitySet::empty(),
        };
        t::set_capabilities(None, sets).map_err(failed(STEP_CAPABILITIES))?;
        match t::clear_ambient_capability_set() {
            Ok(()) | Err(Errno::INVAL) => {}
            Err(e) => return Err(step_error(STEP_CAPABILITIES, e.into())),
        }
        if self.no_new_privs {
            t::set_no_new_privs(true).map_err(failed(STEP_CAPABILITIES))?;
        }
        Ok(())
    }

    /// What failed, from the error of a failed spawn, in the parent.
    pub(super) fn start_error(&self, error: &io::Error) -> RuntimeError {
        let code = error.raw_os_error().unwrap_or(0);
        let cause = io::Error::from_raw_os_error(code & 0xffff);
        let step = usize::try_from(code >> 16)
            .ok()
            .and_then(|step| step.checked_sub(1));
        let message = match step {
            None => format!("starting the container process: {error}"),
            Some(STEP_NAMESPACE) => format!("entering a new session and mount namespace: {cause}"),
            Some(STEP_CHROOT) => format!("chroot into {:?}: {cause}", self.root),
            Some(STEP_CHDIR) => format!("chdir to working directory {:?}: {cause}", self.cwd),
            Some(STEP_EXEC) => format!("exec: {:?}: {cause}", self.program),
            Some(STEP_USER) => format!(
                "setting the user (uid {}, gid {}, groups {:?}): {cause}",
                self.uid.as_raw(),
                self.gid.as_raw(),
                self.groups.iter().map(|g| g.as_raw()).collect::<Vec<_>>()
            ),
            Some(STEP_CAPABILITIES) => format!("applying capabilities: {cause}"),
            Some(step) => match self.ops.get(step - STEP_FIRST_OP) {
                Some(op) => format!(
                    "setting up the container's mounts: {}: {cause}",
                    op.describe()
                ),
                None => format!("starting the container process: {cause}"),
            },
        };
        RuntimeError::Start(message)
    }
}

/// Encodes a failed step for the parent (see [`Container::start_error`]).
fn step_error(step: usize, error: io::Error) -> io::Error {
    let errno = error.raw_os_error().unwrap_or(libc::EIO) & 0xffff;
    // `step` is below MAX_STEPS, as `prepare` checked, so this fits.
    io::Error::from_raw_os_error(((step as i32) + 1) << 16 | errno)
}

/// The capabilities this kernel has (`/proc/sys/kernel/cap_last_cap`), as
/// runc leaves out those it does not; all it could name when unreadable.
/// Read once: the kernel's set does not change while the sandbox runs.
fn kernel_capabilities() -> CapabilitySet {
    static KERNEL: std::sync::OnceLock<CapabilitySet> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(read_kernel_capabilities)
}

fn read_kernel_capabilities() -> CapabilitySet {
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|last| *last < 63);
    match last {
        Some(last) => CapabilitySet::from_bits_retain((1u64 << (last + 1)) - 1),
        None => CapabilitySet::all(),
    }
}
