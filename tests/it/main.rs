//! Weft's integration tests: one test crate (one link of the weft library for all of them), a
//! module per area. Tests that need a cluster share the control plane of their process
//! (`support::cluster`): `scripts/test` runs each module in a process of its own, so each area
//! has a fresh control plane as it had when every area was its own crate, and
//! `cargo test --test it MODULE::` runs one area the same way.

#[path = "../support/mod.rs"]
mod support;

#[path = "../sops/tools.rs"]
mod sops_tools;

mod agents_cluster;
mod apply_sync;
mod armada_cluster;
mod armada_render;
mod armada_site;
mod armada_sync;
mod armada_truth;
mod armada_waits;
mod attack_inputs;
mod attack_server;
mod attack_sources;
mod attack_tenants;
mod chart_repositories;
mod chart_sources;
mod cli_day_one;
mod cli_missing_root;
mod cli_tree_export;
mod cli_validate;
mod cluster_proof;
mod control_plane_faults;
mod daemon_armada;
mod daemon_deploy;
mod daemon_faults;
mod daemon_leader;
mod daemon_same_rules;
mod daemon_sync;
mod daemon_weavecloud;
mod error_wording;
mod flag_root_object;
mod flux_repository;
mod get_cli;
mod git_default_ref;
mod git_source;
mod helm_render;
mod helm_sync;
mod install;
mod inventory_scale;
mod layers;
mod migrate;
mod monitoring;
mod namespaced;
mod notify;
mod operator_mistakes;
mod operator_mistakes_apply;
mod operator_mistakes_daemon;
mod proptest_render;
mod proptest_sources;
mod render_golden;
mod root_crd;
mod root_leases;
mod roots;
mod server_limits;
mod shards;
mod soak_replicas;
mod sops_decrypt;
mod sops_sync;
mod suspend;
mod sync_after_run;
mod sync_cli;
mod sync_git_secret;
mod takeover;
mod takeover_durable;
mod takeover_last_mile;
mod tenants;
mod ui_browser;
mod uninstall_cli;
mod update_channel;
mod update_daemon;
mod update_git_channel;
mod update_validate;
