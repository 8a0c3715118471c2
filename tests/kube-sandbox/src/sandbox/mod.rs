//! Starting and stopping a whole sandbox: store, API server, controllers,
//! kubelets and service forwarders, plus the objects a fresh cluster has
//! (namespaces, nodes, storage classes).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::net::TcpListener;

use tokio_rustls::TlsAcceptor;

mod bootstrap;

use crate::api::{self, Api, AuditEntry, AuditLog, Faults, Tripwire};
use crate::auth::{Authority, Subject, Validity};
use crate::controllers::{self, Ctx};
use crate::kubeconfig;
use crate::kubelet::{
    self, BlockBacking, Devices, ImageMapping, Images, Kubelet, LogIndex, OciArchive, PodProcesses,
    Shared,
};
use crate::registry;
use crate::store::Store;
use crate::task::Owned;

/// A taint on a node, as `kubectl taint` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub node: String,
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl std::str::FromStr for Taint {
    type Err = String;

    /// `NODE:KEY[=VALUE]:EFFECT`, e.g. `node-3:dedicated=db:NoSchedule`.
    fn from_str(s: &str) -> Result<Taint, String> {
        let parts: Vec<&str> = s.splitn(3, ':').collect();
        let [node, kv, effect] = parts.as_slice() else {
            return Err(format!("taint {s:?}: expected NODE:KEY[=VALUE]:EFFECT"));
        };
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(effect) {
            return Err(format!(
                "taint {s:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        Ok(Taint {
            node: node.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
        })
    }
}

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Nodes `node-1` .. `node-N`.
    pub nodes: usize,
    pub taints: Vec<Taint>,
    /// Volumes, pod scratch dirs and logs live here; a temporary directory
    /// (removed with the sandbox) when None.
    pub data_dir: Option<PathBuf>,
    /// Port for the API server on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Written once the server listens.
    pub kubeconfig: Option<PathBuf>,
    /// Images run with local binaries (the mover image → the built mover).
    pub images: Vec<ImageMapping>,
    /// Images run from OCI image archives, in the image's own root file
    /// system: `OciArchive::new("ghcr.io/volmig/mover", "dist/....tar")`.
    /// A repository is mapped once, here or in `images`.
    pub oci_archives: Vec<OciArchive>,
    /// Changes kept for watches; older versions get 410 Gone.
    pub watch_history: usize,
    /// Whether the `snapshot.storage.k8s.io` CRDs are installed (with
    /// the snapshot controller and the CSI driver's snapshotter, and the
    /// [`SNAPSHOT_CLASS`]); when not, the group is not served at all.
    pub snapshots: bool,
    /// Whether the CSI driver ([`volumes::CSI`]) reports CLONE_VOLUME;
    /// when not, a clone gets the external-provisioner's repeated
    /// `ProvisioningFailed` "CSI driver does not support clone operations:
    /// controller CLONE_VOLUME capability is not reported".
    pub csi_clone: bool,
    /// What a Block volume's device is on the nodes: a loop device over
    /// its image file when one can be had ([`BlockBacking::Auto`]), always
    /// ([`BlockBacking::Loop`]), or the image file itself
    /// ([`BlockBacking::File`]). See `kubelet::devices`.
    pub block_backing: BlockBacking,
    /// The name of the cluster, context and admin user in the kubeconfig
    /// (`kube-sandbox`): sandboxes of other names can share one file.
    pub name: String,
    /// Whether the cloud gives LoadBalancer Services an address (see
    /// `controllers::cloud`); off, they stay `<pending>` as on a cluster
    /// without a cloud controller. [`Sandbox::set_load_balancers`]
    /// changes it while the sandbox runs.
    pub load_balancers: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            nodes: 3,
            taints: Vec::new(),
            data_dir: None,
            port: 0,
            kubeconfig: None,
            images: Vec::new(),
            oci_archives: Vec::new(),
            watch_history: 10_000,
            snapshots: true,
            csi_clone: true,
            block_backing: BlockBacking::Auto,
            name: DEFAULT_NAME.to_string(),
            load_balancers: true,
        }
    }
}

/// A running sandbox; dropping it stops everything and kills every pod.
pub struct Sandbox {
    store: Arc<Store>,
    addr: SocketAddr,
    api: Arc<Api>,
    data_dir: PathBuf,
    kubeconfig: PathBuf,
    kubelets: Vec<Kubelet>,
    tasks: Vec<Owned>,
    /// The loop devices of Block volumes, detached when the sandbox stops.
    devices: Arc<Devices>,
    /// The kubeconfig's cluster, context and admin user.
    name: String,
    /// Whether the cloud provisions load balancers.
    load_balancers: Arc<AtomicBool>,
    /// The sandbox's loopback block `127.B.0.0/16`.
    block: u8,
    /// Holds the sandbox's loopback block against other sandboxes.
    _block: std::net::TcpListener,
    _temp: Option<tempfile::TempDir>,
}

