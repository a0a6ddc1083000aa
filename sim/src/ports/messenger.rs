//! The simulated messenger: records every delivery with its idempotency key; fails or
//! dawdles when the injector says so.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use systole::ports::clock::Clock;
use systole::ports::messenger::{Delivery, DeliveryError, Messenger};

use crate::faults::FaultKind;
use crate::trace::Event;
use crate::world::{Life, World};

const SLOW_SECS_MAX: u64 = 120;

pub struct SimMessenger {
    pub world: Arc<World>,
    pub life: Arc<Life>,
}

#[async_trait]
impl Messenger for SimMessenger {
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError> {
        self.life.ensure_alive().await;
        let injector = &self.world.injector;
        if injector.roll(FaultKind::DeliveryFailure) {
            self.world.fault(FaultKind::DeliveryFailure, &delivery.idempotency_key);
            return Err(DeliveryError::Failed {
                target: delivery.target.to_string(),
                attempts: 1,
                last_error: "injected delivery failure".to_owned(),
            });
        }
        if injector.roll(FaultKind::DeliverySlow) {
            let secs = injector.draw(1..SLOW_SECS_MAX);
            self.world.fault(FaultKind::DeliverySlow, format!("{} for {secs}s", delivery.idempotency_key));
            self.world.clock.sleep(Duration::from_secs(secs)).await;
            self.life.ensure_alive().await;
        }
        self.world.record(Event::Delivered {
            life: self.life.number,
            heartbeat: delivery.heartbeat.clone(),
            idempotency_key: delivery.idempotency_key.clone(),
            text: delivery.text.clone(),
            kind: delivery.kind,
        });
        Ok(())
    }
}
