//! The Service environment variables the kubelet gives every container
//! (pkg/kubelet/kubelet_pods.go `getServiceEnvVarMap`, pkg/kubelet/envvars
//! `FromServices`): for each Service with a ClusterIP in the pod's
//! namespace (when `enableServiceLinks` is not false), and always for the
//! `kubernetes` Service of `default`, `<NAME>_SERVICE_HOST`,
//! `<NAME>_SERVICE_PORT` (the first port), `<NAME>_SERVICE_PORT_<PORT
//! NAME>` for named ports, and Docker's link variables `<NAME>_PORT`,
//! `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`. In-cluster
//! clients find the API server through `KUBERNETES_SERVICE_HOST` and
//! `KUBERNETES_SERVICE_PORT`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::registry;
use crate::store::Store;

/// The Services' variables for `pod`, in a stable order.
pub fn vars(store: &Store, pod: &Value) -> Vec<(String, String)> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let links = pod["spec"]["enableServiceLinks"] != Value::Bool(false);
    let res = registry::get("services");
    // The pod's namespace's Services, and `default/kubernetes` unless one
    // of them has its name.
    let services = if links {
        store.list(res, Some(ns)).0
    } else {
        Vec::new()
    };
    let master = store.get(res, "default", "kubernetes").ok();
    let mut chosen: BTreeMap<String, &Value> = BTreeMap::new();
    for service in services.iter().filter(|s| has_cluster_ip(s)) {
        let name = service["metadata"]["name"].as_str().unwrap_or_default();
        chosen.insert(name.to_string(), service);
    }
    if let Some(master) = master.as_ref().filter(|s| has_cluster_ip(s)) {
        chosen.entry("kubernetes".to_string()).or_insert(master);
    }
    chosen.values().flat_map(|s| of_service(s)).collect()
}

fn has_cluster_ip(service: &Value) -> bool {
    service["spec"]["clusterIP"]
        .as_str()
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// `makeEnvVariableName`.
fn env_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// `FromServices` for one Service.
fn of_service(service: &Value) -> Vec<(String, String)> {
    let prefix = env_name(service["metadata"]["name"].as_str().unwrap_or_default());
    let ip = service["spec"]["clusterIP"].as_str().unwrap_or_default();
    let ports: Vec<&Value> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let Some(first) = ports.first() else {
        return Vec::new();
    };
    let port = |p: &Value| p["port"].as_u64().unwrap_or_default();
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_string()),
        (format!("{prefix}_SERVICE_PORT"), port(first).to_string()),
    ];
    for p in &ports {
        if let Some(name) = p["name"].as_str().filter(|n| !n.is_empty()) {
            out.push((
                format!("{prefix}_SERVICE_PORT_{}", env_name(name)),
                port(p).to_string(),
            ));
        }
    }
    // makeLinkVariables: Docker's special case for the first port, then
    // four variables per port.
    for (i, p) in ports.iter().enumerate() {
        let protocol = p["protocol"].as_str().unwrap_or("TCP");
        let lower = protocol.to_lowercase();
        let url = format!("{lower}://{ip}:{}", port(p));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", port(p), protocol.to_uppercase());
        out.push((port_prefix.clone(), url));
        out.push((format!("{port_prefix}_PROTO"), lower));
        out.push((format!("{port_prefix}_PORT"), port(p).to_string()));
        out.push((format!("{port_prefix}_ADDR"), ip.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_kubernetes_service_gives_the_variables_in_cluster_clients_read() {
        let service = json!({"metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "127.9.255.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}});
        let vars: BTreeMap<String, String> = of_service(&service).into_iter().collect();
        let want: BTreeMap<String, String> = [
            ("KUBERNETES_SERVICE_HOST", "127.9.255.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://127.9.255.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://127.9.255.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "127.9.255.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(vars, want);
    }

    #[test]
    fn the_pods_namespace_services_unless_links_are_off_and_always_kubernetes() {
        let store = Store::new(16);
        for ns in ["default", "app"] {
            store
                .create(
                    registry::get("namespaces"),
                    "",
                    json!({"metadata": {"name": ns}}),
                )
                .expect("namespace");
        }
        let service =
            |name: &str| json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
        for (ns, name) in [
            ("default", "kubernetes"),
            ("app", "my-db"),
            ("default", "other"),
        ] {
            store
                .create(registry::get("services"), ns, service(name))
                .expect("service");
        }
        let names = |pod: Value| -> Vec<String> {
            vars(&store, &pod)
                .into_iter()
                .map(|(k, _)| k)
                .filter(|k| k.ends_with("_SERVICE_HOST"))
                .collect()
        };
        let pod = json!({"metadata": {"namespace": "app"}, "spec": {}});
        assert_eq!(
            names(pod),
            ["KUBERNETES_SERVICE_HOST", "MY_DB_SERVICE_HOST"]
        );
        let pod = json!({"metadata": {"namespace": "app"}, "spec": {"enableServiceLinks": false}});
        assert_eq!(names(pod), ["KUBERNETES_SERVICE_HOST"]);
    }
}
