//! Checkpoints are hints, never trusted: every kind of bad checkpoint or bad
//! partial file is detected and reported, and the transfer still ends with a
//! destination identical to the source. A good partial file is resumed from
//! its verified prefix, and its unverified rest still serves as a basis.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::attempts::{field, inspect, setup};
use common::*;
use mover::checkpoint::{Checkpoint, Partial, Store};
use mover::meta::Mtime;
use mover::path::RelPath;
use mover::treehash::TreeHasher;

const SIZE: usize = 3 * MIB;
const OP: &str = "cp-test";
const TEMP: &str = ".volmig-big.planted-0.tmp";

struct Case {
    _dir: Scratch,
    src: PathBuf,
    dst: PathBuf,
    data: Vec<u8>,
}

/// A source with one large and one small file, and an empty destination.
fn case() -> Case {
    case_of(SIZE)
}

/// [`case`] with a large file of `size` bytes.
fn case_of(size: usize) -> Case {
    let dir = scratch();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    let data = random_bytes("checkpoint big", size);
    write_file(&src.join("big"), &data, 0o644);
    write_file(&src.join("small"), b"small file", 0o644);
    Case {
        _dir: dir,
        src,
        dst,
        data,
    }
}

fn rel(s: &str) -> RelPath {
    RelPath::new(s.as_bytes().to_vec()).unwrap()
}

fn src_mtime(path: &Path) -> Mtime {
    let md = fs::metadata(path).unwrap();
    mover::meta::Meta::from_fs(&md).mtime
}

impl Case {
    /// Leaves what a killed attempt would: `temp` under a temporary name and
    /// a checkpoint saying its first `verified` bytes are the source's.
    fn plant(&self, temp: &[u8], verified: usize, edit: impl FnOnce(&mut Checkpoint)) {
        fs::write(self.dst.join(TEMP), temp).unwrap();
        let mut cp = Checkpoint::new(OP.into(), 1);
        cp.bytes_done = verified as u64;
        cp.partials.push(Partial {
            path: rel("big"),
            temp: rel(TEMP),
            size: self.data.len() as u64,
            mtime: src_mtime(&self.src.join("big")),
            verified_len: verified as u64,
            prefix_hash: *blake3::hash(&self.data[..verified]).as_bytes(),
            head: Vec::new(),
            temp_ino: 0,
            recorded_at: Mtime::default(),
        });
        edit(&mut cp);
        store(&self.dst).save(&cp).unwrap();
    }

    /// [`Case::plant`] as a receiver of this build records it: with the
    /// prefix's hash state, the temporary file's inode and the time of the
    /// record (now, less `ago` seconds).
    fn plant_with_state(&self, temp: &[u8], verified: usize, ago: i64) {
        let mut h = TreeHasher::new();
        for part in self.data[..verified].chunks(256 * KIB) {
            h.update(part);
        }
        let head = h.head().pieces();
        assert!(!head.is_empty(), "a prefix of {verified} bytes has a head");
        let path = self.dst.join(TEMP);
        self.plant(temp, verified, |cp| {
            let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&path).unwrap());
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            let p = &mut cp.partials[0];
            p.head = head;
            p.temp_ino = ino;
            p.recorded_at = Mtime {
                sec: now.as_secs() as i64 - ago,
                nsec: now.subsec_nanos(),
            };
        });
    }

    /// Damages the stored checkpoint's bytes.
    fn damage(&self, f: impl FnOnce(&mut Vec<u8>)) {
        let path = self.dst.join(".volmig/checkpoint");
        let mut bytes = fs::read(&path).unwrap();
        f(&mut bytes);
        fs::write(&path, bytes).unwrap();
    }

    fn sync(&self, attempt: u32, extra: &[&str]) -> Output {
        let attempt = attempt.to_string();
        let mut args = vec!["sync", "--operation-id", OP, "--attempt", &attempt];
        args.extend(extra);
        args.extend(["--progress", "json", "-q"]);
        let (src, dst) = (slash(&self.src), slash(&self.dst));
        let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        all.extend([src, dst]);
        run_mover(all)
    }

    /// The destination equals the source and no state is left behind.
    fn assert_done(&self, out: &Output, what: &str) {
        out.assert_ok();
        assert_trees_equal(&self.src, &self.dst, CompareOpts::default(), what);
        assert!(!self.dst.join(".volmig").exists(), "{what}: state left");
        assert!(!self.dst.join(TEMP).exists(), "{what}: partial file left");
    }
}

