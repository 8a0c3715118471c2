//! The root CA publisher of kube-controller-manager
//! (pkg/controller/certificates/rootcacertpublisher): every active
//! namespace has a ConfigMap `kube-root-ca.crt` whose `ca.crt` is the
//! cluster CA, which the projected `kube-api-access-*` volume of every pod
//! reads. A ConfigMap that drifted is put back.

use serde_json::{json, Value};

use super::{is_terminating, log_err, Ctx};
use crate::registry;

/// The ConfigMap's name and key.
pub const CONFIG_MAP: &str = "kube-root-ca.crt";
pub const KEY: &str = "ca.crt";

/// The publisher's description annotation, as it writes it.
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

pub fn reconcile(ctx: &Ctx) {
    let config_maps = registry::get("configmaps");
    let ca = ctx.authority.ca.ca_pem();
    let (namespaces, _) = ctx.store.list(registry::get("namespaces"), None);
    for ns in namespaces.iter().filter(|ns| !is_terminating(ns)) {
        let name = ns["metadata"]["name"].as_str().unwrap_or_default();
        match ctx.store.get(config_maps, name, CONFIG_MAP) {
            Ok(cm) if cm["data"][KEY] == ca => {}
            Ok(_) => {
                log_err(
                    "root CA config map",
                    ctx.store.modify(config_maps, name, CONFIG_MAP, |cm| {
                        cm["data"] = json!({KEY: ca});
                        true
                    }),
                );
            }
            Err(_) => {
                log_err(
                    "root CA config map",
                    ctx.store.create(config_maps, name, config_map(ca)),
                );
            }
        }
    }
}

fn config_map(ca: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIG_MAP,
            "annotations": {"kubernetes.io/description": DESCRIPTION},
        },
        "data": {KEY: ca},
    })
}
