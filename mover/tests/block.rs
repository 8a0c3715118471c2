//! Block sessions over TCP with the real binary: an image with data, written
//! zeros and holes is copied and re-synced byte for byte, holes stay holes,
//! a killed attempt resumes from its checkpoint, and a destination that
//! cannot hold the source is refused before anything is written.

mod common;

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use common::attempts::Rng;
use common::proxy::Proxy;
use common::*;

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 16 << 10;

/// A sparse image of `size` bytes: `extents` random extents of 1-4 MiB at
/// seeded offsets, `zeros` bytes of written zeros, holes elsewhere.
fn image(path: &Path, seed: u64, size: u64, extents: usize, zeros: u64) {
    let f = File::create(path).unwrap();
    f.set_len(size).unwrap();
    let mut rng = Rng(seed);
    for i in 0..extents {
        let len = rng.range(MIB, 4 * MIB);
        let at = rng.range(0, size - len) / 4096 * 4096;
        f.write_all_at(&random_bytes(&format!("{seed}-{i}"), len as usize), at)
            .unwrap();
    }
    let at = rng.range(0, size - zeros) / 4096 * 4096;
    f.write_all_at(&vec![0; zeros as usize], at).unwrap();
    f.sync_all().unwrap();
}

fn hash(path: &Path) -> blake3::Hash {
    blake3::hash(&fs::read(path).unwrap())
}

fn allocated(path: &Path) -> u64 {
    fs::metadata(path).unwrap().blocks() * 512
}

/// The source's holes of at least two blocks are holes at the destination
/// (their block-aligned insides: a block that is part data is sent whole).
fn assert_holes_kept(src: &Path, dst: &Path) {
    use rustix::fs::{seek, SeekFrom};
    let (s, d) = (File::open(src).unwrap(), File::open(dst).unwrap());
    let size = s.metadata().unwrap().len();
    let mut at = 0;
    let mut checked = 0;
    while at < size {
        let hole = match seek(&s, SeekFrom::Hole(at)) {
            Ok(h) if h < size => h,
            _ => break,
        };
        let data = seek(&s, SeekFrom::Data(hole)).unwrap_or(size);
        let (inner_start, inner_end) = (hole.next_multiple_of(BLOCK), data / BLOCK * BLOCK);
        if inner_end >= inner_start + BLOCK {
            let next_data = seek(&d, SeekFrom::Data(inner_start)).unwrap_or(size);
            assert!(
                next_data >= inner_end,
                "the source's hole {inner_start}..{inner_end} has data at {next_data} at the destination"
            );
            checked += inner_end - inner_start;
        }
        at = data;
    }
    assert!(checked > 0, "no hole was checked: the test proves nothing");
}

#[test]
fn an_image_is_copied_then_resynced_with_its_holes_kept() {
    let dir = scratch();
    let (src, dst) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    image(&src, 0xb10c, 256 * MIB, 24, 16 * MIB);
    let (s, r) = tcp_transfer_ok(&src, &dst, &["--verify"]);
    assert_eq!(hash(&dst), hash(&src));
    let v = r.summary();
    assert_eq!(v["verify"]["passed"], true, "{v}");
    assert_eq!(fs::metadata(&dst).unwrap().len(), 256 * MIB);
    assert!(
        allocated(&dst) <= allocated(&src),
        "the destination takes {} bytes, the source {}",
        allocated(&dst),
        allocated(&src)
    );
    assert_holes_kept(&src, &dst);
    // The source's holes were not even read.
    assert!(
        s.stat("source_bytes_read") < 2 * 256 * MIB,
        "{}",
        s.summary()
    );

    // 64 scattered 4 KiB writes, some into holes; and 1 MiB of data zeroed.
    let f = fs::OpenOptions::new().write(true).open(&src).unwrap();
    let data = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(0)).unwrap();
    let zeroed = data.next_multiple_of(BLOCK);
    f.write_all_at(&vec![0; MIB as usize], zeroed).unwrap();
    let mut rng = Rng(7);
    for i in 0..64 {
        let at = rng.range(0, 256 * MIB - 4096) / 4096 * 4096;
        f.write_all_at(&random_bytes(&format!("w{i}"), 4096), at)
            .unwrap();
    }
    drop(f);
    let (s, r) = tcp_transfer_ok(&src, &dst, &[]);
    assert_eq!(hash(&dst), hash(&src));
    assert_holes_kept(&src, &dst);
    let sums = 256 * MIB / BLOCK * 16;
    let wire = r.stat("bytes_on_wire");
    assert!(
        wire <= sums + 64 * BLOCK * 11 / 10 + 64 * 1024,
        "{wire} bytes on the wire for 64 changed blocks: {}",
        s.summary()
    );
    assert!(r.stat("bytes_literal") <= 64 * BLOCK, "{}", r.summary());
    // The zeroed MiB became a hole at the destination.
    assert_eq!(
        r.summary()["block"]["zero_method"],
        "punch-hole",
        "{}",
        r.summary()
    );
    let d = File::open(&dst).unwrap();
    let next = rustix::fs::seek(&d, rustix::fs::SeekFrom::Data(zeroed)).unwrap();
    assert!(
        next >= zeroed + MIB - 64 * BLOCK,
        "data at {next} in the zeroed MiB at {zeroed}"
    );
}

