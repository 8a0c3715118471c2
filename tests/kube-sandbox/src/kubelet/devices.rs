//! Block volumes on the node: a Block PV's sparse image file turned into
//! what a pod's `volumeDevices` entry shows at its `devicePath`.
//!
//! As the kubelet's `AttachFileDevice` does for a file-backed volume, an
//! image is attached to a loop device (`LOOP_CTL_GET_FREE`, then
//! `LOOP_CONFIGURE`), on first use, and kept attached until its PV is
//! deleted or the sandbox stops: never `LO_FLAGS_AUTOCLEAR`, since nothing
//! holds the device open between pods. A claim mounted `readOnly` gets a
//! second, read-only loop over the same image (the *mirror*): it opens for
//! write, but every write fails with EPERM, where a real node's device
//! cgroup refuses the write open itself.
//!
//! Where loops cannot be had (no `/dev/loop-control`, not root, none free
//! under [`BlockBacking::Auto`]), or with [`BlockBacking::File`], the image
//! file itself is what the container sees, bound read-only for a read-only
//! claim (the write open then fails with EROFS).
//!
//! Loops of a sandbox that vanished without detaching them (a SIGKILL)
//! are found through `/sys/block/loopN/loop/backing_file` and detached by
//! [`detach_leaked`] when the next sandbox starts.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The name of a Block volume's image in its volume directory.
pub const IMAGE: &str = "disk.img";

const LOOP_CONTROL: &str = "/dev/loop-control";
// <linux/loop.h>
const LOOP_CLR_FD: u64 = 0x4C01;
const LOOP_CONFIGURE: u64 = 0x4C0A;
const LOOP_CTL_GET_FREE: u64 = 0x4C82;
const LO_FLAGS_READ_ONLY: u32 = 1;
/// How often a free loop is asked for when another process takes it
/// between `LOOP_CTL_GET_FREE` and `LOOP_CONFIGURE`.
const ATTEMPTS: usize = 8;

/// `struct loop_info64`.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

/// What backs the devices of Block volumes (`SandboxConfig::block_backing`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BlockBacking {
    /// Loop devices when `/dev/loop-control` opens and one is free, per
    /// volume; the image file otherwise.
    #[default]
    Auto,
    /// Loop devices only: a pod whose volume gets none waits in
    /// `ContainerCreating` (`FailedMapVolume`) until one is free.
    Loop,
    /// The image files themselves, never a loop.
    File,
}

impl std::str::FromStr for BlockBacking {
    type Err = String;

    /// `auto`, `loop` or `file` (`--block-backing`).
    fn from_str(s: &str) -> Result<BlockBacking, String> {
        match s {
            "auto" => Ok(BlockBacking::Auto),
            "loop" => Ok(BlockBacking::Loop),
            "file" => Ok(BlockBacking::File),
            other => Err(format!("{other:?}: expected auto, loop or file")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("no free loop device")]
    NoFreeLoop,
    #[error("loop devices are unavailable: {0}")]
    Unavailable(io::Error),
    #[error("{what} {path:?}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl DeviceError {
    /// Whether a later attempt may succeed (a loop freed, another
    /// process done with the one it raced us for).
    pub fn retryable(&self) -> bool {
        match self {
            DeviceError::NoFreeLoop => true,
            DeviceError::Unavailable(_) => false,
            DeviceError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN))
            }
        }
    }

    fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> DeviceError + 'a {
        move |source| DeviceError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What a container's `volumeDevices` entry binds at its `devicePath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// A loop device node, or the image file.
    pub path: PathBuf,
    /// Whether the bind itself must be read-only (a read-only claim in file
    /// mode; a read-only loop refuses writes by itself).
    pub bind_read_only: bool,
}

/// The loops attached to one image.
#[derive(Debug, Default)]
struct Attached {
    rw: Option<u32>,
    ro: Option<u32>,
}

/// How an image gets a loop: [`attach`], or a stand-in in unit tests.
type Attach = fn(&Path, bool) -> Result<u32, DeviceError>;

/// The sandbox's loop devices, by image; shared by every kubelet and by the
/// volume controller (which detaches a deleted PV's).
#[derive(Debug)]
pub struct Devices {
    backing: BlockBacking,
    attached: Mutex<HashMap<PathBuf, Attached>>,
    attach: Attach,
}

impl Default for Devices {
    fn default() -> Devices {
        Devices::new(BlockBacking::default())
    }
}

