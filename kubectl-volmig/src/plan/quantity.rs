//! Kubernetes quantities (`10Gi`, `500M`, `1.5Gi`, `1e9`, `100m`) as byte
//! counts or thousandths of a CPU, and byte counts back as quantities: the
//! one parser for every quantity volmig is given (`--to-size`, the mover
//! pods' resources), used by the planner to refuse what the API server
//! would, and by the resource builders.
//!
//! The grammar is the API server's (`resource.Quantity`): an unsigned
//! decimal number, then a binary suffix (`Ki` … `Ei`), a decimal suffix
//! (`n`, `u`, `m`, `k`, `M` … `E`) or a decimal exponent (`e3`, `E-2`). A
//! size is a whole number of bytes: fractions of a unit round up (`1.5` is
//! 2 bytes), as the API server does, but a sub-byte unit (`1500m`, `15e-1`)
//! must come out whole, since it is more likely a mistake than a size.

/// Why a string is not a byte size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("{quantity:?} is not a quantity")]
    Malformed { quantity: String },
    #[error("{quantity:?} has an unknown suffix {suffix:?}: {}", suffix_hint(.suffix))]
    UnknownSuffix { quantity: String, suffix: String },
    #[error("{quantity:?} is negative")]
    Negative { quantity: String },
    #[error("{quantity:?} is not a whole number of bytes: give a size in bytes or larger units")]
    NotWholeBytes { quantity: String },
    #[error("{quantity:?} is too large (at most {})", u64::MAX)]
    TooLarge { quantity: String },
}

impl QuantityError {
    /// Always `false`: the same text fails the same way.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// What a suffix multiplies the number by: `2^binary × 10^decimal`.
#[derive(Clone, Copy)]
struct Scale {
    binary: u32,
    decimal: i32,
}

/// Parses a Kubernetes quantity as a number of bytes.
///
/// ```
/// use volmig::plan::quantity::parse;
/// assert_eq!(parse("10Gi"), Ok(10 << 30));
/// assert_eq!(parse("1.5k"), Ok(1500));
/// assert_eq!(parse("1e9"), Ok(1_000_000_000));
/// assert!(parse("10GB").is_err());
/// ```
pub fn parse(quantity: &str) -> Result<u64, QuantityError> {
    parse_scaled(quantity, 0, Fraction::MustBeWhole)
}

/// Parses a Kubernetes quantity as thousandths (a CPU quantity as
/// millicores); what is finer rounds up, as the API server keeps it.
///
/// ```
/// use volmig::plan::quantity::parse_millis;
/// assert_eq!(parse_millis("100m"), Ok(100));
/// assert_eq!(parse_millis("0.5"), Ok(500));
/// assert_eq!(parse_millis("2"), Ok(2000));
/// assert!(parse_millis("lots").is_err());
/// ```
pub fn parse_millis(quantity: &str) -> Result<u64, QuantityError> {
    parse_scaled(quantity, 3, Fraction::RoundsUp)
}

/// What a result finer than the unit counted in becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fraction {
    /// Rounds up, unless the quantity's own unit is finer than the one
    /// counted in (`1500m` bytes): then it is an error.
    MustBeWhole,
    /// Always rounds up.
    RoundsUp,
}

