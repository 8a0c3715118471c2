//! The receiver's Service: a stable address for the sender, whichever
//! attempt's receiver pod is running.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{metadata, string_map};
use crate::names::{self, Component};
use crate::plan::Plan;
use crate::spec::NetworkPath;

/// The name of the mover's port, in the receiver pod and on the Service.
pub(super) const PORT_NAME: &str = "mover";

/// The ClusterIP Service of `plan`'s receiver, in the destination
/// namespace: port [`names::MOVER_PORT`], selecting the receiver pods of
/// this operation only.
pub fn service(plan: &Plan) -> Service {
    let op = plan.operation.as_str();
    Service {
        metadata: metadata(
            op,
            Component::Transport,
            &plan.destination.namespace,
            names::service_name(op),
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            selector: Some(string_map([
                (names::OPERATION_KEY, op),
                (names::COMPONENT_KEY, Component::Receiver.as_str()),
            ])),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_string()),
                protocol: Some("TCP".to_string()),
                port: names::MOVER_PORT,
                target_port: Some(IntOrString::String(PORT_NAME.to_string())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The receiver's Service as network `path` exposes it to a sender in
/// another cluster: a `LoadBalancer`, a `NodePort`, or (the tunnel dials
/// the pods) a `ClusterIP` as in one cluster.
pub fn exposed_service(plan: &Plan, path: NetworkPath) -> Service {
    let mut service = service(plan);
    if let Some(spec) = service.spec.as_mut() {
        spec.type_ = Some(path.service_type().to_string());
    }
    service
}
