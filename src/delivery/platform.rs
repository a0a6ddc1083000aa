//! How each platform is addressed and how it answers: the request for one part of a
//! message, and the verdict on the response (delivered, wait and retry, or refused).

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{json, Value};

use crate::core::chat_text::TextRules;
use crate::delivery::signing::WebhookSecret;
use crate::limits::{
    DELIVERY_ERROR_BODY_CHARS_MAX, DISCORD_MESSAGE_CHARS_MAX, SLACK_MESSAGE_CHARS_MAX, TELEGRAM_MESSAGE_CHARS_MAX,
};
use crate::ports::http::{HttpRequest, HttpResponse, USER_AGENT_DISCORD};
use crate::ports::messenger::Delivery;

/// One part of a message on its way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part<'a> {
    /// Rendered already by the platform's [`TextRules`]: sent as it is.
    pub text: &'a str,
    /// The same for every attempt at this part of this slot.
    pub idempotency_key: &'a str,
    /// Whether the target lets a message notify people (`allow_mentions`; off by default).
    pub mentions: bool,
}

/// What a response means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Worth another attempt, after the platform's own wait if it gave one.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// The platform refused this message and would refuse it again.
    Refused(String),
}

/// A configured destination of one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Platform {
    /// `discord:CHANNEL_ID` through a bot token.
    Discord { base_url: String, token: String },
    /// `discord-webhook:NAME`.
    DiscordWebhook { url: String },
    /// `slack:CHANNEL` through `chat.postMessage`.
    Slack { base_url: String, token: String },
    /// `slack-webhook:NAME` (an incoming webhook).
    SlackWebhook { url: String },
    /// `telegram:CHAT_ID` through the Bot API.
    Telegram { base_url: String, token: String },
    /// `webhook:NAME`: the JSON of a delivery, signed per Standard Webhooks when a secret is set.
    Webhook { url: String, secret: Option<WebhookSecret> },
}

