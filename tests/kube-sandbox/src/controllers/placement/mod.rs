//! Pod placement, decided the way kube-scheduler and the attach-detach controller decide it.
//!
//! [`schedule`] emulates the default kube-scheduler profile of Kubernetes v1.33 for the
//! plugins that apply without resource accounting: `NodeUnschedulable`, `TaintToleration`,
//! `NodeAffinity`, `VolumeRestrictions` (ReadWriteOncePod) and `VolumeBinding`. As in the
//! scheduler, a node is rejected by the first filter that fails, and the FailedScheduling
//! message is assembled as `FitError.Error()` assembles it. All pods are taken to have the
//! same priority, so preemption never finds victims; the `preemption:` part says so per node.
//!
//! [`multi_attach_conflict`] emulates the attach-detach controller, which will not attach a
//! single-node volume to a second node. ReadWriteOnce is no scheduling constraint: the second
//! pod is scheduled, then waits with a FailedAttachVolume event.
//!
//! Everything here is pure: the caller passes what its store holds and applies the result.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    PersistentVolumeClaim, Pod, Taint, Toleration, TopologySelectorTerm,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

type Labels = BTreeMap<String, String>;

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

// Reasons, worded as kube-scheduler v1.33 words them.
const NO_NODES: &str = "no nodes available to schedule pods";
const CORDONED: &str = "node(s) were unschedulable";
const AFFINITY_MISMATCH: &str = "node(s) didn't match Pod's node affinity/selector";
const RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";
const PV_AFFINITY_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
const NO_VOLUME_TO_BIND: &str = "node(s) didn't find available persistent volumes to bind";
const PV_NOT_FOUND: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// Everything the scheduler looks at, borrowed from the store by the caller.
#[derive(Clone, Copy, Debug)]
pub struct Cluster<'a> {
    pub nodes: &'a [Node],
    /// All pods in all namespaces, to find the users of a claim.
    pub pods: &'a [Pod],
    pub claims: &'a [PersistentVolumeClaim],
    pub volumes: &'a [PersistentVolume],
    pub classes: &'a [StorageClass],
}

/// The outcome of one scheduling attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Bind the pod to `node`. `select_for_claims` names the pod's unbound
    /// WaitForFirstConsumer claims (in the pod's namespace), which the caller must annotate
    /// with `volume.kubernetes.io/selected-node: <node>` so their volumes are provisioned there.
    Bind {
        node: String,
        select_for_claims: Vec<String>,
    },
    /// The pod stays Pending; `message` is the FailedScheduling event message.
    Unschedulable { message: String },
}

/// Decides where an unscheduled pod goes. The caller only asks about pods with neither
/// `spec.nodeName` nor `metadata.deletionTimestamp`.
///
/// Of the feasible nodes, the one running the fewest non-terminated pods wins, ties going to
/// the first name: pods spread as the scheduler's scoring spreads them, repeatably.
pub fn schedule(pod: &Pod, cluster: &Cluster) -> Decision {
    let total = cluster.nodes.len();
    let unschedulable = |message| Decision::Unschedulable { message };
    if total == 0 {
        return unschedulable(NO_NODES.to_owned());
    }
    let volumes = match pre_filter(pod, cluster) {
        Ok(volumes) => volumes,
        Err(reason) => {
            let preemption = format!("{total} {PREEMPTION_NOT_HELPFUL}");
            return unschedulable(fit_error(total, &reason, &preemption));
        }
    };
    let mut feasible = Vec::new();
    let mut rejections = Vec::new();
    for node in cluster.nodes {
        match filter(pod, node, &volumes) {
            Ok(()) => feasible.push(name(&node.metadata)),
            Err(rejection) => rejections.push(rejection),
        }
    }
    let Some(node) = feasible
        .into_iter()
        .min_by_key(|n| (pods_on(cluster, n), *n))
    else {
        let reasons = rejections
            .iter()
            .flat_map(|r| r.reasons.iter().map(String::as_str));
        let preemption = rejections.iter().map(|r| match r.resolvable {
            true => NO_VICTIMS,
            false => PREEMPTION_NOT_HELPFUL,
        });
        return unschedulable(fit_error(
            total,
            &histogram(reasons),
            &histogram(preemption),
        ));
    };
    let select_for_claims = volumes
        .delayed
        .iter()
        .map(|(c, _)| name(&c.metadata).to_owned());
    Decision::Bind {
        node: node.to_owned(),
        select_for_claims: select_for_claims.collect(),
    }
}

