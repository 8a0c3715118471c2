//! The operation driver: an explicit state machine (an `enum State` and a
//! `step` function, as kube-runtime's watcher) that runs attempts until one
//! succeeds, the failures run out, or someone aborts.
//!
//! Each attempt is a fresh receiver pod (on the destination claim) and a
//! fresh sender pod (on the source claim, placed next to the app for a
//! ReadWriteOnce source), labelled with the operation and the attempt. The
//! receiver's checkpoint on the destination volume makes attempt N+1 resume
//! where attempt N stopped. Everything the driver learns goes into the
//! operation record, so any client can pick the operation up.
//!
//! - [`watch`]: pod reflectors that wake the driver;
//! - [`follow`], [`logs`]: mover progress and results from pod logs;
//! - [`judge`]: an attempt's fate from its pods (pure);
//! - [`objects`]: creating and removing what attempts need;
//! - `network`: the receiver's Service, and across clusters the network
//!   path the sender takes to it (issue 23);
//! - `source_copy`: the snapshot or clone an attempt's sender reads, when
//!   it does not read the source itself (issue 24);
//! - [`run`]: the states, the loop and set-up; `attempt`, `ending` and
//!   `lease`: the steps of a running attempt, of its end and the
//!   operation's, and the record writes with the driver's heartbeat.

pub mod abort;
mod attempt;
pub mod cutover;
mod destination;
mod ending;
pub mod follow;
pub mod gather;
pub mod group;
pub mod incluster;
pub mod judge;
mod lease;
pub mod logs;
mod network;
pub mod objects;
pub mod rehome;
pub mod reuse;
mod run;
mod source_copy;
#[cfg(test)]
mod tests;
pub mod tunnel;
pub mod watch;

pub use attempt::progress_of;
pub use cutover::Cutover;
pub use lease::release_lease;
pub use run::{Driver, DriverOptions, Outcome, State, Update};

use crate::record::store::StoreError;

/// Why the driver stopped without finishing the operation.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot {action}: {message}")]
    Kube {
        action: String,
        message: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(transparent)]
    Record(Box<StoreError>),
    #[error("cannot create the operation's key material: {0}")]
    Keys(String),
    #[error("{0}")]
    Conflict(String),
    /// Someone ran `kubectl volmig abort`: the record says Aborted.
    #[error("the operation was aborted")]
    Aborted,
    /// Refused as asked (nothing to abort; the operation changed meanwhile).
    #[error("{0}")]
    Refused(String),
    /// Another client took the operation over (`resume --force`).
    #[error("{0} has taken this operation over (resume --force); this client stops driving it")]
    TakenOver(String),
    /// Another claim of the set stopped where it was: this one stops too,
    /// where it is, and `resume` of the set goes on from the records.
    #[error("stopped with the set ({0}); kubectl volmig resume of the set goes on from here")]
    Halted(String),
}

impl From<StoreError> for DriverError {
    fn from(e: StoreError) -> Self {
        DriverError::Record(Box::new(e))
    }
}

impl DriverError {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> DriverError {
        DriverError::Kube {
            action: action.into(),
            message: crate::cluster::kube_message(&source),
            source: Box::new(source),
        }
    }

    /// Whether running the driver again (`kubectl volmig resume`) may get
    /// further: the API server was unreachable or overloaded.
    pub fn is_retryable(&self) -> bool {
        match self {
            DriverError::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(e) => e.code >= 500 || e.code == 429 || service_account_not_yet(e),
                _ => true,
            },
            DriverError::Record(e) => e.is_retryable(),
            DriverError::Keys(_)
            | DriverError::Refused(_)
            | DriverError::Conflict(_)
            | DriverError::Aborted
            | DriverError::TakenOver(_)
            | DriverError::Halted(_) => false,
        }
    }
}

/// The ServiceAccount admission plugin refuses a pod (403) while its
/// ServiceAccount does not exist: in a namespace just created, `default`
/// comes a moment later from the serviceaccounts controller
/// (plugin/pkg/admission/serviceaccount: "error looking up service account").
fn service_account_not_yet(e: &kube::core::Status) -> bool {
    e.code == 403 && e.message.contains("error looking up service account")
}
