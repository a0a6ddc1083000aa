//! The real clock: the one place in the engine that reads the operating system's time.
//! (Under `--cfg madsim`, tokio's time and the system clock are madsim's virtual ones.)

use async_trait::async_trait;
use jiff::Timestamp;
use tokio::time::Instant;

use crate::ports::clock::{Clock, Mono};

#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    #[allow(clippy::disallowed_methods)] // the real clock adapter is where time comes from
    pub fn new() -> Self {
        Self { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the real clock adapter is where time comes from
    fn wall(&self) -> Timestamp {
        Timestamp::now()
    }

    #[allow(clippy::disallowed_methods)] // the real clock adapter is where time comes from
    fn monotonic(&self) -> Mono {
        Mono::from_duration(Instant::now().saturating_duration_since(self.origin))
    }

    #[allow(clippy::disallowed_methods)] // the real clock adapter is where sleeping happens
    async fn sleep_until(&self, deadline: Mono) {
        tokio::time::sleep_until(self.origin + deadline.since_origin()).await;
    }
}
