//! Checkpoints, resume and progress across attempts (`--operation-id` / `--attempt`), with the
//! real binary over TCP through a fault-injecting proxy ([`common::proxy`]).
//!
//! Proves that a transfer interrupted many times (SIGKILL of either side, SIGTERM of the
//! receiver, a dropped connection) converges to an identical tree while re-sending little
//! (bytes counted at the proxy), that no checkpoint claims progress the destination does not
//! hold, that progress never goes backwards by more than the work a kill may lose, that
//! `mover inspect` reports what a killed attempt left behind, and that a stale attempt is
//! refused without touching the destination.

mod common;

use std::ffi::OsString;
use std::fs;
use std::time::{Duration, Instant};

use common::attempts::*;
use common::*;
use serde_json::Value;

#[test]
fn fault_injection_resumes_to_identical_tree() {
    const FAULTS: usize = 20;
    const MAX_FAULT_ATTEMPTS: u32 = 40;
    const MAX_CLEAN_ATTEMPTS: u32 = 10;
    let started = Instant::now();
    // About 88 MiB: 40 + 24 + 8 MiB of random data and 2000 files of 1-16 KiB.
    let (_tmp, src, dst, tree) = setup(0x5eed_0001, &[40, 24, 8], 2000);
    eprintln!(
        "source: {} regular files, {} ({} bytes), built in {:.1}s",
        tree.files,
        mib(tree.bytes),
        tree.bytes,
        started.elapsed().as_secs_f64()
    );
    let kinds = [
        Fault::KillSender,
        Fault::KillReceiver,
        Fault::TermReceiver,
        Fault::CutConnection,
    ];
    let mut rng = Rng(0xfa17_0001);
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut faults = 0usize;
    let mut clean = 0u32;
    loop {
        let n = attempts.len() as u32 + 1;
        let plan = (faults < FAULTS).then(|| Plan {
            fault: kinds[faults % kinds.len()],
            // 1-3.5 MiB per attempt: 20 attempts cannot finish an 88 MiB tree.
            after: rng.range(MIB64, 7 * MIB64 / 2),
        });
        // A receiver SIGKILLed loses what it had received and not yet written: up to
        // its data budget (8 MiB) plus socket buffers. The budget below allows one block
        // per kill, which holds while the receiver keeps up with the link; at 20 MiB/s two
        // of these binaries side by side on 2 cores let its queue fill, and a kill lost
        // 2.5 MiB on average (ratio up to 1.19, failing half the runs). At 10 MiB/s it
        // keeps up: ratio 1.06-1.14 over 8 such runs.
        let a = run_attempt(&src, &dst, "fault-test", n, "10M", plan, &[]);
        eprintln!("{}", a.line());
        if a.interrupted() {
            faults += 1;
        }
        if plan.is_none() {
            clean += 1;
        }
        let done = a.ok();
        attempts.push(a);
        let log = describe_attempts(&attempts);
        if done {
            assert!(
                faults >= FAULTS,
                "the transfer completed after only {faults} interrupting faults (want {FAULTS}):\n{log}"
            );
            break;
        }
        assert!(
            n < MAX_FAULT_ATTEMPTS || faults >= FAULTS,
            "only {faults} of {FAULTS} faults interrupted a transfer in {n} attempts:\n{log}"
        );
        assert!(
            clean < MAX_CLEAN_ATTEMPTS,
            "no clean attempt succeeded in {clean} tries after {faults} faults:\n{log}\n{}",
            dump(attempts.last().unwrap())
        );
    }
    let log = describe_attempts(&attempts);
    let last = attempts.last().unwrap();
    let total: u64 = attempts.iter().map(|a| a.up).sum();
    // The bound: 1.15 x the tree plus one block (at most 128 KiB) per kill.
    let block = mover::signature::MAX_BLOCK_LEN as u64;
    let budget = 1.15 * tree.bytes as f64 + (faults as u64 * block) as f64;
    let ratio = total as f64 / tree.bytes as f64;
    let per_attempt: Vec<String> = attempts.iter().map(|a| mib(a.up)).collect();
    eprintln!(
        "final summaries:\n  sender:   {}\n  receiver: {}",
        last.sender.summary(),
        last.receiver.summary()
    );
    eprintln!(
        "forwarded sender->receiver over {} attempts ({faults} faults): {} ({total} bytes) for a \
         tree of {} ({} bytes): ratio {ratio:.3}, budget {} (1.15 x tree + {faults} blocks of 128 KiB)\n\
         per attempt: [{}]\ntotal runtime {:.1}s",
        attempts.len(),
        mib(total),
        mib(tree.bytes),
        tree.bytes,
        mib(budget as u64),
        per_attempt.join(", "),
        started.elapsed().as_secs_f64()
    );

    // (1) The destination equals the source, and the checkpoint is gone.
    let volmig = dst.join(".volmig");
    assert!(
        fs::symlink_metadata(&volmig).is_err(),
        "{} still exists after a clean finish:\n{log}",
        volmig.display()
    );
    assert_trees_equal(
        &src,
        &dst,
        CompareOpts::default(),
        &format!("after {} attempts with {faults} faults", attempts.len()),
    );

    // Between attempts, the checkpoint never claimed progress the destination does not hold
    // (a lost partial file would be re-sent while progress says it is done).
    assert_checkpoints_backed(&attempts, &log);

    // (2) Little was sent twice.
    assert!(
        (total as f64) <= budget,
        "forwarded {total} bytes sender->receiver (ratio {ratio:.3}) > budget {budget:.0}:\n{log}"
    );

    // (3) The final summary covers the whole tree.
    assert_eq!(
        last.sender.stat("bytes_total"),
        tree.bytes,
        "sender's final summary: {}",
        last.sender.summary()
    );
    let rs = last.receiver.summary();
    if let Some(b) = rs.get("bytes_total").and_then(Value::as_u64) {
        assert_eq!(b, tree.bytes, "receiver's final summary: {rs}");
    }

    // No attempt hung, and no attempt without a fault failed.
    let bad: Vec<String> = attempts
        .iter()
        .filter(|a| a.hung() || (a.injected.is_none() && !a.ok()))
        .map(|a| format!("{}\n{}", a.line(), dump(a)))
        .collect();
    assert!(
        bad.is_empty(),
        "attempts that hung or failed without a fault:\n{}\n\nall attempts:\n{log}",
        bad.join("\n")
    );
}

