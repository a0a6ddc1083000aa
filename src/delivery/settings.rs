//! What the config says about adapters: names and limits, and the names of the
//! environment variables that hold secrets (never the secrets). [`destinations`] reads
//! the variables and builds what the sender needs.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::delivery_target::DeliveryTarget;
use crate::delivery::platform::Platform;
use crate::delivery::sender::Destination;
use crate::delivery::signing::WebhookSecret;

/// One `[adapters.webhook.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEndpoint {
    pub url: String,
    pub timeout: Duration,
    pub attempts_max: u32,
    /// The variable holding its `whsec_...` secret: deliveries are then signed.
    pub secret_env: Option<String>,
}

/// A platform reached with a bot token (`[adapters.discord]`, `slack`, `telegram`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotAdapter {
    pub token_env: String,
    pub base_url: String,
    pub timeout: Duration,
    pub attempts_max: u32,
    /// `allow_mentions = true`: a reply may notify people (off by default).
    pub allow_mentions: bool,
}

/// A webhook URL of a platform (`[adapters.discord-webhook.NAME]`, `slack-webhook`): the
/// URL is a secret (it alone lets anyone post), so it comes from a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlAdapter {
    pub url_env: String,
    pub timeout: Duration,
    pub attempts_max: u32,
    /// `allow_mentions = true`: a reply may notify people (off by default).
    pub allow_mentions: bool,
}

/// The bot platforms: (adapter name, default token variable, default base URL).
pub const BOT_PLATFORMS: [(&str, &str, &str); 3] = [
    ("discord", "DISCORD_BOT_TOKEN", "https://discord.com"),
    ("slack", "SLACK_BOT_TOKEN", "https://slack.com/api"),
    ("telegram", "TELEGRAM_BOT_TOKEN", "https://api.telegram.org"),
];

/// Every adapter the config sets up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdapterSettings {
    pub webhooks: BTreeMap<String, WebhookEndpoint>,
    /// By adapter name (`discord`).
    pub bots: BTreeMap<String, BotAdapter>,
    /// By target (`discord-webhook:NAME`).
    pub urls: BTreeMap<String, UrlAdapter>,
}

impl AdapterSettings {
    /// Whether `target` names a configured adapter (`stdout` and `silent` always are).
    pub fn knows(&self, target: &DeliveryTarget) -> bool {
        match target.adapter() {
            DeliveryTarget::STDOUT | DeliveryTarget::SILENT => true,
            "webhook" => self.webhooks.contains_key(target.target()),
            adapter if self.bots.contains_key(adapter) => !target.target().is_empty(),
            _ => self.urls.contains_key(&target.to_string()),
        }
    }

    /// The named targets (`webhook:ops`, `slack-webhook:team`): a model may deliver there.
    pub fn named_targets(&self) -> impl Iterator<Item = String> + '_ {
        self.webhooks.keys().map(|name| format!("webhook:{name}")).chain(self.urls.keys().cloned())
    }
}

/// Builds the sender's destinations, reading each secret from the environment through `env`.
///
/// # Errors
/// When a variable is unset or holds something unusable; the message names the field and
/// the variable, never the value.
pub fn destinations(
    settings: &AdapterSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, Destination>, String> {
    let read = |field: &str, variable: &str| {
        env(variable).filter(|value| !value.trim().is_empty()).map(|value| value.trim().to_owned()).ok_or_else(|| {
            format!("{field}: the environment variable {variable} is not set (it holds the secret; the config only names it)")
        })
    };
    let mut destinations = BTreeMap::new();
    for (name, endpoint) in &settings.webhooks {
        let field = format!("adapters.webhook.{name}.secret_env");
        let secret = match &endpoint.secret_env {
            Some(variable) => Some(
                WebhookSecret::parse(&read(&field, variable)?)
                    .map_err(|problem| format!("{field}: the value of {variable} {problem}"))?,
            ),
            None => None,
        };
        let platform = Platform::Webhook { url: endpoint.url.clone(), secret };
        // A webhook's JSON mentions nobody: what its receiver does with the text is its own.
        let destination = Destination {
            platform,
            timeout: endpoint.timeout,
            attempts_max: endpoint.attempts_max,
            allow_mentions: false,
        };
        destinations.insert(format!("webhook:{name}"), destination);
    }
    for (adapter, bot) in &settings.bots {
        let token = read(&format!("adapters.{adapter}.token_env"), &bot.token_env)?;
        let base_url = bot.base_url.clone();
        let platform = match adapter.as_str() {
            "discord" => Platform::Discord { base_url, token },
            "slack" => Platform::Slack { base_url, token },
            "telegram" => Platform::Telegram { base_url, token },
            other => return Err(format!("adapters.{other}: no such platform")),
        };
        destinations.insert(
            adapter.clone(),
            Destination {
                platform,
                timeout: bot.timeout,
                attempts_max: bot.attempts_max,
                allow_mentions: bot.allow_mentions,
            },
        );
    }
    for (target, adapter) in &settings.urls {
        let (kind, name) = target.split_once(':').unwrap_or((target.as_str(), ""));
        let url = read(&format!("adapters.{kind}.{name}.url_env"), &adapter.url_env)?;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(format!(
                "adapters.{kind}.{name}.url_env: the value of {} is not an http(s) URL",
                adapter.url_env
            ));
        }
        let platform =
            if kind == "discord-webhook" { Platform::DiscordWebhook { url } } else { Platform::SlackWebhook { url } };
        let destination = Destination {
            platform,
            timeout: adapter.timeout,
            attempts_max: adapter.attempts_max,
            allow_mentions: adapter.allow_mentions,
        };
        destinations.insert(target.clone(), destination);
    }
    Ok(destinations)
}
