//! The command line: `serve`, the verbs that steer a running daemon through its API
//! (`status`, `heartbeat`, `cron`, `agent`, `events`), and offline tools (`config check`,
//! `schedule preview`, `completions`). `heartbeat list|runs` read the store, so they work
//! whether a daemon runs or not.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, Parser, Subcommand};
use reqwest::Method;
use serde_json::json;

use crate::adapters::system_clock::SystemClock;
use crate::core::heartbeat::JobKind;
use crate::daemon::client::{segment, ApiClient, Expected};
use crate::daemon::config::{self, API_LISTEN_DEFAULT};
use crate::daemon::deliver_test::deliver_test;
use crate::daemon::identity;
use crate::daemon::list;
use crate::daemon::preview::{preview, PreviewSpec};
use crate::daemon::remote::{self, job_body, job_call, job_path};
use crate::daemon::serve::serve;
use crate::daemon::serve_api::api_url;
use crate::daemon::store_open;
use crate::daemon::DaemonError;
use crate::mcp::report::{catalog_json, catalog_text};
use crate::mcp::servers::McpServers;
use crate::mcp::settings::McpSettings;
use crate::ports::clock::Clock;
use crate::ports::tools::{ServerState, ToolServers};

const RUNS_LIMIT_DEFAULT: usize = 20;
/// The config file when neither `--config` nor `$SYSTOLE_CONFIG` names one.
pub const CONFIG_PATH_DEFAULT: &str = "systole.toml";

#[derive(Debug, Parser)]
#[command(name = "systole", version, about = "A heartbeat and cron engine for AI agents")]
pub struct Cli {
    /// The config file.
    #[arg(long, global = true, env = "SYSTOLE_CONFIG", default_value = CONFIG_PATH_DEFAULT)]
    pub config: PathBuf,
    /// The running daemon's API (default: the address the daemon wrote beside its store,
    /// then the config's [api] listen).
    #[arg(long, global = true, env = "SYSTOLE_URL")]
    pub url: Option<String>,
    /// Log level (error, warn, info, debug, trace) or a RUST_LOG filter; RUST_LOG wins.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine with the real clock until SIGINT/SIGTERM.
    Serve,
    /// Every agent and job of the running daemon: next run, last result, and why a slot
    /// due now would not run.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Heartbeats (`[[agents.heartbeats]]`, the agent heartbeat, those the `heartbeat` tool made).
    Heartbeat {
        #[command(subcommand)]
        command: JobCommand,
    },
    /// Cron jobs (`[[agents.cron]]` and those the `cron` tool made).
    Cron {
        #[command(subcommand)]
        command: JobCommand,
    },
    /// Agents: pause, resume, wake, system events.
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Follow the running daemon's events live (runs and state changes), one per line.
    Events,
    /// Work with config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Work with schedules.
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Check a delivery target.
    Deliver {
        #[command(subcommand)]
        command: DeliverCommand,
    },
    /// MCP servers and their tools.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
}

