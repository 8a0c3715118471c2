//! Values given on command lines, parsed once for every program that takes
//! them: the mover's own flags, and `kubectl volmig`, which checks what it
//! will hand to the mover before it creates anything.

/// Why a string is not a transfer rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// Not a number with an optional unit. Not retryable: the same text
    /// fails the same way.
    #[error("invalid rate {0:?} (examples: 500, 20M, 1.5G)")]
    Invalid(String),
    /// Zero, negative or not finite. Not retryable.
    #[error("rate must be positive: {0:?}")]
    NotPositive(String),
}

impl RateError {
    /// Always `false`: the same text fails the same way.
    pub fn is_retryable(&self) -> bool {
        match self {
            RateError::Invalid(_) | RateError::NotPositive(_) => false,
        }
    }
}

/// Parses an rsync-style rate into bytes per second: a number of KiB/s, or
/// with a suffix K, M or G (powers of 1024, any case, an optional `B`).
///
/// ```
/// use mover::units::parse_rate;
/// assert_eq!(parse_rate("500"), Ok(500 * 1024));
/// assert_eq!(parse_rate("20M"), Ok(20 << 20));
/// assert!(parse_rate("abc").is_err());
/// ```
pub fn parse_rate(s: &str) -> Result<u64, RateError> {
    let t = s.trim().trim_end_matches(['b', 'B']);
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1 << 10),
    };
    let v: f64 = num.parse().map_err(|_| RateError::Invalid(s.to_string()))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(RateError::NotPositive(s.to_string()));
    }
    Ok(((v * mult as f64) as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_rsync_units() {
        assert_eq!(parse_rate("100"), Ok(100 * 1024));
        assert_eq!(parse_rate("20M"), Ok(20 << 20));
        assert_eq!(parse_rate("1.5g"), Ok(3 << 29));
        assert_eq!(parse_rate("4KB"), Ok(4096));
        assert_eq!(parse_rate("fast"), Err(RateError::Invalid("fast".into())));
        assert_eq!(parse_rate("0"), Err(RateError::NotPositive("0".into())));
        assert!(parse_rate("inf").is_err());
        assert!(parse_rate("").is_err());
    }
}
