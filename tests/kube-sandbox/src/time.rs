//! Timestamps in the RFC 3339 form the API uses (`2026-11-21T10:00:00Z`).

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Now, to the second, as Kubernetes writes `metav1.Time`.
pub fn now() -> String {
    format(OffsetDateTime::now_utc())
}

pub fn format(t: OffsetDateTime) -> String {
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// Parses a `metav1.Time`; `None` when it is not one.
pub fn parse(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}
