//! Decorators that count what passes through a port into [`Metrics`]: the LLM (requests
//! and their duration), the messenger (deliveries by adapter and outcome) and the event
//! sink (runs, skips, breaker trips, schedule lag). Each forwards to the real thing.

use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;

use super::Metrics;
use crate::core::tool_policy::ToolName;
use crate::driver::events::{EngineEvent, EventSink};
use crate::ports::clock::Clock;
use crate::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError};
use crate::ports::messenger::{Delivery, DeliveryError, Messenger};
use crate::ports::tools::{CallContext, Catalog, ToolAnswer, ToolCallError, ToolServers};
use std::time::Duration;

pub struct MeteredLlm {
    pub inner: Arc<dyn Llm>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl Llm for MeteredLlm {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = self.clock.monotonic();
        let result = self.inner.complete(request).await;
        self.metrics.llm_request(self.clock.monotonic().saturating_since(started));
        result
    }
}

pub struct MeteredMessenger {
    pub inner: Arc<dyn Messenger>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl Messenger for MeteredMessenger {
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError> {
        let result = self.inner.deliver(delivery).await;
        let outcome = if result.is_ok() { "delivered" } else { "failed" };
        self.metrics.delivery(delivery.target.adapter(), outcome);
        result
    }
}

/// Counts the calls of servers' tools (those that went out) and how long they took.
pub struct MeteredTools {
    pub inner: Arc<dyn ToolServers>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl ToolServers for MeteredTools {
    fn catalog(&self) -> Catalog {
        self.inner.catalog()
    }

    async fn call(
        &self,
        tool: &ToolName,
        arguments: serde_json::Value,
        timeout: Duration,
        context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError> {
        let started = self.clock.monotonic();
        let result = self.inner.call(tool, arguments, timeout, context).await;
        let outcome = match &result {
            Ok(answer) if answer.is_error => "tool-error",
            Ok(_) => "ok",
            Err(ToolCallError::Timeout { .. }) => "timeout",
            Err(ToolCallError::Unavailable { .. }) => "unavailable",
            Err(ToolCallError::Failed { .. }) => "failed",
        };
        self.metrics.tool_call(&tool.server, &tool.tool, outcome, self.clock.monotonic().saturating_since(started));
        result
    }
}

/// Counts engine events, then hands them to every sink in `next`.
pub struct MeteredSink {
    pub next: Vec<Arc<dyn EventSink>>,
    pub metrics: Arc<Metrics>,
}

impl EventSink for MeteredSink {
    fn emit(&self, at: Timestamp, event: &EngineEvent) {
        match event {
            EngineEvent::RunFinished { key, status, duration, usage, .. } => {
                self.metrics.run_finished(key.agent.as_str(), key.heartbeat.as_str(), status.as_str(), *duration);
                self.metrics.run_usage(key.agent.as_str(), usage);
            }
            EngineEvent::Skipped { reason, .. } => self.metrics.skipped(reason.as_str()),
            EngineEvent::BreakerTripped { .. } => self.metrics.breaker_tripped(),
            EngineEvent::BreakerHalfOpen { .. } => self.metrics.breaker_probed(),
            EngineEvent::BreakerClosed { .. } => self.metrics.breaker_closed(),
            EngineEvent::RunStarted { slot, .. } => {
                let lag = at.duration_since(*slot);
                self.metrics.schedule_lag(if lag.is_negative() {
                    std::time::Duration::ZERO
                } else {
                    lag.unsigned_abs()
                });
            }
            _ => {}
        }
        for sink in &self.next {
            sink.emit(at, event);
        }
    }
}
