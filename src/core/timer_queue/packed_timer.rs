//! A [`SlotTimer`] or none, as the queue keeps it beside every entry: 24 bytes where an
//! optional timer is 48 (a timestamp, two durations, one of them optional).

use std::time::Duration;

use jiff::Timestamp;

use crate::core::slots::SlotTimer;
use crate::ports::clock::Mono;

/// The next slot as jiff keeps it (whole seconds and their signed fraction), the monotonic
/// deadline in nanoseconds, which saturate past 584 years of a clock's uptime, and the
/// jitter in whole milliseconds, as every jitter is (`policy::jitter_offset`), up to 49
/// days (the most a definition may ask for is an hour). A finer or longer jitter is kept
/// to the millisecond below, or at 49 days; the queue indexes and hands back the timer as
/// kept ([`PackedTimer::kept`]), so that its indexes always name the timer it holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct PackedTimer {
    next_second: i64,
    /// `next_mono` since its clock's origin, or [`PackedTimer::NO_MONO`].
    next_mono_nanos: u64,
    next_subsec_nanos: i32,
    /// The jitter, or [`PackedTimer::DISARMED`] for no timer at all.
    jitter_millis: u32,
}

/// A duration in nanoseconds, saturated below [`PackedTimer::NO_MONO`].
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(PackedTimer::NO_MONO - 1).min(PackedTimer::NO_MONO - 1)
}

/// A monotonic time in nanoseconds since its clock's origin, as the queue orders it.
pub(super) fn mono_nanos(mono: Mono) -> u64 {
    nanos(mono.since_origin())
}

impl PackedTimer {
    const NO_MONO: u64 = u64::MAX;
    /// No jitter is kept this long (`pack` saturates below it).
    const DISARMED: u32 = u32::MAX;

    pub(super) fn none() -> Self {
        Self { next_second: 0, next_mono_nanos: Self::NO_MONO, next_subsec_nanos: 0, jitter_millis: Self::DISARMED }
    }

    fn pack(timer: SlotTimer) -> Self {
        let jitter_millis = u32::try_from(timer.jitter.as_millis()).unwrap_or(Self::DISARMED).min(Self::DISARMED - 1);
        Self {
            next_second: timer.next_slot.as_second(),
            next_mono_nanos: timer.next_mono.map_or(Self::NO_MONO, mono_nanos),
            next_subsec_nanos: timer.next_slot.subsec_nanosecond(),
            jitter_millis,
        }
    }

    /// `timer` packed, and the timer it unpacks to: the one to index and hand back.
    pub(super) fn kept(timer: SlotTimer) -> (Self, SlotTimer) {
        let packed = Self::pack(timer);
        // An armed pack always unpacks; the fallback is never taken.
        (packed, packed.unpack().unwrap_or(timer))
    }

    pub(super) fn unpack(self) -> Option<SlotTimer> {
        (self.jitter_millis != Self::DISARMED).then(|| SlotTimer {
            // Seconds and fraction taken from a timestamp always make one again.
            next_slot: Timestamp::new(self.next_second, self.next_subsec_nanos).unwrap_or(Timestamp::MAX),
            next_mono: (self.next_mono_nanos != Self::NO_MONO)
                .then(|| Mono::from_duration(Duration::from_nanos(self.next_mono_nanos))),
            jitter: Duration::from_millis(u64::from(self.jitter_millis)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::schedule::Schedule;
    use crate::ports::clock::Now;
    use jiff::SignedDuration;

    fn timer(secs: i64, jitter: Duration) -> SlotTimer {
        let now = Now {
            wall: Timestamp::from_second(1_767_225_600 + secs).expect("in range"),
            mono: Mono::from_duration(Duration::from_secs(secs.unsigned_abs())),
        };
        SlotTimer::first(now, &Schedule::Every(Duration::from_secs(5)), jitter).expect("every has a first slot")
    }

    #[test]
    fn a_packed_timer_is_24_bytes() {
        assert_eq!(std::mem::size_of::<PackedTimer>(), 24);
        assert_eq!(std::mem::size_of::<Option<SlotTimer>>(), 48);
    }

    #[test]
    fn a_timer_unpacks_as_it_was() {
        let every = timer(7, Duration::from_millis(2_500));
        assert!(every.next_mono.is_some());
        assert_eq!(PackedTimer::pack(every).unpack(), Some(every));
        let wall_only = SlotTimer { next_mono: None, jitter: Duration::from_millis(1_234), ..every };
        assert_eq!(PackedTimer::pack(wall_only).unpack(), Some(wall_only));
        // Slots at the ends of jiff's range, before the epoch with a fraction, and an hour's
        // jitter (the most a definition may have).
        let before_epoch = Timestamp::UNIX_EPOCH - SignedDuration::from_nanos(1_500_000_001);
        for next_slot in [Timestamp::MIN, before_epoch, Timestamp::UNIX_EPOCH, Timestamp::MAX] {
            let edge = SlotTimer { next_slot, jitter: Duration::from_secs(3_600), ..every };
            assert_eq!(PackedTimer::pack(edge).unpack(), Some(edge), "{next_slot}");
        }
        assert_eq!(PackedTimer::none().unpack(), None);
    }

    #[test]
    fn a_finer_or_longer_jitter_is_kept_to_the_millisecond_and_stays_armed() {
        let every = timer(7, Duration::ZERO);
        let fine = SlotTimer { jitter: Duration::from_micros(1_500), ..every };
        let (_, kept) = PackedTimer::kept(fine);
        assert_eq!(kept, SlotTimer { jitter: Duration::from_millis(1), ..fine });
        let longest = SlotTimer { jitter: Duration::MAX, ..every };
        let (packed, kept) = PackedTimer::kept(longest);
        assert_eq!(packed.unpack(), Some(kept), "no jitter reads as disarmed");
        assert_eq!(kept.jitter, Duration::from_millis(u64::from(u32::MAX - 1)));
    }
}
