//! The README's first command works: the demo runs a real migration on the
//! local cluster and explains it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The release's mover image (`cargo xtask test` builds it into
/// `VOLMIG_DIST`; else `cargo xtask dist --out target/xtask-dist`).
fn release_mover_image() -> PathBuf {
    let dir = std::env::var_os("VOLMIG_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
            target.join("xtask-dist")
        });
    let path = dir.join(format!(
        "mover_v{}_linux_amd64.oci.tar",
        env!("CARGO_PKG_VERSION")
    ));
    assert!(
        path.is_file(),
        "no release image at {}: run the tests with `cargo xtask test` (it builds one)",
        path.display()
    );
    path
}

#[test]
fn the_demo_migrates_the_apps_claim_and_says_what_happened() {
    let image = release_mover_image();
    let out = Command::new(env!("CARGO_BIN_EXE_volmig-demo"))
        .arg("--mover-image-archive")
        .arg(&image)
        .output()
        .expect("volmig-demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    let text = format!("{stdout}{stderr}");
    let from_image = format!("runs the image {}", image.display());
    for want in [
        "What happened",
        "node-2",
        "identical",
        "Succeeded",
        &from_image,
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}
