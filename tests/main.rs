//! The whole binary over real processes: every suite of the root `tests/`
//! in one test binary (one link, one schedule of parallel tests), each file
//! a module. The chaos suite is its own binary (`tests/chaos/`): it loads
//! the machine alone, one mode at a time.

mod support;

mod acl;
mod change;
mod cli;
mod client;
mod cluster;
mod conformance;
mod copies;
mod embedded_service;
mod frames;
mod harness;
mod identity;
mod liveness;
mod membership;
mod openapi;
mod operations;
mod peer_frames;
mod rebuild_modes;
mod reports;
mod shape;
mod status_page;
mod tls;
mod upgrade;
