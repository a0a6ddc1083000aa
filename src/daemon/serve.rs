//! `systole serve`: wires the real ports, seeds the config, runs the engine until
//! SIGINT/SIGTERM, then lets in-flight runs finish within the grace period.

use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::adapters::dir_workspace::DirWorkspace;
use crate::adapters::openai::OpenAiClient;
use crate::adapters::otlp::OtlpExporter;
use crate::adapters::reqwest_http::ReqwestHttp;
use crate::adapters::scripted_llm::ScriptedLlm;
use crate::adapters::system_clock::SystemClock;
use crate::api::feed::EventFeed;
use crate::api::reload::{ReloadCall, Reloader};
use crate::api::ApiState;
use crate::cluster::engines::{ClusterRoute, Engines};
use crate::cluster::reload::NodeReload;
use crate::cluster::{self, ClusterHandle};
use crate::daemon::config::{Config, ConfigError, LlmConfig};
use crate::daemon::redaction;
use crate::daemon::reload::{ConfigReloader, ReloadTarget};
use crate::daemon::serve_api;
use crate::daemon::store_file::{self, DaemonLock};
use crate::daemon::store_open;
use crate::daemon::DaemonError;
use crate::delivery::sender::ChatSender;
use crate::delivery::settings::destinations;
use crate::driver::events::{EventSink, TracingSink};
use crate::driver::{self, EngineHandle, EngineOptions, Ports};
use crate::limits::STORE_CLOSE_MILLIS_MAX;
use crate::mcp::servers::{self as mcp_servers, McpServers};
use crate::metrics::metered::{MeteredLlm, MeteredMessenger, MeteredSink, MeteredTools};
use crate::metrics::Metrics;
use crate::ports::clock::Clock;
use crate::ports::llm::Llm;
use crate::ports::store::Store;
use crate::ports::tools::ToolServers;

/// Builds the configured LLM provider.
///
/// # Errors
/// When the API key variable is named but unset, or the HTTP client cannot be built.
/// The messenger of the configured adapters, with their secrets read from the environment.
///
/// # Errors
/// When a secret's variable is unset or unusable (the message names the variable).
pub fn build_messenger(config: &Config, clock: Arc<dyn Clock>) -> Result<Arc<ChatSender>, DaemonError> {
    let destinations = destinations(&config.adapters, |name| std::env::var(name).ok()).map_err(DaemonError::Startup)?;
    // Retry jitter needs randomness; the real daemon seeds it from the OS once, here.
    let rng = ChaCha8Rng::from_os_rng();
    Ok(Arc::new(ChatSender::new(Arc::new(ReqwestHttp::new()), clock, rng, destinations)))
}

pub fn build_llm(config: &LlmConfig, clock: Arc<dyn Clock>) -> Result<Arc<dyn Llm>, DaemonError> {
    match config {
        LlmConfig::Scripted { replies } => Ok(Arc::new(ScriptedLlm::new(replies.clone()))),
        LlmConfig::OpenAi { base_url, model, api_key_env, timeout, attempts_max } => {
            let api_key = match api_key_env {
                Some(name) => Some(std::env::var(name).map_err(|_| {
                    DaemonError::Startup(format!(
                        "llm.api_key_env names {name:?}, but that environment variable is not set"
                    ))
                })?),
                None => None,
            };
            let client = OpenAiClient::new(base_url, model, api_key, *timeout, clock)
                .map_err(|e| DaemonError::Startup(e.to_string()))?
                .with_attempts_max(*attempts_max);
            Ok(Arc::new(client))
        }
    }
}

