//! The schedule invariants: slots start in order, catch-up follows its policy (a reference
//! model walks the passed slots itself), failures back off, calendar slots wait for the
//! wall clock, and after healing every cron and `at` slot is decided.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use systole::core::ids::HeartbeatKey;
use systole::core::policy::{CatchUp, Overlap};
use systole::core::schedule::Schedule;
use systole::limits::CATCHUP_GRACE_SECS;

use super::reference::{backoff_after, jitter, next_slot};
use super::{
    fail, signed, Model, Step, BACKOFF, CALENDAR_TIME, CATCH_UP, DEADLINE_SLACK, LIVENESS_SLACK_SECS, SETTLE_SECS,
    SLOTS_EXPECTED, SLOT_ON_SCHEDULE, SLOT_ORDER,
};
use crate::trace::Entry;

/// Slots the catch-up reference walks after one gap before it leaves the case to unit tests.
const CATCH_UP_WALK_MAX: usize = 100_000;

impl Model<'_> {
    /// Slot order, the catch-up policy, and the error backoff, at each run's start.
    pub(super) fn schedule_rules(&mut self, entry: &Entry, key: &HeartbeatKey, slot: Timestamp) -> Step {
        if self.is_trigger(key, slot) {
            return Ok(()); // an operator's slot: the time it was asked for, outside the schedule
        }
        self.count(SLOT_ORDER);
        if let Some(last) = self.last_started.insert(key.clone(), slot) {
            if slot <= last {
                return fail(SLOT_ORDER, format!("{key} started slot {slot} after slot {last}"));
            }
        }
        self.count(BACKOFF);
        // An explicit wake of the agent heartbeat goes through a backoff by design.
        let backoff = self.backoffs.get(key).copied().filter(|_| !self.agents.explicit(key));
        if let Some((failed_at, until)) = backoff {
            // A slot due at the very instant the failure finished may be decided before the
            // driver hears of it.
            if entry.elapsed > failed_at + DEADLINE_SLACK && entry.elapsed + DEADLINE_SLACK < until {
                let message = format!(
                    "{key} started slot {slot} {:?} after a failure, inside its {:?} backoff",
                    entry.elapsed - failed_at,
                    until - failed_at
                );
                return fail(BACKOFF, message);
            }
        }
        let Some(def) = self.running_defs.get(key).cloned() else { return Ok(()) };
        if key.heartbeat.is_reserved() {
            // The agent heartbeat runs on wakes; its schedule only requests them, and a
            // wake is recorded under the time it is decided (`agents` checks those runs).
            return Ok(());
        }
        let jitter = jitter(key, def.policy.jitter_max);
        let due = |at: Timestamp| at.checked_add(signed(jitter)).unwrap_or(at);
        // Held (`buffer_one`) and backlog (`all`) slots start when their turn comes: later,
        // and after a backward wall jump maybe at an earlier wall time than they were due.
        let queued = def.policy.overlap == Overlap::BufferOne || def.policy.catch_up == CatchUp::All;
        // So may a slot that waited for a place to run (ADR 0023): one the wall clock had
        // reached in this life, in a seed whose engine ran full; its catch-up is judged.
        let waited = self.admission.filled > 0 && self.wall_high_water.is_some_and(|high| due(slot) <= high);
        // Classified here, not by the engine's `Schedule::interval`, which a bug could change.
        let calendar = matches!(def.schedule, Schedule::Cron(_) | Schedule::At(_));
        if calendar && !queued && !waited {
            // Cron and `at` slots are calendar times: never started before the wall clock
            // reaches them, whatever elapsed time says.
            self.count(CALENDAR_TIME);
            if entry.wall + signed(DEADLINE_SLACK) < due(slot) {
                let message =
                    format!("{key} ({}) started slot {slot} at wall {}, before it was due", def.schedule, entry.wall);
                return fail(CALENDAR_TIME, message);
            }
        }
        if queued {
            return Ok(());
        }
        self.count(CATCH_UP);
        if let Some(next) = next_slot(&mut self.crons, &def.schedule, slot) {
            if due(next) + signed(DEADLINE_SLACK) <= entry.wall {
                let message = format!(
                    "{key} ({}) ran slot {slot} at {} though its later slot {next} had passed: catch-up runs only the latest",
                    def.policy.catch_up.as_str(),
                    entry.wall
                );
                return fail(CATCH_UP, message);
            }
        }
        let late = entry.wall.duration_since(due(slot));
        // An `at` has one slot, which runs however late (a past `at` runs at once).
        let one_shot = matches!(def.schedule, Schedule::At(_));
        let too_late = late > SignedDuration::from_secs(CATCHUP_GRACE_SECS as i64 + 1);
        if def.policy.catch_up == CatchUp::Skip && !one_shot && too_late {
            return fail(CATCH_UP, format!("{key} (catch-up skip) ran slot {slot} {late} late, a missed slot"));
        }
        Ok(())
    }

    /// A decided cron slot is one of the schedule's own, by the reference's
    /// reading of the expression (an `every` grid starts wherever it is armed).
    pub(super) fn slot_on_schedule(&mut self, key: &HeartbeatKey, slot: Timestamp) -> Step {
        if self.is_trigger(key, slot) || key.heartbeat.is_reserved() {
            return Ok(()); // an operator's slot, or a wake recorded under its decision time
        }
        // Their schedules only (a cron's is shared): this runs for every decided slot.
        let calendar: Vec<Schedule> = [self.running_defs.get(key), self.defs.get(key), self.previous_defs.get(key)]
            .into_iter()
            .flatten()
            .map(|def| def.schedule.clone())
            .collect();
        // An `at` that failed retries under the instant of each retry, and an `every` grid
        // starts anywhere: only when every definition that may decide is a cron is it judged.
        if calendar.is_empty() || !calendar.iter().all(|schedule| matches!(schedule, Schedule::Cron(_))) {
            return Ok(());
        }
        self.count(SLOT_ON_SCHEDULE);
        let just_before = slot - SignedDuration::from_millis(1);
        // Between a replace and the driver applying it, either definition may decide.
        if calendar.iter().any(|schedule| next_slot(&mut self.crons, schedule, just_before) == Some(slot)) {
            return Ok(());
        }
        let schedule = &calendar[0];
        let expected = next_slot(&mut self.crons, schedule, just_before);
        let message = format!(
            "{key} ({schedule}) decided slot {slot}, not one of its schedule's; the reference's next is {expected:?}"
        );
        fail(SLOT_ON_SCHEDULE, message)
    }

    pub(super) fn lift_backoff(&mut self, key: &HeartbeatKey) {
        if let Some(backoff) = self.backoffs.remove(key) {
            self.lifted_backoffs.insert(key.clone(), backoff);
        }
    }

    /// A timer fired after a gap: the checker walks the passed slots itself, from the slot
    /// the heartbeat was armed for, and derives what the policy runs; the engine's report
    /// must match, and its next decisions must be exactly those slots, in order.
    pub(super) fn catch_up_fired(
        &mut self,
        entry: &Entry,
        key: &HeartbeatKey,
        first: Timestamp,
        runs_count: u64,
        missed: u64,
    ) -> Step {
        // Judged by the definition the driver runs: a replace written to the store but not
        // applied yet (a model's or a reload's, in flight) does not judge the old timer.
        let (Some(def), Some(armed)) =
            (self.running_defs.get(key).cloned(), self.armed.get(key).and_then(|a| a.last()))
        else {
            return Ok(());
        };
        let (_, armed) = *armed;
        let jitter = jitter(key, def.policy.jitter_max);
        let until = entry.wall - signed(jitter);
        let mut passed = vec![armed];
        while let Some(next) =
            next_slot(&mut self.crons, &def.schedule, passed[passed.len() - 1]).filter(|next| *next <= until)
        {
            if passed.len() >= CATCH_UP_WALK_MAX {
                return Ok(()); // too many to walk here; the engine's bounded walk is unit-tested
            }
            passed.push(next);
        }
        let latest = *passed.last().unwrap_or(&armed);
        let age = |slot: Timestamp| entry.wall.duration_since(slot + signed(jitter));
        let one_shot = matches!(def.schedule, Schedule::At(_));
        let runs: Vec<Timestamp> = match def.policy.catch_up {
            CatchUp::Skip if !one_shot && age(latest) > SignedDuration::from_secs(CATCHUP_GRACE_SECS as i64) => {
                Vec::new()
            }
            CatchUp::Skip | CatchUp::Once => vec![latest],
            CatchUp::All => {
                let window = signed(def.policy.catch_up_window);
                let mut runs: Vec<Timestamp> =
                    passed.iter().copied().filter(|slot| *slot == latest || age(*slot) <= window).collect();
                let cap = systole::limits::CATCHUP_RUNS_MAX;
                if runs.len() > cap {
                    runs.drain(..runs.len() - cap);
                }
                runs
            }
        };
        self.count(CATCH_UP);
        let expected_missed = passed.len() as u64 - runs.len() as u64;
        let expected_first = runs.first().copied().unwrap_or(armed);
        if (runs_count, missed, first) != (runs.len() as u64, expected_missed, expected_first) {
            let message = format!(
                "{key} ({}) fired after a gap from slot {armed}: the engine runs {runs_count} from {first} and misses \
                 {missed}, the reference model {} from {expected_first} and misses {expected_missed} ({} passed)",
                def.policy.catch_up.as_str(),
                runs.len(),
                passed.len()
            );
            return fail(CATCH_UP, message);
        }
        // (A slot `buffer_one` holds, unseen in the trace, may go first; `allow_all` is not ordered.)
        if def.policy.catch_up == CatchUp::All && def.policy.overlap == Overlap::Skip {
            let due = self.catch_up_due.entry(key.clone()).or_default();
            due.extend(runs.into_iter().map(|slot| (slot, entry.elapsed)));
        }
        Ok(())
    }

    /// A decision of `slot`: if a catch-up backlog is owed, it must be its next slot.
    pub(super) fn catch_up_next(&mut self, key: &HeartbeatKey, slot: Timestamp) -> Step {
        if self.is_trigger(key, slot) {
            return Ok(());
        }
        let changed = self.changed_at.get(key).copied();
        if self.catch_up_due.get(key).is_none_or(|due| due.is_empty()) {
            return Ok(());
        }
        self.count(CATCH_UP);
        let Some(due) = self.catch_up_due.get_mut(key) else { return Ok(()) };
        let Some(&(expected, fired_at)) = due.front() else { return Ok(()) };
        let dropped_by_change =
            |fired_at: Duration| changed.is_some_and(|changed| changed + DEADLINE_SLACK >= fired_at);
        if slot != expected && dropped_by_change(fired_at) {
            // An enable or a new definition, applied after the fire, dropped that fire's
            // backlog; a fire after the change owes its own (seed 972460009014).
            due.retain(|(_, fired_at)| !dropped_by_change(*fired_at));
        }
        let Some((expected, _)) = due.pop_front() else { return Ok(()) };
        if slot != expected {
            let message = format!("{key} (catch-up all) decided slot {slot} where its backlog owed slot {expected}");
            return fail(CATCH_UP, message);
        }
        Ok(())
    }

    /// A restart loses the monotonic backoff deadline; the engine waits the backoff of the
    /// stored failure count again, from start-up.
    pub(super) fn restart_backoffs(&mut self, entry: &Entry) {
        self.backoffs.clear();
        for (key, failures) in &self.failures {
            // A half-open breaker (enabled at the limit) waited out its cooldown instead.
            let half_open = *failures >= self.options.breaker_failures_max;
            if *failures > 0 && !half_open && self.present.get(key) == Some(&true) {
                let delay = backoff_after(&self.options.error_backoff, *failures);
                self.backoffs.insert(key.clone(), (entry.elapsed, entry.elapsed + delay));
            }
        }
    }

    /// The reference model of cron and `at` slots: after healing, every slot the schedule
    /// has whose due time falls in the liveness phase (and comes after the last slot decided
    /// before it) is decided, run or skipped with a reason.
    pub(super) fn slots_expected(&mut self, end: &Entry, heartbeats: &[(HeartbeatKey, bool)]) -> Step {
        let (Some(healed_at), Some(offset)) = (self.healed_at, self.healed_wall_offset) else { return Ok(()) };
        let from = healed_at + Duration::from_secs(SETTLE_SECS);
        let wall_from = Timestamp::UNIX_EPOCH + offset + signed(from);
        for (key, _) in heartbeats.iter().filter(|(_, enabled)| *enabled) {
            let Some(def) = self.defs.get(key).cloned() else { continue };
            if matches!(def.schedule, Schedule::Every(_)) {
                continue;
            }
            // A one-shot whose instant the log shows decided, by a run or skip at or above
            // it, owes nothing more; a wall clock that stepped back may bring its instant due
            // again after healing. An operator's trigger is not such a row (ADR 0049; seed
            // 1927871650505: a restart found a trigger's row above the instant, and the
            // one-shot's own slot was never run).
            if let Schedule::At(at) = def.schedule {
                let instant = Timestamp::from_millisecond(at.as_millisecond()).unwrap_or(at);
                if self.one_shots.instant_decided(key, instant) {
                    continue;
                }
            }
            let jitter = jitter(key, def.policy.jitter_max);
            let last_day = end.wall - signed(jitter) - SignedDuration::from_secs(LIVENESS_SLACK_SECS as i64);
            let decided = self.decided.get(key).cloned().unwrap_or_default();
            let decided_floor = decided.iter().filter(|(_, at)| **at < from).map(|(slot, _)| *slot).max();
            // The slot it was armed for when the liveness phase began is the first one owed.
            let armed = self.armed.get(key).and_then(|armed| armed.iter().rev().find(|(at, _)| *at < from));
            let armed_floor = armed.map(|(_, slot)| *slot - SignedDuration::from_millis(1));
            // A breaker half-opened since owes the slots from the one it was armed for then.
            let half_opened = self.breaker.half_opened_between(key, from, end.elapsed);
            let probe_floor = half_opened.and_then(|at| {
                let armed = self.armed.get(key)?.iter().find(|(armed_at, _)| *armed_at >= at)?;
                Some(armed.1 - SignedDuration::from_millis(1))
            });
            let floor = decided_floor.max(armed_floor).max(probe_floor);
            let before_window = wall_from - signed(jitter) - SignedDuration::from_millis(1);
            let mut cursor = floor.map_or(before_window, |floor| floor.max(before_window));
            while let Some(slot) = next_slot(&mut self.crons, &def.schedule, cursor).filter(|slot| *slot <= last_day) {
                self.count(SLOTS_EXPECTED);
                // Due while no run could start: it waited, and its catch-up policy chose.
                let due_at = slot + signed(jitter) - offset;
                let waited = due_at
                    .duration_since(Timestamp::UNIX_EPOCH)
                    .try_into()
                    .is_ok_and(|elapsed: Duration| self.admission.full_at(elapsed));
                // Or it passed while a slot before it waited, and its catch-up let them go.
                let let_go = self
                    .let_go
                    .get(key)
                    .is_some_and(|ranges| ranges.iter().any(|(from, until)| *from <= slot && slot <= *until));
                if !decided.contains_key(&slot) && !waited && !let_go {
                    let message =
                        format!("{key} ({}): slot {slot} was due after healing and never decided", def.schedule);
                    return fail(SLOTS_EXPECTED, message);
                }
                cursor = slot;
            }
        }
        Ok(())
    }
}