/// One progress event, reduced to the numbers the checks need.
#[derive(Debug, Clone, Copy)]
struct Prog {
    done: u64,
    total: u64,
    files_done: u64,
    files_total: u64,
    resumed: u64,
}

impl Prog {
    fn of(v: &Value) -> Prog {
        Prog {
            done: field(v, "bytes_done"),
            total: field(v, "bytes_total"),
            files_done: field(v, "files_done"),
            files_total: field(v, "files_total"),
            resumed: field(v, "bytes_prior"),
        }
    }
}

fn render(seq: &[(u32, Side, Vec<Prog>)], attempts: &[Attempt]) -> String {
    let mut out = String::new();
    for (n, side, evs) in seq {
        let a = &attempts[*n as usize - 1];
        let head = match side {
            Side::Sender => format!("{}\n  S:", a.line()),
            Side::Receiver => "  R:".to_string(),
        };
        let body: Vec<String> = evs
            .iter()
            .map(|p| {
                format!(
                    "{:.1}/{:.1}{}",
                    p.done as f64 / MIB as f64,
                    p.total as f64 / MIB as f64,
                    if p.resumed > 0 {
                        format!("(r{:.1})", p.resumed as f64 / MIB as f64)
                    } else {
                        String::new()
                    }
                )
            })
            .collect();
        out.push_str(&format!("{head} {}\n", body.join(" ")));
    }
    out
}

