//! A clock for tests and the simulator: monotonic time is the runtime's virtual time
//! (tokio's paused clock in tests, madsim's under `--cfg madsim`), and wall time is a
//! chosen start plus elapsed time plus an offset that can be skewed or made to jump.

use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use crate::ports::clock::{Clock, Mono, Now};

#[derive(Debug)]
pub struct VirtualClock {
    origin: Instant,
    wall_at_origin: Timestamp,
    /// Added to wall time: skew, and the sum of every jump so far, in nanoseconds (±292
    /// years). Read at every wall reading, which a simulated day makes millions of: an
    /// atomic rather than a lock.
    wall_offset_nanos: AtomicI64,
}

impl VirtualClock {
    /// A clock whose wall time reads `wall_at_start` now.
    #[allow(clippy::disallowed_methods)] // reads the runtime's virtual time, never the OS's
    pub fn new(wall_at_start: Timestamp) -> Self {
        Self { origin: Instant::now(), wall_at_origin: wall_at_start, wall_offset_nanos: AtomicI64::new(0) }
    }

    /// Steps the wall clock by `by` (negative: backward). Monotonic time is unaffected.
    pub fn jump_wall(&self, by: SignedDuration) {
        let by = i64::try_from(by.as_nanos()).unwrap_or(if by.is_negative() { i64::MIN } else { i64::MAX });
        // `fetch_update` never fails with a closure that always answers.
        let _ = self
            .wall_offset_nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |offset| Some(offset.saturating_add(by)));
    }

    /// The wall clock's total offset from elapsed time.
    pub fn wall_offset(&self) -> SignedDuration {
        SignedDuration::from_nanos(self.wall_offset_nanos.load(Ordering::SeqCst))
    }
}

impl VirtualClock {
    /// The wall time when monotonic time reads `mono`.
    fn wall_at(&self, mono: Mono) -> Timestamp {
        let elapsed = SignedDuration::try_from(mono.since_origin()).unwrap_or(SignedDuration::MAX);
        let at = self.wall_at_origin.saturating_add(elapsed.saturating_add(self.wall_offset()));
        at.unwrap_or(Timestamp::MAX)
    }
}

#[async_trait]
impl Clock for VirtualClock {
    fn wall(&self) -> Timestamp {
        self.wall_at(self.monotonic())
    }

    /// One reading of the runtime's time for both (the simulator reads the clock at every
    /// turn of the driver's loop, and each reading is a call into the runtime).
    fn now(&self) -> Now {
        let mono = self.monotonic();
        Now { wall: self.wall_at(mono), mono }
    }

    #[allow(clippy::disallowed_methods)] // reads the runtime's virtual time, never the OS's
    fn monotonic(&self) -> Mono {
        Mono::from_duration(Instant::now().saturating_duration_since(self.origin))
    }

    #[allow(clippy::disallowed_methods)] // sleeps in the runtime's virtual time
    async fn sleep_until(&self, deadline: Mono) {
        tokio::time::sleep_until(self.origin + deadline.since_origin()).await;
    }
}