#[test]
fn killed_attempts_resume_from_their_verified_prefix() {
    let dir = scratch();
    let (src, dst) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    // Random data with a zero run in the middle, so that holes are resumed too.
    let mut data = random_bytes("resume", 64 * MIB as usize);
    data[20 * MIB as usize..24 * MIB as usize].fill(0);
    fs::write(&src, &data).unwrap();
    let state = dir.path().join(".dst.img.volmig");
    // Three attempts stopped at seeded points, by a different fault each,
    // then one that finishes.
    let mut rng = Rng(0x6b11);
    let mut last_done = 0;
    for n in 1..=4u32 {
        let args = ["--operation-id", "blk", "--attempt", &n.to_string()];
        let mut receiver = spawn_receiver(&dst, &args);
        let proxy = Proxy::start(receiver.addr);
        let mut send_args = args.to_vec();
        send_args.extend(["--bwlimit", "6M"]);
        let mut sender = spawn_sender(proxy.addr(), &src, &send_args);
        if n == 4 {
            let s = sender.wait(std::time::Duration::from_secs(60));
            let r = receiver.wait(std::time::Duration::from_secs(30));
            assert_eq!(
                (s.code, r.code),
                (Some(0), Some(0)),
                "{}\n{}",
                s.describe(),
                r.describe()
            );
            let resumed = r.stat("bytes_resumed");
            assert!(
                resumed >= last_done,
                "resumed from {resumed}, {last_done} was verified"
            );
            assert!(
                r.stat("bytes_literal") + resumed <= 64 * MIB,
                "resent what was verified: {}",
                r.summary()
            );
            break;
        }
        let kill_after = rng.range(2 * MIB, 6 * MIB);
        let up = proxy.up_counter();
        while up.load(std::sync::atomic::Ordering::Relaxed) < kill_after && !sender.exited() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // A checkpoint is recorded every second: let one be.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        match n {
            1 => receiver.proc.kill(),
            2 => proxy.cut(),
            _ => sender.kill(),
        }
        let out = sender.wait(std::time::Duration::from_secs(30));
        let r = receiver.wait(std::time::Duration::from_secs(30));
        assert_ne!(out.code, Some(0), "attempt {n} was not interrupted");
        assert_ne!(r.code, Some(0), "attempt {n} was not interrupted");
        let cp = &inspect_image(&dst)["checkpoint"];
        assert_eq!(cp["operation_id"], "blk", "attempt {n}: {cp}");
        let done = cp["bytes_done"].as_u64().unwrap_or(0);
        assert!(done > last_done, "attempt {n} verified nothing more: {cp}");
        // What the checkpoint claims is the source's.
        let held = fs::read(&dst).unwrap();
        let done = done as usize;
        assert!(
            held[..done] == data[..done],
            "attempt {n}: the verified prefix differs"
        );
        last_done = done as u64;
    }
    assert_eq!(hash(&dst), hash(&src));
    assert!(!state.exists(), "the state directory was left behind");
}

