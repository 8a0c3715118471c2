//! Namespaces: a terminating namespace's content is deleted, then its
//! `kubernetes` finalizer goes and so does it; every namespace gets its
//! `default` ServiceAccount.

use serde_json::json;

use super::{is_terminating, log_err, Ctx};
use crate::registry::{self, RESOURCES};
use crate::store::DeleteOptions;

pub fn reconcile(ctx: &Ctx) {
    let namespaces = registry::get("namespaces");
    let accounts = registry::get("serviceaccounts");
    let (all, _) = ctx.store.list(namespaces, None);
    for ns in all {
        let name = ns["metadata"]["name"].as_str().unwrap_or_default();
        if is_terminating(&ns) {
            finish(ctx, name);
            continue;
        }
        if ctx.store.get(accounts, name, "default").is_err() {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
            log_err(
                "default service account",
                ctx.store.create(accounts, name, sa),
            );
        }
    }
}

/// Deletes what is left in a terminating namespace; once it is empty,
/// lets the namespace go.
fn finish(ctx: &Ctx, namespace: &str) {
    let mut left = 0;
    // Every namespaced resource; a custom resource once, whatever its
    // versions (they share their objects).
    let custom = ctx.store.custom_resources().stored();
    let all = RESOURCES.iter().chain(custom.iter().map(|r| &**r));
    for res in all.filter(|r| r.namespaced) {
        let (items, _) = ctx.store.list(res, Some(namespace));
        for item in items {
            left += 1;
            if !is_terminating(&item) {
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                log_err(
                    "namespace cleanup",
                    ctx.store
                        .delete(res, namespace, name, &DeleteOptions::default()),
                );
            }
        }
    }
    if left == 0 {
        log_err(
            "namespace finalize",
            ctx.store
                .modify(registry::get("namespaces"), "", namespace, |ns| {
                    ns["spec"]["finalizers"] = json!([]);
                    true
                }),
        );
    }
}