/// The kubeconfig names of a sandbox unless [`SandboxConfig::name`] says.
pub const DEFAULT_NAME: &str = "kube-sandbox";

/// The storage classes a fresh sandbox has.
pub const CLASS_STANDARD: &str = "standard";
pub const CLASS_WAIT: &str = "standard-wffc";
pub const CLASS_LOCAL: &str = "local";
/// Volumes of the sandbox's CSI driver ([`volumes::CSI`]): Immediate,
/// reachable from every node, snapshots and clones.
pub const CLASS_CSI: &str = "csi";
/// The VolumeSnapshotClass of the CSI driver (the driver's default;
/// `deletionPolicy: Delete`), when [`SandboxConfig::snapshots`] is on.
pub const SNAPSHOT_CLASS: &str = "csi-snapclass";

impl Sandbox {
    pub async fn start(config: SandboxConfig) -> std::io::Result<Sandbox> {
        let (temp, data_dir) = match &config.data_dir {
            Some(dir) => (None, dir.clone()),
            None => {
                let t = tempfile::Builder::new().prefix("kube-sandbox-").tempdir()?;
                let dir = t.path().to_path_buf();
                (Some(t), dir)
            }
        };
        let images = Images::new(
            config.images.clone(),
            config.oci_archives.clone(),
            data_dir.join("images"),
        );
        if let Some(twice) = images.duplicates().first() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("image {twice:?} is mapped more than once"),
            ));
        }
        std::fs::create_dir_all(data_dir.join("volumes"))?;
        std::fs::create_dir_all(data_dir.join("pods"))?;
        std::fs::create_dir_all(data_dir.join("snapshots"))?;
        if config.block_backing != BlockBacking::File {
            kubelet::devices::detach_leaked(&data_dir);
        }
        let devices = Arc::new(Devices::new(config.block_backing));
        let (block, reservation) = claim_block()?;
        let store = Store::with_block(config.watch_history, block);
        let listener = TcpListener::bind(("127.0.0.1", config.port)).await?;
        let addr = listener.local_addr()?;
        let service_ip = bootstrap::bootstrap(&store, &config, block, addr.port())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let authority = Arc::new(Authority::generate(service_ip).map_err(std::io::Error::other)?);
        let tls = authority
            .ca
            .server_config()
            .map_err(std::io::Error::other)?;
        let logs = Arc::new(LogIndex::default());
        let processes = Arc::new(PodProcesses::default());
        let api = Arc::new(Api {
            store: store.clone(),
            logs: logs.clone(),
            addr,
            authority: authority.clone(),
            audit: AuditLog::default(),
            faults: Faults::default(),
            processes: processes.clone(),
            snapshots: config.snapshots,
        });
        let mut tasks = vec![api::serve(listener, TlsAcceptor::from(tls), api.clone())];
        let mut shared = Shared::new(
            store.clone(),
            logs,
            data_dir.clone(),
            images,
            block,
            authority.clone(),
            processes,
        );
        shared.devices = devices.clone();
        let shared = Arc::new(shared);
        let mut ctx = Ctx::new(store.clone(), data_dir.clone(), authority.clone());
        ctx.snapshots = config.snapshots;
        ctx.csi_clone = config.csi_clone;
        // The kubelets' freezer: the CSI driver stops a volume's writers
        // on whichever nodes they run.
        ctx.freezer = shared.freezer.clone();
        ctx.devices = devices.clone();
        let load_balancers = Arc::new(AtomicBool::new(config.load_balancers));
        ctx.load_balancers = load_balancers.clone();
        let ctx = Arc::new(ctx);
        tasks.extend(controllers::spawn_all(ctx));
        tasks.push(crate::services::spawn(store.clone()));
        let kubelets = (0..config.nodes)
            .map(|i| Kubelet::spawn(shared.clone(), node_name(i), kubelet::node_ip(block, i)))
            .collect();
        let kubeconfig = config
            .kubeconfig
            .clone()
            .unwrap_or_else(|| data_dir.join("kubeconfig"));
        let server = format!("https://{addr}");
        kubeconfig::write(
            &kubeconfig,
            &[kubeconfig::Context {
                name: &config.name,
                server: &server,
                ca_pem: authority.ca.ca_pem(),
                user: &config.name,
                token: authority.admin_token(),
                namespace: "default",
            }],
        )?;
        Ok(Sandbox {
            store,
            addr,
            api,
            data_dir,
            kubeconfig,
            kubelets,
            tasks,
            devices,
            name: config.name.clone(),
            load_balancers,
            block,
            _block: reservation,
            _temp: temp,
        })
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:PORT`; the certificate is the cluster CA's
    /// ([`Sandbox::ca_pem`]).
    pub fn server_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The cluster CA's certificate (PEM), which signed the API server's.
    pub fn ca_pem(&self) -> &str {
        self.api.authority.ca.ca_pem()
    }

    /// The bearer token of the kubeconfig's user, the cluster admin.
    pub fn admin_token(&self) -> &str {
        self.api.authority.admin_token()
    }

    /// The latest requests with the identity each was made as.
    pub fn audit(&self) -> Vec<AuditEntry> {
        self.api.audit.entries()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory of a volume the sandbox provisioned (any of its
    /// classes): `data_dir/volumes/<pv name>`.
    pub fn volume_dir(&self, pv_name: &str) -> PathBuf {
        self.data_dir.join("volumes").join(pv_name)
    }

    /// The directory the CSI driver keeps a snapshot in, by its
    /// VolumeSnapshotContent's name (`status.boundVolumeSnapshotContentName`
    /// of the VolumeSnapshot), which is also its `snapshotHandle`.
    pub fn snapshot_dir(&self, content_name: &str) -> PathBuf {
        controllers::snapshots::snapshot_dir(&self.data_dir, content_name)
    }

    /// The numbers of the loop devices attached to a Block volume's image
    /// now (`data_dir/volumes/<pv name>/disk.img`): read-write first, then
    /// the read-only mirror; empty when it has none (file backing, or not
    /// used by a pod yet).
    pub fn loop_devices(&self, pv_name: &str) -> Vec<u32> {
        let image = self.volume_dir(pv_name).join(kubelet::devices::IMAGE);
        let image = std::fs::canonicalize(&image).unwrap_or(image);
        self.devices.loops_of(&image)
    }

    /// The store, for tests that look behind the API.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn node_names(&self) -> Vec<String> {
        self.kubelets.iter().map(|k| k.node.clone()).collect()
    }

    /// Flips a node's Ready condition, as a node that stops (or resumes)
    /// reporting: Unknown with the `node.kubernetes.io/unreachable` taint,
    /// and its pods marked not Ready, as the node lifecycle controller does.
    /// While the node is unreachable its kubelet starts nothing, reports
    /// nothing and confirms no deletion (its pods stay Terminating until it
    /// is back or they are force-deleted); its processes go on unless
    /// [`Sandbox::kill_pods_on`] kills them.
    pub fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), crate::ApiError> {
        self.store.modify(registry::get("nodes"), "", node, |n| {
            let status = if ready { "True" } else { "Unknown" };
            if let Some(conditions) = n["status"]["conditions"].as_array_mut() {
                for c in conditions.iter_mut().filter(|c| c["type"] == "Ready") {
                    c["status"] = json!(status);
                    c["reason"] = json!(if ready { "KubeletReady" } else { "NodeStatusUnknown" });
                    c["lastTransitionTime"] = json!(crate::time::now());
                }
            }
            let taints = &mut n["spec"]["taints"];
            if !taints.is_array() {
                *taints = json!([]);
            }
            if let Some(list) = taints.as_array_mut() {
                list.retain(|t| t["key"] != UNREACHABLE);
                if !ready {
                    list.push(json!({"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": crate::time::now()}));
                }
            }
            true
        })?;
        if !ready {
            self.mark_pods_not_ready(node);
        }
        Ok(())
    }

    fn mark_pods_not_ready(&self, node: &str) {
        let pods = registry::get("pods");
        let (all, _) = self.store.list(pods, None);
        for pod in all.iter().filter(|p| p["spec"]["nodeName"] == json!(node)) {
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let _ = self.store.modify(pods, ns, name, |p| {
                let condition =
                    json!({"type": "Ready", "status": "False", "reason": "NodeNotReady"});
                controllers::set_condition(p, condition)
            });
        }
    }

    /// Kills every container on `node` with SIGKILL, as a node crash would.
    pub fn kill_pods_on(&self, node: &str) {
        for k in self.kubelets.iter().filter(|k| k.node == node) {
            k.kill_all();
        }
    }

    /// Kills the container processes of one pod with SIGKILL, as the OOM
    /// killer or a crash would, and waits until they are collected; how
    /// many there were (0 when the pod runs none). The kubelet reports
    /// each terminated with exit code 137 and restarts it by the pod's
    /// `restartPolicy`.
    pub async fn kill_pod(&self, namespace: &str, name: &str) -> usize {
        let pod = self.store.get(registry::get("pods"), namespace, name);
        match pod
            .as_ref()
            .ok()
            .and_then(|p| p["metadata"]["uid"].as_str())
        {
            Some(uid) => self.api.processes.kill(uid).await,
            None => 0,
        }
    }

    /// Kills the pod that makes a matching request, at that request: the
    /// next `times` requests made with a pod-bound service-account token
    /// that `matcher` accepts are served (their effect stays), then the
    /// requesting pod's containers are killed with SIGKILL before the
    /// response is written, so the client never reads it. The
    /// [`Tripwire`] tells how often it fired. See [`crate::api::faults`],
    /// and `tests/faults.rs` for a Job's pod killed at its create.
    pub fn kill_requester_when(
        &self,
        times: usize,
        matcher: impl Fn(&AuditEntry) -> bool + Send + Sync + 'static,
    ) -> Tripwire {
        self.api.faults.add(times, Box::new(matcher))
    }

    /// Writes a kubeconfig for ServiceAccount `service_account` of
    /// `namespace` (the admin's cluster and CA; a token as TokenRequest
    /// issues one, not bound to a pod, valid a day; the context's
    /// namespace is the account's), so that a CLI runs as that less
    /// privileged user. NotFound when the ServiceAccount does not exist.
    pub fn kubeconfig_for(
        &self,
        namespace: &str,
        service_account: &str,
    ) -> std::io::Result<PathBuf> {
        let account = self
            .store
            .get(registry::get("serviceaccounts"), namespace, service_account)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string()))?;
        let subject = Subject {
            namespace: namespace.to_string(),
            service_account: service_account.to_string(),
            service_account_uid: account["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            pod: String::new(),
            pod_uid: String::new(),
            node: String::new(),
        };
        let validity = Validity {
            audiences: vec![crate::auth::token::ISSUER.to_string()],
            seconds: KUBECONFIG_TOKEN_SECONDS,
            warn_after_seconds: None,
        };
        let (token, _) = self
            .api
            .authority
            .issue(&subject, &validity)
            .map_err(std::io::Error::other)?;
        let user = format!("system:serviceaccount:{namespace}:{service_account}");
        let path = self
            .data_dir
            .join(format!("kubeconfig-{namespace}-{service_account}"));
        let server = self.server_url();
        let context = kubeconfig::Context {
            name: &self.name,
            server: &server,
            ca_pem: self.ca_pem(),
            user: &user,
            token: &token,
            namespace,
        };
        kubeconfig::write(&path, &[context])?;
        Ok(path)
    }

    /// The kubeconfig's cluster, context and admin user name
    /// ([`SandboxConfig::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sandbox's loopback block: its addresses are `127.B.x.y`.
    pub fn block(&self) -> u8 {
        self.block
    }

    /// Turns the cloud's load balancers on or off: off, LoadBalancer
    /// Services not yet given an address get none (their
    /// `status.loadBalancer.ingress` stays empty, as on a cluster without
    /// a cloud controller); those that have one keep it.
    pub fn set_load_balancers(&self, on: bool) {
        self.load_balancers.store(on, Ordering::Relaxed);
    }

    /// A node's `InternalIP` (`127.B.0.N`), where NodePort Services
    /// listen; None for a node the sandbox does not have.
    pub fn node_ip(&self, node: &str) -> Option<IpAddr> {
        let node = self.store.get(registry::get("nodes"), "", node).ok()?;
        crate::services::internal_ip(&node)
    }
}

