//! The clock port: the only way engine code learns the time or waits.
//!
//! Two clocks, as the field notes require: wall time for calendar things (slots, active
//! hours, persisted deadlines), which may be skewed or jump either way; and monotonic time
//! for elapsed things (timeouts, retry delays), which never goes backward.

use std::ops::{Add, Sub};
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;

/// A point on a clock's monotonic line: time elapsed since that clock's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Mono(Duration);

impl Mono {
    pub const ZERO: Mono = Mono(Duration::ZERO);

    pub fn from_duration(since_origin: Duration) -> Self {
        Self(since_origin)
    }

    pub fn since_origin(self) -> Duration {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Mono) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Mono {
    type Output = Mono;
    fn add(self, rhs: Duration) -> Mono {
        Mono(self.0.saturating_add(rhs))
    }
}

impl Sub<Mono> for Mono {
    type Output = Duration;
    fn sub(self, rhs: Mono) -> Duration {
        self.saturating_since(rhs)
    }
}

/// Both readings of a clock, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub wall: Timestamp,
    pub mono: Mono,
}

/// A source of wall time, monotonic time and sleep.
#[async_trait]
pub trait Clock: Send + Sync + 'static {
    /// Wall-clock time. May be skewed, and may jump forward or backward between calls.
    fn wall(&self) -> Timestamp;

    /// Monotonic time. Never less than an earlier reading of the same clock.
    fn monotonic(&self) -> Mono;

    /// Returns once monotonic time has reached `deadline` (at once if it has).
    async fn sleep_until(&self, deadline: Mono);

    /// Both readings at once.
    fn now(&self) -> Now {
        Now { wall: self.wall(), mono: self.monotonic() }
    }

    /// Sleeps for `duration` of monotonic time.
    async fn sleep(&self, duration: Duration) {
        let deadline = self.monotonic() + duration;
        self.sleep_until(deadline).await;
    }
}
