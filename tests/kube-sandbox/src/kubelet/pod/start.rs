//! Until a pod's containers may start: its node Ready, no Multi-Attach
//! conflict for its claims, and its volumes set up, their ownership given
//! to the pod's `fsGroup` ([`ownership`]), as the kubelet's volume manager
//! mounts every volume before the containers start.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::{is_ready, Worker};
use crate::controllers::placement::{self, Cluster};
use crate::events::{self, EventType, Source};
use crate::kubelet::ownership;
use crate::kubelet::status::Container;
use crate::kubelet::volumes::{self, HostVolume, NotReady};
use crate::registry;

impl Worker {
    /// Waits for the node to be Ready and the pod's volumes to be
    /// attachable and mountable; None when the pod went away first.
    pub(super) async fn wait_until_startable(
        &self,
        version: &mut watch::Receiver<u64>,
    ) -> Option<(Value, HashMap<String, HostVolume>)> {
        {
            let pod = self.current()?;
            let mut model = self.model();
            *model = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    Container::new(
                        c["name"].as_str().unwrap_or_default(),
                        c["image"].as_str().unwrap_or_default(),
                    )
                })
                .collect();
        }
        self.publish();
        loop {
            let pod = self.current()?;
            if crate::controllers::is_terminating(&pod) {
                return None;
            }
            match self.startable(&pod) {
                Ok(volumes) => return Some((pod, volumes)),
                Err(Some(not_ready)) => {
                    let source = if not_ready.reason == "FailedAttachVolume" {
                        Source::new("attachdetach-controller")
                    } else {
                        Source::on("kubelet", &self.node)
                    };
                    events::record(
                        &self.shared.store,
                        &source,
                        &pod,
                        EventType::Warning,
                        not_ready.reason,
                        &not_ready.message,
                    );
                }
                Err(None) => {}
            }
            tokio::select! {
                changed = version.changed() => if changed.is_err() { return None },
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// Err(None): wait quietly (node not Ready); Err(Some): wait and say why.
    fn startable(&self, pod: &Value) -> Result<HashMap<String, HostVolume>, Option<NotReady>> {
        let node = self
            .shared
            .store
            .get(registry::get("nodes"), "", &self.node);
        let Some(node) = node.ok().filter(is_ready) else {
            return Err(None);
        };
        if pod["spec"]["initContainers"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(Some(NotReady {
                reason: "Failed",
                message: "kube-sandbox does not run init containers".into(),
            }));
        }
        if let Some(message) = self.multi_attach(pod) {
            return Err(Some(NotReady {
                reason: "FailedAttachVolume",
                message,
            }));
        }
        let mut volumes = volumes::prepare(
            &self.shared.store,
            &self.shared.authority,
            pod,
            &node,
            (&self.shared.data_dir, &self.dir),
        )
        .map_err(Some)?;
        self.map_devices(pod, &mut volumes).map_err(Some)?;
        let warnings =
            ownership::apply(&self.shared.store, pod, &self.node, &volumes).map_err(Some)?;
        for warning in warnings {
            self.event(pod, EventType::Warning, warning.reason, &warning.message);
        }
        Ok(volumes)
    }

    /// Maps each Block volume a container lists in `volumeDevices` to the
    /// device it will bind (a loop device, or the image file; see
    /// [`crate::kubelet::devices`]), as the kubelet's `MapVolume` does
    /// before the containers start. A volume no container uses is not
    /// mapped, as the kubelet leaves it alone.
    fn map_devices(
        &self,
        pod: &Value,
        volumes: &mut HashMap<String, HostVolume>,
    ) -> Result<(), NotReady> {
        let used = volumes::used_in(pod, "volumeDevices");
        for (name, volume) in volumes.iter_mut() {
            let Some(image) = volume.block.clone() else {
                continue;
            };
            if !used.contains(&name.as_str()) {
                continue;
            }
            let mapped = self
                .shared
                .devices
                .map(&image, volume.read_only)
                .map_err(|e| NotReady {
                    reason: "FailedMapVolume",
                    message: format!("MapVolume.MapPodDevice failed for volume \"{name}\" : {e}"),
                })?;
            volume.path = mapped.path;
            volume.read_only = mapped.bind_read_only;
        }
        Ok(())
    }

    /// The attach-detach controller's verdict on the pod's claims. A pod
    /// without any never waits, and the store is not read for it.
    fn multi_attach(&self, pod: &Value) -> Option<String> {
        let mut volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
        if !volumes.any(|v| v["persistentVolumeClaim"].is_object()) {
            return None;
        }
        let store = &self.shared.store;
        let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod.clone()).ok()?;
        let (pods, claims, volumes) = (
            store.list_as("pods"),
            store.list_as("persistentvolumeclaims"),
            store.list_as("persistentvolumes"),
        );
        let cluster = Cluster {
            nodes: &[],
            pods: &pods,
            claims: &claims,
            volumes: &volumes,
            classes: &[],
        };
        placement::multi_attach_conflict(&typed, &self.node, &cluster)
    }
}
