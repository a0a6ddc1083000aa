//! One run's meter on the LLM: counts its calls, sums the tokens every completion reports
//! and their cost by the price table, notes a refusal no retry heals, and keeps the
//! conversation for the transcript. It wraps the engine's LLM for the run, so a run its
//! budget cuts off still has what it spent and said.

use std::sync::{Arc, Mutex, PoisonError};

use crate::core::usage::{PriceTable, RunUsage};
use crate::driver::transcript::Conversation;
use crate::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError};

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
}

impl MeteringLlm {
    pub fn new(inner: Arc<dyn Llm>, prices: Arc<PriceTable>) -> Self {
        Self { inner, prices, metered: Arc::default(), conversation: Arc::default() }
    }

    /// A handle that reads the meter after the run (also after its loop was dropped).
    pub fn reader(&self) -> MeterReader {
        MeterReader { metered: Arc::clone(&self.metered), conversation: Arc::clone(&self.conversation) }
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
}

impl MeterReader {
    pub fn read(&self) -> Metered {
        *self.metered.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run's conversation so far (empty when it made no LLM call).
    pub fn conversation(&self) -> Conversation {
        self.conversation.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait::async_trait]
impl Llm for MeteringLlm {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let price = self.prices.price(request.model.as_deref());
        self.update(|metered| metered.calls = metered.calls.saturating_add(1));
        self.converse(|conversation| conversation.sent(&request.messages));
        let result = self.inner.complete(request).await;
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
