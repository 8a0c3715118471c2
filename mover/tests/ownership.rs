//! Ownership where the destination refuses it: inside a user namespace, root
//! cannot give files to an unmapped id (as on NFS with root_squash). The
//! transfer still completes, the files keep the receiver's owner, and the
//! refusal is said once rather than failing every file.

mod common;

use std::process::Command;

use common::*;

#[test]
fn refused_chown_is_reported_once_and_the_transfer_completes() {
    if !is_root()
        || !Command::new("unshare")
            .args(["-r", "true"])
            .status()
            .is_ok_and(|s| s.success())
    {
        eprintln!("skipped: needs root and unprivileged user namespaces (unshare -r)");
        return;
    }
    let tmp = scratch();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    mkdirs(&src);
    for i in 0..3 {
        let f = src.join(format!("f{i}"));
        write_file(&f, b"data", 0o644);
        lchown(&f, 1234, 1234);
    }
    // A setuid program of another user must not become the receiver's.
    let suid = src.join("suid");
    write_file(&suid, b"#!", 0o755);
    lchown(&suid, 1234, 1234);
    set_mode(&suid, 0o6755);
    let out = Command::new("unshare")
        .arg("-r")
        .arg(MOVER)
        .arg("sync")
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("refuses to set owners").count(),
        1,
        "{stderr}"
    );
    for i in 0..3 {
        assert_eq!(std::fs::read(dst.join(format!("f{i}"))).unwrap(), b"data");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dst.join("suid"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "setuid/setgid dropped with the owner");
}
