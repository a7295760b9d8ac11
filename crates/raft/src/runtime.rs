//! The async runtime leasehold's openraft runs on: tokio, its randomness
//! (election timeouts) drawn from [`entropy`](crate::entropy).

use std::future::Future;
use std::io;
use std::time::Duration;

use openraft::impls::TokioRuntime;
use openraft::rt::{Mpsc, OptionalSend, Select2, Select3, Select4, TryRecvError};
use openraft::AsyncRuntime;
use rand010::rngs::SmallRng;
use tracing::Instrument;

/// openraft's tokio runtime with one change: its thread generator is seeded
/// from [`entropy`](crate::entropy), so a seeded simulator thread replays
/// openraft's election timeouts (and production draws from the OS, as
/// tokio's does).
#[derive(Debug)]
pub struct EntropyRuntime {
    tokio: TokioRuntime,
}

impl AsyncRuntime for EntropyRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;

    #[inline]
    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        crate::tasks::spawn(future.in_current_span())
    }

    #[inline]
    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    #[inline]
    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    #[inline]
    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    #[inline]
    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn select2<A, B>(
        a: A,
        b: B,
    ) -> impl Future<Output = Select2<A::Output, B::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
    {
        TokioRuntime::select2(a, b)
    }

    fn select3<A, B, C>(
        a: A,
        b: B,
        c: C,
    ) -> impl Future<Output = Select3<A::Output, B::Output, C::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
    {
        TokioRuntime::select3(a, b, c)
    }

    fn select4<A, B, C, D>(
        a: A,
        b: B,
        c: C,
        d: D,
    ) -> impl Future<Output = Select4<A::Output, B::Output, C::Output, D::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
        D: Future + OptionalSend,
    {
        TokioRuntime::select4(a, b, c, d)
    }

    #[inline]
    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    #[inline]
    fn thread_rng() -> Self::ThreadLocalRng {
        crate::entropy::small_rng()
    }

    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        EntropyRuntime {
            tokio: TokioRuntime::new(threads),
        }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.tokio.block_on(future)
    }

    fn run<F, T>(future: F) -> T
    where
        F: Future<Output = T>,
    {
        TokioRuntime::run(future)
    }

    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        TokioRuntime::spawn_blocking(f)
    }

    fn mpsc_recv_deadline<T: OptionalSend>(
        receiver: &mut <Self::Mpsc as Mpsc>::Receiver<T>,
        deadline: Self::Instant,
    ) -> impl Future<Output = Result<T, TryRecvError>> + OptionalSend {
        TokioRuntime::mpsc_recv_deadline(receiver, deadline)
    }
}

#[cfg(test)]
mod tests {
    use openraft::rt::testing::Suite;
    use rand010::RngExt;

    use super::*;

    #[test]
    fn it_passes_openrafts_runtime_suite() {
        Suite::<EntropyRuntime>::test_all();
    }

    #[test]
    fn its_generator_follows_a_seeded_thread() {
        let draws = || {
            std::thread::spawn(|| {
                crate::entropy::seed(11);
                (0..4)
                    .map(|_| EntropyRuntime::thread_rng().random_range(150..300u64))
                    .collect::<Vec<_>>()
            })
            .join()
            .unwrap()
        };
        assert_eq!(draws(), draws());
    }
}
