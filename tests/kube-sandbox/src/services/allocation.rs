//! What kube-apiserver's Service storage does with addresses and ports on
//! create and update (`pkg/registry/core/service/storage/alloc.go` and
//! `rest.go`, `pkg/registry/core/service/strategy.go`, and the port checks
//! of `ValidateService`): a ClusterIP for every Service but headless and
//! ExternalName ones; for NodePort and LoadBalancer Services a `nodePort`
//! per port from 30000-32767, allocated when unset, the one asked for
//! taken when free, and kept on an update that leaves it out.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::ops::RangeInclusive;

use serde_json::{json, Value};

use crate::status::ApiError;

/// kube-apiserver's default `--service-node-port-range`.
pub const NODE_PORTS: RangeInclusive<i64> = 30000..=32767;

/// The next free Service address in the sandbox's block (`127.B.255.N`),
/// given the addresses in use.
pub fn allocate(block: u8, in_use: &[&str]) -> Option<String> {
    (1..=254u8)
        .map(|n| format!("127.{block}.255.{n}"))
        .find(|ip| !in_use.contains(&ip.as_str()))
}

/// A Service about to be created: its ClusterIP and node ports
/// allocated against `others` (every other Service), then the port rules
/// checked (`Service "web" is invalid: ...` as a 422).
pub fn on_create(block: u8, service: &mut Value, others: &[&Value]) -> Result<(), ApiError> {
    allocate_cluster_ip(block, service, others);
    if needs_node_ports(service) {
        let mut ports = NodePorts::new(others);
        init_node_ports(service, &mut ports)?;
    }
    validate(service)
}

/// An update of a Service (not of its status): the fields its new type no
/// longer needs dropped (`dropTypeDependentFields`), node ports left out
/// kept by port name (`patchAllocatedValues`), new ones allocated
/// (`updateNodePorts`), then the port rules checked.
pub fn on_update(old: &Value, new: &mut Value, others: &[&Value]) -> Result<(), ApiError> {
    drop_type_dependent_fields(old, new);
    patch_allocated_node_ports(old, new);
    if needs_node_ports(new) {
        let mut ports = NodePorts::new(others);
        update_node_ports(old, new, &mut ports)?;
    }
    validate(new)
}

fn service_type(service: &Value) -> &str {
    service["spec"]["type"].as_str().unwrap_or("ClusterIP")
}

/// NodePort and LoadBalancer Services (`needsNodePort`).
pub fn needs_node_ports(service: &Value) -> bool {
    matches!(service_type(service), "NodePort" | "LoadBalancer")
}

/// Whether unset node ports get one (`shouldAllocateNodePorts`): a
/// LoadBalancer with `allocateLoadBalancerNodePorts: false` gets only
/// those asked for.
fn should_allocate(service: &Value) -> bool {
    match service_type(service) {
        "NodePort" => true,
        "LoadBalancer" => service["spec"]["allocateLoadBalancerNodePorts"] != json!(false),
        _ => false,
    }
}

