//! `kube-sandbox`: a local Kubernetes for volmig's end-to-end tests.
//!
//! One process emulates the parts of a cluster that volmig touches: an API
//! server that real `kubectl` and kube-rs talk to (HTTPS on loopback),
//! the control loops of kube-controller-manager and the scheduler that matter
//! for volumes, and a kubelet per node that runs each pod's container as a
//! real process in its own mount namespace. See `docs/testing.md` for what it
//! emulates and what it does not.

pub mod api;
pub mod auth;
pub mod controllers;
pub mod events;
pub mod kubeconfig;
pub mod kubelet;
pub mod patch;
pub mod registry;
pub mod sandbox;
pub mod selector;
pub mod services;
pub mod status;
pub mod store;
pub mod task;
pub mod testkit;
pub mod time;

pub use sandbox::{Sandbox, SandboxConfig};
pub use status::ApiError;
