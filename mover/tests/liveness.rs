//! The idle timeout on real connections: a slow link is not a dead one, and a connection that
//! stops moving bytes without closing (a black hole) ends both sides within `--timeout`.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::*;

fn setup(len: usize) -> (Scratch, PathBuf, PathBuf) {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    mkdirs(&dst);
    write_file(&src.join("data.bin"), &random_bytes("liveness", len), 0o644);
    set_tree_mtimes(&src);
    (tmp, src, dst)
}

/// 256 KiB of incompressible data through a link capped at 24 KiB/s, with `--timeout 5` (the
/// least there is) on both sides: one 256 KiB data frame takes 10 s to cross, twice the timeout, yet bytes
/// arrive all along, so neither side gives up. (The same holds for 1 MiB at 8 KiB/s with the
/// default `--timeout 60`; this is that case scaled down to seconds.)
#[test]
fn a_slow_link_does_not_trip_the_idle_timeout() {
    let (_tmp, src, dst) = setup(256 * KIB);
    let mut receiver = spawn_receiver(&dst, &["--timeout", "5"]);
    let proxy = Proxy::start(receiver.addr);
    proxy.set_rate(24 * KIB as u64);
    let start = Instant::now();
    let s = spawn_sender(proxy.addr(), &src, &["--timeout", "5"]).wait(Duration::from_secs(120));
    let r = receiver.proc.wait(Duration::from_secs(10));
    s.assert_ok();
    r.assert_ok();
    assert!(
        start.elapsed() > Duration::from_secs(8),
        "the link was not slow after all ({:?}): the test proves nothing",
        start.elapsed()
    );
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after a slow link");
}

/// A proxy that stops forwarding mid-transfer and closes nothing: both sides end with exit 10
/// (connection lost) within `--timeout` and a few seconds of cleanup, and say why.
#[test]
fn a_black_holed_connection_ends_both_sides_within_the_timeout() {
    const TIMEOUT: u64 = 5;
    let (_tmp, src, dst) = setup(16 * MIB);
    let t = TIMEOUT.to_string();
    let mut receiver = spawn_receiver(&dst, &["--timeout", &t]);
    let proxy = Proxy::start(receiver.addr);
    let mut sender = spawn_sender(proxy.addr(), &src, &["--timeout", &t, "--bwlimit", "2M"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.up() < 2 * MIB as u64 && Instant::now() < deadline && !sender.exited() {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        proxy.up() >= 2 * MIB as u64,
        "the transfer did not get going"
    );
    proxy.freeze();
    let frozen = Instant::now();
    let bound = Duration::from_secs(TIMEOUT + 4);
    let (mut s_at, mut r_at) = (None, None);
    while (s_at.is_none() || r_at.is_none()) && frozen.elapsed() < Duration::from_secs(60) {
        if s_at.is_none() && sender.exited() {
            s_at = Some(frozen.elapsed());
        }
        if r_at.is_none() && receiver.proc.exited() {
            r_at = Some(frozen.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = sender.wait(Duration::ZERO);
    let r = receiver.proc.wait(Duration::ZERO);
    eprintln!("after the freeze: sender exited after {s_at:?}, receiver after {r_at:?}");
    for (side, at, out) in [("sender", s_at, &s), ("receiver", r_at, &r)] {
        assert_eq!(out.code, Some(10), "{side}: {}", out.describe());
        let at = at.unwrap_or_else(|| panic!("{side} still running a minute after the freeze"));
        assert!(
            at <= bound,
            "{side} took {at:?} to notice a dead connection (timeout {TIMEOUT} s): {}",
            out.describe()
        );
        assert!(
            out.stderr
                .contains(&format!("nothing from the peer for {TIMEOUT}s")),
            "{side} does not say why: {}",
            out.describe()
        );
    }
}

/// The issue's own case, unscaled: 1 MiB through a link capped at 8 KiB/s with the default
/// `--timeout 60`. Takes over two minutes, so it runs by hand:
/// `cargo test -p mover --test liveness -- --ignored`.
#[test]
#[ignore = "takes over two minutes; the scaled case above runs in CI"]
fn one_mib_at_8_kib_per_s_with_the_default_timeout() {
    let (_tmp, src, dst) = setup(MIB);
    let mut receiver = spawn_receiver(&dst, &[]);
    let proxy = Proxy::start(receiver.addr);
    proxy.set_rate(8 * KIB as u64);
    let s = spawn_sender(proxy.addr(), &src, &[]).wait(Duration::from_secs(400));
    let r = receiver.proc.wait(Duration::from_secs(10));
    s.assert_ok();
    r.assert_ok();
    assert_trees_equal(&src, &dst, CompareOpts::default(), "after 8 KiB/s");
}
