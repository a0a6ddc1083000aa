//! The simulated messenger: the engine's real delivery code (`ChatSender`) over the
//! simulated platform ([`super::http`]); a message the platform took in full is recorded
//! with its idempotency key and text, for the reply invariants.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use systole::delivery::sender::ChatSender;
use systole::ports::messenger::{Delivery, DeliveryError, Messenger};

use super::http::SimHttp;
use crate::trace::Event;
use crate::world::{Life, World};

pub struct SimMessenger {
    world: Arc<World>,
    life: Arc<Life>,
    sender: ChatSender,
}

impl SimMessenger {
    pub fn new(world: Arc<World>, life: Arc<Life>) -> Self {
        let http = Arc::new(SimHttp { world: Arc::clone(&world), life: Arc::clone(&life) });
        let destinations =
            BTreeMap::from([("sim".to_owned(), world.options.platform.destination(world.options.allow_mentions))]);
        // Retry jitter: its own seed per life, so it never draws from the fault stream.
        let rng = ChaCha8Rng::seed_from_u64(world.options.seed ^ (u64::from(life.number) << 48));
        let sender = ChatSender::new(http, world.clock.clone(), rng, destinations);
        Self { world, life, sender }
    }
}

#[async_trait]
impl Messenger for SimMessenger {
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError> {
        self.life.ensure_alive().await;
        self.sender.send(delivery).await?;
        self.life.ensure_alive().await;
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
