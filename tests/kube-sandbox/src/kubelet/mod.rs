//! The kubelet: one per node. It starts a worker for each pod bound to its
//! node; the worker waits until the pod can start (node Ready, volumes
//! attachable and mountable), runs each container as a real process
//! ([`runtime`]), reports phases and container statuses, restarts by
//! `restartPolicy`, and on deletion stops the containers with the pod's
//! grace period and removes the pod.

pub mod devices;
mod env;
pub mod freeze;
pub mod image;
mod launch;
pub mod logs;
mod ownership;
mod pod;
mod probe;
mod processes;
mod projected;
pub mod runtime;
mod security;
mod service_env;
mod status;
mod volumes;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::auth::Authority;
use crate::store::Store;
use crate::task::Owned;

pub use devices::{BlockBacking, Devices};
pub use freeze::Freezer;
pub use image::{ImageMapping, Images, OciArchive};
pub use processes::PodProcesses;

/// What every kubelet shares with the sandbox.
pub struct Shared {
    pub store: Arc<Store>,
    pub logs: Arc<LogIndex>,
    pub data_dir: PathBuf,
    pub images: Images,
    /// Issues the service-account tokens of projected volumes.
    pub authority: Arc<Authority>,
    /// The running container processes, which faults may kill.
    pub processes: Arc<PodProcesses>,
    /// Stops the containers writing to a volume while it is snapshotted;
    /// one for the whole sandbox, which the controllers' `Ctx` shares.
    pub freezer: Arc<Freezer>,
    /// The loop devices of Block volumes; the volume controller's `Ctx`
    /// shares them, to detach a deleted PV's.
    pub devices: Arc<Devices>,
    ips: Mutex<IpPool>,
}

impl Shared {
    /// Pod IPs come from the loopback block `127.block.0.0/16`; Block
    /// volumes get loop devices as [`Devices::default`] does until
    /// `devices` is set.
    pub fn new(
        store: Arc<Store>,
        logs: Arc<LogIndex>,
        data_dir: PathBuf,
        images: Images,
        block: u8,
        authority: Arc<Authority>,
        processes: Arc<PodProcesses>,
    ) -> Shared {
        Shared {
            store,
            logs,
            data_dir,
            images,
            authority,
            processes,
            freezer: Arc::default(),
            devices: Arc::default(),
            ips: Mutex::new(IpPool {
                block,
                next: 0,
                free: Vec::new(),
            }),
        }
    }

    fn allocate_ip(&self) -> Ipv4Addr {
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allocate()
    }

    fn release_ip(&self, ip: Ipv4Addr) {
        self.ips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release(ip);
    }
}

/// Pod IPs: distinct loopback addresses `127.B.X.Y` (X from 1) of the
/// sandbox's block.
struct IpPool {
    block: u8,
    next: u32,
    free: Vec<Ipv4Addr>,
}

impl IpPool {
    /// Pod addresses in the block: X from 1 to 253 (X = 254 is the load
    /// balancers', 255 the Services'), Y from 1 to 254.
    const SIZE: u32 = 253 * 254;

    /// A fresh address while there are any, so that a client still
    /// retrying a gone pod's address never reaches a new pod; freed ones
    /// only after.
    fn allocate(&mut self) -> Ipv4Addr {
        if self.next < Self::SIZE {
            let n = self.next;
            self.next += 1;
            return Ipv4Addr::new(127, self.block, (1 + n / 254) as u8, (1 + n % 254) as u8);
        }
        self.free
            .pop()
            .unwrap_or(Ipv4Addr::new(127, self.block, 253, 254))
    }

    fn release(&mut self, ip: Ipv4Addr) {
        self.free.insert(0, ip);
    }
}

/// A node's address (its kubelet's `hostIP`): `127.B.0.N`.
pub fn node_ip(block: u8, index: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, block, 0, (index + 1) as u8)
}

/// One container's log file and whether the container has exited.
#[derive(Clone)]
pub struct LogFile {
    pub path: PathBuf,
    pub finished: watch::Receiver<bool>,
}

/// Where `pods/log` finds what each container wrote, by pod uid and
/// container name: one file per run, the last is current.
#[derive(Default)]
pub struct LogIndex {
    runs: Mutex<HashMap<(String, String), Vec<LogFile>>>,
}

impl LogIndex {
    fn record(&self, uid: &str, container: &str, file: LogFile) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.entry((uid.to_string(), container.to_string()))
            .or_default()
            .push(file);
    }

    pub fn current(&self, uid: &str, container: &str) -> Option<LogFile> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.get(&(uid.to_string(), container.to_string()))?
            .last()
            .cloned()
    }

    pub fn previous(&self, uid: &str, container: &str) -> Option<LogFile> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let list = runs.get(&(uid.to_string(), container.to_string()))?;
        list.len().checked_sub(2).and_then(|i| list.get(i)).cloned()
    }

    fn forget(&self, uid: &str) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.retain(|(u, _), _| u != uid);
    }
}

/// A node's kubelet.
pub struct Kubelet {
    pub node: String,
    /// Bumped to SIGKILL every container on the node at once (a crash).
    kill: watch::Sender<u64>,
    _task: Owned,
}

impl Kubelet {
    pub fn spawn(shared: Arc<Shared>, node: String, host_ip: Ipv4Addr) -> Kubelet {
        let (kill, _) = watch::channel(0);
        let task = Owned::spawn(run(shared, node.clone(), host_ip, kill.clone()));
        Kubelet {
            node,
            kill,
            _task: task,
        }
    }

    /// Kills every container process on this node with SIGKILL, as a node
    /// crash would; they restart by their restartPolicy once the node is
    /// Ready.
    pub fn kill_all(&self) {
        self.kill.send_modify(|n| *n += 1);
    }
}

async fn run(shared: Arc<Shared>, node: String, host_ip: Ipv4Addr, kill: watch::Sender<u64>) {
    let mut workers: HashMap<String, Owned> = HashMap::new();
    let mut version = shared.store.subscribe_version();
    let pods = crate::registry::get("pods");
    loop {
        let (all, _) = shared.store.list(pods, None);
        for p in all
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str() == Some(node.as_str()))
        {
            let uid = p["metadata"]["uid"].as_str().unwrap_or_default();
            if workers.contains_key(uid) {
                continue;
            }
            let (namespace, name) = crate::controllers::name_of(p);
            let id = pod::PodId {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: uid.to_string(),
            };
            let worker =
                pod::Worker::new(shared.clone(), node.clone(), host_ip, id, kill.subscribe());
            workers.insert(uid.to_string(), Owned::spawn(worker.run()));
        }
        // A finished worker's pod is gone; forget it once it is.
        workers.retain(|uid, task| {
            !task.is_finished() || all.iter().any(|p| p["metadata"]["uid"] == *uid.as_str())
        });
        tokio::select! {
            changed = version.changed() => if changed.is_err() { break },
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    // Dropping `workers` aborts them, and their containers die with them.
}
