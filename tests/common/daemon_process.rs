//! A real `systole serve` process for end-to-end tests, and the local peers it talks to:
//! the config written into a temporary folder, the daemon's log beside it, and its API
//! address read from the file the daemon writes once it serves.
#![allow(dead_code)] // each test binary uses what it needs

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a daemon may take to write its API address.
const START_SECS_MAX: u64 = 30;

/// Serves `app` on a free port of 127.0.0.1.
pub async fn serve_loopback(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    address
}

/// Writes `config` to `dir/systole.toml` (its store `state.db` in `dir`), starts the
/// daemon on it with `envs`, its stderr in `dir/daemon.log`, and waits for its API's
/// address. Returns the process and the API's base URL.
pub async fn spawn_serve(dir: &Path, config: &str, envs: &[(&str, &str)]) -> (Child, String) {
    let path = dir.join("systole.toml");
    std::fs::write(&path, config).expect("write config");
    let log = std::fs::File::create(dir.join("daemon.log")).expect("log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_systole"));
    command.args(["serve", "--config", path.to_str().expect("utf-8")]).env("RUST_LOG", "info");
    for (name, value) in envs {
        command.env(name, value);
    }
    let mut child = command.stdout(Stdio::null()).stderr(log).spawn().expect("start daemon");
    let address_file = dir.join("state.db.api");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(START_SECS_MAX) {
        // The daemon writes the file whole (a rename): found, it holds the address.
        if let Ok(text) = std::fs::read_to_string(&address_file) {
            return (child, text.trim().to_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    panic!("the daemon did not write its API address within {START_SECS_MAX} s:\n{log}");
}
