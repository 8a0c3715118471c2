//! What the sender asks of a session, checked against what this receiver
//! serves before anything at the destination changes.

use std::fs;
use std::path::PathBuf;

use super::ReceiverConfig;
use crate::checkpoint::check_operation_id;
use crate::filter::Filter;
use crate::protocol::{
    violation, SessionOptions, MAX_EXCLUDES, MAX_EXCLUDE_BYTES, MAX_EXCLUDE_LEN,
};
use crate::session::SessionError;

/// Validates the sender's options and makes the destination root.
pub(super) fn prepare(
    cfg: &ReceiverConfig,
    opts: &SessionOptions,
) -> Result<(Filter, PathBuf), SessionError> {
    check_operation(cfg, opts)?;
    if cfg.block_only {
        return Err(SessionError::Usage(format!(
            "this receiver serves block sessions only, and the sender's source is a directory \
             tree (the destination is {})",
            cfg.root.display()
        )));
    }
    if crate::block::kind_of(&cfg.root).is_some() {
        return Err(SessionError::Usage(format!(
            "the destination {} is a block device or a regular file; the source is a directory tree",
            cfg.root.display()
        )));
    }
    let pattern_bytes: usize = opts.excludes.iter().map(String::len).sum();
    let longest = opts.excludes.iter().map(String::len).max().unwrap_or(0);
    if opts.excludes.len() > MAX_EXCLUDES
        || longest > MAX_EXCLUDE_LEN
        || pattern_bytes > MAX_EXCLUDE_BYTES
    {
        return Err(violation(format!(
            "{} exclude patterns of {pattern_bytes} bytes, the longest {longest} \
             (at most {MAX_EXCLUDES} patterns, {MAX_EXCLUDE_LEN} bytes each, {MAX_EXCLUDE_BYTES} in all)",
            opts.excludes.len()
        ))
        .into());
    }
    let filter = Filter::new(&opts.excludes).map_err(|e| SessionError::Usage(e.to_string()))?;
    fs::create_dir_all(&cfg.root)
        .map_err(|e| SessionError::local(format!("creating {}", cfg.root.display()), e))?;
    let root = fs::canonicalize(&cfg.root)
        .map_err(|e| SessionError::local(format!("resolving {}", cfg.root.display()), e))?;
    Ok((filter, root))
}

/// The operation and attempt the sender names, against what this receiver
/// serves; and the compression level it asks for.
pub(super) fn check_operation(
    cfg: &ReceiverConfig,
    opts: &SessionOptions,
) -> Result<(), SessionError> {
    if let Some(id) = &opts.operation_id {
        check_operation_id(id).map_err(SessionError::Usage)?;
        if opts.attempt == 0 {
            return Err(SessionError::Usage("attempts are numbered from 1".into()));
        }
    }
    if cfg.operation_id.is_some() && cfg.operation_id != opts.operation_id {
        return Err(SessionError::Usage(format!(
            "this receiver serves operation {}, not {}",
            cfg.operation_id.as_deref().unwrap_or("-"),
            opts.operation_id.as_deref().unwrap_or("(none)")
        )));
    }
    if let Some(attempt) = cfg.attempt.filter(|&a| a != opts.attempt) {
        return Err(SessionError::Usage(format!(
            "this receiver serves attempt {attempt}, the sender is attempt {}",
            opts.attempt
        )));
    }
    if let Some(level) = opts.compress {
        if !zstd::compression_level_range().contains(&level) {
            return Err(SessionError::Usage(format!(
                "zstd level {level} is out of range"
            )));
        }
    }
    Ok(())
}
