use serde_json::json;

use super::binding::{check_volume_satisfies_claim, find_best_match};
use super::reclaim::under_tmp;
use super::*;

fn claim(extra: Value) -> Value {
    let mut c = json!({"metadata": {"namespace": "ns", "name": "data", "uid": "u1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
            "resources": {"requests": {"storage": "1Gi"}}}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c["spec"][k] = v.clone();
    }
    c
}

fn volume(name: &str, size: &str, modes: Value, extra: Value) -> Value {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": modes, "storageClassName": "fast"},
        "status": {"phase": "Available"}});
    for (k, val) in extra.as_object().into_iter().flatten() {
        v["spec"][k] = val.clone();
    }
    v
}

fn best(claim: &Value, volumes: &[Value], delay: bool) -> Option<String> {
    find_best_match(claim, volumes, None, delay)
        .expect("match")
        .map(|v| name_of(v).1.to_string())
}

#[test]
fn the_smallest_volume_of_the_fewest_access_modes_wins() {
    let rwo = json!(["ReadWriteOnce"]);
    let both = json!(["ReadWriteOnce", "ReadWriteMany"]);
    let volumes = [
        volume("big-rwo", "5Gi", rwo.clone(), json!({})),
        volume("small-both", "1Gi", both, json!({})),
        volume("mid-rwo", "2Gi", rwo.clone(), json!({})),
        volume("tiny-rwo", "500Mi", rwo, json!({})),
    ];
    assert_eq!(
        best(&claim(json!({})), &volumes, false).as_deref(),
        Some("mid-rwo")
    );
    let many = claim(json!({"accessModes": ["ReadWriteMany"]}));
    assert_eq!(best(&many, &volumes, false).as_deref(), Some("small-both"));
}

#[test]
fn a_pre_bound_volume_wins_whatever_its_class_phase_or_delay() {
    let mut pre = volume(
        "pre",
        "5Gi",
        json!(["ReadWriteOnce"]),
        json!({"storageClassName": "other", "claimRef": {"namespace": "ns", "name": "data"}}),
    );
    pre["status"]["phase"] = json!("Released");
    let volumes = [
        volume("free", "1Gi", json!(["ReadWriteOnce"]), json!({})),
        pre,
    ];
    assert_eq!(
        best(&claim(json!({})), &volumes, false).as_deref(),
        Some("pre")
    );
    assert_eq!(
        best(&claim(json!({})), &volumes, true).as_deref(),
        Some("pre")
    );
    // Another claim's reservation is no match, nor another uid.
    let other = claim(json!({}));
    let mut taken = volumes.clone();
    taken[1]["spec"]["claimRef"]["uid"] = json!("u2");
    assert_eq!(best(&other, &taken, false).as_deref(), Some("free"));
    assert_eq!(best(&other, &taken, true), None);
}

#[test]
fn selectors_and_node_affinity_filter_unbound_volumes() {
    let mut gold = volume("gold", "2Gi", json!(["ReadWriteOnce"]), json!({}));
    gold["metadata"]["labels"] = json!({"tier": "gold"});
    let pinned = volume(
        "pinned",
        "1Gi",
        json!(["ReadWriteOnce"]),
        json!({"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}),
    );
    let volumes = [gold, pinned];
    let picky = claim(json!({"selector": {"matchLabels": {"tier": "gold"}}}));
    assert_eq!(best(&picky, &volumes, false).as_deref(), Some("gold"));
    let node = |n: &str| Labels::from([("kubernetes.io/hostname".into(), n.into())]);
    let on = |n: &str| {
        find_best_match(&claim(json!({})), &volumes, Some(&node(n)), true)
            .expect("match")
            .map(|v| name_of(v).1.to_string())
    };
    assert_eq!(on("node-1").as_deref(), Some("pinned"));
    assert_eq!(on("node-2").as_deref(), Some("gold"));
}

#[test]
fn requested_volumes_are_checked_as_kubernetes_does() {
    let small = volume("small", "1Gi", json!(["ReadWriteOnce"]), json!({}));
    let check = |c: &Value, v: &Value| check_volume_satisfies_claim(v, c).err();
    assert_eq!(check(&claim(json!({})), &small), None);
    let big = claim(json!({"resources": {"requests": {"storage": "2Gi"}}}));
    assert_eq!(
        check(&big, &small).as_deref(),
        Some("requested PV is too small")
    );
    let block = claim(json!({"volumeMode": "Block"}));
    assert_eq!(
        check(&block, &small).as_deref(),
        Some("incompatible volumeMode")
    );
    let many = claim(json!({"accessModes": ["ReadWriteMany"]}));
    assert_eq!(
        check(&many, &small).as_deref(),
        Some("incompatible accessMode")
    );
    let classless = claim(json!({"storageClassName": ""}));
    assert_eq!(
        check(&classless, &small).as_deref(),
        Some("storageClassName does not match")
    );
    let mut doomed = small.clone();
    doomed["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    assert_eq!(
        check(&claim(json!({})), &doomed).as_deref(),
        Some("the volume is marked for deletion \"small\"")
    );
}

#[test]
fn the_host_path_deleter_takes_paths_under_tmp() {
    assert!(under_tmp("/tmp/x"));
    assert!(under_tmp("/var/tmp/x"));
    assert!(!under_tmp("/tmp/"));
    assert!(!under_tmp("/tmpfoo/x"));
    assert!(!under_tmp("/data/x"));
}
