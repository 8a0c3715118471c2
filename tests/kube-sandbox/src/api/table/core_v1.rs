//! Printers for the other core kinds: nodes, namespaces, services, endpoints, secrets,
//! config maps, service accounts and events.

use std::collections::BTreeSet;

use serde_json::Value;
use time::OffsetDateTime;

use super::{age, entries, int, list, name, or, parse_time, since, text};

pub(super) const NODE_COLUMNS: &str = "Name
    Status|string|The status of the node
    Roles|string|The roles of the node
    Age
    Version|string|Kubelet Version reported by the node.
    +Internal-IP|string|List of addresses reachable to the node.
    +External-IP|string|List of addresses reachable to the node.
    +OS-Image|string|OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).
    +Kernel-Version|string|Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).
    +Container-Runtime|string|ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).";
pub(super) const NAMESPACE_COLUMNS: &str = "Name
    Status|string|The status of the namespace
    Age";
pub(super) const SERVICE_COLUMNS: &str = "Name
    Type|string|type determines how the Service is exposed.
    Cluster-IP|string|clusterIP is the IP address of the service and is usually assigned randomly.
    External-IP|string|externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.
    Port(s)|string|The list of ports that are exposed by this service.
    Age
    +Selector|string|Route service traffic to pods with label keys and values matching this selector.";
pub(super) const ENDPOINTS_COLUMNS: &str = "Name
    Endpoints|string|The set of all endpoints is the union of all subsets.
    Age";
pub(super) const SECRET_COLUMNS: &str = "Name
    Type|string|Used to facilitate programmatic handling of secret data.
    Data|string|Data contains the secret data.
    Age";
pub(super) const CONFIG_MAP_COLUMNS: &str = "Name
    Data|string|Data contains the configuration data.
    Age";
pub(super) const SERVICE_ACCOUNT_COLUMNS: &str = "Name
    Secrets|string|Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.
    Age";
pub(super) const EVENT_COLUMNS: &str = "Last Seen|string|The time at which the most recent occurrence of this event was recorded.
    Type|string|Type of this event (Normal, Warning), new types could be added in the future
    Reason|string|This should be a short, machine understandable string that gives the reason for the transition into the object's current status.
    Object|string|The object that this event is about.
    +Subobject|string|If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.
    +Source|string|The component reporting this event. Should be a short machine understandable string.
    Message|string|A human-readable description of the status of this operation.
    +First Seen|string|The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)
    +Count|string|The number of times this event has occurred.
    +Name";

pub(super) fn node_cells(node: &Value, now: OffsetDateTime) -> Vec<Value> {
    let ready = list(node, "status.conditions")
        .iter()
        .find(|c| text(c, "type") == "Ready");
    let mut status = match ready.map(|c| text(c, "status")) {
        Some("True") => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    let addresses = list(node, "status.addresses");
    let address = |kind: &str| match addresses.iter().find(|a| text(a, "type") == kind) {
        Some(found) => text(found, "address"),
        None => "<none>",
    };
    let info = |field: &str| or(text(&node["status"]["nodeInfo"], field), "<unknown>");
    cells![
        name(node),
        status,
        node_roles(node),
        age(node, now),
        text(node, "status.nodeInfo.kubeletVersion"),
        address("InternalIP"),
        address("ExternalIP"),
        info("osImage"),
        info("kernelVersion"),
        info("containerRuntimeVersion"),
    ]
}

/// Roles from `node-role.kubernetes.io/<role>` and `kubernetes.io/role=<role>` labels.
fn node_roles(node: &Value) -> String {
    let mut roles = BTreeSet::new();
    for (key, value) in node["metadata"]["labels"].as_object().into_iter().flatten() {
        let role = match key.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => role,
            None if key == "kubernetes.io/role" => value.as_str().unwrap_or_default(),
            None => "",
        };
        if !role.is_empty() {
            roles.insert(role);
        }
    }
    or(&Vec::from_iter(roles).join(","), "<none>").to_owned()
}

pub(super) fn namespace_cells(ns: &Value, now: OffsetDateTime) -> Vec<Value> {
    cells![
        name(ns),
        or(text(ns, "status.phase"), "Active"),
        age(ns, now)
    ]
}

pub(super) fn service_cells(svc: &Value, now: OffsetDateTime) -> Vec<Value> {
    let kind = or(text(svc, "spec.type"), "ClusterIP");
    let cluster_ip = list(svc, "spec.clusterIPs").first().and_then(Value::as_str);
    let cluster_ip = cluster_ip.unwrap_or(text(svc, "spec.clusterIP"));
    let mut ports = Vec::new();
    for port in list(svc, "spec.ports") {
        let protocol = or(text(port, "protocol"), "TCP");
        ports.push(match (int(port, "port"), int(port, "nodePort")) {
            (port, 0) => format!("{port}/{protocol}"),
            (port, node_port) => format!("{port}:{node_port}/{protocol}"),
        });
    }
    cells![
        name(svc),
        kind,
        or(cluster_ip, "<none>"),
        external_ip(svc, kind),
        or(&ports.join(","), "<none>"),
        age(svc, now),
        format_labels(&svc["spec"]["selector"]),
    ]
}

