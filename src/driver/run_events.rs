//! One event per decided slot, for the people watching: status (`sent`, `ok-empty`,
//! `ok-token`, `skipped`, `failed`), reason, a 200-character preview, duration and an
//! indicator (`ok`, `alert`, `error`) where the target uses one. Subscribers listen on a
//! broadcast channel; the last event of each agent is kept.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::broadcast;

use crate::core::guard::SkipReason;
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::reply::ReplyKind;
use crate::driver::run::Withheld;
use crate::limits::RUN_EVENTS_BUFFERED_MAX;
use crate::ports::store::{ExecutionStatus, RunRecord, StopReason};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Sent,
    OkEmpty,
    OkToken,
    Skipped,
    Failed,
    /// The circuit breaker opened after this run (the heartbeat stopped).
    BreakerOpened,
    /// This run was the probe after a cooldown and succeeded: the breaker closed.
    BreakerClosed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Sent => "sent",
            RunStatus::OkEmpty => "ok-empty",
            RunStatus::OkToken => "ok-token",
            RunStatus::Skipped => "skipped",
            RunStatus::Failed => "failed",
            RunStatus::BreakerOpened => "breaker-opened",
            RunStatus::BreakerClosed => "breaker-closed",
        }
    }
}

/// What a UI may show for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indicator {
    Ok,
    Alert,
    Error,
}

impl Indicator {
    pub fn as_str(self) -> &'static str {
        match self {
            Indicator::Ok => "ok",
            Indicator::Alert => "alert",
            Indicator::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEvent {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    /// When it was decided or finished (wall clock).
    pub at: Timestamp,
    pub status: RunStatus,
    /// Why: the skip reason, what withheld a reply, or the error.
    pub reason: Option<String>,
    pub preview: Option<String>,
    pub duration: Duration,
    /// `None` when the target does not use an indicator, and for skips.
    pub indicator: Option<Indicator>,
}

impl RunEvent {
    pub fn skipped(key: HeartbeatKey, slot: Timestamp, at: Timestamp, reason: SkipReason) -> Self {
        Self {
            key,
            slot,
            at,
            status: RunStatus::Skipped,
            reason: Some(reason.as_str().to_owned()),
            preview: None,
            duration: Duration::ZERO,
            indicator: None,
        }
    }

    /// The breaker opened (`opened`) or closed after the run of `slot`; `reason` says why
    /// and what comes next.
    pub fn breaker(
        key: HeartbeatKey,
        slot: Timestamp,
        at: Timestamp,
        opened: bool,
        reason: String,
        use_indicator: bool,
    ) -> Self {
        let (status, indicator) = if opened {
            (RunStatus::BreakerOpened, Indicator::Error)
        } else {
            (RunStatus::BreakerClosed, Indicator::Ok)
        };
        Self {
            key,
            slot,
            at,
            status,
            reason: Some(reason),
            preview: None,
            duration: Duration::ZERO,
            indicator: use_indicator.then_some(indicator),
        }
    }

    /// The event of a finished run; `preview` is its record's (moved here, the record's
    /// last reader: a copy was an allocation a run on the driver's loop).
    pub fn finished(
        record: &RunRecord,
        preview: Option<String>,
        withheld: Option<Withheld>,
        use_indicator: bool,
    ) -> Self {
        let (status, reason, indicator) = if record.status != ExecutionStatus::Succeeded {
            let reason = record.error.clone().unwrap_or_else(|| record.status.as_str().to_owned());
            (RunStatus::Failed, Some(reason), Indicator::Error)
        } else if record.stop_reason == Some(StopReason::QuietCheck) {
            // Skipped by its pre-check: the model was never asked (ADR 0021).
            (RunStatus::Skipped, Some(StopReason::QuietCheck.as_str().to_owned()), Indicator::Ok)
        } else {
            match (withheld, record.reply) {
                (Some(Withheld::SystemEvent), _) => (RunStatus::Sent, Some("system-event".to_owned()), Indicator::Ok),
                (Some(why), _) => (RunStatus::Skipped, Some(why.as_str().to_owned()), Indicator::Alert),
                (None, Some(ReplyKind::Sent)) => (RunStatus::Sent, None, Indicator::Alert),
                (None, Some(ReplyKind::Token)) => (RunStatus::OkToken, None, Indicator::Ok),
                (None, Some(ReplyKind::Duplicate)) => {
                    (RunStatus::Skipped, Some(Withheld::Duplicate.as_str().to_owned()), Indicator::Alert)
                }
                (None, Some(ReplyKind::Empty) | None) => (RunStatus::OkEmpty, None, Indicator::Ok),
            }
        };
        Self {
            key: record.key.clone(),
            slot: record.slot,
            at: record.finished_at,
            status,
            reason,
            preview,
            duration: record.duration,
            indicator: use_indicator.then_some(indicator),
        }
    }
}

/// Where run events go: subscribers, and the last one of each agent.
pub struct RunEvents {
    last: Mutex<BTreeMap<AgentId, RunEvent>>,
    sender: broadcast::Sender<RunEvent>,
}

impl Default for RunEvents {
    fn default() -> Self {
        let (sender, _) = broadcast::channel(RUN_EVENTS_BUFFERED_MAX);
        Self { last: Mutex::new(BTreeMap::new()), sender }
    }
}

impl RunEvents {
    pub(crate) fn publish(&self, event: RunEvent) {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Copied only for subscribers: most runs have none (and none is not an error).
        let copy = (self.sender.receiver_count() > 0).then(|| event.clone());
        last.insert(event.key.agent.clone(), event);
        if let Some(copy) = copy {
            let _ = self.sender.send(copy);
        }
    }

    /// Every event from now on; a subscriber more than `RUN_EVENTS_BUFFERED_MAX` behind is
    /// told how many it missed.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.sender.subscribe()
    }

    /// The agent's latest event, from this process.
    pub fn last(&self, agent: &AgentId) -> Option<RunEvent> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(agent).cloned()
    }
}