#[test]
fn a_good_partial_file_is_resumed_from_its_prefix() {
    let c = case();
    // 2 MiB verified, then 512 KiB of something else.
    let mut temp = c.data[..2 * MIB].to_vec();
    temp.extend(random_bytes("other", MIB / 2));
    c.plant(&temp, 2 * MIB, |_| {});
    let out = c.sync(2, &[]);
    c.assert_done(&out, "resumed");
    let s = out.summary();
    assert_eq!(s["files_resumed"], 1, "{s}");
    assert_eq!(s["bytes_resumed"], 2 * MIB as u64, "{s}");
    assert_eq!(s["bytes_literal"], (SIZE - 2 * MIB + 10) as u64, "{s}");
    assert!(s["checkpoint_problem"].is_null(), "{s}");
    // The first progress event already counts the earlier attempt's work.
    let first = out
        .json_lines()
        .into_iter()
        .find(|v| v["event"] == "progress")
        .expect("a progress event");
    assert_eq!(first["bytes_prior"], 2 * MIB as u64, "{first}");
    assert!(
        first["bytes_done"].as_u64() >= Some(2 * MIB as u64),
        "{first}"
    );
}

#[test]
fn the_unverified_rest_of_a_partial_file_is_a_basis() {
    let c = case();
    // What a receiver killed between two checkpoints leaves: correct data
    // well past the recorded prefix.
    c.plant(&c.data[..SIZE - 1000], MIB, |_| {});
    let out = c.sync(2, &["--no-whole-file"]);
    c.assert_done(&out, "tail reused");
    let s = out.summary();
    assert_eq!(s["bytes_resumed"], MIB as u64, "{s}");
    let literal = s["bytes_literal"].as_u64().unwrap();
    assert!(
        literal < 64 * KIB as u64,
        "only the end of the file should be sent, not {literal} bytes: {s}"
    );
}

/// Runs a case whose partial file must not be reused, and checks it was reported.
fn not_reused(c: &Case, message: &str) {
    let out = c.sync(2, &[]);
    c.assert_done(&out, message);
    let s = out.summary();
    assert_eq!(s["files_resumed"], 0, "{s}");
    assert_eq!(s["bytes_literal"], (c.data.len() + 10) as u64, "{s}");
    assert!(
        out.stderr.contains("not reused") && out.stderr.contains(message),
        "expected a report containing {message:?}: {}",
        out.describe()
    );
}

#[test]
fn a_partial_file_shorter_than_recorded_is_not_reused() {
    let c = case();
    c.plant(&c.data[..MIB], 2 * MIB, |_| {});
    not_reused(&c, "shorter");
}

#[test]
fn a_modified_partial_file_is_not_reused() {
    let c = case();
    let mut temp = c.data[..2 * MIB].to_vec();
    temp[100] ^= 0xff;
    c.plant(&temp, 2 * MIB, |_| {});
    not_reused(&c, "modified");
}

#[test]
fn a_partial_file_of_a_changed_source_is_not_reused() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |cp| {
        cp.partials[0].mtime.sec -= 10
    });
    not_reused(&c, "changed");
}

/// A prefix this long is hashed by several threads (`treehash`: from 16 MiB).
const LONG: usize = 20 * MIB;

#[test]
fn a_long_prefix_is_checked_with_threads_and_resumed() {
    let c = case_of(LONG + 2 * MIB);
    // Correct data 1 MiB past the checkpoint, as a killed receiver leaves it.
    c.plant(&c.data[..LONG + MIB], LONG, |_| {});
    let out = c.sync(2, &["--no-whole-file"]);
    c.assert_done(&out, "long prefix resumed");
    let s = out.summary();
    assert_eq!(s["files_resumed"], 1, "{s}");
    assert_eq!(s["bytes_resumed"], LONG as u64, "{s}");
    // The unverified rest is a basis: all of it matches.
    assert_eq!(s["bytes_matched"], MIB as u64, "{s}");
    assert_eq!(s["bytes_literal"], (MIB + 10) as u64, "{s}");
}

