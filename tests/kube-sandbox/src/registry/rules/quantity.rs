//! Resource quantities: their syntax, sign and size.

/// Whether `s` is a resource quantity, as its regular expression says:
/// `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`.
pub(super) fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    if number == 0 {
        return false;
    }
    let suffix = &s[number..];
    let letters = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let exponent = &suffix[letters..];
    let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    exponent.chars().all(|c| c.is_ascii_digit())
}

/// -1, 0 or 1 for a quantity's sign; None when it is not a quantity.
pub(super) fn quantity_sign(s: &str) -> Option<i8> {
    if !is_quantity(s) {
        return None;
    }
    let negative = s.starts_with('-');
    let digits = s.trim_start_matches(['+', '-']);
    let number = digits
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(digits.len());
    let zero = digits[..number].chars().all(|c| c == '0' || c == '.');
    Some(match (zero, negative) {
        (true, _) => 0,
        (false, true) => -1,
        (false, false) => 1,
    })
}

/// A resource quantity in bytes (`10Gi`, `500M`, `1024`); None when it is
/// not one.
pub fn parse_quantity(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    Some((value * factor as f64) as u128)
}
