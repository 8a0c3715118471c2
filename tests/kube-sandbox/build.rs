//! Compiles Kubernetes' protobuf schemas (vendored in `proto/`) into a
//! descriptor set, with which the API server decodes kubectl's protobuf
//! request bodies (see `src/api/protobuf`).

use std::path::PathBuf;

/// The schemas of the kinds taken in protobuf, and what they import.
const FILES: [&str; 3] = [
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/api/apps/v1/generated.proto",
    "k8s.io/api/authentication/v1/generated.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("kubernetes.fds");
    let set = protox::Compiler::new(["proto"])?
        .include_imports(true)
        .open_files(FILES)?
        .encode_file_descriptor_set();
    std::fs::write(out, set)?;
    Ok(())
}
