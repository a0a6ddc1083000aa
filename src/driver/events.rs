//! What the engine did, as typed events: logged in production, recorded by the simulator.

use std::time::Duration;

use jiff::Timestamp;

use crate::core::guard::SkipReason;
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::reply::ReplyKind;
use crate::core::usage::RunUsage;
use crate::core::wake::WakeReason;
use crate::ports::store::{DeliveryStatus, ExecutionStatus};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent {
    /// Recovery found runs left `running` by a previous process and marked them interrupted.
    Recovered {
        interrupted: u64,
    },
    /// A heartbeat's next slot was armed.
    Armed {
        key: HeartbeatKey,
        next_slot: Timestamp,
    },
    /// A created or replaced definition now runs in the driver: its slots from here on
    /// follow it (a timer of the old one may fire between the store write and this).
    DefinitionApplied {
        key: HeartbeatKey,
    },
    /// A heartbeat lost its timer (deleted, disabled).
    Disarmed {
        key: HeartbeatKey,
    },
    /// A timer fired after a gap (downtime, a forward clock jump), or while a catch-up
    /// backlog is still running: by the catch-up policy, `runs` of the passed slots run, one
    /// after another from `slot` (behind any backlog), and `missed` do not (`slot` is the
    /// first passed one when none runs).
    CaughtUp {
        key: HeartbeatKey,
        slot: Timestamp,
        runs: u64,
        missed: u64,
    },
    Skipped {
        key: HeartbeatKey,
        slot: Timestamp,
        reason: SkipReason,
    },
    /// A heartbeat whose schedule has no more slots was deleted (`delete_after_run` and its
    /// last run succeeded) or disabled.
    Retired {
        key: HeartbeatKey,
        deleted: bool,
    },
    /// The store could not record the claim of this slot, so it does not run (a run needs
    /// a claim); the heartbeat goes on with its next slot.
    ClaimFailed {
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// The store said this slot was already claimed: it is not run again.
    ClaimLost {
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// A one-shot's own slot met an operator's trigger's row of that very millisecond (made
    /// before a restart, or before an edit made the job this one-shot): the trigger decided
    /// nothing of it, so it is armed for `moved_to`, the next free millisecond (ADR 0055).
    ClaimMetTrigger {
        key: HeartbeatKey,
        slot: Timestamp,
        moved_to: Timestamp,
    },
    /// The store no longer has this heartbeat (deleted as its timer fired): not run.
    ClaimGone {
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// An operator asked for a run now, or for a passed slot of the schedule (`backfill`):
    /// `slot` is decided in a later turn of the loop, as an explicit request (see
    /// `TriggerOutcome`). Only a run now is an operator's trigger in the run log (ADR 0048).
    Triggered {
        key: HeartbeatKey,
        slot: Timestamp,
        backfill: bool,
    },
    RunStarted {
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// The run's work is done (model, tools, delivery) and its result waits for its write:
    /// its place among `runs_in_flight_max` is free (ADR 0042). `RunFinished` follows.
    RunWorkDone {
        key: HeartbeatKey,
        slot: Timestamp,
    },
    RunFinished {
        key: HeartbeatKey,
        slot: Timestamp,
        status: ExecutionStatus,
        delivery: DeliveryStatus,
        duration: Duration,
        error: Option<String>,
        /// What the reply was: `ok-empty`, `ok-token`, `sent`, `duplicate`.
        reply: Option<ReplyKind>,
        /// Whether the result reached the store (see `FinishedRun::breaker`).
        recorded: bool,
        /// LLM calls the run made, and when it was recorded as finished (the budget's day).
        llm_calls: u32,
        finished_at: Timestamp,
        /// The tokens every completion of the run reported, and their cost.
        usage: RunUsage,
    },
    /// The breaker opened: the heartbeat is disabled until `probe_at` (then one probe run),
    /// or until an operator enables it when no cooldown is configured.
    BreakerTripped {
        key: HeartbeatKey,
        consecutive_failures: u32,
        probe_at: Option<Timestamp>,
    },
    /// The cooldown ended: the heartbeat is enabled for one probe run (half-open).
    BreakerHalfOpen {
        key: HeartbeatKey,
    },
    /// The probe succeeded: the breaker closed and the heartbeat runs on schedule again.
    BreakerClosed {
        key: HeartbeatKey,
    },
    /// The agent's spending today reached a daily cap: its runs skip with `reason` until
    /// its next local day (announced once).
    CapReached {
        agent: AgentId,
        reason: SkipReason,
        day: Timestamp,
    },
    /// An announcement of the breaker could not be delivered (it is not tried again).
    AlertFailed {
        key: HeartbeatKey,
        error: String,
    },
    /// An agent paused its timed heartbeats (`pause_heartbeats`).
    Paused {
        agent: AgentId,
        minutes: u32,
        until: Timestamp,
    },
    /// An agent's pause ended.
    Resumed {
        agent: AgentId,
    },
    /// Somebody asked the agent heartbeat to run (`request_now`, a main-mode cron job, its
    /// own schedule); requests close together become one run.
    WakeRequested {
        agent: AgentId,
        reason: WakeReason,
    },
    /// A wake was decided: the agent heartbeat runs (or skips) now under `slot`; `reason`
    /// is the highest of the requests it merged.
    WakeDecided {
        key: HeartbeatKey,
        slot: Timestamp,
        reason: WakeReason,
    },
    /// A wake request for an agent that has no agent heartbeat; nothing runs.
    WakeIgnored {
        agent: AgentId,
        reason: WakeReason,
    },
    /// A main-mode cron job queued a system event for its agent's heartbeat (`id` is
    /// `None` when it repeated the newest pending event and was not queued again).
    SystemEventQueued {
        key: HeartbeatKey,
        id: Option<u64>,
        dropped: usize,
    },
    /// A user conversation with the agent began (the user lane is busy) or ended.
    UserTurnStarted {
        agent: AgentId,
    },
    UserTurnEnded {
        agent: AgentId,
    },
    /// The workspace could not be read; the run goes on as if the file were missing.
    WorkspaceFailed {
        agent: AgentId,
        error: String,
    },
    /// The run log was pruned by its retention: `deleted` rows went.
    RunsPruned {
        deleted: u64,
    },
    /// A run's task ended without handing back a result (it panicked, which a run must
    /// never do): the driver forgets it so it no longer holds a place among the runs in
    /// flight; its claim stays `running` until the next start-up marks it interrupted.
    RunLost {
        key: HeartbeatKey,
        slot: Timestamp,
    },
    /// A store write failed; what the engine did instead is in `consequence`.
    StoreFailed {
        operation: &'static str,
        error: String,
        consequence: &'static str,
    },
}

/// Receives every engine event, in order, as it happens.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, at: Timestamp, event: &EngineEvent);
}

/// Logs events through `tracing`.
#[derive(Debug, Default)]
pub struct TracingSink;

impl EventSink for TracingSink {
    fn emit(&self, at: Timestamp, event: &EngineEvent) {
        match event {
            EngineEvent::Recovered { interrupted } => {
                tracing::info!(%at, interrupted, "recovered runs left running by a previous process");
            }
            EngineEvent::Armed { key, next_slot } => tracing::debug!(%at, heartbeat = %key, %next_slot, "armed"),
            EngineEvent::Disarmed { key } => tracing::info!(%at, heartbeat = %key, "disarmed"),
            EngineEvent::DefinitionApplied { key } => tracing::debug!(%at, heartbeat = %key, "definition applied"),
            EngineEvent::CaughtUp { key, slot, runs, missed } => {
                tracing::info!(%at, heartbeat = %key, %slot, runs, missed, "catching up on slots that passed");
            }
            EngineEvent::ClaimFailed { key, slot } => {
                tracing::warn!(%at, heartbeat = %key, %slot, "slot not run: its claim could not be stored");
            }
            EngineEvent::Retired { key, deleted } => {
                tracing::info!(%at, heartbeat = %key, deleted, "schedule has no more slots; retired");
            }
            EngineEvent::Skipped { key, slot, reason } => {
                tracing::info!(%at, heartbeat = %key, %slot, reason = reason.as_str(), "skipped");
            }
            EngineEvent::ClaimLost { key, slot } => {
                tracing::warn!(%at, heartbeat = %key, %slot, "slot already claimed; not running it again");
            }
            EngineEvent::ClaimMetTrigger { key, slot, moved_to } => {
                tracing::info!(%at, heartbeat = %key, %slot, %moved_to, "one-shot's slot met an operator's trigger of the same millisecond; moved");
            }
            EngineEvent::ClaimGone { key, slot } => {
                tracing::info!(%at, heartbeat = %key, %slot, "heartbeat deleted as its slot came; not running it");
            }
            EngineEvent::Triggered { key, slot, backfill: false } => {
                tracing::info!(%at, heartbeat = %key, %slot, "triggered by an operator; runs now")
            }
            EngineEvent::Triggered { key, slot, backfill: true } => {
                tracing::info!(%at, heartbeat = %key, %slot, "backfill of a passed slot asked by an operator; runs in turn")
            }
            EngineEvent::RunStarted { key, slot } => tracing::info!(%at, heartbeat = %key, %slot, "run started"),
            EngineEvent::RunWorkDone { key, slot } => {
                tracing::debug!(%at, heartbeat = %key, %slot, "run done working; its result is being written")
            }
            EngineEvent::RunFinished {
                key,
                slot,
                status,
                delivery,
                duration,
                error,
                reply,
                recorded,
                llm_calls,
                usage,
                ..
            } if *status == ExecutionStatus::Succeeded => {
                tracing::info!(
                    %at, heartbeat = %key, %slot, status = status.as_str(), delivery = delivery.as_str(),
                    reply = reply.map_or("-", ReplyKind::as_str), llm_calls, tokens = usage.tokens.total(),
                    cost_micros = usage.cost_micros,
                    duration_ms = duration.as_millis() as u64, recorded, "run finished"
                )
            }
            // A failed run is something to look at.
            EngineEvent::RunFinished {
                key,
                slot,
                status,
                delivery,
                duration,
                error,
                recorded,
                llm_calls,
                usage,
                ..
            } => {
                tracing::warn!(
                    %at, heartbeat = %key, %slot, status = status.as_str(), delivery = delivery.as_str(), llm_calls,
                    tokens = usage.tokens.total(), cost_micros = usage.cost_micros,
                    duration_ms = duration.as_millis() as u64, error = error.as_deref().unwrap_or(""), recorded, "run failed"
                )
            }
            EngineEvent::BreakerTripped { key, consecutive_failures, probe_at: Some(probe_at) } => tracing::warn!(
                %at, heartbeat = %key, consecutive_failures, %probe_at,
                "circuit breaker opened: heartbeat disabled until one probe run at probe_at (or an enable)"
            ),
            EngineEvent::BreakerTripped { key, consecutive_failures, probe_at: None } => tracing::warn!(
                %at, heartbeat = %key, consecutive_failures,
                "circuit breaker opened: heartbeat disabled until re-enabled (no cooldown configured)"
            ),
            EngineEvent::BreakerHalfOpen { key } => {
                tracing::info!(%at, heartbeat = %key, "circuit breaker half-open: the next run is a probe");
            }
            EngineEvent::BreakerClosed { key } => {
                tracing::info!(%at, heartbeat = %key, "circuit breaker closed: the probe run succeeded");
            }
            EngineEvent::CapReached { agent, reason, day } => {
                tracing::warn!(%at, %agent, reason = reason.as_str(), %day, "daily cap reached: runs skip until the next local day");
            }
            EngineEvent::AlertFailed { key, error } => {
                tracing::warn!(%at, heartbeat = %key, %error, "breaker announcement not delivered");
            }
            EngineEvent::Paused { agent, minutes, until } => {
                tracing::info!(%at, %agent, minutes, %until, "heartbeats paused");
            }
            EngineEvent::Resumed { agent } => tracing::info!(%at, %agent, "heartbeats resumed"),
            EngineEvent::WakeRequested { agent, reason } => {
                tracing::debug!(%at, %agent, reason = reason.as_str(), "heartbeat wake requested");
            }
            EngineEvent::WakeDecided { key, slot, reason } => {
                tracing::info!(%at, heartbeat = %key, %slot, reason = reason.as_str(), "heartbeat woken");
            }
            EngineEvent::WakeIgnored { agent, reason } => {
                tracing::warn!(%at, %agent, reason = reason.as_str(), "wake ignored: the agent has no agent heartbeat");
            }
            EngineEvent::SystemEventQueued { key, id, dropped } => match id {
                Some(id) => tracing::info!(%at, job = %key, id, dropped, "system event queued for the agent heartbeat"),
                None => tracing::info!(%at, job = %key, "system event repeats the newest pending one; not queued"),
            },
            EngineEvent::UserTurnStarted { agent } => tracing::debug!(%at, %agent, "user turn started"),
            EngineEvent::UserTurnEnded { agent } => tracing::debug!(%at, %agent, "user turn ended"),
            EngineEvent::WorkspaceFailed { agent, error } => {
                tracing::warn!(%at, %agent, error, "workspace unreadable; running as if HEARTBEAT.md were missing");
            }
            EngineEvent::RunsPruned { deleted } => tracing::info!(%at, deleted, "run log pruned by its retention"),
            EngineEvent::RunLost { key, slot } => {
                tracing::error!(%at, heartbeat = %key, %slot, "a run ended without a result; it stays running until the next start-up");
            }
            EngineEvent::StoreFailed { operation, error, consequence } => {
                tracing::error!(%at, operation, error, consequence, "store write failed");
            }
        }
    }
}
