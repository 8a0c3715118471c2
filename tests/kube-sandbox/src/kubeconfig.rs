//! Kubeconfig files: a sandbox's own (the admin, or a ServiceAccount),
//! and one holding several sandboxes as named contexts, as a user's
//! `~/.kube/config` holds several clusters
//! ([`crate::testkit::merged_kubeconfig`]).

use std::path::Path;

use base64::prelude::{Engine as _, BASE64_STANDARD};

/// One context: a cluster (server and CA), a user (a bearer token) and a
/// namespace, under one name (the context's, its cluster's and its
/// user's: each list has its own names).
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub name: &'a str,
    /// `https://127.0.0.1:PORT`.
    pub server: &'a str,
    /// The cluster CA (PEM), as `certificate-authority-data`.
    pub ca_pem: &'a str,
    /// The user entry's name (`kube-sandbox`, `system:serviceaccount:...`).
    pub user: &'a str,
    pub token: &'a str,
    pub namespace: &'a str,
}

/// Writes a kubeconfig of `contexts`, the first one current.
pub fn write(path: &Path, contexts: &[Context]) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, render(contexts))
}

/// The YAML of [`write`].
pub fn render(contexts: &[Context]) -> String {
    let mut clusters = String::new();
    let mut entries = String::new();
    let mut users = String::new();
    for c in contexts {
        let ca = BASE64_STANDARD.encode(c.ca_pem);
        clusters.push_str(&format!(
            "- name: {name:?}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n",
            name = c.name,
            server = c.server,
        ));
        entries.push_str(&format!(
            "- name: {name:?}\n  context:\n    cluster: {name:?}\n    user: {user:?}\n    namespace: {namespace}\n",
            name = c.name,
            user = c.user,
            namespace = c.namespace,
        ));
        users.push_str(&format!(
            "- name: {user:?}\n  user:\n    token: {token}\n",
            user = c.user,
            token = c.token,
        ));
    }
    let current = contexts.first().map_or("", |c| c.name);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n{clusters}contexts:\n{entries}current-context: {current:?}\nusers:\n{users}"
    )
}
