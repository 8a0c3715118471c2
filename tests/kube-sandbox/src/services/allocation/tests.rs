use serde_json::{json, Value};

use super::*;

fn service(name: &str, kind: &str, ports: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {"type": kind, "ports": ports}})
}

fn node_ports(service: &Value) -> Vec<i64> {
    ports_of(service).iter().map(node_port).collect()
}

#[test]
fn node_ports_are_allocated_in_range_and_shared_by_one_port_number() {
    let mut svc = service(
        "web",
        "NodePort",
        json!([{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}, {"port": 443}]),
    );
    on_create(12, &mut svc, &[]).expect("created");
    let ports = node_ports(&svc);
    assert!(ports.iter().all(|p| NODE_PORTS.contains(p)), "{ports:?}");
    assert_eq!(ports[0], ports[1], "one number, one node port");
    assert_ne!(ports[0], ports[2]);
    assert_eq!(svc["spec"]["clusterIP"], "127.12.255.1");
}

#[test]
fn a_node_port_asked_for_is_taken_or_refused_with_the_allocators_words() {
    let mut first = service("a", "NodePort", json!([{"port": 80, "nodePort": 30080}]));
    on_create(12, &mut first, &[]).expect("created");
    assert_eq!(node_ports(&first), [30080]);
    let mut second = service(
        "b",
        "LoadBalancer",
        json!([{"port": 80, "nodePort": 30080}]),
    );
    let err = on_create(12, &mut second, &[&first]).expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Service \"b\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
    );
    assert_eq!(err.code(), 422);
    let mut low = service("c", "NodePort", json!([{"port": 80, "nodePort": 8080}]));
    let err = on_create(12, &mut low, &[]).expect_err("out of range");
    assert!(
        err.to_string().ends_with("Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767"),
        "{err}"
    );
}

#[test]
fn a_cluster_ip_service_may_not_name_a_node_port() {
    let mut svc = service("a", "ClusterIP", json!([{"port": 80, "nodePort": 30080}]));
    let err = on_create(12, &mut svc, &[]).expect_err("forbidden");
    assert!(
        err.to_string().ends_with(
            "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
        ),
        "{err}"
    );
    let mut twice = service(
        "b",
        "NodePort",
        json!([{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 81, "nodePort": 30080}]),
    );
    let err = on_create(12, &mut twice, &[]).expect_err("duplicate");
    assert!(err.to_string().contains("spec.ports[1].nodePort"), "{err}");
}

#[test]
fn a_load_balancer_without_node_port_allocation_gets_only_those_asked_for() {
    let mut svc = service(
        "lb",
        "LoadBalancer",
        json!([{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 31000}]),
    );
    svc["spec"]["allocateLoadBalancerNodePorts"] = json!(false);
    on_create(12, &mut svc, &[]).expect("created");
    assert_eq!(node_ports(&svc), [0, 31000]);
}

#[test]
fn an_update_keeps_node_ports_left_out_and_drops_them_with_the_type() {
    let mut old = service(
        "web",
        "NodePort",
        json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]),
    );
    on_create(12, &mut old, &[]).expect("created");
    let allocated = node_ports(&old);
    // Written back without node ports (kubectl replace): kept by name.
    let mut new = service(
        "web",
        "NodePort",
        json!([{"name": "https", "port": 8443}, {"name": "http", "port": 80}]),
    );
    on_update(&old, &mut new, &[]).expect("updated");
    assert_eq!(node_ports(&new), [allocated[1], allocated[0]]);
    // A new port gets a new one.
    let mut grown = old.clone();
    grown["spec"]["ports"]
        .as_array_mut()
        .expect("ports")
        .push(json!({"name": "metrics", "port": 9090}));
    on_update(&old, &mut grown, &[]).expect("updated");
    let ports = node_ports(&grown);
    assert_eq!(&ports[..2], &allocated[..]);
    assert!(NODE_PORTS.contains(&ports[2]) && !allocated.contains(&ports[2]));
    // Back to ClusterIP: the node ports go, and so does a load balancer's status.
    let mut lb = old.clone();
    lb["spec"]["type"] = json!("LoadBalancer");
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "127.12.254.1"}]}});
    let mut plain = lb.clone();
    plain["spec"]["type"] = json!("ClusterIP");
    on_update(&lb, &mut plain, &[]).expect("updated");
    assert_eq!(node_ports(&plain), [0, 0]);
    assert_eq!(plain["status"]["loadBalancer"], json!({}));
}

#[test]
fn an_update_may_not_take_another_services_node_port() {
    let mut other = service(
        "other",
        "NodePort",
        json!([{"port": 80, "nodePort": 30001}]),
    );
    on_create(12, &mut other, &[]).expect("created");
    let mut old = service("web", "NodePort", json!([{"port": 80, "nodePort": 30002}]));
    on_create(12, &mut old, &[&other]).expect("created");
    let mut new = old.clone();
    new["spec"]["ports"][0]["nodePort"] = json!(30001);
    let err = on_update(&old, &mut new, &[&other]).expect_err("taken");
    assert!(
        err.to_string()
            .ends_with("Invalid value: 30001: provided port is already allocated"),
        "{err}"
    );
}
