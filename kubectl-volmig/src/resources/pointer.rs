//! The record pointer: in a cross-cluster operation, a ConfigMap in the
//! source namespace that says where the record is (the destination's
//! cluster and namespace), so that `status`, `logs`, `resume`, `abort` and
//! `cleanup` given the source's context find it.

use k8s_openapi::api::core::v1::ConfigMap;

use super::{metadata, string_map};
use crate::names::{self, Component};
use crate::plan::Plan;
use crate::spec::ClusterRef;

/// The data key with the destination's cluster (JSON of [`ClusterRef`]).
const CLUSTER: &str = "cluster";
/// The data key with the record's namespace.
const NAMESPACE: &str = "namespace";

/// Where a record is, as a pointer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLocation {
    pub cluster: ClusterRef,
    pub namespace: String,
}

/// The pointer of `plan`'s operation, or `None` in one cluster.
pub fn record_pointer(plan: &Plan) -> Option<ConfigMap> {
    let clusters = plan.spec.clusters.as_ref()?;
    let op = plan.operation.as_str();
    let cluster = serde_json::to_string(&clusters.destination).ok()?;
    Some(ConfigMap {
        metadata: metadata(
            op,
            Component::RecordPointer,
            &plan.spec.source.namespace,
            names::pointer_name(op),
        ),
        data: Some(string_map([
            (CLUSTER, cluster.as_str()),
            (NAMESPACE, plan.destination.namespace.as_str()),
        ])),
        ..ConfigMap::default()
    })
}

/// Where `pointer` says the record is; `None` for a ConfigMap that is not
/// one.
pub fn read_pointer(pointer: &ConfigMap) -> Option<RecordLocation> {
    let data = pointer.data.as_ref()?;
    Some(RecordLocation {
        cluster: serde_json::from_str(data.get(CLUSTER)?).ok()?,
        namespace: data.get(NAMESPACE)?.clone(),
    })
}
