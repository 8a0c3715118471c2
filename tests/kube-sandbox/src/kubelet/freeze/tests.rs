use super::*;
use crate::kubelet::runtime::{Identity, Mount, DEFAULT_PATH};

/// `sh -c script` with `volume` at `/data`, its scratch dir and log in
/// `dir`.
fn sh(dir: &Path, volume: &Path, script: &str) -> Launch {
    let scratch_dir = dir.join("scratch");
    std::fs::create_dir_all(&scratch_dir).expect("scratch dir");
    Launch {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())],
        working_dir: None,
        mounts: vec![Mount {
            host_path: volume.to_path_buf(),
            container_path: "/data".into(),
            read_only: false,
        }],
        watched: Vec::new(),
        image_root: None,
        scratch_dir,
        log_path: dir.join("log"),
        identity: Identity::root(),
    }
}

/// Appends to `f`, and runs `mv` (which `sh` starts with `vfork`).
const WRITER: &str = "while true; do echo x >> /data/f; echo x > /data/t; mv /data/t /data/u; done";

fn size(file: &Path) -> u64 {
    std::fs::metadata(file).map_or(0, |m| m.len())
}

/// Waits until `check` holds, for at most 10 s.
async fn until(mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_volume_has_no_writer_until_thawed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).expect("volume");
    let file = volume.join("f");
    let freezer = Freezer::default();
    let (mut process, registration) = freezer
        .spawn(&sh(dir.path(), &volume, WRITER))
        .await
        .expect("spawn");
    until(|| size(&file) > 0).await;
    let freezing = Instant::now();
    let frozen = freezer.freeze(&volume);
    assert!(freezing.elapsed() < SETTLE / 2, "waited for a vfork parent");
    assert_eq!(frozen.groups(), 1);
    let pid = i32::try_from(process.pid()).expect("pid");
    let (state, group) = stat(Path::new(&format!("/proc/{pid}/stat"))).expect("stat");
    assert_eq!(group, pid);
    // Stopped, or (the signal caught it between `vfork` and the child's
    // `execve`) waiting for its stopped child, which the freezer counts as
    // halted: it runs nothing until the child goes on.
    let task = PathBuf::from(format!("/proc/{pid}/task/{pid}"));
    assert!(halted(state, &task), "the shell runs: state {state}");
    let before = size(&file);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(size(&file), before, "written while frozen");
    // A freeze of another directory stops nothing.
    let other = freezer.freeze(dir.path().join("scratch").as_path());
    assert_eq!(other.groups(), 0);
    drop(other);
    drop(frozen);
    until(|| size(&file) > before).await;
    process.kill().await;
    drop(registration);
    assert!(freezer.lock().groups.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_starts_on_a_frozen_volume_only_once_thawed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).expect("volume");
    let freezer = Freezer::default();
    let launch = sh(dir.path(), &volume, WRITER);
    let frozen = freezer.freeze(&volume);
    // Given up while waiting: nothing started, nothing left behind.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), freezer.spawn(&launch)).await;
    assert!(gave_up.is_err());
    assert!(freezer.lock().starting.is_empty());
    let waiting = freezer.spawn(&launch);
    tokio::pin!(waiting);
    let early = tokio::time::timeout(Duration::from_millis(200), &mut waiting).await;
    assert!(early.is_err(), "started while frozen");
    assert!(!volume.join("f").exists());
    drop(frozen);
    let started = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    let (mut process, _registration) = started.expect("started once thawed").expect("spawn");
    until(|| size(&volume.join("f")) > 0).await;
    process.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nested_freezes_continue_at_the_last_thaw() {
    let dir = tempfile::tempdir().expect("temp dir");
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(volume.join("sub")).expect("volume");
    let file = volume.join("f");
    let freezer = Freezer::default();
    let (mut process, _registration) = freezer
        .spawn(&sh(dir.path(), &volume, WRITER))
        .await
        .expect("spawn");
    until(|| size(&file) > 0).await;
    let whole = freezer.freeze(&volume);
    // A directory in a mounted volume freezes its writers too.
    let part = freezer.freeze(&volume.join("sub"));
    assert_eq!((whole.groups(), part.groups()), (1, 1));
    drop(whole);
    let before = size(&file);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(size(&file), before, "continued by the first thaw");
    drop(part);
    until(|| size(&file) > before).await;
    process.kill().await;
}

#[test]
fn paths_touch_when_one_is_in_the_other() {
    let mounts = [PathBuf::from("/d/volumes/pv-1/sub")];
    assert!(touches(&mounts, Path::new("/d/volumes/pv-1")));
    assert!(touches(&mounts, Path::new("/d/volumes/pv-1/sub/deeper")));
    assert!(!touches(&mounts, Path::new("/d/volumes/pv-10")));
    assert!(!touches(&mounts, Path::new("/d/volumes/pv-1/other")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_mapping_is_frozen_with_its_image() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (volume, scratch) = (dir.path().join("volume"), dir.path().join("other"));
    std::fs::create_dir_all(&volume).expect("volume");
    std::fs::create_dir_all(&scratch).expect("scratch");
    let image = volume.join("disk.img");
    std::fs::write(&image, b"").expect("image");
    // The container maps the image through a device: no mount of the
    // volume, only the image watched.
    let mut launch = sh(dir.path(), &scratch, "while true; do sleep 0.01; done");
    launch.watched = vec![image.clone()];
    let freezer = Freezer::default();
    let (mut process, registration) = freezer.spawn(&launch).await.expect("spawn");
    let frozen = freezer.freeze(&volume);
    assert_eq!(frozen.groups(), 1, "the image's volume stops its mapper");
    drop(frozen);
    process.kill().await;
    drop(registration);
}
