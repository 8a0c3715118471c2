use super::rootfs::list_dir;
use super::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Instant;

const SUCCESS: Exit = Exit {
    code: 0,
    signal: None,
};

/// A temporary directory holding a container's scratch dir, its log and
/// the host side of its volumes.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::create_dir(dir.path().join("scratch")).expect("scratch dir");
        Fixture { dir }
    }

    /// A host directory (a volume's source) with the given files.
    fn volume(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let path = self.dir.path().join(name);
        fs::create_dir(&path).expect("volume dir");
        for (file, contents) in files {
            fs::write(path.join(file), contents).expect("volume file");
        }
        path
    }

    fn launch(&self, argv: &[&str]) -> Launch {
        Launch {
            argv: argv.iter().map(|arg| arg.to_string()).collect(),
            env: vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())],
            working_dir: None,
            mounts: Vec::new(),
            watched: Vec::new(),
            image_root: None,
            scratch_dir: self.dir.path().join("scratch"),
            log_path: self.dir.path().join("container.log"),
            identity: Identity::root(),
        }
    }

    /// `sh -c script`, with `data` mounted at `/data` when given.
    fn sh(&self, script: &str, data: Option<&Path>) -> Launch {
        let mut launch = self.launch(&["sh", "-c", script]);
        launch
            .mounts
            .extend(data.map(|host| mount(host, "/data", false)));
        launch
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("container.log")).unwrap_or_default()
    }

    /// Runs the container to its end: its exit and its whole log.
    async fn run(&self, launch: &Launch) -> (Exit, String) {
        let _ = fs::remove_file(self.dir.path().join("container.log"));
        let mut process = Process::spawn(launch).expect("spawn");
        let exit = tokio::time::timeout(Duration::from_secs(20), process.wait()).await;
        (exit.expect("the process exits"), self.log())
    }
}

fn mount(host: &Path, container: &str, read_only: bool) -> Mount {
    let container_path = PathBuf::from(container);
    Mount {
        host_path: host.to_owned(),
        container_path,
        read_only,
    }
}

