//! The breaker's recovery, judged by the checker's own reading of the rules: an open
//! breaker is not half-opened before its cooldown has passed (by the pause's clock rules,
//! ADR 0005: whichever of the wall and monotonic clocks gets there first; after a restart
//! what is left is read off the wall clock, at most the whole cooldown); once it has
//! passed, a running engine half-opens it; and each opening from closed and each close by
//! a probe is announced at most once, never without one.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use systole::core::ids::HeartbeatKey;
use systole::limits::{BREAKER_HALF_OPEN_RETRY_SECS, DRIVER_SLEEP_SECS_MAX};
use systole::ports::messenger::DeliveryKind;

use super::{fail, signed, Step, DEADLINE_SLACK};
use crate::trace::Entry;

/// No probe before the cooldown; a probe once it is over.
pub const BREAKER_COOLDOWN: &str = "breaker-cooldown";
/// Announcements match the breaker's openings and closes, one each at most.
pub const BREAKER_ANNOUNCED: &str = "breaker-announced";

/// How late after its cooldown a running engine may half-open a breaker: one failed store
/// write's retry plus one driver sleep, with room for scheduling.
const HALF_OPEN_BOUND: Duration = Duration::from_secs(BREAKER_HALF_OPEN_RETRY_SECS + DRIVER_SLEEP_SECS_MAX + 5);

#[derive(Debug, Clone, Copy)]
struct Open {
    /// When the tripping run finished (wall clock), and the cooldown from there.
    opened_wall: Timestamp,
    length: Duration,
    /// Elapsed time at which the monotonic deadline of the current life falls.
    mono_end: Duration,
}

impl Open {
    fn wall_end(&self) -> Timestamp {
        self.opened_wall + signed(self.length)
    }
}

#[derive(Debug, Default)]
pub struct BreakerModel {
    /// The run's cooldown ladder and failure limit.
    ladder: Vec<Duration>,
    failures_max: u32,
    open: BTreeMap<HeartbeatKey, Open>,
    /// Announcements owed, per heartbeat and kind.
    owed: BTreeMap<(HeartbeatKey, &'static str), u32>,
    /// When each heartbeat was half-opened (elapsed): its cadence starts again there.
    half_opened: BTreeMap<HeartbeatKey, Vec<Duration>>,
    /// When each heartbeat's breaker opened (elapsed), and closed again if it did (by a
    /// probe or an operator): it decides nothing of its own in between.
    open_spans: BTreeMap<HeartbeatKey, Vec<(Duration, Option<Duration>)>>,
    /// The wall clock as read in the last `HALF_OPEN_BOUND`: a half-open the engine decided
    /// then (the cooldown over by the wall) may be written only after a failed write's
    /// retry, when a backward jump has put the wall back before the end.
    recent_walls: std::collections::VecDeque<(Duration, Timestamp)>,
}

/// The cooldown for a trip with `failures` in a row: the ladder's step for this trip (the
/// first at the limit, one more per failed probe), the last step repeating.
fn cooldown(ladder: &[Duration], failures: u32, failures_max: u32) -> Option<Duration> {
    let trips_before = failures.saturating_sub(failures_max) as usize;
    let last = ladder.len().checked_sub(1)?;
    Some(ladder[trips_before.min(last)])
}

impl BreakerModel {
    pub fn new(ladder: Vec<Duration>, failures_max: u32) -> Self {
        Self { ladder, failures_max, ..Self::default() }
    }

    /// A run's result tripped the breaker (durably) at `entry`.
    pub fn tripped(&mut self, entry: &Entry, key: &HeartbeatKey, finished_at: Timestamp, failures: u32, opened: bool) {
        match cooldown(&self.ladder, failures, self.failures_max) {
            Some(length) => {
                let open = Open { opened_wall: finished_at, length, mono_end: entry.elapsed + length };
                self.open.insert(key.clone(), open);
            }
            None => {
                self.open.remove(key);
            }
        }
        if opened {
            *self.owed.entry((key.clone(), DeliveryKind::BreakerOpened.as_str())).or_default() += 1;
        }
        let spans = self.open_spans.entry(key.clone()).or_default();
        if spans.last().is_none_or(|(_, until)| until.is_some()) {
            spans.push((entry.elapsed, None));
        }
    }

    /// The breaker of `key` stopped holding it at `at` (half-open, enabled, replaced, deleted).
    fn span_ends(&mut self, key: &HeartbeatKey, at: Duration) {
        if let Some((_, until @ None)) = self.open_spans.get_mut(key).and_then(|spans| spans.last_mut()) {
            *until = Some(at);
        }
    }

    /// Whether the breaker of `key` held it open at some time in `[from, to]`.
    pub fn open_between(&self, key: &HeartbeatKey, from: Duration, to: Duration) -> bool {
        self.open_spans.get(key).is_some_and(|spans| {
            spans.iter().any(|(open, until)| *open <= to && until.is_none_or(|until| from <= until))
        })
    }

