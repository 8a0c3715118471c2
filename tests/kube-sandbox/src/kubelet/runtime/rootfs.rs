//! The container's mount tree, planned before the fork.
//!
//! [`Plan`] models what the container will see at each path (which mount
//! holds it, and what the plan created in tmpfs of ours) and records the
//! [`Op`]s that build it. Paths are resolved as the container will resolve
//! them, so an absolute symlink such as `/var/run -> /run` points into the
//! container, never out to the host.

use std::collections::{HashMap, VecDeque};
use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::child::Op;
use super::{create, Mount, RuntimeError, DEFAULT_PATH};

/// What a path in the container holds, as far as the plan knows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    File { executable: bool },
    Symlink(PathBuf),
}

/// Where the content below a container path comes from.
#[derive(Debug)]
enum Source {
    /// A tmpfs of ours, or the container's `/tmp`: it holds what the plan
    /// created there, and more can be created freely.
    Ours,
    /// A host path of the image: a new entry needs a shadow.
    Image(PathBuf),
    /// A volume's host path: the runtime never writes there.
    Volume(PathBuf),
}

/// A mount in the container, at a resolved path.
#[derive(Debug)]
struct Layer {
    at: PathBuf,
    source: Source,
}

/// A path resolved in the container: its longest existing prefix, what that
/// holds, and the components after it that do not exist, if any.
struct Resolved {
    at: PathBuf,
    entry: Option<Entry>,
    missing: VecDeque<OsString>,
}

/// The container's mount tree as it will be, and the operations building it.
#[derive(Debug)]
pub(super) struct Plan {
    /// The root's mount point on the host.
    root: PathBuf,
    /// An empty directory where shadows are assembled.
    stage: PathBuf,
    /// Mounts in order; the first is the root tmpfs at `/`.
    layers: Vec<Layer>,
    /// What the plan created in `Ours` layers, by container path.
    entries: HashMap<PathBuf, Entry>,
    ops: Vec<Op>,
}

impl Plan {
    /// The root in `scratch`: a tmpfs with the host's `/` bound entry by
    /// entry, read-only except `/proc`, and `/tmp` and `/dev` our own; or,
    /// with `image`, that unpacked image's `/` instead of the host's (see
    /// [`Plan::add_image`]).
    pub(super) fn new(scratch: &Path, image: Option<&Path>) -> Result<Self, RuntimeError> {
        let [root, stage, tmp] = ["root", "stage", "tmp"].map(|name| scratch.join(name));
        prepare_scratch(&root, &stage, &tmp).map_err(|e| {
            create(format!(
                "preparing the container's root in {scratch:?}: {e}"
            ))
        })?;
        let ops = vec![Op::Tmpfs { target: c(&root)? }];
        let layers = vec![Layer {
            at: PathBuf::from("/"),
            source: Source::Ours,
        }];
        let mut plan = Plan {
            root,
            stage,
            layers,
            entries: HashMap::new(),
            ops,
        };
        match image {
            None => {
                for name in list_dir(Path::new("/"))? {
                    plan.add_host_entry(&name, &tmp)?;
                }
            }
            Some(image) => plan.add_image(image, &tmp)?,
        }
        Ok(plan)
    }

    /// Shows the unpacked image at `image` as `/`, as runc does with a
    /// container's root file system: its entries bound read-only (the
    /// sandbox has no writable layer), `/tmp` the container's own, the
    /// host's `/proc` (its `/proc/sys` read-only) and `/sys` (read-only),
    /// and a tmpfs `/dev` holding runc's default devices, bound from the
    /// host, its `/dev/fd` and `/dev/std*` symlinks and an empty `/dev/shm`.
    fn add_image(&mut self, image: &Path, tmp: &Path) -> Result<(), RuntimeError> {
        const OURS: [&str; 4] = ["dev", "proc", "sys", "tmp"];
        for name in list_dir(image)? {
            if name.to_str().is_some_and(|n| OURS.contains(&n)) {
                continue;
            }
            let (host, at) = (image.join(&name), Path::new("/").join(&name));
            match host_entry(&host, false).map_err(|e| create(format!("{host:?}: {e}")))? {
                None => {}
                Some(Entry::Symlink(target)) => self.symlink(at, target, None)?,
                Some(entry) => {
                    self.mount(&host, &at, entry == Entry::Dir, Source::Image(host.clone()))?;
                    self.read_only(&at, true)?;
                }
            }
        }
        self.mount(tmp, Path::new("/tmp"), true, Source::Ours)?;
        for name in ["proc", "sys"] {
            let host = Path::new("/").join(name);
            self.mount(&host, &host, true, Source::Image(host.clone()))?;
        }
        let sys = Path::new("/proc/sys");
        let target = self.physical(sys)?;
        self.ops.push(Op::Bind {
            source: target.clone(),
            target,
        });
        self.read_only(sys, true)?;
        self.read_only(Path::new("/sys"), true)?;
        self.add_dev()
    }

