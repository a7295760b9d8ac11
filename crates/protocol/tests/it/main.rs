//! The protocol's integration tests, one binary: a member's operations and
//! the rules about time and the guard, a module each.

mod common;

mod attempt;
mod delay;
mod deposed;
mod kinds;
mod late_reads;
mod member;
mod named;
mod reading;
mod recording;
mod rules;
mod session_copies;
mod session_crossing;
mod session_delay;
mod session_notes;
mod session_reclaim;
mod sessions;
