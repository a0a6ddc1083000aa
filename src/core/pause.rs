//! An agent's heartbeat pause (`pause_heartbeats`), and when it ends under clock faults.
//!
//! A pause ends when the wall clock reaches `until` or when the requested time has passed
//! on the monotonic clock, whichever comes first: a backward wall jump can never make it
//! last longer than asked, and a forward jump past `until` ends it. After a restart the
//! monotonic reading is gone, so the remaining time is read off the wall clock and clamped
//! to the maximum pause (a wall clock that jumped back before the restart cannot stretch
//! it). See docs/adr/0005-pause-under-clock-faults.md.

use std::time::Duration;

use jiff::Timestamp;

use crate::core::slots::add;
use crate::limits::{PAUSE_MINUTES_DEFAULT, PAUSE_MINUTES_MIN};
use crate::ports::clock::{Mono, Now};

/// What the store keeps of a pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseRecord {
    pub until: Timestamp,
    pub minutes: u32,
    pub set_at: Timestamp,
}

/// A pause in effect in a running engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    pub record: PauseRecord,
    /// When it ends on this process's monotonic clock.
    pub mono_deadline: Mono,
}

impl Pause {
    /// A pause of `minutes` starting at `now`.
    pub fn start(now: Now, minutes: u32) -> Self {
        let length = minutes_to_duration(minutes);
        let record = PauseRecord { until: add(now.wall, length), minutes, set_at: now.wall };
        Self { record, mono_deadline: now.mono + length }
    }

    /// A stored pause picked up after a restart: what is left by the wall clock, at most
    /// `minutes_max`.
    pub fn resume(now: Now, record: PauseRecord, minutes_max: u32) -> Self {
        let left = record.until.duration_since(now.wall);
        let left = if left.is_negative() { Duration::ZERO } else { left.unsigned_abs() };
        Self { record, mono_deadline: now.mono + left.min(minutes_to_duration(minutes_max)) }
    }

    /// Whether the pause still holds at `now`.
    pub fn holds(&self, now: Now) -> bool {
        now.wall < self.record.until && now.mono < self.mono_deadline
    }

    /// How long until it ends at the latest, from `now` (for the driver's wake-up).
    pub fn ends_within(&self, now: Now) -> Duration {
        let by_mono = self.mono_deadline.saturating_since(now.mono);
        let by_wall = self.record.until.duration_since(now.wall);
        let by_wall = if by_wall.is_negative() { Duration::ZERO } else { by_wall.unsigned_abs() };
        by_mono.min(by_wall)
    }
}

fn minutes_to_duration(minutes: u32) -> Duration {
    Duration::from_secs(u64::from(minutes) * 60)
}

/// Why `pause_heartbeats` refused its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PauseArgumentError {
    #[error("`minutes` must be a whole number of minutes, like 5; got {0}")]
    NotAnInteger(String),
}

