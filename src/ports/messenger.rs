//! The messenger port: deliver a heartbeat's text to an `adapter:target`.

use async_trait::async_trait;
use jiff::Timestamp;

use crate::core::delivery_target::DeliveryTarget;
use crate::core::ids::HeartbeatKey;
use crate::ports::fence::{Fence, Fenced};

/// One message to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub target: DeliveryTarget,
    pub text: String,
    pub heartbeat: HeartbeatKey,
    /// The slot this run stands for.
    pub scheduled_for: Timestamp,
    /// The same for every attempt at the same slot, so receivers can drop duplicates.
    pub idempotency_key: String,
    pub kind: DeliveryKind,
    /// Checked before each part goes out: on a node of a cluster, the partition's lease.
    pub fence: Fence,
}

/// What a message is: a run's reply, or the engine's own alert about a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryKind {
    Reply,
    /// The circuit breaker opened (the heartbeat stopped after failures in a row).
    BreakerOpened,
    /// The breaker closed: the probe run after its cooldown succeeded.
    BreakerClosed,
    /// An agent's spending today reached one of its daily caps (once per cap and day).
    CapReached,
}

impl DeliveryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryKind::Reply => "reply",
            DeliveryKind::BreakerOpened => "breaker-opened",
            DeliveryKind::BreakerClosed => "breaker-closed",
            DeliveryKind::CapReached => "cap-reached",
        }
    }
}

/// Why a delivery failed (after the adapter's own bounded retries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("no adapter named {0:?} is configured")]
    UnknownAdapter(String),
    #[error("delivery to {target} failed after {attempts} attempt(s): {last_error}")]
    Failed { target: String, attempts: u32, last_error: String },
    /// The node no longer surely holds the heartbeat's partition: what was not sent yet
    /// was dropped (`parts_sent` went out before).
    #[error("delivery to {target} stopped after {parts_sent} part(s): {fenced}")]
    Fenced { target: String, parts_sent: usize, fenced: Fenced },
}

/// Delivers messages to targets.
#[async_trait]
pub trait Messenger: Send + Sync + 'static {
    /// Delivers one message, checking `delivery.fence` before each part it sends.
    ///
    /// # Errors
    /// When the target's adapter is unknown or every attempt failed.
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError>;
}
