//! The README's first command works: the demo runs a real migration on the
//! local cluster and explains it.

use std::process::Command;

#[test]
fn the_demo_migrates_the_apps_claim_and_says_what_happened() {
    // The release's mover image (`cargo xtask test` builds it).
    let image = kube_sandbox::testkit::release_file("mover", ".oci.tar");
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