/// `mover inspect` of an image, parsed.
fn inspect_image(path: &Path) -> serde_json::Value {
    let out = run_mover([
        std::ffi::OsStr::new("inspect"),
        "--root".as_ref(),
        path.as_os_str(),
    ]);
    out.assert_ok();
    serde_json::from_str(out.stdout.trim()).unwrap()
}

#[test]
fn a_smaller_destination_is_refused_before_anything_is_written() {
    let dir = scratch();
    let (src, dst) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    fs::write(&src, random_bytes("big", 2 * MIB as usize)).unwrap();
    fs::write(&dst, vec![0xAB; MIB as usize]).unwrap();
    set_mtime(&dst, 1_600_000_000, 0);
    let args = ["--operation-id", "small"];
    let (s, r) = tcp_transfer(&src, &dst, &args, &[]);
    r.assert_failed(&[11], "receiver");
    s.assert_failed(&[13], "sender");
    assert!(
        r.stderr.contains("less than the source's 2097152") && r.stderr.contains("1048576"),
        "{}",
        r.describe()
    );
    assert_eq!(fs::read(&dst).unwrap(), vec![0xAB; MIB as usize]);
    assert_eq!(fs::metadata(&dst).unwrap().mtime(), 1_600_000_000);
    assert!(!dir.path().join(".dst.img.volmig").exists());
}

#[test]
fn a_larger_destination_keeps_its_tail_unless_asked_to_zero_it() {
    let dir = scratch();
    let (src, dst) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    let data = random_bytes("tail", 2 * MIB as usize);
    fs::write(&src, &data).unwrap();
    fs::write(&dst, vec![0xAB; 3 * MIB as usize]).unwrap();
    tcp_transfer_ok(&src, &dst, &[]);
    let after = fs::read(&dst).unwrap();
    assert!(after[..data.len()] == data[..] && after[data.len()..].iter().all(|&b| b == 0xAB));
    let (_, r) = tcp_transfer_ok(&src, &dst, &["--zero-tail"]);
    let after = fs::read(&dst).unwrap();
    assert_eq!(after.len(), 3 * MIB as usize);
    assert!(after[..data.len()] == data[..] && after[data.len()..].iter().all(|&b| b == 0));
    assert_eq!(r.summary()["block"]["tail_zeroed"], MIB, "{}", r.summary());
}

#[test]
fn trees_and_blocks_do_not_mix() {
    let dir = scratch();
    let (img, tree) = (dir.path().join("src.img"), dir.path().join("tree"));
    fs::write(&img, random_bytes("mix", 100_000)).unwrap();
    mkdirs(&tree);
    // An image into a directory.
    let (s, r) = tcp_transfer(&img, &tree, &[], &[]);
    r.assert_failed(&[1], "receiver");
    s.assert_failed(&[13], "sender");
    assert!(r.stderr.contains("is a directory"), "{}", r.describe());
    // A tree into an image, or to a receiver that serves block sessions only.
    let (_, r) = tcp_transfer(&tree, &img, &[], &[]);
    r.assert_failed(&[1], "receiver");
    let (_, r) = tcp_transfer(&tree, &dir.path().join("new.img"), &[], &["--block"]);
    r.assert_failed(&[1], "receiver");
    // --block for a directory, and tree-only options for an image.
    let out = run_mover([
        "sync".as_ref(),
        "--block".as_ref(),
        tree.as_os_str(),
        dir.path().join("x.img").as_os_str(),
    ]);
    out.assert_failed(&[1], "sync --block DIR");
    let out = run_mover([
        "sync".as_ref(),
        "--delete".as_ref(),
        img.as_os_str(),
        dir.path().join("y.img").as_os_str(),
    ]);
    out.assert_failed(&[1], "sync --delete IMG");
    assert!(
        out.stderr.contains("--delete applies to trees"),
        "{}",
        out.describe()
    );
}