/// `quantity` × 10^`shift`, as a whole number.
fn parse_scaled(quantity: &str, shift: i32, fraction: Fraction) -> Result<u64, QuantityError> {
    if quantity.is_empty() {
        return Err(QuantityError::Empty);
    }
    let malformed = || QuantityError::Malformed {
        quantity: quantity.to_string(),
    };
    let unsigned = match quantity.as_bytes()[0] {
        b'-' => {
            return Err(QuantityError::Negative {
                quantity: quantity.to_string(),
            })
        }
        b'+' => &quantity[1..],
        _ => quantity,
    };
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (whole, decimals) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && decimals.is_empty() || decimals.contains('.') {
        return Err(malformed());
    }
    let scale = scale(suffix).ok_or_else(|| {
        if suffix.starts_with(['e', 'E']) && suffix.len() > 1 {
            malformed()
        } else {
            QuantityError::UnknownSuffix {
                quantity: quantity.to_string(),
                suffix: suffix.to_string(),
            }
        }
    })?;
    let too_large = || QuantityError::TooLarge {
        quantity: quantity.to_string(),
    };
    // The number as an integer of digits, and how many of them are decimals;
    // trailing zeros after the point change nothing and could overflow.
    let decimals = decimals.trim_end_matches('0');
    let mut digits: u128 = 0;
    for d in whole.bytes().chain(decimals.bytes()) {
        digits = digits
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(d - b'0')))
            .ok_or_else(too_large)?;
    }
    let scaled = digits
        .checked_shl(scale.binary)
        .filter(|n| n >> scale.binary == digits);
    let scaled = scaled.ok_or_else(too_large)?;
    let exponent = i64::from(scale.decimal) + i64::from(shift) - decimals.len() as i64;
    let bytes = if scaled == 0 {
        0
    } else if exponent >= 0 {
        let factor = pow10(exponent).ok_or_else(too_large)?;
        scaled.checked_mul(factor).ok_or_else(too_large)?
    } else {
        // A divisor beyond u128 leaves less than one byte: a fraction.
        let divisor = pow10(-exponent);
        let whole_bytes = divisor.filter(|d| scaled % d == 0).map(|d| scaled / d);
        match whole_bytes {
            Some(bytes) => bytes,
            None if fraction == Fraction::MustBeWhole
                && i64::from(scale.decimal) + i64::from(shift) < 0 =>
            {
                return Err(QuantityError::NotWholeBytes {
                    quantity: quantity.to_string(),
                })
            }
            // Fractions of a byte or larger unit round up, as the API server's.
            None => divisor.map_or(1, |d| scaled / d + 1),
        }
    };
    u64::try_from(bytes).map_err(|_| too_large())
}

/// `bytes` with the largest binary suffix that represents it exactly:
/// `10737418240` is `10Gi`, `3072` is `3Ki`, `1500` stays `1500`.
///
/// ```
/// use volmig::plan::quantity::format;
/// assert_eq!(format(10 << 30), "10Gi");
/// assert_eq!(format(1536 << 20), "1536Mi");
/// assert_eq!(format(1500), "1500");
/// ```
pub fn format(bytes: u64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    SUFFIXES
        .iter()
        .find(|(_, shift)| bytes != 0 && bytes.trailing_zeros() >= *shift)
        .map_or_else(
            || bytes.to_string(),
            |(suffix, shift)| format!("{}{suffix}", bytes >> shift),
        )
}

/// The multiplier a suffix stands for, `None` if it is not one.
fn scale(suffix: &str) -> Option<Scale> {
    let binary = |binary| Some(Scale { binary, decimal: 0 });
    let decimal = |decimal| Some(Scale { binary: 0, decimal });
    match suffix {
        "" => decimal(0),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Beyond i32 it is not a size anyway; pow10 bounds the rest.
            decimal(exponent.parse().ok()?)
        }
    }
}

/// 10^exponent, `None` when it does not fit a `u128`.
fn pow10(exponent: i64) -> Option<u128> {
    10u128.checked_pow(u32::try_from(exponent).ok()?)
}

/// What to write instead of a suffix that is not one, with the common
/// mistakes (`GB`, `GiB`, `gi`) answered by name.
fn suffix_hint(suffix: &str) -> String {
    let stem = suffix.strip_suffix(['B', 'b']).unwrap_or(suffix);
    let upper = stem.to_ascii_uppercase();
    let letter = upper.strip_suffix('I').unwrap_or(&upper);
    match letter {
        "K" | "M" | "G" | "T" | "P" | "E" => {
            let decimal = if letter == "K" { "k" } else { letter };
            format!("write {letter}i (powers of 1024) or {decimal} (powers of 1000)")
        }
        _ => "use Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or k, M, G, T, P, E (powers of 1000)"
            .to_string(),
    }
}