#[test]
fn progress_is_monotonic_across_attempts() {
    const FAULTS: usize = 6;
    // About 29 MiB: 16 + 8 MiB of random data and 600 files of 1-16 KiB.
    let (_tmp, src, dst, tree) = setup(0x5eed_0002, &[16, 8], 600);
    let kinds = [Fault::KillSender, Fault::KillReceiver, Fault::CutConnection];
    let mut rng = Rng(0xfa17_0002);
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut faults = 0;
    loop {
        let n = attempts.len() as u32 + 1;
        let plan = (faults < FAULTS).then(|| Plan {
            fault: kinds[faults % kinds.len()],
            // 2.5-4 MiB at 2 MiB/s: over a second per attempt (progress comes ~2/s), and six
            // attempts cannot finish a 29 MiB tree.
            after: rng.range(5 * MIB64 / 2, 4 * MIB64),
        });
        let a = run_attempt(&src, &dst, "progress-test", n, "2M", plan, &[]);
        eprintln!("{}", a.line());
        faults += usize::from(a.interrupted());
        let done = a.ok();
        attempts.push(a);
        if done {
            break;
        }
        assert!(
            n < 20,
            "no success in {n} attempts:\n{}\n{}",
            describe_attempts(&attempts),
            dump(attempts.last().unwrap())
        );
    }
    assert!(
        faults >= FAULTS,
        "only {faults} faults interrupted the transfer before it completed:\n{}",
        describe_attempts(&attempts)
    );

    let mut seq: Vec<(u32, Side, Vec<Prog>)> = Vec::new();
    for a in &attempts {
        for side in [Side::Sender, Side::Receiver] {
            seq.push((a.n, side, a.progress(side).iter().map(Prog::of).collect()));
        }
    }
    let shown = render(&seq, &attempts);
    eprintln!("progress (MiB done/total, (r = resumed)):\n{shown}");

    // Within an attempt, per side: bytes_done <= bytes_total, and no real step back.
    for (n, side, evs) in &seq {
        for p in evs {
            assert!(
                p.done <= p.total,
                "attempt {n} {side:?}: bytes_done {} > bytes_total {}:\n{shown}",
                p.done,
                p.total
            );
        }
        for w in evs.windows(2) {
            assert!(
                w[1].done + MIB64 >= w[0].done,
                "attempt {n} {side:?}: bytes_done went back from {} to {}:\n{shown}",
                w[0].done,
                w[1].done
            );
        }
    }

    // Across attempts: an attempt starts at most 4 MiB (per attempt since the last one that
    // reported anything) below where the previous one was last seen.
    let first_of = |n: u32| {
        seq.iter()
            .filter(|(m, _, evs)| *m == n && !evs.is_empty())
            .map(|(_, _, evs)| evs[0])
            .min_by_key(|p| p.done)
    };
    let last_of = |n: u32| {
        seq.iter()
            .filter(|(m, _, evs)| *m == n && !evs.is_empty())
            .map(|(_, _, evs)| *evs.last().unwrap())
            .max_by_key(|p| p.done)
    };
    let mut prev: Option<(u32, u64)> = None; // (attempt, last bytes_done seen)
    let mut high = 0u64; // the most any earlier attempt reported
    for a in &attempts {
        if let (Some(first), Some((m, last))) = (first_of(a.n), prev) {
            let slack = 4 * MIB64 * u64::from(a.n - m);
            assert!(
                first.done + slack >= last,
                "attempt {} starts at bytes_done {} but attempt {m} was last seen at {last} \
                 (allowed loss {slack}):\n{shown}",
                a.n,
                first.done
            );
        }
        if a.n >= 2 && high >= 2 * MIB64 {
            for side in [Side::Sender, Side::Receiver] {
                if let Some(p) = a.progress(side).first().map(Prog::of) {
                    assert!(
                        p.resumed > 0,
                        "attempt {} {side:?}: first event has bytes_prior 0 although earlier \
                         attempts reported up to {high} bytes done:\n{shown}",
                        a.n
                    );
                }
            }
        }
        if let Some(last) = last_of(a.n) {
            prev = Some((a.n, last.done));
            high = high.max(last.done);
        }
    }

    // The successful attempt ends at 100 % on both sides.
    let last = attempts.last().unwrap();
    for side in [Side::Sender, Side::Receiver] {
        let evs = last.progress(side);
        let p = Prog::of(evs.last().unwrap_or_else(|| {
            panic!(
                "{side:?} printed no progress event in the successful attempt:\n{}",
                dump(last)
            )
        }));
        assert!(
            p.done == p.total && p.files_done == p.files_total,
            "{side:?}: last event of the successful attempt is not complete: {}:\n{shown}",
            evs.last().unwrap()
        );
        assert_eq!(
            (p.total, p.files_total),
            (tree.bytes, tree.files),
            "{side:?}: last event's totals vs the tree's regular files:\n{shown}"
        );
    }
    assert_checkpoints_backed(&attempts, &describe_attempts(&attempts));
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after the last attempt");
}

