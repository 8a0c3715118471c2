//! The krew manifest (`krew-manifest/volmig.yaml`): a krew `Plugin` whose
//! platforms are the release archives, and krew's own validation rules
//! (sigs.k8s.io/krew `internal/index/validation`), so a manifest that
//! passes here is one `kubectl krew install --manifest` takes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::platform::Platform;

pub const API_VERSION: &str = "krew.googlecontainertools.github.com/v1alpha2";
pub const KIND: &str = "Plugin";
/// The plugin's name in the index: `kubectl krew install volmig`.
pub const NAME: &str = "volmig";
/// Where releases are downloaded from; `{tag}/{archive}` follows.
pub const RELEASES: &str = "https://github.com/volmig/volmig/releases/download";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugin {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: Spec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
    pub short_description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveats: Option<String>,
    pub platforms: Vec<PlatformEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlatformEntry {
    pub selector: Selector,
    pub uri: String,
    pub sha256: String,
    pub bin: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<FileOperation>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<Requirement>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileOperation {
    pub from: String,
    pub to: String,
}

#[derive(Debug, thiserror::Error)]
pub enum KrewError {
    #[error("cannot read the krew manifest: {0}")]
    Parse(String),
    #[error("cannot write the krew manifest: {0}")]
    Write(String),
    #[error("invalid krew manifest: {0}")]
    Invalid(String),
}

/// One built archive of the plugin.
#[derive(Debug, Clone)]
pub struct Archive {
    pub platform: Platform,
    pub file_name: String,
    pub sha256: String,
}

/// The files each archive holds, as the manifest lists them.
pub fn archive_files(platform: Platform) -> Vec<String> {
    let mut files = vec![format!("kubectl-volmig{}", platform.exe_suffix())];
    if platform.os != "windows" {
        files.push("kubectl_complete-volmig".to_string());
    }
    files.push("LICENSE".to_string());
    files
}

impl Plugin {
    pub fn parse(text: &str) -> Result<Plugin, KrewError> {
        serde_saphyr::from_str(text).map_err(|e| KrewError::Parse(e.to_string()))
    }

    pub fn to_yaml(&self) -> Result<String, KrewError> {
        serde_saphyr::to_string(self).map_err(|e| KrewError::Write(e.to_string()))
    }

    /// This manifest (its descriptions) for release `tag` with `archives`
    /// as its platforms, in the order of [`crate::platform::ALL`].
    pub fn render(&self, tag: &str, archives: &[Archive]) -> Plugin {
        let mut archives = archives.to_vec();
        let rank = |a: &Archive| crate::platform::ALL.iter().position(|p| *p == a.platform);
        archives.sort_by_key(rank);
        let platforms = archives
            .iter()
            .map(|a| PlatformEntry {
                selector: Selector {
                    match_labels: Some(BTreeMap::from([
                        ("os".to_string(), a.platform.os.to_string()),
                        ("arch".to_string(), a.platform.arch.to_string()),
                    ])),
                    match_expressions: None,
                },
                uri: format!("{RELEASES}/{tag}/{}", a.file_name),
                sha256: a.sha256.clone(),
                bin: format!("kubectl-volmig{}", a.platform.exe_suffix()),
                files: Some(
                    archive_files(a.platform)
                        .into_iter()
                        .map(|f| FileOperation {
                            from: f,
                            to: ".".to_string(),
                        })
                        .collect(),
                ),
            })
            .collect();
        let mut out = self.clone();
        out.spec.version = tag.to_string();
        out.spec.platforms = platforms;
        out
    }

    /// krew's checks of a plugin manifest named `name` (the file's stem),
    /// plus one krew leaves to install time: no two platforms with the
    /// same selector.
    pub fn validate(&self, name: &str) -> Result<(), KrewError> {
        let invalid = |m: String| Err(KrewError::Invalid(m));
        if self.api_version != API_VERSION {
            return invalid(format!(
                "apiVersion is {:?}, not {API_VERSION:?}",
                self.api_version
            ));
        }
        if self.kind != KIND {
            return invalid(format!("kind is {:?}, not {KIND:?}", self.kind));
        }
        if !is_safe_name(name) {
            return invalid(format!(
                "the plugin name {name:?} is not allowed (^[\\w-]+$)"
            ));
        }
        if self.metadata.name != name {
            return invalid(format!(
                "the plugin should be named {name:?}, not {:?}",
                self.metadata.name
            ));
        }
        let spec = &self.spec;
        if spec.short_description.is_empty() {
            return invalid("no shortDescription".into());
        }
        if spec.short_description.contains(['\r', '\n']) {
            return invalid("shortDescription has a line break".into());
        }
        if spec.platforms.is_empty() {
            return invalid("no platforms".into());
        }
        if !is_krew_semver(&spec.version) {
            return invalid(format!(
                "version {:?} is not v-prefixed semver",
                spec.version
            ));
        }
        let mut seen = Vec::new();
        for p in &spec.platforms {
            validate_platform(p)
                .map_err(|m| KrewError::Invalid(format!("platform {}: {m}", p.uri)))?;
            if seen.contains(&&p.selector) {
                return invalid(format!("two platforms have the same selector ({})", p.uri));
            }
            seen.push(&p.selector);
        }
        Ok(())
    }
}

fn validate_platform(p: &PlatformEntry) -> Result<(), String> {
    if p.uri.is_empty() {
        return Err("`uri` has to be set".into());
    }
    if !(p.sha256.len() == 64
        && p.sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    {
        return Err(format!(
            "`sha256` {:?} is not 64 lower-case hex digits",
            p.sha256
        ));
    }
    if p.bin.is_empty() {
        return Err("`bin` has to be set".into());
    }
    if let Some(files) = &p.files {
        if files.is_empty() {
            return Err("`files` has to be unspecified or non-empty".into());
        }
        if files.iter().any(|f| f.from.is_empty() || f.to.is_empty()) {
            return Err("every file needs `from` and `to`".into());
        }
    }
    let s = &p.selector;
    if s.match_labels.is_none() && s.match_expressions.as_ref().is_none_or(Vec::is_empty) {
        return Err("empty selector".into());
    }
    let keys = s
        .match_labels
        .iter()
        .flat_map(|m| m.keys())
        .chain(s.match_expressions.iter().flatten().map(|r| &r.key));
    for key in keys {
        if key != "os" && key != "arch" {
            return Err(format!("selector key {key:?} is not supported (os, arch)"));
        }
    }
    if s.match_labels.as_ref().is_some_and(BTreeMap::is_empty) {
        return Err("`matchLabels` specified but empty".into());
    }
    if s.match_expressions.as_ref().is_some_and(Vec::is_empty) {
        return Err("`matchExpressions` specified but empty".into());
    }
    Ok(())
}

/// `^[\w-]+$` and not a name Windows reserves.
fn is_safe_name(name: &str) -> bool {
    const WINDOWS: [&str; 22] = [
        "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
        "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
    ];
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        && !WINDOWS.iter().any(|w| w.eq_ignore_ascii_case(name))
}

/// `vMAJOR.MINOR.PATCH[-PRE][+BUILD]`, as krew's `semver.Parse` takes it.
fn is_krew_semver(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let (rest, build) = match rest.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (rest, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(|p| p.split('.').all(ident))
        && build.is_none_or(|b| b.split('.').all(ident))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(platform: Platform) -> Archive {
        Archive {
            platform,
            file_name: platform.archive_name("v1.2.3"),
            sha256: "a".repeat(64),
        }
    }

    fn sample() -> Plugin {
        Plugin {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: Metadata { name: NAME.into() },
            spec: Spec {
                version: "v0.0.0".into(),
                homepage: Some("https://github.com/volmig/volmig".into()),
                short_description: "Move volumes".into(),
                description: Some("Two\nlines\n".into()),
                caveats: None,
                platforms: Vec::new(),
            },
        }
        .render("v1.2.3", &crate::platform::ALL.map(archive))
    }

    #[test]
    fn a_rendered_manifest_is_valid_and_reads_back() {
        let plugin = sample();
        plugin.validate(NAME).expect("valid");
        assert_eq!(plugin.spec.platforms.len(), 5);
        let windows = &plugin.spec.platforms[4];
        assert_eq!(windows.bin, "kubectl-volmig.exe");
        assert!(windows
            .uri
            .ends_with("/v1.2.3/kubectl-volmig_v1.2.3_windows_amd64.tar.gz"));
        let text = plugin.to_yaml().expect("yaml");
        assert_eq!(Plugin::parse(&text).expect("parse"), plugin);
    }

    #[test]
    fn krew_rules_are_enforced() {
        type Breaks = fn(&mut Plugin);
        let broken: [(&str, Breaks); 8] = [
            ("apiVersion", |p| p.api_version = "v1".into()),
            ("named", |p| p.metadata.name = "other".into()),
            ("line break", |p| p.spec.short_description = "a\nb".into()),
            ("semver", |p| p.spec.version = "0.1.0".into()),
            ("sha256", |p| p.spec.platforms[0].sha256 = "ABC".into()),
            ("selector key", |p| {
                p.spec.platforms[0].selector.match_labels =
                    Some(BTreeMap::from([("distro".into(), "debian".into())]))
            }),
            ("same selector", |p| {
                p.spec.platforms[1].selector = p.spec.platforms[0].selector.clone()
            }),
            ("files", |p| p.spec.platforms[0].files = Some(Vec::new())),
        ];
        for (what, breaks) in broken {
            let mut plugin = sample();
            breaks(&mut plugin);
            let err = plugin.validate(NAME).expect_err(what).to_string();
            assert!(err.contains(what), "{what}: {err}");
        }
    }

    #[test]
    fn versions_follow_krew() {
        for ok in ["v0.1.0", "v1.20.3-rc.1", "v1.0.0+abc.1"] {
            assert!(is_krew_semver(ok), "{ok}");
        }
        for bad in ["0.1.0", "v1.2", "v01.2.3", "v1.2.3-", "v1.2.x"] {
            assert!(!is_krew_semver(bad), "{bad}");
        }
    }
}
