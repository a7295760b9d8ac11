//! The lock table's integration tests, one binary: the seed's sentences,
//! rebuilds, edges and the model-based property tests, a module each.

mod common;

mod delay;
mod edges;
mod kinds;
mod model;
mod rebuild;
mod seed;
mod session;
mod session_delay;
mod sets;
mod settling;
mod settling_late;
