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
use crate::trace::{Event, PartOutcome, PartShape};
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
    pub fn destination(self, allow_mentions: bool) -> Destination {
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
        Destination { platform, timeout: Duration::from_secs(10), attempts_max: 3, allow_mentions }
    }

    /// The longest text the platform takes, in UTF-16 units: Discord's 2,000 and Telegram's
    /// 4,096 are hard limits; Slack truncates at 40,000 and documents 4,000 as the most a
    /// message should hold, which systole promises, so the simulated Slack refuses past it.
    pub fn limit_units(self) -> Option<usize> {
        match self {
            SimPlatform::Discord => Some(2_000),
            SimPlatform::Slack => Some(4_000),
            SimPlatform::Telegram => Some(4_096),
            SimPlatform::Webhook { .. } => None,
        }
    }

    /// The message text of a request body, as the platform reads it.
    fn text_of(self, body: &serde_json::Value) -> String {
        let field = if self == SimPlatform::Discord { "content" } else { "text" };
        body[field].as_str().unwrap_or_default().to_owned()
    }

    /// Whom the platform would notify for this request, as the real one reads its text and
    /// switches: Slack's `<!channel>`, `<!here>`, `<!everyone>`, `<@U..>`, `<!subteam^..>`;
    /// Telegram's `@name`; Discord's `@everyone`, `@here`, `<@id>`, `<@&id>` unless
    /// `allowed_mentions` parses none of them. `None`: nobody.
    pub fn notified(self, body: &serde_json::Value) -> Option<String> {
        let text = self.text_of(body);
        match self {
            SimPlatform::Slack => ["<!channel", "<!here", "<!everyone", "<@", "<!subteam"]
                .iter()
                .find(|sequence| text.contains(*sequence))
                .map(|sequence| format!("Slack reads {sequence}...> as a mention")),
            SimPlatform::Telegram => text
                .char_indices()
                .find(|(at, c)| {
                    *c == '@' && text[at + 1..].starts_with(|n: char| n.is_ascii_alphanumeric() || n == '_')
                })
                .map(|(at, _)| {
                    format!("Telegram reads {:?} as a mention", text[at..].chars().take(12).collect::<String>())
                }),
            SimPlatform::Discord => {
                let parsed = body["allowed_mentions"]["parse"].as_array().map(Vec::len);
                let mentions = ["@everyone", "@here", "<@"].iter().find(|sequence| text.contains(*sequence));
                match (parsed, mentions) {
                    (Some(0), _) | (_, None) => None,
                    (_, Some(sequence)) => Some(format!("Discord pings {sequence} (allowed_mentions {parsed:?})")),
                }
            }
            SimPlatform::Webhook { .. } => None,
        }
    }

    fn too_long(self) -> HttpResponse {
        let (status, body) = match self {
            SimPlatform::Slack => (200, r#"{"ok":false,"error":"msg_too_long"}"#),
            SimPlatform::Telegram => {
                (400, r#"{"ok":false,"error_code":400,"description":"Bad Request: message is too long"}"#)
            }
            _ => (400, r#"{"message":"Invalid Form Body","code":50035}"#),
        };
        HttpResponse { status, headers: Vec::new(), body: body.as_bytes().to_vec() }
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
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let shape = PartShape {
            units: platform.text_of(&body).encode_utf16().count(),
            notified: platform.notified(&body),
            user_agent: request
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("user-agent"))
                .map_or_else(String::new, |(_, value)| value.clone()),
        };
        let record = |outcome| {
            let event = Event::PartPosted { life: self.life.number, key: key.clone(), outcome, shape: shape.clone() };
            self.world.record(event);
        };
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
        if platform.limit_units().is_some_and(|limit| shape.units > limit) {
            // As the real platform: an oversized part is refused (not a fault: the engine's bug).
            record(PartOutcome::Refused);
            return Ok(platform.too_long());
        }
        record(PartOutcome::Accepted);
        Ok(platform.delivered())
    }
}
