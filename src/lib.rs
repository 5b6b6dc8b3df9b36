//! Weft: a GitOps pull reconciler for Kubernetes.
//!
//! The modules follow the data path of the design:
//! `source → load → render → apply (plan, apply, prune, wait) → report`,
//! with `controller` running the loops and `server` the HTTP API.

pub mod api;
pub mod apply;
pub mod controller;
pub mod load;
pub mod render;
pub mod server;
pub mod source;
pub mod sync;
pub mod update;