#[test]
fn a_local_sync_copies_small_and_empty_images() {
    let dir = scratch();
    for (name, len) in [
        ("empty", 0usize),
        ("tiny", 1000),
        ("one-block", 16384),
        ("two", 16385),
    ] {
        let src = dir.path().join(format!("{name}.src"));
        let dst = dir.path().join(format!("{name}.dst"));
        fs::write(&src, random_bytes(name, len)).unwrap();
        let out = run_mover([
            "sync".as_ref(),
            "--verify".as_ref(),
            src.as_os_str(),
            dst.as_os_str(),
        ]);
        out.assert_ok();
        assert_eq!(fs::read(&dst).unwrap(), fs::read(&src).unwrap(), "{name}");
        assert_eq!(
            out.summary()["verify"]["passed"],
            true,
            "{name}: {}",
            out.summary()
        );
    }
}

#[test]
fn a_seed_carries_the_checkpoint_to_a_receiver_that_has_none() {
    let dir = scratch();
    let (src, dst) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    fs::write(&src, random_bytes("seed", 32 * MIB as usize)).unwrap();
    let first_state = dir.path().join("state-1");
    let args = ["--operation-id", "seeded", "--attempt", "1"];
    let mut recv_args = args.to_vec();
    let first = first_state.to_str().unwrap();
    recv_args.extend(["--block", "--state-dir", first, "--progress", "json"]);
    let receiver = spawn_receiver(&dst, &recv_args);
    let proxy = Proxy::start(receiver.addr);
    let mut send_args = args.to_vec();
    send_args.extend(["--bwlimit", "8M"]);
    let mut sender = spawn_sender(proxy.addr(), &src, &send_args);
    let up = proxy.up_counter();
    while up.load(std::sync::atomic::Ordering::Relaxed) < 8 * MIB && !sender.exited() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Stopped as a pod is: its last checkpoint is told on the way out.
    receiver.proc.terminate();
    let r = receiver.wait(std::time::Duration::from_secs(30));
    let _ = sender.wait(std::time::Duration::from_secs(30));
    let told: Vec<serde_json::Value> = r
        .json_lines()
        .into_iter()
        .filter(|l| l["event"] == "checkpoint")
        .collect();
    let last = told
        .last()
        .unwrap_or_else(|| panic!("no checkpoint told: {}", r.describe()));
    assert!(last["verified"].as_u64().unwrap() >= 8 * MIB, "{last}");
    let seed = last["data"].as_str().expect("data").to_string();

    // The next receiver has an empty state directory (a new pod) and the seed.
    let second_state = dir.path().join("state-2");
    let args = ["--operation-id", "seeded", "--attempt", "2"];
    let mut recv_args = args.to_vec();
    let second = second_state.to_str().unwrap();
    recv_args.extend(["--block", "--state-dir", second, "--checkpoint-seed", &seed]);
    let (s, r) = tcp_transfer(&src, &dst, &args, &recv_args);
    assert_eq!(
        (s.code, r.code),
        (Some(0), Some(0)),
        "{}\n{}",
        s.describe(),
        r.describe()
    );
    assert_eq!(
        r.stat("bytes_resumed"),
        last["verified"].as_u64().unwrap(),
        "{}",
        r.summary()
    );
    assert_eq!(hash(&dst), hash(&src));
    // A seed of another operation is ignored, with a word.
    let other = ["--operation-id", "other", "--attempt", "1"];
    let mut recv_args = other.to_vec();
    recv_args.extend(["--block", "--state-dir", second, "--checkpoint-seed", &seed]);
    let (_, r) = tcp_transfer(&src, &dst, &other, &recv_args);
    assert_eq!(r.code, Some(0), "{}", r.describe());
    assert!(
        r.stderr.contains("is of operation seeded"),
        "{}",
        r.describe()
    );
    assert_eq!(r.stat("bytes_resumed"), 0);
}
