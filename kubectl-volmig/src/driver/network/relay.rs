//! The tunnel's relay beside a running attempt: started once the sender
//! listens, stopped with the attempt (dropping it cancels the relay).

use std::sync::{Arc, Mutex};

use tokio_util::sync::{CancellationToken, DropGuard};

use super::super::run::{AttemptEnd, Driver};
use super::super::tunnel::{self, Endpoint, Moved};
use crate::names;
use crate::record::AttemptPhase;

/// A relay running for one attempt.
pub(in crate::driver) struct Relay {
    _stop: DropGuard,
    /// Why it failed, once it has: the attempt then fails with it (the
    /// movers would wait for each other otherwise).
    failed: Arc<Mutex<Option<(String, bool)>>>,
}

impl Relay {
    /// The attempt's end, when the relay failed.
    fn failure(&self) -> Option<AttemptEnd> {
        let failed = self.failed.lock().ok()?.clone()?;
        let (message, retryable) = failed;
        Some(AttemptEnd {
            phase: AttemptPhase::Failed,
            reason: Some(format!("the tunnel failed: {message}")),
            retryable: Some(retryable),
            destination_fault: false,
        })
    }
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
            return relay.failure();
        }
        let listening = live
            .sender_log
            .as_ref()
            .is_some_and(|l| l.digest().listening);
        if !listening {
            return None;
        }
        let cancel = CancellationToken::new();
        let moved = Arc::new(Moved::default());
        let failed = Arc::new(Mutex::new(None));
        let (sender_pods, receiver_pods) = (self.sender_pods.clone(), self.receiver_pods.clone());
        let (sender, receiver) = (live.sender.clone(), live.receiver.clone());
        let (stop, failure) = (cancel.clone(), failed.clone());
        let wake = self.watch.wake.clone();
        tokio::spawn(async move {
            let ends = (
                Endpoint {
                    pods: sender_pods,
                    pod: &sender,
                    port: names::SENDER_PORT as u16,
                },
                Endpoint {
                    pods: receiver_pods,
                    pod: &receiver,
                    port: names::MOVER_PORT as u16,
                },
            );
            match tunnel::relay(ends.0, ends.1, stop, &moved).await {
                Ok(end) => tracing::debug!(?end, "tunnel relay ended"),
                Err(e) => {
                    tracing::warn!("tunnel: {e}");
                    if let Ok(mut slot) = failure.lock() {
                        *slot = Some((e.to_string(), e.is_retryable()));
                    }
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
