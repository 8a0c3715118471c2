//! The garbage collector: objects whose every owner is gone are deleted
//! (background propagation). Orphaning is done by the store at DELETE time.

use std::collections::HashSet;

use serde_json::Value;

use super::{is_terminating, log_err, Ctx};
use crate::store::DeleteOptions;

pub fn reconcile(ctx: &Ctx) {
    let all = ctx.store.snapshot();
    let live: HashSet<&str> = all
        .iter()
        .filter_map(|(_, v)| v["metadata"]["uid"].as_str())
        .collect();
    for (key, obj) in &all {
        let owners: Vec<&Value> = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        if owners.is_empty() || is_terminating(obj) {
            continue;
        }
        let orphaned = owners
            .iter()
            .all(|o| o["uid"].as_str().is_none_or(|uid| !live.contains(uid)));
        // A custom resource whose definition is gone has no resource left:
        // the definition's finalizer deletes such objects.
        let resource = orphaned
            .then(|| ctx.store.resource_for_key(&key.resource))
            .flatten();
        if let Some(res) = resource {
            log_err(
                "garbage collection",
                ctx.store
                    .delete(&res, &key.namespace, &key.name, &DeleteOptions::default()),
            );
        }
    }
}
