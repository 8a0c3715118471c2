//! The command's own values: each one the API server or the mover would
//! reject is refused by the planner, naming the flag, before anything is
//! created; valid ones pass.

use std::time::Duration;

use mover::units::RateError;

use super::{assert_says, spec, Cluster};
use crate::plan::quantity::QuantityError;
use crate::plan::{check_values, mover_resources, start_timeout, Refusal};

#[test]
fn a_destination_name_the_api_server_refuses_is_refused() {
    for bad in [
        "Bad_Name",
        "UPPER",
        "-leading",
        "trailing-",
        "a..b",
        "a.-b",
        "",
        &"a".repeat(254),
    ] {
        let refusal = Cluster::base().refuse(&spec(bad));
        assert!(
            matches!(&refusal, Refusal::InvalidName { flag, value, .. } if flag == "--to" && value == bad),
            "{bad:?}: {refusal}"
        );
        assert_says(
            &refusal.to_string(),
            &["invalid --to", "lowercase RFC 1123 subdomain", "253"],
        );
        assert!(!refusal.is_retryable());
    }
    for good in ["data-fast", "data.v2", "0", &"a".repeat(253)] {
        assert_eq!(check_values(&spec(good)), Ok(()), "{good:?}");
    }
}

#[test]
fn a_destination_namespace_the_api_server_refuses_is_refused() {
    let mut to = spec("data-fast");
    to.destination.namespace = "Prod_Env".into();
    let refusal = Cluster::base().refuse(&to);
    assert!(matches!(&refusal, Refusal::InvalidName { flag, .. } if flag == "--to-namespace"));
    assert_says(
        &refusal.to_string(),
        &[r#""Prod_Env""#, "RFC 1123 label", "63"],
    );
    to.destination.namespace = "a.b".into();
    assert!(check_values(&to).is_err(), "a namespace has no dots");
}

#[test]
fn a_rate_the_mover_refuses_is_refused_with_the_movers_words() {
    let mut to = spec("data-fast");
    to.transfer.bwlimit = Some("abc".into());
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::InvalidRate {
            value: "abc".into(),
            error: RateError::Invalid("abc".into())
        }
    );
    assert_says(
        &refusal.to_string(),
        &[r#"invalid --bwlimit "abc""#, "500, 20M, 1.5G"],
    );
    to.transfer.bwlimit = Some("0".into());
    assert!(matches!(
        Cluster::base().refuse(&to),
        Refusal::InvalidRate {
            error: RateError::NotPositive(_),
            ..
        }
    ));
    to.transfer.bwlimit = Some("20M".into());
    assert_eq!(check_values(&to), Ok(()));
}

#[test]
fn mover_resources_must_be_quantities_with_the_limit_above_the_request() {
    let mut to = spec("data-fast");
    to.mover.cpu_request = "lots".into();
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::InvalidResource {
            flag: "--mover-cpu".into(),
            value: "lots".into(),
            error: QuantityError::Malformed {
                quantity: "lots".into()
            }
        }
    );
    assert_says(&refusal.to_string(), &["--mover-cpu", "100m, 0.5 or 2"]);

    let mut to = spec("data-fast");
    to.mover.memory_request = "64MB".into();
    let refusal = Cluster::base().refuse(&to);
    assert!(matches!(&refusal, Refusal::InvalidResource { flag, .. } if flag == "--mover-memory"));
    assert_says(&refusal.to_string(), &["write Mi (powers of 1024)"]);

    let mut to = spec("data-fast");
    to.mover.memory_limit = "32Mi".into();
    let refusal = Cluster::base().refuse(&to);
    assert_eq!(
        refusal,
        Refusal::MemoryLimitBelowRequest {
            limit: "32Mi".into(),
            request: "64Mi".into()
        }
    );
    assert_says(
        &refusal.to_string(),
        &["--mover-memory-limit 32Mi is below --mover-memory 64Mi"],
    );

    // What the API server takes passes, in any of its spellings.
    let mut to = spec("data-fast");
    to.mover.cpu_request = "0.25".into();
    to.mover.memory_request = "1e8".into();
    to.mover.memory_limit = "0.5Gi".into();
    let resources = mover_resources(&to.mover).expect("valid");
    assert_eq!(resources.cpu_request.0, "0.25");
    assert_eq!(resources.memory_limit.0, "0.5Gi");
}

#[test]
fn an_empty_or_padded_mover_image_is_refused() {
    for bad in ["", " ghcr.io/volmig/mover:0.1.0"] {
        let mut to = spec("data-fast");
        to.mover.image = bad.into();
        let refusal = Cluster::base().refuse(&to);
        assert_eq!(refusal, Refusal::InvalidImage { value: bad.into() });
        assert_says(&refusal.to_string(), &["--mover-image", "without spaces"]);
    }
}

#[test]
fn a_start_timeout_of_zero_is_refused() {
    let refusal = start_timeout(0).expect_err("zero");
    assert_eq!(refusal, Refusal::InvalidStartTimeout { seconds: 0 });
    assert_says(
        &refusal.to_string(),
        &["invalid --start-timeout 0", "at least 1 second"],
    );
    assert_eq!(start_timeout(300), Ok(Duration::from_secs(300)));
}

#[test]
fn values_are_checked_before_the_cluster_is_looked_at() {
    // No source claim at all: the bad value is still what is reported.
    let mut cluster = Cluster::base();
    cluster.claims.clear();
    let mut to = spec("data-fast");
    to.destination.size = Some("10GB".into());
    assert!(matches!(cluster.refuse(&to), Refusal::InvalidSize { .. }));
    assert!(check_values(&to).is_err());
}
