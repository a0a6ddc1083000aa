//! Should a due slot run? A chain of checks, each of which can skip it with a named reason.

use jiff::Timestamp;

use crate::core::active_hours::ActiveHours;
use crate::core::budget::DayCap;

/// Why a due slot was not run. The names are what logs, events and the store show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// The heartbeat is disabled (by the breaker or by a user).
    Disabled,
    /// The agent called `pause_heartbeats` and the pause still holds.
    Paused,
    /// The slot fell outside the heartbeat's active hours.
    QuietHours,
    /// The agent heartbeat's `HEARTBEAT.md` has nothing to do (no LLM call is made).
    EmptyHeartbeatFile,
    /// A user conversation holds the agent's lane; the agent heartbeat retries shortly.
    RequestsInFlight,
    /// The target shows nothing (no acknowledgements, no alerts, no indicator): a run
    /// would cost money for nobody.
    AlertsDisabled,
    /// The agent heartbeat ran too recently or too often; it runs when the guard opens.
    FloodGuard,
    /// The agent's LLM calls today reached its daily budget; runs resume the next local day.
    Budget,
    /// The agent's tokens today reached `daily_tokens_max`; runs resume the next local day.
    TokenCap,
    /// The agent's cost today reached `daily_cost_max`; runs resume the next local day.
    CostCap,
    /// All agents' tokens today reached `[engine] daily_tokens_max`; runs resume the
    /// engine's next day.
    GlobalTokenCap,
    /// All agents' cost today reached `[engine] daily_cost_max`.
    GlobalCostCap,
    /// The previous run failed and its error backoff has not passed.
    Backoff,
    /// The heartbeat's previous run is still going and its overlap policy does not run or
    /// hold this slot.
    Overlap,
}

impl SkipReason {
    pub const ALL: [SkipReason; 14] = [
        SkipReason::Disabled,
        SkipReason::Paused,
        SkipReason::QuietHours,
        SkipReason::EmptyHeartbeatFile,
        SkipReason::RequestsInFlight,
        SkipReason::AlertsDisabled,
        SkipReason::FloodGuard,
        SkipReason::Budget,
        SkipReason::TokenCap,
        SkipReason::CostCap,
        SkipReason::GlobalTokenCap,
        SkipReason::GlobalCostCap,
        SkipReason::Backoff,
        SkipReason::Overlap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Disabled => "disabled",
            SkipReason::Paused => "paused",
            SkipReason::QuietHours => "quiet-hours",
            SkipReason::EmptyHeartbeatFile => "empty-heartbeat-file",
            SkipReason::RequestsInFlight => "requests-in-flight",
            SkipReason::AlertsDisabled => "alerts-disabled",
            SkipReason::FloodGuard => "flood-guard",
            SkipReason::Budget => "budget",
            SkipReason::TokenCap => "token-cap",
            SkipReason::CostCap => "cost-cap",
            SkipReason::GlobalTokenCap => "global-token-cap",
            SkipReason::GlobalCostCap => "global-cost-cap",
            SkipReason::Backoff => "backoff",
            SkipReason::Overlap => "overlap",
        }
    }

    /// The skip of a run held by a reached daily cap.
    pub fn for_cap(cap: DayCap) -> Self {
        match cap {
            DayCap::Calls => SkipReason::Budget,
            DayCap::Tokens => SkipReason::TokenCap,
            DayCap::Cost => SkipReason::CostCap,
            DayCap::GlobalTokens => SkipReason::GlobalTokenCap,
            DayCap::GlobalCost => SkipReason::GlobalCostCap,
        }
    }

    /// Whether it is the skip of a reached daily cap (an agent's or the global one): it
    /// lasts until the cap's next day.
    pub fn is_day_cap(self) -> bool {
        matches!(
            self,
            SkipReason::Budget
                | SkipReason::TokenCap
                | SkipReason::CostCap
                | SkipReason::GlobalTokenCap
                | SkipReason::GlobalCostCap
        )
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == text)
    }
}

/// What the guard chain looks at.
#[derive(Debug, Clone, Copy)]
pub struct GuardInput<'a> {
    pub enabled: bool,
    /// The heartbeat's agent is paused.
    pub paused: bool,
    pub active_hours: Option<&'a ActiveHours>,
    /// The agent heartbeat's `HEARTBEAT.md` is effectively empty and no system event waits.
    pub heartbeat_file_empty: bool,
    /// A user turn holds the agent's lane (agent heartbeat only).
    pub user_busy: bool,
    /// Its target shows nothing of a run.
    pub alerts_disabled: bool,
    /// The agent heartbeat's flood guard is closed.
    pub flooded: bool,
    /// The daily cap of the agent's that its spending today reached, or the global one.
    pub cap_reached: Option<DayCap>,
    /// A failed run's error backoff still holds.
    pub in_backoff: bool,
    /// A run is in flight and the overlap policy neither runs nor holds this slot.
    pub run_in_flight: bool,
    /// The wall time at which the run would start.
    pub wall_now: Timestamp,
}

