//! leasehold's one source of randomness: store and cluster ids, lock ids,
//! and (through [`EntropyRuntime`](crate::EntropyRuntime)) openraft's
//! election timeouts all draw here.
//!
//! A thread draws from the OS (rand's thread generator) until [`seed`] is
//! called on it; from then on every draw on that thread comes from a small
//! generator seeded with the seed. A simulator that steps every host on one
//! thread seeds it before building them, and a seed replays to the same
//! draws. A draw on another thread (a blocking task's, say) is the OS's.

use std::cell::RefCell;

use rand010::rngs::SmallRng;
use rand010::{Rng, SeedableRng};

thread_local! {
    /// This thread's generator once [`seed`] has been called on it.
    static SEEDED: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

/// Makes every later draw on this thread come from a generator seeded with
/// `seed` (replacing one seeded before).
pub fn seed(seed: u64) {
    SEEDED.with_borrow_mut(|seeded| *seeded = Some(SmallRng::seed_from_u64(seed)));
}

/// 64 random bits.
pub fn random_u64() -> u64 {
    SEEDED.with_borrow_mut(|seeded| match seeded {
        Some(rng) => rng.next_u64(),
        None => rand010::rng().next_u64(),
    })
}

/// 128 random bits.
pub fn random_u128() -> u128 {
    let high = random_u64();
    let low = random_u64();
    u128::from(high) << 64 | u128::from(low)
}

/// A generator of its own, seeded from the next draw here.
pub fn small_rng() -> SmallRng {
    SmallRng::seed_from_u64(random_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` draws on a fresh thread, seeded with `with` if given.
    fn draws(with: Option<u64>, n: usize) -> Vec<u128> {
        std::thread::spawn(move || {
            if let Some(s) = with {
                seed(s);
            }
            (0..n).map(|_| random_u128()).collect()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_seed_replays_to_the_same_draws() {
        assert_eq!(draws(Some(7), 16), draws(Some(7), 16));
        assert_ne!(draws(Some(7), 16), draws(Some(8), 16));
    }

    #[test]
    fn seeding_again_starts_the_sequence_again() {
        seed(42);
        let first: Vec<u64> = (0..4).map(|_| random_u64()).collect();
        seed(42);
        let again: Vec<u64> = (0..4).map(|_| random_u64()).collect();
        assert_eq!(first, again);
    }

    #[test]
    fn unseeded_draws_differ() {
        assert_ne!(draws(None, 4), draws(None, 4));
        std::thread::spawn(|| assert_ne!(random_u128(), random_u128()))
            .join()
            .unwrap();
    }

    #[test]
    fn a_small_rng_follows_the_seed() {
        use rand010::RngExt;

        let draw = || {
            std::thread::spawn(|| {
                seed(3);
                let mut a = small_rng();
                let mut b = small_rng();
                (a.random::<u64>(), b.random::<u64>())
            })
            .join()
            .unwrap()
        };
        let (a, b) = draw();
        assert_eq!((a, b), draw());
        assert_ne!(a, b, "each generator is seeded from a fresh draw");
    }
}
