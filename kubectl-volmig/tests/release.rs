//! The released plugin on a cluster: the static binary from the archive
//! `cargo xtask dist` builds, not the test build.

mod common;

use std::process::Command;

use common::*;

/// A static glibc binary cannot use glibc's resolver: the plugin resolves
/// the API server's name itself. The sandbox's kubeconfig names
/// `127.0.0.1`; here it names `localhost`, which only a resolver turns
/// into an address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_plugin_reaches_an_api_server_by_name() {
    let env = env().await;
    if env.sandbox.is_none() {
        eprintln!("skipped on an external cluster: its kubeconfig is its own");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = release_plugin(dir.path());
    let kubeconfig = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    assert!(kubeconfig.contains("127.0.0.1"), "{kubeconfig}");
    let by_name = dir.path().join("kubeconfig");
    std::fs::write(&by_name, kubeconfig.replace("127.0.0.1", "localhost")).expect("write");

    let status = |kubeconfig: &std::path::Path| {
        Command::new(&plugin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["status", "-o", "json"])
            .output()
            .expect("the plugin runs")
    };
    let out = status(&by_name);
    assert!(
        out.status.success(),
        "status through localhost: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(listed.is_array() || listed.is_object(), "{listed}");

    // A name nothing resolves fails as such, naming it.
    let nowhere = dir.path().join("nowhere");
    std::fs::write(
        &nowhere,
        std::fs::read_to_string(&by_name)
            .expect("read")
            .replace("localhost", "api.volmig-test.invalid"),
    )
    .expect("write");
    let out = status(&nowhere);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("api.volmig-test.invalid"), "{said}");
}
