//! `skip-justified`: every skip names a reason, and the checker's own state at that instant
//! must show the reason holding. Skipping too much (a budget that never rolls over, a
//! breaker that never lets go) is as wrong as running too much, and no other invariant
//! would see it: liveness exempts a justified skip, so each one is judged here.

use std::time::Duration;

use jiff::Timestamp;

use systole::core::guard::SkipReason;
use systole::core::ids::HeartbeatKey;
use systole::limits::{
    AGENT_HEARTBEAT_FLOOD_WINDOW_SECS, AGENT_HEARTBEAT_SPACING_SECS_MIN, AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX,
};

use super::guards::Cap;
use super::reference::shows_nothing;
use super::{fail, signed, window_contains, Model, Step, PASS_SLACK};
use crate::trace::Entry;

pub const PAUSED: &str = "skip-justified:paused";
pub const QUIET_HOURS: &str = "skip-justified:quiet-hours";
pub const BUDGET: &str = "skip-justified:budget";
pub const TOKEN_CAP: &str = "skip-justified:token-cap";
pub const COST_CAP: &str = "skip-justified:cost-cap";
pub const GLOBAL_TOKEN_CAP: &str = "skip-justified:global-token-cap";
pub const GLOBAL_COST_CAP: &str = "skip-justified:global-cost-cap";
pub const BACKOFF: &str = "skip-justified:backoff";
pub const FLOOD_GUARD: &str = "skip-justified:flood-guard";
pub const OVERLAP: &str = "skip-justified:overlap";
pub const REQUESTS_IN_FLIGHT: &str = "skip-justified:requests-in-flight";
/// A `disabled` skip: the breaker is open, or the heartbeat is disabled or gone.
pub const DISABLED: &str = "skip-justified:disabled";
pub const EMPTY_FILE: &str = "skip-justified:empty-heartbeat-file";
pub const ALERTS_DISABLED: &str = "skip-justified:alerts-disabled";

/// How close to an edge (a window's, a day's, a guard's) a skip may fall and go unjudged:
/// the engine reads the clock a moment before the trace records its decision.
const EDGE_SLACK: Duration = Duration::from_secs(1);

/// How long after a store write enabling a heartbeat the driver may still skip it as
/// disabled: it applies the change at its next turn.
const APPLY_SLACK: Duration = Duration::from_secs(5);

fn name(reason: SkipReason) -> &'static str {
    match reason {
        SkipReason::Paused => PAUSED,
        SkipReason::QuietHours => QUIET_HOURS,
        SkipReason::Budget => BUDGET,
        SkipReason::TokenCap => TOKEN_CAP,
        SkipReason::CostCap => COST_CAP,
        SkipReason::GlobalTokenCap => GLOBAL_TOKEN_CAP,
        SkipReason::GlobalCostCap => GLOBAL_COST_CAP,
        SkipReason::Backoff => BACKOFF,
        SkipReason::FloodGuard => FLOOD_GUARD,
        SkipReason::Overlap => OVERLAP,
        SkipReason::RequestsInFlight => REQUESTS_IN_FLIGHT,
        SkipReason::Disabled => DISABLED,
        SkipReason::EmptyHeartbeatFile => EMPTY_FILE,
        SkipReason::AlertsDisabled => ALERTS_DISABLED,
    }
}

