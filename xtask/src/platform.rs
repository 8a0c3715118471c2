//! The platforms volmig is released for.

/// One release platform: a Rust target and what krew calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    /// The Rust target triple.
    pub target: &'static str,
    /// krew's `os` selector (Go's `GOOS`).
    pub os: &'static str,
    /// krew's `arch` selector (Go's `GOARCH`).
    pub arch: &'static str,
}

/// Every platform the release workflow builds. Only the first can be built
/// on the project's own machines (no other Rust target is installed there).
pub const ALL: [Platform; 5] = [
    Platform::new("x86_64-unknown-linux-gnu", "linux", "amd64"),
    Platform::new("aarch64-unknown-linux-gnu", "linux", "arm64"),
    Platform::new("x86_64-apple-darwin", "darwin", "amd64"),
    Platform::new("aarch64-apple-darwin", "darwin", "arm64"),
    Platform::new("x86_64-pc-windows-msvc", "windows", "amd64"),
];

impl Platform {
    const fn new(target: &'static str, os: &'static str, arch: &'static str) -> Platform {
        Platform { target, os, arch }
    }

    /// The platform of a Rust target triple, if volmig is released for it.
    pub fn of_target(target: &str) -> Option<Platform> {
        ALL.into_iter().find(|p| p.target == target)
    }

    /// The platform of an archive's file name (`..._linux_amd64.tar.gz`).
    pub fn of_archive(file_name: &str) -> Option<Platform> {
        let stem = file_name.strip_suffix(".tar.gz")?;
        ALL.into_iter()
            .find(|p| stem.ends_with(&format!("_{}_{}", p.os, p.arch)))
    }

    /// `.exe` on Windows.
    pub fn exe_suffix(&self) -> &'static str {
        if self.os == "windows" {
            ".exe"
        } else {
            ""
        }
    }

    /// Whether binaries for it are linked statically (Linux: glibc's
    /// static libraries, so the plugin runs on any distribution and the
    /// mover in an image of nothing else).
    pub fn is_linux(&self) -> bool {
        self.os == "linux"
    }

    /// The plugin's archive: `kubectl-volmig_v0.1.0_linux_amd64.tar.gz`.
    pub fn archive_name(&self, tag: &str) -> String {
        format!("kubectl-volmig_{tag}_{}_{}.tar.gz", self.os, self.arch)
    }

    /// An image's archive: `mover_v0.1.0_linux_amd64.oci.tar`.
    pub fn image_name(&self, image: &str, tag: &str) -> String {
        format!("{image}_{tag}_{}_{}.oci.tar", self.os, self.arch)
    }
}

/// The platform this xtask runs on, when it is a release platform.
pub fn host() -> Option<Platform> {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    ALL.into_iter().find(|p| p.os == os && p.arch == arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_round_trip() {
        for p in ALL {
            assert_eq!(Platform::of_archive(&p.archive_name("v1.2.3")), Some(p));
        }
        assert_eq!(
            Platform::of_archive("kubectl-volmig_v1_linux_s390x.tar.gz"),
            None
        );
    }
}
