//! The operator API's side of `serve`: the token from the environment or a file, the
//! refusal to listen beyond loopback without one, the listener, and the address file the
//! CLI finds the API by (`<store>.api`, removed again at stop).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::daemon::config::{Config, TokenSource};
use crate::daemon::DaemonError;

/// The token the API requires, if one is set.
///
/// # Errors
/// When `token_file` cannot be read or is empty.
pub fn resolve_token(source: &TokenSource) -> Result<Option<Arc<str>>, DaemonError> {
    match source {
        TokenSource::Env(name) => {
            Ok(std::env::var(name).ok().map(|token| token.trim().to_owned()).filter(|t| !t.is_empty()).map(Into::into))
        }
        TokenSource::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                DaemonError::Startup(format!("api.token_file: cannot read {}: {error}", path.display()))
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(DaemonError::Startup(format!("api.token_file: {} is empty", path.display())));
            }
            Ok(Some(token.into()))
        }
    }
}

/// Binds the API's address, refusing one beyond loopback when no token protects it.
///
/// # Errors
/// When the address is not loopback and there is no token, or it cannot be bound.
pub async fn bind(address: SocketAddr, token: Option<&str>) -> Result<tokio::net::TcpListener, DaemonError> {
    if !address.ip().is_loopback() && token.is_none() {
        return Err(DaemonError::Startup(format!(
            "api.listen: {address} is reachable from other machines, and no token protects it; set \
             SYSTOLE_API_TOKEN (or [api] token_env / token_file), or listen on 127.0.0.1"
        )));
    }
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| DaemonError::Startup(format!("api.listen: cannot listen on {address}: {error}")))
}

/// `<store>.api`: where a running daemon's API answers.
pub fn address_file(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".api");
    PathBuf::from(name)
}

/// The API's base URL for the CLI, and whether it came from the running daemon's address
/// file (else it is the configured `listen` address, where another daemon may answer).
pub fn api_url(config: &Config) -> Option<(String, bool)> {
    if let Ok(text) = std::fs::read_to_string(address_file(&config.store_path)) {
        let url = text.trim();
        if !url.is_empty() {
            return Some((url.to_owned(), true));
        }
    }
    config.api.listen.map(|address| (format!("http://{address}"), false))
}