#[test]
fn a_long_modified_prefix_is_not_reused() {
    let c = case_of(LONG + 2 * MIB);
    let mut temp = c.data[..LONG].to_vec();
    temp[LONG - 5000] ^= 0xff;
    c.plant(&temp, LONG, |_| {});
    let out = c.sync(2, &[]);
    c.assert_done(&out, "long prefix modified");
    let s = out.summary();
    assert_eq!(s["files_resumed"], 0, "{s}");
    assert_eq!(s["bytes_literal"], (LONG + 2 * MIB + 10) as u64, "{s}");
    assert!(
        out.stderr.contains("not reused") && out.stderr.contains("modified"),
        "{}",
        out.describe()
    );
}

/// Runs a case whose whole checkpoint must be discarded with `problem`.
fn discarded(c: &Case, problem: &str) {
    // --delete: the partial file the bad checkpoint named is then a leftover.
    let out = c.sync(2, &["--delete"]);
    c.assert_done(&out, problem);
    let s = out.summary();
    let reported = s["checkpoint_problem"].as_str().unwrap_or_default();
    assert!(reported.contains(problem), "expected {problem:?}: {s}");
    assert_eq!(s["files_resumed"], 0, "{s}");
    assert!(
        out.stderr.contains("discarding the checkpoint"),
        "{}",
        out.describe()
    );
}

#[test]
fn a_garbage_checkpoint_is_discarded() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |_| {});
    c.damage(|b| *b = random_bytes("garbage", b.len()));
    discarded(&c, "not a volmig checkpoint");
}

#[test]
fn a_truncated_checkpoint_is_discarded() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |_| {});
    c.damage(|b| b.truncate(b.len() / 2));
    discarded(&c, "truncated");
}

#[test]
fn a_corrupt_checkpoint_is_discarded() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |_| {});
    c.damage(|b| b[20] ^= 1);
    discarded(&c, "corrupt");
}

#[test]
fn a_checkpoint_of_a_newer_format_is_discarded() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |_| {});
    c.damage(|b| b[8] = 99);
    discarded(&c, "newer");
}

#[test]
fn a_checkpoint_of_another_operation_is_discarded() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |cp| {
        cp.operation_id = "other".into()
    });
    discarded(&c, "operation \"other\"");
}

#[test]
fn a_checkpoint_naming_a_file_outside_temporary_names_is_discarded() {
    let c = case();
    // A forged checkpoint must not make the receiver rename or truncate a user file.
    write_file(&c.dst.join("precious"), b"keep me", 0o644);
    c.plant(&c.data[..2 * MIB], 2 * MIB, |cp| {
        cp.partials[0].temp = rel("precious")
    });
    let out = c.sync(2, &[]);
    out.assert_ok();
    let s = out.summary();
    assert!(
        s["checkpoint_problem"]
            .as_str()
            .is_some_and(|p| p.contains("invalid")),
        "{s}"
    );
    assert_eq!(fs::read(c.dst.join("precious")).unwrap(), b"keep me");
    assert_eq!(fs::read(c.dst.join("big")).unwrap(), c.data);
}

#[test]
fn a_stale_attempt_is_refused_and_changes_nothing() {
    let c = case();
    c.plant(&c.data[..2 * MIB], 2 * MIB, |cp| cp.attempt = 5);
    let before = fs::read(c.dst.join(".volmig/checkpoint")).unwrap();
    let out = c.sync(3, &[]);
    out.assert_failed(&[1], "stale attempt");
    assert!(out.stderr.contains("stale"), "{}", out.describe());
    assert!(!c.dst.join("big").exists());
    assert_eq!(fs::read(c.dst.join(".volmig/checkpoint")).unwrap(), before);
    assert_eq!(fs::read(c.dst.join(TEMP)).unwrap(), &c.data[..2 * MIB]);
    // The current attempt goes on from it.
    let out = c.sync(5, &[]);
    c.assert_done(&out, "attempt 5");
    assert_eq!(out.summary()["bytes_resumed"], 2 * MIB as u64);
}

