//! `kubectl volmig monitor` in a real terminal (tmux) during a running
//! migration: the progress it shows grows, with the phase and the attempt.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{claim, env, seed, volume_dir, wait_until, MOVER_IMAGE};

const MIB: u64 = 1024 * 1024;

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The percentage on the row of operation `op`, if the pane shows it.
fn percent(pane: &str, op: &str) -> Option<u32> {
    let row = pane.lines().find(|l| l.contains(op))?;
    let end = row.find('%')?;
    let digits: String = row[..end]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// Ends the tmux session however the test ends.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.0]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_monitor_shows_a_running_migration_move() {
    let env = env().await;
    let client = env.client().await;
    let ns = env.namespace.clone();
    claim(&client, &ns, "data", "ReadWriteOnce", "1Gi").await;
    seed(&volume_dir(&client, &ns, "data").await, 12, MIB as usize);
    let args = [
        "migrate",
        "data",
        "--mover-image",
        MOVER_IMAGE,
        "--bwlimit",
        "1M",
        "-o",
        "json",
    ];
    let (child, op) = common::start_moving(&env, &client, &args, 1).await;

    let name = format!("volmig-monitor-{}", std::process::id());
    let command = format!(
        "{} --kubeconfig {} -n {ns} monitor",
        common::volmig_binary().display(),
        env.kubeconfig.display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &name,
        // The smallest terminal it is made for.
        "-x",
        "80",
        "-y",
        "24",
        &command,
    ]);
    let session = Session(name);
    let capture = || tmux(&["capture-pane", "-p", "-t", &session.0]);
    let first = wait_until("the monitor's first row", || async {
        let pane = capture();
        percent(&pane, &op).map(|p| (p, pane))
    })
    .await;
    // The same row, a few seconds of copying later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = wait_until("progress to grow", || async {
        let pane = capture();
        percent(&pane, &op)
            .filter(|p| *p > first.0)
            .map(|p| (p, pane))
    })
    .await;
    for (_, pane) in [&first, &second] {
        let row = pane.lines().find(|l| l.contains(&op)).expect("row");
        assert!(row.contains("Running") && row.contains("1/7"), "{pane}");
        assert!(pane.contains("q quit"), "no help line:\n{pane}");
    }
    // Details, then quit: the terminal is given back.
    tmux(&["send-keys", "-t", &session.0, "Enter"]);
    wait_until("the detail view", || async {
        let pane = capture();
        (pane.contains("Attempts") && pane.contains("Sender")).then_some(())
    })
    .await;
    tmux(&["send-keys", "-t", &session.0, "q"]);
    wait_until("the monitor to quit", || async {
        let alive = Command::new("tmux")
            .args(["has-session", "-t", &session.0])
            .status()
            .is_ok_and(|s| s.success());
        (!alive).then_some(())
    })
    .await;

    let run = common::finish(child).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
}
