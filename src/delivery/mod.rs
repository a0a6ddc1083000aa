//! Delivery to where people are: chat platforms (Discord, Slack, Telegram, by bot token
//! or by webhook URL) and webhooks (signed per Standard Webhooks when a secret is set),
//! behind the `Messenger` port, over the `HttpClient` port. What is configured lives in
//! [`settings`]; secrets are read from the environment when the sender is built.

pub mod platform;
pub mod sender;
pub mod settings;
pub mod signing;
