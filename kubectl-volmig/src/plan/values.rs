//! The command's own values, checked before the cluster is read: every
//! value the API server or the mover would reject is refused here, so a
//! mistake costs nothing (no claim, no record) and is told in the words of
//! its flag. Each value is parsed by the code that uses it: rates by the
//! mover's own parser, quantities by [`quantity`], which the resource
//! builders use too ([`mover_resources`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::quantity::{self, QuantityError};
use super::refusal::{Refusal, ACCESS_MODES};
use crate::spec::{CopyMethod, MigrationSpec, MoverOptions};

/// The API server's rule for a claim's name (`metadata.name`).
const SUBDOMAIN_RULE: &str = "a claim name must be a lowercase RFC 1123 subdomain: \
     at most 253 characters, lowercase letters, digits, '-' and '.', \
     each part between dots starting and ending with a letter or a digit";
/// The API server's rule for a namespace's name.
const LABEL_RULE: &str = "a namespace name must be a lowercase RFC 1123 label: \
     at most 63 characters, lowercase letters, digits and '-', \
     starting and ending with a letter or a digit";

/// Checks every value of `spec` that needs no cluster to judge: the
/// destination's name, namespace, size and access modes, the transfer's
/// rate, the mover's image and resources.
pub fn check_values(spec: &MigrationSpec) -> Result<(), Refusal> {
    let dst = &spec.destination;
    if !is_dns_subdomain(&dst.name) {
        return Err(invalid_name("--to", &dst.name, SUBDOMAIN_RULE));
    }
    if !is_dns_label(&dst.namespace) {
        return Err(invalid_name("--to-namespace", &dst.namespace, LABEL_RULE));
    }
    requested_size(spec)?;
    if let Some(bad) = (dst.access_modes.iter()).find(|m| !ACCESS_MODES.contains(&m.as_str())) {
        return Err(Refusal::InvalidAccessMode { value: bad.clone() });
    }
    if let Some(rate) = &spec.transfer.bwlimit {
        mover::units::parse_rate(rate).map_err(|error| Refusal::InvalidRate {
            value: rate.clone(),
            error,
        })?;
    }
    let image = &spec.mover.image;
    if image.is_empty() || image.trim() != image {
        return Err(Refusal::InvalidImage {
            value: image.clone(),
        });
    }
    mover_resources(&spec.mover)?;
    let method = spec.transfer.copy_method;
    if spec.transfer.snapshot_class.is_some()
        && matches!(method, CopyMethod::Direct | CopyMethod::Clone)
    {
        return Err(Refusal::SnapshotClassUnused {
            method: method.as_str().to_string(),
        });
    }
    Ok(())
}

/// `--to-size` as `(quantity, bytes)`, if given.
pub(super) fn requested_size(spec: &MigrationSpec) -> Result<Option<(String, u64)>, Refusal> {
    let Some(size) = &spec.destination.size else {
        return Ok(None);
    };
    match quantity::parse(size) {
        Ok(bytes) => Ok(Some((size.clone(), bytes))),
        Err(error) => Err(Refusal::InvalidSize {
            value: size.clone(),
            error,
        }),
    }
}

/// `--start-timeout`: at least a second, or every attempt would fail
/// before its pods could start.
pub fn start_timeout(seconds: u64) -> Result<Duration, Refusal> {
    match seconds {
        0 => Err(Refusal::InvalidStartTimeout { seconds }),
        s => Ok(Duration::from_secs(s)),
    }
}

/// The mover pods' resources, as each pod asks for them.
#[derive(Debug, Clone, PartialEq)]
pub struct MoverResources {
    pub cpu_request: Quantity,
    pub memory_request: Quantity,
    pub memory_limit: Quantity,
}

impl MoverResources {
    /// The values as given, unchecked: for a record an older plugin wrote,
    /// which the API server judges instead.
    pub fn as_given(mover: &MoverOptions) -> MoverResources {
        MoverResources {
            cpu_request: Quantity(mover.cpu_request.clone()),
            memory_request: Quantity(mover.memory_request.clone()),
            memory_limit: Quantity(mover.memory_limit.clone()),
        }
    }
}

/// The mover pods' CPU request, memory request and memory limit, each a
/// quantity the API server accepts, the limit not below the request.
pub fn mover_resources(mover: &MoverOptions) -> Result<MoverResources, Refusal> {
    let checked = |flag: &str, value: &str, parse: fn(&str) -> Result<u64, QuantityError>| {
        parse(value).map_err(|error| Refusal::InvalidResource {
            flag: flag.to_string(),
            value: value.to_string(),
            error,
        })
    };
    checked("--mover-cpu", &mover.cpu_request, quantity::parse_millis)?;
    let request = checked("--mover-memory", &mover.memory_request, quantity::parse)?;
    let limit = checked("--mover-memory-limit", &mover.memory_limit, quantity::parse)?;
    if limit < request {
        return Err(Refusal::MemoryLimitBelowRequest {
            limit: mover.memory_limit.clone(),
            request: mover.memory_request.clone(),
        });
    }
    Ok(MoverResources::as_given(mover))
}

fn invalid_name(flag: &str, value: &str, rule: &str) -> Refusal {
    Refusal::InvalidName {
        flag: flag.to_string(),
        value: value.to_string(),
        rule: rule.to_string(),
    }
}

/// An RFC 1123 subdomain, as the API server checks object names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_label)
}

/// An RFC 1123 label, as the API server checks namespace names.
fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && is_label(name)
}

/// Lowercase letters, digits and `-`, beginning and ending with a letter
/// or a digit.
fn is_label(part: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = part.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || b == b'-')
        }
        _ => false,
    }
}