impl Devices {
    pub fn new(backing: BlockBacking) -> Devices {
        Devices {
            backing,
            attached: Mutex::default(),
            attach,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<PathBuf, Attached>> {
        self.attached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device for `image`, read-only or not: its loop (attached now
    /// if it has none yet), or the image itself as the backing says.
    pub fn map(&self, image: &Path, read_only: bool) -> Result<Mapped, DeviceError> {
        let file = || Mapped {
            path: image.to_path_buf(),
            bind_read_only: read_only,
        };
        if self.backing == BlockBacking::File {
            return Ok(file());
        }
        // sysfs names the backing file by its canonical path.
        let canonical = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
        let image = canonical.as_path();
        let mut attached = self.lock();
        let entry = attached.entry(image.to_path_buf()).or_default();
        let slot = if read_only {
            &mut entry.ro
        } else {
            &mut entry.rw
        };
        if let Some(number) = *slot {
            if backing_file(number).as_deref() == Some(image) {
                return Ok(loop_mapped(number));
            }
            *slot = None;
        }
        match (self.attach)(image, read_only) {
            Ok(number) => {
                *slot = Some(number);
                Ok(loop_mapped(number))
            }
            Err(e) if self.backing == BlockBacking::Auto => {
                tracing::debug!(?image, "no loop device, the image file is used: {e}");
                Ok(file())
            }
            Err(e) => Err(e),
        }
    }

    /// Detaches the loops of every image under `dir` (a PV's directory or
    /// image being deleted).
    pub fn release(&self, dir: &Path) {
        let mut attached = self.lock();
        attached.retain(|image, loops| {
            if !image.starts_with(dir) {
                return true;
            }
            for number in [loops.rw, loops.ro].into_iter().flatten() {
                detach_if_backing(number, image);
            }
            false
        });
    }

    /// Detaches every loop this sandbox attached.
    pub fn release_all(&self) {
        self.release(Path::new("/"));
    }

    /// The loop numbers attached to `image` now (read-write, read-only).
    pub fn loops_of(&self, image: &Path) -> Vec<u32> {
        self.lock()
            .get(image)
            .map(|a| [a.rw, a.ro].into_iter().flatten().collect())
            .unwrap_or_default()
    }
}

fn loop_mapped(number: u32) -> Mapped {
    Mapped {
        path: loop_node(number),
        bind_read_only: false,
    }
}

pub fn loop_node(number: u32) -> PathBuf {
    PathBuf::from(format!("/dev/loop{number}"))
}

/// Attaches `image` to a free loop device; its number.
fn attach(image: &Path, read_only: bool) -> Result<u32, DeviceError> {
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open(LOOP_CONTROL)
        .map_err(DeviceError::Unavailable)?;
    let backing = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(image)
        .map_err(DeviceError::io("opening image", image))?;
    let mut last = DeviceError::NoFreeLoop;
    for _ in 0..ATTEMPTS {
        // SAFETY: an ioctl without argument on an open descriptor.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        let Ok(number) = u32::try_from(number) else {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOSPC | libc::ENODEV | libc::ENOMEM) => DeviceError::NoFreeLoop,
                _ => DeviceError::Unavailable(e),
            });
        };
        let node = loop_node(number);
        let device = match OpenOptions::new().read(true).write(true).open(&node) {
            Ok(device) => device,
            Err(e) => return Err(DeviceError::io("opening loop device", &node)(e)),
        };
        match configure(&device, &backing, image, read_only) {
            Ok(()) => return Ok(number),
            // Taken by another process since it was free: ask again.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                last = DeviceError::io("configuring loop device", &node)(e);
            }
            Err(e) => return Err(DeviceError::io("configuring loop device", &node)(e)),
        }
    }
    Err(last)
}

/// `LOOP_CONFIGURE` of `device` over `backing` (whose name is `image`).
fn configure(device: &File, backing: &File, image: &Path, read_only: bool) -> io::Result<()> {
    let fd = u32::try_from(backing.as_raw_fd())
        .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let mut file_name = [0u8; 64];
    let bytes = image.as_os_str().as_bytes();
    let len = bytes.len().min(63);
    file_name[..len].copy_from_slice(&bytes[..len]);
    let config = LoopConfig {
        fd,
        block_size: 0,
        info: LoopInfo64 {
            device: 0,
            inode: 0,
            rdevice: 0,
            offset: 0,
            sizelimit: 0,
            number: 0,
            encrypt_type: 0,
            encrypt_key_size: 0,
            flags: if read_only { LO_FLAGS_READ_ONLY } else { 0 },
            file_name,
            crypt_name: [0; 64],
            encrypt_key: [0; 32],
            init: [0; 2],
        },
        reserved: [0; 8],
    };
    // SAFETY: LOOP_CONFIGURE reads a `struct loop_config`, which `config`
    // is, alive for the call.
    let done = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE as _, &config) };
    match done {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The file loop `number` is attached to, as sysfs names it (a deleted
/// file's name ends with ` (deleted)`); None when it is not attached.
fn backing_file(number: u32) -> Option<PathBuf> {
    let at = format!("/sys/block/loop{number}/loop/backing_file");
    let text = std::fs::read(at).ok()?;
    let text = text.strip_suffix(b"\n").unwrap_or(&text);
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(text)))
}

