//! Adoption and release by label selector, as every workload controller
//! does it through `ControllerRefManager.ClaimObject`
//! (`pkg/controller/controller_ref_manager.go`):
//!
//! - an object the owner controls stays its own while the selector (and
//!   the controller's own filter) matches it, and is released (its
//!   ownerReference removed) once it does not, unless the owner is being
//!   deleted;
//! - an orphan in the owner's namespace that the selector and filter match
//!   and that is not being deleted is adopted: it gets a controller
//!   ownerReference to the owner (see [`crate::store::Store::adopt`]);
//! - an object another owner controls is left alone.
//!
//! This is what lets a StatefulSet deleted with `propagationPolicy:
//! Orphan` and created again take its pods back without restarting them.

use serde_json::Value;

use super::workloads::owner_ref;
use super::{is_terminating, log_err, name_of, Ctx};
use crate::registry;
use crate::selector::LabelSelector;
use crate::store::{controller_uid, remove_owner};

/// The objects of `plural` among `candidates` that `owner` controls once
/// adoption and release are done, in the order given. `selector` is the
/// owner's `spec.selector` as a `LabelSelector` object. None when the
/// selector does not parse: the controller then does nothing, as its sync
/// would fail.
pub fn claim(
    ctx: &Ctx,
    owner: &Value,
    plural: &'static str,
    candidates: &[Value],
    selector: &Value,
    filter: impl Fn(&Value) -> bool,
) -> Option<Vec<Value>> {
    let (ns, owner_name) = name_of(owner);
    let selector = match LabelSelector::from_object(selector) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("{owner_name}: invalid selector: {e}");
            return None;
        }
    };
    let matches = |obj: &Value| selector.matches(&obj["metadata"]["labels"]) && filter(obj);
    let uid = &owner["metadata"]["uid"];
    let mut claimed = Vec::new();
    for obj in candidates.iter().filter(|o| name_of(o).0 == ns) {
        match controller_uid(obj) {
            Some(controller) if controller == uid => {
                if matches(obj) {
                    claimed.push(obj.clone());
                } else if !is_terminating(owner) {
                    release(ctx, plural, obj, uid);
                }
            }
            Some(_) => {}
            None if is_terminating(owner) || is_terminating(obj) || !matches(obj) => {}
            None => claimed.extend(adopt(ctx, owner, plural, obj)),
        }
    }
    Some(claimed)
}

fn adopt(ctx: &Ctx, owner: &Value, plural: &'static str, obj: &Value) -> Option<Value> {
    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
    let kind = owner["kind"].as_str().unwrap_or_default();
    let owner_res = registry::by_kind(api_version, kind)?;
    let (ns, name) = name_of(obj);
    let adopted = ctx.store.adopt(
        registry::get(plural),
        ns,
        name,
        owner_res,
        owner,
        owner_ref(owner),
    );
    log_err("adopt", adopted).flatten()
}

fn release(ctx: &Ctx, plural: &'static str, obj: &Value, uid: &Value) {
    let (ns, name) = name_of(obj);
    let released = ctx.store.modify(registry::get(plural), ns, name, |o| {
        remove_owner(o, uid);
        true
    });
    log_err("release", released);
}