/// Runs the daemon until a stop signal.
///
/// # Errors
/// When the store cannot be opened or seeded, or the LLM provider cannot be built.
pub async fn serve(config: Config) -> Result<(), DaemonError> {
    store_file::check_path(&config)?;
    // Watched first: a SIGTERM during start-up (a supervisor stopping it, a test that saw
    // the store's lock taken) waits for the loop below and stops it cleanly, instead of
    // killing it by the signal's default action.
    let mut signals = Signals::watch()?;
    // A variable an MCP server needs and the environment lacks stops start-up, naming it.
    let mcp_secrets = mcp_servers::secrets(&config.mcp, |name| std::env::var(name).ok()).map_err(|missing| {
        DaemonError::Config(ConfigError {
            file: config.file.display().to_string(),
            field: missing.field.clone(),
            problem: format!("names {}, which is not set in the environment", missing.variable),
        })
    })?;
    // So does one a trace receiver's header names (ADR 0022).
    let telemetry_headers = match &config.telemetry {
        Some(telemetry) => telemetry.header_values(|name| std::env::var(name).ok()).map_err(|(field, variable)| {
            DaemonError::Config(ConfigError {
                file: config.file.display().to_string(),
                field,
                problem: format!("names {variable}, which is not set in the environment"),
            })
        })?,
        None => Vec::new(),
    };
    // One daemon per store: two would compete for every slot and the write lock.
    let _lock = DaemonLock::acquire(&config)?;
    let token = serve_api::resolve_token(&config.api.token)?;
    // Bound before anything starts, so a taken port fails the start-up, not later.
    let listener = match config.api.listen {
        Some(address) => Some(serve_api::bind(address, token.as_deref()).await?),
        None => None,
    };
    // Checked before the store opens: a node the others cannot reach must not join.
    let advertised = match &config.cluster {
        Some(settings) => {
            let bound = listener.as_ref().and_then(|listener| listener.local_addr().ok());
            serve_api::advertised_url(settings.api_url.as_deref(), bound)?
        }
        None => None,
    };
    let opened = store_open::open_for_daemon(&config).await?;
    let store = Arc::clone(&opened.store);
    let closing = Arc::clone(&opened.store);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let metrics = Arc::new(Metrics::default());
    let feed = Arc::new(EventFeed::default());
    let llm = build_llm(&config.llm, Arc::clone(&clock))?;
    let llm = Arc::new(MeteredLlm { inner: llm, clock: Arc::clone(&clock), metrics: Arc::clone(&metrics) });
    let messenger = build_messenger(&config, Arc::clone(&clock))?;
    let messenger = Arc::new(MeteredMessenger { inner: messenger, metrics: Arc::clone(&metrics) });
    let workspace = Arc::new(DirWorkspace::new(config.workspaces.clone()));
    // Servers start with the daemon; runs due at once find their tools (ADR 0019).
    let redactor =
        redaction::transcript_redactor(&config, &mcp_secrets, token.as_deref(), |name| std::env::var(name).ok());
    let mcp = McpServers::start(&config.mcp, mcp_secrets).await;
    let tools: Arc<dyn ToolServers> =
        Arc::new(MeteredTools { inner: mcp.clone(), clock: Arc::clone(&clock), metrics: Arc::clone(&metrics) });
    let mut ports = Ports::new(Arc::clone(&clock), llm, messenger, Arc::clone(&store))
        .with_workspace(workspace)
        .with_tools(Arc::clone(&tools));
    if let Some(telemetry) = &config.telemetry {
        // Traces over OTLP (ADR 0022): each finished run hands its trace to the exporter.
        tracing::info!(endpoint = %telemetry.endpoint, "exporting traces over OTLP/HTTP");
        let http = Arc::new(ReqwestHttp::new());
        let exporter = OtlpExporter::start(telemetry.clone(), telemetry_headers, http, Arc::clone(&metrics));
        ports = ports.with_telemetry(Arc::new(exporter));
    }
    let sinks: Vec<Arc<dyn EventSink>> = vec![Arc::new(TracingSink), feed.clone()];
    ports.events = Arc::new(MeteredSink { next: sinks, metrics: Arc::clone(&metrics) });
    let options = EngineOptions {
        breaker_failures_max: config.engine.breaker_failures_max,
        error_backoff: config.engine.error_backoff.clone(),
        breaker_cooldown: config.engine.breaker_cooldown.clone(),
        alerts_target: config.engine.alerts_target.clone(),
        runs_in_flight_max: config.engine.runs_in_flight_max,
        system_prompt: config.system_prompt.clone().unwrap_or(EngineOptions::default().system_prompt),
        agents: config.agents.clone(),
        agent_default: config.agent_default.clone(),
        global_caps: config.engine.global_caps.clone(),
        visibility: config.visibility.clone(),
        run_retention: config.run_retention,
        prices: config.prices.clone(),
        redactor,
        ..EngineOptions::default()
    };
    // Seeded once here, through the unfenced store: every node seeds the same file, and
    // the store makes them take turns.
    let report = store.seed_config(&config.heartbeats, clock.wall()).await?;
    tracing::info!(
        store = %config.store_path.display(),
        inserted = report.inserted.len(),
        updated = report.updated.len(),
        unchanged = report.unchanged.len(),
        removed = report.removed.len(),
        "config seeded"
    );
    let running = match (&config.cluster, opened.leases) {
        (Some(settings), Some(leases)) => {
            tracing::info!(
                node = %settings.node,
                lease_secs = settings.lease.as_secs(),
                api_url = advertised.as_deref().unwrap_or("none"),
                "joining the cluster"
            );
            let settings = cluster::ClusterSettings { api_url: advertised.clone(), ..settings.clone() };
            Running::Cluster(cluster::start(settings, leases, ports, options))
        }
        _ => Running::One(driver::start(ports, options).await?),
    };
    let engines = running.engines();
    // On a node of a cluster, a reload reaches every node (ADR 0024).
    let target = match &engines {
        Engines::One(engine) => ReloadTarget::One(engine.clone()),
        Engines::Cluster(route) => ReloadTarget::Cluster {
            node: NodeReload { route: route.clone(), store: Arc::clone(&store), clock: Arc::clone(&clock) },
            token: token.clone(),
        },
    };
    let reloader: Arc<dyn Reloader> = Arc::new(ConfigReloader::new(config.clone(), target, Arc::clone(&mcp)));
    let api = match listener {
        Some(listener) => {
            let state = ApiState {
                engine: engines.clone(),
                store,
                clock: Arc::clone(&clock),
                agents: Arc::new(config.agents.clone()),
                agent_default: Arc::new(config.agent_default.clone()),
                global_caps: Arc::new(config.engine.global_caps.clone()),
                metrics,
                feed,
                user_turns: Arc::default(),
                token,
                reloader: Some(Arc::clone(&reloader)),
                store_identity: Some(crate::daemon::identity::store_identity(&config).into()),
                tools: Arc::clone(&tools),
            };
            Some(ApiServer::start(listener, state, &config.store_path)?)
        }
        None => None,
    };
    tracing::info!(heartbeats = config.heartbeats.len(), "systole is running; stop with Ctrl-C, reload with SIGHUP");
    while signals.next().await == Signal::Reload {
        match reloader.reload(ReloadCall::Operator).await {
            Ok(report) => tracing::info!(%report, "config reloaded (SIGHUP)"),
            Err(error) => tracing::error!(?error, "config not reloaded (SIGHUP); nothing changed"),
        }
    }
    // The API goes first: nothing can change the engine while it drains.
    drop(api);
    // The jobs with a run going only: a view of every job was a million at a stop.
    let going: Vec<String> =
        engines.keys_in_flight().await.unwrap_or_default().iter().map(ToString::to_string).collect();
    tracing::info!(
        grace_secs = config.engine.shutdown_grace.as_secs(),
        runs = ?going,
        "stopping: letting in-flight runs finish (a second Ctrl-C stops at once)"
    );
    let abandoned = tokio::select! {
        abandoned = running.shutdown(config.engine.shutdown_grace) => abandoned,
        () = signals.stop_again() => {
            // Like a crash: the next start-up records the runs as interrupted.
            tracing::warn!(runs = ?going, "stopped at once; the runs still going will be recorded as interrupted");
            return Ok(());
        }
    };
    if abandoned > 0 {
        tracing::warn!(
            abandoned,
            "runs still going at the end of the grace period were abandoned; they will be recorded as interrupted"
        );
    }
    // After the runs: a run's last tool call may still be going during the grace.
    mcp.shutdown().await;
    close_store(closing.as_ref(), clock.as_ref()).await;
    tracing::info!("stopped");
    Ok(())
}