    /// A tmpfs at `/dev` with runc's default devices bound from the host,
    /// `/dev/fd` and `/dev/std*` symlinks and an empty `/dev/shm`.
    fn add_dev(&mut self) -> Result<(), RuntimeError> {
        let dev = Path::new("/dev");
        self.ensure(dev, true)?;
        self.ops.push(Op::Tmpfs {
            target: self.physical(dev)?,
        });
        self.layers.push(Layer {
            at: dev.to_owned(),
            source: Source::Ours,
        });
        for name in ["null", "zero", "full", "random", "urandom", "tty"] {
            let host = dev.join(name);
            if host.exists() {
                self.ensure(&host, false)?;
                let target = self.physical(&host)?;
                self.ops.push(Op::Bind {
                    source: c(&host)?,
                    target,
                });
            }
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            self.symlink(dev.join(name), PathBuf::from(target), None)?;
        }
        let shm = self.ensure(&dev.join("shm"), true)?;
        self.ops.push(Op::Shm {
            target: self.physical(&shm)?,
        });
        Ok(())
    }

    /// The root's mount point on the host.
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// The operations that build the tree, in order.
    pub(super) fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// Binds a volume at its mount point, created if needed.
    pub(super) fn mount_volume(&mut self, mount: &Mount) -> Result<(), RuntimeError> {
        let host = &mount.host_path;
        let meta =
            fs::metadata(host).map_err(|e| create(format!("volume source {host:?}: {e}")))?;
        let at = self.ensure(&clean(&mount.container_path)?, meta.is_dir())?;
        let target = self.physical(&at)?;
        self.ops.push(Op::Bind {
            source: c(host)?,
            target,
        });
        if mount.read_only {
            self.read_only(&at, false)?;
        }
        self.layers.push(Layer {
            at,
            source: Source::Volume(host.clone()),
        });
        Ok(())
    }

    /// Makes sure the directory `path` exists (runc creates a missing working
    /// directory); returns it resolved.
    pub(super) fn ensure_dir(&mut self, path: &Path) -> Result<PathBuf, RuntimeError> {
        self.ensure(&clean(path)?, true)
    }

    /// Looks `name` up as runc does: a name with a slash is a path (relative
    /// to `cwd`), a bare name is searched in the `PATH` of `env`.
    pub(super) fn find_executable(
        &self,
        name: &str,
        env: &[(String, String)],
        cwd: &Path,
    ) -> Result<PathBuf, RuntimeError> {
        let error = |why: &str| RuntimeError::Start(format!("exec: {name:?}: {why}"));
        if name.contains('/') {
            let path = clean(&cwd.join(name))?;
            return match self.resolve(&path).ok().and_then(|r| r.entry) {
                None => Err(error(&format!("stat {name}: no such file or directory"))),
                Some(Entry::File { executable: true }) => Ok(path),
                Some(_) => Err(error("permission denied")),
            };
        }
        let search = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or(DEFAULT_PATH, |(_, v)| v);
        for dir in search.split(':') {
            let path = clean(&cwd.join(if dir.is_empty() { "." } else { dir }).join(name))?;
            if let Ok(Resolved {
                entry: Some(Entry::File { executable: true }),
                ..
            }) = self.resolve(&path)
            {
                return Ok(path);
            }
        }
        Err(error("executable file not found in $PATH"))
    }