/// How long the token of [`Sandbox::kubeconfig_for`] lives: a day.
const KUBECONFIG_TOKEN_SECONDS: u64 = 24 * 3600;

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Kubelets first: their pod workers, and the containers with them.
        self.kubelets.clear();
        self.tasks.clear();
        // A loop still open by a dying container goes at its last close.
        self.devices.release_all();
        // Clients may outlive the sandbox: their watches end now.
        self.store.close();
    }
}

/// Picks a loopback block `127.B.0.0/16` that no other sandbox on this
/// machine uses, and holds it by listening on `127.B.0.1:1` (a port nothing
/// else binds). Pod, node and Service addresses come from it, so the
/// sandboxes of tests running side by side never share an address.
fn claim_block() -> std::io::Result<(u8, std::net::TcpListener)> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let seed = (std::process::id() ^ nanos) as usize;
    let mut last = std::io::Error::other("no free loopback block");
    for i in 0..BLOCKS {
        let block = (FIRST_BLOCK + (seed + i * 7) % BLOCKS) as u8;
        match std::net::TcpListener::bind((Ipv4Addr::new(127, block, 0, 1), 1)) {
            Ok(listener) => return Ok((block, listener)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Blocks 127.10 to 127.249: clear of 127.0 (where the API listens).
const FIRST_BLOCK: usize = 10;
const BLOCKS: usize = 240;

pub fn node_name(index: usize) -> String {
    format!("node-{}", index + 1)
}
