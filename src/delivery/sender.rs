//! Delivers a message through its platform: split into parts that fit, sent in order, each
//! retried on 408, 429 and 5xx (waiting what the platform asks, within a bound) and never
//! after a refusal. Every attempt at one part carries the same key, so a receiver can drop
//! a repeat; a part that went out is never sent again by a retry of a later one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::adapters::stdout::deliver_to_stdout;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::message_split::split_message;
use crate::delivery::platform::{Part, Platform, Verdict};
use crate::limits::{DELIVERY_PARTS_MAX, DELIVERY_RETRY_AFTER_SECS_MAX, WEBHOOK_RETRY_DELAY_MS_BASE};
use crate::ports::clock::Clock;
use crate::ports::fence::Fenced;
use crate::ports::http::HttpClient;
use crate::ports::messenger::{Delivery, DeliveryError, Messenger};

/// A configured destination: its platform and how patient to be with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub platform: Platform,
    /// The most one attempt may take.
    pub timeout: Duration,
    /// Attempts per part, first included.
    pub attempts_max: u32,
    /// Whether a message may notify people there (`allow_mentions`, off by default).
    pub allow_mentions: bool,
}

/// What the platform answered to the last part, for `systole deliver test`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub parts: usize,
    pub status: u16,
    pub body: String,
}

/// Why one part did not go out.
enum PartFailure {
    /// The lease's fence refused the attempt: nothing more goes out.
    Fenced(Fenced),
    /// Refused by the platform, or out of attempts; the attempts made and the last error.
    Failed { attempts: u32, error: String },
}

/// Routes each delivery to its destination by the target's adapter (and name, for the
/// named ones: `webhook:ops`), and sends it.
pub struct ChatSender {
    http: Arc<dyn HttpClient>,
    clock: Arc<dyn Clock>,
    /// Jitter for retry delays, from a seed handed in (never the thread RNG).
    rng: Mutex<ChaCha8Rng>,
    /// By adapter for the bot platforms (`discord`), by `adapter:name` for the named ones.
    destinations: BTreeMap<String, Destination>,
}

impl ChatSender {
    pub fn new(
        http: Arc<dyn HttpClient>,
        clock: Arc<dyn Clock>,
        rng: ChaCha8Rng,
        destinations: BTreeMap<String, Destination>,
    ) -> Self {
        Self { http, clock, rng: Mutex::new(rng), destinations }
    }

    /// The destination of `target`, and the channel to post to.
    fn destination<'a>(&'a self, target: &'a DeliveryTarget) -> Option<(&'a Destination, &'a str)> {
        if let Some(named) = self.destinations.get(&target.to_string()) {
            return Some((named, ""));
        }
        self.destinations.get(target.adapter()).map(|destination| (destination, target.target()))
    }

    /// Sends `delivery` and says what the platform answered last.
    ///
    /// # Errors
    /// When the adapter is not configured, a part was refused, or a part's attempts ran out;
    /// the message says how many parts went out before.
    pub async fn send(&self, delivery: &Delivery) -> Result<Receipt, DeliveryError> {
        let target = &delivery.target;
        let Some((destination, channel)) = self.destination(target) else {
            return Err(DeliveryError::UnknownAdapter(target.to_string()));
        };
        let rules = destination.platform.text_rules(destination.allow_mentions);
        let parts = split_message(&delivery.text, destination.platform.part_chars_max(), DELIVERY_PARTS_MAX, rules);
        let mut receipt = Receipt { parts: 0, status: 0, body: String::new() };
        for (index, text) in parts.iter().enumerate() {
            // One key per part, the same for every attempt: a single part keeps the slot's key.
            let key = if parts.len() == 1 {
                delivery.idempotency_key.clone()
            } else {
                format!("{}/part-{}-of-{}", delivery.idempotency_key, index + 1, parts.len())
            };
            let rendered = rules.render(text);
            let part = Part { text: &rendered, idempotency_key: &key, mentions: destination.allow_mentions };
            match self.send_part(destination, channel, &part, delivery).await {
                Ok((status, body)) => receipt = Receipt { parts: index + 1, status, body },
                Err(PartFailure::Fenced(fenced)) => {
                    return Err(DeliveryError::Fenced { target: target.to_string(), parts_sent: index, fenced });
                }
                Err(PartFailure::Failed { attempts, error }) => {
                    let sent = if parts.len() > 1 {
                        format!(" ({index} of {} parts delivered)", parts.len())
                    } else {
                        String::new()
                    };
                    return Err(DeliveryError::Failed {
                        target: target.to_string(),
                        attempts,
                        last_error: format!("{error}{sent}"),
                    });
                }
            }
        }
        Ok(receipt)
    }

    /// One part, with retries, each attempt after the fence allowed it.
    async fn send_part(
        &self,
        destination: &Destination,
        channel: &str,
        part: &Part<'_>,
        delivery: &Delivery,
    ) -> Result<(u16, String), PartFailure> {
        let attempts_max = destination.attempts_max.max(1);
        let mut last_error = String::new();
        for attempt in 1..=attempts_max {
            // A node that lost its lease before this part (or this retry) stops here.
            delivery.fence.check().map_err(PartFailure::Fenced)?;
            let request = destination.platform.request(channel, part, delivery, self.clock.wall(), destination.timeout);
            let wait = match self.http.post(request).await {
                Ok(response) => match destination.platform.verdict(&response) {
                    Verdict::Delivered => return Ok((response.status, response.excerpt(200))),
                    Verdict::Refused(why) => return Err(PartFailure::Failed { attempts: attempt, error: why }),
                    Verdict::Retry { after, why } => {
                        last_error = why;
                        after
                    }
                },
                Err(error) => {
                    last_error = error.0;
                    None
                }
            };
            if attempt == attempts_max {
                break;
            }
            let delay = match wait {
                Some(wait) if wait > Duration::from_secs(DELIVERY_RETRY_AFTER_SECS_MAX) => {
                    let asked = wait.as_secs();
                    let error = format!(
                        "{last_error}; the platform asked to wait {asked} s, more than {DELIVERY_RETRY_AFTER_SECS_MAX} s"
                    );
                    return Err(PartFailure::Failed { attempts: attempt, error });
                }
                Some(wait) => wait,
                None => self.backoff(attempt),
            };
            self.clock.sleep(delay).await;
        }
        Err(PartFailure::Failed { attempts: attempts_max, error: last_error })
    }

    /// Base delay doubled per attempt, plus up to 50 % jitter.
    fn backoff(&self, attempt: u32) -> Duration {
        let base_ms = WEBHOOK_RETRY_DELAY_MS_BASE.saturating_mul(1 << attempt.saturating_sub(1).min(10));
        let jitter_ms = {
            let mut rng = self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            rng.random_range(0..=base_ms / 2)
        };
        Duration::from_millis(base_ms + jitter_ms)
    }
}

#[async_trait]
impl Messenger for ChatSender {
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError> {
        if delivery.target.adapter() == DeliveryTarget::STDOUT {
            return deliver_to_stdout(delivery);
        }
        self.send(delivery).await.map(|_| ())
    }
}