/// The ClusterIP of a new Service, unless it names one, is headless
/// (`None`) or is an ExternalName.
fn allocate_cluster_ip(block: u8, service: &mut Value, others: &[&Value]) {
    if service_type(service) == "ExternalName"
        || service["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty())
    {
        return;
    }
    let in_use: Vec<&str> = others
        .iter()
        .filter_map(|s| s["spec"]["clusterIP"].as_str())
        .collect();
    if let Some(ip) = allocate(block, &in_use) {
        service["spec"]["clusterIP"] = json!(ip);
        service["spec"]["clusterIPs"] = json!([ip]);
    }
}

fn ports_of(service: &Value) -> Vec<Value> {
    service["spec"]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn node_port(port: &Value) -> i64 {
    port["nodePort"].as_i64().unwrap_or(0)
}

/// The node ports a Service holds, health check port included.
fn held(service: &Value) -> impl Iterator<Item = i64> + '_ {
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(node_port)
        .chain(service["spec"]["healthCheckNodePort"].as_i64())
        .filter(|p| *p != 0)
}

/// The node port allocator of one request (`portallocator` with the
/// static subrange of KEP-3668): ports asked for anywhere in the range,
/// ports handed out from above the static band first.
struct NodePorts {
    taken: HashSet<i64>,
}

impl NodePorts {
    fn new(others: &[&Value]) -> NodePorts {
        NodePorts {
            taken: others.iter().flat_map(|s| held(s)).collect(),
        }
    }

    /// `Allocate`: the errors' texts are the allocator's.
    fn allocate(&mut self, port: i64) -> Result<(), String> {
        if !NODE_PORTS.contains(&port) {
            return Err(format!(
                "provided port is not in the valid range. The range of valid ports is {}-{}",
                NODE_PORTS.start(),
                NODE_PORTS.end()
            ));
        }
        if !self.taken.insert(port) {
            return Err("provided port is already allocated".into());
        }
        Ok(())
    }

    /// `AllocateNext`: a random free port of the dynamic band (above the
    /// first min(max(16, size/32), 128) ports), else of the static one.
    fn allocate_next(&mut self) -> Result<i64, ApiError> {
        let (start, end) = (*NODE_PORTS.start(), *NODE_PORTS.end());
        let size = end - start + 1;
        let split = start + (size / 32).clamp(16, 128);
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        for (low, high) in [(split, end), (start, split - 1)] {
            let span = high - low + 1;
            let offset = (random % span as u64) as i64;
            if let Some(port) = (0..span)
                .map(|i| low + (offset + i) % span)
                .find(|p| !self.taken.contains(p))
            {
                self.taken.insert(port);
                return Ok(port);
            }
        }
        Err(ApiError::Internal(
            "failed to allocate a nodePort: range is full".into(),
        ))
    }
}

fn invalid_node_port(service: &Value, index: usize, port: i64, why: &str) -> ApiError {
    ApiError::invalid(
        "Service",
        service["metadata"]["name"].as_str().unwrap_or_default(),
        format!("spec.ports[{index}].nodePort: Invalid value: {port}: {why}"),
    )
}

/// `initNodePorts`: ports of one number share one node port (the first
/// one asked for among them, else one allocated).
fn init_node_ports(service: &mut Value, alloc: &mut NodePorts) -> Result<(), ApiError> {
    let mut ports = ports_of(service);
    let allocate_unset = should_allocate(service);
    let mut by_port: HashMap<i64, i64> = HashMap::new();
    for i in 0..ports.len() {
        let number = ports[i]["port"].as_i64().unwrap_or(0);
        let asked = node_port(&ports[i]);
        if asked == 0 && !allocate_unset {
            continue;
        }
        match by_port.get(&number).copied() {
            None => {
                let requested = ports
                    .iter()
                    .find(|p| p["port"].as_i64() == Some(number) && node_port(p) != 0)
                    .map_or(0, node_port);
                let port = if requested != 0 {
                    alloc
                        .allocate(requested)
                        .map_err(|why| invalid_node_port(service, i, requested, &why))?;
                    requested
                } else {
                    alloc.allocate_next()?
                };
                ports[i]["nodePort"] = json!(port);
                by_port.insert(number, port);
            }
            Some(shared) if asked == 0 => ports[i]["nodePort"] = json!(shared),
            Some(shared) if asked != shared => alloc
                .allocate(asked)
                .map_err(|why| invalid_node_port(service, i, asked, &why))?,
            Some(_) => {}
        }
    }
    service["spec"]["ports"] = json!(ports);
    Ok(())
}

/// `updateNodePorts`: ports the Service held stay its own; new ones asked
/// for must be free; unset ones are allocated.
fn update_node_ports(old: &Value, new: &mut Value, alloc: &mut NodePorts) -> Result<(), ApiError> {
    let before: HashSet<i64> = held(old).collect();
    // Released ports are released once the update is stored: nothing
    // allocated now gets one of them.
    alloc.taken.extend(&before);
    let allocate_unset = should_allocate(new);
    let mut asked_here = HashSet::new();
    let mut ports = ports_of(new);
    for (i, port) in ports.iter_mut().enumerate() {
        let asked = node_port(port);
        if asked == 0 && !allocate_unset {
            continue;
        }
        if asked == 0 {
            port["nodePort"] = json!(alloc.allocate_next()?);
        } else if !before.contains(&asked) && asked_here.insert(asked) {
            alloc
                .allocate(asked)
                .map_err(|why| invalid_node_port(new, i, asked, &why))?;
        }
    }
    new["spec"]["ports"] = json!(ports);
    Ok(())
}

/// `patchAllocatedValues`: a port written back without its node port
/// gets the one its name had, unless another port took it.
fn patch_allocated_node_ports(old: &Value, new: &mut Value) {
    if !needs_node_ports(old) || !needs_node_ports(new) {
        return;
    }
    let old_ports = ports_of(old);
    let mut ports = ports_of(new);
    let in_new: HashSet<i64> = ports.iter().map(node_port).collect();
    let used: HashSet<i64> = old_ports
        .iter()
        .map(node_port)
        .filter(|p| in_new.contains(p))
        .collect();
    let by_name: HashMap<String, i64> = old_ports
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                node_port(p),
            )
        })
        .collect();
    let mut changed = false;
    for port in ports.iter_mut().filter(|p| node_port(p) == 0) {
        let name = port["name"].as_str().unwrap_or_default();
        if let Some(&kept) = by_name.get(name).filter(|p| **p != 0 && !used.contains(p)) {
            port["nodePort"] = json!(kept);
            changed = true;
        }
    }
    if changed {
        new["spec"]["ports"] = json!(ports);
    }
}

