//! Comparing two trees by lstat metadata and contents.

use super::*;

/// Pre-order walk (lstat only, sorted by name) returning (relative path bytes, absolute path,
/// metadata); the root itself comes first with an empty relative path.
pub fn walk(root: &Path) -> Vec<(Vec<u8>, PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(abs) = stack.pop() {
        let md = check(fs::symlink_metadata(&abs), "lstat", &abs);
        if md.is_dir() {
            let entries = check(fs::read_dir(&abs), "read_dir", &abs);
            let mut children: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
            children.sort_by(|a, b| b.cmp(a)); // reversed: popped in ascending order
            stack.extend(children);
        }
        let rel = abs
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        out.push((rel, abs, md));
    }
    out
}

/// Fewer than half of the apparent size is allocated (st_blocks * 512 < st_size / 2).
pub fn is_sparse(path: &Path) -> bool {
    sparse_md(&check(fs::symlink_metadata(path), "lstat", path))
}

fn sparse_md(md: &fs::Metadata) -> bool {
    md.blocks() * 512 < md.size() / 2
}

/// Human-readable rendering of a relative path given as bytes (escapes newlines, bad UTF-8).
pub fn show(rel: &[u8]) -> String {
    if rel.is_empty() {
        ".".to_string()
    } else {
        format!("{:?}", OsStr::from_bytes(rel))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CompareOpts {
    /// Ignore the mtime of the two roots themselves.
    pub skip_root_mtime: bool,
    /// Compare uid/gid; defaults to "running as root".
    pub check_owner: bool,
}

impl Default for CompareOpts {
    fn default() -> Self {
        CompareOpts {
            skip_root_mtime: false,
            check_owner: is_root(),
        }
    }
}

struct Entry {
    kind: &'static str,
    md: fs::Metadata,
    hash: Option<blake3::Hash>,
    target: Option<PathBuf>,
}

fn kind_of(ft: fs::FileType) -> &'static str {
    let kinds = [
        (ft.is_symlink(), "symlink"),
        (ft.is_dir(), "directory"),
        (ft.is_file(), "regular file"),
        (ft.is_fifo(), "fifo"),
        (ft.is_char_device(), "char device"),
        (ft.is_block_device(), "block device"),
        (ft.is_socket(), "socket"),
    ];
    kinds.iter().find(|k| k.0).map_or("unknown", |k| k.1)
}

fn scan(root: &Path) -> BTreeMap<Vec<u8>, Entry> {
    let mut map = BTreeMap::new();
    for (rel, abs, md) in walk(root) {
        let kind = kind_of(md.file_type());
        let hash = (kind == "regular file").then(|| {
            let f = check(fs::File::open(&abs), "open", &abs);
            blake3::Hasher::new().update_reader(f).unwrap().finalize()
        });
        let target = md
            .is_symlink()
            .then(|| check(fs::read_link(&abs), "readlink", &abs));
        map.insert(
            rel,
            Entry {
                kind,
                md,
                hash,
                target,
            },
        );
    }
    map
}

/// Compares everything (see [`compare_trees_opts`]) including the roots' mtimes.
pub fn compare_trees(a: &Path, b: &Path) -> Vec<String> {
    compare_trees_opts(a, b, CompareOpts::default())
}

/// Walks both trees with lstat and lists every difference ("A" is `a`, "B" is `b`):
/// paths, file types, mode & 0o7777, uid/gid (when `check_owner`), mtime sec+nsec for every
/// entry, size + BLAKE3 of regular files, sparseness of regular files >= 1 MiB (sparse in A
/// implies sparse in B), symlink targets, device numbers and hard-link structure.
pub fn compare_trees_opts(a: &Path, b: &Path, opts: CompareOpts) -> Vec<String> {
    let (ta, tb) = (scan(a), scan(b));
    let mut diffs = Vec::new();
    for (rel, e) in ta.iter().filter(|(k, _)| !tb.contains_key(*k)) {
        diffs.push(format!("{}: only in A ({})", show(rel), e.kind));
    }
    for (rel, e) in tb.iter().filter(|(k, _)| !ta.contains_key(*k)) {
        diffs.push(format!("{}: only in B ({})", show(rel), e.kind));
    }
    for (rel, x) in &ta {
        let Some(y) = tb.get(rel) else { continue };
        let mut d = |what: String| diffs.push(format!("{}: {what}", show(rel)));
        let (m, n) = (&x.md, &y.md);
        if x.kind != y.kind {
            d(format!("type {} in A, {} in B", x.kind, y.kind));
            continue;
        }
        if m.mode() & 0o7777 != n.mode() & 0o7777 {
            d(format!(
                "mode {:04o} in A, {:04o} in B",
                m.mode() & 0o7777,
                n.mode() & 0o7777
            ));
        }
        if opts.check_owner && (m.uid(), m.gid()) != (n.uid(), n.gid()) {
            d(format!(
                "owner {}:{} in A, {}:{} in B",
                m.uid(),
                m.gid(),
                n.uid(),
                n.gid()
            ));
        }
        let (ta, tb) = ((m.mtime(), m.mtime_nsec()), (n.mtime(), n.mtime_nsec()));
        if ta != tb && !(rel.is_empty() && opts.skip_root_mtime) {
            d(format!(
                "mtime {}.{:09} in A, {}.{:09} in B",
                ta.0, ta.1, tb.0, tb.1
            ));
        }
        if x.kind == "regular file" && m.size() != n.size() {
            d(format!("size {} in A, {} in B", m.size(), n.size()));
        } else if x.hash != y.hash {
            d("contents differ (BLAKE3)".to_string());
        }
        if x.kind == "regular file" && m.size() >= MIB as u64 && sparse_md(m) && !sparse_md(n) {
            d("sparse in A, not sparse in B".to_string());
        }
        if x.target != y.target {
            let t = |e: &Entry| {
                show(
                    e.target
                        .as_deref()
                        .unwrap_or(Path::new(""))
                        .as_os_str()
                        .as_bytes(),
                )
            };
            d(format!("symlink target {} in A, {} in B", t(x), t(y)));
        }
        if x.kind.ends_with("device") && m.rdev() != n.rdev() {
            d(format!(
                "device number {:#x} in A, {:#x} in B",
                m.rdev(),
                n.rdev()
            ));
        }
    }
    diffs.extend(compare_hard_links(&ta, &tb));
    diffs
}

/// For each non-directory path present in both trees, the set of common paths sharing its inode
/// must be the same in both trees.
fn compare_hard_links(ta: &BTreeMap<Vec<u8>, Entry>, tb: &BTreeMap<Vec<u8>, Entry>) -> Vec<String> {
    let is_dir = |e: Option<&Entry>| e.is_none_or(|e| e.kind == "directory");
    let common: Vec<&Vec<u8>> = ta
        .keys()
        .filter(|k| !is_dir(ta.get(*k)) && !is_dir(tb.get(*k)))
        .collect();
    let inode = |e: &Entry| (e.md.dev(), e.md.ino());
    let groups = |t: &BTreeMap<Vec<u8>, Entry>| {
        let mut g: HashMap<(u64, u64), BTreeSet<Vec<u8>>> = HashMap::new();
        for k in &common {
            g.entry(inode(&t[*k])).or_default().insert((*k).clone());
        }
        g
    };
    let (ga, gb) = (groups(ta), groups(tb));
    let mut seen = BTreeSet::new();
    let mut diffs = Vec::new();
    for k in &common {
        let (sa, sb) = (&ga[&inode(&ta[*k])], &gb[&inode(&tb[*k])]);
        if sa != sb && seen.insert((sa, sb)) {
            let list =
                |s: &BTreeSet<Vec<u8>>| s.iter().map(|p| show(p)).collect::<Vec<_>>().join(", ");
            let (la, lb) = (list(sa), list(sb));
            diffs.push(format!(
                "{}: hard links differ: inode shared by [{la}] in A, by [{lb}] in B",
                show(k)
            ));
        }
    }
    diffs
}

/// Panics listing all differences if the trees differ.
pub fn assert_trees_equal(a: &Path, b: &Path, opts: CompareOpts, context: &str) {
    let diffs = compare_trees_opts(a, b, opts);
    let (n, a, b, all) = (diffs.len(), a.display(), b.display(), diffs.join("\n  "));
    assert!(
        diffs.is_empty(),
        "{context}: {n} difference(s) between A={a} and B={b}:\n  {all}"
    );
}
