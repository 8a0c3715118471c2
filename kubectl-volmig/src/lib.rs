//! `kubectl volmig`: move a PersistentVolumeClaim's data to another claim.
//!
//! The library behind the `kubectl-volmig` binary, in layers:
//!
//! - [`spec`], [`names`]: what was asked for; how volmig's objects are
//!   named and labelled; [`snapshots`]: the VolumeSnapshot kinds;
//! - [`plan`]: cluster objects in, a plan or a refusal out (pure);
//! - [`resources`]: the objects a plan needs, built (pure);
//! - [`record`]: the operation record, a ConfigMap any client can read;
//! - [`cluster`]: the kube client, as kubectl's flags say;
//! - [`driver`]: the operation as an explicit state machine: attempts,
//!   retries, placement re-checks, progress;
//! - [`cli`]: the commands; [`tui`]: the monitor, beside it (neither
//!   uses the other).
//!
//! The mover's engine is a dependency for its progress and summary types,
//! its command-line units and its stdio helpers only; nothing here runs
//! inside a pod.

// Output goes through `cli::out` and `say!`: `println!` panics on a closed pipe.
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod cli;
pub mod cluster;
pub mod driver;
pub mod events;
pub mod names;
pub mod plan;
pub mod record;
pub mod resources;
pub mod signals;
pub mod snapshots;
pub mod spec;
pub mod tui;