/// The attach-detach controller's check, run by the caller before starting the containers of
/// a pod scheduled to `node`. A PersistentVolume whose access modes are set and allow neither
/// ReadWriteMany nor ReadOnlyMany attaches to one node at a time. While it is attached for
/// another node's non-terminated pod (see [`is_attached`]), the controller records
/// `FailedAttachVolume` with the message returned here, which names the users in the pod's
/// own namespace and only counts the others. `None` when the pod may start.
///
/// Only the cluster's pods, claims and volumes are read: its nodes and
/// classes may be left empty.
pub fn multi_attach_conflict(pod: &Pod, node: &str, cluster: &Cluster) -> Option<String> {
    let ns = namespace(&pod.metadata);
    let volumes = claim_names(pod).filter_map(|c| find_claim(cluster, ns, c)?.spec.as_ref());
    let volumes = volumes.filter_map(|s| find_volume(cluster, s.volume_name.as_deref()?));
    volumes
        .filter(|pv| attaches_to_one_node(pv))
        .find_map(|pv| {
            let volume = name(&pv.metadata);
            let using: Vec<&Pod> = (cluster.pods.iter())
                .filter(|other| !same_pod(other, pod) && !is_terminated(other))
                .filter(|other| node_name(other).is_some())
                .filter(|other| uses_volume(other, volume, cluster))
                .collect();
            let elsewhere = |other: &&Pod| node_name(other) != Some(node);
            let attached: Vec<&Pod> = using.iter().copied().filter(|o| is_attached(o)).collect();
            let users: Vec<&Pod> = if attached.is_empty() {
                // Nobody has it yet: the pod asking first gets it.
                using
                    .into_iter()
                    .filter(elsewhere)
                    .filter(|o| age(&o.metadata) < age(&pod.metadata))
                    .collect()
            } else if attached.iter().any(|o| !elsewhere(o)) {
                Vec::new()
            } else {
                attached
            };
            (!users.is_empty()).then(|| multi_attach_message(volume, ns, &users))
        })
}

/// Why the filters turned a node down: the reasons of the first failing plugin, and whether
/// evicting pods could help (`Unschedulable`) or not (`UnschedulableAndUnresolvable`).
struct Rejection {
    reasons: Vec<String>,
    resolvable: bool,
}

/// What the volume pre-filters work out once per pod.
#[derive(Default)]
struct PodVolumes<'a> {
    /// The PersistentVolumes of bound claims; `None` for one that does not exist.
    bound: Vec<Option<&'a PersistentVolume>>,
    /// Unbound WaitForFirstConsumer claims, with their class.
    delayed: Vec<(&'a PersistentVolumeClaim, &'a StorageClass)>,
    /// A ReadWriteOncePod claim of the pod is used by a scheduled pod already.
    rwop_in_use: bool,
}

