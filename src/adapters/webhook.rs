//! Delivery by HTTP POST, with an `Idempotency-Key` header, a timeout per attempt and a
//! bounded number of attempts (field notes, failure 10: retries must be bounded).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::limits::WEBHOOK_RETRY_DELAY_MS_BASE;
use crate::ports::clock::Clock;
use crate::ports::messenger::{Delivery, DeliveryError};

/// One configured endpoint (`[adapters.webhook.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEndpoint {
    pub url: String,
    pub timeout: Duration,
    pub attempts_max: u32,
}

/// The JSON body of a webhook delivery.
pub fn webhook_body(delivery: &Delivery) -> serde_json::Value {
    json!({
        "text": delivery.text,
        "agent": delivery.heartbeat.agent.as_str(),
        "heartbeat": delivery.heartbeat.heartbeat.as_str(),
        "scheduled_for": delivery.scheduled_for.to_string(),
        "idempotency_key": delivery.idempotency_key,
        "kind": delivery.kind.as_str(),
    })
}

/// Whether another attempt could help: transport errors, 408, 429 and 5xx can pass; any
/// other 4xx means the receiver refused this message and will refuse it again.
fn is_retryable(status: Option<reqwest::StatusCode>) -> bool {
    match status {
        None => true,
        Some(status) => status.is_server_error() || status.as_u16() == 408 || status.as_u16() == 429,
    }
}

/// Sends deliveries to webhook endpoints.
pub struct WebhookSender {
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    /// Jitter for retry delays, from a seed handed in (never the thread RNG).
    rng: Mutex<ChaCha8Rng>,
}

impl WebhookSender {
    pub fn new(clock: Arc<dyn Clock>, rng: ChaCha8Rng) -> Self {
        Self { http: reqwest::Client::new(), clock, rng: Mutex::new(rng) }
    }

    /// Posts `delivery` to `endpoint`, retrying transient failures up to the endpoint's limit.
    ///
    /// # Errors
    /// When every attempt failed or the receiver refused the message.
    pub async fn send(&self, name: &str, endpoint: &WebhookEndpoint, delivery: &Delivery) -> Result<(), DeliveryError> {
        let body = webhook_body(delivery);
        let attempts_max = endpoint.attempts_max.max(1);
        let mut last_error = String::new();
        for attempt in 1..=attempts_max {
            let result = self
                .http
                .post(&endpoint.url)
                .timeout(endpoint.timeout)
                .header("Idempotency-Key", &delivery.idempotency_key)
                .json(&body)
                .send()
                .await;
            let status = match result {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) => {
                    last_error = format!("HTTP {}", response.status());
                    Some(response.status())
                }
                Err(error) => {
                    last_error = crate::adapters::http_error::describe(&error);
                    None
                }
            };
            if !is_retryable(status) {
                return Err(failed(name, attempt, last_error));
            }
            if attempt < attempts_max {
                self.clock.sleep(self.retry_delay(attempt)).await;
            }
        }
        Err(failed(name, attempts_max, last_error))
    }

    /// Base delay doubled per attempt, plus up to 50 % jitter.
    fn retry_delay(&self, attempt: u32) -> Duration {
        let base_ms = WEBHOOK_RETRY_DELAY_MS_BASE.saturating_mul(1 << attempt.saturating_sub(1).min(10));
        let jitter_ms = {
            let mut rng = self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            rng.random_range(0..=base_ms / 2)
        };
        Duration::from_millis(base_ms + jitter_ms)
    }
}

fn failed(name: &str, attempts: u32, last_error: String) -> DeliveryError {
    DeliveryError::Failed { target: format!("webhook:{name}"), attempts, last_error }
}
