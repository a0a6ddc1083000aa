//! Routes each delivery to its adapter by the target's `adapter:` prefix.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::adapters::stdout::deliver_to_stdout;
use crate::adapters::webhook::{WebhookEndpoint, WebhookSender};
use crate::core::delivery_target::DeliveryTarget;
use crate::ports::messenger::{Delivery, DeliveryError, Messenger};

pub struct AdapterRouter {
    webhook: WebhookSender,
    webhook_endpoints: BTreeMap<String, WebhookEndpoint>,
}

impl AdapterRouter {
    pub fn new(webhook: WebhookSender, webhook_endpoints: BTreeMap<String, WebhookEndpoint>) -> Self {
        Self { webhook, webhook_endpoints }
    }
}

#[async_trait]
impl Messenger for AdapterRouter {
    async fn deliver(&self, delivery: &Delivery) -> Result<(), DeliveryError> {
        let target = &delivery.target;
        match target.adapter.as_str() {
            DeliveryTarget::STDOUT => deliver_to_stdout(delivery),
            "webhook" => match self.webhook_endpoints.get(&target.target) {
                Some(endpoint) => self.webhook.send(&target.target, endpoint, delivery).await,
                None => Err(DeliveryError::UnknownAdapter(target.to_string())),
            },
            _ => Err(DeliveryError::UnknownAdapter(target.to_string())),
        }
    }
}
