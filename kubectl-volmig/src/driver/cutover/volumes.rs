//! The cutover's changes to volumes: reclaim policies, the operation's
//! label on a volume kept, a volume let go.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use super::Cutover;
use crate::driver::objects;
use crate::driver::DriverError;
use crate::names;

/// Merge-patches volume `name`; one already gone is no error.
pub(crate) async fn patch_volume(
    client: &Client,
    name: &str,
    patch: &Value,
    what: &str,
) -> Result<(), DriverError> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(DriverError::kube(format!("{what} volume {name}"), e)),
    }
}

/// Sets volume `volume`'s reclaim policy.
pub(crate) async fn set_policy(
    client: &Client,
    volume: &str,
    policy: &str,
) -> Result<(), DriverError> {
    let patch = json!({"spec": {"persistentVolumeReclaimPolicy": policy}});
    patch_volume(client, volume, &patch, &format!("set {policy} on")).await
}

impl Cutover {
    pub(super) async fn patch_volume(
        &self,
        name: &str,
        patch: &Value,
        what: &str,
    ) -> Result<(), DriverError> {
        patch_volume(&self.client, name, patch, what).await
    }

    pub(super) async fn set_policy(&self, volume: &str, policy: &str) -> Result<(), DriverError> {
        set_policy(&self.client, volume, policy).await
    }

    /// Labels a kept volume with the operation, so it can be found.
    pub(super) async fn label_volume(&self, volume: &str) -> Result<(), DriverError> {
        let patch = json!({"metadata": {"labels": {names::OPERATION_KEY: self.plan.operation}}});
        self.patch_volume(volume, &patch, "label").await
    }

    /// Lets volume `name` go as its own `policy` says (the one it had
    /// before volmig set Retain): with Delete, its reclaim deletes it and
    /// its data; otherwise the object goes and the data stays on the
    /// storage. Says which, in words.
    pub(super) async fn discard_volume(
        &self,
        name: &str,
        policy: &str,
    ) -> Result<&'static str, DriverError> {
        if policy == "Delete" {
            self.set_policy(name, "Delete").await?;
            return Ok("its data with it, as its Delete policy says");
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        objects::delete_if_there(&api, name, &DeleteParams::default(), "volume").await?;
        Ok("its data stays on the storage, as its Retain policy says")
    }
}
