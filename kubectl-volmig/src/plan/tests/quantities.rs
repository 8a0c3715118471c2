//! Kubernetes quantities to bytes, and bytes back to quantities.

use crate::plan::quantity::{format, parse, parse_millis, QuantityError};

const KI: u64 = 1 << 10;
const GI: u64 = 1 << 30;

#[test]
fn quantities_parse_as_the_api_server_counts_bytes() {
    let cases: &[(&str, u64)] = &[
        ("0", 0),
        ("1500", 1500),
        ("+10", 10),
        ("1k", 1000),
        ("1Ki", KI),
        ("5M", 5_000_000),
        ("10Mi", 10 << 20),
        ("10G", 10_000_000_000),
        ("10Gi", 10 * GI),
        ("2T", 2_000_000_000_000),
        ("2Ti", 2 << 40),
        ("1P", 10u64.pow(15)),
        ("1Pi", 1 << 50),
        ("1E", 10u64.pow(18)),
        ("15Ei", 15 << 60),
        ("1e9", 1_000_000_000),
        ("1E3", 1000),
        ("25e+2", 2500),
        ("1.5Gi", 1536 << 20),
        ("0.5Ki", 512),
        (".5Ki", 512),
        ("2.", 2),
        ("1.000000000000000000000000000000000000000000Gi", GI),
        // A fraction of a byte rounds up, as Quantity.Value() does.
        ("1.5", 2),
        ("0.0001Ki", 1),
        ("1.0000001k", 1001),
        // Sub-byte units are fine when they come out whole.
        ("1000m", 1),
        ("2500e-1", 250),
        ("0m", 0),
        ("18446744073709551615", u64::MAX),
    ];
    for (text, bytes) in cases {
        assert_eq!(parse(text), Ok(*bytes), "{text}");
    }
}

#[test]
fn what_is_not_a_byte_size_is_refused_for_its_reason() {
    let quantity = |q: &str| q.to_string();
    let cases: Vec<(&str, QuantityError)> = vec![
        ("", QuantityError::Empty),
        (
            "Gi",
            QuantityError::Malformed {
                quantity: quantity("Gi"),
            },
        ),
        (
            "ten",
            QuantityError::Malformed {
                quantity: quantity("ten"),
            },
        ),
        (
            ".",
            QuantityError::Malformed {
                quantity: quantity("."),
            },
        ),
        (
            "1.2.3",
            QuantityError::Malformed {
                quantity: quantity("1.2.3"),
            },
        ),
        (
            " 1Gi",
            QuantityError::Malformed {
                quantity: quantity(" 1Gi"),
            },
        ),
        (
            "1e3.5",
            QuantityError::Malformed {
                quantity: quantity("1e3.5"),
            },
        ),
        (
            "-1Gi",
            QuantityError::Negative {
                quantity: quantity("-1Gi"),
            },
        ),
        (
            "10GB",
            QuantityError::UnknownSuffix {
                quantity: quantity("10GB"),
                suffix: "GB".into(),
            },
        ),
        (
            "10gi",
            QuantityError::UnknownSuffix {
                quantity: quantity("10gi"),
                suffix: "gi".into(),
            },
        ),
        (
            "1 Gi",
            QuantityError::UnknownSuffix {
                quantity: quantity("1 Gi"),
                suffix: " Gi".into(),
            },
        ),
        (
            "1500m",
            QuantityError::NotWholeBytes {
                quantity: quantity("1500m"),
            },
        ),
        (
            "1e-3",
            QuantityError::NotWholeBytes {
                quantity: quantity("1e-3"),
            },
        ),
        (
            "1e-40",
            QuantityError::NotWholeBytes {
                quantity: quantity("1e-40"),
            },
        ),
        (
            "16Ei",
            QuantityError::TooLarge {
                quantity: quantity("16Ei"),
            },
        ),
        (
            "18446744073709551616",
            QuantityError::TooLarge {
                quantity: quantity("18446744073709551616"),
            },
        ),
        (
            "1e40",
            QuantityError::TooLarge {
                quantity: quantity("1e40"),
            },
        ),
        (
            "9".repeat(50).leak(),
            QuantityError::TooLarge {
                quantity: "9".repeat(50),
            },
        ),
    ];
    for (text, error) in cases {
        assert_eq!(parse(text), Err(error.clone()), "{text:?}");
        assert!(!error.is_retryable());
    }
}

#[test]
fn cpu_quantities_parse_as_millicores() {
    let cases: &[(&str, u64)] = &[
        ("100m", 100),
        ("0.5", 500),
        ("2", 2000),
        ("1.5k", 1_500_000),
        ("250000u", 250),
        ("1n", 1),
        ("0", 0),
    ];
    for (text, millis) in cases {
        assert_eq!(parse_millis(text), Ok(*millis), "{text}");
    }
    for bad in ["lots", "", "-1", "1 cpu", "2cores"] {
        assert!(parse_millis(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn suffix_mistakes_get_a_suggestion() {
    let message = |q| parse(q).unwrap_err().to_string();
    assert!(message("10GB").contains("write Gi (powers of 1024) or G (powers of 1000)"));
    assert!(message("10KiB").contains("write Ki (powers of 1024) or k (powers of 1000)"));
    assert!(message("10x").contains("use Ki, Mi, Gi"));
}

#[test]
fn bytes_format_with_the_largest_exact_binary_suffix() {
    let cases: &[(u64, &str)] = &[
        (0, "0"),
        (1, "1"),
        (1000, "1000"),
        (1500, "1500"),
        (KI, "1Ki"),
        (3 * KI, "3Ki"),
        (1536 << 20, "1536Mi"),
        (10 * GI, "10Gi"),
        (10_000_000_000, "9765625Ki"),
        (1 << 50, "1Pi"),
        (15 << 60, "15Ei"),
        (u64::MAX, "18446744073709551615"),
    ];
    for (bytes, text) in cases {
        assert_eq!(format(*bytes), *text, "{bytes}");
    }
}

#[test]
fn formatted_sizes_parse_back_to_the_same_bytes() {
    let mut sizes = vec![0, 1, 999, 1000, 1023, 1025, u64::MAX, u64::MAX - 1];
    for shift in 0..64 {
        for factor in [1u64, 3, 5, 1000, 1023] {
            if let Some(bytes) = factor.checked_shl(shift).filter(|b| b >> shift == factor) {
                sizes.push(bytes);
            }
        }
    }
    for bytes in sizes {
        let text = format(bytes);
        assert_eq!(parse(&text), Ok(bytes), "{bytes} formatted as {text}");
    }
}
