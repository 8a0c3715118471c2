//! volmig's release build and test runner, the [xtask pattern]: plain Rust
//! run by `cargo xtask ...` (an alias in `.cargo/config.toml`), so releasing
//! and testing need nothing but cargo.
//!
//! - [`project`]: the version, git revision and commit time a build carries;
//! - [`platform`]: the release platforms, from Rust target to krew selector;
//! - [`build`]: the static, stripped release binaries;
//! - [`elf`]: proof that a Linux binary needs no dynamic loader;
//! - [`archive`]: reproducible `.tar.gz` archives and their `.sha256` files;
//! - [`image`]: the mover's `FROM scratch` OCI image, written without a
//!   container daemon;
//! - [`krew`]: the krew manifest, rendered from the archives and checked
//!   against krew's own validation rules.
//!
//! [xtask pattern]: https://github.com/matklad/cargo-xtask

pub mod archive;
pub mod build;
pub mod elf;
pub mod image;
pub mod krew;
pub mod platform;
pub mod project;
