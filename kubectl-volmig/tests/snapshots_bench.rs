//! Snapshot and clone sources, measured: one claim of the sandbox's CSI
//! class holding `VOLMIG_BENCH_MIB` MiB (default 512, in 4 MiB files of
//! incompressible data) copied to the `standard` class three times, with
//! `--copy-method direct`, `snapshot` and `clone`, beside `rsync -a` of the
//! same tree on this machine. For the copies that read a copy of the
//! source, the time until it was ready is from the record. A benchmark,
//! not a test of speed: it only asserts that every copy is identical. Run
//! it with tests/bench/snapshots.sh.

mod common;

use std::time::Instant;

use common::{env, fill_incompressible, manifest, records, volume_dir};

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: tests/bench/snapshots.sh runs it"]
async fn direct_snapshot_and_clone_copies() {
    let mib: usize = std::env::var("VOLMIG_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let src = common::csi_claim(&client, &ns, "data", "ReadWriteOnce", "2Gi").await;
    fill_incompressible(&src, mib, 7);
    let source = manifest(&src);

    let mut out =
        format!("one claim of {mib} MiB (4 MiB files, incompressible), csi -> standard\n");
    for method in ["direct", "snapshot", "clone"] {
        let to = format!("copy-{method}");
        let args = [
            "migrate",
            "data",
            "--to",
            &to,
            "--to-storage-class",
            "standard",
            "--copy-method",
            method,
        ];
        let started = Instant::now();
        let run = common::volmig(&env, &args).await;
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(
            manifest(&volume_dir(&client, &ns, &to).await),
            source,
            "{method}"
        );
        let vm = records(&client, &ns)
            .await
            .into_iter()
            .find(|r| r.spec.destination.name == to)
            .expect("its record");
        let ready = vm.status.attempts[0].source.as_ref().and_then(|c| {
            let took = c.ready_at?.duration_since(c.requested_at?);
            Some(format!(
                "; the copy of the source ready after {:.1}s",
                took.as_secs_f64()
            ))
        });
        out += &format!(
            "  volmig --copy-method {method:<8}: {seconds:5.1}s ({:.0} MiB/s){}\n",
            mib as f64 / seconds,
            ready.unwrap_or_default()
        );
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let started = Instant::now();
    let status = std::process::Command::new("rsync")
        .arg("-a")
        .arg(format!("{}/", src.display()))
        .arg(scratch.path().join("copy"))
        .status()
        .expect("rsync runs");
    assert!(status.success());
    let seconds = started.elapsed().as_secs_f64();
    out += &format!(
        "  rsync -a, local disk to disk   : {seconds:5.1}s ({:.0} MiB/s)\n",
        mib as f64 / seconds
    );
    mover::stdio::out(&out);
}
