//! Several claims in one operation, measured: `VOLMIG_BENCH_CLAIMS` claims
//! (default 8) of `VOLMIG_BENCH_MIB` MiB each (default 256, in 4 MiB files
//! of incompressible data), copied by one `migrate` with `--parallel 1`,
//! then again into another namespace with `--parallel 4`, beside `rsync -a`
//! of the same trees one after the other on this machine. A benchmark, not
//! a test of speed: it only asserts that every copy is identical. Run it
//! with tests/bench/many.sh.

mod common;

use std::time::Instant;

use common::{claim, env, fill_incompressible, manifest, object, volume_dir};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: tests/bench/many.sh runs it"]
async fn many_claims_parallel_1_and_4() {
    let var = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (claims, mib) = (var("VOLMIG_BENCH_CLAIMS", 8), var("VOLMIG_BENCH_MIB", 256));
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let names: Vec<String> = (0..claims).map(|i| format!("vol{i}")).collect();
    let mut sources = Vec::new();
    for (i, name) in names.iter().enumerate() {
        claim(&client, &ns, name, "ReadWriteOnce", "1Gi").await;
        let dir = volume_dir(&client, &ns, name).await;
        fill_incompressible(&dir, mib, i as u64);
        sources.push(dir);
    }
    let mut out = format!("{claims} claims of {mib} MiB (4 MiB files, incompressible)\n");
    for parallel in ["1", "4"] {
        let to = format!("parallel-{parallel}");
        let made: Namespace = object(json!({"metadata": {"name": to}}));
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &made)
            .await
            .expect("namespace");
        let mut args = vec!["migrate"];
        args.extend(names.iter().map(String::as_str));
        args.extend(["--to-namespace", &to, "--parallel", parallel, "-o", "json"]);
        let started = Instant::now();
        let run = common::volmig(&env, &args).await;
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(run.code, 0, "{}", run.stderr);
        for (name, src) in names.iter().zip(&sources) {
            let dst = volume_dir(&client, &to, name).await;
            assert_eq!(
                manifest(&dst),
                manifest(src),
                "{name} with --parallel {parallel}"
            );
        }
        let total = (claims * mib) as f64;
        out += &format!(
            "  volmig --parallel {parallel}: {seconds:.1}s ({:.0} MiB/s)\n",
            total / seconds
        );
    }
    let scratch = tempfile::tempdir().expect("scratch");
    let started = Instant::now();
    for (i, src) in sources.iter().enumerate() {
        let dst = scratch.path().join(format!("vol{i}"));
        let status = std::process::Command::new("rsync")
            .arg("-a")
            .arg(format!("{}/", src.display()))
            .arg(&dst)
            .status()
            .expect("rsync runs");
        assert!(status.success());
    }
    let seconds = started.elapsed().as_secs_f64();
    out += &format!(
        "  rsync -a, one tree after the other, local disk to disk: {seconds:.1}s ({:.0} MiB/s)\n",
        (claims * mib) as f64 / seconds
    );
    mover::stdio::out(&out);
}