/// `dropTypeDependentFields`: what the new type does not use, and the
/// user did not change, goes; a Service that is no longer a LoadBalancer
/// has no load-balancer status.
fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    let node_ports = |s: &Value| ports_of(s).iter().map(node_port).collect::<Vec<_>>();
    if needs_node_ports(old) && !needs_node_ports(new) && node_ports(old) == node_ports(new) {
        if let Some(ports) = new["spec"]["ports"].as_array_mut() {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
            }
        }
    }
    let is_lb = |s: &Value| service_type(s) == "LoadBalancer";
    let spec_field = |s: &Value, f: &str| s["spec"][f].clone();
    let mut drop = Vec::new();
    if needs_node_ports(old)
        && !needs_node_ports(new)
        && spec_field(old, "externalTrafficPolicy") == spec_field(new, "externalTrafficPolicy")
    {
        drop.push("externalTrafficPolicy");
    }
    for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
        if is_lb(old) && !is_lb(new) && spec_field(old, field) == spec_field(new, field) {
            drop.push(field);
        }
    }
    if let Some(spec) = new["spec"].as_object_mut() {
        for field in drop {
            spec.remove(field);
        }
    }
    if !is_lb(new) && !new["status"]["loadBalancer"].is_null() {
        new["status"]["loadBalancer"] = json!({});
    }
}

/// The port rules of `ValidateService` that node ports meet.
fn validate(service: &Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    let kind = service_type(service);
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !TYPES.contains(&kind) {
        causes.push(format!(
            "spec.type: Unsupported value: {kind:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
        ));
    }
    let mut seen = HashSet::new();
    for (i, port) in ports_of(service).iter().enumerate() {
        let node_port = node_port(port);
        if node_port == 0 {
            continue;
        }
        let path = format!("spec.ports[{i}].nodePort");
        if kind == "ClusterIP" {
            causes.push(format!(
                "{path}: Forbidden: may not be used when `type` is 'ClusterIP'"
            ));
        }
        if !(1..=65535).contains(&node_port) {
            causes.push(format!(
                "{path}: Invalid value: {node_port}: must be between 1 and 65535, inclusive"
            ));
        }
        let protocol = port["protocol"].as_str().unwrap_or("TCP").to_string();
        if !seen.insert((node_port, protocol)) {
            causes.push(format!("{path}: Duplicate value: {node_port}"));
        }
    }
    if kind != "LoadBalancer" && !service["spec"]["allocateLoadBalancerNodePorts"].is_null() {
        causes.push(
            "spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'"
                .into(),
        );
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::Invalid {
        kind: "Service".into(),
        name: service["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .into(),
        causes,
    })
}

#[cfg(test)]
mod tests;
