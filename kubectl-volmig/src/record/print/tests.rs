//! Golden tests: whole rendered strings from the fixture records, at a fixed
//! `now`.

use super::*;

fn fixture(yaml: &str) -> VolumeMigration {
    serde_saphyr::from_str(yaml).expect("fixture parses")
}

fn succeeded() -> VolumeMigration {
    fixture(include_str!(
        "../../../tests/fixtures/record/succeeded.yaml"
    ))
}

fn running() -> VolumeMigration {
    fixture(include_str!("../../../tests/fixtures/record/running.yaml"))
}

fn failed() -> VolumeMigration {
    fixture(include_str!("../../../tests/fixtures/record/failed.yaml"))
}

fn now() -> Timestamp {
    "2025-03-01T12:00:00Z".parse().expect("timestamp")
}

#[test]
fn table_reads_like_kubectl_get() {
    let ops = [failed(), succeeded(), running()];
    assert_eq!(
        table(&ops, now(), false),
        "\
NAME         SOURCE    DESTINATION   PHASE       PROGRESS               ATTEMPTS   AGE
logs-q9z2c   logs      logs-small    Failed      24% 1000.0MiB/4.0GiB   1/7        2d3h
data-x7k2p   data      data-fast     Succeeded   100% 2.9GiB/2.9GiB     3/7        120m
pg-0-b4n7q   db/pg-0   pg-0          Running     42% 21.0GiB/50.0GiB    1/4        5m
"
    );
}

#[test]
fn all_namespaces_table_leads_with_the_namespace() {
    let mut pending = running();
    pending.metadata.name = "new-op".into();
    pending.status.progress = None;
    pending.status.attempts.clear();
    pending.metadata.creation_timestamp = None;
    let ops = [succeeded(), pending];
    assert_eq!(
        table(&ops, now(), true),
        "\
NAMESPACE   NAME         SOURCE    DESTINATION   PHASE       PROGRESS             ATTEMPTS   AGE
prod        data-x7k2p   data      data-fast     Succeeded   100% 2.9GiB/2.9GiB   3/7        120m
staging     new-op       db/pg-0   pg-0          Running     -                    0/4        <unknown>
"
    );
}

#[test]
fn no_operations_is_said_in_words() {
    assert_eq!(
        empty_message(Some("prod")),
        "No operations found in namespace prod."
    );
    assert_eq!(empty_message(None), "No operations found.");
}

#[test]
fn describe_a_success_after_two_failed_attempts() {
    assert_eq!(
        describe(&succeeded(), now()),
        "\
Name:          data-x7k2p
Namespace:     prod
Created:       2025-03-01T10:00:00Z (120m ago)
Phase:         Succeeded
Message:       copied and verified after 3 attempts
Source:        prod/data (volume pvc-1a2b3c, class standard, 10Gi, used by web-0)
Destination:   prod/data-fast (class fast, 20Gi, created by volmig)
Progress:      100% (2.9 GiB of 2.9 GiB), 1532 of 1532 files, 10.2 MiB/s
Placement:
  Sender:      node-2 (the app pod web-0 mounts the ReadWriteOnce claim on node-2)
  Receiver:    any node (the scheduler chooses; the new volume is provisioned where the receiver runs)
Attempts:      3 of 7
  #   PHASE       SENDER NODE   EXIT S/R   STARTED    ELAPSED   FROM EARLIER   BYTES    RATE        REASON
  1   Failed      node-2        137/10     119m ago   5m12s     0B             1.2GiB   3.9MiB/s    sender killed (exit 137); receiver: connection reset
  2   Failed      node-2        137/10     114m ago   2m35s     1.2GiB         2.0GiB   5.3MiB/s    sender killed (exit 137); receiver: connection reset
  3   Succeeded   node-2        0/0        111m ago   1m30s     2.0GiB         2.9GiB   10.2MiB/s   -
Elapsed:       9m17s (started 2025-03-01T10:00:05Z, completed 2025-03-01T10:09:52Z)
Summary:       1544 entries, 1532 files, 2.9 GiB
  Transferred: 410 files (921.6 MiB literal, 0 B matched, 488.3 MiB on the wire)
  Up to date:  1122 files
  Deleted:     0
  Verified:    1544 entries (BLAKE3)
  Manifest:    blake3:9f2c4e1a7b3d5f60
Driver:        none
Log tail (attempt 3):
    receiver: resuming attempt 3 from checkpoint: 2.0 GiB done
    sender: 1532 files, 2.9 GiB, verified 1544 entries
"
    );
}