/// The PreFilters of VolumeRestrictions and VolumeBinding. An error rejects the pod on every
/// node, with that message.
fn pre_filter<'a>(pod: &Pod, cluster: &Cluster<'a>) -> Result<PodVolumes<'a>, String> {
    let ns = namespace(&pod.metadata);
    let claims = claim_names(pod).map(|c| {
        find_claim(cluster, ns, c).ok_or_else(|| format!("persistentvolumeclaim \"{c}\" not found"))
    });
    let claims = claims.collect::<Result<Vec<_>, _>>()?;
    for claim in &claims {
        let (claim_name, volume) = (
            name(&claim.metadata),
            volume_name(claim).unwrap_or_default(),
        );
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return Err(format!(
                "persistentvolumeclaim \"{claim_name}\" bound to non-existent persistentvolume \"{volume}\""
            ));
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!(
                "persistentvolumeclaim \"{claim_name}\" is being deleted"
            ));
        }
    }
    let mut volumes = PodVolumes::default();
    for &claim in &claims {
        if is_bound(claim) {
            let pv = volume_name(claim).and_then(|v| find_volume(cluster, v));
            volumes.bound.push(pv);
        } else {
            // A claim pre-bound by `spec.volumeName` waits for the PV controller like an
            // Immediate one.
            let class =
                delay_binding_class(claim, cluster).filter(|_| volume_name(claim).is_none());
            let class = class.ok_or_else(|| UNBOUND_IMMEDIATE.to_owned())?;
            if !volumes.delayed.iter().any(|(c, _)| std::ptr::eq(*c, claim)) {
                volumes.delayed.push((claim, class));
            }
        }
    }
    volumes.rwop_in_use = claims.iter().any(|claim| rwop_in_use(claim, pod, cluster));
    Ok(volumes)
}

/// The filters, in plugin order; the first to fail rejects the node.
fn filter(pod: &Pod, node: &Node, volumes: &PodVolumes) -> Result<(), Rejection> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let reject = |reasons, resolvable| {
        Err(Rejection {
            reasons,
            resolvable,
        })
    };
    if let Some(reason) = node_reason(pod, node, &labels) {
        return reject(vec![reason], false);
    }
    if volumes.rwop_in_use {
        return reject(vec![RWOP_CONFLICT.to_owned()], true);
    }
    let reasons = volume_binding_reasons(volumes, name(&node.metadata), &labels);
    if reasons.is_empty() {
        Ok(())
    } else {
        reject(reasons, false)
    }
}

/// NodeUnschedulable (a cordoned node, unless the pod tolerates the cordon's taint),
/// TaintToleration and NodeAffinity (`spec.nodeSelector` and the required node affinity);
/// `labels` are the node's.
fn node_reason(pod: &Pod, node: &Node, labels: &Labels) -> Option<String> {
    let spec = pod.spec.as_ref();
    let tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let node_spec = node.spec.as_ref();
    let cordon = Taint {
        key: "node.kubernetes.io/unschedulable".to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    };
    if node_spec.and_then(|s| s.unschedulable) == Some(true)
        && !tolerations.iter().any(|t| tolerates(t, &cordon))
    {
        return Some(CORDONED.to_owned());
    }
    let taints = node_spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(taint) = untolerated_taint(taints, tolerations) {
        let value = taint.value.as_deref().unwrap_or_default();
        return Some(format!(
            "node(s) had untolerated taint {{{}: {value}}}",
            taint.key
        ));
    }
    (!fits_node_affinity(pod, node, labels)).then(|| AFFINITY_MISMATCH.to_owned())
}

/// `GetRequiredNodeAffinity(pod).Match(node)`: `spec.nodeSelector` and the
/// required node affinity (whose `matchFields` see the node's name);
/// `labels` are the node's.
fn fits_node_affinity(pod: &Pod, node: &Node, labels: &Labels) -> bool {
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
    let node_name = Some(name(&node.metadata));
    selector
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && required_affinity(pod)
            .is_none_or(|a| terms_match(&a.node_selector_terms, labels, node_name))
}

/// What the DaemonSet controller's `NodeShouldRunDaemonPod` decides for
/// `pod` (its template with the daemon tolerations): whether a daemon pod
/// should be created on the node (`spec.nodeName`, node affinity, no
/// untolerated NoSchedule or NoExecute taint), and whether one there may
/// keep running (the same, but only NoExecute taints count). Cordons are
/// no concern: daemon pods tolerate them.
pub fn daemon_should_run(pod: &Pod, node: &Node) -> (bool, bool) {
    let spec = pod.spec.as_ref();
    let wanted = spec
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let no_labels = Labels::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&no_labels);
    if !(wanted.is_empty() || wanted == name(&node.metadata))
        || !fits_node_affinity(pod, node, labels)
    {
        return (false, false);
    }
    let tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    let taints = taints.unwrap_or_default();
    if untolerated_taint(taints, tolerations).is_none() {
        return (true, true);
    }
    let evicted = (taints.iter().filter(|t| t.effect == "NoExecute"))
        .any(|t| !tolerations.iter().any(|tol| tolerates(tol, t)));
    (false, !evicted)
}

