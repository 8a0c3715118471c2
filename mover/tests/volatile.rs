//! Sources that change under the sender: files that vanish or keep changing
//! while they are read are reported, the session completes with exit code 24,
//! and the destination never holds a half-written file.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use common::*;
use mover::meta::Meta;
use mover::protocol::{Frame, FrameCodec, WireCounter};
use tokio_util::codec::Decoder;

#[test]
fn files_that_vanish_before_they_are_read_are_reported() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    for i in 0..40 {
        write_file(
            &src.join(format!("f{i:02}")),
            &random_bytes(&format!("v{i}"), 1024 * KIB),
            0o644,
        );
    }
    // The list goes out at once, the data at 8 MiB/s: when the last ten files
    // are deleted, the sender has read at most its queues' worth (~10 MiB).
    let receiver = spawn_receiver(&dst, &[]);
    let mut sender = spawn_sender(receiver.addr, &src, &["--bwlimit", "8M"]);
    // Once data arrives the whole list has been sent (it goes out first, in one
    // batch); the sender is then still far from the last files.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs::read_dir(&dst).map_or(0, |d| d.count()) == 0 {
        assert!(std::time::Instant::now() < deadline, "no data arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 30..40 {
        fs::remove_file(src.join(format!("f{i:02}"))).unwrap();
    }
    let s = sender.wait(Duration::from_secs(60));
    let r = receiver.wait(Duration::from_secs(10));
    assert_eq!(s.code, Some(24), "sender: {}", s.describe());
    assert_eq!(r.code, Some(24), "receiver: {}", r.describe());
    assert_eq!(s.stat("files_vanished"), 10, "{}", s.describe());
    assert!(r.stderr.contains("vanished"), "{}", r.describe());
    for i in 0..30 {
        let name = format!("f{i:02}");
        assert_eq!(
            fs::read(dst.join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap(),
            "{name}"
        );
    }
    for i in 30..40 {
        assert!(!dst.join(format!("f{i:02}")).exists());
    }
    let leftovers: Vec<_> = fs::read_dir(&dst)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".volmig-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn a_file_that_keeps_changing_is_flagged_and_never_half_written() {
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    let busy = src.join("busy.log");
    // More than the sender can have sent of it before the proxy reads on.
    let size = SENDER_QUEUES + send_buffer_max() + 2 * PROXY_BUFFER + 8 * MIB;
    write_file(&busy, &random_bytes("busy", size), 0o644);
    write_file(&src.join("calm"), b"calm", 0o644);
    mkdirs(&dst);
    write_file(&dst.join("busy.log"), b"previous version", 0o644);

    // The sender reads busy.log up to three times, each read between two
    // fstats of the open file, and sends a read that ends on the file as it
    // began. A thread setting the mtime in a loop made each read see a change
    // only if the scheduler ran it during that read. Here the change is tied
    // to the reads: each begins with a `FileBegin`, pushed after its first
    // fstat, and the proxy sets a new mtime once it has read that frame,
    // before it reads on. The sender cannot end the read meanwhile: the file
    // is larger than all it can have sent past that frame (its queues and
    // the socket buffers).
    let begun = Arc::new(AtomicI64::new(0));
    let receiver = spawn_receiver(&dst, &[]);
    let proxy = {
        let (busy, begun) = (busy.clone(), begun.clone());
        hook_file_begins(receiver.addr, move |meta| {
            if meta.size == size as u64 {
                let n = begun.fetch_add(1, Ordering::SeqCst) + 1;
                set_mtime(&busy, 1_000_000 + n, 0);
            }
        })
    };
    // Whole files, as `sync` sends them: no delta search over the data.
    let s = run_sender(proxy, &src, &["--whole-file"]);
    let r = receiver.wait(Duration::from_secs(10));
    let reads = begun.load(Ordering::SeqCst);
    let said = format!(
        "{reads} reads of busy.log\n=== sender: {}\n=== receiver: {}",
        s.describe(),
        r.describe()
    );

    assert_eq!(s.code, Some(24), "{said}");
    assert_eq!(r.code, Some(24), "{said}");
    assert_eq!(s.stat("files_changed"), 1, "{said}");
    assert!(
        r.stderr.contains("busy.log") && r.stderr.contains("changed while it was read"),
        "{said}"
    );
    assert_eq!(
        fs::read(dst.join("busy.log")).unwrap(),
        b"previous version",
        "the old copy stays whole"
    );
    assert_eq!(fs::read(dst.join("calm")).unwrap(), b"calm");
}

/// What the sender may have sent of a file beyond what the proxy has read,
/// besides the socket buffers: its outbox (a batch of 1 MiB and a frame of
/// at most 512 KiB over), the batches queued for its writer
/// (`writer::QUEUE`, 8) and the one being written.
const SENDER_QUEUES: usize = 10 * (MIB + 512 * KIB);
/// The proxy's receive buffer: small, and fixed (not autotuned).
const PROXY_BUFFER: usize = 64 * KIB;

/// The most a socket's send buffer grows to: `net.ipv4.tcp_wmem`'s maximum.
fn send_buffer_max() -> usize {
    let wmem = fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").expect("net.ipv4.tcp_wmem");
    let max = wmem.split_whitespace().nth(2).and_then(|m| m.parse().ok());
    max.unwrap_or_else(|| panic!("no maximum in net.ipv4.tcp_wmem: {wmem:?}"))
}

/// A proxy in front of the receiver at `receiver` that reads the sender's
/// frames one at a time and, at each `FileBegin`, calls `on_begin` with the
/// file's metadata before it reads on. Returns the address the sender is to
/// connect to (once).
fn hook_file_begins(
    receiver: SocketAddr,
    on_begin: impl FnMut(&Meta) + Send + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // Inherited by the accepted connection, and not autotuned from then on.
    rustix::net::sockopt::set_socket_recv_buffer_size(&listener, PROXY_BUFFER).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (sender, _) = listener.accept().expect("the sender connects");
        let receiver = TcpStream::connect(receiver).expect("the receiver listens");
        let (mut from, mut to) = (receiver.try_clone().unwrap(), sender.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
        forward_frames(sender, receiver, on_begin);
    });
    addr
}

/// Forwards frames from `from` to `to` as they are, one at a time, showing
/// `on_begin` each `FileBegin` first.
fn forward_frames(mut from: TcpStream, mut to: TcpStream, mut on_begin: impl FnMut(&Meta)) {
    let mut codec = FrameCodec::new(WireCounter::default());
    let mut len = [0u8; 4];
    while from.read_exact(&mut len).is_ok() {
        let mut frame = BytesMut::from(&len[..]);
        frame.resize(len.len() + u32::from_be_bytes(len) as usize, 0);
        if from.read_exact(&mut frame[len.len()..]).is_err() {
            break;
        }
        // An `Entries` frame decodes as several.
        let mut copy = frame.clone();
        while let Ok(Some(decoded)) = codec.decode(&mut copy) {
            if let Frame::FileBegin { meta, .. } = &decoded {
                on_begin(meta);
            }
        }
        if to.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
