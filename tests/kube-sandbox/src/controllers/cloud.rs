//! The service controller of cloud-controller-manager
//! (k8s.io/cloud-provider/controllers/service) over a loopback "cloud":
//! a LoadBalancer Service without a `loadBalancerClass` gets the
//! `service.kubernetes.io/load-balancer-cleanup` finalizer, then a load
//! balancer at the next free `127.B.254.N`, written to
//! `status.loadBalancer.ingress` (`ipMode: VIP`), with the
//! EnsuringLoadBalancer and EnsuredLoadBalancer events; the service
//! forwarders (`crate::services`) listen there. When the Service is
//! deleted or stops being a LoadBalancer, the load balancer goes
//! (DeletingLoadBalancer, DeletedLoadBalancer), its status is emptied
//! and the finalizer removed.
//!
//! With load balancers off (`SandboxConfig::load_balancers`,
//! `Sandbox::set_load_balancers`) the cloud provisions none, as on a
//! cluster without a cloud controller (kind, bare metal): the ingress
//! stays empty and the Service is reachable at its node ports only.
//! Load balancers made before still go with their Services.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::{is_terminating, log_err, name_of, Ctx};
use crate::events::{self, EventType, Source};
use crate::registry;

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

pub fn reconcile(ctx: &Ctx) {
    let services_res = registry::get("services");
    let (services, _) = ctx.store.list(services_res, None);
    let enabled = ctx.load_balancers.load(Ordering::Relaxed);
    let mut in_use: HashSet<String> = services.iter().flat_map(ingress_ips).collect();
    let source = Source::new("service-controller");
    for service in &services {
        let (ns, name) = name_of(service);
        let has_finalizer = finalizers(service).any(|f| f == FINALIZER);
        if wants_load_balancer(service) {
            if !enabled || !ingress_ips(service).is_empty() {
                continue;
            }
            let Some(ip) = free_ip(ctx.store.block(), &in_use) else {
                let message = "Error syncing load balancer: no free address in the sandbox's load balancer range";
                events::record(
                    &ctx.store,
                    &source,
                    service,
                    EventType::Warning,
                    "SyncLoadBalancerFailed",
                    message,
                );
                continue;
            };
            events::record(
                &ctx.store,
                &source,
                service,
                EventType::Normal,
                "EnsuringLoadBalancer",
                "Ensuring load balancer",
            );
            if !has_finalizer {
                let added = ctx.store.modify(services_res, ns, name, |s| {
                    add_finalizer(s);
                    true
                });
                if log_err("service-controller: finalizer", added).is_none() {
                    continue;
                }
            }
            let ingress = json!({"ingress": [{"ip": ip, "ipMode": "VIP"}]});
            let written = ctx.store.modify(services_res, ns, name, |s| {
                if !wants_load_balancer(s) {
                    return false;
                }
                s["status"]["loadBalancer"] = ingress;
                true
            });
            if log_err("service-controller: status", written).is_some() {
                in_use.insert(ip);
                events::record(
                    &ctx.store,
                    &source,
                    service,
                    EventType::Normal,
                    "EnsuredLoadBalancer",
                    "Ensured load balancer",
                );
            }
        } else if has_finalizer {
            events::record(
                &ctx.store,
                &source,
                service,
                EventType::Normal,
                "DeletingLoadBalancer",
                "Deleting load balancer",
            );
            let cleaned = ctx.store.modify(services_res, ns, name, |s| {
                if s["spec"]["type"] != "LoadBalancer" && !s["status"]["loadBalancer"].is_null() {
                    s["status"]["loadBalancer"] = json!({});
                }
                if let Some(list) = s["metadata"]["finalizers"].as_array_mut() {
                    list.retain(|f| f != FINALIZER);
                }
                true
            });
            if log_err("service-controller: cleanup", cleaned).is_some() {
                events::record(
                    &ctx.store,
                    &source,
                    service,
                    EventType::Normal,
                    "DeletedLoadBalancer",
                    "Deleted load balancer",
                );
            }
        }
    }
}

/// A LoadBalancer Service that is not going away and that no other
/// load-balancer implementation claims (`loadBalancerClass` unset).
fn wants_load_balancer(service: &Value) -> bool {
    service["spec"]["type"] == "LoadBalancer"
        && service["spec"]["loadBalancerClass"].is_null()
        && !is_terminating(service)
}

fn ingress_ips(service: &Value) -> Vec<String> {
    service["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["ip"].as_str().map(str::to_string))
        .collect()
}

fn finalizers(obj: &Value) -> impl Iterator<Item = &str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn add_finalizer(service: &mut Value) {
    match service["metadata"]["finalizers"].as_array_mut() {
        Some(list) if list.iter().any(|f| f == FINALIZER) => {}
        Some(list) => list.push(json!(FINALIZER)),
        None => service["metadata"]["finalizers"] = json!([FINALIZER]),
    }
}

/// The lowest load-balancer address of the block (`127.B.254.N`) not in use.
pub fn free_ip(block: u8, in_use: &HashSet<String>) -> Option<String> {
    (1..=254u8)
        .map(|n| format!("127.{block}.254.{n}"))
        .find(|ip| !in_use.contains(ip))
}
