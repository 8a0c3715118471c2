//! A rehome for people and for tools: `status OP`'s view, the rows of
//! `status`'s list, `--dry-run`'s plan (each PV before and after, every
//! object changed), and the object `-o json|yaml` prints.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolume;
use serde_json::{json, Value};

use super::format::{age, columns};
use crate::plan::rehome::affinity;
use crate::record::rehome::{Rehome, VolumeRehome, API_VERSION, KIND};

/// `status OP` of a rehome.
pub fn describe(r: &Rehome, now: Timestamp) -> String {
    let s = &r.status;
    let mut rows = vec![
        vec!["Name:".into(), r.metadata.name.clone()],
        vec!["Namespace:".into(), r.metadata.namespace.clone()],
        vec![
            "Kind:".into(),
            "rehome (no data moves; each PV made again)".into(),
        ],
        vec!["To:".into(), r.spec.target.to_string()],
        vec!["Phase:".into(), s.phase.as_str().into()],
        vec!["Step:".into(), s.step.as_str().into()],
    ];
    if let Some(pool) = &r.spec.pool {
        rows.push(vec!["Pool:".into(), pool.clone()]);
    }
    if let Some(node) = &r.spec.from_node {
        rows.push(vec!["From node:".into(), node.clone()]);
    }
    if let Some(d) = s.driver.as_ref() {
        rows.push(vec![
            "Driven by:".into(),
            format!(
                "{} (heartbeat {} ago)",
                d.holder,
                age(Some(d.heartbeat), now)
            ),
        ]);
    }
    if let Some(down) = r.downtime(now) {
        let still = s.restored_at.is_none() && s.quiesced_at.is_some();
        let text = format!(
            "{down:.1}s{}",
            if still { " (the app is down)" } else { "" }
        );
        rows.push(vec!["Downtime:".into(), text]);
    }
    if let Some(rb) = &s.rollback {
        rows.push(vec![
            "Rollback:".into(),
            format!("from {}: {}", rb.from.as_str(), rb.reason),
        ]);
    }
    if let Some(m) = &s.message {
        rows.push(vec!["Message:".into(), m.clone()]);
    }
    let mut out = columns(&rows);
    out.push_str("Volumes:\n");
    let mut table = vec![vec![
        "  VOLUME".to_string(),
        "CLAIM".into(),
        "FROM".into(),
        "TO".into(),
        "POLICY".into(),
        "LAST CHANGE".into(),
    ]];
    for v in &s.volumes {
        table.push(vec![
            format!("  {}", v.name),
            v.claim
                .as_ref()
                .map_or("<none>".into(), ToString::to_string),
            pinned(&v.original),
            pinned(&v.rehomed),
            v.policy.clone(),
            v.change
                .as_deref()
                .map_or("-", |c| {
                    c.strip_suffix(&format!(" {}", v.name)).unwrap_or(c)
                })
                .to_string(),
        ]);
    }
    out.push_str(&columns(&table));
    let objects: Vec<String> = s
        .volumes
        .iter()
        .flat_map(|v| v.driver_objects.iter())
        .map(|o| {
            let fields: Vec<String> = o
                .fields
                .iter()
                .map(|f| {
                    format!(
                        "{} {} → {}",
                        f.dotted(),
                        f.old.as_deref().unwrap_or("<unset>"),
                        f.new
                    )
                })
                .collect();
            format!("  {}: {}\n", o.describe(), fields.join(", "))
        })
        .collect();
    if !objects.is_empty() {
        out.push_str("Driver objects:\n");
        out.push_str(&objects.concat());
    }
    if !s.stops.is_empty() {
        out.push_str("Stopped:\n");
        for stop in &s.stops {
            out.push_str(&format!(
                "  {:?} {}/{} ({} replica(s))\n",
                stop.target.kind, stop.namespace, stop.target.name, stop.target.replicas
            ));
        }
    }
    out
}

/// The values a PV's required node affinity pins it to: `node-1`,
/// `openebs.io/nodeid=pool-a`.
pub fn pinned(pv: &PersistentVolume) -> String {
    let Some(required) = affinity(pv) else {
        return "<unpinned>".into();
    };
    let mut parts = Vec::new();
    for term in &required.node_selector_terms {
        for r in term
            .match_expressions
            .iter()
            .flatten()
            .filter(|r| r.operator == "In")
        {
            let values = r.values.clone().unwrap_or_default().join("|");
            parts.push(match r.key.as_str() {
                crate::plan::placement::HOSTNAME_LABEL => values,
                key => format!("{key}={values}"),
            });
        }
    }
    parts.dedup();
    parts.join(",")
}