/// Waits until `check` holds, for at most 10 s.
async fn until(mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: &str) -> bool {
    let stat = fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
    stat.is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

#[tokio::test]
async fn a_volume_is_read_and_written_through() {
    let fixture = Fixture::new();
    let data = fixture.volume("data", &[("in", "from the host\n")]);
    let launch = fixture.sh("cat /data/in && echo hello > /data/out", Some(&data));
    assert_eq!(
        fixture.run(&launch).await,
        (SUCCESS, "from the host\n".to_owned())
    );
    assert_eq!(
        fs::read_to_string(data.join("out")).expect("written"),
        "hello\n"
    );
}

#[tokio::test]
async fn read_only_volumes_and_the_image_refuse_writes() {
    let fixture = Fixture::new();
    let data = fixture.volume("data", &[]);
    // Writing the host name back unchanged is harmless if it succeeds.
    let script = "echo x > /data/f; echo y > /etc/ks-sandbox-test; mkdir /usr/ks-sandbox-test; \
                  read name < /proc/sys/kernel/hostname; echo $name > /proc/sys/kernel/hostname";
    let mut launch = fixture.sh(script, None);
    launch.mounts.push(mount(&data, "/data", true));
    let (exit, log) = fixture.run(&launch).await;
    assert_eq!(exit.code, 2, "{log}");
    assert_eq!(log.matches("Read-only file system").count(), 4, "{log}");
    assert_eq!(fs::read_dir(&data).expect("volume").count(), 0);
    assert!(!Path::new("/etc/ks-sandbox-test").exists());
}

#[tokio::test]
async fn a_file_is_mapped_where_the_host_has_nothing() {
    let fixture = Fixture::new();
    let bin = fixture.volume("bin", &[("mover", "#!/bin/sh\necho mover ran \"$@\"\n")]);
    fs::set_permissions(bin.join("mover"), fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = fixture.volume("data", &[("f", "seen\n")]);
    let listing = || ["/", "/usr", "/usr/local/bin", "/run"].map(|dir| list_dir(Path::new(dir)));
    let before = listing().map(|names| names.expect("listing"));

    let mut launch = fixture.launch(&["mover", "send"]);
    launch.mounts = vec![
        mount(&bin.join("mover"), "/usr/local/bin/mover", true),
        mount(&data, "/var/run/ks/data", false),
        mount(&data, "/new/data", false),
        // Shadows /usr, which holds the shadow of /usr/local/bin.
        mount(&data, "/usr/ks-new/data", false),
    ];
    assert_eq!(
        fixture.run(&launch).await,
        (SUCCESS, "mover ran send\n".to_owned())
    );

    // The shadowed /usr/local/bin shows the host's entries and the mover,
    // and /var/run -> /run led into the container's /run.
    let script = "ls -A /usr/local/bin; cat /run/ks/data/f /new/data/f /usr/ks-new/data/f";
    launch.argv = ["sh", "-c", script].map(String::from).to_vec();
    let mut expected: Vec<_> = before[2]
        .iter()
        .map(|name| name.to_string_lossy())
        .collect();
    expected.push("mover".into());
    expected.sort();
    let expected = format!("{}\nseen\nseen\nseen\n", expected.join("\n"));
    assert_eq!(fixture.run(&launch).await, (SUCCESS, expected));

    let after = listing().map(|names| names.expect("listing"));
    assert_eq!(before, after, "the host got no new entries");
}

#[tokio::test]
async fn tmp_is_the_containers_own() {
    let fixture = Fixture::new();
    let marker = format!("ks-sandbox-marker-{}", std::process::id());
    let launch = fixture.sh(&format!("ls -A /tmp; echo secret > /tmp/{marker}"), None);
    assert_eq!(fixture.run(&launch).await, (SUCCESS, String::new()));
    assert!(!Path::new("/tmp").join(&marker).exists());
    assert!(fixture
        .dir
        .path()
        .join("scratch/tmp")
        .join(&marker)
        .exists());
}

#[tokio::test]
async fn the_environment_is_only_what_was_given() {
    let fixture = Fixture::new();
    let mut launch = fixture.launch(&["/usr/bin/env"]);
    let pairs = [("A", "1"), ("B", "two words"), ("A", "3")];
    launch.env = pairs.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec();
    assert_eq!(
        fixture.run(&launch).await,
        (SUCCESS, "A=3\nB=two words\n".to_owned())
    );
}

#[tokio::test]
async fn exit_codes_and_signals_pass_through() {
    let fixture = Fixture::new();
    let (exit, _) = fixture.run(&fixture.sh("exit 7", None)).await;
    assert_eq!(
        exit,
        Exit {
            code: 7,
            signal: None
        }
    );
    let (exit, _) = fixture.run(&fixture.sh("kill -USR1 $$", None)).await;
    assert_eq!(
        exit,
        Exit {
            code: 128 + libc::SIGUSR1,
            signal: Some(libc::SIGUSR1)
        }
    );
}

/// The process status lines that say who a process is and what it may do.
const IDENTITY_LINES: &str =
    "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status";

#[tokio::test]
async fn a_non_root_process_has_its_ids_and_groups_and_no_capabilities_left() {
    let fixture = Fixture::new();
    let data = fixture.volume("data", &[]);
    let mut launch = fixture.sh(&format!("{IDENTITY_LINES}; touch /data/mine"), Some(&data));
    launch.identity = Identity {
        uid: 1000,
        gid: 2000,
        groups: vec![3000, 2000],
        capabilities: rustix::thread::CapabilitySet::NET_BIND_SERVICE,
        no_new_privs: true,
    };
    fs::set_permissions(&data, fs::Permissions::from_mode(0o777)).expect("chmod");
    let (exit, log) = fixture.run(&launch).await;
    assert_eq!(exit, SUCCESS, "{log}");
    // execve leaves a non-root process without capabilities unless they
    // are ambient; the bounding set still shows what it was given.
    assert_eq!(
        log,
        "Uid:\t1000\t1000\t1000\t1000\nGid:\t2000\t2000\t2000\t2000\nGroups:\t2000 3000 \n\
         CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
         CapBnd:\t0000000000000400\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
    );
    let meta = fs::metadata(data.join("mine")).expect("written");
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid()), (1000, 2000));
}

#[tokio::test]
async fn root_keeps_exactly_its_capabilities() {
    let fixture = Fixture::new();
    let (exit, log) = fixture.run(&fixture.sh(IDENTITY_LINES, None)).await;
    assert_eq!(exit, SUCCESS, "{log}");
    let line = |name: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(line("Uid:"), "\t0\t0\t0\t0");
    assert_eq!(line("Groups:"), "\t0 ");
    for set in ["CapPrm:", "CapEff:", "CapBnd:"] {
        assert_eq!(line(set), "\t00000000a80425fb", "{set} in {log}");
    }
    assert_eq!(line("CapInh:"), "\t0000000000000000");
    assert_eq!(line("NoNewPrivs:"), "\t0");
}

