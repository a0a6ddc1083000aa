//! What an operator asks of the running driver beyond changes: a look at every job with
//! the guard's verdict for "now" (the same chain a due slot goes through), and a run on
//! demand through the normal claim.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use super::Driver;
use crate::core::guard::{self, GuardInput, SkipReason};
use crate::core::heartbeat::JobKind;
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::policy::{on_overlap, OverlapDecision};
use crate::core::schedule::Schedule;
use crate::core::slots::truncate_to_millis;
use crate::core::wake::WakeReason;
use crate::driver::events::EngineEvent;
use crate::ports::clock::Now;

/// One job as the driver sees it at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub key: HeartbeatKey,
    pub kind: JobKind,
    pub enabled: bool,
    /// The next slot its timer is armed for (none when disabled or exhausted).
    pub next_slot: Option<Timestamp>,
    pub runs_in_flight: usize,
    /// Slots waiting behind a run (catch-up `all`, `buffer_one`) or for a place to run
    /// (admission, ADR 0023).
    pub waiting: usize,
    /// Until when a failed run's backoff holds its timed slots, on the wall clock.
    pub backoff_until: Option<Timestamp>,
    /// What the guard chain says of a timed slot due now: `Ok` or the reason it would skip.
    pub would_run_now: Result<(), SkipReason>,
    /// The agent heartbeat only: when its flood guard opens again, if it is closed.
    pub flood_guard_opens: Option<Timestamp>,
    /// Its breaker is open: when the probe runs (wall clock), if a cooldown is configured.
    pub breaker_probe_at: Option<Timestamp>,
    /// Its breaker is half-open: the next run is the probe.
    pub breaker_half_open: bool,
}

/// An agent's jobs by whether they are enabled ([`Driver::enabled_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnabledCounts {
    pub enabled: u64,
    pub disabled: u64,
}

/// What a trigger did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerOutcome {
    /// The slot is decided in this turn of the loop (run, or skipped with a reason the
    /// run log shows) under this slot.
    Queued {
        slot: Timestamp,
    },
    /// The agent heartbeat was asked to run (a manual wake, merged with others).
    WakeRequested,
    NotFound,
    /// Disabled jobs do not run; enabling also clears a tripped breaker.
    Disabled,
    /// A backfill's slots wait their turn behind the job's runs, oldest first.
    Backfilling {
        slots: Vec<Timestamp>,
    },
}

impl Driver {
    /// Every job (those of `only` it has, when named) with what a slot due `now` would
    /// meet. The agent heartbeat's file and lane are read when it runs, so they do not show
    /// here.
    pub(super) async fn inspect(&mut self, now: Now, only: Option<&[HeartbeatKey]>) -> Vec<JobView> {
        let agents: BTreeSet<_> = match only {
            Some(keys) => {
                keys.iter().filter(|key| self.entries.get(key).is_some()).map(|key| key.agent.clone()).collect()
            }
            None => self.entries.keys().map(|key| key.agent.clone()).collect(),
        };
        let spent = self.spent_budgets(agents, now).await;
        let jobs: Vec<_> = match only {
            Some(keys) => keys.iter().filter_map(|key| self.entries.get(key).map(|entry| (key, entry))).collect(),
            None => self.entries.iter().collect(),
        };
        let mut views = Vec::with_capacity(jobs.len());
        for (key, entry) in jobs {
            let in_backoff = entry.rare().backoff_until.is_some_and(|until| now.mono < until);
            let overlap =
                on_overlap(entry.def.common.policy.overlap, entry.runs_in_flight(), entry.rare().waiting.len());
            let opens = (entry.def.common.kind == JobKind::Agent)
                .then(|| self.floods.get(&key.agent).and_then(|flood| flood.check(now.mono).err()))
                .flatten();
            let flooded = opens.is_some();
            let input = GuardInput {
                enabled: entry.enabled,
                paused: self.pauses.get(&key.agent).is_some_and(|pause| pause.holds(now)),
                active_hours: entry.def.active_hours(),
                heartbeat_file_empty: false,
                user_busy: false,
                alerts_disabled: self.shows_nothing(&entry.def),
                flooded,
                cap_reached: Self::held_by_cap(&key.agent, &entry.def, &spent),
                in_backoff,
                run_in_flight: overlap == OverlapDecision::Skip,
                wall_now: now.wall,
            };
            let backoff_left =
                entry.rare().backoff_until.filter(|_| in_backoff).map(|until| until.saturating_since(now.mono));
            views.push(JobView {
                key: key.clone(),
                kind: entry.def.common.kind,
                enabled: entry.enabled,
                next_slot: self.entries.timer(key).map(|timer| timer.next_slot),
                runs_in_flight: entry.runs_in_flight(),
                waiting: entry.rare().waiting.len() + self.queued.get(key).copied().unwrap_or(0),
                backoff_until: backoff_left.map(|left| crate::core::slots::add(now.wall, left)),
                would_run_now: guard::check(input),
                flood_guard_opens: opens.map(|at| crate::core::slots::add(now.wall, at.saturating_since(now.mono))),
                breaker_probe_at: self.probe_at(key),
                breaker_half_open: entry.rare().half_open,
            });
        }
        views
    }

