//! Shared by the fuzz targets: seed writing.
//!
//! Corpora are not committed. Each target writes its own seeds when the
//! environment variable `MOVER_FUZZ_WRITE_SEEDS` names a directory: the
//! target's `init` block calls [`write_seeds_if_asked`], which writes the
//! files there and exits before any fuzzing starts (see `fuzz/seed.sh`).

use std::path::PathBuf;

/// The variable `seed.sh` sets to a corpus directory.
pub const SEED_VAR: &str = "MOVER_FUZZ_WRITE_SEEDS";

/// If asked to, writes `seeds()` into the directory named by [`SEED_VAR`]
/// and exits the process.
pub fn write_seeds_if_asked(seeds: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    let Some(dir) = std::env::var_os(SEED_VAR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create the seed directory");
    let seeds = seeds();
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write a seed");
    }
    eprintln!("wrote {} seeds to {}", seeds.len(), dir.display());
    std::process::exit(0);
}
