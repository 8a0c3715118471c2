//! Copies into another cluster, measured: one claim of `VOLMIG_BENCH_MIB`
//! MiB (default 1024, 4 MiB files of incompressible data) copied within
//! one cluster, then into a second cluster over each network path, on
//! loopback. Printed: the whole command's time and the attempt's own rate
//! (from its start to its end, as the record has them). A benchmark, not a
//! test of speed: it only asserts that every copy is identical. Run it
//! with tests/bench/clusters.sh.

mod common;

use std::time::Instant;

use common::clusters::Pair;
use volmig::record::VolumeMigration;

/// `(whole command seconds, attempt seconds)` of a finished operation.
fn seconds(vm: &VolumeMigration, whole: f64) -> (f64, f64) {
    let attempt = vm.status.attempts.last().expect("an attempt");
    let took = match (attempt.start_time, attempt.end_time) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => attempt.elapsed_seconds,
    };
    (whole, took)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: tests/bench/clusters.sh runs it"]
async fn one_gib_over_each_network_path() {
    let mib: usize = std::env::var("VOLMIG_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let pair = Pair::start(true).await;
    let src = pair.src.client().await;
    common::claim(&src, "default", "data", "ReadWriteOnce", "4Gi").await;
    let dir = common::volume_dir(&src, "default", "data").await;
    common::fill_incompressible(&dir, mib, 11);
    let want = common::manifest(&dir);

    let mut out = format!("one claim of {mib} MiB (4 MiB files, incompressible), loopback\n");
    let mut runs: Vec<(String, Vec<&str>, bool)> = vec![(
        "in one cluster (ClusterIP)".into(),
        vec!["migrate", "data", "--to", "copy"],
        false,
    )];
    for network in ["loadbalancer", "nodeport", "tunnel"] {
        runs.push((
            format!("into another, {network}"),
            vec![
                "migrate",
                "data",
                "--to",
                network,
                "--to-context",
                "dst",
                "--network",
                network,
            ],
            true,
        ));
    }
    for (what, mut args, across) in runs {
        args.extend(["--mover-image", common::MOVER_IMAGE, "-o", "json"]);
        let started = Instant::now();
        let run = pair.volmig(&args).await;
        let whole = started.elapsed().as_secs_f64();
        assert_eq!(run.code, 0, "{what}: {}\n{}", run.stderr, run.stdout);
        let vm = run.operation();
        let (client, to) = match across {
            true => (pair.dst.client().await, vm.spec.destination.name.clone()),
            false => (src.clone(), "copy".to_string()),
        };
        let copied = common::manifest(&common::volume_dir(&client, "default", &to).await);
        assert_eq!(copied, want, "{what}");
        let (whole, attempt) = seconds(&vm, whole);
        out += &format!(
            "  {what:<32}: {whole:5.1}s command, {attempt:5.1}s attempt, {:4.0} MiB/s\n",
            mib as f64 / attempt
        );
    }
    print!("{out}");
}
