//! `kubectl-volmig`: the kubectl plugin's binary. Everything but argument
//! parsing, logging set-up and the exit code lives in the `volmig` library.

use clap::Parser;
use volmig::cli::{self, Cli};

fn main() {
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
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(cli::exit::ERROR);
        }
    };
    let code = runtime.block_on(async {
        match cli::run(cli).await {
            Ok(code) => code,
            // Each error's message carries its causes already.
            Err(e) => {
                eprintln!("error: {e}");
                cli::exit::ERROR
            }
        }
    });
    // The driver's watches may still be winding down: do not wait for them.
    runtime.shutdown_background();
    std::process::exit(code);
}
