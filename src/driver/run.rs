//! One claimed run: the agent turn and the delivery, inside one time budget, then the
//! result and the breaker state written in one awaited store call.

use std::sync::Arc;

use jiff::Timestamp;

use crate::agent::run_turn;
use crate::core::breaker::BreakerStep;
use crate::core::heartbeat::HeartbeatDef;
use crate::driver::events::{EngineEvent, EventSink};
use crate::limits::{ERROR_TEXT_CHARS_MAX, OUTPUT_PREVIEW_CHARS_MAX};
use crate::ports::clock::Clock;
use crate::ports::llm::Llm;
use crate::ports::messenger::{Delivery, Messenger};
use crate::ports::store::{DeliveryStatus, ExecutionStatus, RunRecord, Store};

/// Everything a run needs, shared by all runs.
#[derive(Clone)]
pub struct RunContext {
    pub clock: Arc<dyn Clock>,
    pub llm: Arc<dyn Llm>,
    pub messenger: Arc<dyn Messenger>,
    pub store: Arc<dyn Store>,
    pub events: Arc<dyn EventSink>,
    pub system_prompt: Arc<str>,
    pub model: Option<Arc<str>>,
    pub breaker_failures_max: u32,
}

/// The key a receiver can drop duplicates by: the same for every attempt at one slot.
pub fn idempotency_key(def: &HeartbeatDef, slot: Timestamp) -> String {
    format!("{}/{}/{}", def.key.agent, def.key.heartbeat, slot.as_millisecond())
}

struct Outcome {
    status: ExecutionStatus,
    delivery: DeliveryStatus,
    error: Option<String>,
    preview: Option<String>,
}

/// A finished run and what the store made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    pub record: RunRecord,
    /// The breaker step the store applied; `None` when `finish_runs` failed: the store
    /// still says `running` (start-up will mark it interrupted) and the breaker did not
    /// move, so the driver must not act on it either.
    pub breaker: Option<BreakerStep>,
}

/// Runs a claimed slot to the end and records it. Never panics on what the LLM or the
/// messenger return; every failure becomes a recorded status.
pub async fn run_claimed(context: RunContext, def: HeartbeatDef, slot: Timestamp) -> FinishedRun {
    let started = context.clock.monotonic();
    let deadline = started + def.timeout;
    let outcome = tokio::select! {
        biased;
        outcome = attempt(&context, &def, slot) => outcome,
        () = context.clock.sleep_until(deadline) => Outcome {
            status: ExecutionStatus::TimedOut,
            // A delivery cut off mid-way may or may not have arrived; the idempotency key
            // lets a receiver drop it if a later slot's text is the same attempt.
            delivery: DeliveryStatus::NotNeeded,
            error: Some(format!("run exceeded its {} s budget", def.timeout.as_secs())),
            preview: None,
        },
    };
    let record = RunRecord {
        key: def.key.clone(),
        slot,
        finished_at: context.clock.wall(),
        status: outcome.status,
        delivery: outcome.delivery,
        duration: context.clock.monotonic().saturating_since(started),
        error: outcome.error.map(|text| truncate_chars(&text, ERROR_TEXT_CHARS_MAX)),
        output_preview: outcome.preview,
    };
    let breaker = match context.store.finish_runs(std::slice::from_ref(&record), context.breaker_failures_max).await {
        Ok(steps) => steps.first().copied(),
        Err(error) => {
            let event = EngineEvent::StoreFailed {
                operation: "finish_runs",
                error: error.to_string(),
                consequence:
                    "the run stays 'running' until the next start-up marks it interrupted; the breaker ignores it",
            };
            context.events.emit(context.clock.wall(), &event);
            None
        }
    };
    FinishedRun { record, breaker }
}

async fn attempt(context: &RunContext, def: &HeartbeatDef, slot: Timestamp) -> Outcome {
    let reply = run_turn(context.llm.as_ref(), &context.system_prompt, &def.prompt, context.model.as_deref()).await;
    let text = match reply {
        Ok(Some(text)) => text,
        Ok(None) => {
            return Outcome {
                status: ExecutionStatus::Succeeded,
                delivery: DeliveryStatus::NotNeeded,
                error: None,
                preview: None,
            }
        }
        Err(error) => {
            return Outcome {
                status: ExecutionStatus::Failed,
                delivery: DeliveryStatus::NotNeeded,
                error: Some(error.to_string()),
                preview: None,
            }
        }
    };
    let preview = Some(truncate_chars(&text, OUTPUT_PREVIEW_CHARS_MAX));
    let delivery = Delivery {
        target: def.target.clone(),
        heartbeat: def.key.clone(),
        scheduled_for: slot,
        idempotency_key: idempotency_key(def, slot),
        text,
    };
    match context.messenger.deliver(&delivery).await {
        Ok(()) => {
            Outcome { status: ExecutionStatus::Succeeded, delivery: DeliveryStatus::Delivered, error: None, preview }
        }
        Err(error) => Outcome {
            status: ExecutionStatus::Failed,
            delivery: DeliveryStatus::Failed,
            error: Some(error.to_string()),
            preview,
        },
    }
}

/// The first `max` characters of `text` (never splitting a character).
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
