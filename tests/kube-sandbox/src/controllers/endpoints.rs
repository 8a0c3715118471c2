//! Endpoints: for each Service with a selector, the ready pods it selects
//! (their pod IPs and the resolved target ports), as the endpoints
//! controller writes them. The service forwarder reads these.

use serde_json::{json, Value};

use super::workloads::{is_active, is_ready};
use super::{log_err, name_of, Ctx};
use crate::registry;
use crate::selector::LabelSelector;

pub fn reconcile(ctx: &Ctx) {
    let (services, _) = ctx.store.list(registry::get("services"), None);
    let (pods, _) = ctx.store.list(registry::get("pods"), None);
    for service in &services {
        if service["spec"]["selector"]
            .as_object()
            .is_none_or(|s| s.is_empty())
        {
            continue;
        }
        let subsets = subsets(service, &pods);
        write(ctx, service, subsets);
    }
}

fn subsets(service: &Value, pods: &[Value]) -> Value {
    let ns = &service["metadata"]["namespace"];
    let selector = LabelSelector::from_object(&json!({"matchLabels": service["spec"]["selector"]}));
    let Ok(selector) = selector else {
        return json!([]);
    };
    let selected: Vec<&Value> = pods
        .iter()
        .filter(|p| p["metadata"]["namespace"] == *ns && is_active(p))
        .filter(|p| selector.matches(&p["metadata"]["labels"]))
        .filter(|p| p["status"]["podIP"].is_string())
        .collect();
    let address = |p: &Value| {
        json!({
            "ip": p["status"]["podIP"],
            "nodeName": p["spec"]["nodeName"],
            "targetRef": {"kind": "Pod", "namespace": p["metadata"]["namespace"], "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]},
        })
    };
    let Some(first) = selected.first().copied() else {
        return json!([]);
    };
    let (ready, not_ready): (Vec<&Value>, Vec<&Value>) =
        selected.iter().copied().partition(|p| is_ready(p));
    let ready: Vec<Value> = ready.into_iter().map(address).collect();
    let not_ready: Vec<Value> = not_ready.into_iter().map(address).collect();
    let ports: Vec<Value> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            json!({
                "name": p["name"],
                "port": target_port(p, first),
                "protocol": p["protocol"].as_str().unwrap_or("TCP"),
            })
        })
        .collect();
    let mut subset = json!({"ports": ports});
    if !ready.is_empty() {
        subset["addresses"] = json!(ready);
    }
    if !not_ready.is_empty() {
        subset["notReadyAddresses"] = json!(not_ready);
    }
    json!([subset])
}

/// A service port's target: a number, or a container port's name looked
/// up in the pod.
fn target_port(port: &Value, pod: &Value) -> Value {
    match &port["targetPort"] {
        Value::Number(n) => json!(n),
        Value::String(name) => pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().into_iter().flatten())
            .find(|p| p["name"] == json!(name))
            .map(|p| p["containerPort"].clone())
            .unwrap_or_else(|| port["port"].clone()),
        _ => port["port"].clone(),
    }
}

fn write(ctx: &Ctx, service: &Value, subsets: Value) {
    let (ns, name) = name_of(service);
    let endpoints = registry::get("endpoints");
    match ctx.store.get(endpoints, ns, name) {
        Ok(_) => {
            log_err(
                "endpoints",
                // Unchanged subsets are no write: `modify` compares.
                ctx.store.modify(endpoints, ns, name, |e| {
                    e["subsets"] = subsets;
                    true
                }),
            );
        }
        Err(_) => {
            let obj = json!({
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "labels": service["metadata"]["labels"], "ownerReferences": [super::workloads::owner_ref(service)]},
                "subsets": subsets,
            });
            log_err("endpoints", ctx.store.create(endpoints, ns, obj));
        }
    }
}
