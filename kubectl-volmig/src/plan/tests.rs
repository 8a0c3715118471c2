//! The planner on the YAML fixtures of `tests/fixtures/plan/`: a small
//! cluster as `kubectl get -o yaml` shows it, changed in code where a test
//! needs something else, then handed to [`plan`] the way the CLI reads the
//! cluster for a spec.
//!
//! - [`block`]: Block claims, never converted or shrunk;
//! - [`refusals`]: every reason a migration cannot work, and the message;
//! - [`choices`]: the destination's defaults, and when a claim is reused;
//! - [`clusters`]: a destination in another cluster (`--to-context`);
//! - [`nodes`]: node moves (`--to-node`): the class, the refusals;
//! - [`placing`]: where the sender and the receiver run;
//! - [`quantities`]: Kubernetes quantities to bytes and back;
//! - [`sources`]: where the sender reads (`--copy-method`);
//! - [`values`]: the command's own values the API server or the mover
//!   would reject.
//!
//! [`Cluster`] is also the loader of `select`'s tests (`many.yaml`).

mod block;
mod choices;
mod clusters;
mod many;
mod nodes;
mod placing;
mod quantities;
mod refusals;
mod security;
mod sources;
mod values;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::de::DeserializeOwned;

use super::{plan, Inputs, Plan, Refusal, SnapshotSupport};
use crate::spec::{ClaimRef, MigrationSpec};

const CLUSTER: &str = include_str!("../../tests/fixtures/plan/cluster.yaml");
const DESTINATION: &str = include_str!("../../tests/fixtures/plan/destination.yaml");

/// The objects of a fixture, by kind.
#[derive(Debug, Clone, Default)]
pub(super) struct Cluster {
    namespaces: Vec<Namespace>,
    classes: Vec<StorageClass>,
    nodes: Vec<Node>,
    pub(super) claims: Vec<PersistentVolumeClaim>,
    pub(super) volumes: Vec<PersistentVolume>,
    pub(super) pods: Vec<Pod>,
    pub(super) deployments: Vec<Deployment>,
    pub(super) replica_sets: Vec<ReplicaSet>,
    pub(super) stateful_sets: Vec<StatefulSet>,
    /// The VolumeSnapshot API: served (with these classes) or not.
    snapshots: SnapshotSupport,
}

impl Cluster {
    /// `cluster.yaml`.
    fn base() -> Self {
        Self::default().with(CLUSTER)
    }

    /// `cluster.yaml` and `destination.yaml`.
    fn with_destinations() -> Self {
        Self::base().with(DESTINATION)
    }