/// VolumeBinding's `FindPodVolumes`: the volumes of bound claims must be reachable from the
/// node, and each delayed claim provisionable for it: not promised to another node, a class
/// with a provisioner, and the class's `allowedTopologies` matching the node. (Binding
/// delayed claims to existing Available volumes is not emulated.)
fn volume_binding_reasons(volumes: &PodVolumes, node: &str, labels: &Labels) -> Vec<String> {
    let mut reasons = Vec::new();
    // checkBoundClaims stops at the first volume that fails.
    let unreachable = volumes.bound.iter().find_map(|pv| match pv {
        None => Some(PV_NOT_FOUND),
        Some(pv) => (!volume_admits(pv, labels)).then_some(PV_AFFINITY_CONFLICT),
    });
    reasons.extend(unreachable.map(str::to_owned));
    let provisionable = volumes.delayed.iter().all(|(claim, class)| {
        let topologies = class.allowed_topologies.as_deref().unwrap_or_default();
        annotation(&claim.metadata, SELECTED_NODE).is_none_or(|n| n == node)
            && !matches!(
                class.provisioner.as_str(),
                "" | "kubernetes.io/no-provisioner"
            )
            && topology_matches(topologies, labels)
    });
    if !provisionable {
        reasons.push(NO_VOLUME_TO_BIND.to_owned());
    }
    reasons
}

/// Whether a PersistentVolume's required node affinity admits a node with
/// these labels (no affinity admits every node): what decides whether a
/// node can mount a node-local volume at all.
pub fn volume_admits(pv: &PersistentVolume, node_labels: &Labels) -> bool {
    let required = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref()?.required.as_ref());
    required.is_none_or(|r| terms_match(&r.node_selector_terms, node_labels, None))
}

/// `FitError.Error()` with the filter and preemption parts already rendered.
fn fit_error(total: usize, reasons: &str, preemption: &str) -> String {
    format!("0/{total} nodes are available: {reasons}. preemption: 0/{total} nodes are available: {preemption}.")
}

/// Counts equal reasons into `"<count> <reason>"` entries, sorted as plain strings (so
/// `"10 …"` precedes `"2 …"`) and comma-joined, as the scheduler does.
fn histogram<'r>(reasons: impl Iterator<Item = &'r str>) -> String {
    let mut counts = BTreeMap::<&str, usize>::new();
    for reason in reasons {
        *counts.entry(reason).or_default() += 1;
    }
    let mut entries: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    entries.sort();
    entries.join(", ")
}

fn required_affinity(pod: &Pod) -> Option<&NodeSelector> {
    let affinity = pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?;
    affinity
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

/// `MatchNodeSelectorTerms`: terms are ORed and the requirements of a term ANDed; an empty
/// term, or one with a malformed requirement, matches nothing. `node_name` is `None` when only
/// labels count (PersistentVolume node affinity), so `matchFields` then cannot match.
fn terms_match(terms: &[NodeSelectorTerm], labels: &Labels, node_name: Option<&str>) -> bool {
    terms.iter().any(|term| {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        !(expressions.is_empty() && fields.is_empty())
            && expressions
                .iter()
                .all(|r| label_requirement_matches(r, labels))
            && fields
                .iter()
                .all(|r| field_requirement_matches(r, node_name))
    })
}

/// A label requirement as `labels.Requirement.Matches` evaluates it; `Gt` and `Lt` compare
/// the label, read as an integer, with the single value.
fn label_requirement_matches(req: &NodeSelectorRequirement, labels: &Labels) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    let label = labels.get(&req.key);
    let number = label.and_then(|l| l.parse::<i64>().ok());
    let bound = match values {
        [bound] => bound.parse::<i64>().ok(),
        _ => None,
    };
    match (req.operator.as_str(), number.zip(bound)) {
        ("In", _) => !values.is_empty() && label.is_some_and(|l| values.contains(l)),
        ("NotIn", _) => !values.is_empty() && label.is_none_or(|l| !values.contains(l)),
        ("Exists", _) => values.is_empty() && label.is_some(),
        ("DoesNotExist", _) => values.is_empty() && label.is_none(),
        ("Gt", Some((number, bound))) => number > bound,
        ("Lt", Some((number, bound))) => number < bound,
        _ => false,
    }
}

