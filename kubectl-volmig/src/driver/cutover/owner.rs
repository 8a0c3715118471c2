//! `--update-owner`: a StatefulSet's `volumeClaimTemplates` name the class
//! of the claims it makes, and they are immutable. To give new replicas
//! the new class, the StatefulSet is deleted with orphan propagation (its
//! pods and claims stay) and created again with the same spec but the new
//! class in the template; the new one adopts the pods by selector, and as
//! the controller revision covers the pod template only, nothing rolls
//! (../shared/cutover-notes.md, "StatefulSets"). A rollback does the same
//! with the old class.
//!
//! [`next`] is pure, like the swap's: what the API shows in, one change
//! out, taken again until [`OwnerAction::Done`].

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{json, Value};

use crate::plan::quiesce::{ScalableKind, ScaleTarget};
use crate::record::cutover::OwnerUpdate;

/// The next change to the StatefulSet.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnerAction {
    /// Delete it, orphaning its pods and claims (the uid, as a
    /// precondition: never a StatefulSet created since).
    Delete {
        uid: String,
    },
    /// It is being deleted: wait until it is gone.
    AwaitGone,
    /// Create it with the class wanted.
    Create(Box<StatefulSet>),
    Done,
}

pub use crate::plan::select::template_of;

/// The StatefulSet among the `stopped` owners whose claim template made
/// `claim`, with that template's name.
pub fn template_owner<'a>(
    claim: &str,
    stopped: &[ScaleTarget],
    sets: &'a [StatefulSet],
) -> Option<(&'a StatefulSet, String)> {
    sets.iter()
        .filter(|sts| {
            let name = sts.metadata.name.as_deref().unwrap_or_default();
            stopped
                .iter()
                .any(|t| t.kind == ScalableKind::StatefulSet && t.name == name)
        })
        .find_map(|sts| Some((sts, template_of(claim, sts)?)))
}

/// The class template `template` of `sts` names (`None`: the default).
pub fn template_class(sts: &StatefulSet, template: &str) -> Option<String> {
    sts.spec
        .as_ref()?
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(template))?
        .spec
        .as_ref()?
        .storage_class_name
        .clone()
}

/// What is kept of a StatefulSet to create it again: name, labels,
/// annotations and spec.
pub fn original_of(sts: &StatefulSet) -> Value {
    let meta = &sts.metadata;
    json!({
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": meta.labels,
            "annotations": meta.annotations,
        },
        "spec": sts.spec,
    })
}

/// What to do so that the StatefulSet's template names `want`.
pub fn next(update: &OwnerUpdate, want: Option<&str>, seen: Option<&StatefulSet>) -> OwnerAction {
    match seen {
        None => match with_class(&update.original, &update.template, want) {
            Some(sts) => OwnerAction::Create(Box::new(sts)),
            None => OwnerAction::Done,
        },
        Some(s) if template_class(s, &update.template).as_deref() == want => OwnerAction::Done,
        Some(s) if s.metadata.deletion_timestamp.is_some() => OwnerAction::AwaitGone,
        Some(s) => OwnerAction::Delete {
            uid: s.metadata.uid.clone().unwrap_or_default(),
        },
    }
}

/// The recorded StatefulSet with template `template`'s class set to
/// `class`; `None` if the record holds no usable object.
fn with_class(original: &Value, template: &str, class: Option<&str>) -> Option<StatefulSet> {
    let mut sts: StatefulSet = serde_json::from_value(original.clone()).ok()?;
    sts.metadata = ObjectMeta {
        name: sts.metadata.name.clone(),
        namespace: sts.metadata.namespace.clone(),
        labels: sts.metadata.labels.clone(),
        annotations: sts.metadata.annotations.clone(),
        ..ObjectMeta::default()
    };
    sts.status = None;
    let templates = sts.spec.as_mut()?.volume_claim_templates.as_mut()?;
    let t = templates
        .iter_mut()
        .find(|t| t.metadata.name.as_deref() == Some(template))?;
    t.spec
        .get_or_insert_with(Default::default)
        .storage_class_name = class.map(str::to_string);
    Some(sts)
}
