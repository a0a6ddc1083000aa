//! `systole deliver test TARGET TEXT`: one message through the configured adapter, and
//! what the platform answered, so a token or a webhook URL is checked before it matters.

use std::sync::Arc;

use crate::adapters::system_clock::SystemClock;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::daemon::config::Config;
use crate::daemon::serve::build_messenger;
use crate::daemon::DaemonError;
use crate::ports::clock::Clock;
use crate::ports::messenger::{Delivery, DeliveryKind};

/// Sends `text` to `target`; the platform's answer on success.
///
/// # Errors
/// A target the config does not know (exit 2), or the platform's refusal or silence (exit 1).
pub async fn deliver_test(config: &Config, target: &str, text: &str) -> Result<String, DaemonError> {
    let parsed = DeliveryTarget::parse(target).map_err(|e| DaemonError::Usage(format!("TARGET: {e}")))?;
    if !config.adapters.knows(&parsed) {
        return Err(DaemonError::Usage(format!(
            "TARGET: {target:?} names no adapter configured in {}",
            config.file.display()
        )));
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let now = clock.wall();
    let messenger = build_messenger(config, Arc::clone(&clock))?;
    let key = HeartbeatKey {
        agent: AgentId::new("systole").map_err(|e| DaemonError::Usage(e.to_string()))?,
        heartbeat: HeartbeatId::new("deliver-test").map_err(|e| DaemonError::Usage(e.to_string()))?,
    };
    let delivery = Delivery {
        target: parsed,
        text: text.to_owned(),
        heartbeat: key,
        scheduled_for: now,
        idempotency_key: format!("systole/deliver-test/{}", now.as_millisecond()),
        kind: DeliveryKind::Reply,
        fence: crate::ports::fence::Fence::default(),
    };
    if delivery.target.adapter() == DeliveryTarget::STDOUT || delivery.target.is_silent() {
        return Ok(format!("{target} needs no check: it is not a network adapter\n"));
    }
    match messenger.send(&delivery).await {
        Ok(receipt) => Ok(format!(
            "delivered to {target} in {} part(s); the platform answered HTTP {}: {}\n",
            receipt.parts, receipt.status, receipt.body
        )),
        Err(error) => Err(DaemonError::Remote(format!("not delivered: {error}"))),
    }
}
