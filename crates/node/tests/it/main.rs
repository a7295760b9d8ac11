//! A node embedded in this process, one test binary: its HTTP answers, the
//! leader elector, restarts and property tests over the API, a module each.

mod common;

mod elector;
mod embedded;
mod frames;
mod http_errors;
mod http_input;
mod removal;
mod report_task;
mod restart;