#[test]
fn keep_checkpoint_leaves_a_complete_checkpoint_and_inspect_shows_it() {
    let c = case();
    let out = c.sync(1, &["--keep-checkpoint"]);
    out.assert_ok();
    let shown = run_mover([
        std::ffi::OsString::from("inspect"),
        "--root".into(),
        c.dst.clone().into(),
    ]);
    shown.assert_ok();
    let v: serde_json::Value = serde_json::from_str(shown.stdout.trim()).unwrap();
    let cp = &v["checkpoint"];
    assert_eq!(cp["operation_id"], OP, "{v}");
    assert_eq!(cp["complete"], true, "{v}");
    assert_eq!(cp["bytes_done"], (SIZE + 10) as u64, "{v}");
    assert_eq!(cp["partials"].as_array().map(Vec::len), Some(0), "{v}");
    // A later run of the same operation starts a fresh round and cleans up.
    let out = c.sync(2, &[]);
    out.assert_ok();
    assert!(!c.dst.join(".volmig").exists());
}

#[test]
fn delete_never_removes_files_in_flight_under_an_operation() {
    // With an operation, temp names are not marked with the process: `--delete`
    // in a directory must still recognise the ones in flight (found by the
    // benchmark as a rare "No such file or directory" at commit).
    let dir = scratch();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    for d in 0..40 {
        let sub = src.join(format!("d{d:02}"));
        mkdirs(&sub);
        for f in 0..60 {
            let data = random_bytes(&format!("{d}/{f}"), 2 * KIB + f * 97);
            write_file(&sub.join(format!("f{f:02}")), &data, 0o644);
        }
    }
    for round in 1..=3 {
        let _ = fs::remove_dir_all(&dst);
        let attempt = round.to_string();
        let out = run_mover([
            "sync".into(),
            "--delete".into(),
            "--operation-id".into(),
            "delete-race".into(),
            "--attempt".into(),
            attempt.into(),
            "--progress".into(),
            "json".into(),
            "-q".into(),
            slash(&src),
            slash(&dst),
        ]);
        out.assert_ok();
        assert_eq!(out.stat("deleted"), 0, "round {round}: {}", out.describe());
        assert_trees_equal(&src, &dst, CompareOpts::default(), "delete race");
    }
}

/// An operation abandoned mid-copy (its checkpoint and temporary files left in the claim) and
/// a new operation into the same destination, without `--delete`: the new one discards the
/// foreign checkpoint with the partial files it names, sweeps other leftover temporary names,
/// verifies, and leaves no `.volmig-*` name behind. Run once more as yet another operation, it
/// finds everything in place and sends nothing.
#[test]
fn an_abandoned_operation_leaves_no_temporary_files_in_the_next_one() {
    let c = case();
    mkdirs(&c.src.join("sub"));
    write_file(&c.src.join("sub/file"), b"in a subdirectory", 0o644);
    c.plant(&c.data[..MIB], MIB, |cp| {
        cp.operation_id = "abandoned".into()
    });
    // A leftover no checkpoint names, as a killed receiver leaves after its last checkpoint.
    mkdirs(&c.dst.join("sub"));
    fs::write(c.dst.join("sub/.volmig-file.0123abcd-7.tmp"), b"stale").unwrap();

    let out = c.sync(1, &["--verify"]);
    c.assert_done(&out, "after a foreign checkpoint");
    let left: Vec<String> = walk(&c.dst)
        .into_iter()
        .map(|(rel, _, _)| show(&rel))
        .filter(|p| p.contains(".volmig"))
        .collect();
    assert!(left.is_empty(), "volmig's own names left behind: {left:?}");
    let s = out.summary();
    assert_eq!(s["verify"]["passed"], true, "{s}");

    let again = run_mover([
        "sync".into(),
        "--operation-id".into(),
        "third".into(),
        "--attempt".into(),
        "1".into(),
        "--verify".into(),
        "-q".into(),
        slash(&c.src),
        slash(&c.dst),
    ]);
    again.assert_ok();
    let s = again.summary();
    assert_eq!(
        (s["bytes_literal"].as_u64(), s["files_transferred"].as_u64()),
        (Some(0), Some(0)),
        "a finished copy is only checked, not sent again: {s}"
    );
}

