//! The `stdout` adapter: one line per delivery on standard output (logs go to stderr).

use std::io::Write;

use crate::ports::messenger::{Delivery, DeliveryError};

/// Writes a delivery as `[agent/heartbeat @ slot] text`.
///
/// # Errors
/// When standard output is closed.
pub fn deliver_to_stdout(delivery: &Delivery) -> Result<(), DeliveryError> {
    let line = format!("[{} @ {}] {}\n", delivery.heartbeat, delivery.scheduled_for, delivery.text);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(line.as_bytes()).and_then(|()| stdout.flush()).map_err(|error| DeliveryError::Failed {
        target: "stdout".to_owned(),
        attempts: 1,
        last_error: error.to_string(),
    })
}