#[test]
fn describe_a_running_operation_with_its_driver() {
    assert_eq!(
        describe(&running(), now()),
        "\
Name:          pg-0-b4n7q
Namespace:     staging
Created:       2025-03-01T11:55:00Z (5m ago)
Phase:         Running
Source:        db/pg-0 (volume pvc-77aa, no class, 50Gi)
Destination:   staging/pg-0 (the default class, 50Gi, created by volmig)
Progress:      42% (21.0 GiB of 50.0 GiB), 812 of 2044 files, 74.2 MiB/s, ETA 6m40s
  Current:     base/16384/2619
Placement:
  Sender:      any node (the claim is not in use; the scheduler chooses)
  Receiver:    node-3 (--to-node node-3)
Attempts:      1 of 4
  #   PHASE     SENDER NODE   EXIT S/R   STARTED     ELAPSED   FROM EARLIER   BYTES     RATE        REASON
  1   Running   node-1        -/-        4m50s ago   4m50s     0B             21.0GiB   74.2MiB/s   -
Elapsed:       4m50s (started 2025-03-01T11:55:10Z)
Driver:        laptop-7/4242 (heartbeat 3s ago)
"
    );
    // The same driver, silent for a minute, is reported gone.
    let later = "2025-03-01T12:01:00Z".parse().expect("timestamp");
    assert!(describe(&running(), later)
        .contains("Driver:        laptop-7/4242 (gone: last heartbeat 63s ago)\n"));
}

#[test]
fn describe_an_operation_driven_in_the_cluster() {
    let mut vm = running();
    let driver = vm.status.driver.as_mut().expect("driver");
    driver.holder = "pod/volmig-pg-0-b4n7q-driver-x2k9p".into();
    vm.status.in_cluster = Some(crate::record::InCluster {
        job: "volmig-pg-0-b4n7q-driver".into(),
        image: "ghcr.io/volmig/driver:0.1.0".into(),
        namespaces: vec!["staging".into(), "db".into()],
        started_by: "laptop-7/4242 (user alice)".into(),
        started_at: "2025-03-01T11:55:00Z".parse().expect("timestamp"),
    });
    let out = describe(&vm, now());
    assert!(
        out.ends_with(
            "Driver:        pod/volmig-pg-0-b4n7q-driver-x2k9p (heartbeat 3s ago)\n\
             In cluster:    Job volmig-pg-0-b4n7q-driver (ghcr.io/volmig/driver:0.1.0), detached by \
             laptop-7/4242 (user alice) 5m ago; its log: kubectl volmig logs pg-0-b4n7q --driver\n"
        ),
        "{out}"
    );
}

#[test]
fn a_running_attempt_s_row_reads_the_progress_line() {
    // Attempt 2 runs without a driver: its own copy says 0 bytes.
    let vm = fixture(include_str!("../../../tests/fixtures/record/retrying.yaml"));
    assert_eq!(vm.status.attempts[1].bytes_done, 0);
    let out = describe(&vm, now());
    assert!(
        out.contains("Progress:      37% (6.0 GiB of 16.0 GiB), 310 of 800 files, 30.0 MiB/s"),
        "{out}"
    );
    let row = |n: &str| {
        let row = out.lines().find(|l| l.starts_with(&format!("  {n}   ")));
        row.unwrap_or_else(|| panic!("no attempt {n} in\n{out}"))
    };
    assert!(row("2").contains("   6.0GiB   30.0MiB/s   -"), "{out}");
    // An ended attempt keeps its own figures.
    assert!(
        row("1").contains("   6.0GiB   30.0MiB/s   sender killed"),
        "{out}"
    );
}

