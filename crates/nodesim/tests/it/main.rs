//! The whole node in the simulation, one test binary: seeded runs and the
//! targeted schedules that pin one mechanism each, a module each.

mod changes;
mod election_pause;
mod kinds;
mod late_answer;
mod liveness;
mod quorum_blip;
mod replacements;
mod restart_behind_cut;
mod seeds;
mod speaker_crash;
