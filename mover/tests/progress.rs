//! Progress as a user watches it: files count as done while a transfer of a few large files
//! is still running, not all at the end, and the summary's rate is the attempt's own work.

mod common;

use std::time::Duration;

use common::*;

/// Six 4 MiB files at 4 MiB/s (about 6 s): finished files wait for their commit group at
/// most 2 s, so `files_done` rises mid-transfer. (Groups used to close only at 256 files or
/// 256 MiB, and `files_done` stayed 0 until the end.)
#[test]
fn files_count_as_done_while_large_files_are_still_being_sent() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    for i in 0..6 {
        let data = random_bytes(&format!("progress {i}"), 4 * MIB);
        write_file(&src.join(format!("f{i}.bin")), &data, 0o644);
    }
    set_tree_mtimes(&src);
    let mut receiver = spawn_receiver(&dst, &["--progress", "json"]);
    let s = spawn_sender(receiver.addr, &src, &["--bwlimit", "4M"]).wait(Duration::from_secs(60));
    let r = receiver.proc.wait(Duration::from_secs(10));
    s.assert_ok();
    r.assert_ok();
    let events: Vec<_> = r
        .json_lines()
        .into_iter()
        .filter(|v| v["event"] == "progress")
        .collect();
    let mid: Vec<(u64, u64)> = events
        .iter()
        .map(|v| {
            let (f, b) = (v["files_done"].as_u64(), v["bytes_done"].as_u64());
            (f.unwrap_or(0), b.unwrap_or(0))
        })
        .filter(|&(_, bytes)| bytes < 20 * MIB as u64)
        .collect();
    assert!(
        mid.iter().any(|&(files, _)| files >= 1),
        "no file counted as done before 20 of 24 MiB were: (files_done, bytes_done) = {mid:?}"
    );
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after the transfer");
}

/// A second run that finds everything in place sends nothing: its summary line does not claim
/// the tree's size per second as its rate.
#[test]
fn a_run_that_finds_everything_done_claims_no_rate() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    write_file(&src.join("big.bin"), &random_bytes("rate", 8 * MIB), 0o644);
    set_tree_mtimes(&src);
    tcp_transfer_ok(&src, &dst, &[]);
    let (s, _) = tcp_transfer_ok(&src, &dst, &[]);
    assert!(
        s.stderr.contains("(0 B/s)"),
        "nothing was written, yet a rate is claimed: {}",
        s.stderr
    );
}