#[test]
fn describe_a_failure_no_retry_can_fix() {
    assert_eq!(
        describe(&failed(), now()),
        "\
Name:          logs-q9z2c
Namespace:     prod
Created:       2025-02-27T09:00:00Z (2d3h ago)
Phase:         Failed
Message:       the destination is full (ENOSPC): retrying cannot help; use a larger --size
Source:        prod/logs (volume pvc-5e5e, class standard, 5Gi)
Destination:   prod/logs-small (class standard, 1Gi, created by volmig)
Progress:      24% (1000.0 MiB of 4.0 GiB), 20 of 96 files, 23.8 MiB/s
Placement:
  Sender:      any node (the claim is not in use; the scheduler chooses)
  Receiver:    any node (the scheduler chooses; the new volume is provisioned where the receiver runs)
Attempts:      1 of 7
  #   PHASE    SENDER NODE   EXIT S/R   STARTED    ELAPSED   FROM EARLIER   BYTES       RATE        REASON
  1   Failed   node-3        1/12       2d2h ago   42s       0B             1000.0MiB   23.8MiB/s   receiver exited 12: no space left on device
Elapsed:       42s (started 2025-02-27T09:00:04Z, completed 2025-02-27T09:00:46Z)
Driver:        none
Log tail (attempt 1):
    receiver: writing app/2025-02-26.log
    receiver: error: No space left on device (os error 28)
"
    );
}

#[test]
fn replaced_attempts_do_not_count_against_the_limit() {
    let mut vm = running();
    let mut replaced = vm.status.attempts[0].clone();
    replaced.phase = crate::record::AttemptPhase::Replaced;
    vm.status.attempts.insert(0, replaced);
    assert!(table(&[vm.clone()], now(), false).contains("   1/4   "));
    assert!(
        describe(&vm, now()).contains("Attempts:      1 of 4 (and 1 replaced to follow the app)\n")
    );
}

#[test]
fn json_lists_are_shaped_like_kubectl_lists() {
    let ops = [succeeded(), running()];
    let json = to_json(&ops, false).expect("json");
    assert!(
        json.starts_with("{\n    \"apiVersion\": \"v1\",\n"),
        "{json}"
    );
    assert!(json.ends_with("}\n"));
    let list: serde_json::Value = serde_json::from_str(&json).expect("parses");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["metadata"], serde_json::json!({"resourceVersion": ""}));
    let items: Vec<VolumeMigration> =
        serde_json::from_value(list["items"].clone()).expect("items are records");
    assert_eq!(items, ops);
    // No operations: an empty list, as kubectl prints.
    let empty: serde_json::Value =
        serde_json::from_str(&to_json(&[], false).expect("json")).expect("parses");
    assert_eq!(empty["items"], serde_json::json!([]));
}

#[test]
fn a_single_operation_prints_as_itself() {
    let vm = failed();
    let json = to_json(std::slice::from_ref(&vm), true).expect("json");
    let back: VolumeMigration = serde_json::from_str(&json).expect("parses");
    assert_eq!(back, vm);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&json).expect("parses")["kind"],
        "VolumeMigration"
    );
    let yaml = to_yaml(std::slice::from_ref(&vm), true).expect("yaml");
    assert!(yaml.starts_with("apiVersion: volmig.io/v1alpha1\nkind: VolumeMigration\n"));
    let back: VolumeMigration = serde_saphyr::from_str(&yaml).expect("parses");
    assert_eq!(back, vm);
}

#[test]
fn yaml_lists_round_trip() {
    let ops = [failed(), running()];
    let yaml = to_yaml(&ops, false).expect("yaml");
    assert!(yaml.starts_with("apiVersion: v1\nitems:\n"), "{yaml}");
    assert!(
        yaml.ends_with("kind: List\nmetadata:\n  resourceVersion: \"\"\n"),
        "{yaml}"
    );
    let value: serde_json::Value = serde_saphyr::from_str(&yaml).expect("parses");
    let items: Vec<VolumeMigration> =
        serde_json::from_value(value["items"].clone()).expect("items are records");
    assert_eq!(items, ops);
}

#[test]
fn a_running_attempt_s_time_counts_up_with_no_driver_writing_it() {
    // Detached: nothing wrote the attempt's or the operation's time.
    let mut vm = running();
    vm.status.driver = None;
    vm.status.elapsed_seconds = 0.0;
    vm.status.attempts[0].elapsed_seconds = 0.0;
    let out = describe(&vm, now());
    assert!(
        out.contains("  1   Running   node-1        -/-        4m50s ago   4m50s   "),
        "{out}"
    );
    assert!(out.contains("Elapsed:       4m50s (started "), "{out}");
}

