//! One run's meter on the LLM: counts its calls, sums the tokens every completion reports
//! and their cost by the price table, notes a refusal no retry heals, and keeps the
//! conversation for the transcript and each completion's timing for the trace. It wraps
//! the engine's LLM for the run, so a run its budget cuts off still has what it spent and
//! said.

use std::sync::{Arc, Mutex, PoisonError};

use crate::core::usage::{PriceTable, RunUsage};
use crate::driver::transcript::{Conversation, Redactor};
use crate::ports::clock::{Clock, Mono};
use crate::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError};
use crate::ports::telemetry::CompletionSpan;

/// What the meter read when the run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metered {
    pub calls: u32,
    pub usage: RunUsage,
    /// A completion failed with 401, 402 or 403.
    pub refused: bool,
}

pub struct MeteringLlm {
    inner: Arc<dyn Llm>,
    prices: Arc<PriceTable>,
    meter: Arc<Mutex<Meter>>,
    clock: Arc<dyn Clock>,
    /// The run's start: completions are timed from it.
    started: Mono,
}

/// What the meter keeps, in one place: one allocation a run and one lock a change.
#[derive(Default)]
struct Meter {
    metered: Metered,
    conversation: Conversation,
    completions: Vec<CompletionSpan>,
}

impl MeteringLlm {
    pub fn new(inner: Arc<dyn Llm>, prices: Arc<PriceTable>, clock: Arc<dyn Clock>, started: Mono) -> Self {
        Self { inner, prices, meter: Arc::default(), clock, started }
    }

    /// A handle that reads the meter after the run (also after its loop was dropped).
    pub fn reader(&self) -> MeterReader {
        MeterReader { meter: Arc::clone(&self.meter) }
    }

    fn change(&self, change: impl FnOnce(&mut Meter)) {
        change(&mut self.meter.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

pub struct MeterReader {
    meter: Arc<Mutex<Meter>>,
}

impl MeterReader {
    fn meter(&self) -> std::sync::MutexGuard<'_, Meter> {
        self.meter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn read(&self) -> Metered {
        self.meter().metered
    }

    /// The run's conversation so far as its transcript, `None` when it made no LLM call.
    /// Rendered where it is kept: a copy of it was a copy of every text the run sent.
    pub fn transcript(&self, redactor: &Redactor) -> Option<String> {
        let meter = self.meter();
        (!meter.conversation.is_empty()).then(|| meter.conversation.render(redactor))
    }

    /// The run's completions that ended, in order (one cut off by the budget is not here).
    pub fn completions(&self) -> Vec<CompletionSpan> {
        self.meter().completions.clone()
    }
}

#[async_trait::async_trait]
impl Llm for MeteringLlm {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let price = self.prices.price(request.model.as_deref());
        self.change(|meter| {
            meter.metered.calls = meter.metered.calls.saturating_add(1);
            meter.conversation.sent(&request.messages);
        });
        // The model asked for; a request naming none goes to the endpoint's (`llm.model`).
        let model = request.model.clone().or_else(|| self.prices.default_model.clone());
        let start = self.clock.monotonic();
        let result = self.inner.complete(request).await;
        let span = CompletionSpan {
            offset: start.saturating_since(self.started),
            duration: self.clock.monotonic().saturating_since(start),
            model,
            usage: result.as_ref().ok().and_then(|response| response.usage),
            error: result.as_ref().err().map(ToString::to_string),
        };
        self.change(|meter| {
            meter.completions.push(span);
            match &result {
                Ok(response) => {
                    meter.conversation.answered(response);
                    // A provider that reports no usage adds no tokens; the call still counts.
                    meter.metered.usage.record(response.usage.unwrap_or_default(), price);
                }
                Err(error) => {
                    meter.conversation.failed(error.to_string());
                    meter.metered.refused |= error.needs_operator();
                }
            }
        });
        result
    }
}
