//! The HTTP port: one request out, one response back. Chat platforms and webhooks are
//! reached through it, so their adapters (splitting, retries, signatures, how each
//! platform says "no") run unchanged against the real network and against fakes.

use std::time::Duration;

use async_trait::async_trait;

/// What every request of systole says it is (`systole/<version> (+<repository>)`).
pub const USER_AGENT: &str = concat!("systole/", env!("CARGO_PKG_VERSION"), " (+", env!("CARGO_PKG_REPOSITORY"), ")");
/// Discord's required form for bots: `DiscordBot ($url, $versionNumber)`.
pub const USER_AGENT_DISCORD: &str =
    concat!("DiscordBot (", env!("CARGO_PKG_REPOSITORY"), ", ", env!("CARGO_PKG_VERSION"), ")");

/// One request. Bodies are bytes: a signature covers exactly what is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The most this attempt may take.
    pub timeout: Duration,
}

impl HttpRequest {
    /// A JSON `POST` (the only kind of request an adapter makes), with [`USER_AGENT`].
    pub fn post_json(url: String, body: &serde_json::Value, timeout: Duration) -> Self {
        let headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("User-Agent".to_owned(), USER_AGENT.to_owned()),
        ];
        Self { url, headers, body: body.to_string().into_bytes(), timeout }
    }

    /// Sets a header, replacing one of the same name (names compare without case).
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(key, _)| *key == name).map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The body as text, cut to `chars_max` characters (for error messages).
    pub fn excerpt(&self, chars_max: usize) -> String {
        String::from_utf8_lossy(&self.body).chars().take(chars_max).collect()
    }
}

/// The request did not get a response (refused, unreachable, timed out), with its root cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(pub String);

#[async_trait]
pub trait HttpClient: Send + Sync + 'static {
    /// Sends one `POST`.
    ///
    /// # Errors
    /// When no response came back.
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, HttpError>;
}
