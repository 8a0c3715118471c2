//! `kubectl volmig monitor`: a live view of operations.
//!
//! - [`model`]: the state and its transitions (pure: messages in, commands
//!   out);
//! - [`view`]: the state drawn (pure: a frame from a model);
//! - [`app`]: the terminal and the event loop;
//! - [`feed`]: the kube watches that send the model its messages.

pub mod app;
pub mod feed;
pub mod model;
#[cfg(test)]
mod tests;
pub mod view;

pub use model::{Command, Model, Msg, Scope};
