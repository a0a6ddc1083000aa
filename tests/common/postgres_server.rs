//! A throwaway PostgreSQL server for tests: `initdb` into a fresh directory, `pg_ctl start`
//! on a free loopback port, password authentication (SCRAM) for the `systole` role, and
//! removal afterwards. Debian's `postgresql` package provides the binaries (`.ci/run`
//! installs it); they are found on `PATH` or under `/usr/lib/postgresql/<version>/bin`.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root the server runs as
//! `nobody`. A watchdog process stops the server and removes its directory once the test
//! process is gone, so a panicking test, or a server shared by a whole test binary through
//! a `static`, never outlives the run.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The role tests connect as, and its password (a throwaway server's, not a secret).
pub const POSTGRES_TEST_USER: &str = "systole";
pub const POSTGRES_TEST_PASSWORD: &str = "throwaway-test-password";
/// Tries at a free port: another process may take the one picked before the server binds.
const START_ATTEMPTS_MAX: u32 = 3;
/// Connections the server accepts: three daemons and a benchmark's pools fit.
const SERVER_CONNECTIONS_MAX: u32 = 200;

static SERVERS_STARTED: AtomicU32 = AtomicU32::new(0);

pub struct PostgresServer {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as: Option<&'static str>,
}

/// One server for a whole test binary, started on first use; each test makes its own
/// database on it ([`PostgresServer::create_database`]).
pub fn shared() -> &'static PostgresServer {
    static SERVER: std::sync::OnceLock<PostgresServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(PostgresServer::start)
}

/// A database no other test of this process uses.
pub async fn fresh_database() -> String {
    static DATABASES: AtomicU32 = AtomicU32::new(0);
    let serial = DATABASES.fetch_add(1, Ordering::Relaxed);
    shared().create_database(&format!("test_{serial}")).await
}

impl PostgresServer {
    /// Starts a fresh server.
    ///
    /// # Panics
    /// When PostgreSQL is not installed or does not start: a test that needs it cannot run.
    pub fn start() -> Self {
        let bin = binaries().unwrap_or_else(|| {
            panic!("PostgreSQL's initdb was not found on PATH or under /usr/lib/postgresql/*/bin; run .ci/run or apt-get install postgresql")
        });
        // Whether this process is root, through `id -u`: no libc dependency for one call.
        let root = Command::new("id").arg("-u").output().map(|out| out.stdout == b"0\n").unwrap_or(false);
        let run_as = root.then_some("nobody");
        let serial = SERVERS_STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("systole-pg-{}-{serial}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        let server = PostgresServer { dir, bin, port: 0, run_as };
        server.watch_for_exit();
        server.chown_to_server_user();
        let password_file = server.dir.join("password");
        std::fs::write(&password_file, POSTGRES_TEST_PASSWORD).expect("write the password file");
        server.chown_to_server_user();
        let data = server.data_dir();
        let status = server
            .command("initdb")
            .args(["-D"])
            .arg(&data)
            .args(["-U", POSTGRES_TEST_USER, "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"])
            .arg(format!("--pwfile={}", password_file.display()))
            .stdout(Stdio::null())
            .status()
            .expect("run initdb");
        assert!(status.success(), "initdb failed in {}", server.dir.display());
        let mut server = server;
        for attempt in 1..=START_ATTEMPTS_MAX {
            server.port = free_port();
            let options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c max_connections={SERVER_CONNECTIONS_MAX}",
                server.port,
                server.dir.display()
            );
            let status = server
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(server.dir.join("server.log"))
                .args(["-w", "-o", &options, "start"])
                .stdout(Stdio::null())
                .status()
                .expect("run pg_ctl start");
            if status.success() {
                return server;
            }
            assert!(attempt < START_ATTEMPTS_MAX, "PostgreSQL did not start; see {}/server.log", server.dir.display());
        }
        unreachable!("the loop returns or panics")
    }

    /// The URL of `database` on this server, without the password.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{POSTGRES_TEST_USER}@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates an empty database and returns its URL (without the password).
    pub async fn create_database(&self, name: &str) -> String {
        use sqlx::{Connection, Executor};
        let options: sqlx::postgres::PgConnectOptions = self
            .url("postgres")
            .parse::<sqlx::postgres::PgConnectOptions>()
            .expect("url")
            .password(POSTGRES_TEST_PASSWORD);
        let mut connection =
            sqlx::PgConnection::connect_with(&options).await.expect("connect to the postgres database");
        connection.execute(format!("CREATE DATABASE \"{name}\"").as_str()).await.expect("create database");
        connection.close().await.expect("close");
        self.url(name)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `program` from the server's binaries, as the server's user.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match self.run_as {
            Some(user) => {
                let mut command = Command::new("setpriv");
                command.args(["--reuid", user, "--regid", "nogroup", "--clear-groups", "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    fn chown_to_server_user(&self) {
        if let Some(user) = self.run_as {
            let status = Command::new("chown")
                .args(["-R", &format!("{user}:nogroup")])
                .arg(&self.dir)
                .status()
                .expect("run chown");
            assert!(status.success(), "chown of {} failed", self.dir.display());
        }
    }

    /// A detached shell that waits for this process to end, then stops the server at once
    /// and removes its directory.
    fn watch_for_exit(&self) {
        let stop = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {pg_ctl} -D {data} stop -m immediate >/dev/null 2>&1; \
             rm -rf {dir}",
            pid = std::process::id(),
            pg_ctl = shell_words(&self.command_line("pg_ctl")),
            data = self.data_dir().display(),
            dir = self.dir.display(),
        );
        // Never waited for: it must outlive this process, and it exits only after it.
        #[allow(clippy::zombie_processes)]
        Command::new("sh")
            .args(["-c", &stop])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the server's watchdog");
    }

    fn command_line(&self, program: &str) -> Vec<String> {
        let path = self.bin.join(program).display().to_string();
        match self.run_as {
            Some(user) => ["setpriv", "--reuid", user, "--regid", "nogroup", "--clear-groups", "--", &path]
                .map(str::to_owned)
                .to_vec(),
            None => vec![path],
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn shell_words(words: &[String]) -> String {
    words.iter().map(|word| format!("'{}'", word.replace('\'', "'\\''"))).collect::<Vec<_>>().join(" ")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

/// The directory holding `initdb` and `pg_ctl`.
fn binaries() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir(Path::new("/usr/lib/postgresql"))
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort_by_key(|bin| {
        bin.parent()
            .and_then(|version| version.file_name())
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop()
}
