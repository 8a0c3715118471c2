//! What the API server does to an object on write, per kind: decoding (what
//! Go's JSON decoder refuses before anything else), defaulting (the fields a
//! real server fills so that clients reading them back see what they would
//! see), admission, validation on create (names, labels, annotations, and
//! the fields the controllers here need), and on update the immutability
//! rules that volmig can trip over. Messages are apimachinery's.

mod crds;
mod create;
mod decode;
mod defaults;
mod devices;
pub mod jobs;
mod metadata;
pub mod pod_security;
mod quantity;
mod secrets;
pub mod service_accounts;
mod snapshots;
#[cfg(test)]
mod tests;
mod update;

pub use crds::{mark_terminating, set_condition};
pub use create::validate_create;
pub use decode::{decode_problem, go_base64_decode};
pub use defaults::{admit, default_object, prepare_create};
pub use quantity::parse_quantity;
pub use update::{validate_status, validate_update};
