//! Writing to stdout and stderr from the programs (`mover`, `kubectl
//! volmig`) without panicking.
//!
//! `println!` and `eprintln!` panic when the stream is a pipe whose reader
//! has gone (`mover inspect ... | head -1`), because Rust ignores SIGPIPE
//! and the write fails with EPIPE instead. These functions end the process
//! the way kubectl (and any C or Go tool) ends then: by SIGPIPE, which a
//! shell reports as status 141, with nothing on the terminal. Other write
//! errors are ignored: there is nowhere left to report them.
//!
//! SIGPIPE is not simply restored to its default at start, because the
//! default would apply to sockets too: a vectored write (`writev`, which
//! tokio and hyper use) to a peer that went away raises SIGPIPE, which
//! `MSG_NOSIGNAL` does not cover, and the process would die silently
//! instead of reporting a lost connection (the mover's exit 10).

use std::io::{self, Write};

/// Writes `text` to stdout, flushed. `false` if it could not be written
/// (other than a closed pipe, which ends the process).
pub fn out(text: &str) -> bool {
    write(io::stdout().lock(), text)
}

/// Writes `text` to stderr. `false` if it could not be written (other than
/// a closed pipe, which ends the process).
pub fn err(text: &str) -> bool {
    write(io::stderr().lock(), text)
}

fn write(mut stream: impl Write, text: &str) -> bool {
    match stream
        .write_all(text.as_bytes())
        .and_then(|()| stream.flush())
    {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => end_by_sigpipe(),
        Err(_) => false,
    }
}

/// Ends the process by SIGPIPE, as if it had not been ignored.
#[cfg(unix)]
fn end_by_sigpipe() -> ! {
    // SAFETY: restoring a signal's default disposition and raising it
    // touch no memory of this process; the default action ends it.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached; if the signal were blocked, the shell's code for it.
    std::process::exit(128 + libc::SIGPIPE)
}

/// Ends the process quietly: Windows has no SIGPIPE.
#[cfg(not(unix))]
fn end_by_sigpipe() -> ! {
    std::process::exit(1)
}
