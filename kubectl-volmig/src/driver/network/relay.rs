//! The tunnel's relay beside a running attempt: started once the sender
//! listens, stopped with the attempt (dropping it cancels the relay).

use std::sync::{Arc, OnceLock};

use tokio_util::sync::{CancellationToken, DropGuard};

use super::super::run::{AttemptEnd, Driver};
use super::super::tunnel::{self, Endpoint, Moved};
use crate::names;
use crate::record::AttemptPhase;

/// A relay running for one attempt.
pub(in crate::driver) struct Relay {
    _stop: DropGuard,
    /// The attempt's end once the relay failed: the movers would wait for
    /// each other otherwise.
    failed: Arc<OnceLock<AttemptEnd>>,
}

impl Driver {
    /// Over the tunnel: starts the attempt's relay once its sender
    /// listens; the attempt's end if the relay failed.
    pub(in crate::driver) fn tend_tunnel(&mut self) -> Option<AttemptEnd> {
        if !self.through_tunnel() {
            return None;
        }
        let live = self.live.as_mut()?;
        if let Some(relay) = &live.relay {
            return relay.failed.get().cloned();
        }
        let listening = live
            .sender_log
            .as_ref()
            .is_some_and(|l| l.digest().listening);
        if !listening {
            return None;
        }
        let cancel = CancellationToken::new();
        let failed = Arc::new(OnceLock::new());
        let (sender_pods, receiver_pods) = (self.sender_pods.clone(), self.receiver_pods.clone());
        let (sender, receiver) = (live.sender.clone(), live.receiver.clone());
        let (stop, failure) = (cancel.clone(), failed.clone());
        let wake = self.watch.wake.clone();
        tokio::spawn(async move {
            let sender = Endpoint {
                pods: sender_pods,
                pod: &sender,
                port: names::SENDER_PORT as u16,
            };
            let receiver = Endpoint {
                pods: receiver_pods,
                pod: &receiver,
                port: names::MOVER_PORT as u16,
            };
            match tunnel::relay(sender, receiver, stop, &Moved::default()).await {
                Ok(end) => tracing::debug!(?end, "tunnel relay ended"),
                Err(e) => {
                    tracing::warn!("tunnel: {e}");
                    let _ = failure.set(AttemptEnd {
                        phase: AttemptPhase::Failed,
                        reason: Some(format!("the tunnel failed: {e}")),
                        retryable: Some(e.is_retryable()),
                        destination_fault: false,
                    });
                }
            }
            wake.notify_one();
        });
        live.relay = Some(Relay {
            _stop: cancel.drop_guard(),
            failed,
        });
        None
    }
}
