//! One run's meter on the LLM: counts its calls, sums the tokens every completion reports
//! and their cost by the price table, and notes a refusal no retry heals. It wraps the
//! engine's LLM for the run, so a run its budget cuts off still has what it spent.

use std::sync::{Arc, Mutex, PoisonError};

use crate::core::usage::{PriceTable, RunUsage};
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
}

impl MeteringLlm {
    pub fn new(inner: Arc<dyn Llm>, prices: Arc<PriceTable>) -> Self {
        Self { inner, prices, metered: Arc::default() }
    }

    /// A handle that reads the meter after the run (also after its loop was dropped).
    pub fn reader(&self) -> MeterReader {
        MeterReader(Arc::clone(&self.metered))
    }

    fn update(&self, change: impl FnOnce(&mut Metered)) {
        change(&mut self.metered.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

pub struct MeterReader(Arc<Mutex<Metered>>);

impl MeterReader {
    pub fn read(&self) -> Metered {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl Llm for MeteringLlm {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let price = self.prices.price(request.model.as_deref());
        self.update(|metered| metered.calls = metered.calls.saturating_add(1));
        let result = self.inner.complete(request).await;
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
