//! The CLI's side of the operator API: one request, its errors in words a user can act
//! on (no daemon at the address, a missing or wrong token, the API's own refusal).

use reqwest::Method;
use serde_json::Value;

use crate::api::store_check::STORE_HEADER;
use crate::daemon::config::API_TOKEN_ENV_DEFAULT;
use crate::daemon::DaemonError;
use crate::limits::CLI_REQUEST_TIMEOUT_SECS;

pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// The daemon this client means: the store its config names, sent with every request
    /// so that a daemon serving another store refuses instead of obeying.
    expected: Option<Expected>,
}

/// Which daemon a client built from a config means, and how it found its address.
pub struct Expected {
    /// `daemon::identity::store_identity` of the config.
    pub store: String,
    pub config: std::path::PathBuf,
    /// Whether the address came from the running daemon's address file (else from the
    /// config's `listen`, where any daemon may answer).
    pub from_address_file: bool,
}

impl ApiClient {
    /// A client of the API at `base` (like `http://127.0.0.1:7420`), with the token from
    /// `SYSTOLE_API_TOKEN` when set.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(base: &str) -> Result<Self, DaemonError> {
        let token = std::env::var(API_TOKEN_ENV_DEFAULT).ok().filter(|token| !token.trim().is_empty());
        let http = reqwest::Client::builder()
            .user_agent(crate::ports::http::USER_AGENT)
            .timeout(std::time::Duration::from_secs(CLI_REQUEST_TIMEOUT_SECS))
            .build()
            .map_err(|e| DaemonError::Startup(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { base: base.trim_end_matches('/').to_owned(), token, http, expected: None })
    }

    /// The same client, meaning only the daemon that serves `expected.store`.
    #[must_use]
    pub fn expecting(mut self, expected: Expected) -> Self {
        self.expected = Some(expected);
        self
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request builder with the token, for callers that stream the answer.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, self.url(path));
        if let Some(expected) = &self.expected {
            request = request.header(STORE_HEADER, &expected.store);
        }
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends one request; a 2xx answer's JSON (`Null` when empty).
    ///
    /// # Errors
    /// No daemon answers (1), the token is missing or wrong (2), the API refused the
    /// request (2 for the caller's mistakes, 1 for the daemon's trouble).
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, DaemonError> {
        self.call_unless_missing(method, path, body).await?.map_err(DaemonError::Usage)
    }

    /// [`ApiClient::call`], with a 404's message as `Ok(Err(_))`: for a caller that asks
    /// whether something exists.
    ///
    /// # Errors
    /// As [`ApiClient::call`], for any refusal but a 404.
    pub async fn call_unless_missing(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Result<Value, String>, DaemonError> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|error| self.unreachable(&error))?;
        let status = response.status();
        let text = response.text().await.map_err(|error| self.unreachable(&error))?;
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status.is_success() {
            return Ok(Ok(value));
        }
        let message = value["error"]["message"].as_str().map_or_else(|| value.to_string(), str::to_owned);
        if value["error"]["code"] == "wrong-daemon" {
            return Err(self.wrong_daemon(&message));
        }
        if status.as_u16() == 401 {
            return Err(DaemonError::Usage(format!(
                "the API refused the token: {message} (set {API_TOKEN_ENV_DEFAULT} to the daemon's token)"
            )));
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            Ok(Err(message))
        } else if status.is_client_error() {
            Err(DaemonError::Usage(message))
        } else {
            Err(DaemonError::Startup(format!("the daemon answered {status}: {message}")))
        }
    }

    /// The daemon that answered serves another store than the config names.
    pub fn wrong_daemon(&self, message: &str) -> DaemonError {
        let config = self.expected.as_ref().map_or_else(String::new, |e| format!(" for {}", e.config.display()));
        DaemonError::Remote(format!(
            "no daemon{config} answers at {}: the one there refused, {message}. Start `systole serve` with this \
             config, or pass --url to steer that daemon on purpose",
            self.base
        ))
    }

    pub fn unreachable(&self, error: &reqwest::Error) -> DaemonError {
        // The root cause (connection refused, name not resolved) is what a user acts on.
        let cause = crate::adapters::http_error::describe(error);
        match &self.expected {
            Some(expected) if !expected.from_address_file => DaemonError::Remote(format!(
                "no daemon serves {}: it has no address file beside its store (it was not started, or it stopped), \
                 and nothing answers at its configured address {} ({cause}); start `systole serve --config {}`",
                expected.config.display(),
                self.base,
                expected.config.display()
            )),
            _ => DaemonError::Remote(format!(
                "no daemon answers at {} ({cause}); is `systole serve` running with this config? (--url overrides)",
                self.base
            )),
        }
    }
}

/// A path segment for a user-given id, so `a/b` cannot reach another route.
pub fn segment(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