/// Reads `minutes` from the tool's JSON arguments: absent or null means the default;
/// whole numbers (also written as `5.0` or `"5"`) are clamped to `[1, minutes_max]`.
///
/// # Errors
/// When `minutes` is present but not a whole number.
pub fn pause_minutes(arguments: &serde_json::Value, minutes_max: u32) -> Result<u32, PauseArgumentError> {
    let value = arguments.get("minutes").unwrap_or(&serde_json::Value::Null);
    let minutes: i128 = match value {
        serde_json::Value::Null => i128::from(PAUSE_MINUTES_DEFAULT),
        serde_json::Value::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(whole), _, _) => i128::from(whole),
            (_, Some(whole), _) => i128::from(whole),
            (_, _, Some(float)) if float.fract() == 0.0 && float.is_finite() => float.clamp(-1e12, 1e12) as i128,
            _ => return Err(PauseArgumentError::NotAnInteger(value.to_string())),
        },
        serde_json::Value::String(text) => {
            text.trim().parse::<i128>().map_err(|_| PauseArgumentError::NotAnInteger(value.to_string()))?
        }
        _ => return Err(PauseArgumentError::NotAnInteger(value.to_string())),
    };
    let clamped = minutes.clamp(i128::from(PAUSE_MINUTES_MIN), i128::from(minutes_max.max(PAUSE_MINUTES_MIN)));
    Ok(u32::try_from(clamped).unwrap_or(PAUSE_MINUTES_MIN))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn now(wall: &str, mono_secs: u64) -> Now {
        Now { wall: wall.parse().expect("timestamp"), mono: Mono::from_duration(Duration::from_secs(mono_secs)) }
    }

    #[test]
    fn minutes_default_and_clamp() {
        assert_eq!(pause_minutes(&json!({}), 60), Ok(2));
        assert_eq!(pause_minutes(&json!({ "minutes": null }), 60), Ok(2));
        assert_eq!(pause_minutes(&json!({ "minutes": 10 }), 60), Ok(10));
        assert_eq!(pause_minutes(&json!({ "minutes": 0 }), 60), Ok(1));
        assert_eq!(pause_minutes(&json!({ "minutes": -5 }), 60), Ok(1));
        assert_eq!(pause_minutes(&json!({ "minutes": 500 }), 60), Ok(60));
        assert_eq!(pause_minutes(&json!({ "minutes": 500 }), 360), Ok(360));
        assert_eq!(pause_minutes(&json!({ "minutes": u64::MAX }), 60), Ok(60));
        assert_eq!(pause_minutes(&json!({ "minutes": 5.0 }), 60), Ok(5));
        assert_eq!(pause_minutes(&json!({ "minutes": "7" }), 60), Ok(7));
    }

    #[test]
    fn garbage_minutes_are_a_readable_error() {
        for bad in [
            json!({ "minutes": 2.5 }),
            json!({ "minutes": "soon" }),
            json!({ "minutes": [1] }),
            json!({ "minutes": true }),
        ] {
            let error = pause_minutes(&bad, 60).expect_err("refused");
            assert!(error.to_string().contains("whole number"), "{error}");
        }
    }

    #[test]
    fn ends_on_time_without_faults() {
        let pause = Pause::start(now("2026-01-01T10:00:00Z", 0), 5);
        assert_eq!(pause.record.until, "2026-01-01T10:05:00Z".parse::<Timestamp>().expect("ts"));
        assert!(pause.holds(now("2026-01-01T10:04:59Z", 299)));
        assert!(!pause.holds(now("2026-01-01T10:05:00Z", 300)));
    }

    #[test]
    fn a_skewed_wall_clock_changes_nothing() {
        // The wall clock runs 5 s ahead of true time, consistently: the pause is 5 minutes long.
        let pause = Pause::start(now("2026-01-01T10:00:05Z", 0), 5);
        assert!(pause.holds(now("2026-01-01T10:05:04Z", 299)));
        assert!(!pause.holds(now("2026-01-01T10:05:05Z", 300)));
    }

    #[test]
    fn a_forward_jump_past_until_ends_it() {
        let pause = Pause::start(now("2026-01-01T10:00:00Z", 0), 5);
        assert!(!pause.holds(now("2026-01-01T11:00:00Z", 60)), "wall reached until first");
        // A forward jump short of until does not end it early by itself.
        assert!(pause.holds(now("2026-01-01T10:04:00Z", 60)));
    }

    #[test]
    fn a_backward_jump_never_makes_it_longer() {
        let pause = Pause::start(now("2026-01-01T10:00:00Z", 0), 5);
        // 30 s later the wall clock steps back an hour: by the wall it would last until 11:05.
        assert!(pause.holds(now("2026-01-01T09:01:00Z", 60)));
        assert!(!pause.holds(now("2026-01-01T09:05:00Z", 300)), "ends after 5 minutes of elapsed time");
    }

    #[test]
    fn after_a_restart_the_wall_clock_decides_within_the_maximum() {
        let record = PauseRecord {
            until: "2026-01-01T10:05:00Z".parse().expect("ts"),
            minutes: 5,
            set_at: "2026-01-01T10:00:00Z".parse().expect("ts"),
        };
        // Restarted at 10:03 with a fresh monotonic clock: two minutes are left.
        let resumed = Pause::resume(now("2026-01-01T10:03:00Z", 7), record, 60);
        assert!(resumed.holds(now("2026-01-01T10:04:59Z", 126)));
        assert!(!resumed.holds(now("2026-01-01T10:05:00Z", 127)));
        // Restarted long after: already over.
        assert!(!Pause::resume(now("2026-01-01T12:00:00Z", 0), record, 60).holds(now("2026-01-01T12:00:00Z", 0)));
        // Restarted after the wall clock went back three hours: clamped to the 60-minute maximum.
        let stretched = Pause::resume(now("2026-01-01T07:00:00Z", 0), record, 60);
        assert_eq!(stretched.mono_deadline, Mono::from_duration(Duration::from_secs(3_600)));
        assert!(!stretched.holds(now("2026-01-01T08:00:00Z", 3_600)));
    }

    #[test]
    fn ends_within_is_the_nearer_end() {
        let pause = Pause::start(now("2026-01-01T10:00:00Z", 0), 5);
        assert_eq!(pause.ends_within(now("2026-01-01T10:01:00Z", 60)), Duration::from_secs(240));
        assert_eq!(pause.ends_within(now("2026-01-01T10:04:00Z", 60)), Duration::from_secs(60), "wall is nearer");
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever the wall clock does, a pause never holds past its requested elapsed
        /// time, and never holds once the wall clock reaches `until`.
        #[test]
        fn never_outlasts_either_clock(
            minutes in 1u32..360,
            wall_offsets in proptest::collection::vec((-20_000i64..20_000, 0u64..30_000), 1..20),
        ) {
            let start = Now { wall: Timestamp::from_second(1_800_000_000).expect("in range"), mono: Mono::ZERO };
            let pause = Pause::start(start, minutes);
            let length = Duration::from_secs(u64::from(minutes) * 60);
            for (wall_step, mono_secs) in wall_offsets {
                let mono = Mono::from_duration(Duration::from_secs(mono_secs));
                let wall = start.wall.checked_add(jiff::SignedDuration::from_secs(mono_secs as i64 + wall_step)).expect("in range");
                let now = Now { wall, mono };
                if pause.holds(now) {
                    prop_assert!(mono.since_origin() < length);
                    prop_assert!(wall < pause.record.until);
                }
            }
        }

        /// After a restart a pause never holds longer than the maximum, however far back
        /// the wall clock went.
        #[test]
        fn a_resumed_pause_is_bounded_by_the_maximum(back_secs in 0i64..1_000_000, max in 1u32..360) {
            let record = PauseRecord {
                until: Timestamp::from_second(1_800_000_000).expect("in range"),
                minutes: max,
                set_at: Timestamp::from_second(1_800_000_000 - 60).expect("in range"),
            };
            let wall = record.until.checked_sub(jiff::SignedDuration::from_secs(back_secs)).expect("in range");
            let resumed = Pause::resume(Now { wall, mono: Mono::ZERO }, record, max);
            prop_assert!(resumed.mono_deadline.since_origin() <= Duration::from_secs(u64::from(max) * 60));
        }
    }
}
