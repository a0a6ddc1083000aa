//! The breaker's recovery, judged by the checker's own reading of the rules: an open
//! breaker is not half-opened before its cooldown has passed (by the pause's clock rules,
//! ADR 0005: whichever of the wall and monotonic clocks gets there first; after a restart
//! what is left is read off the wall clock, at most the whole cooldown); once it has
//! passed, a running engine half-opens it (within a bound, judged once faults are off,
//! at the half-open or at the end); and each opening from closed and each close by
//! a probe is announced at most once, never without one.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use systole::core::ids::HeartbeatKey;
use systole::limits::{BREAKER_HALF_OPEN_RETRY_SECS, DRIVER_SLEEP_SECS_MAX};
use systole::ports::messenger::DeliveryKind;

use super::{fail, signed, Step, DEADLINE_SLACK};
use crate::faults::FaultKind;
use crate::ports::store::{ARMING_LOAD, HALF_OPEN_WRITE};
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
    /// When that deadline was set (the trip, or the start of the current life).
    since: Duration,
}

impl Open {
    fn wall_end(&self) -> Timestamp {
        self.opened_wall + signed(self.length)
    }

    /// The elapsed time by which a running engine half-opens it once faults went off at
    /// `healed_at`: its monotonic deadline or its end by the wall, whichever comes first
    /// (after healing the wall clock is elapsed time plus `wall_offset`), not before the
    /// healing.
    fn due_after_healing(&self, healed_at: Duration, wall_offset: SignedDuration) -> Duration {
        let wall_end = self.wall_end().duration_since(Timestamp::UNIX_EPOCH) - wall_offset;
        let wall_end = if wall_end.is_negative() { Duration::ZERO } else { wall_end.unsigned_abs() };
        self.mono_end.min(wall_end).max(healed_at)
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
    /// When a half-open write failed (elapsed), and when a start-up's load did.
    half_open_write_failures: Vec<Duration>,
    load_failures: Vec<Duration>,
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
                let open =
                    Open { opened_wall: finished_at, length, mono_end: entry.elapsed + length, since: entry.elapsed };
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

    /// The store half-opened `key` at `entry`; `healed` is when faults went off and the wall
    /// clock's offset from elapsed time from then on, once they have.
    pub fn half_opened(
        &mut self,
        entry: &Entry,
        key: &HeartbeatKey,
        healed: Option<(Duration, SignedDuration)>,
    ) -> Step {
        let Some(open) = self.open.remove(key) else {
            return fail(BREAKER_COOLDOWN, format!("{key} was half-opened, but no open breaker of it has a cooldown"));
        };
        // As late as `probes_due` would find it missing at the end: a probe that came at
        // all, but later (a restart that counted the whole cooldown again), is as wrong.
        if let Some(message) = self.late(entry, key, &open) {
            return fail(BREAKER_COOLDOWN, message);
        }
        if let Some((healed_at, wall_offset)) = healed {
            let due = open.due_after_healing(healed_at, wall_offset);
            if entry.elapsed > due + HALF_OPEN_BOUND {
                let message = format!(
                    "{key} was half-opened at +{:?}, though its {:?} cooldown ended by +{due:?}",
                    entry.elapsed, open.length
                );
                return fail(BREAKER_COOLDOWN, message);
            }
        }
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
            open.since = entry.elapsed;
        }
    }

    /// A fault fired at `entry`: a failed half-open write is tried again after
    /// `BREAKER_HALF_OPEN_RETRY_SECS`, and a start-up's failed load arms what it did not
    /// read later, its cooldowns too.
    pub fn fault(&mut self, entry: &Entry, kind: FaultKind, detail: &str) {
        match kind {
            FaultKind::StoreError if detail.starts_with(HALF_OPEN_WRITE) => {
                self.half_open_write_failures.push(entry.elapsed);
            }
            FaultKind::StoreReadError if detail.starts_with(ARMING_LOAD) => self.load_failures.push(entry.elapsed),
            _ => {}
        }
    }

    /// Why `open` of `key`, half-opened at `entry`, came later than the engine's own clock
    /// allows: its monotonic deadline (the wall's end may come first, never later), one
    /// retry of each failed half-open write since the deadline was set, and a driver's
    /// sleep. Unjudged when a start-up's load failed in that time.
    fn late(&self, entry: &Entry, key: &HeartbeatKey, open: &Open) -> Option<String> {
        let within = |at: &&Duration| **at > open.since && **at <= entry.elapsed;
        if self.load_failures.iter().any(|at| within(&at)) {
            return None;
        }
        let retries = self.half_open_write_failures.iter().filter(within).count() as u32;
        let allowed = open.mono_end + HALF_OPEN_BOUND + Duration::from_secs(BREAKER_HALF_OPEN_RETRY_SECS) * retries;
        (entry.elapsed > allowed).then(|| {
            format!(
                "{key} was half-opened at +{:?}, though its {:?} cooldown ended by +{:?} on the engine's clock \
                 ({retries} failed half-open writes since +{:?})",
                entry.elapsed, open.length, open.mono_end, open.since
            )
        })
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
            let due = open.due_after_healing(healed_at, wall_offset);
            if end > due + HALF_OPEN_BOUND {
                let message =
                    format!("{key}: its cooldown ended by +{due:?}, and it was never half-opened (end +{end:?})");
                return fail(BREAKER_COOLDOWN, message);
            }
        }
        Ok(())
    }
}