/// Last at a stop, once every result is written: SQLite's file then holds every commit
/// itself, so a copy of it alone is a whole backup. Bounded, so that a connection someone
/// still holds cannot keep the process from exiting; an unclosed store loses nothing
/// (the next start reads through the WAL, as after a crash).
async fn close_store(store: &dyn Store, clock: &dyn Clock) {
    let deadline = clock.monotonic() + std::time::Duration::from_millis(STORE_CLOSE_MILLIS_MAX);
    tokio::select! {
        closed = store.close() => {
            if let Err(error) = closed {
                tracing::warn!(%error, "the store did not close cleanly; the next start recovers it");
            }
        }
        () = clock.sleep_until(deadline) => tracing::warn!(
            millis = STORE_CLOSE_MILLIS_MAX,
            "the store did not close in time; the next start recovers it"
        ),
    }
}

/// The engine of a single node, or a node's part of a cluster.
enum Running {
    One(EngineHandle),
    Cluster(ClusterHandle),
}

impl Running {
    fn engines(&self) -> Engines {
        match self {
            Running::One(engine) => Engines::One(engine.client()),
            Running::Cluster(handle) => Engines::Cluster(ClusterRoute::new(handle)),
        }
    }

    /// Stops the engines; returns how many runs were abandoned (a cluster's are counted
    /// by the engines' own logs).
    async fn shutdown(self, grace: std::time::Duration) -> usize {
        match self {
            Running::One(engine) => engine.shutdown(grace).await,
            Running::Cluster(handle) => {
                handle.shutdown(grace).await;
                0
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Stop,
    Reload,
}

/// SIGINT and SIGTERM stop the daemon, SIGHUP reloads its config.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn watch() -> Result<Self, DaemonError> {
        use tokio::signal::unix::{signal, SignalKind};
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| DaemonError::Startup(format!("cannot watch {name}: {e}")))
        };
        Ok(Self {
            interrupt: watch(SignalKind::interrupt(), "SIGINT")?,
            terminate: watch(SignalKind::terminate(), "SIGTERM")?,
            hangup: watch(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::Stop,
            _ = self.terminate.recv() => Signal::Stop,
            _ = self.hangup.recv() => Signal::Reload,
        }
    }

    /// The second stop signal, while the first one's shutdown waits for runs.
    async fn stop_again(&mut self) {
        while self.next().await != Signal::Stop {}
    }
}

/// The API served in the background; dropping it stops it and removes the address file.
struct ApiServer {
    task: tokio::task::JoinHandle<()>,
    address_file: std::path::PathBuf,
}

impl ApiServer {
    fn start(
        listener: tokio::net::TcpListener,
        state: ApiState,
        store_path: &std::path::Path,
    ) -> Result<Self, DaemonError> {
        let address = listener.local_addr().map_err(|e| DaemonError::Startup(format!("api.listen: {e}")))?;
        let address_file = serve_api::address_file(store_path);
        serve_api::write_address_file(&address_file, &format!("http://{address}"))
            .map_err(|e| DaemonError::Startup(format!("cannot write {}: {e}", address_file.display())))?;
        let protected = if state.token.is_some() { "bearer token required" } else { "no token: loopback only" };
        let app = crate::api::router(state);
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::error!(%error, "the API server stopped");
            }
        });
        tracing::info!(url = %format!("http://{address}"), protected, "operator API listening");
        Ok(Self { task, address_file })
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.address_file);
    }
}
