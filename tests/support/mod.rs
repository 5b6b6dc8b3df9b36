pub mod cluster;
pub mod git_servers;