    /// This cluster plus the objects of a multi-document YAML fixture.
    pub(super) fn with(mut self, yaml: &str) -> Self {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).expect("fixture YAML");
        for doc in docs {
            match doc["kind"].as_str().expect("every object has a kind") {
                "Namespace" => self.namespaces.push(object(doc)),
                "StorageClass" => self.classes.push(object(doc)),
                "Node" => self.nodes.push(object(doc)),
                "PersistentVolumeClaim" => self.claims.push(object(doc)),
                "PersistentVolume" => self.volumes.push(object(doc)),
                "Pod" => self.pods.push(object(doc)),
                "Deployment" => self.deployments.push(object(doc)),
                "ReplicaSet" => self.replica_sets.push(object(doc)),
                "StatefulSet" => self.stateful_sets.push(object(doc)),
                "VolumeSnapshotClass" => {
                    self.snapshots.api = true;
                    self.snapshots.classes.push(object(doc));
                }
                other => panic!("unexpected kind {other} in a fixture"),
            }
        }
        self
    }

    /// What the CLI reads for `spec`: the claims by name, the volumes they
    /// are bound to, the source namespace's pods, every class and node.
    fn inputs(&self, spec: &MigrationSpec) -> Inputs {
        let dst = &spec.destination;
        let source_claim = self.find_claim(&spec.source.namespace, &spec.source.name);
        let destination_claim = self.find_claim(&dst.namespace, &dst.name);
        Inputs {
            source_volume: self.volume_of(source_claim.as_ref()),
            destination_volume: self.volume_of(destination_claim.as_ref()),
            source_claim,
            destination_claim,
            storage_classes: self.classes.clone(),
            pods: (self.pods.iter())
                .filter(|p| p.metadata.namespace.as_deref() == Some(&spec.source.namespace))
                .cloned()
                .collect(),
            destination_namespace: (self.namespaces.iter())
                .find(|n| n.metadata.name.as_deref() == Some(&dst.namespace))
                .cloned(),
            nodes: self.nodes.clone(),
            source_namespace: (self.namespaces.iter())
                .find(|n| n.metadata.name.as_deref() == Some(&spec.source.namespace))
                .cloned(),
            openshift: None,
            snapshots: self.snapshots.clone(),
            remote: None,
        }
    }

    fn find_claim(&self, namespace: &str, name: &str) -> Option<PersistentVolumeClaim> {
        (self.claims.iter())
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(namespace)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }

    fn volume_of(&self, claim: Option<&PersistentVolumeClaim>) -> Option<PersistentVolume> {
        let name = claim?.spec.as_ref()?.volume_name.as_deref()?;
        (self.volumes.iter())
            .find(|v| v.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    pub(super) fn claim(&mut self, name: &str) -> &mut PersistentVolumeClaim {
        (self.claims.iter_mut())
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no claim {name} in the fixture"))
    }

    fn volume(&mut self, name: &str) -> &mut PersistentVolume {
        (self.volumes.iter_mut())
            .find(|v| v.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name} in the fixture"))
    }

    pub(super) fn pod(&mut self, name: &str) -> &mut Pod {
        (self.pods.iter_mut())
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no pod {name} in the fixture"))
    }

    fn class(&mut self, name: &str) -> &mut StorageClass {
        (self.classes.iter_mut())
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no class {name} in the fixture"))
    }

    pub(super) fn remove_pod(&mut self, name: &str) {
        self.pods
            .retain(|p| p.metadata.name.as_deref() != Some(name));
    }

    /// The source claim `shop/data` and its volume.
    fn source(&mut self) -> (&mut PersistentVolumeClaim, &mut PersistentVolume) {
        let claim = (self.claims.iter_mut())
            .find(|c| c.metadata.name.as_deref() == Some("data"))
            .expect("source claim");
        let volume = (self.volumes.iter_mut())
            .find(|v| v.metadata.name.as_deref() == Some(SOURCE_VOLUME))
            .expect("source volume");
        (claim, volume)
    }

    fn plan(&self, spec: &MigrationSpec) -> Plan {
        match plan(spec, "data-x7k2q", &self.inputs(spec)) {
            Ok(plan) => plan,
            Err(refusal) => panic!("refused: {refusal}"),
        }
    }

    fn refuse(&self, spec: &MigrationSpec) -> Refusal {
        match plan(spec, "data-x7k2q", &self.inputs(spec)) {
            Ok(plan) => panic!("planned, expected a refusal: {plan:#?}"),
            Err(refusal) => refusal,
        }
    }
}

/// The source fixture's volume.
const SOURCE_VOLUME: &str = "pvc-3f2a9c1e";

fn object<T: DeserializeOwned>(doc: serde_json::Value) -> T {
    serde_json::from_value(doc).expect("a valid object")
}

/// `shop/data` to `shop/<to>`, every option at its default.
fn spec(to: &str) -> MigrationSpec {
    MigrationSpec::new(ClaimRef::new("shop", "data"), ClaimRef::new("shop", to))
}

/// A timestamp, for `creationTimestamp` and `deletionTimestamp`.
fn time(rfc3339: &str) -> Time {
    Time(rfc3339.parse().expect("RFC 3339 timestamp"))
}

/// Asserts that `message` contains every one of `parts`.
#[track_caller]
fn assert_says(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{message:?} does not say {part:?}");
    }
}