impl Platform {
    /// The adapter's name in a target (`discord` in `discord:123`).
    pub fn adapter(&self) -> &'static str {
        match self {
            Platform::Discord { .. } => "discord",
            Platform::DiscordWebhook { .. } => "discord-webhook",
            Platform::Slack { .. } => "slack",
            Platform::SlackWebhook { .. } => "slack-webhook",
            Platform::Telegram { .. } => "telegram",
            Platform::Webhook { .. } => "webhook",
        }
    }

    /// The longest part the platform takes (webhooks take the whole message).
    pub fn part_chars_max(&self) -> usize {
        match self {
            Platform::Discord { .. } | Platform::DiscordWebhook { .. } => DISCORD_MESSAGE_CHARS_MAX,
            Platform::Slack { .. } | Platform::SlackWebhook { .. } => SLACK_MESSAGE_CHARS_MAX,
            Platform::Telegram { .. } => TELEGRAM_MESSAGE_CHARS_MAX,
            Platform::Webhook { .. } => usize::MAX,
        }
    }

    /// How the platform reads a message's text, with or without mentions.
    pub fn text_rules(&self, mentions: bool) -> TextRules {
        match self {
            Platform::Slack { .. } | Platform::SlackWebhook { .. } => TextRules::Slack { mentions },
            Platform::Telegram { .. } => TextRules::Telegram { mentions },
            Platform::Discord { .. } | Platform::DiscordWebhook { .. } | Platform::Webhook { .. } => {
                TextRules::AsWritten
            }
        }
    }

    /// The request that posts `part` to `channel` (the target after the adapter's name).
    /// Every request carries the part's key as `Idempotency-Key`: a webhook receiver drops
    /// repeats by it, and a proxy or a log can tell the attempts at one part apart.
    pub fn request(
        &self,
        channel: &str,
        part: &Part<'_>,
        delivery: &Delivery,
        now: Timestamp,
        timeout: Duration,
    ) -> HttpRequest {
        let request = self.platform_request(channel, part, delivery, now, timeout);
        let request = match self {
            // Discord's API reference requires this form from bots.
            Platform::Discord { .. } => request.header("User-Agent", USER_AGENT_DISCORD),
            _ => request,
        };
        request.header("Idempotency-Key", part.idempotency_key)
    }

    fn platform_request(
        &self,
        channel: &str,
        part: &Part<'_>,
        delivery: &Delivery,
        now: Timestamp,
        timeout: Duration,
    ) -> HttpRequest {
        // Nobody is pinged by what a model wrote unless the target allows it: mentions are
        // shown, not notified. (Slack and Telegram text is rendered before it gets here.)
        let mentions =
            if part.mentions { json!({ "parse": ["users", "roles", "everyone"] }) } else { json!({ "parse": [] }) };
        match self {
            Platform::Discord { base_url, token } => {
                let url = format!("{}/api/v10/channels/{channel}/messages", base_url.trim_end_matches('/'));
                // Discord drops a second message with the same nonce for a few minutes.
                let body = json!({ "content": part.text, "allowed_mentions": mentions,
                    "nonce": discord_nonce(part.idempotency_key), "enforce_nonce": true });
                HttpRequest::post_json(url, &body, timeout).header("Authorization", format!("Bot {token}"))
            }
            Platform::DiscordWebhook { url } => {
                let separator = if url.contains('?') { '&' } else { '?' };
                let body = json!({ "content": part.text, "allowed_mentions": mentions });
                HttpRequest::post_json(format!("{url}{separator}wait=true"), &body, timeout)
            }
            Platform::Slack { base_url, token } => {
                let url = format!("{}/chat.postMessage", base_url.trim_end_matches('/'));
                // Plain `@channel` is never linked, whatever Slack's defaults become.
                let body = json!({ "channel": channel, "text": part.text, "parse": "none", "link_names": false });
                HttpRequest::post_json(url, &body, timeout).header("Authorization", format!("Bearer {token}"))
            }
            Platform::SlackWebhook { url } => {
                let body = json!({ "text": part.text, "parse": "none", "link_names": false });
                HttpRequest::post_json(url.clone(), &body, timeout)
            }
            Platform::Telegram { base_url, token } => {
                let url = format!("{}/bot{token}/sendMessage", base_url.trim_end_matches('/'));
                // Plain text: a model's stray `*` or `_` cannot break entity parsing.
                let body = json!({ "chat_id": channel, "text": part.text });
                HttpRequest::post_json(url, &body, timeout)
            }
            Platform::Webhook { url, secret } => {
                let body = webhook_body(delivery, part.text);
                let mut request = HttpRequest::post_json(url.clone(), &body, timeout);
                if let Some(secret) = secret {
                    let timestamp = now.as_second();
                    let signature = secret.sign(part.idempotency_key, timestamp, &request.body);
                    request = request
                        .header("webhook-id", part.idempotency_key)
                        .header("webhook-timestamp", timestamp.to_string())
                        .header("webhook-signature", signature);
                }
                request
            }
        }
    }

    /// What `response` means for this platform.
    pub fn verdict(&self, response: &HttpResponse) -> Verdict {
        let body = response.json();
        let excerpt = || response.excerpt(DELIVERY_ERROR_BODY_CHARS_MAX);
        let status = response.status;
        // Slack's Web API answers 200 with `ok: false` when it refuses.
        if let (Platform::Slack { .. }, Some(false)) = (self, body.as_ref().and_then(|b| b["ok"].as_bool())) {
            let error = body.as_ref().and_then(|b| b["error"].as_str()).unwrap_or("unknown error").to_owned();
            if error == "ratelimited" {
                return Verdict::Retry {
                    after: retry_after(response, body.as_ref()),
                    why: "Slack: ratelimited".to_owned(),
                };
            }
            return Verdict::Refused(format!("Slack answered ok: false ({error})"));
        }
        match status {
            200..=299 => Verdict::Delivered,
            408 | 429 | 500..=599 => {
                let why = format!("HTTP {status}: {}", describe_error(self, body.as_ref()).unwrap_or_else(excerpt));
                Verdict::Retry { after: retry_after(response, body.as_ref()), why }
            }
            _ => Verdict::Refused(format!(
                "HTTP {status}: {}",
                describe_error(self, body.as_ref()).unwrap_or_else(excerpt)
            )),
        }
    }
}

/// The JSON a webhook receives.
fn webhook_body(delivery: &Delivery, text: &str) -> Value {
    json!({
        "text": text,
        "agent": delivery.heartbeat.agent.as_str(),
        "heartbeat": delivery.heartbeat.heartbeat.as_str(),
        "scheduled_for": delivery.scheduled_for.to_string(),
        "idempotency_key": delivery.idempotency_key,
        "kind": delivery.kind.as_str(),
    })
}

/// The platform's own words for a refusal, where it has a field for them.
fn describe_error(platform: &Platform, body: Option<&Value>) -> Option<String> {
    let body = body?;
    let text = match platform {
        Platform::Telegram { .. } => body["description"].as_str(),
        Platform::Discord { .. } | Platform::DiscordWebhook { .. } => body["message"].as_str(),
        Platform::Slack { .. } => body["error"].as_str(),
        _ => None,
    }?;
    Some(text.chars().take(DELIVERY_ERROR_BODY_CHARS_MAX).collect())
}

/// How long the platform asked to wait: Telegram's `parameters.retry_after`, Discord's
/// `retry_after` (seconds, may be fractional), else the `Retry-After` header in seconds.
fn retry_after(response: &HttpResponse, body: Option<&Value>) -> Option<Duration> {
    let from_body = body.and_then(|b| b["parameters"]["retry_after"].as_f64().or_else(|| b["retry_after"].as_f64()));
    let seconds =
        from_body.or_else(|| response.header("retry-after").and_then(|value| value.trim().parse::<f64>().ok()))?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(1e9)))
}

/// Discord's nonce (at most 25 characters) for an idempotency key.
fn discord_nonce(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key.as_bytes());
    crate::core::hex::lower_hex(&digest)[..25].to_owned()
}