    /// Shows the host's `/name` in the root. `/tmp` and `/dev` are the
    /// container's own (see [`Plan::add_dev`]); the image is read-only but
    /// for `/proc`, and `/proc/sys` is read-only too, as with runc.
    fn add_host_entry(&mut self, name: &OsStr, tmp: &Path) -> Result<(), RuntimeError> {
        let at = Path::new("/").join(name);
        if name == "tmp" {
            return self.mount(tmp, &at, true, Source::Ours);
        }
        // The container's own /dev, as runc makes it: the host's devices
        // (loop devices, disks, the images of other pods' Block volumes)
        // stay out of reach unless a `volumeDevices` entry binds one.
        if name == "dev" {
            return self.add_dev();
        }
        match host_entry(&at, false).map_err(|e| create(format!("{at:?}: {e}")))? {
            None => Ok(()),
            Some(Entry::Symlink(target)) => self.symlink(at, target, None),
            Some(entry) => {
                self.mount(&at, &at, entry == Entry::Dir, Source::Image(at.clone()))?;
                match name.to_str() {
                    Some("proc") => {
                        let sys = at.join("sys");
                        let target = self.physical(&sys)?;
                        self.ops.push(Op::Bind {
                            source: target.clone(),
                            target,
                        });
                        self.read_only(&sys, true)
                    }
                    _ => self.read_only(&at, true),
                }
            }
        }
    }

    /// Makes the mount at `at` read-only, and those below when `recursive`.
    fn read_only(&mut self, at: &Path, recursive: bool) -> Result<(), RuntimeError> {
        let target = self.physical(at)?;
        self.ops.push(Op::ReadOnly { target, recursive });
        Ok(())
    }

    /// Creates a mount point at `at` in our tmpfs and binds `host` there.
    fn mount(
        &mut self,
        host: &Path,
        at: &Path,
        dir: bool,
        source: Source,
    ) -> Result<(), RuntimeError> {
        let path = self.physical(at)?;
        self.ops.push(Op::mount_point(path.clone(), dir));
        self.ops.push(Op::Bind {
            source: c(host)?,
            target: path,
        });
        self.layers.push(Layer {
            at: at.to_owned(),
            source,
        });
        Ok(())
    }

    /// Creates the symlink `at` -> `target`, in the shadow being assembled
    /// when `staged` is given.
    fn symlink(
        &mut self,
        at: PathBuf,
        target: PathBuf,
        staged: Option<CString>,
    ) -> Result<(), RuntimeError> {
        let link = match staged {
            Some(link) => link,
            None => self.physical(&at)?,
        };
        self.ops.push(Op::Symlink {
            target: c(&target)?,
            link,
        });
        self.entries.insert(at, Entry::Symlink(target));
        Ok(())
    }

    /// Where container path `at` is on the host before `chroot`.
    fn physical(&self, at: &Path) -> Result<CString, RuntimeError> {
        c(&self.root.join(at.strip_prefix("/").unwrap_or(at)))
    }