#[test]
fn a_resumed_operation_counts_attempts_against_its_fresh_budget() {
    // Failed after attempts 1-3 (backoff limit 2); resume ran attempt 4.
    let mut vm = failed();
    vm.spec.retry.backoff_limit = 2;
    let first = vm.status.attempts[0].clone();
    vm.status.attempts = (1..=4)
        .map(|number| crate::record::Attempt {
            number,
            ..first.clone()
        })
        .collect();
    vm.status.budget_from = Some(4);
    assert!(
        describe(&vm, now()).contains("Attempts:      1 of 3 since resume (4 in all)\n"),
        "{}",
        describe(&vm, now())
    );
    assert!(table(&[vm], now(), false).contains("   1/3   "));
}

#[test]
fn what_changed_during_the_copy_is_named_with_what_to_do() {
    let s = crate::record::Summary {
        changed: 3,
        changed_paths: vec!["a.txt".into(), "db/wal".into()],
        ..crate::record::Summary::default()
    };
    assert_eq!(
        super::describe::changed_text(&s),
        "3 entries changed during the copy (a.txt, db/wal and 1 more): the destination holds \
         the version sent; stop the application and run migrate again with --reuse (only the \
         differences move)"
    );
}

#[test]
fn a_cutover_reads_as_its_step_rounds_and_downtime() {
    use crate::record::cutover::{CutoverStatus, Round, Step};
    let at = |s: i64| Timestamp::from_second(1_780_000_000 + s).expect("time");
    let mut c = CutoverStatus {
        step: Step::FinalSync,
        rounds: vec![
            Round {
                number: 1,
                seconds: 41.5,
                ..Round::default()
            },
            Round {
                number: 2,
                seconds: 3.25,
                ..Round::default()
            },
        ],
        quiesced_at: Some(at(0)),
        ..CutoverStatus::default()
    };
    assert_eq!(
        cutover_line(&c, at(7)),
        "step FinalSync, 2 pre-copy round(s), the last 3.2s, down for 7s so far"
    );
    c.step = Step::AwaitingCommit;
    c.final_sync_seconds = Some(2.0);
    c.restored_at = Some(at(4));
    assert_eq!(
        cutover_line(&c, at(600)),
        "step AwaitingCommit, 2 pre-copy round(s), the last 3.2s, final sync 2.0s, downtime 4.0s"
    );
    let mut vm = running();
    vm.status.cutover = Some(c);
    let table = table(&[vm], now(), false);
    assert!(table.contains("Running (AwaitingCommit)"), "{table}");
}

#[test]
fn attempts_that_read_a_snapshot_say_so_and_how_long_it_took() {
    use crate::plan::{Method, SourceMethod};
    use crate::record::SourceCopy;
    let mut vm = succeeded();
    vm.status.source_method = Some(SourceMethod {
        method: Method::Snapshot,
        snapshot_class: Some("csi-snapclass".into()),
        read_class: Some("csi".into()),
        reason: "the ReadWriteOncePod source is in use by pod db-0".into(),
    });
    let asked: Timestamp = "2025-03-01T11:00:00Z".parse().expect("timestamp");
    vm.status.attempts[0].source = Some(SourceCopy {
        method: Method::Snapshot,
        snapshot: Some("volmig-data-x-snap-1".into()),
        claim: "volmig-data-x-read-1".into(),
        requested_at: Some(asked),
        ready_at: Some(asked + jiff::SignedDuration::from_millis(2500)),
        ..SourceCopy::default()
    });
    let text = describe(&vm, now());
    assert!(
        text.contains("Reads:")
            && text.contains("snapshot (the ReadWriteOncePod source is in use by pod db-0)"),
        "{text}"
    );
    assert!(text.contains("READ"), "{text}");
    assert!(text.contains("snapshot, ready in 2.5s"), "{text}");
    // Attempts without a copy show a dash in that column; a record without
    // copies has no such column.
    assert!(!describe(&succeeded(), now()).contains("READ"));
}
