//! Golden renders: whole screens compared with the text under
//! `tests/fixtures/tui/`. `VOLMIG_BLESS=1 cargo test` rewrites them after a
//! deliberate change (review the diff).

use std::path::PathBuf;

use super::*;
use crate::record::Progress;

/// `rendered` must be `tests/fixtures/tui/NAME.txt`.
fn golden(name: &str, rendered: &str) {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/fixtures/tui", name]
        .iter()
        .collect::<PathBuf>()
        .with_extension("txt");
    if std::env::var_os("VOLMIG_BLESS").is_some() {
        std::fs::write(&path, rendered).expect("golden written");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (VOLMIG_BLESS=1 writes it)", path.display()));
    assert!(
        want == rendered,
        "{name} differs from {}:\n--- want\n{want}--- got\n{rendered}",
        path.display()
    );
}

#[test]
fn list_of_all_namespaces_at_80x24() {
    golden("list-all-80x24", &render(&model(Scope::All, None), 80, 24));
}

#[test]
fn list_of_all_namespaces_at_120x30() {
    golden(
        "list-all-120x30",
        &render(&model(Scope::All, None), 120, 30),
    );
}

#[test]
fn list_of_one_namespace_at_80x24() {
    let model = model(Scope::Namespace("prod".to_string()), None);
    golden("list-prod-80x24", &render(&model, 80, 24));
}

#[test]
fn empty_list_says_how_to_start() {
    let mut model = Model::new(Scope::Namespace("prod".to_string()), None);
    model.update(Msg::Records(Vec::new()));
    let screen = render(&model, 80, 6);
    assert_eq!(
        screen,
        "\
0 operations in prod
No operations in namespace prod. Start one with kubectl volmig migrate
SOURCE_PVC


↑↓/jk move  Enter details  l logs  a abort  r resume  q quit
"
    );
}

#[test]
fn detail_of_three_attempts_at_80x24() {
    let model = model(Scope::Namespace("prod".to_string()), Some("data-x7k2p"));
    golden("detail-succeeded-80x24", &render(&model, 80, 24));
}

#[test]
fn detail_of_three_attempts_at_120x30() {
    let model = model(Scope::Namespace("prod".to_string()), Some("data-x7k2p"));
    golden("detail-succeeded-120x30", &render(&model, 120, 30));
}

#[test]
fn detail_of_a_failure_at_80x24() {
    let model = model(Scope::Namespace("prod".to_string()), Some("logs-q9z2c"));
    golden("detail-failed-80x24", &render(&model, 80, 24));
}

#[test]
fn detail_of_a_running_operation_with_live_logs_at_80x24() {
    let mut model = model(Scope::All, Some("pg-0-b4n7q"));
    model.update(Msg::LogTail {
        namespace: "staging".to_string(),
        op: "pg-0-b4n7q".to_string(),
        attempt: 1,
        lines: vec![
            "receiver: listening on 0.0.0.0:7000".to_string(),
            "sender: connected to volmig-pg-0-b4n7q-receiver-1:7000".to_string(),
            "receiver: 812 of 2044 files".to_string(),
        ],
    });
    golden("detail-running-80x24", &render(&model, 80, 24));
}

/// `cache-r2d4t` (attempt 2 running) as the monitor sees it once the
/// cluster has spoken: the receiver's latest progress event, and the node
/// the scheduler put the sender on.
fn retrying_live() -> Model {
    let mut model = Model::new(
        Scope::Namespace("prod".to_string()),
        Some("cache-r2d4t".to_string()),
    );
    model.update(Msg::Tick(now()));
    model.update(Msg::Records(vec![retrying()]));
    model.update(Msg::Progress {
        namespace: "prod".to_string(),
        op: "cache-r2d4t".to_string(),
        attempt: 2,
        progress: Progress {
            bytes_done: 9_663_676_416,
            bytes_total: 17_179_869_184,
            files_done: 512,
            files_total: 800,
            listing_done: true,
            rate: 52_428_800,
            eta_seconds: Some(143),
            current: Some("blobs/7f/3a91".to_string()),
            updated: Some("2025-03-01T11:59:58Z".parse().expect("timestamp")),
        },
    });
    model.update(retrying_scheduled());
    model
}

#[test]
fn detail_of_a_running_second_attempt_at_80x24() {
    let screen = render(&retrying_live(), 80, 24);
    // The header and the running attempt's row say the same bytes (the
    // record has 0 for attempt 2), and the row has the sender's node (the
    // record has none yet).
    assert!(
        screen.contains("            9.0 GiB of 16.0 GiB, 512 of 800 files, 50.0 MiB/s"),
        "{screen}"
    );
    let row = |n: &str| {
        screen
            .lines()
            .find(|l| l.starts_with(n))
            .unwrap_or_else(|| panic!("no row {n:?} in\n{screen}"))
    };
    let running = row("2 Running ");
    assert!(running.contains(" node-2 "), "{running}");
    assert!(running.contains(" 9.0GiB 50.0MiB/s"), "{running}");
    // The failed attempt keeps what the record says of it.
    let failed = row("1 Failed ");
    assert!(failed.contains(" node-1 "), "{failed}");
    assert!(failed.contains(" 6.0GiB 30.0MiB/s"), "{failed}");
    golden("detail-retrying-80x24", &screen);
}

#[test]
fn abort_confirmation_over_the_list() {
    let mut model = model(Scope::All, None);
    model.update(key(KeyCode::End));
    model.update(char('a'));
    golden("confirm-abort-80x24", &render(&model, 80, 24));
}

#[test]
fn live_progress_shows_in_the_row() {
    let mut model = model(Scope::All, None);
    let row = |model: &Model| {
        render(model, 120, 30)
            .lines()
            .find(|l| l.contains("pg-0-b4n7q"))
            .map(str::to_string)
            .expect("a row for pg-0-b4n7q")
    };
    assert!(row(&model).contains(" 42% "), "{}", row(&model));
    model.update(Msg::Progress {
        namespace: "staging".to_string(),
        op: "pg-0-b4n7q".to_string(),
        attempt: 1,
        progress: Progress {
            bytes_done: 40_265_318_400,
            bytes_total: 53_687_091_200,
            listing_done: true,
            rate: 104_857_600,
            eta_seconds: Some(128),
            updated: Some("2025-03-01T11:59:59Z".parse().expect("timestamp")),
            ..Progress::default()
        },
    });
    let row = row(&model);
    assert!(row.contains(" 75% "), "{row}");
    assert!(row.contains("100.0MiB/s"), "{row}");
    assert!(row.contains("2m7s"), "{row}");
}

#[test]
fn tiny_terminals_render_without_panicking() {
    let mut list = model(Scope::All, None);
    let mut detail = model(Scope::All, Some("data-x7k2p"));
    detail.update(Msg::Notice(
        "a notice longer than the terminal is wide".to_string(),
    ));
    let mut logs = model(Scope::All, None);
    logs.update(char('l'));
    let mut confirm = model(Scope::All, None);
    confirm.update(key(KeyCode::End));
    confirm.update(char('a'));
    list.update(key(KeyCode::End));
    for model in [&list, &detail, &logs, &confirm] {
        for (width, height) in [(20, 5), (1, 1), (80, 1), (3, 24), (0, 0), (10, 3)] {
            let screen = render(model, width, height);
            assert_eq!(screen.lines().count(), usize::from(height));
        }
    }
    assert!(
        render(&list, 20, 5).contains("NAME"),
        "{}",
        render(&list, 20, 5)
    );
}

#[test]
fn the_logs_screen_scrolls_back_to_the_oldest_line() {
    let mut model = model(Scope::All, None);
    let lines: Vec<String> = (1..=40).map(|i| format!("receiver: line {i}")).collect();
    model.update(Msg::FullLogs {
        namespace: "prod".to_string(),
        op: "data-x7k2p".to_string(),
        lines,
    });
    model.update(char('l'));
    let following = render(&model, 40, 12);
    assert!(
        following.contains("line 40") && !following.contains("line 31"),
        "{following}"
    );
    model.update(key(KeyCode::Home));
    let top = render(&model, 40, 12);
    assert!(top.contains("line 1\n") || top.contains("line 1 "), "{top}");
    assert!(!top.contains("line 40"), "{top}");
}

/// A set's claims stand indented under a row of the set, which sums their
/// bytes and says how many claims it has; the selection stays on claims.
#[test]
fn a_sets_claims_stand_under_the_sets_row() {
    let in_set = |mut vm: VolumeMigration, key: u32| {
        vm.metadata.group = Some(crate::record::group::GroupRef {
            name: "db-x7k2p".into(),
            namespace: "prod".into(),
            key,
        });
        vm
    };
    let (a, b) = (in_set(succeeded(), 0), in_set(running(), 1));
    let mut model = Model::new(Scope::All, None);
    model.update(Msg::Tick(now()));
    model.update(Msg::Records(vec![a, b, failed()]));
    let screen = render(&model, 120, 10);
    let lines: Vec<&str> = screen.lines().collect();
    let row = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no row with {needle}:\n{screen}"))
    };
    let set = row(" db-x7k2p ");
    assert!(lines[set].contains("Running"), "{}", lines[set]);
    assert!(lines[set].contains("2 claims"), "{}", lines[set]);
    // Each claim's row, found by its claims, is below it and indented.
    for (claims, name) in [
        ("data → data-fast", "  data-x7"),
        ("db/pg-0 → pg-0", "  pg-0-b4"),
    ] {
        let at = row(claims);
        assert!(at > set && lines[at].contains(name), "{}", lines[at]);
    }
    let first = row("data → data-fast");
    assert!(
        lines[first].starts_with("> "),
        "the first claim is selected:\n{screen}"
    );
}