/// The EXTERNAL-IP cell: external IPs, load balancer ingress points, or the external name.
fn external_ip(svc: &Value, kind: &str) -> String {
    let external = list(svc, "spec.externalIPs")
        .iter()
        .filter_map(Value::as_str);
    let joined = match kind {
        "ClusterIP" | "NodePort" => Vec::from_iter(external).join(","),
        "LoadBalancer" => {
            let mut ingress = BTreeSet::new();
            for point in list(svc, "status.loadBalancer.ingress") {
                ingress.insert(or(text(point, "ip"), text(point, "hostname")));
            }
            ingress.remove("");
            Vec::from_iter(ingress.into_iter().chain(external)).join(",")
        }
        "ExternalName" => return text(svc, "spec.externalName").to_owned(),
        _ => return "<unknown>".to_owned(),
    };
    let empty = if kind == "LoadBalancer" {
        "<pending>"
    } else {
        "<none>"
    };
    or(&joined, empty).to_owned()
}

pub(super) fn endpoints_cells(endpoints: &Value, now: OffsetDateTime) -> Vec<Value> {
    cells![
        name(endpoints),
        format_endpoints(endpoints),
        age(endpoints, now)
    ]
}

/// `ip:port,...` over all subsets, cut after three with `+ N more...`.
fn format_endpoints(endpoints: &Value) -> String {
    let subsets = list(endpoints, "subsets");
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut all = Vec::new();
    for subset in subsets {
        let ips = list(subset, "addresses").iter().map(|a| text(a, "ip"));
        let ports = list(subset, "ports");
        if ports.is_empty() {
            all.extend(ips.clone().map(str::to_owned));
        }
        for port in ports.iter().map(|p| int(p, "port")) {
            all.extend(ips.clone().map(|ip| match ip.contains(':') {
                true => format!("[{ip}]:{port}"),
                false => format!("{ip}:{port}"),
            }));
        }
    }
    let shown = all.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    match all.len() {
        n if n > 3 => format!("{shown} + {} more...", n - 3),
        _ => shown,
    }
}

pub(super) fn secret_cells(secret: &Value, now: OffsetDateTime) -> Vec<Value> {
    let kind = or(text(secret, "type"), "Opaque");
    cells![
        name(secret),
        kind,
        entries(secret, "data"),
        age(secret, now)
    ]
}

pub(super) fn config_map_cells(cm: &Value, now: OffsetDateTime) -> Vec<Value> {
    let data = entries(cm, "data") + entries(cm, "binaryData");
    cells![name(cm), data, age(cm, now)]
}

pub(super) fn service_account_cells(sa: &Value, now: OffsetDateTime) -> Vec<Value> {
    cells![name(sa), list(sa, "secrets").len(), age(sa, now)]
}

pub(super) fn event_cells(event: &Value, now: OffsetDateTime) -> Vec<Value> {
    let seen = |path: &str| parse_time(text(event, path)).map(|t| since(t, now));
    let first = seen("firstTimestamp").or_else(|| seen("eventTime"));
    let series = event["series"].is_object();
    let (last, count) = match series {
        true => (seen("series.lastObservedTime"), int(event, "series.count")),
        false => (seen("lastTimestamp").or(first.clone()), int(event, "count")),
    };
    // Singleton events written through the events.k8s.io API carry no count.
    let count = if !series && count == 0 { 1 } else { count };
    let kind = text(event, "involvedObject.kind").to_lowercase();
    let object = match text(event, "involvedObject.name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = or(
        text(event, "source.component"),
        text(event, "reportingController"),
    );
    let source = match or(text(event, "source.host"), text(event, "reportingInstance")) {
        "" => component.to_owned(),
        host => format!("{component}, {host}"),
    };
    let unknown = || "<unknown>".to_owned();
    cells![
        last.unwrap_or_else(unknown),
        text(event, "type"),
        text(event, "reason"),
        object,
        text(event, "involvedObject.fieldPath"),
        source,
        text(event, "message").trim(),
        first.unwrap_or_else(unknown),
        count,
        name(event),
    ]
}

/// `k1=v1,k2=v2` sorted by key, `<none>` when empty.
pub(super) fn format_labels(labels: &Value) -> String {
    let mut pairs = Vec::new();
    for (key, value) in labels.as_object().into_iter().flatten() {
        pairs.push(format!("{key}={}", value.as_str().unwrap_or_default()));
    }
    pairs.sort();
    or(&pairs.join(","), "<none>").to_owned()
}