/// A field requirement: `In` or `NotIn` with exactly one value; a node's only field is
/// `metadata.name`.
fn field_requirement_matches(req: &NodeSelectorRequirement, node_name: Option<&str>) -> bool {
    let field = node_name.filter(|_| req.key == "metadata.name");
    let values = req.values.as_deref().unwrap_or_default();
    match (req.operator.as_str(), values) {
        ("In", [value]) => field == Some(value.as_str()),
        ("NotIn", [value]) => field != Some(value.as_str()),
        _ => false,
    }
}

/// `MatchTopologySelectorTerms` for a class's `allowedTopologies`: no terms allow every node;
/// otherwise some non-empty term must label each of its keys with one of its values.
fn topology_matches(terms: &[TopologySelectorTerm], labels: &Labels) -> bool {
    terms.is_empty()
        || terms.iter().any(|term| {
            let expressions = term.match_label_expressions.as_deref().unwrap_or_default();
            !expressions.is_empty()
                && expressions
                    .iter()
                    .all(|e| labels.get(&e.key).is_some_and(|l| e.values.contains(l)))
        })
}

/// `Toleration.ToleratesTaint`: an empty effect or key matches any; `Exists` ignores the
/// value, `Equal` (the default) compares it.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    let key = toleration.key.as_deref().unwrap_or_default();
    let value = toleration.value.as_deref().unwrap_or_default();
    (effect.is_empty() || effect == taint.effect)
        && (key.is_empty() || key == taint.key)
        && match toleration.operator.as_deref().unwrap_or_default() {
            "Exists" => true,
            "" | "Equal" => value == taint.value.as_deref().unwrap_or_default(),
            _ => false,
        }
}

/// The first NoSchedule or NoExecute taint that no toleration tolerates, as TaintToleration
/// finds it; PreferNoSchedule only affects scoring.
fn untolerated_taint<'n>(taints: &'n [Taint], tolerations: &[Toleration]) -> Option<&'n Taint> {
    let mut blocking = taints
        .iter()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"));
    blocking.find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Whether VolumeBinding counts the claim as bound: `spec.volumeName` set and the PV
/// controller's bind-completed annotation present. A `Bound` phase is accepted as well, for
/// binders that only set that.
fn is_bound(claim: &PersistentVolumeClaim) -> bool {
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    volume_name(claim).is_some()
        && (annotation(&claim.metadata, BIND_COMPLETED).is_some() || phase == Some("Bound"))
}

/// `IsDelayBindingMode`: the claim's class (the beta annotation first) exists and binds
/// WaitForFirstConsumer. No class, or an unknown one, means Immediate.
fn delay_binding_class<'a>(
    claim: &PersistentVolumeClaim,
    cluster: &Cluster<'a>,
) -> Option<&'a StorageClass> {
    let spec_class = || claim.spec.as_ref()?.storage_class_name.as_deref();
    let class = annotation(&claim.metadata, BETA_CLASS)
        .or_else(spec_class)
        .filter(|c| !c.is_empty())?;
    let class = cluster
        .classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(class))?;
    (class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")).then_some(class)
}