    /// The innermost (then latest) layer holding `at`, and `at` relative to it.
    fn layer_for<'a>(&'a self, at: &'a Path) -> (&'a Layer, &'a Path) {
        let depth = |layer: &Layer| layer.at.components().count();
        let mut best = (&self.layers[0], at);
        for layer in &self.layers[1..] {
            if let Ok(rest) = at.strip_prefix(&layer.at) {
                if depth(layer) >= depth(best.0) {
                    best = (layer, rest);
                }
            }
        }
        best
    }

    /// The host path behind `at` when an image or volume layer holds it.
    fn host_path(&self, at: &Path) -> Option<PathBuf> {
        match self.layer_for(at) {
            (
                Layer {
                    source: Source::Image(host) | Source::Volume(host),
                    ..
                },
                rest,
            ) => Some(if rest.as_os_str().is_empty() {
                host.clone()
            } else {
                host.join(rest)
            }),
            _ => None,
        }
    }

    /// What the container will see at the resolved path `at`.
    fn stat(&self, at: &Path) -> Result<Option<Entry>, RuntimeError> {
        let Some(host) = self.host_path(at) else {
            let own_root = self.layer_for(at).0.at == at;
            return Ok(if own_root {
                Some(Entry::Dir)
            } else {
                self.entries.get(at).cloned()
            });
        };
        // A mount's own path shows what was bound there, symlinks followed.
        let follow = self.layer_for(at).0.at == at;
        host_entry(&host, follow).map_err(|e| create(format!("{host:?}: {e}")))
    }

    /// Resolves a clean absolute `path` as the container will, following
    /// symlinks inside the container, until a component is missing.
    fn resolve(&self, path: &Path) -> Result<Resolved, RuntimeError> {
        let mut todo = components(path);
        let (mut at, mut entry, mut links) = (PathBuf::from("/"), Entry::Dir, 0);
        while let Some(name) = todo.pop_front() {
            if name == ".." {
                at.pop();
                entry = Entry::Dir;
                continue;
            }
            if entry != Entry::Dir {
                return Err(create(format!("{path:?}: {at:?} is not a directory")));
            }
            let next = at.join(&name);
            match self.stat(&next)? {
                None => {
                    todo.push_front(name);
                    return Ok(Resolved {
                        at,
                        entry: None,
                        missing: todo,
                    });
                }
                Some(Entry::Symlink(target)) => {
                    links += 1;
                    if links > 40 {
                        return Err(create(format!(
                            "{path:?}: too many levels of symbolic links"
                        )));
                    }
                    if target.is_absolute() {
                        at = PathBuf::from("/");
                    }
                    for name in components(&target).into_iter().rev() {
                        todo.push_front(name);
                    }
                }
                Some(found) => (at, entry) = (next, found),
            }
        }
        Ok(Resolved {
            at,
            entry: Some(entry),
            missing: VecDeque::new(),
        })
    }

    /// Makes sure the clean `path` exists in the container, as a directory
    /// when `dir` or a non-directory otherwise, creating what is missing in
    /// tmpfs of ours: an image directory is shadowed first, and a volume is
    /// never written. Returns the path resolved.
    fn ensure(&mut self, path: &Path, dir: bool) -> Result<PathBuf, RuntimeError> {
        let Resolved {
            mut at,
            entry,
            missing,
        } = self.resolve(path)?;
        if let Some(entry) = entry {
            if (entry == Entry::Dir) != dir {
                let kind = if dir { "a directory" } else { "a file" };
                return Err(create(format!(
                    "cannot mount {kind} on {path:?}: it is not one"
                )));
            }
            return Ok(at);
        }
        match &self.layer_for(&at).0.source {
            Source::Ours => {}
            Source::Image(_) => self.shadow(&at)?,
            Source::Volume(host) => {
                return Err(create(format!(
                    "mount point {path:?} does not exist in the volume from {host:?}, \
                     and the sandbox does not create it there"
                )));
            }
        }
        let last = missing.len().saturating_sub(1);
        for (index, name) in missing.into_iter().enumerate() {
            if name == ".." {
                return Err(create(format!(
                    "cannot create {path:?}: `..` after a missing directory"
                )));
            }
            at.push(name);
            let is_dir = dir || index < last;
            self.ops.push(Op::mount_point(self.physical(&at)?, is_dir));
            let entry = if is_dir {
                Entry::Dir
            } else {
                Entry::File { executable: false }
            };
            self.entries.insert(at.clone(), entry);
        }
        Ok(at)
    }

    /// Covers the image directory `dir` with a tmpfs of ours holding the same
    /// entries: binds of what the container sees there now (mounts below
    /// included, read-only flags kept), and copies of its symlinks.
    fn shadow(&mut self, dir: &Path) -> Result<(), RuntimeError> {
        let host = self
            .host_path(dir)
            .ok_or_else(|| create(format!("{dir:?} is not in the image")))?;
        let (stage, target) = (c(&self.stage)?, self.physical(dir)?);
        self.ops.push(Op::Tmpfs {
            target: stage.clone(),
        });
        let mut layers = Vec::new();
        for name in list_dir(&host)? {
            let at = dir.join(&name);
            let staged = c(&self.stage.join(&name))?;
            match self.stat(&at)? {
                None => {}
                Some(Entry::Symlink(target)) => self.symlink(at, target, Some(staged))?,
                Some(entry) => {
                    self.ops
                        .push(Op::mount_point(staged.clone(), entry == Entry::Dir));
                    self.ops.push(Op::Bind {
                        source: self.physical(&at)?,
                        target: staged,
                    });
                    if self.layer_for(&at).0.at != at {
                        layers.push(Layer {
                            source: Source::Image(host.join(&name)),
                            at,
                        });
                    }
                }
            }
        }
        self.ops.push(Op::Move {
            source: stage,
            target,
        });
        self.layers.push(Layer {
            at: dir.to_owned(),
            source: Source::Ours,
        });
        self.layers.extend(layers);
        Ok(())
    }
}

