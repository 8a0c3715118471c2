//! `kubectl-volmig`: the kubectl plugin's binary. Everything but argument
//! parsing, logging set-up and the exit code lives in the `volmig` library.

// Output goes through `mover::stdio`: `println!` panics on a closed pipe.
#![warn(clippy::print_stdout, clippy::print_stderr)]

use clap::Parser;
use volmig::cli::{self, Cli};

fn main() {
    // kubectl_complete-volmig: answered before parsing, as its words are
    // an incomplete command line.
    let mut argv = std::env::args_os();
    if argv.nth(1).is_some_and(|a| a == cli::complete::HIDDEN) {
        let words: Vec<String> = argv.map(|a| a.to_string_lossy().into_owned()).collect();
        mover::stdio::out(&cli::complete::complete(&words));
        std::process::exit(cli::exit::OK);
    }
    let cli = Cli::parse();
    // Other crates (kube's client among them) speak only from -v on: the
    // errors that matter reach the user through volmig's own messages.
    // The monitor owns the terminal: nothing may write over it unless -v
    // asked for it.
    let quiet = matches!(cli.command, volmig::cli::Command::Monitor(_));
    let directives = match cli.verbose {
        0 if quiet => "off",
        0 => "volmig=warn,off",
        1 => "volmig=info,warn",
        _ => "volmig=debug,info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("VOLMIG_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(directives));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written is dropped: the subscriber's
        // own complaint would be an `eprintln!`, which panics on a closed pipe.
        .log_internal_errors(false)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            mover::stdio::err(&format!("error: cannot start the async runtime: {e}\n"));
            std::process::exit(cli::exit::ERROR);
        }
    };
    let code = runtime.block_on(async {
        match cli::run(cli).await {
            Ok(code) => code,
            // Each error's message carries its causes already.
            Err(e) => {
                mover::stdio::err(&format!("error: {e}\n"));
                cli::exit::ERROR
            }
        }
    });
    // The driver's watches may still be winding down: do not wait for them.
    runtime.shutdown_background();
    std::process::exit(code);
}