/// `--dry-run`: what would change, in order.
pub fn dry_run(r: &Rehome) -> String {
    let mut out = format!(
        "rehome to {} (dry run: nothing is changed)\n",
        r.spec.target
    );
    for stop in &r.status.stops {
        out.push_str(&format!(
            "  scale {:?} {}/{} from {} to 0, and back once every volume is rehomed\n",
            stop.target.kind, stop.namespace, stop.target.name, stop.target.replicas
        ));
    }
    for v in &r.status.volumes {
        out.push_str(&volume_steps(v));
    }
    for v in &r.status.volumes {
        out.push_str(&format!("\n# persistentvolume {} before\n", v.name));
        out.push_str(&yaml(&v.original));
        out.push_str(&format!("# persistentvolume {} after\n", v.name));
        out.push_str(&yaml(&finally(v)));
    }
    out
}

fn volume_steps(v: &VolumeRehome) -> String {
    let mut out = format!(
        "persistentvolume {} ({} → {}):\n",
        v.name,
        pinned(&v.original),
        pinned(&v.rehomed)
    );
    if v.policy != "Retain" {
        out.push_str(&format!(
            "  set Retain (it is {}; put back at the end)\n",
            v.policy
        ));
    }
    if let Some(c) = &v.claim {
        out.push_str(&format!(
            "  delete claim {c} (the data stays: the volume is Retain)\n"
        ));
    }
    out.push_str("  delete the persistentvolume and create it again with the new node affinity\n");
    for o in &v.driver_objects {
        for f in &o.fields {
            out.push_str(&format!(
                "  set {} {} from {} to {}\n",
                o.describe(),
                f.dotted(),
                f.old.as_deref().unwrap_or("<unset>"),
                f.new
            ));
        }
    }
    if let Some(c) = &v.claim {
        out.push_str(&format!("  create claim {c} again, bound to {}\n", v.name));
    }
    if v.policy != "Retain" {
        out.push_str(&format!("  set {} again\n", v.policy));
    }
    out
}

/// The PV as it ends: created Retain, its own policy put back.
fn finally(v: &VolumeRehome) -> PersistentVolume {
    let mut pv = v.rehomed.clone();
    if let Some(spec) = pv.spec.as_mut() {
        spec.persistent_volume_reclaim_policy = Some(v.policy.clone());
    }
    pv
}

fn yaml(pv: &PersistentVolume) -> String {
    serde_saphyr::to_string(pv).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
}

/// `--dry-run -o json|yaml`: a `VolumeRehomePlan` listing each volume
/// before and after and every object changed.
pub fn dry_run_object(r: &Rehome) -> Value {
    let volumes: Vec<Value> = r
        .status
        .volumes
        .iter()
        .map(|v| {
            json!({
                "name": v.name,
                "claim": v.claim,
                "policy": v.policy,
                "before": v.original,
                "after": finally(v),
                "driverObjects": v.driver_objects,
            })
        })
        .collect();
    json!({
        "apiVersion": API_VERSION,
        "kind": "VolumeRehomePlan",
        "spec": r.spec,
        "stops": r.status.stops,
        "volumes": volumes,
    })
}

/// The record as `-o json|yaml` prints it.
pub fn object(r: &Rehome) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": r.metadata,
        "spec": r.spec,
        "status": r.status,
    })
}

/// `status`'s rows of rehomes (NAMESPACE with `-A`, NAME, TO, STEP,
/// PHASE, VOLUMES, AGE), after the migrations' table.
pub fn table(rehomes: &[Rehome], now: Timestamp, all_namespaces: bool) -> String {
    let mut header = vec![
        "REHOME".to_string(),
        "TO".into(),
        "STEP".into(),
        "PHASE".into(),
        "VOLUMES".into(),
        "AGE".into(),
    ];
    if all_namespaces {
        header.insert(0, "NAMESPACE".into());
    }
    let mut rows = vec![header];
    for r in rehomes {
        let mut row = vec![
            r.metadata.name.clone(),
            r.spec.target.to_string(),
            r.status.step.as_str().into(),
            r.status.phase.as_str().into(),
            r.spec.volumes.len().to_string(),
            age(r.metadata.creation_timestamp, now),
        ];
        if all_namespaces {
            row.insert(0, r.metadata.namespace.clone());
        }
        rows.push(row);
    }
    columns(&rows)
}