/// Detaches loop `number` if it is still attached to `image` (it may have
/// been detached and taken by another process since). A loop still open
/// (a container not collected yet) is detached by the kernel at its last
/// close.
fn detach_if_backing(number: u32, image: &Path) {
    let Some(file) = backing_file(number) else {
        return;
    };
    let deleted = deleted_name(&file);
    if file != image && deleted.as_deref() != Some(image) {
        return;
    }
    if let Err(e) = detach(number) {
        tracing::warn!(number, ?image, "detaching the loop device: {e}");
    }
}

fn detach(number: u32) -> io::Result<()> {
    let device = File::open(loop_node(number))?;
    // SAFETY: an ioctl without argument on an open descriptor.
    let done = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CLR_FD as _) };
    match done {
        0 => Ok(()),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ENXIO) => Ok(()),
            e => Err(e),
        },
    }
}

/// `path` without sysfs's ` (deleted)` suffix, when it has one.
fn deleted_name(path: &Path) -> Option<PathBuf> {
    let bytes = path.as_os_str().as_bytes();
    bytes
        .strip_suffix(b" (deleted)")
        .map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(b)))
}

/// Detaches the loops that sandboxes left attached: those over an image
/// in `data_dir` (this sandbox's, from an earlier run), and those over an
/// image in a `kube-sandbox-*` temporary directory that no longer exists.
/// Returns how many.
pub fn detach_leaked(data_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return 0;
    };
    let mut detached = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix("loop"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(file) = backing_file(number) else {
            continue;
        };
        let (image, gone) = match deleted_name(&file) {
            Some(image) => (image, true),
            None => {
                let gone = !file.exists();
                (file, gone)
            }
        };
        if leaked(&image, gone, data_dir) && detach(number).is_ok() {
            tracing::info!(number, ?image, "detached a loop device a sandbox left");
            detached += 1;
        }
    }
    detached
}

/// Whether a loop over `image` (which is `gone`) is a sandbox's leftover.
fn leaked(image: &Path, gone: bool, data_dir: &Path) -> bool {
    if image.file_name() != Some(std::ffi::OsStr::new(IMAGE)) {
        return false;
    }
    if image.starts_with(data_dir) {
        return true;
    }
    let in_temp_sandbox = image.ancestors().any(|dir| {
        dir.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("kube-sandbox-"))
    });
    in_temp_sandbox && gone
}

/// Whether this process can attach loop devices at all (root, and
/// `/dev/loop-control` present).
pub fn loops_available() -> bool {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(LOOP_CONTROL)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_are_told_from_live_images() {
        let data = Path::new("/tmp/kube-sandbox-abc");
        let other = Path::new("/tmp/kube-sandbox-def/volumes/pvc-1/disk.img");
        assert!(leaked(&data.join("volumes/pvc-1/disk.img"), false, data));
        assert!(leaked(other, true, data), "a vanished sandbox's image");
        assert!(!leaked(other, false, data), "a running sandbox's image");
        assert!(
            !leaked(Path::new("/srv/disk.img"), true, data),
            "not a sandbox's"
        );
        let other_name = Path::new("/tmp/kube-sandbox-def/volumes/pvc-1/root.img");
        assert!(!leaked(other_name, true, data));
        assert_eq!(
            deleted_name(Path::new("/tmp/x/disk.img (deleted)")),
            Some(PathBuf::from("/tmp/x/disk.img"))
        );
    }

    #[test]
    fn auto_falls_back_to_the_image_when_no_loop_is_free() {
        let image = Path::new("/tmp/kube-sandbox-x/volumes/pvc-1/disk.img");
        let none_free: Attach = |_, _| Err(DeviceError::NoFreeLoop);
        let auto = Devices {
            attach: none_free,
            ..Devices::new(BlockBacking::Auto)
        };
        let mapped = auto.map(image, false).expect("the image instead");
        assert_eq!(
            (mapped.path.as_path(), mapped.bind_read_only),
            (image, false)
        );
        let mapped = auto.map(image, true).expect("the image instead");
        assert!(
            mapped.bind_read_only,
            "bound read-only for a read-only claim"
        );
        let only_loops = Devices {
            attach: none_free,
            ..Devices::new(BlockBacking::Loop)
        };
        let refused = only_loops.map(image, false).expect_err("no loop");
        assert!(refused.retryable(), "{refused}");
        assert!(only_loops.loops_of(image).is_empty());
    }

    #[test]
    fn file_backing_maps_the_image_itself() {
        let devices = Devices::new(BlockBacking::File);
        let image = Path::new("/tmp/kube-sandbox-x/volumes/pvc-1/disk.img");
        let mapped = devices.map(image, true).expect("mapped");
        assert_eq!(mapped.path, image);
        assert!(mapped.bind_read_only);
        assert!(devices.loops_of(image).is_empty());
    }
}