#[derive(Debug, Subcommand)]
pub enum DeliverCommand {
    /// Send one message through the configured adapter and print what the platform answered.
    Test {
        /// Like discord:123456789, slack:C0123, telegram:-100123, webhook:ops.
        target: String,
        text: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// The running daemon's servers: state, tools (with the server's hints and the
    /// operator's read-only mark), and which agents and jobs may use each.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Connect to one configured server now (no daemon needed), list its tools, report.
    Check {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file without starting anything; exit 2 naming the field if it is wrong.
    Check { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// List the next runs of a schedule, like `systemd-analyze calendar`.
    Preview {
        /// A cron expression: 5 fields, or 6 with seconds first.
        #[arg(long, group = "kind", required = true)]
        cron: Option<String>,
        /// An interval of elapsed time, like 30m or 1h30m.
        #[arg(long, group = "kind")]
        every: Option<String>,
        /// One time: RFC 3339, or a local time read in --tz.
        #[arg(long, group = "kind")]
        at: Option<String>,
        /// IANA time zone of the schedule (default UTC).
        #[arg(long)]
        tz: Option<String>,
        /// Start from this RFC 3339 time instead of now.
        #[arg(long)]
        from: Option<String>,
        #[arg(long, default_value_t = 10)]
        count: usize,
    },
}

/// Which job: its id, and its agent when several agents have one by that id.
#[derive(Debug, Args)]
pub struct JobRef {
    /// The heartbeat or cron job id.
    pub id: String,
    #[arg(long)]
    pub agent: Option<String>,
}

/// What `create` and `update` set; `update` changes only what is given.
#[derive(Debug, Args)]
pub struct JobFields {
    #[arg(long)]
    pub prompt: Option<String>,
    /// An interval, like 30m.
    #[arg(long)]
    pub every: Option<String>,
    /// A cron expression.
    #[arg(long)]
    pub cron: Option<String>,
    /// The IANA zone of --cron or --at.
    #[arg(long)]
    pub timezone: Option<String>,
    /// One time, RFC 3339.
    #[arg(long)]
    pub at: Option<String>,
    /// Where replies go, like webhook:ops.
    #[arg(long)]
    pub target: Option<String>,
    /// Cron jobs: announce or silent.
    #[arg(long)]
    pub delivery: Option<String>,
    /// Active hours, HH:MM to HH:MM in the agent's zone.
    #[arg(long)]
    pub active_start: Option<String>,
    #[arg(long)]
    pub active_end: Option<String>,
    /// skip, once or all.
    #[arg(long)]
    pub catch_up: Option<String>,
    /// skip, buffer_one or allow_all.
    #[arg(long)]
    pub overlap: Option<String>,
    /// A stable spread of runs, like 5m.
    #[arg(long)]
    pub jitter: Option<String>,
}

impl JobFields {
    fn body(self) -> Result<serde_json::Value, DaemonError> {
        let pairs = [
            ("prompt", self.prompt),
            ("every", self.every),
            ("cron", self.cron),
            ("timezone", self.timezone),
            ("at", self.at),
            ("target", self.target),
            ("delivery", self.delivery),
            ("catch_up", self.catch_up),
            ("overlap", self.overlap),
            ("jitter", self.jitter),
        ];
        job_body(&pairs, (self.active_start, self.active_end))
    }
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// List every one in the store with its state (works with no daemon running).
    List {
        /// Only this agent's.
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show the newest runs of one, each with the slot it stands for (from the store).
    Runs {
        #[command(flatten)]
        job: JobRef,
        #[arg(long, default_value_t = RUNS_LIMIT_DEFAULT)]
        limit: usize,
        /// Print one run's transcript instead: what the model was sent and answered
        /// (`latest`, or the run's slot as RFC 3339).
        #[arg(long, value_name = "SLOT")]
        transcript: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one, with what the running engine says of it.
    Show {
        #[command(flatten)]
        job: JobRef,
        #[arg(long)]
        json: bool,
    },
    /// Create one at run time (the config's own are changed in the file).
    Create {
        id: String,
        #[arg(long)]
        agent: String,
        #[command(flatten)]
        fields: JobFields,
        #[arg(long)]
        json: bool,
    },
    /// Change one made at run time.
    Update {
        #[command(flatten)]
        job: JobRef,
        #[command(flatten)]
        fields: JobFields,
        #[arg(long)]
        json: bool,
    },
    /// Delete one made at run time.
    Delete {
        #[command(flatten)]
        job: JobRef,
    },
    /// Enable one; this also clears a tripped circuit breaker.
    Enable {
        #[command(flatten)]
        job: JobRef,
    },
    Disable {
        #[command(flatten)]
        job: JobRef,
    },
    /// Run one now, once (a pause, quiet hours and a backoff do not hold it).
    Trigger {
        #[command(flatten)]
        job: JobRef,
    },
    /// Run the slots a past window held that were never decided, oldest first (cron and at).
    Backfill {
        #[command(flatten)]
        job: JobRef,
        /// RFC 3339, like 2026-11-20T00:00:00Z.
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    List {
        #[arg(long)]
        json: bool,
    },
    /// Pause state, today's LLM budget, last run event.
    Show {
        agent: String,
        #[arg(long)]
        json: bool,
    },
    /// Pause the agent's timed heartbeats.
    Pause {
        agent: String,
        #[arg(long)]
        minutes: u32,
    },
    /// End a pause early.
    Resume { agent: String },
    /// Wake the agent heartbeat now.
    Wake {
        agent: String,
        /// manual, hook:NAME or exec-event.
        #[arg(long, default_value = "manual")]
        reason: String,
        /// Queued as a system event the woken run reads.
        #[arg(long)]
        text: Option<String>,
    },
    /// Queue a system event for the agent heartbeat.
    Event {
        agent: String,
        #[arg(long)]
        text: String,
        /// next-heartbeat (default) or now.
        #[arg(long, default_value = "next-heartbeat")]
        mode: String,
    },
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command could not do, with the exit code in [`DaemonError::exit_code`].
pub async fn run(cli: Cli) -> Result<(), DaemonError> {
    let Cli { config, url, command, .. } = cli;
    match command {
        Command::Serve => serve(config::load(&config)?).await,
        Command::Status { json } => {
            print!("{}", remote::status(&client(&config, url)?, json).await?);
            Ok(())
        }
        Command::Heartbeat { command } => job_command(JobKind::Heartbeat, command, &config, url).await,
        Command::Cron { command } => job_command(JobKind::Cron, command, &config, url).await,
        Command::Agent { command } => agent_command(command, &client(&config, url)?).await,
        Command::Events => remote::follow(&client(&config, url)?).await,
        Command::Config { command: ConfigCommand::Check { file } } => {
            let config = config::load(&file)?;
            let agents = config.agents.len();
            println!(
                "{}: valid: {agents} agent(s), {} heartbeat(s) and cron job(s)",
                file.display(),
                config.heartbeats.len()
            );
            Ok(())
        }
        Command::Mcp { command: McpCommand::List { json } } => {
            let catalog = client(&config, url)?.call(Method::GET, "/v1/mcp", None).await?;
            print!("{}", if json { format!("{catalog:#}\n") } else { catalog_text(&catalog) });
            Ok(())
        }
        Command::Mcp { command: McpCommand::Check { name, json } } => {
            let (catalog, ready) = mcp_check(&config::load(&config)?, &name).await?;
            print!("{}", if json { format!("{catalog:#}\n") } else { catalog_text(&catalog) });
            if ready {
                Ok(())
            } else {
                Err(DaemonError::Remote(format!("MCP server {name} is not ready (see above)")))
            }
        }
        Command::Deliver { command: DeliverCommand::Test { target, text } } => {
            print!("{}", deliver_test(&config::load(&config)?, &target, &text).await?);
            Ok(())
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "systole", &mut std::io::stdout());
            Ok(())
        }
        Command::Schedule { command: ScheduleCommand::Preview { cron, every, at, tz, from, count } } => {
            let spec = match (cron, every, at) {
                (Some(expression), _, _) => PreviewSpec::Cron { expression },
                (_, Some(duration), _) => PreviewSpec::Every { duration },
                (_, _, Some(time)) => PreviewSpec::At { time },
                _ => return Err(DaemonError::Usage("give one of --cron, --every or --at".to_owned())),
            };
            let from = match from {
                Some(text) => {
                    text.parse().map_err(|_| DaemonError::Usage(format!("--from: {text:?} is not an RFC 3339 time")))?
                }
                None => SystemClock::new().wall(),
            };
            let preview = preview(&spec, tz.as_deref(), from, count).map_err(|e| DaemonError::Usage(e.to_string()))?;
            eprintln!("{}", preview.description);
            for line in preview.lines {
                println!("{line}");
            }
            Ok(())
        }
    }
}

/// `systole mcp check NAME`: connects to the one server as the daemon would, lists its
/// tools and ends it; the catalog, and whether it was ready.
async fn mcp_check(config: &config::Config, name: &str) -> Result<(serde_json::Value, bool), DaemonError> {
    let Some(settings) = config.mcp.get(name) else {
        let known: Vec<&str> = config.mcp.keys().map(String::as_str).collect();
        return Err(DaemonError::Usage(format!(
            "no [mcp.servers.{name}] in the config (servers: {})",
            known.join(", ")
        )));
    };
    let one: McpSettings = [(name.to_owned(), settings.clone())].into();
    let secrets = crate::mcp::servers::secrets(&one, |variable| std::env::var(variable).ok())
        .map_err(|missing| DaemonError::Usage(missing.to_string()))?;
    let servers = McpServers::start(&one, secrets).await;
    let catalog = servers.catalog();
    servers.shutdown().await;
    let ready = catalog.get(name).is_some_and(|server| server.state == ServerState::Ready);
    Ok((catalog_json(&catalog, &config.agents, &config.heartbeats), ready))
}

/// The API client: `--url`, else the running daemon's address file or the config's
/// listen address, else the default address when there is no config file at all. A client
/// built from a config only steers the daemon that serves the config's store.
fn client(config: &Path, url: Option<String>) -> Result<ApiClient, DaemonError> {
    let url = match url {
        Some(url) => url,
        None if !config.exists() && config == Path::new(CONFIG_PATH_DEFAULT) => format!("http://{API_LISTEN_DEFAULT}"),
        None => {
            let loaded = config::load(config)?;
            let (url, from_address_file) = api_url(&loaded).ok_or_else(|| {
                DaemonError::Usage("the config turns the API off ([api] listen = \"\"); pass --url".to_owned())
            })?;
            let expected =
                Expected { store: identity::store_identity(&loaded), config: config.to_path_buf(), from_address_file };
            return Ok(ApiClient::new(&url)?.expecting(expected));
        }
    };
    ApiClient::new(&url)
}

async fn job_command(
    kind: JobKind,
    command: JobCommand,
    config: &Path,
    url: Option<String>,
) -> Result<(), DaemonError> {
    let text = match command {
        JobCommand::List { agent, json } => {
            let config = config::load(config)?;
            let store = store_open::open(&config).await?;
            list::list(store.as_ref(), kind, agent.as_deref(), &config, json).await?
        }
        JobCommand::Runs { job, limit, transcript, json } => {
            let config = config::load(config)?;
            let store = store_open::open(&config).await?;
            let key = list::resolve(store.as_ref(), kind, job.agent.as_deref(), &job.id).await?;
            match transcript {
                Some(slot) => list::transcript(store.as_ref(), &key, &slot, json).await?,
                None => list::runs(store.as_ref(), &key, limit, json).await?,
            }
        }
        JobCommand::Show { job, json } => {
            let client = client(config, url)?;
            let agent = remote::agent_of(&client, kind, &job.id, job.agent.as_deref()).await?;
            job_call(&client, Method::GET, &job_path(kind, &agent, &job.id, ""), None, json).await?
        }
        JobCommand::Create { id, agent, fields, json } => {
            let client = client(config, url)?;
            let mut body = fields.body()?;
            body["id"] = json!(id);
            let collection = if kind == JobKind::Cron { "cron" } else { "heartbeats" };
            let path = format!("/v1/agents/{}/{collection}", segment(&agent));
            job_call(&client, Method::POST, &path, Some(body), json).await?
        }
        JobCommand::Update { job, fields, json } => {
            let client = client(config, url)?;
            let agent = remote::agent_of(&client, kind, &job.id, job.agent.as_deref()).await?;
            job_call(&client, Method::PATCH, &job_path(kind, &agent, &job.id, ""), Some(fields.body()?), json).await?
        }
        JobCommand::Delete { job } => {
            let client = client(config, url)?;
            let agent = remote::agent_of(&client, kind, &job.id, job.agent.as_deref()).await?;
            client.call(Method::DELETE, &job_path(kind, &agent, &job.id, ""), None).await?;
            format!("deleted {agent}/{}\n", job.id)
        }
        JobCommand::Enable { job } => toggle(kind, job, config, url, "enable").await?,
        JobCommand::Disable { job } => toggle(kind, job, config, url, "disable").await?,
        JobCommand::Backfill { job, from, to } => {
            let client = client(config, url)?;
            let agent = remote::agent_of(&client, kind, &job.id, job.agent.as_deref()).await?;
            let body = json!({ "from": from, "to": to });
            let answer = client.call(Method::POST, &job_path(kind, &agent, &job.id, "backfill"), Some(&body)).await?;
            let slots: Vec<&str> =
                answer["slots"].as_array().into_iter().flatten().filter_map(|s| s.as_str()).collect();
            format!("backfilling {agent}/{}: {} slot(s), oldest first: {}\n", job.id, slots.len(), slots.join(", "))
        }
        JobCommand::Trigger { job } => {
            let client = client(config, url)?;
            let agent = remote::agent_of(&client, kind, &job.id, job.agent.as_deref()).await?;
            let answer = client.call(Method::POST, &job_path(kind, &agent, &job.id, "trigger"), None).await?;
            match answer["slot"].as_str() {
                Some(slot) => format!("triggered {agent}/{} under slot {slot}; see `runs` for its result\n", job.id),
                None => format!("woke the agent heartbeat of {agent}\n"),
            }
        }
    };
    print!("{text}");
    Ok(())
}

async fn toggle(
    kind: JobKind,
    job: JobRef,
    config: &Path,
    url: Option<String>,
    action: &str,
) -> Result<String, DaemonError> {
    let client = client(config, url)?;
    let agent = remote::agent_of(&client, kind, &job.id, job.agent.as_deref()).await?;
    let answer = client.call(Method::POST, &job_path(kind, &agent, &job.id, action), None).await?;
    let enabled = if answer["enabled"] == true { "enabled" } else { "disabled" };
    Ok(format!("{agent}/{} is {enabled}\n", job.id))
}

async fn agent_command(command: AgentCommand, client: &ApiClient) -> Result<(), DaemonError> {
    let path = |agent: &str, action: &str| format!("/v1/agents/{}/{action}", segment(agent));
    let text = match command {
        AgentCommand::List { json } => remote::agents(client, json).await?,
        AgentCommand::Show { agent, json } => {
            let answer = client.call(Method::GET, &format!("/v1/agents/{}", segment(&agent)), None).await?;
            remote::answer_text(&answer, json)
        }
        AgentCommand::Pause { agent, minutes } => {
            let answer =
                client.call(Method::POST, &path(&agent, "pause"), Some(&json!({ "minutes": minutes }))).await?;
            format!("{agent} paused until {}\n", answer["paused_until"].as_str().unwrap_or("?"))
        }
        AgentCommand::Resume { agent } => {
            let answer = client.call(Method::POST, &path(&agent, "resume"), None).await?;
            if answer["was_paused"] == true {
                format!("{agent} resumed\n")
            } else {
                format!("{agent} was not paused\n")
            }
        }
        AgentCommand::Wake { agent, reason, text } => {
            let body = json!({ "reason": reason, "text": text });
            client.call(Method::POST, &path(&agent, "wake"), Some(&body)).await?;
            format!("woke the agent heartbeat of {agent}\n")
        }
        AgentCommand::Event { agent, text, mode } => {
            let body = json!({ "text": text, "mode": mode });
            let answer = client.call(Method::POST, &path(&agent, "events"), Some(&body)).await?;
            remote::answer_text(&answer, false)
        }
    };
    print!("{text}");
    Ok(())
}
