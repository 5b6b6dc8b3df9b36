//! Weft: a GitOps pull reconciler for Kubernetes.
//!
//! The modules follow the data path, each importing only those before it:
//! `api ← source ← load ← render ← apply ← pass ← notify ← daemon ← server ← ui ← cli`.
//! `docs/architecture.md` maps which module owns what.

pub mod api;
pub mod apply;
pub mod cli;
pub mod daemon;
pub mod helm;
pub mod load;
pub mod mem;
pub mod notify;
pub mod pass;
pub mod render;
pub mod server;
pub mod sops;
pub mod source;
pub mod ui;
