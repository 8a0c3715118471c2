//! Which Pod Security profile the mover pods meet, and as whom they run.
//!
//! `baseline` movers run as root with the few capabilities each side needs,
//! so every file is read and every owner kept. A namespace that enforces
//! `restricted` (or OpenShift's `restricted-v2` SCC) refuses them; there
//! the movers run as the app's own user and groups, with no capability:
//! they read what the app can read, and what they write gets the identity
//! the app would have given it. The identity comes from the pods that mount
//! the claim, else from the namespace's OpenShift UID range, else from
//! `--run-as`.
//!
//! Pure: no I/O.

use k8s_openapi::api::core::v1::{Namespace, Pod, PodSecurityContext, SecurityContext};
use serde::{Deserialize, Serialize};

use super::Refusal;
use crate::spec::{RunAs, SecurityMode};

/// The Pod Security admission label a namespace enforces with.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// OpenShift's per-namespace UID range, `FIRST/SIZE`.
pub const UID_RANGE_ANNOTATION: &str = "openshift.io/sa.scc.uid-range";
/// OpenShift's per-namespace supplemental group range, `FIRST/SIZE`.
pub const GROUPS_ANNOTATION: &str = "openshift.io/sa.scc.supplemental-groups";

/// The profile the mover pods are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Profile {
    #[default]
    Baseline,
    Restricted,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Baseline => "baseline",
            Profile::Restricted => "restricted",
        }
    }
}

/// The movers' security, as planned and recorded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoverSecurity {
    pub profile: Profile,
    /// Why this profile, in words.
    pub reason: String,
    /// Restricted: who the movers run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
}

impl MoverSecurity {
    /// Whom restricted movers run as; `None` for baseline movers.
    pub fn restricted_identity(&self) -> Option<&Identity> {
        self.identity
            .as_ref()
            .filter(|_| self.profile == Profile::Restricted)
    }
}

/// A user and groups to run as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub uid: i64,
    /// `None`: the image's (the app's image said none either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<i64>,
    /// The app's pod-level fsGroup: the group its volume is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    /// Where it comes from, in words.
    pub from: String,
}

impl Identity {
    /// `uid 1000, gid 2000, fsGroup 2000 (from pod app-7d9, container app)`.
    pub fn describe(&self) -> String {
        let mut out = format!("uid {}", self.uid);
        if let Some(gid) = self.gid {
            out += &format!(", gid {gid}");
        }
        if let Some(fs) = self.fs_group {
            out += &format!(", fsGroup {fs}");
        }
        if !self.supplemental_groups.is_empty() {
            let groups: Vec<String> = self
                .supplemental_groups
                .iter()
                .map(i64::to_string)
                .collect();
            out += &format!(", groups {}", groups.join(","));
        }
        format!("{out} ({})", self.from)
    }
}

/// What the cluster says about OpenShift, when it is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenShift {
    /// Whether the user may `use` the `privileged` SCC (which admits
    /// baseline movers); `None` when that could not be asked.
    pub privileged_scc: Option<bool>,
}

/// The namespace `name` enforces `restricted`, by its label.
fn enforces_restricted(ns: &Namespace) -> bool {
    let labels = ns.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(ENFORCE_LABEL))
        .is_some_and(|v| v == "restricted")
}

fn name_of(ns: &Namespace) -> &str {
    ns.metadata.name.as_deref().unwrap_or_default()
}

/// The profile for `mode`, given the movers' namespaces (the source's and
/// the destination's) and whether the cluster is OpenShift.
pub fn profile(
    mode: SecurityMode,
    namespaces: &[&Namespace],
    openshift: Option<OpenShift>,
) -> Result<(Profile, String), Refusal> {
    let restricted = namespaces.iter().find(|ns| enforces_restricted(ns));
    match (mode, restricted, openshift) {
        (SecurityMode::Baseline, Some(ns), _) => Err(Refusal::BaselineForbidden {
            namespace: name_of(ns).to_string(),
            label: format!("{ENFORCE_LABEL}=restricted"),
        }),
        (SecurityMode::Baseline, None, Some(OpenShift { privileged_scc })) => {
            match privileged_scc {
                Some(true) => Ok((
                    Profile::Baseline,
                    "--security baseline (you may use the privileged SCC)".to_string(),
                )),
                Some(false) => Err(Refusal::SccForbidsBaseline { checked: true }),
                None => Err(Refusal::SccForbidsBaseline { checked: false }),
            }
        }
        (SecurityMode::Baseline, None, None) => {
            Ok((Profile::Baseline, "--security baseline".to_string()))
        }
        (_, Some(ns), _) => Ok((
            Profile::Restricted,
            format!(
                "namespace {} enforces it ({ENFORCE_LABEL}=restricted)",
                name_of(ns)
            ),
        )),
        (SecurityMode::Restricted, None, _) => {
            Ok((Profile::Restricted, "--security restricted".to_string()))
        }
        (SecurityMode::Auto, None, Some(_)) => Ok((
            Profile::Restricted,
            "OpenShift: its default SCC, restricted-v2, admits no root pod".to_string(),
        )),
        (SecurityMode::Auto, None, None) => Ok((
            Profile::Baseline,
            "no mover namespace enforces restricted".to_string(),
        )),
    }
}

