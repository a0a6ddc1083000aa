//! One run's meter on the LLM: counts its calls, sums the tokens every completion reports
//! and their cost by the price table, notes a refusal no retry heals, and keeps the
//! conversation for the transcript and each completion's timing for the trace. It wraps
//! the engine's LLM for the run, so a run its budget cuts off still has what it spent and
//! said.

use std::sync::{Arc, Mutex, PoisonError};

use crate::core::usage::{PriceTable, RunUsage};
use crate::driver::transcript::Conversation;
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
    metered: Arc<Mutex<Metered>>,
    conversation: Arc<Mutex<Conversation>>,
    clock: Arc<dyn Clock>,
    /// The run's start: completions are timed from it.
    started: Mono,
    completions: Arc<Mutex<Vec<CompletionSpan>>>,
}

impl MeteringLlm {
    pub fn new(inner: Arc<dyn Llm>, prices: Arc<PriceTable>, clock: Arc<dyn Clock>, started: Mono) -> Self {
        Self {
            inner,
            prices,
            metered: Arc::default(),
            conversation: Arc::default(),
            clock,
            started,
            completions: Arc::default(),
        }
    }

    /// A handle that reads the meter after the run (also after its loop was dropped).
    pub fn reader(&self) -> MeterReader {
        MeterReader {
            metered: Arc::clone(&self.metered),
            conversation: Arc::clone(&self.conversation),
            completions: Arc::clone(&self.completions),
        }
    }

    fn converse(&self, change: impl FnOnce(&mut Conversation)) {
        change(&mut self.conversation.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn update(&self, change: impl FnOnce(&mut Metered)) {
        change(&mut self.metered.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

pub struct MeterReader {
    metered: Arc<Mutex<Metered>>,
    conversation: Arc<Mutex<Conversation>>,
    completions: Arc<Mutex<Vec<CompletionSpan>>>,
}

impl MeterReader {
    pub fn read(&self) -> Metered {
        *self.metered.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run's conversation so far (empty when it made no LLM call).
    pub fn conversation(&self) -> Conversation {
        self.conversation.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The run's completions that ended, in order (one cut off by the budget is not here).
    pub fn completions(&self) -> Vec<CompletionSpan> {
        self.completions.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait::async_trait]
impl Llm for MeteringLlm {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let price = self.prices.price(request.model.as_deref());
        self.update(|metered| metered.calls = metered.calls.saturating_add(1));
        self.converse(|conversation| conversation.sent(&request.messages));
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
        self.completions.lock().unwrap_or_else(PoisonError::into_inner).push(span);
        match &result {
            Ok(response) => self.converse(|conversation| conversation.answered(response)),
            Err(error) => self.converse(|conversation| conversation.failed(error.to_string())),
        }
        match &result {
            Ok(response) => {
                // A provider that reports no usage adds no tokens; the call still counts.
                let usage = response.usage.unwrap_or_default();
                self.update(|metered| metered.usage.record(usage, price));
            }
            Err(error) if error.needs_operator() => self.update(|metered| metered.refused = true),
            Err(_) => {}
        }
        result
    }
}
