//! Operation ids: what names one operation's key material (TLS) and its
//! checkpoint at the destination. Portable: `kubectl volmig` checks ids
//! with it on every platform.

/// Longest operation id.
pub const MAX_OPERATION_ID: usize = 128;

/// Checks an operation id: 1 to 128 characters of `[A-Za-z0-9._-]`.
pub fn check_operation_id(id: &str) -> Result<(), String> {
    let ok = (1..=MAX_OPERATION_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid operation id {id:?}: 1 to {MAX_OPERATION_ID} characters of A-Z a-z 0-9 . _ -"
        ))
    }
}