impl Model<'_> {
    /// Judges one skip against the checker's state when it was decided.
    pub(super) fn skip_justified(
        &mut self,
        entry: &Entry,
        life: u32,
        key: &HeartbeatKey,
        slot: Timestamp,
        reason: SkipReason,
    ) -> Step {
        let invariant = name(reason);
        self.count(invariant);
        let why_not = match reason {
            SkipReason::Paused => self.paused_holds(entry, key),
            SkipReason::QuietHours => self.outside_window(entry, key),
            SkipReason::Budget => self.cap_spent(entry, key, Cap::Calls),
            SkipReason::TokenCap => self.cap_spent(entry, key, Cap::Tokens),
            SkipReason::CostCap => self.cap_spent(entry, key, Cap::Cost),
            SkipReason::GlobalTokenCap => self.cap_spent(entry, key, Cap::GlobalTokens),
            SkipReason::GlobalCostCap => self.cap_spent(entry, key, Cap::GlobalCost),
            SkipReason::Backoff => self.backoff_holds(entry, key),
            SkipReason::FloodGuard => self.flood_closed(entry, life, key),
            SkipReason::Overlap => {
                // Going in this life: a trigger's run a crash ended stays in `trigger_runs`.
                let trigger_going = self
                    .trigger_runs
                    .range((key.clone(), Timestamp::MIN)..=(key.clone(), Timestamp::MAX))
                    .any(|(_, slot)| self.open_runs.contains_key(&(life, key.clone(), *slot)));
                if trigger_going {
                    self.overlaps_a_trigger.insert((key.clone(), entry.elapsed));
                }
                if self.run_open(life, key).is_err() {
                    // A slot of it may have been chosen to run earlier in the same pass,
                    // its claim still to come: judged once the pass is over.
                    self.overlap_pending.push((life, key.clone(), slot, entry.elapsed));
                }
                Ok(())
            }
            SkipReason::RequestsInFlight => self.lane_held(life, key),
            SkipReason::Disabled => self.disabled_now(entry, key),
            SkipReason::EmptyHeartbeatFile => self.file_empty(key),
            SkipReason::AlertsDisabled => {
                if shows_nothing(self.options.visibility) {
                    Ok(())
                } else {
                    Err("the target shows alerts or acknowledgements".to_owned())
                }
            }
        };
        match why_not {
            Ok(()) => Ok(()),
            Err(state) => {
                fail(invariant, format!("{key} slot {slot} skipped as {} at {}: {state}", reason.as_str(), entry.wall))
            }
        }
    }

    fn paused_holds(&self, entry: &Entry, key: &HeartbeatKey) -> Result<(), String> {
        match self.pauses.get(&key.agent).map(|pause| pause.state(entry)) {
            None => Err("its agent was never paused".to_owned()),
            Some(Some(false)) => Err("its agent's pause had ended".to_owned()),
            Some(_) => Ok(()),
        }
    }

    /// Outside the window of the definition the driver runs (or the one a replace in
    /// flight is bringing), or too close to an edge to say.
    fn outside_window(&self, entry: &Entry, key: &HeartbeatKey) -> Result<(), String> {
        let windows: Vec<_> = [self.running_defs.get(key), self.defs.get(key)]
            .into_iter()
            .flatten()
            .filter_map(|def| def.active_hours.clone())
            .collect();
        let slack = signed(EDGE_SLACK);
        let closed = |at: Timestamp| windows.iter().any(|window| !window_contains(window, at));
        if closed(entry.wall) || closed(entry.wall - slack) || closed(entry.wall + slack) {
            return Ok(());
        }
        Err(format!("{} active hours were open", if windows.is_empty() { "it has no" } else { "its" }))
    }

    /// The agent's durable runs of the local day (in the agents' zone) spent at least the
    /// cap; just after midnight the day before may still be counted.
    fn cap_spent(&self, entry: &Entry, key: &HeartbeatKey, cap: Cap) -> Result<(), String> {
        let zone = cap.zone(self.options);
        let limit = cap.limit(self.options);
        let spent_since = |at: Timestamp| self.guards.durable_since(&key.agent, self.guards.day_start(zone, at), cap);
        let today = spent_since(entry.wall);
        if today >= limit || spent_since(entry.wall - signed(EDGE_SLACK)) >= limit {
            return Ok(());
        }
        let whose = if cap.is_global() { "all agents'" } else { "its agent's" };
        Err(format!(
            "{whose} runs spent {today} {} today ({}), under the cap of {limit}",
            cap.unit(),
            cap.zone(self.options)
        ))
    }

    fn backoff_holds(&self, entry: &Entry, key: &HeartbeatKey) -> Result<(), String> {
        let holds = [self.backoffs.get(key), self.lifted_backoffs.get(key)]
            .into_iter()
            .flatten()
            .any(|(_, until)| entry.elapsed <= *until + EDGE_SLACK);
        if holds {
            Ok(())
        } else {
            Err("no backoff of a durable failure held".to_owned())
        }
    }

    fn flood_closed(&self, entry: &Entry, life: u32, key: &HeartbeatKey) -> Result<(), String> {
        let spacing = Duration::from_secs(AGENT_HEARTBEAT_SPACING_SECS_MIN);
        let window = Duration::from_secs(AGENT_HEARTBEAT_FLOOD_WINDOW_SECS);
        let starts = self.agents.starts_in(life, &key.agent);
        // Judged a moment early, so a skip at the guard's edge counts as closed.
        let now = entry.elapsed.saturating_sub(EDGE_SLACK);
        let too_soon = starts.last().is_some_and(|last| now < *last + spacing);
        let recent = starts.iter().filter(|start| now < **start + window).count();
        if too_soon || recent >= AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX {
            return Ok(());
        }
        Err(format!(
            "{recent} starts in the window, the last {:?} ago",
            starts.last().map(|last| entry.elapsed - *last)
        ))
    }

    /// A slot of `key` was decided in the pass that skipped another for overlap: the
    /// driver counted it in flight while it decided (whether its claim then held or not).
    pub(super) fn overlap_claimed(&mut self, life: u32, key: &HeartbeatKey) {
        self.overlap_pending.retain(|(pending_life, pending_key, _, _)| (*pending_life, pending_key) != (life, key));
    }

    /// Overlap skips whose pass ended with no run of theirs going or claimed.
    pub(super) fn overlap_unjustified(&mut self, now: Duration) -> Step {
        let Some(index) = self.overlap_pending.iter().position(|(_, _, _, at)| now > *at + PASS_SLACK) else {
            return Ok(());
        };
        let (_, key, slot, _) = self.overlap_pending.remove(index);
        fail(OVERLAP, format!("{key} slot {slot} skipped as overlap, but no run of it was going or claimed"))
    }

    fn run_open(&self, life: u32, key: &HeartbeatKey) -> Result<(), String> {
        let open =
            self.open_runs.range((life, key.clone(), Timestamp::MIN)..=(life, key.clone(), Timestamp::MAX)).count();
        if open > 0 {
            Ok(())
        } else {
            Err("no run of it was going".to_owned())
        }
    }

    /// A user turn holds the agent's lane, or its agent heartbeat's own run does.
    fn lane_held(&self, life: u32, key: &HeartbeatKey) -> Result<(), String> {
        if self.agents.user_turns_open(life, &key.agent) > 0 || self.run_open(life, key).is_ok() {
            return Ok(());
        }
        Err("no user turn or run held its agent's lane".to_owned())
    }

    /// Disabled or gone in the store, stopped (a trip), its breaker open, enabled so
    /// recently that the driver may not have applied it yet, or retired by the engine,
    /// which holds it disabled though the retirement's write failed (seed 1927871793343: a
    /// trigger that waited for a place, after the own run of its one-shot).
    fn disabled_now(&self, entry: &Entry, key: &HeartbeatKey) -> Result<(), String> {
        let enabled = self.present.get(key) == Some(&true);
        let changed_recently = self.changed_at.get(key).is_some_and(|at| entry.elapsed <= *at + APPLY_SLACK);
        let retired = self.retired_unwritten.contains(key);
        if !enabled
            || self.stopped.contains_key(key)
            || self.breaker.was_open(key, entry.elapsed)
            || changed_recently
            || retired
        {
            return Ok(());
        }
        Err("it was enabled, its breaker closed".to_owned())
    }

    fn file_empty(&self, key: &HeartbeatKey) -> Result<(), String> {
        if self.agents.file_is_empty(&key.agent) {
            Ok(())
        } else {
            Err("its HEARTBEAT.md has something to do".to_owned())
        }
    }
}