/// Makes the root's and the stage's mount points, and a fresh, empty `/tmp`.
fn prepare_scratch(root: &Path, stage: &Path, tmp: &Path) -> io::Result<()> {
    for dir in [root, stage] {
        match fs::create_dir(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    match fs::remove_dir_all(tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs::create_dir(tmp)?;
    fs::set_permissions(tmp, fs::Permissions::from_mode(0o1777))
}

pub(super) fn c(path: &Path) -> Result<CString, RuntimeError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| create(format!("NUL byte in path {path:?}")))
}

/// `path` without `.`, `..` or repeated slashes, as runc cleans mount
/// destinations; it must be absolute.
fn clean(path: &Path) -> Result<PathBuf, RuntimeError> {
    if !path.is_absolute() {
        return Err(create(format!("{path:?} is not an absolute path")));
    }
    let mut cleaned = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => cleaned.push(name),
            Component::ParentDir => drop(cleaned.pop()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(cleaned)
}

/// The components of `path` as names, `..` kept, `/` and `.` dropped.
fn components(path: &Path) -> VecDeque<OsString> {
    let name = |component| match component {
        Component::Normal(name) => Some(name.to_owned()),
        Component::ParentDir => Some(OsString::from("..")),
        _ => None,
    };
    path.components().filter_map(name).collect()
}

/// What the host has at `path` (following a final symlink when `follow`).
fn host_entry(path: &Path, follow: bool) -> io::Result<Option<Entry>> {
    let meta = match if follow {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    } {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(if meta.file_type().is_symlink() {
        Entry::Symlink(fs::read_link(path)?)
    } else if meta.is_dir() {
        Entry::Dir
    } else {
        Entry::File {
            executable: meta.is_file() && meta.mode() & 0o111 != 0,
        }
    }))
}

/// The names in host directory `dir`, sorted.
pub(super) fn list_dir(dir: &Path) -> Result<Vec<OsString>, RuntimeError> {
    let names = fs::read_dir(dir).and_then(|entries| {
        entries
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<io::Result<Vec<_>>>()
    });
    let mut names = names.map_err(|e| create(format!("listing {dir:?}: {e}")))?;
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> (tempfile::TempDir, Plan) {
        let scratch = tempfile::tempdir().expect("temp dir");
        let plan = Plan::new(scratch.path(), None).expect("plan");
        (scratch, plan)
    }

    #[test]
    fn paths_resolve_inside_the_container() {
        let (_scratch, mut plan) = plan();
        assert_eq!(
            plan.resolve(Path::new("/bin/")).expect("resolve").at,
            Path::new("/usr/bin")
        );
        // An absolute symlink on the host points into the container.
        let at = plan
            .ensure_dir(Path::new("/var/run/./ks/../ks2"))
            .expect("created");
        assert_eq!(at, Path::new("/run/ks2"));
        assert_eq!(
            plan.stat(Path::new("/run/ks2")).expect("stat"),
            Some(Entry::Dir)
        );
        assert!(
            !Path::new("/run/ks2").exists(),
            "nothing is made on the host while planning"
        );
    }

    #[test]
    fn a_new_entry_in_the_image_shadows_its_directory() {
        let (_scratch, mut plan) = plan();
        assert!(matches!(
            plan.layer_for(Path::new("/etc")).0.source,
            Source::Image(_)
        ));
        plan.ensure(Path::new("/etc/ks-new/file"), false)
            .expect("created");
        let etc = plan.layer_for(Path::new("/etc")).0;
        assert!(
            matches!(etc.source, Source::Ours),
            "/etc is shadowed: {etc:?}"
        );
        assert_eq!(
            plan.stat(Path::new("/etc/ks-new/file")).expect("stat"),
            Some(Entry::File { executable: false })
        );
        // Entries of the host's /etc are still there, from the host.
        assert_eq!(
            plan.host_path(Path::new("/etc/passwd")),
            Some(PathBuf::from("/etc/passwd"))
        );
        assert_eq!(
            plan.stat(Path::new("/etc/passwd")).expect("stat"),
            host_entry(Path::new("/etc/passwd"), false).ok().flatten()
        );
    }

    #[test]
    fn kinds_must_match_and_paths_must_be_absolute() {
        let (_scratch, mut plan) = plan();
        assert!(
            plan.ensure(Path::new("/etc"), false).is_err(),
            "a file on a directory"
        );
        assert!(
            plan.ensure(Path::new("/etc/passwd/x"), true).is_err(),
            "below a file"
        );
        assert!(plan.ensure_dir(Path::new("relative")).is_err());
        assert_eq!(
            clean(Path::new("/a/./b/../../c//d/")).expect("clean"),
            Path::new("/c/d")
        );
    }
}