/// 12 MiB, of which 10.5 MiB verified and 1 MiB more written after the
/// record (what a receiver killed between two checkpoints leaves).
fn stored_state_case() -> (Case, usize) {
    let c = case_of(12 * MIB);
    let verified = 10 * MIB + MIB / 2;
    (c, verified)
}

#[test]
fn a_stored_hash_state_spares_reading_the_prefix_on_both_sides() {
    let (c, verified) = stored_state_case();
    c.plant_with_state(&c.data[..verified + MIB], verified, 0);
    let out = c.sync(2, &[]);
    c.assert_done(&out, "resumed from a stored hash state");
    let s = out.summary();
    assert_eq!(s["bytes_resumed"], verified as u64, "{s}");
    // The receiver read back at most the MiB after the stored state...
    let back = s["prefix_bytes_read"].as_u64().unwrap();
    assert!(back <= MIB as u64, "receiver read back {back} bytes: {s}");
    // ...and the sender only the rest, from the end of that state on.
    let read = s["source_bytes_read"].as_u64().unwrap();
    let rest = (c.data.len() - verified + "small file".len()) as u64;
    assert!(
        read >= rest && read <= rest + MIB as u64,
        "sender read {read} bytes for a rest of {rest}: {s}"
    );
}

#[test]
fn a_wrong_stored_hash_state_is_not_used() {
    let (c, verified) = stored_state_case();
    c.plant_with_state(&c.data[..verified], verified, 0);
    // The checkpoint is intact, but its hash state is not the prefix's.
    let mut cp = store(&c.dst).load().unwrap().unwrap();
    cp.partials[0].head[0].1[0] ^= 1;
    store(&c.dst).save(&cp).unwrap();
    let out = c.sync(2, &[]);
    c.assert_done(&out, "wrong hash state");
    let s = out.summary();
    // The file checks out read in full, and is resumed from it.
    assert_eq!(s["bytes_resumed"], verified as u64, "{s}");
    assert_eq!(s["prefix_bytes_read"], verified as u64, "{s}");
}

#[test]
fn a_partial_file_changed_after_its_record_is_read_in_full() {
    let (c, verified) = stored_state_case();
    // Recorded a minute ago, changed now (here: written, with one byte of
    // its prefix different): not the writer's own change.
    let mut temp = c.data[..verified].to_vec();
    temp[MIB] ^= 0x55;
    c.plant_with_state(&temp, verified, 60);
    not_reused(&c, "modified since it was recorded");
    // Recorded now, but another file under the same name.
    let (c, verified) = stored_state_case();
    c.plant_with_state(&c.data[..verified], verified, 0);
    let path = c.dst.join(TEMP);
    let mut edited = c.data[..verified].to_vec();
    edited[2 * MIB] ^= 0x55;
    let other = c.dst.join(".volmig-big.other-0.tmp");
    fs::write(&other, &edited).unwrap();
    fs::rename(&other, &path).unwrap();
    not_reused(&c, "modified since it was recorded");
}

#[test]
fn checksum_reads_every_prefix_in_full() {
    let (c, verified) = stored_state_case();
    c.plant_with_state(&c.data[..verified], verified, 0);
    let out = c.sync(2, &["--checksum"]);
    c.assert_done(&out, "--checksum");
    let s = out.summary();
    assert_eq!(s["bytes_resumed"], verified as u64, "{s}");
    assert_eq!(s["prefix_bytes_read"], verified as u64, "{s}");
    let read = s["source_bytes_read"].as_u64().unwrap();
    assert!(
        read >= c.data.len() as u64,
        "sender read only {read} bytes: {s}"
    );
}

