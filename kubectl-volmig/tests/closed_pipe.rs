//! Every program of the workspace, its output piped into a reader that has
//! gone (`| head -1`): it ends quietly, as kubectl does (exit 0, or killed
//! by SIGPIPE, which a shell reports as 141), and never panics.

use std::io::{pipe, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use kube_sandbox::testkit::workspace_binary;

/// Which of the program's streams goes to the closed pipe.
#[derive(Debug, Clone, Copy)]
enum Closed {
    /// stdout; stderr is read, to look for a panic.
    Stdout,
    /// stderr (`2>&1 | head`); stdout is read.
    Stderr,
}

/// Runs `program ARGS` with one stream to a pipe whose reader is closed,
/// and returns how it ended and what it wrote on the other stream.
fn run_into_closed_pipe(program: &PathBuf, args: &[&str], closed: Closed) -> (ExitStatus, String) {
    let (reader, writer) = pipe().expect("pipe");
    drop(reader);
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    match closed {
        Closed::Stdout => command.stdout(writer).stderr(Stdio::piped()),
        Closed::Stderr => command.stderr(writer).stdout(Stdio::piped()),
    };
    let mut child = command.spawn().expect("the program starts");
    let mut other = String::new();
    let stream: Option<Box<dyn Read>> = match closed {
        Closed::Stdout => child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
        Closed::Stderr => child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
    };
    if let Some(mut stream) = stream {
        stream.read_to_string(&mut other).expect("read");
    }
    (child.wait().expect("wait"), other)
}

/// Exit 0 or SIGPIPE, never a panic (exit 101).
#[track_caller]
fn assert_quiet_end(what: &str, status: ExitStatus, other: &str) {
    let by_sigpipe = status.signal() == Some(libc::SIGPIPE);
    assert!(
        status.code() == Some(0) || by_sigpipe,
        "{what}: {status:?}\n{other}"
    );
    assert!(!other.contains("panicked"), "{what} panicked:\n{other}");
}

#[test]
fn every_program_ends_quietly_when_its_reader_has_gone() {
    let plugin = workspace_binary("kubectl-volmig", "kubectl-volmig");
    let mover = workspace_binary("mover", "mover");
    let demo = workspace_binary("volmig-demo", "volmig-demo");
    let sandbox = workspace_binary("kube-sandbox", "kube-sandbox");
    let empty = tempfile::tempdir().expect("tempdir");
    let root = empty.path().to_str().expect("utf-8 path");

    let cases: [(&PathBuf, &[&str]); 7] = [
        (&plugin, &["--help"]),
        (&plugin, &["migrate", "--help"]),
        (&mover, &["--help"]),
        // One JSON object on stdout.
        (&mover, &["inspect", "--root", root]),
        (&demo, &["--help"]),
        (&sandbox, &["--help"]),
        (&plugin, &["--version"]),
    ];
    for (program, args) in cases {
        let what = format!("{} {}", program.display(), args.join(" "));
        let (status, stderr) = run_into_closed_pipe(program, args, Closed::Stdout);
        assert_quiet_end(&what, status, &stderr);
    }
}

#[test]
fn an_error_said_into_a_closed_pipe_is_not_a_panic() {
    // `kubectl volmig migrate data --to Bad_Name 2>&1 | head -4`: the
    // refusal is written on stderr after the reader has gone.
    let plugin = workspace_binary("kubectl-volmig", "kubectl-volmig");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("missing-kubeconfig");
    let kubeconfig = kubeconfig.to_str().expect("utf-8 path");
    let args = [
        "--kubeconfig",
        kubeconfig,
        "migrate",
        "data",
        "--to",
        "Bad_Name",
    ];
    let (status, _) = run_into_closed_pipe(&plugin, &args, Closed::Stderr);
    assert_ne!(status.code(), Some(101), "panicked: {status:?}");
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}