#[tokio::test]
async fn working_dir_and_nested_volumes() {
    let fixture = Fixture::new();
    let outer = fixture.volume("outer", &[]);
    fs::create_dir(outer.join("sub")).expect("sub dir");
    let inner = fixture.volume("inner", &[("f", "nested\n")]);
    let mut launch = fixture.sh("pwd; cat f", Some(&outer));
    launch.mounts.push(mount(&inner, "/data/./sub/", false));
    launch.working_dir = Some(PathBuf::from("/data/sub"));
    assert_eq!(
        fixture.run(&launch).await,
        (SUCCESS, "/data/sub\nnested\n".to_owned())
    );
}

#[tokio::test]
async fn stop_terminates_the_whole_group() {
    let fixture = Fixture::new();
    let data = fixture.volume("data", &[]);
    let launch = fixture.sh("sleep 1000 & echo $! > /data/pid; wait", Some(&data));
    let mut process = Process::spawn(&launch).expect("spawn");
    let pid_file = data.join("pid");
    until(|| fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n'))).await;
    let sleep = fs::read_to_string(&pid_file).expect("pid");
    assert!(alive(&sleep));
    let started = Instant::now();
    assert_eq!(
        process.stop(Duration::from_secs(30)).await,
        Exit::killed(libc::SIGTERM)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    until(|| !alive(&sleep)).await;
}

#[tokio::test]
async fn the_rest_of_the_group_dies_with_the_main_process() {
    let fixture = Fixture::new();
    let data = fixture.volume("data", &[]);
    let launch = fixture.sh("sleep 1000 & echo $! > /data/pid", Some(&data));
    assert_eq!(fixture.run(&launch).await.0, SUCCESS);
    let sleep = fs::read_to_string(data.join("pid")).expect("pid");
    until(|| !alive(&sleep)).await;
}

#[tokio::test]
async fn stop_kills_after_the_grace_period() {
    let fixture = Fixture::new();
    let script = "trap '' TERM; echo ready; while true; do sleep 0.1; done";
    let mut process = Process::spawn(&fixture.sh(script, None)).expect("spawn");
    until(|| fixture.log() == "ready\n").await;
    let started = Instant::now();
    let exit = process.stop(Duration::from_millis(300)).await;
    assert_eq!(
        exit,
        Exit {
            code: 137,
            signal: Some(libc::SIGKILL)
        }
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        process.stop(Duration::ZERO).await,
        exit,
        "stopping again says how it ended"
    );
}

#[test]
fn start_failures_say_what_failed() {
    let fixture = Fixture::new();
    let data = fixture.volume("data", &[("plain", "text"), ("garbage", "\x01\x02")]);
    let executable = fs::Permissions::from_mode(0o755);
    fs::set_permissions(data.join("garbage"), executable).expect("chmod");
    // The last one fails in the child, at `execve`.
    let cases = [
        (
            "no-such-command",
            r#"exec: "no-such-command": executable file not found in $PATH"#,
        ),
        (
            "/no/such/file",
            r#"exec: "/no/such/file": stat /no/such/file: no such file or directory"#,
        ),
        ("/data/plain", r#"exec: "/data/plain": permission denied"#),
        (
            "./garbage",
            r#"exec: "/data/garbage": Exec format error (os error 8)"#,
        ),
    ];
    for (command, message) in cases {
        let mut launch = fixture.launch(&[command]);
        launch.mounts.push(mount(&data, "/data", false));
        launch.working_dir = Some(PathBuf::from("/data"));
        let error = Process::spawn(&launch).expect_err(command);
        assert_eq!(
            (error.reason(), error.to_string().as_str()),
            ("RunContainerError", message)
        );
    }
}

#[test]
fn mount_points_are_not_created_in_volumes() {
    let fixture = Fixture::new();
    let (outer, inner) = (fixture.volume("outer", &[]), fixture.volume("inner", &[]));
    let mut launch = fixture.launch(&["true"]);
    launch.mounts = vec![
        mount(&outer, "/data", false),
        mount(&inner, "/data/sub", false),
    ];
    let error = Process::spawn(&launch).expect_err("no mount point");
    assert_eq!(error.reason(), "CreateContainerError");
    assert!(
        error.to_string().contains("does not exist in the volume"),
        "{error}"
    );
    assert_eq!(fs::read_dir(&outer).expect("volume").count(), 0);
    launch.mounts = vec![mount(&fixture.dir.path().join("nope"), "/data", false)];
    let error = Process::spawn(&launch).expect_err("no source");
    assert_eq!(error.reason(), "CreateContainerError");
}