#[test]
fn a_prefix_written_again_is_recorded_before_its_first_write() {
    let c = case_of(24 * MIB);
    let verified = 20 * MIB;
    // Recorded a minute ago: attempt 2 reads the prefix in full, then writes
    // the rest slowly and is SIGKILLed right after its first write.
    c.plant_with_state(&c.data[..verified], verified, 60);
    let temp = c.dst.join(TEMP);
    let before = fs::metadata(&temp).unwrap().modified().unwrap();
    let mut args: Vec<std::ffi::OsString> = [
        "sync",
        "--operation-id",
        OP,
        "--attempt",
        "2",
        "--bwlimit",
        "1M",
        "-q",
    ]
    .map(Into::into)
    .into();
    args.extend([slash(&c.src), slash(&c.dst)]);
    let mut p = Proc::spawn(&args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while fs::metadata(&temp).is_ok_and(|m| m.modified().unwrap() == before) {
        assert!(
            std::time::Instant::now() < deadline,
            "attempt 2 never wrote"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    p.kill();
    p.wait(std::time::Duration::from_secs(10));
    // Attempt 3: the partial file changed more than WRITE_GRACE after the
    // record attempt 1 left, but not after the one attempt 2 wrote first.
    let out = c.sync(3, &[]);
    c.assert_done(&out, "after a second kill");
    let s = out.summary();
    assert!(s["bytes_resumed"].as_u64() >= Some(verified as u64), "{s}");
    let back = s["prefix_bytes_read"].as_u64().unwrap();
    assert!(back <= MIB as u64, "receiver read back {back} bytes: {s}");
}

#[test]
fn inspect_against_a_source_foretells_what_a_session_finds_up_to_date() {
    let (_tmp, src, dst, _) = setup(0x5eed_0009, &[2], 40);
    tcp_transfer_ok(&src, &dst, &[]);
    // The source moves on: one file rewritten (new size), one touched (new
    // time), one added; the destination keeps the old copies.
    let rewritten = src.join("big/large-0.bin");
    write_file(&rewritten, &random_bytes("rewritten", MIB + 5), 0o644);
    let touched = src.join("d00/e00/f00000.dat");
    set_mtime(&touched, 1_700_000_000, 7);
    write_file(&src.join("new.dat"), &random_bytes("new", 4000), 0o644);
    let changed = fs::metadata(&touched).unwrap().len() + MIB as u64 + 5 + 4000;

    let shown = run_mover([
        std::ffi::OsStr::new("inspect"),
        "--root".as_ref(),
        dst.as_os_str(),
        "--against".as_ref(),
        src.as_os_str(),
    ]);
    shown.assert_ok();
    let v: serde_json::Value = serde_json::from_str(shown.stdout.trim()).unwrap();
    let quick = &v["quick_check"];
    let held = &v["holds"];
    assert_eq!(held["files"], 41, "{v}");
    assert_eq!(quick["files_total"], 42, "{v}");
    assert_eq!(quick["files_up_to_date"], 39, "{v}");
    let (total, found) = (
        field(quick, "bytes_total"),
        field(quick, "bytes_up_to_date"),
    );
    assert_eq!(total - found, changed, "{v}");

    // The session that follows finds exactly what was foretold.
    let (s, r) = tcp_transfer_ok(&src, &dst, &[]);
    assert_eq!(r.stat("files_up_to_date"), 39, "{}", r.summary());
    assert_eq!(s.stat("bytes_total"), total, "{}", s.summary());
    assert_eq!(inspect(&dst)["quick_check"], serde_json::Value::Null);
}

/// The state directory of `dst`, locked. Another test's thread may be
/// forking a mover at the moment a store is dropped here: until the child
/// execs, it holds a copy of the lock's descriptor (close-on-exec closes it
/// only at exec), and the flock with it. So a lock taken just after one was
/// released can be refused for a few milliseconds; wait that out.
fn store(dst: &Path) -> Store {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match Store::open(dst) {
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            other => return other.unwrap(),
        }
    }
}
