//! `[api]`: where the operator API listens and where its token comes from. The token
//! itself never sits in the config: it is read from the environment or a file at start-up.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, Validator};

/// Where the API listens unless `[api] listen` says otherwise.
pub const API_LISTEN_DEFAULT: &str = "127.0.0.1:7420";
/// The variable the token is read from unless `[api] token_env` names another.
pub const API_TOKEN_ENV_DEFAULT: &str = "SYSTOLE_API_TOKEN";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    /// `host:port`; `""` turns the API off.
    listen: Option<String>,
    token_env: Option<String>,
    token_file: Option<String>,
}

/// Where the token comes from; read by `serve`, never stored in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable; unset or empty means no token.
    Env(String),
    /// A file (relative paths against the config's folder) holding the token; it must exist.
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// `None` when `listen = ""`: no API.
    pub listen: Option<SocketAddr>,
    pub token: TokenSource,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self { listen: API_LISTEN_DEFAULT.parse().ok(), token: TokenSource::Env(API_TOKEN_ENV_DEFAULT.to_owned()) }
    }
}

impl Validator<'_> {
    pub(super) fn api(&self, raw: RawApi) -> Result<ApiConfig, ConfigError> {
        let listen = match raw.listen.as_deref() {
            None => API_LISTEN_DEFAULT.parse().ok(),
            Some("") => None,
            Some(text) => Some(text.parse::<SocketAddr>().map_err(|_| {
                self.error(
                    "api.listen",
                    format!("{text:?} is not an address like \"127.0.0.1:7420\" (or \"\" for no API)"),
                )
            })?),
        };
        let token = match (raw.token_env, raw.token_file) {
            (Some(_), Some(_)) => return Err(self.error("api.token_file", "give token_env or token_file, not both")),
            (Some(name), None) if name.trim().is_empty() => {
                return Err(self.error("api.token_env", "is empty; name an environment variable"))
            }
            (Some(name), None) => TokenSource::Env(name),
            (None, Some(path)) if path.trim().is_empty() => {
                return Err(self.error("api.token_file", "is empty; name a file that holds the token"))
            }
            (None, Some(path)) => TokenSource::File(self.path.parent().unwrap_or_else(|| Path::new(".")).join(path)),
            (None, None) => TokenSource::Env(API_TOKEN_ENV_DEFAULT.to_owned()),
        };
        Ok(ApiConfig { listen, token })
    }
}
