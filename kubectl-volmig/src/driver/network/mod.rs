//! The way from the sender to the receiver.
//!
//! In one cluster it is the receiver's ClusterIP Service. Into another
//! (`--to-context`) it is the path `--network` asks for: the Service made a
//! `LoadBalancer` (its address, once the cloud gives one) or a `NodePort`
//! (a destination node's address), or keeps it a ClusterIP one for the
//! tunnel ([`super::tunnel`], driven by `relay`); `auto` tries them in
//! that order. Each
//! path is written in the record before its Service is changed, and each
//! one given up is recorded with why, so a driver stopped while it waits
//! tries the same path again and `status` says what was tried.
//!
//! - [`address`]: the addresses, read off the Service and the nodes (pure);
//! - [`relay`]: the tunnel's relay beside a running attempt.

pub mod address;
pub(super) mod relay;

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use tokio::time::Instant;

use self::address::Ingress;
use super::objects;
use super::run::{Driver, RECORD_EVERY};
use super::DriverError;
use crate::cluster::Side;
use crate::names;
use crate::record::network::NetworkStatus;
use crate::resources;
use crate::spec::{NetworkMode, NetworkPath};

/// How often a Service is looked at while it waits for its address.
const POLL: Duration = Duration::from_secs(1);

/// How the senders reach the receiver, once it is exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// The sender dials `IP:PORT`: the Service's ClusterIP, a load
    /// balancer's address, or a node port.
    Dial(String),
    /// The sender listens, and the driver relays through both API servers.
    Tunnel,
}

impl Driver {
    /// How senders reach the receiver: as found last, or exposed now (at
    /// set-up, and after `auto` gave up the path in use).
    pub(super) async fn route(&mut self) -> Result<Route, DriverError> {
        if let Some(route) = &self.route {
            return Ok(route.clone());
        }
        let route = self.expose().await?;
        self.route = Some(route.clone());
        Ok(route)
    }

    /// Whether the senders of this run go through the tunnel.
    pub(super) fn through_tunnel(&self) -> bool {
        self.route == Some(Route::Tunnel)
    }

    /// The receiver's Service, exposed as the operation's network path
    /// needs.
    async fn expose(&mut self) -> Result<Route, DriverError> {
        let client = self.sides.destination.clone();
        let Some(clusters) = self.plan.spec.clusters.clone() else {
            let address = objects::ensure_service(&client, &self.plan).await?;
            return Ok(Route::Dial(address));
        };
        let mode = clusters.network;
        let mut net = self.record.status.network.clone().unwrap_or_default();
        loop {
            let Some(path) = address::next_path(mode, &net) else {
                return Err(DriverError::Refused(no_path(mode, &net)));
            };
            if net.path != Some(path) {
                net.path = Some(path);
                self.record_network(&net).await?;
            }
            match self.try_path(path).await? {
                Ok((route, reason)) => {
                    let at = match &route {
                        Route::Dial(address) => Some(address.clone()),
                        Route::Tunnel => None,
                    };
                    let changed = net.address != at || net.reason != reason;
                    net.address = at;
                    net.reason = reason;
                    if changed {
                        self.record_network(&net).await?;
                    }
                    return Ok(route);
                }
                Err(why) => {
                    tracing::info!("network path {path}: {why}");
                    net.give_up(path, why);
                    self.record_network(&net).await?;
                }
            }
        }
    }

    /// After a failed attempt: `auto` gives up a path the sender could not
    /// connect over; the next attempt exposes the receiver on the next.
    pub(super) async fn learn_from_failure(&mut self, reason: &str) -> Result<(), DriverError> {
        let Some(clusters) = &self.plan.spec.clusters else {
            return Ok(());
        };
        let mut net = self.record.status.network.clone().unwrap_or_default();
        if address::learn_from_failure(clusters.network, &mut net, reason) {
            tracing::info!("network: {}", net.summary());
            self.record_network(&net).await?;
            self.route = None;
        }
        Ok(())
    }

