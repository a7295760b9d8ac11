//! Blocking work (the store's writes, opening it, writing the identity,
//! encoding a large report): on a thread of its own in production, inline
//! on the calling thread once [`run_inline`] was called on it.
//!
//! A simulator that steps every host on one thread calls [`run_inline`]:
//! work on other threads finishes at a moment real time decides, and a
//! seed could not replay. Inline, it happens at one simulated instant, in
//! the order the hosts asked for it.

use std::cell::Cell;
use std::io;

thread_local! {
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

/// Runs every later piece of blocking work asked for on this thread inline.
pub fn run_inline() {
    INLINE.set(true);
}

/// Whether blocking work asked for on this thread runs inline.
pub fn inline() -> bool {
    INLINE.get()
}

/// Runs `f` where blocking work runs: a blocking thread of tokio's, or
/// inline (see [`run_inline`]).
pub async fn unblock<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if inline() {
        Ok(f())
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn inline_work_runs_on_the_calling_thread_and_other_work_does_not() {
        let caller = std::thread::current().id();
        let elsewhere = unblock(|| std::thread::current().id()).await.unwrap();
        assert_ne!(elsewhere, caller);
        run_inline();
        let here = unblock(|| std::thread::current().id()).await.unwrap();
        assert_eq!(here, caller);
    }
}
