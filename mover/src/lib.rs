//! volmig's data mover: an rsync-style delta transfer engine.
//!
//! The library has no Kubernetes in it. Its parts, from the bottom up:
//!
//! - [`path`], [`meta`], [`filter`], [`walk`]: the tree and what is preserved;
//! - [`beneath`]: a peer's paths resolved strictly inside the root;
//! - [`rolling`], [`signature`], [`delta`], [`patch`]: the delta algorithm,
//!   streaming and bounded for untrusted input; [`treehash`]: BLAKE3 of a
//!   file hashed in parts (in parallel, or while the rest streams by);
//! - [`protocol`]: versioned frames on a tokio-util codec;
//! - [`session`]: sender and receiver as pipelines with explicit state
//!   machines, over TCP or an in-memory pipe ([`session::local`]);
//! - [`block`]: block sessions' shapes, devices and images, holes and checkpoints;
//! - [`checkpoint`]: the receiver's durable record of an interrupted operation;
//! - [`survey`]: what a destination holds of a source before a copy (`mover inspect`);
//! - [`stats`]: progress events and the final summary;
//! - [`tls`]: the authenticated channel between the two sides (TLS 1.3,
//!   per-operation key material);
//! - [`manifest`]: a BLAKE3 manifest of a tree, to prove two trees identical;
//! - [`units`], [`stdio`]: what the programs share: command-line values
//!   (`kubectl volmig` checks the mover's before it creates anything), and
//!   writing to stdout and stderr without panicking on a closed pipe.
//!
//! The engine (feature `engine`, on by default) is Linux's: it walks and
//! writes trees with `openat2`, xattrs and Linux metadata. Without it the
//! library is the portable part `kubectl volmig` uses on every platform:
//! [`stats`], [`units`], [`stdio`], [`tls`], [`operation`] ids and [`path`].

// Output goes through `stdio` (programs) or is ignored when it fails
// (library warnings): `println!` panics on a closed pipe.
#![warn(clippy::print_stdout, clippy::print_stderr)]

#[cfg(feature = "engine")]
pub mod beneath;
#[cfg(feature = "engine")]
pub mod block;
#[cfg(feature = "engine")]
pub mod checkpoint;
#[cfg(feature = "engine")]
pub mod delta;
#[cfg(feature = "engine")]
pub mod filter;
#[cfg(feature = "engine")]
pub mod manifest;
#[cfg(feature = "engine")]
pub mod meta;
pub mod operation;
#[cfg(feature = "engine")]
pub mod patch;
pub mod path;
#[cfg(feature = "engine")]
pub mod protocol;
#[cfg(feature = "engine")]
pub mod rolling;
#[cfg(feature = "engine")]
pub mod session;
#[cfg(feature = "engine")]
pub mod signature;
pub mod stats;
pub mod stdio;
#[cfg(feature = "engine")]
pub mod survey;
pub mod tls;
#[cfg(feature = "engine")]
pub mod treehash;
pub mod units;
#[cfg(feature = "engine")]
pub mod walk;
#[cfg(feature = "engine")]
pub mod warm;