    async fn record_network(&mut self, net: &NetworkStatus) -> Result<(), DriverError> {
        self.write(|vm| vm.status.network = Some(net.clone()))
            .await?;
        Ok(())
    }

    /// Exposes the receiver on `path`: `Ok((route, why this path))`, or
    /// `Err(why not)` when the path does not work here.
    async fn try_path(
        &mut self,
        path: NetworkPath,
    ) -> Result<Result<(Route, String), String>, DriverError> {
        let service = self.typed_service(path).await?;
        match path {
            NetworkPath::LoadBalancer => self.load_balancer(service).await,
            NetworkPath::NodePort => {
                let nodes = self.nodes(Side::Destination).await?;
                Ok(address::node_port_address(&service, &nodes).map(|a| {
                    let why = "a node port of the destination's nodes".to_string();
                    (Route::Dial(a), why)
                }))
            }
            // No address: the driver dials both pods through their API
            // servers once the sender listens.
            NetworkPath::Tunnel => Ok(Ok((
                Route::Tunnel,
                "through both API servers and this client (port forwards)".to_string(),
            ))),
        }
    }

    /// The receiver's Service, of the type `path` needs (changed in
    /// place when an earlier path made it another).
    async fn typed_service(&self, path: NetworkPath) -> Result<Service, DriverError> {
        let api: Api<Service> = Api::namespaced(
            self.sides.destination.clone(),
            &self.plan.destination.namespace,
        );
        let wanted = resources::exposed_service(&self.plan, path);
        let found = objects::create_or_get(&api, &wanted).await?;
        let kind = path.service_type();
        if found.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some(kind) {
            return Ok(found);
        }
        let name = names::service_name(&self.plan.operation);
        let patch = serde_json::json!({"spec": {"type": kind}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| DriverError::kube(format!("make Service {name} a {kind}"), e))
    }

    /// Waits for the load balancer's address, up to `--start-timeout`.
    async fn load_balancer(
        &mut self,
        mut service: Service,
    ) -> Result<Result<(Route, String), String>, DriverError> {
        let api: Api<Service> = Api::namespaced(
            self.sides.destination.clone(),
            &self.plan.destination.namespace,
        );
        let name = names::service_name(&self.plan.operation);
        let wait = self.options.start_timeout;
        let deadline = Instant::now() + wait;
        let mut beat = Instant::now();
        loop {
            match address::load_balancer_ingress(&service) {
                Some(Ingress::Ip(ip)) => {
                    let at = address::join(&ip, names::MOVER_PORT);
                    let why = "the load balancer's address".to_string();
                    return Ok(Ok((Route::Dial(at), why)));
                }
                Some(Ingress::Hostname(host)) => {
                    return Ok(match crate::cluster::resolve::lookup(&host).await {
                        Ok(ip) => {
                            let at = address::join(&ip.to_string(), names::MOVER_PORT);
                            Ok((Route::Dial(at), format!("the load balancer's name {host}")))
                        }
                        Err(e) => Err(format!("its name {host} does not resolve: {e}")),
                    });
                }
                None if Instant::now() >= deadline => {
                    return Ok(Err(format!(
                        "Service {name} got no load-balancer address in {}s (--start-timeout); \
                         the destination cluster may have no load-balancer controller",
                        wait.as_secs()
                    )));
                }
                None => {}
            }
            if beat.elapsed() >= RECORD_EVERY {
                self.heartbeat().await?;
                beat = Instant::now();
            }
            tokio::time::sleep(POLL).await;
            service = api
                .get(&name)
                .await
                .map_err(|e| DriverError::kube(format!("get Service {name}"), e))?;
        }
    }
}

/// Why no path is left, with what each one said.
fn no_path(mode: NetworkMode, net: &NetworkStatus) -> String {
    let tried: Vec<String> = net
        .tried
        .iter()
        .map(|t| format!("{}: {}", t.path, t.why))
        .collect();
    let hint = match mode {
        NetworkMode::Auto => "",
        _ => "; --network auto tries every path",
    };
    format!(
        "no network path from the sender to the receiver works (--network {}): {}{hint}",
        mode.as_str(),
        tried.join("; ")
    )
}
