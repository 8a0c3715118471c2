//! The cutover's downtime, measured: a claim of `VOLMIG_BENCH_GIB` GiB
//! (default 1) in 4 MiB files, an app appending and syncing a sequence
//! on it, `migrate --cutover`. Prints the pre-copy rounds, the final sync
//! and the downtime volmig recorded, beside what a tool that stops the app
//! for the whole copy (pvmigrate, korb) would be down for: at least the
//! first round, the full copy. A benchmark, not a test of speed: it only
//! asserts that the move was right. Run it with tests/bench/cutover.sh.

mod common;

use std::io::Write;

use common::app::{
    assert_gapless, await_running, await_sequence_past, cutover, sequence, sequence_app, user_claim,
};
use common::{env, volume_dir};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

/// Writes `gib` GiB of incompressible data in 4 MiB files.
fn fill(dir: &std::path::Path, gib: usize) {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut chunk = vec![0u8; 4 << 20];
    for i in 0..gib * 256 {
        for word in chunk.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let sub = dir.join(format!("d{:02}", i % 16));
        std::fs::create_dir_all(&sub).expect("dir");
        let mut f = std::fs::File::create(sub.join(format!("f{i:05}.bin"))).expect("file");
        f.write_all(&chunk).expect("write");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: tests/bench/cutover.sh runs it"]
async fn cutover_downtime() {
    let gib: usize = std::env::var("VOLMIG_BENCH_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    let dir = user_claim(&client, &ns, "data").await;
    fill(&dir, gib);
    sequence_app(&client, &ns, "app", "data").await;
    await_sequence_past(&dir, 20).await;

    let started = std::time::Instant::now();
    let run = cutover(&env, &[], "data", &["-o", "json"]).await;
    let total = started.elapsed().as_secs_f64();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let vm = run.operation();
    let c = vm.status.cutover.clone().expect("cutover");
    await_running(&client, &ns, "app").await;
    let before = sequence(&dir);
    let new_dir = volume_dir(&client, &ns, "data").await;
    let after = await_sequence_past(&new_dir, before.len() + 5).await;
    assert_gapless(&after, "the new volume");
    assert_eq!(&after[..before.len()], &before[..]);

    let mut out = String::new();
    out += &format!(
        "cutover of a {gib} GiB claim ({} files of 4 MiB) with an app writing\n",
        gib * 256
    );
    for r in &c.rounds {
        out += &format!(
            "  pre-copy round {}: {:.1}s, {} file(s) sent\n",
            r.number, r.seconds, r.files_transferred
        );
    }
    out += &format!(
        "  final sync (app down, verified): {:.1}s\n",
        c.final_sync_seconds.unwrap_or_default()
    );
    out += &format!(
        "  downtime (first scale-down to Ready again): {:.1}s\n",
        c.downtime_seconds.unwrap_or_default()
    );
    out += &format!("  whole command: {total:.1}s\n");
    out += &format!(
        "  a tool that stops the app for the whole copy is down at least {:.1}s (round 1, the full copy)\n",
        c.rounds.first().map_or(0.0, |r| r.seconds)
    );
    // When each step began, from the Events' times (microseconds).
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let mut steps: Vec<(jiff::Timestamp, String)> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Cutover"))
        })
        .filter_map(|e| Some((e.event_time?.0, e.reason?)))
        .collect();
    steps.sort();
    if let Some(down) = c.quiesced_at {
        out += "  steps, from the first scale-down:\n";
        for (at, reason) in &steps {
            let s = at.duration_since(down).as_secs_f64();
            out += &format!("    {s:>6.2}s {reason}\n");
        }
    }
    mover::stdio::out(&out);
}