/// VolumeRestrictions: a ReadWriteOncePod claim may be used by one scheduled, non-terminated
/// pod at a time.
fn rwop_in_use(claim: &PersistentVolumeClaim, pod: &Pod, cluster: &Cluster) -> bool {
    let modes = claim.spec.as_ref().and_then(|s| s.access_modes.as_deref());
    let (ns, claim_name) = (namespace(&claim.metadata), name(&claim.metadata));
    has_access_mode(modes.unwrap_or_default(), "ReadWriteOncePod")
        && cluster.pods.iter().any(|other| {
            !same_pod(other, pod)
                && !is_terminated(other)
                && node_name(other).is_some()
                && namespace(&other.metadata) == ns
                && claim_names(other).any(|c| c == claim_name)
        })
}

/// `isMultiAttachForbidden` for a PersistentVolume: access modes set, and neither
/// ReadWriteMany nor ReadOnlyMany among them.
fn attaches_to_one_node(pv: &PersistentVolume) -> bool {
    let modes = pv
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    !modes.is_empty()
        && !["ReadWriteMany", "ReadOnlyMany"]
            .iter()
            .any(|m| has_access_mode(modes, m))
}

/// Whether a pod's volumes are attached to its node: its kubelet got past
/// attaching (it has a pod IP, or it runs or ran). Attachments follow the
/// pods that hold them, so a pod that waits on another node never blocks
/// one next to the holder.
fn is_attached(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    phase.is_some_and(|p| p != "Pending") || status.and_then(|s| s.pod_ip.as_deref()).is_some()
}

fn age(meta: &ObjectMeta) -> (Option<&Time>, &str, &str) {
    (
        meta.creation_timestamp.as_ref(),
        namespace(meta),
        name(meta),
    )
}

/// The attach-detach reconciler's Multi-Attach event message for a pod of namespace `ns`.
fn multi_attach_message(volume: &str, ns: &str, users: &[&Pod]) -> String {
    let same_namespace = |p: &&&Pod| namespace(&p.metadata) == ns;
    let mut local: Vec<&str> = users
        .iter()
        .filter(same_namespace)
        .map(|p| name(&p.metadata))
        .collect();
    local.sort_unstable();
    let (others, local) = (users.len() - local.len(), local.join(", "));
    let detail = match others {
        0 => format!("Volume is already used by pod(s) {local}"),
        n if local.is_empty() => {
            format!("Volume is already used by {n} pod(s) in different namespaces")
        }
        n => format!(
            "Volume is already used by pod(s) {local} and {n} pod(s) in different namespaces"
        ),
    };
    format!("Multi-Attach error for volume \"{volume}\" {detail}")
}

fn uses_volume(pod: &Pod, volume: &str, cluster: &Cluster) -> bool {
    let ns = namespace(&pod.metadata);
    let mut claims = claim_names(pod).filter_map(|c| find_claim(cluster, ns, c));
    claims.any(|c| volume_name(c) == Some(volume))
}

fn has_access_mode(modes: &[String], mode: &str) -> bool {
    modes.iter().any(|m| m == mode)
}

fn claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    volumes
        .iter()
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.as_str()))
}

fn find_claim<'a>(
    cluster: &Cluster<'a>,
    ns: &str,
    claim: &str,
) -> Option<&'a PersistentVolumeClaim> {
    let mut claims = cluster.claims.iter();
    claims.find(|c| namespace(&c.metadata) == ns && name(&c.metadata) == claim)
}

fn find_volume<'a>(cluster: &Cluster<'a>, volume: &str) -> Option<&'a PersistentVolume> {
    cluster.volumes.iter().find(|v| name(&v.metadata) == volume)
}

fn volume_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .volume_name
        .as_deref()
        .filter(|v| !v.is_empty())
}

fn pods_on(cluster: &Cluster, node: &str) -> usize {
    let on_node = |p: &&Pod| node_name(p) == Some(node) && !is_terminated(p);
    cluster.pods.iter().filter(on_node).count()
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

fn is_terminated(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn same_pod(a: &Pod, b: &Pod) -> bool {
    namespace(&a.metadata) == namespace(&b.metadata) && name(&a.metadata) == name(&b.metadata)
}

fn annotation<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

#[cfg(test)]
mod tests;
