//! Real MCP servers for the tests: the Python test peer on the official SDK
//! (`tests/peers/mcp_server.py`, over stdio or streamable HTTP) and the reference server
//! `@modelcontextprotocol/server-everything` from npm, run through `npx` (a launcher whose
//! node grandchild must go with it). `scripts/install-test-deps.sh` installs both.
#![allow(clippy::disallowed_methods)] // real processes in real time
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Python peer's script.
pub fn peer_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_server.py")
}

/// Where `scripts/install-test-deps.sh` installs server-everything (its `--prefix`).
pub fn npm_prefix() -> PathBuf {
    match std::env::var_os("SYSTOLE_TEST_NPM_PREFIX") {
        Some(prefix) => PathBuf::from(prefix),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/systole-test-npm"),
    }
}

/// Fails with what to run when a peer is not installed.
pub fn require_peers() {
    let python = Command::new("python3").args(["-c", "import mcp.server.mcpserver"]).status();
    assert!(
        python.is_ok_and(|status| status.success()),
        "the Python MCP SDK is missing: run `bash scripts/install-test-deps.sh` (pip install mcp)"
    );
    let everything = npm_prefix().join("node_modules/.bin/mcp-server-everything");
    assert!(
        everything.exists(),
        "{} is missing: run `bash scripts/install-test-deps.sh` (npm install @modelcontextprotocol/server-everything)",
        everything.display()
    );
}

/// The TOML of a stdio server running the Python peer.
pub fn stdio_server_toml(name: &str, extra: &str) -> String {
    stdio_server_toml_with(name, &[], extra)
}

/// The same with more arguments for the peer (`--stderr-flood`).
pub fn stdio_server_toml_with(name: &str, args: &[&str], extra: &str) -> String {
    let more: String = args.iter().map(|arg| format!(", {arg:?}")).collect();
    format!(
        "[mcp.servers.{name}]\ncommand = \"python3\"\nargs = [{:?}, \"stdio\"{more}]\n{extra}\n",
        peer_script().display().to_string()
    )
}

/// The TOML of server-everything through `npx`.
pub fn everything_toml(name: &str, extra: &str) -> String {
    format!(
        "[mcp.servers.{name}]\ncommand = \"npx\"\nargs = [\"--no-install\", \"--prefix\", {:?}, \"mcp-server-everything\", \"stdio\"]\n{extra}\n",
        npm_prefix().display().to_string()
    )
}

/// The Python peer over streamable HTTP on a port of its own; killed with its test.
pub struct HttpPeer {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl HttpPeer {
    pub fn start(effects_file: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port_file = dir.path().join("port");
        let mut command = Command::new("python3");
        command.arg(peer_script()).arg("http").arg(&port_file).stdout(Stdio::null()).stderr(Stdio::null());
        if let Some(effects) = effects_file {
            command.env("EFFECTS_FILE", effects);
        }
        let child = command.spawn().expect("start the Python MCP peer");
        let started = Instant::now();
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                if !port.trim().is_empty() {
                    break port.trim().to_owned();
                }
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the HTTP MCP peer did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        // The port is bound before uvicorn serves; give it a moment to accept.
        let address = format!("127.0.0.1:{port}");
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "the HTTP MCP peer does not accept");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, url: format!("http://{address}/mcp"), _dir: dir }
    }
}

impl Drop for HttpPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Process ids whose command line contains `needle` (from /proc).
pub fn processes_matching(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to `secs` for `done`, polling.
pub fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