    /// Whether the breaker of `key` held it open at `at`.
    pub fn was_open(&self, key: &HeartbeatKey, at: Duration) -> bool {
        self.open_spans
            .get(key)
            .is_some_and(|spans| spans.iter().any(|(from, until)| *from <= at && until.is_none_or(|until| at <= until)))
    }

    /// A probe's success closed the breaker (durably).
    pub fn closed(&mut self, key: &HeartbeatKey) {
        *self.owed.entry((key.clone(), DeliveryKind::BreakerClosed.as_str())).or_default() += 1;
    }

    /// An operator's enable or disable, a new definition or a delete: no probe is owed.
    pub fn forget(&mut self, entry: &Entry, key: &HeartbeatKey) {
        self.open.remove(key);
        self.span_ends(key, entry.elapsed);
    }

    /// Every entry's clock readings, for [`Self::half_opened`].
    pub fn saw(&mut self, entry: &Entry) {
        self.recent_walls.push_back((entry.elapsed, entry.wall));
        while self.recent_walls.front().is_some_and(|(at, _)| *at + HALF_OPEN_BOUND < entry.elapsed) {
            self.recent_walls.pop_front();
        }
    }

    /// The store half-opened `key` at `entry`.
    pub fn half_opened(&mut self, entry: &Entry, key: &HeartbeatKey) -> Step {
        let Some(open) = self.open.remove(key) else {
            return fail(BREAKER_COOLDOWN, format!("{key} was half-opened, but no open breaker of it has a cooldown"));
        };
        self.half_opened.entry(key.clone()).or_default().push(entry.elapsed);
        self.span_ends(key, entry.elapsed);
        let slack = signed(DEADLINE_SLACK);
        // By the wall as read now or within one failed write's retry before (the engine
        // decided then, and retried the write).
        let wall_over = self
            .recent_walls
            .iter()
            .chain([(entry.elapsed, entry.wall)].iter())
            .any(|(_, wall)| *wall + slack >= open.wall_end());
        let mono_over = entry.elapsed + DEADLINE_SLACK >= open.mono_end;
        if !wall_over && !mono_over {
            let message = format!(
                "{key} was half-opened at {} (+{:?}), before its {:?} cooldown ended (wall {}, elapsed +{:?})",
                entry.wall,
                entry.elapsed,
                open.length,
                open.wall_end(),
                open.mono_end
            );
            return fail(BREAKER_COOLDOWN, message);
        }
        Ok(())
    }

    /// A new life started at `entry`: the monotonic deadlines are gone; what is left of
    /// each cooldown comes from the wall clock, at most its whole length.
    pub fn restarted(&mut self, entry: &Entry) {
        for open in self.open.values_mut() {
            let left = open.wall_end().duration_since(entry.wall);
            let left = if left.is_negative() { Duration::ZERO } else { left.unsigned_abs() };
            open.mono_end = entry.elapsed + left.min(open.length);
        }
    }

    /// An announcement of `key` went out.
    pub fn announced(&mut self, key: &HeartbeatKey, kind: DeliveryKind) -> Step {
        let Some(owed) = self.owed.get_mut(&(key.clone(), kind.as_str())).filter(|owed| **owed > 0) else {
            return fail(
                BREAKER_ANNOUNCED,
                format!("{key}: a {} announcement with no such change owed", kind.as_str()),
            );
        };
        *owed -= 1;
        Ok(())
    }

    /// The latest half-open of `key` in `(after, until]`, if any: its cadence restarts there.
    pub fn half_opened_between(&self, key: &HeartbeatKey, after: Duration, until: Duration) -> Option<Duration> {
        self.half_opened.get(key)?.iter().rev().find(|at| **at > after && **at <= until).copied()
    }

    /// At the end: every cooldown that ended after healing (faults off), early enough,
    /// was followed by a half-open. `present` says which heartbeats still exist.
    pub fn probes_due(
        &self,
        end: Duration,
        healed_at: Duration,
        wall_offset: SignedDuration,
        present: impl Fn(&HeartbeatKey) -> bool,
        mut count: impl FnMut(),
    ) -> Step {
        for (key, open) in self.open.iter().filter(|(key, _)| present(key)) {
            count();
            // After healing the wall clock is elapsed time plus the offset.
            let wall_end = open.wall_end().duration_since(Timestamp::UNIX_EPOCH) - wall_offset;
            let wall_end = if wall_end.is_negative() { Duration::ZERO } else { wall_end.unsigned_abs() };
            let due = open.mono_end.min(wall_end).max(healed_at);
            if end > due + HALF_OPEN_BOUND {
                let message =
                    format!("{key}: its cooldown ended by +{due:?}, and it was never half-opened (end +{end:?})");
                return fail(BREAKER_COOLDOWN, message);
            }
        }
        Ok(())
    }
}
