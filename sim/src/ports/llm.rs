//! The simulated LLM: seeded replies (quiet or an alert) and the LLM faults: errors, rate
//! limits, hangs past the run's budget, malformed output, slowness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;

use systole::ports::clock::Clock;
use systole::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError};

use crate::faults::FaultKind;
use crate::trace::Event;
use crate::world::{Life, World};

const SLOW_SECS_MAX: u64 = 180;

pub struct SimLlm {
    pub world: Arc<World>,
    pub life: Arc<Life>,
    pub replies: AtomicU64,
}

impl SimLlm {
    pub fn new(world: Arc<World>, life: Arc<Life>) -> Self {
        Self { world, life, replies: AtomicU64::new(0) }
    }

    fn answer(&self, prompt: &str, answer: &str) {
        let event = Event::LlmCall { life: self.life.number, prompt: prompt.to_owned(), answer: answer.to_owned() };
        self.world.record(event);
    }
}

#[async_trait]
impl Llm for SimLlm {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        self.life.ensure_alive().await;
        let prompt = request.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let injector = &self.world.injector;
        if injector.roll(FaultKind::LlmHang) {
            self.world.fault(FaultKind::LlmHang, &prompt);
            self.answer(&prompt, "hang");
            std::future::pending::<()>().await;
        }
        if injector.roll(FaultKind::LlmError) {
            self.world.fault(FaultKind::LlmError, &prompt);
            self.answer(&prompt, "error 500");
            return Err(LlmError::Status { status: 500, body: "injected".to_owned() });
        }
        if injector.roll(FaultKind::LlmRateLimit) {
            self.world.fault(FaultKind::LlmRateLimit, &prompt);
            self.answer(&prompt, "rate limit");
            return Err(LlmError::RateLimited { retry_after_secs: Some(30) });
        }
        if injector.roll(FaultKind::LlmMalformed) {
            self.world.fault(FaultKind::LlmMalformed, &prompt);
            self.answer(&prompt, "malformed");
            return Err(LlmError::Malformed("injected: not a chat completion".to_owned()));
        }
        if injector.roll(FaultKind::LlmSlow) {
            let secs = injector.draw(1..SLOW_SECS_MAX);
            self.world.fault(FaultKind::LlmSlow, format!("{prompt} for {secs}s"));
            self.world.clock.sleep(Duration::from_secs(secs)).await;
            self.life.ensure_alive().await;
        }
        let alert = {
            let mut rng = self.world.llm_rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            rng.random_bool(self.world.options.alert_probability)
        };
        if !alert {
            self.answer(&prompt, "quiet");
            return Ok(ChatResponse::default());
        }
        let number = self.replies.fetch_add(1, Ordering::Relaxed) + 1;
        let text = format!("alert {number} from {prompt}");
        self.answer(&prompt, &text);
        Ok(ChatResponse { text: Some(text), tool_calls: Vec::new() })
    }
}
