pub mod cluster;
pub mod daemon;
pub mod faults;
pub mod git_servers;
pub mod helm;
pub mod launcher;
pub mod manifests;
pub mod wait;
