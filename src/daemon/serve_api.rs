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

/// Writes the API's `url` to its address file whole or not at all: written in place, a
/// reader (the CLI, a test harness) could find the file made and still empty, and take the
/// configured `listen` address, or none, for the daemon's.
pub fn write_address_file(path: &Path, url: &str) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    std::fs::write(&partial, format!("{url}\n"))?;
    std::fs::rename(&partial, path)
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

/// Where the other nodes of a cluster reach this node's API (ADR 0024): `[cluster]
/// advertise_url`, else the address the API is bound to. `None` when it serves no API.
///
/// # Errors
/// When the API listens on every interface (`0.0.0.0`, `::`) and no `advertise_url` says
/// which of the machine's addresses the other nodes should use.
pub fn advertised_url(configured: Option<&str>, bound: Option<SocketAddr>) -> Result<Option<String>, DaemonError> {
    match (configured, bound) {
        (Some(url), Some(_)) => Ok(Some(url.to_owned())),
        (Some(_), None) => Err(DaemonError::Startup(
            "cluster.advertise_url: is set but this node serves no API (api.listen is off)".to_owned(),
        )),
        (None, Some(address)) if address.ip().is_unspecified() => Err(DaemonError::Startup(format!(
            "cluster.advertise_url: is needed when api.listen is {address}; name the address the other nodes \
             reach this one at, like http://10.0.0.5:{}",
            address.port()
        ))),
        (None, Some(address)) => Ok(Some(format!("http://{address}"))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_file_is_written_whole_and_leaves_nothing_beside_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = address_file(&dir.path().join("state.db"));
        write_address_file(&path, "http://127.0.0.1:4100").expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "http://127.0.0.1:4100\n");
        // A restart on another port replaces it.
        write_address_file(&path, "http://127.0.0.1:4200").expect("write again");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "http://127.0.0.1:4200\n");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["state.db.api"], "no partial file left behind");
    }
}
