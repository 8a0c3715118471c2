//! How a receiver that is killed or stopped leaves its destination: every checkpoint a SIGKILL
//! leaves behind claims no more than the files on disk back, and a SIGTERM loses nothing that
//! had already arrived (the next attempt sends the remainder, not more).

mod common;

use common::attempts::*;
use common::*;

/// The receiver SIGKILLed at random points, again and again: after every kill, the checkpoint's
/// `bytes_done` is backed by what is on disk (files in place with the source's size and mtime,
/// plus the verified prefixes of the partial files the checkpoint names); then one clean attempt
/// ends in an identical tree.
#[test]
fn receiver_killed_at_random_points_never_leaves_an_overstated_checkpoint() {
    const KILLS: usize = 12;
    // About 34 MiB: 12 + 8 + 6 MiB of random data (files in flight across kills) and 800
    // small files (commit groups, many partials at once).
    let (_tmp, src, dst, tree) = setup(0x5eed_0005, &[12, 8, 6], 800);
    let mut rng = Rng(0xdead_0005);
    let mut attempts: Vec<Attempt> = Vec::new();
    for n in 1..=KILLS as u32 {
        let plan = Plan {
            fault: Fault::KillReceiver,
            // Anywhere from the listing to well into the data: 64 KiB to 3 MiB per attempt.
            after: rng.range(64 * 1024, 3 * MIB64),
        };
        let a = run_attempt(&src, &dst, "kills", n, "12M", Some(plan), &[]);
        eprintln!("{}", a.line());
        let done = field_or_zero(&a.checkpoint, "bytes_done");
        assert!(
            done <= a.backed,
            "after kill {n}: the checkpoint claims {done} bytes done, the destination backs {}:\n{}",
            a.backed,
            describe_attempts(&attempts)
        );
        let finished = a.ok();
        attempts.push(a);
        if finished {
            break;
        }
    }
    let interrupted = attempts.iter().filter(|a| a.interrupted()).count();
    assert!(
        interrupted >= KILLS / 2,
        "only {interrupted} kills hit a running transfer: the test proves little:\n{}",
        describe_attempts(&attempts)
    );
    let n = attempts.len() as u32 + 1;
    let last = run_attempt(&src, &dst, "kills", n, "1G", None, &[]);
    assert!(last.ok(), "the clean attempt failed:\n{}", dump(&last));
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after the kills");
    eprintln!(
        "{} of {} MiB were done before the clean attempt",
        attempts.last().map_or(0, |a| a.backed) / MIB64,
        tree.bytes / MIB64
    );
}

/// SIGTERM of the receiver (a pod deleted) mid-transfer: it finishes what had arrived and
/// records it, so the next attempt sends at most what was left when the signal came, plus
/// 1 MiB.
#[test]
fn a_stopped_receiver_loses_nothing_that_had_arrived() {
    // One 24 MiB file and a few small ones, at 4 MiB/s: the stop comes mid-file.
    let (_tmp, src, dst, tree) = setup(0x5eed_0006, &[24], 20);
    let after = 8 * MIB64;
    let plan = Plan {
        fault: Fault::TermReceiver,
        after,
    };
    let first = run_attempt(&src, &dst, "stop", 1, "4M", Some(plan), &[]);
    eprintln!("{}", first.line());
    assert!(first.interrupted(), "not stopped:\n{}", dump(&first));
    assert_eq!(
        first.receiver.code,
        Some(20),
        "a stopped receiver exits 20: {}",
        first.receiver.describe()
    );
    let done = field_or_zero(&first.checkpoint, "bytes_done");
    assert!(done <= first.backed, "{}", first.line());

    let second = run_attempt(&src, &dst, "stop", 2, "1G", None, &[]);
    assert!(second.ok(), "{}", dump(&second));
    let literal = field(&second.sender.summary(), "bytes_literal");
    // What had not reached the receiver when it was told to stop.
    let remaining = tree.bytes - after;
    eprintln!(
        "stopped after {} forwarded; checkpoint {}; attempt 2 sent {} literal of {} remaining",
        mib(after),
        mib(done),
        mib(literal),
        mib(remaining)
    );
    assert!(
        literal <= remaining + MIB64,
        "attempt 2 sent {} literal, but only {} remained when the receiver was stopped: \
         what had arrived was lost\n{}\n{}",
        mib(literal),
        mib(remaining),
        first.line(),
        second.line()
    );
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after the stop");
}

fn field_or_zero(v: &serde_json::Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or(0)
}