    /// The jobs with a run going, each once, in key order (the runs' map is ordered by
    /// key, then slot).
    pub(super) fn keys_in_flight(&self) -> Vec<HeartbeatKey> {
        let mut keys: Vec<HeartbeatKey> = self.runs.keys().map(|(key, _)| key.clone()).collect();
        keys.dedup();
        keys
    }

    /// Each agent's jobs, enabled and disabled.
    pub(super) fn enabled_counts(&self) -> BTreeMap<AgentId, EnabledCounts> {
        let mut counts: BTreeMap<AgentId, EnabledCounts> = BTreeMap::new();
        for (key, entry) in self.entries.iter() {
            let counted = counts.entry(key.agent.clone()).or_default();
            if entry.enabled {
                counted.enabled += 1;
            } else {
                counted.disabled += 1;
            }
        }
        counts
    }

    /// Runs `key` now, once, as an explicit request: its slot is the current time and is
    /// claimed like any other, so it runs at most once; a pause, quiet hours and a backoff
    /// do not hold it (they hold timed runs only, as for an explicit wake), while the
    /// budget, the overlap policy and a target that shows nothing still do.
    pub(super) fn trigger(&mut self, key: &HeartbeatKey, now: Now) -> TriggerOutcome {
        let Some(entry) = self.entries.get(key) else { return TriggerOutcome::NotFound };
        if !entry.enabled {
            return TriggerOutcome::Disabled;
        }
        if entry.def.common.kind == JobKind::Agent {
            self.request_wake(&key.agent, WakeReason::Manual, None, now);
            return TriggerOutcome::WakeRequested;
        }
        // Above the previous trigger's slot, so two triggers in one millisecond are two
        // slots; and never the instant of a slot of its own schedule, armed, later or
        // earlier (one just decided may not be logged yet, and a start-up arms above the
        // schedule's rows, not a trigger's: seed 1927872738237 offered it again), or of one
        // waiting (behind a run or for a place to run), which would make one claim of two
        // decisions (seeds 2283, 958830001851).
        let mut slot = truncate_to_millis(now.wall);
        if let Some(floor) = self.trigger_floor.get(key) {
            if slot <= *floor {
                slot = floor.checked_add(jiff::SignedDuration::from_millis(1)).unwrap_or(*floor);
            }
        }
        let timer = self.armed_or_held(key);
        // A slot of its schedule, which the trigger would take from it.
        let on_grid = |slot: Timestamp| match (entry.def.schedule(), timer) {
            (Schedule::Every(interval), Some(timer)) => {
                let since = slot.duration_since(timer.next_slot);
                let step = i128::try_from(interval.as_millis()).unwrap_or(i128::MAX);
                step > 0 && since.as_millis().rem_euclid(step) == 0
            }
            (Schedule::Every(_), None) => false,
            (schedule, _) => schedule.at_or_after(slot) == Some(slot),
        };
        let queued = self.queued.contains_key(key);
        let taken = |slot: Timestamp| {
            timer.is_some_and(|timer| timer.next_slot == slot)
                || on_grid(slot)
                || entry.rare().waiting.contains(&slot)
                || self.explicit.contains(&(key.clone(), slot))
                || (queued && self.admission_queue.contains(&(key.clone(), slot)))
        };
        let slot = crate::core::slots::first_free_millisecond(slot, taken);
        self.trigger_floor.insert(key.clone(), slot);
        self.triggered.push((key.clone(), slot));
        self.explicit.insert((key.clone(), slot));
        self.trigger_slots.insert((key.clone(), slot));
        self.context.events.emit(now.wall, &EngineEvent::Triggered { key: key.clone(), slot, backfill: false });
        TriggerOutcome::Queued { slot }
    }

    /// Runs past `slots` of `key` (a backfill), oldest first, one after another, each under
    /// its own slot and claimed like any other, so one already decided is not run again.
    /// Explicit requests, like a trigger.
    pub(super) fn backfill(&mut self, key: &HeartbeatKey, mut slots: Vec<Timestamp>, now: Now) -> TriggerOutcome {
        // Slots from the armed one on are the schedule's to decide, and one already waiting
        // (behind a run or for a place to run) or triggered is decided once: a backfill
        // takes only what the schedule passed.
        let armed = self.armed_or_held(key).map(|timer| timer.next_slot);
        let Some(entry) = self.entries.get_mut(key) else { return TriggerOutcome::NotFound };
        if !entry.enabled {
            return TriggerOutcome::Disabled;
        }
        let queued = self.queued.contains_key(key);
        let waits_for_room = |slot: &Timestamp| queued && self.admission_queue.contains(&(key.clone(), *slot));
        slots.sort();
        slots.dedup();
        slots.retain(|slot| {
            armed.is_none_or(|armed| *slot < armed)
                && !entry.rare().waiting.contains(slot)
                && !self.explicit.contains(&(key.clone(), *slot))
                && !waits_for_room(slot)
        });
        for slot in &slots {
            entry.with_rare(|rare| rare.waiting.push_back(*slot));
            self.backlogged.insert(key.clone());
            self.explicit.insert((key.clone(), *slot));
            let event = EngineEvent::Triggered { key: key.clone(), slot: *slot, backfill: true };
            self.context.events.emit(now.wall, &event);
        }
        TriggerOutcome::Backfilling { slots }
    }
}