#[test]
fn inspect_reports_checkpoint_after_kill() {
    // 24 MiB in one file (a partial will exist) and 50 small files.
    let (tmp, src, dst, tree) = setup(0x5eed_0003, &[24], 50);
    let empty = inspect(&dst);
    assert!(
        empty["checkpoint"].is_null(),
        "inspect of an empty destination: {empty}"
    );
    let plan = Plan {
        fault: Fault::KillReceiver,
        after: 6 * MIB64,
    };
    let a = run_attempt(&src, &dst, "X", 1, "8M", Some(plan), &[]);
    eprintln!("{}", a.line());
    assert!(
        a.interrupted(),
        "attempt 1 was not interrupted:\n{}",
        dump(&a)
    );

    let v = inspect(&dst);
    eprintln!("inspect after SIGKILL of the receiver: {v}");
    assert!(v.get("root").is_some(), "inspect has no \"root\": {v}");
    let cp = &v["checkpoint"];
    assert!(cp.is_object(), "no checkpoint after a killed attempt: {v}");
    assert_eq!(cp["operation_id"], "X", "{v}");
    assert_eq!(cp["attempt"], 1, "{v}");
    assert_eq!(cp["complete"], false, "{v}");
    assert!(field(cp, "bytes_done") > 0, "bytes_done: {v}");
    let partials = cp["partials"]
        .as_array()
        .unwrap_or_else(|| panic!("partials is not an array: {v}"));
    for p in partials {
        let (size, verified) = (field(p, "size"), field(p, "verified_len"));
        assert!(verified <= size, "partial with verified_len > size: {p}");
        let temp = p["temp"]
            .as_str()
            .unwrap_or_else(|| panic!("partial without a temp path: {p}"));
        assert!(
            fs::symlink_metadata(dst.join(temp)).is_ok(),
            "the temp file of {p} does not exist under {}",
            dst.display()
        );
    }

    // Attempt 2 finishes; the checkpoint is gone.
    let args = op_args("X", 2);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (s, r) = tcp_transfer(&src, &dst, &refs, &refs);
    assert!(
        s.code == Some(0) && r.code == Some(0),
        "attempt 2\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );
    assert_eq!(s.stat("bytes_total"), tree.bytes, "{}", s.summary());
    let v = inspect(&dst);
    assert!(
        v["checkpoint"].is_null() && v.get("problem").is_none_or(Value::is_null),
        "inspect after a completed attempt: {v}"
    );
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after attempt 2");

    // --keep-checkpoint keeps a checkpoint marked complete, over TCP and with `sync`.
    let kept = tmp.path().join("kept");
    mkdirs(&kept);
    let args = op_args("kept", 1);
    let send: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut recv = send.clone();
    recv.push("--keep-checkpoint");
    let (s, r) = tcp_transfer(&src, &kept, &send, &recv);
    assert!(
        s.code == Some(0) && r.code == Some(0),
        "--keep-checkpoint transfer\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );
    let synced = tmp.path().join("synced");
    let mut sync_args: Vec<OsString> = vec!["sync".into(), slash(&src), synced.clone().into()];
    sync_args.extend(
        ["--operation-id", "kept", "--keep-checkpoint"]
            .iter()
            .map(OsString::from),
    );
    run_mover(&sync_args).assert_ok();
    for root in [&kept, &synced] {
        let v = inspect(root);
        let cp = &v["checkpoint"];
        assert!(
            cp.is_object(),
            "no checkpoint kept by --keep-checkpoint: {v}"
        );
        assert_eq!(cp["complete"], true, "{v}");
        assert_eq!(cp["operation_id"], "kept", "{v}");
        assert_eq!(cp["attempt"], 1, "{v}");
    }
}

#[test]
fn stale_attempt_is_refused() {
    let (_tmp, src, dst, _) = setup(0x5eed_0004, &[16], 50);
    let plan = Plan {
        fault: Fault::KillReceiver,
        after: 4 * MIB64,
    };
    let a = run_attempt(&src, &dst, "stale", 3, "8M", Some(plan), &[]);
    eprintln!("{}", a.line());
    assert!(
        a.interrupted(),
        "attempt 3 was not interrupted:\n{}",
        dump(&a)
    );
    let v = inspect(&dst);
    assert_eq!(
        v["checkpoint"]["attempt"], 3,
        "killed attempt 3 left no checkpoint of attempt 3: {v}"
    );
    let before = fingerprint(&dst);

    // Attempt 2 comes too late: the receiver refuses (before or after listening).
    let args = op_args("stale", 2);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (r, s) = match try_spawn_receiver(&dst, &refs) {
        Err(r) => (r, None),
        Ok((mut proc, addr, _dir)) => {
            let s = run_sender(addr, &src, &refs);
            (proc.wait(Duration::from_secs(30)), Some(s))
        }
    };
    let sender = s
        .as_ref()
        .map_or("(not started)".to_string(), Output::describe);
    let context = format!("=== receiver: {}\n=== sender: {sender}", r.describe());
    eprintln!(
        "stale attempt 2: receiver exit {:?}: {}",
        r.code,
        r.stderr.trim()
    );
    assert_eq!(r.code, Some(1), "stale attempt 2:\n{context}");
    assert!(
        r.stderr.to_lowercase().contains("attempt"),
        "the refusal does not mention the attempt:\n{context}"
    );
    if let Some(s) = &s {
        assert_ne!(
            s.code,
            Some(0),
            "the sender of a refused attempt:\n{context}"
        );
    }
    let summary = r.summary();
    assert_eq!(
        summary["retryable"], false,
        "a stale attempt is not retryable: {summary}\n{context}"
    );
    let after = fingerprint(&dst);
    let changed: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{}: {:?} -> {:?}", show(k), before.get(k), after.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "the refused attempt changed the destination:\n  {}\n{context}",
        changed.join("\n  ")
    );
    let v = inspect(&dst);
    assert_eq!(v["checkpoint"]["attempt"], 3, "after the refusal: {v}");

    // A newer attempt still resumes and finishes.
    let args = op_args("stale", 4);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (s, r) = tcp_transfer(&src, &dst, &refs, &refs);
    assert!(
        s.code == Some(0) && r.code == Some(0),
        "attempt 4\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after attempt 4");
}

/// Attempt 1 of `op` SIGKILLed at the receiver once 90% of `src` went through; returns the
/// checkpoint's one partial file: (temp path, verified_len).
fn kill_at_90(src: &std::path::Path, dst: &std::path::Path, op: &str, bytes: u64) -> (String, u64) {
    let plan = Plan {
        fault: Fault::KillReceiver,
        after: bytes / 10 * 9,
    };
    let a = run_attempt(src, dst, op, 1, "8M", Some(plan), &[]);
    eprintln!("{}", a.line());
    assert!(
        a.interrupted(),
        "attempt 1 was not interrupted:\n{}",
        dump(&a)
    );
    let parts = a.checkpoint["partials"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        parts.len(),
        1,
        "one partial file expected: {}",
        a.checkpoint
    );
    let temp = parts[0]["temp"].as_str().unwrap().to_string();
    let verified = field(&parts[0], "verified_len");
    assert!(
        verified > bytes / 2,
        "the checkpoint lags far behind: {}",
        a.checkpoint
    );
    (temp, verified)
}

/// Attempt 2 of `op` over TCP (`extra`: sender options), which must succeed; the sender's
/// summary.
fn attempt_2(src: &std::path::Path, dst: &std::path::Path, op: &str, extra: &[&str]) -> Value {
    let args = op_args(op, 2);
    let recv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut send = recv.clone();
    send.extend(extra);
    let (s, r) = tcp_transfer(src, dst, &send, &recv);
    assert!(
        s.code == Some(0) && r.code == Some(0),
        "attempt 2\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );
    assert!(inspect(dst)["checkpoint"].is_null(), "checkpoint left");
    assert_eq!(fingerprint(src), fingerprint(dst), "trees differ by BLAKE3");
    assert_trees_equal(src, dst, CompareOpts::default(), "after attempt 2");
    s.summary()
}

#[test]
fn after_a_receiver_kill_at_90_percent_only_the_tail_is_read() {
    let (_tmp, src, dst, tree) = setup(0x5eed_0007, &[32], 0);
    let (_, verified) = kill_at_90(&src, &dst, "T", tree.bytes);
    let s = attempt_2(&src, &dst, "T", &[]);
    eprintln!("attempt 2 after a kill at {verified}: {s}");
    assert_eq!(field(&s, "bytes_resumed"), verified, "{s}");
    // The receiver read back at most the MiB past the checkpoint's hash state,
    // the sender the rest of the file from about there: neither the prefix.
    let (back, read) = (
        field(&s, "prefix_bytes_read"),
        field(&s, "source_bytes_read"),
    );
    assert!(back <= MIB64, "receiver read back {back} bytes: {s}");
    let rest = tree.bytes - verified;
    assert!(
        (rest..=rest + MIB64).contains(&read),
        "sender read {read} bytes for a rest of {rest}: {s}"
    );

    // --checksum reads and checks it all, on both sides.
    let (_tmp, src, dst, tree) = setup(0x5eed_0008, &[32], 0);
    let (_, verified) = kill_at_90(&src, &dst, "C", tree.bytes);
    let s = attempt_2(&src, &dst, "C", &["--checksum"]);
    assert_eq!(field(&s, "bytes_resumed"), verified, "{s}");
    assert_eq!(field(&s, "prefix_bytes_read"), verified, "{s}");
    assert!(field(&s, "source_bytes_read") >= tree.bytes, "{s}");
}

#[test]
fn a_changed_source_or_an_edited_partial_file_is_not_trusted_after_a_kill() {
    // The source changes between the attempts (a byte of the prefix, and its mtime).
    let (_tmp, src, dst, tree) = setup(0x5eed_0009, &[32], 0);
    let (_, verified) = kill_at_90(&src, &dst, "S", tree.bytes);
    let big = src.join("big/large-0.bin");
    let mut data = fs::read(&big).unwrap();
    data[(verified / 2) as usize] ^= 0xff;
    fs::write(&big, &data).unwrap();
    set_mtime(&big, 1_700_000_000, 5);
    let s = attempt_2(&src, &dst, "S", &[]);
    assert_eq!(field(&s, "bytes_resumed"), 0, "{s}");

    // The partial file's prefix is edited in place after the kill, later than its writer
    // could have written it: read in full, found different, not reused.
    let (_tmp, src, dst, tree) = setup(0x5eed_000a, &[32], 0);
    let (temp, verified) = kill_at_90(&src, &dst, "E", tree.bytes);
    std::thread::sleep(Duration::from_millis(3500));
    let path = dst.join(&temp);
    let mut data = fs::read(&path).unwrap();
    data[(verified / 3) as usize] ^= 0xff;
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &data))
        .unwrap();
    let s = attempt_2(&src, &dst, "E", &[]);
    assert_eq!(field(&s, "bytes_resumed"), 0, "{s}");
    assert_eq!(field(&s, "bytes_literal"), tree.bytes, "{s}");
}