/// Runs the chain in order; the first check that fails names the skip.
///
/// # Errors
/// The reason for skipping, when the slot must not run.
pub fn check(input: GuardInput<'_>) -> Result<(), SkipReason> {
    if !input.enabled {
        return Err(SkipReason::Disabled);
    }
    if input.paused {
        return Err(SkipReason::Paused);
    }
    if let Some(window) = input.active_hours {
        if !window.contains(input.wall_now) {
            return Err(SkipReason::QuietHours);
        }
    }
    if input.heartbeat_file_empty {
        return Err(SkipReason::EmptyHeartbeatFile);
    }
    if input.user_busy {
        return Err(SkipReason::RequestsInFlight);
    }
    if input.alerts_disabled {
        return Err(SkipReason::AlertsDisabled);
    }
    if input.flooded {
        return Err(SkipReason::FloodGuard);
    }
    if let Some(cap) = input.cap_reached {
        return Err(SkipReason::for_cap(cap));
    }
    if input.in_backoff {
        return Err(SkipReason::Backoff);
    }
    if input.run_in_flight {
        return Err(SkipReason::Overlap);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(window: Option<&ActiveHours>) -> GuardInput<'_> {
        GuardInput {
            enabled: true,
            paused: false,
            active_hours: window,
            heartbeat_file_empty: false,
            user_busy: false,
            alerts_disabled: false,
            flooded: false,
            cap_reached: None,
            in_backoff: false,
            run_in_flight: false,
            wall_now: "2026-01-05T12:00:00Z".parse().expect("test timestamp"),
        }
    }

    #[test]
    fn each_check_names_its_reason() {
        let night = ActiveHours::new("22:00", "06:00", "UTC").expect("valid");
        assert_eq!(check(input(None)), Ok(()));
        assert_eq!(check(GuardInput { enabled: false, ..input(None) }), Err(SkipReason::Disabled));
        assert_eq!(check(GuardInput { paused: true, ..input(None) }), Err(SkipReason::Paused));
        assert_eq!(check(input(Some(&night))), Err(SkipReason::QuietHours));
        assert_eq!(
            check(GuardInput { heartbeat_file_empty: true, ..input(None) }),
            Err(SkipReason::EmptyHeartbeatFile)
        );
        assert_eq!(check(GuardInput { user_busy: true, ..input(None) }), Err(SkipReason::RequestsInFlight));
        assert_eq!(check(GuardInput { flooded: true, ..input(None) }), Err(SkipReason::FloodGuard));
        assert_eq!(check(GuardInput { alerts_disabled: true, ..input(None) }), Err(SkipReason::AlertsDisabled));
        assert_eq!(check(GuardInput { cap_reached: Some(DayCap::Calls), ..input(None) }), Err(SkipReason::Budget));
        assert_eq!(check(GuardInput { cap_reached: Some(DayCap::Tokens), ..input(None) }), Err(SkipReason::TokenCap));
        assert_eq!(check(GuardInput { cap_reached: Some(DayCap::Cost), ..input(None) }), Err(SkipReason::CostCap));
        let global = GuardInput { cap_reached: Some(DayCap::GlobalTokens), ..input(None) };
        assert_eq!(check(global), Err(SkipReason::GlobalTokenCap));
        assert_eq!(
            check(GuardInput { cap_reached: Some(DayCap::GlobalCost), ..input(None) }),
            Err(SkipReason::GlobalCostCap)
        );
        assert_eq!(check(GuardInput { in_backoff: true, ..input(None) }), Err(SkipReason::Backoff));
        assert_eq!(check(GuardInput { run_in_flight: true, ..input(None) }), Err(SkipReason::Overlap));
    }

    #[test]
    fn disabled_comes_first() {
        let night = ActiveHours::new("22:00", "06:00", "UTC").expect("valid");
        let all_bad = GuardInput { enabled: false, run_in_flight: true, ..input(Some(&night)) };
        assert_eq!(check(all_bad), Err(SkipReason::Disabled));
    }

    #[test]
    fn the_chain_runs_in_the_documented_order() {
        // Each check wins over every later one: set a check and all after it, expect it.
        let night = ActiveHours::new("22:00", "06:00", "UTC").expect("valid");
        let all = GuardInput {
            enabled: false,
            paused: true,
            heartbeat_file_empty: true,
            user_busy: true,
            alerts_disabled: true,
            flooded: true,
            cap_reached: Some(DayCap::Calls),
            in_backoff: true,
            run_in_flight: true,
            ..input(Some(&night))
        };
        let mut step = all;
        let mut seen = Vec::new();
        for clear in 0..SkipReason::ALL.len() {
            let Err(reason) = check(step) else { break };
            seen.push(reason);
            match clear {
                0 => step.enabled = true,
                1 => step.paused = false,
                2 => step.active_hours = None,
                3 => step.heartbeat_file_empty = false,
                4 => step.user_busy = false,
                5 => step.alerts_disabled = false,
                6 => step.flooded = false,
                7 => step.cap_reached = Some(DayCap::Tokens),
                8 => step.cap_reached = Some(DayCap::Cost),
                9 => step.cap_reached = Some(DayCap::GlobalTokens),
                10 => step.cap_reached = Some(DayCap::GlobalCost),
                11 => step.cap_reached = None,
                12 => step.in_backoff = false,
                _ => step.run_in_flight = false,
            }
        }
        assert_eq!(seen, SkipReason::ALL);
        assert_eq!(check(step), Ok(()));
    }

    #[test]
    fn names_round_trip() {
        for reason in SkipReason::ALL {
            assert_eq!(SkipReason::parse(reason.as_str()), Some(reason));
        }
    }
}
