//! Property test of block sessions through the library (`session::local`,
//! the sender and receiver joined in memory): random images of data, written
//! zeros and holes, sizes from 0 to a few hundred KiB with the block
//! boundaries among them, copied into a new image; then random edits of the
//! source (and of the destination behind its back), and a re-sync. After
//! every sync the destination's first `size` bytes are the source's, and
//! whatever it holds past them is untouched.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use mover::block::BlockShape;
use mover::protocol::SessionOptions;
use mover::session::local;
use proptest::prelude::*;
use rustix::fs::{fallocate, FallocateFlags};

const B: u64 = 16 << 10;
const MAX: u64 = 300 << 10;

/// What a range of an image becomes.
#[derive(Debug, Clone, Copy)]
enum Fill {
    Data(u8),
    Zeros,
    Hole,
}

/// A range as fractions of the image (so that it fits any size).
#[derive(Debug, Clone, Copy)]
struct Range {
    at: u32,
    len: u32,
    fill: Fill,
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        3 => any::<u8>().prop_map(Fill::Data),
        1 => Just(Fill::Zeros),
        1 => Just(Fill::Hole),
    ]
}

fn ranges(n: usize) -> impl Strategy<Value = Vec<Range>> {
    let range =
        (any::<u32>(), 0u32..70_000, fill()).prop_map(|(at, len, fill)| Range { at, len, fill });
    prop::collection::vec(range, 0..n)
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0..=MAX,
        1 => prop::sample::select(vec![
            0,
            1,
            B - 1,
            B,
            B + 1,
            2 * B,
            5 * B - 1,
            5 * B,
            5 * B + 1,
            MAX,
        ]),
    ]
}

/// Applies `r` to `f`, a file of `size` bytes; blocks are 4 KiB-aligned
/// half the time, so that holes are real holes.
fn apply(f: &File, size: u64, r: Range) {
    if size == 0 {
        return;
    }
    let mut at = r.at as u64 % size;
    let mut len = (r.len as u64).min(size - at);
    if r.at & 1 == 0 {
        at = at / 4096 * 4096;
        len = len.next_multiple_of(4096).min(size - at);
    }
    if len == 0 {
        return;
    }
    match r.fill {
        Fill::Data(seed) => {
            let data: Vec<u8> = (0..len)
                .map(|i| seed ^ (i as u8).wrapping_mul(31) ^ (i >> 8) as u8)
                .collect();
            f.write_all_at(&data, at).unwrap();
        }
        Fill::Zeros => f.write_all_at(&vec![0; len as usize], at).unwrap(),
        Fill::Hole => {
            let punch = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            if fallocate(f, punch, at, len).is_err() {
                f.write_all_at(&vec![0; len as usize], at).unwrap();
            }
        }
    }
}

fn image(path: &Path, size: u64, rs: &[Range]) {
    let f = File::create(path).unwrap();
    f.set_len(size).unwrap();
    for r in rs {
        apply(&f, size, *r);
    }
}

fn edit(path: &Path, rs: &[Range]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    let size = f.metadata().unwrap().len();
    for r in rs {
        apply(&f, size, *r);
    }
}

/// Syncs `src` into `dst` and checks the bytes: `dst` starts with `src`,
/// and its bytes past the source's size are those it had (`before`).
fn sync_and_check(
    rt: &tokio::runtime::Runtime,
    src: &Path,
    dst: &Path,
    compress: bool,
    verify: bool,
) -> Result<mover::stats::Summary, TestCaseError> {
    let before = fs::read(dst).unwrap_or_default();
    let opts = SessionOptions {
        whole_file: false,
        compress: compress.then_some(1),
        verify,
        ..SessionOptions::default()
    };
    let summary = rt
        .block_on(local::sync(
            src.to_path_buf(),
            dst.to_path_buf(),
            opts,
            Default::default(),
        ))
        .map_err(|e| TestCaseError::fail(format!("sync: {e}")))?;
    let (s, d) = (fs::read(src).unwrap(), fs::read(dst).unwrap());
    prop_assert!(d.len() >= s.len(), "{} < {}", d.len(), s.len());
    prop_assert!(
        d[..s.len()] == s[..],
        "the destination differs from the source"
    );
    if before.len() > s.len() {
        prop_assert!(d[s.len()..] == before[s.len()..], "the tail changed");
    }
    let block = summary.block.as_ref().expect("a block summary");
    prop_assert_eq!(
        block.block_len,
        BlockShape::for_size(s.len() as u64).block_len
    );
    if verify {
        prop_assert_eq!(summary.verify.as_ref().map(|v| v.passed), Some(true));
    }
    Ok(summary)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_block_destination_equals_its_source(
        size in size(),
        shape in ranges(8),
        src_edits in ranges(6),
        dst_edits in ranges(3),
        shrink in prop::option::weighted(0.2, 0..MAX),
        compress in any::<bool>(),
        verify in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src.img"), t.path().join("dst.img"));
        image(&src, size, &shape);
        // Into a new image.
        sync_and_check(&rt, &src, &dst, compress, verify)?;
        // The source edited (and perhaps cut shorter: the destination keeps
        // its tail), the destination changed behind the sender's back.
        edit(&src, &src_edits);
        if let Some(to) = shrink {
            let f = OpenOptions::new().write(true).open(&src).unwrap();
            f.set_len(to.min(size)).unwrap();
        }
        edit(&dst, &dst_edits);
        sync_and_check(&rt, &src, &dst, compress, verify)?;
        // Nothing to send the second time: every block is copied.
        let again = sync_and_check(&rt, &src, &dst, compress, false)?;
        let zeroed = again.block.as_ref().map_or(0, |b| b.bytes_zeroed);
        prop_assert_eq!((again.bytes_literal, zeroed), (0, 0));
    }
}

/// Regression: the receiver's progress ticker, aborted at the end of the
/// data, could still queue a `Progress` after `Done` when it was being
/// polled on another worker at that moment; the sender, done, had closed
/// the connection, and the receiver failed with a broken pipe. Small
/// sessions, over in a few milliseconds, hit it about once in a thousand.
#[test]
fn many_small_syncs_all_end_cleanly() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = tempfile::tempdir().unwrap();
    let (src, dst) = (t.path().join("src.img"), t.path().join("dst.img"));
    for i in 0..1000u32 {
        // A new destination each time, of a size and content that vary.
        let len = (i as usize * 7919) % (5 * B as usize);
        let data: Vec<u8> = (0..len).map(|j| (j as u32 ^ i) as u8).collect();
        fs::write(&src, data).unwrap();
        let _ = fs::remove_file(&dst);
        let opts = SessionOptions {
            whole_file: false,
            compress: (i % 2 == 0).then_some(1),
            ..SessionOptions::default()
        };
        let r = rt.block_on(local::sync(
            src.clone(),
            dst.clone(),
            opts,
            Default::default(),
        ));
        assert!(r.is_ok(), "sync {i}: {:?}", r.err());
    }
    assert_eq!(fs::read(&dst).unwrap(), fs::read(&src).unwrap());
}
