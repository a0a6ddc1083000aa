//! `[adapters.*]`: webhooks, the bot platforms and the platforms' webhook URLs. Only the
//! names of the variables that hold secrets are read here.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Validator};
use crate::delivery::settings::{AdapterSettings, BotAdapter, UrlAdapter, WebhookEndpoint, BOT_PLATFORMS};
use crate::limits::{
    CHAT_ATTEMPTS_MAX_DEFAULT, CHAT_TIMEOUT_SECS_DEFAULT, WEBHOOK_ATTEMPTS_MAX_DEFAULT, WEBHOOK_ATTEMPTS_MAX_LIMIT,
    WEBHOOK_TIMEOUT_SECS_DEFAULT,
};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdapters {
    #[serde(default)]
    webhook: BTreeMap<String, RawWebhook>,
    discord: Option<RawBot>,
    slack: Option<RawBot>,
    telegram: Option<RawBot>,
    #[serde(default, rename = "discord-webhook")]
    discord_webhook: BTreeMap<String, RawUrl>,
    #[serde(default, rename = "slack-webhook")]
    slack_webhook: BTreeMap<String, RawUrl>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    url: String,
    timeout: Option<String>,
    attempts: Option<u32>,
    /// The variable holding a `whsec_...` secret: deliveries are signed (Standard Webhooks).
    secret_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBot {
    token_env: Option<String>,
    base_url: Option<String>,
    timeout: Option<String>,
    attempts: Option<u32>,
    /// Off by default: a model's reply notifies nobody.
    #[serde(default)]
    allow_mentions: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUrl {
    url_env: Option<String>,
    /// Refused with a clear word: the URL is a secret.
    url: Option<String>,
    timeout: Option<String>,
    attempts: Option<u32>,
    #[serde(default)]
    allow_mentions: bool,
}

impl Validator<'_> {
    pub(super) fn adapters(&self, raw: RawAdapters) -> Result<AdapterSettings, ConfigError> {
        let mut settings = AdapterSettings::default();
        for (name, webhook) in raw.webhook {
            let field = format!("adapters.webhook.{name}");
            self.adapter_name(&field, &name)?;
            self.http_url(&format!("{field}.url"), &webhook.url)?;
            let (timeout, attempts_max) = self.patience(
                &field,
                webhook.timeout,
                webhook.attempts,
                WEBHOOK_TIMEOUT_SECS_DEFAULT,
                WEBHOOK_ATTEMPTS_MAX_DEFAULT,
            )?;
            let secret_env = webhook
                .secret_env
                .map(|variable| self.variable(&format!("{field}.secret_env"), variable))
                .transpose()?;
            settings.webhooks.insert(name, WebhookEndpoint { url: webhook.url, timeout, attempts_max, secret_env });
        }
        for ((adapter, token_env, base_url), raw) in
            BOT_PLATFORMS.into_iter().zip([raw.discord, raw.slack, raw.telegram])
        {
            let Some(raw) = raw else { continue };
            let field = format!("adapters.{adapter}");
            let token_env =
                self.variable(&format!("{field}.token_env"), raw.token_env.unwrap_or_else(|| token_env.to_owned()))?;
            let base_url = raw.base_url.unwrap_or_else(|| base_url.to_owned());
            self.http_url(&format!("{field}.base_url"), &base_url)?;
            let (timeout, attempts_max) =
                self.patience(&field, raw.timeout, raw.attempts, CHAT_TIMEOUT_SECS_DEFAULT, CHAT_ATTEMPTS_MAX_DEFAULT)?;
            let allow_mentions = raw.allow_mentions;
            settings
                .bots
                .insert(adapter.to_owned(), BotAdapter { token_env, base_url, timeout, attempts_max, allow_mentions });
        }
        for (kind, urls) in [("discord-webhook", raw.discord_webhook), ("slack-webhook", raw.slack_webhook)] {
            for (name, raw) in urls {
                let field = format!("adapters.{kind}.{name}");
                self.adapter_name(&field, &name)?;
                if raw.url.is_some() {
                    let problem = "a webhook URL is a secret (anyone with it can post): put it in an environment variable and name that with `url_env`";
                    return Err(self.error(format!("{field}.url"), problem));
                }
                let Some(url_env) = raw.url_env else {
                    return Err(self.error(
                        format!("{field}.url_env"),
                        "is missing: name the environment variable that holds the webhook URL",
                    ));
                };
                let url_env = self.variable(&format!("{field}.url_env"), url_env)?;
                let (timeout, attempts_max) = self.patience(
                    &field,
                    raw.timeout,
                    raw.attempts,
                    CHAT_TIMEOUT_SECS_DEFAULT,
                    CHAT_ATTEMPTS_MAX_DEFAULT,
                )?;
                let adapter = UrlAdapter { url_env, timeout, attempts_max, allow_mentions: raw.allow_mentions };
                settings.urls.insert(format!("{kind}:{name}"), adapter);
            }
        }
        Ok(settings)
    }

    fn adapter_name(&self, field: &str, name: &str) -> Result<(), ConfigError> {
        if name.is_empty() || name.contains(':') {
            return Err(self.error(field, "a name must be non-empty and have no ':'"));
        }
        Ok(())
    }

    pub(super) fn http_url(&self, field: &str, url: &str) -> Result<(), ConfigError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(self.error(field, format!("{url:?} is not an http:// or https:// URL")));
        }
        Ok(())
    }

    /// The name of an environment variable (not its value, which may be a secret).
    pub(super) fn variable(&self, field: &str, name: String) -> Result<String, ConfigError> {
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(self.error(
                field,
                "must be the name of an environment variable, like MY_TOKEN (the secret itself never goes in the file)",
            ));
        }
        Ok(name)
    }

    /// One attempt's timeout and the attempts per message.
    fn patience(
        &self,
        field: &str,
        timeout: Option<String>,
        attempts: Option<u32>,
        timeout_secs_default: u64,
        attempts_default: u32,
    ) -> Result<(Duration, u32), ConfigError> {
        let timeout =
            self.timeout(&format!("{field}.timeout"), timeout.as_deref(), Duration::from_secs(timeout_secs_default))?;
        let attempts = self.count(
            &format!("{field}.attempts"),
            attempts.map(u64::from),
            u64::from(attempts_default),
            u64::from(WEBHOOK_ATTEMPTS_MAX_LIMIT),
        )?;
        Ok((timeout, u32::try_from(attempts).unwrap_or(WEBHOOK_ATTEMPTS_MAX_LIMIT)))
    }
}
