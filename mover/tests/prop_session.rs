//! Property test of whole sessions through the library over an in-memory
//! duplex: random trees, then random edits, and after every sync the
//! destination's BLAKE3 manifest (contents and metadata) equals the source's.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use mover::manifest::{Manifest, ManifestOptions};
use mover::protocol::SessionOptions;
use mover::session::local;
use proptest::prelude::*;
use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};

#[derive(Debug, Clone)]
enum Node {
    Dir,
    File { len: usize, seed: u8 },
    Symlink(String),
    HardLink(usize),
}

#[derive(Debug, Clone)]
struct Spec {
    parent: usize,
    name: String,
    node: Node,
    perm: u32,
    mtime: (i64, u32),
}

#[derive(Debug, Clone)]
enum Edit {
    Overwrite { at: usize, len: usize },
    Append(usize),
    Truncate,
    Remove,
    Chmod(u32),
    Touch(i64),
    ReplaceWithDir,
    AddFile(usize),
}

fn spec() -> impl Strategy<Value = Spec> {
    let node = prop_oneof![
        2 => Just(Node::Dir),
        5 => (0usize..70_000, any::<u8>()).prop_map(|(len, seed)| Node::File { len, seed }),
        1 => "[a-z]{1,8}".prop_map(Node::Symlink),
        1 => any::<usize>().prop_map(Node::HardLink),
    ];
    (
        any::<usize>(),
        "[a-e]{1,3}",
        node,
        prop::sample::select(vec![0o644, 0o600, 0o755, 0o444, 0o4755]),
        (1_000_000i64..2_000_000_000, 0u32..1_000_000_000),
    )
        .prop_map(|(parent, name, node, perm, mtime)| Spec {
            parent,
            name,
            node,
            perm,
            mtime,
        })
}

fn edit() -> impl Strategy<Value = (usize, Edit)> {
    let e = prop_oneof![
        (any::<usize>(), 1usize..5000).prop_map(|(at, len)| Edit::Overwrite { at, len }),
        (1usize..10_000).prop_map(Edit::Append),
        Just(Edit::Truncate),
        Just(Edit::Remove),
        prop::sample::select(vec![0o600, 0o640, 0o2755]).prop_map(Edit::Chmod),
        (1_000_000i64..2_000_000_000).prop_map(Edit::Touch),
        Just(Edit::ReplaceWithDir),
        (0usize..20_000).prop_map(Edit::AddFile),
    ];
    (any::<usize>(), e)
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    // Repetitive but not constant, so deltas find both matches and misses.
    (0..len)
        .map(|i| (i / 7) as u8 ^ seed.wrapping_mul(i as u8 | 1))
        .collect()
}

fn set_mtime(path: &Path, (sec, nsec): (i64, u32)) {
    let t = Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    };
    rustix::fs::utimensat(
        CWD,
        path,
        &Timestamps {
            last_access: t,
            last_modification: t,
        },
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

/// Materializes specs under `root`; returns the paths of created non-directory entries.
fn build(root: &Path, specs: &[Spec]) -> Vec<PathBuf> {
    let mut dirs = vec![root.to_path_buf()];
    let mut files: Vec<PathBuf> = Vec::new();
    let mut made = Vec::new();
    let mut dir_times = Vec::new();
    for s in specs {
        let path = dirs[s.parent % dirs.len()].join(&s.name);
        if fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        match &s.node {
            Node::Dir => {
                fs::create_dir(&path).unwrap();
                dirs.push(path.clone());
                dir_times.push((path.clone(), s.mtime));
                continue;
            }
            Node::File { len, seed } => {
                fs::write(&path, content(*len, *seed)).unwrap();
                fs::set_permissions(&path, fs::Permissions::from_mode(s.perm)).unwrap();
                files.push(path.clone());
            }
            Node::Symlink(t) => std::os::unix::fs::symlink(t, &path).unwrap(),
            Node::HardLink(i) if !files.is_empty() => {
                fs::hard_link(&files[i % files.len()], &path).unwrap()
            }
            Node::HardLink(_) => continue,
        }
        set_mtime(&path, s.mtime);
        made.push(path);
    }
    for (d, t) in dir_times.iter().rev() {
        set_mtime(d, *t);
    }
    made
}

fn apply(paths: &[PathBuf], edits: &[(usize, Edit)]) {
    for (i, e) in edits {
        if paths.is_empty() {
            return;
        }
        let p = &paths[i % paths.len()];
        let Ok(md) = fs::symlink_metadata(p) else {
            continue;
        };
        let is_file = md.is_file();
        match e {
            Edit::Overwrite { at, len } if is_file && md.len() > 0 => {
                let mut data = fs::read(p).unwrap();
                let at = at % data.len();
                let end = (at + len).min(data.len());
                data[at..end]
                    .iter_mut()
                    .for_each(|b| *b = b.wrapping_add(1));
                fs::write(p, data).unwrap();
            }
            Edit::Append(n) if is_file => {
                let mut data = fs::read(p).unwrap();
                data.extend(content(*n, 3));
                fs::write(p, data).unwrap();
            }
            Edit::Truncate if is_file => fs::write(p, b"").unwrap(),
            Edit::Remove if !md.is_dir() => fs::remove_file(p).unwrap(),
            Edit::Chmod(m) if is_file => {
                fs::set_permissions(p, fs::Permissions::from_mode(*m)).unwrap()
            }
            Edit::Touch(t) if !md.is_dir() => set_mtime(p, (*t, 0)),
            Edit::ReplaceWithDir if !md.is_dir() => {
                fs::remove_file(p).unwrap();
                fs::create_dir(p).unwrap();
                fs::write(p.join("inside"), b"x").unwrap();
            }
            Edit::AddFile(n) => {
                let _ = fs::write(p.with_extension("new"), content(*n, 9));
            }
            _ => {}
        }
    }
}

fn sync_and_compare(
    rt: &tokio::runtime::Runtime,
    src: &Path,
    dst: &Path,
    opts: &SessionOptions,
) -> Result<(), TestCaseError> {
    let summary = rt
        .block_on(local::sync(
            src.to_path_buf(),
            dst.to_path_buf(),
            opts.clone(),
            Default::default(),
        ))
        .map_err(|e| TestCaseError::fail(format!("sync failed: {e}")))?;
    prop_assert_eq!(summary.files_failed, 0);
    let mo = ManifestOptions {
        owner: rustix::process::geteuid().is_root(),
        root_meta: true,
    };
    let a = Manifest::of(src, mo).unwrap();
    let b = Manifest::of(dst, mo).unwrap();
    prop_assert!(
        a.digest == b.digest,
        "trees differ:\n{}",
        a.diff(&b).join("\n")
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn receiver_tree_equals_source(
        specs in proptest::collection::vec(spec(), 1..40),
        edits in proptest::collection::vec(edit(), 0..12),
        whole_file in any::<bool>(),
        compress in any::<bool>(),
        inplace in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        fs::create_dir(&src).unwrap();
        let paths = build(&src, &specs);
        let opts = SessionOptions { delete: true, whole_file, inplace, compress: compress.then_some(3), ..SessionOptions::default() };
        sync_and_compare(&rt, &src, &dst, &opts)?;
        apply(&paths, &edits);
        sync_and_compare(&rt, &src, &dst, &opts)?;
        // A third run with nothing changed transfers nothing.
        let again = rt.block_on(local::sync(src.clone(), dst.clone(), opts, Default::default())).unwrap();
        prop_assert_eq!(again.files_transferred, 0);
    }
}
