//! A simulated chat platform behind the HTTP port: the engine's real delivery code (split,
//! retries, each platform's request and answer shapes) talks to it. It answers each
//! request as the seed's platform would: delivered, a 429 with a short retry-after in
//! that platform's shape, a refusal (Slack's in a 200 with `ok: false`), a connection
//! that fails, or a slow answer (past the request's timeout: a timeout, never posted).
//! Every request is recorded with its part's key and what became of it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::delivery::platform::Platform;
use systole::delivery::sender::Destination;
use systole::delivery::signing::WebhookSecret;
use systole::ports::clock::Clock;
use systole::ports::http::{HttpClient, HttpError, HttpRequest, HttpResponse};

use crate::faults::FaultKind;
use crate::trace::{Event, PartOutcome};
use crate::world::{Life, World};

/// The longest a slow platform takes to answer.
const SLOW_SECS_MAX: u64 = 120;
/// The longest retry-after a simulated 429 asks for.
const RETRY_AFTER_SECS_MAX: u64 = 20;

/// Which platform the seed's deliveries go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimPlatform {
    Discord,
    Slack,
    Telegram,
    Webhook { signed: bool },
}

impl SimPlatform {
    pub fn draw(rng: &mut ChaCha8Rng) -> Self {
        match rng.random_range(0..5) {
            0 => SimPlatform::Discord,
            1 => SimPlatform::Slack,
            2 => SimPlatform::Telegram,
            other => SimPlatform::Webhook { signed: other == 3 },
        }
    }

    /// The sender's destination for every `sim:` target.
    pub fn destination(self) -> Destination {
        let base_url = "http://platform.sim".to_owned();
        let token = "sim-token".to_owned();
        let platform = match self {
            SimPlatform::Discord => Platform::Discord { base_url, token },
            SimPlatform::Slack => Platform::Slack { base_url, token },
            SimPlatform::Telegram => Platform::Telegram { base_url, token },
            SimPlatform::Webhook { signed } => Platform::Webhook {
                url: format!("{base_url}/hook"),
                secret: signed.then(|| WebhookSecret::parse("whsec_c2ltdWxhdGVkIHNlY3JldA==")).and_then(Result::ok),
            },
        };
        Destination { platform, timeout: Duration::from_secs(10), attempts_max: 3 }
    }

    fn rate_limited(self, seconds: u64) -> HttpResponse {
        let (headers, body) = match self {
            SimPlatform::Telegram => {
                (Vec::new(), format!(r#"{{"ok":false,"error_code":429,"parameters":{{"retry_after":{seconds}}}}}"#))
            }
            SimPlatform::Discord => (Vec::new(), format!(r#"{{"message":"rate limited","retry_after":{seconds}.0}}"#)),
            _ => (vec![("retry-after".to_owned(), seconds.to_string())], String::new()),
        };
        HttpResponse { status: 429, headers, body: body.into_bytes() }
    }

    fn refused(self) -> HttpResponse {
        let (status, body) = match self {
            SimPlatform::Slack => (200, r#"{"ok":false,"error":"channel_not_found"}"#),
            SimPlatform::Telegram => {
                (400, r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#)
            }
            SimPlatform::Discord => (403, r#"{"message":"Missing Access","code":50001}"#),
            SimPlatform::Webhook { .. } => (410, "gone"),
        };
        HttpResponse { status, headers: Vec::new(), body: body.as_bytes().to_vec() }
    }

    fn delivered(self) -> HttpResponse {
        let body = match self {
            SimPlatform::Slack | SimPlatform::Telegram => r#"{"ok":true}"#,
            SimPlatform::Discord => r#"{"id":"1"}"#,
            SimPlatform::Webhook { .. } => "",
        };
        HttpResponse { status: 200, headers: Vec::new(), body: body.as_bytes().to_vec() }
    }
}

pub struct SimHttp {
    pub world: Arc<World>,
    pub life: Arc<Life>,
}

#[async_trait]
impl HttpClient for SimHttp {
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.life.ensure_alive().await;
        let platform = self.world.options.platform;
        let key = request
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("idempotency-key"))
            .map_or_else(String::new, |(_, value)| value.clone());
        let injector = &self.world.injector;
        let record =
            |outcome| self.world.record(Event::PartPosted { life: self.life.number, key: key.clone(), outcome });
        if injector.roll(FaultKind::DeliveryFailure) {
            self.world.fault(FaultKind::DeliveryFailure, &key);
            record(PartOutcome::Unreachable);
            return Err(HttpError("connection refused (injected)".to_owned()));
        }
        if injector.roll(FaultKind::DeliverySlow) {
            let secs = injector.draw(1..SLOW_SECS_MAX);
            self.world.fault(FaultKind::DeliverySlow, format!("{key} for {secs}s"));
            let wait = Duration::from_secs(secs).min(request.timeout);
            self.world.clock.sleep(wait).await;
            self.life.ensure_alive().await;
            if Duration::from_secs(secs) > request.timeout {
                record(PartOutcome::Unreachable);
                return Err(HttpError("operation timed out (injected)".to_owned()));
            }
        }
        if injector.roll(FaultKind::DeliveryRateLimited) {
            let seconds = injector.draw(1..RETRY_AFTER_SECS_MAX + 1);
            self.world.fault(FaultKind::DeliveryRateLimited, format!("{key}: retry after {seconds}s"));
            record(PartOutcome::RateLimited);
            return Ok(platform.rate_limited(seconds));
        }
        if injector.roll(FaultKind::DeliveryRefused) {
            self.world.fault(FaultKind::DeliveryRefused, &key);
            record(PartOutcome::Refused);
            return Ok(platform.refused());
        }
        record(PartOutcome::Accepted);
        Ok(platform.delivered())
    }
}