/// Who restricted movers of `claim` (in `namespace`) run as: the identity
/// of a pod that mounts it (the first by name whose user is known), else
/// the namespace's OpenShift ranges, else `--run-as`.
pub fn identity(
    claim: &str,
    namespace: &Namespace,
    pods: &[Pod],
    run_as: Option<RunAs>,
) -> Result<Identity, Refusal> {
    let mut users: Vec<&Pod> = pods.iter().filter(|p| mounts(p, claim)).collect();
    users.sort_by_key(|p| p.metadata.name.clone());
    let found = users
        .iter()
        .find_map(|p| of_pod(p, claim))
        .or_else(|| of_openshift(namespace))
        .or_else(|| {
            run_as.map(|r| Identity {
                uid: r.uid,
                gid: r.gid,
                fs_group: None,
                supplemental_groups: Vec::new(),
                from: "--run-as".to_string(),
            })
        });
    match found {
        Some(id) if id.uid == 0 => Err(Refusal::RootApp {
            namespace: name_of(namespace).to_string(),
            claim: claim.to_string(),
            from: id.from,
        }),
        Some(id) => Ok(id),
        None => Err(Refusal::NoMoverIdentity {
            namespace: name_of(namespace).to_string(),
            claim: claim.to_string(),
            unknown_users: users
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect(),
        }),
    }
}

/// Whether `pod` mounts `claim` (and has not ended).
fn mounts(pod: &Pod, claim: &str) -> bool {
    let ended = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| matches!(p, "Succeeded" | "Failed"));
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    !ended
        && volumes.into_iter().flatten().any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == claim)
        })
}

/// The identity of the container of `pod` that mounts or maps `claim`: its
/// securityContext over the pod's; `None` when its user is not said (the
/// image's, which only the image knows).
fn of_pod(pod: &Pod, claim: &str) -> Option<Identity> {
    let spec = pod.spec.as_ref()?;
    let volume = spec.volumes.iter().flatten().find_map(|v| {
        let c = v.persistent_volume_claim.as_ref()?;
        (c.claim_name == claim).then_some(v.name.as_str())
    })?;
    // Mounted (Filesystem) or mapped (Block).
    let container = spec.containers.iter().find(|c| {
        c.volume_mounts.iter().flatten().any(|m| m.name == volume)
            || c.volume_devices.iter().flatten().any(|d| d.name == volume)
    })?;
    let pod_level = spec.security_context.clone().unwrap_or_default();
    let own = container.security_context.clone().unwrap_or_default();
    let pick = |c: &SecurityContext, p: &PodSecurityContext| {
        (
            c.run_as_user.or(p.run_as_user),
            c.run_as_group.or(p.run_as_group),
        )
    };
    let (uid, gid) = pick(&own, &pod_level);
    Some(Identity {
        uid: uid?,
        gid,
        fs_group: pod_level.fs_group,
        supplemental_groups: pod_level.supplemental_groups.unwrap_or_default(),
        from: format!(
            "pod {}, container {}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            container.name
        ),
    })
}

/// The first uid of the namespace's OpenShift range, and its first
/// supplemental group as the volume's group (what OpenShift's
/// restricted-v2 SCC gives a pod that says nothing).
fn of_openshift(ns: &Namespace) -> Option<Identity> {
    let annotations = ns.metadata.annotations.as_ref()?;
    let first = |key: &str| -> Option<i64> {
        let range = annotations.get(key)?;
        let first = range.split(['/', '-']).next()?;
        first.trim().parse().ok()
    };
    let uid = first(UID_RANGE_ANNOTATION)?;
    let group = first(GROUPS_ANNOTATION);
    Some(Identity {
        uid,
        gid: None,
        fs_group: group,
        supplemental_groups: Vec::new(),
        from: format!("namespace {}'s {UID_RANGE_ANNOTATION}", name_of(ns)),
    })
}

/// The profile and identity for `mode`, as planned.
pub fn plan(
    mode: SecurityMode,
    claim: &str,
    source_ns: &Namespace,
    destination_ns: &Namespace,
    pods: &[Pod],
    openshift: Option<OpenShift>,
    run_as: Option<RunAs>,
) -> Result<MoverSecurity, Refusal> {
    let (profile, reason) = profile(mode, &[source_ns, destination_ns], openshift)?;
    let identity = match profile {
        Profile::Baseline => None,
        Profile::Restricted => Some(identity(claim, source_ns, pods, run_as)?),
    };
    Ok(MoverSecurity {
        profile,
        reason,
        identity,
    })
}
