//! The TOML config: parsed strictly (unknown keys are errors), then validated into typed
//! definitions. Every error names the file, the field and the problem.

use crate::cluster::{ClusterSettings, LEASE_SECS_DEFAULT, LEASE_SECS_MAX, LEASE_SECS_MIN};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::agent::settings::AgentSettings;
use crate::core::active_hours::{zone_by_name, ActiveHours};
use crate::core::budget::GlobalCaps;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::duration::parse_duration;
use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::AgentId;
use crate::core::retention::RunRetention;
use crate::core::text_pool::TextPool;
use crate::core::usage::PriceTable;
use crate::core::visibility::VisibilityRules;
use crate::delivery::settings::AdapterSettings;
use crate::limits::{
    ACK_MAX_CHARS_LIMIT, AGENT_LOOP_ITERATIONS_MAX_LIMIT, BREAKER_FAILURES_MAX_DEFAULT, DAILY_COST_MICROS_MAX_LIMIT,
    DAILY_TOKENS_MAX_LIMIT, GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT, GLOBAL_DAILY_TOKENS_MAX_DEFAULT, ID_CHARS_MAX,
    INTERVAL_SECS_MAX, INTERVAL_SECS_MIN, LLM_ATTEMPTS_MAX_DEFAULT, LLM_ATTEMPTS_MAX_LIMIT, LLM_CALLS_PER_DAY_LIMIT,
    LLM_TIMEOUT_SECS_DEFAULT, PAUSE_MINUTES_MAX_LIMIT, RUNS_IN_FLIGHT_MAX_DEFAULT, RUNS_KEPT_DAYS_DEFAULT,
    RUNS_KEPT_DAYS_MAX, RUNS_KEPT_DAYS_MIN, RUNS_KEPT_PER_HEARTBEAT_DEFAULT, RUNS_KEPT_PER_HEARTBEAT_MAX,
    RUN_TIMEOUT_SECS_DEFAULT, RUN_TIMEOUT_SECS_MAX, SHUTDOWN_GRACE_SECS_DEFAULT, TOOL_CALLS_PER_RUN_MAX_LIMIT,
};

/// The SQLite file when the config names none, relative to the config file.
pub const STORE_PATH_DEFAULT: &str = "systole.db";
const TIMEZONE_DEFAULT: &str = "UTC";
const BREAKER_FAILURES_LIMIT: u32 = 100;
const RUNS_IN_FLIGHT_LIMIT: usize = 10_000;
const HEARTBEATS_PER_AGENT_MAX_LIMIT: u64 = 10_000;

/// A config that could not be used: which file, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {field}: {problem}")]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub problem: String,
}

/// Which LLM answers heartbeat prompts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LlmConfig {
    OpenAi {
        base_url: String,
        model: String,
        api_key_env: Option<String>,
        timeout: Duration,
        /// Attempts per request on 429 and 5xx.
        attempts_max: u32,
    },
    /// The offline provider: fixed replies in turn, for demos and tests.
    Scripted { replies: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    pub breaker_failures_max: u32,
    pub error_backoff: Vec<Duration>,
    /// Cooldowns of an open breaker before its probe, per trip in a row; `[]`: none.
    pub breaker_cooldown: Vec<Duration>,
    /// Where the breaker's announcements go; `None`: each heartbeat's own target.
    pub alerts_target: Option<DeliveryTarget>,
    pub runs_in_flight_max: usize,
    pub shutdown_grace: Duration,
    /// The daily caps across all agents, in the day of `[engine] timezone`.
    pub global_caps: GlobalCaps,
}

/// Where a PostgreSQL store is (`[store] url`), and the variable holding its password:
/// a secret never sits in the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    pub url: String,
    /// `store.password_env`: this variable must be set. Absent: [`POSTGRES_PASSWORD_ENV_DEFAULT`]
    /// is used when set (a server that trusts the connection needs none).
    pub password_env: Option<String>,
}

/// The variable a PostgreSQL password is read from when `store.password_env` is absent:
/// libpq's own.
pub const POSTGRES_PASSWORD_ENV_DEFAULT: &str = "PGPASSWORD";

/// A validated config.
#[derive(Debug, Clone)]
pub struct Config {
    pub file: PathBuf,
    /// Resolved against the config file's folder: the SQLite file, and beside it the
    /// daemon's lock and address files (with PostgreSQL too).
    pub store_path: PathBuf,
    /// `[store] url`: the runs live in PostgreSQL instead of the SQLite file.
    pub postgres: Option<PostgresConfig>,
    /// `[cluster]`: this daemon is one node of several on the PostgreSQL store.
    pub cluster: Option<ClusterSettings>,
    /// What the run log keeps (`[store] runs_kept_days`, `runs_kept_per_heartbeat`).
    pub run_retention: RunRetention,
    pub llm: LlmConfig,
    /// `[llm.prices]`: what each model's tokens cost.
    pub prices: PriceTable,
    pub system_prompt: Option<String>,
    pub adapters: AdapterSettings,
    /// `[mcp.servers.NAME]`: the servers whose tools runs may use.
    pub mcp: crate::mcp::settings::McpSettings,
    pub engine: EngineSettings,
    pub heartbeats: Vec<HeartbeatDef>,
    /// Run and tool settings of each configured agent.
    pub agents: BTreeMap<AgentId, AgentSettings>,
    /// For agents the config does not name (a heartbeat created for another agent, say).
    pub agent_default: AgentSettings,
    /// Each agent's `workspace` folder, resolved against the config file's folder.
    pub workspaces: BTreeMap<AgentId, PathBuf>,
    /// What each target shows of runs.
    pub visibility: VisibilityRules,
    /// The operator API.
    pub api: ApiConfig,
    /// `[telemetry]`: where traces go; `None`, the default: nowhere.
    pub telemetry: Option<crate::adapters::otlp::OtlpSettings>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    store: RawStore,
    llm: Option<RawLlm>,
    #[serde(default)]
    adapters: RawAdapters,
    #[serde(default)]
    engine: RawEngine,
    #[serde(default)]
    defaults: agent_heartbeat::RawDefaults,
    #[serde(default)]
    visibility: visibility::RawVisibility,
    #[serde(default)]
    agents: Vec<RawAgent>,
    #[serde(default)]
    api: api::RawApi,
    cluster: Option<RawCluster>,
    #[serde(default)]
    mcp: mcp::RawMcp,
    telemetry: Option<RawTelemetry>,
}

/// `[telemetry]`: traces over OTLP/HTTP (off unless the table is there).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    /// The receiver's base URL, like `http://127.0.0.1:4318` (traces go to `/v1/traces`).
    otlp_endpoint: Option<String>,
    /// `service.name` on every trace (default `systole`).
    service_name: Option<String>,
    /// Headers for a hosted receiver, each naming the environment variable its value is
    /// read from at start-up (an API key never goes in the file).
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    /// This node's name, unique in the cluster: `[a-z0-9-]`, up to 64 characters.
    node_id: Option<String>,
    /// How long a lease lasts unless renewed (`LEASE_SECS_DEFAULT`).
    lease_secs: Option<u64>,
    /// Where the other nodes reach this node's API, like `http://10.0.0.5:7878` (ADR 0024);
    /// by default the address `api.listen` is bound to, unless that is `0.0.0.0`.
    advertise_url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStore {
    path: Option<String>,
    /// `postgres://user@host:port/database`: PostgreSQL instead of the SQLite file.
    url: Option<String>,
    /// The environment variable holding the PostgreSQL password.
    password_env: Option<String>,
    /// Finished runs older than this many days leave the run log.
    runs_kept_days: Option<u32>,
    /// Rows of the run log kept per heartbeat, newest first (skips beyond it go at once,
    /// runs once they are two days old).
    runs_kept_per_heartbeat: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLlm {
    provider: Option<String>,
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    timeout: Option<String>,
    /// Attempts per request when the endpoint answers 429 or 5xx.
    attempts: Option<u32>,
    replies: Option<Vec<String>>,
    system_prompt: Option<String>,
    /// `[llm.prices."MODEL"]`: what each model's tokens cost, per million.
    #[serde(default)]
    prices: BTreeMap<String, prices::RawPrice>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    timezone: Option<String>,
    run_timeout: Option<String>,
    breaker_failures: Option<u32>,
    runs_in_flight_max: Option<usize>,
    shutdown_grace: Option<String>,
    /// Waits after the 1st, 2nd, ... consecutive failure, like ["30s", "1m", "5m"].
    error_backoff: Option<Vec<String>>,
    /// How long a tripped breaker waits before one probe run, per trip in a row, like
    /// ["1h", "4h", "24h"]; `[]` keeps it open until someone enables the heartbeat.
    breaker_cooldown: Option<Vec<String>>,
    /// Where announcements of a tripped or recovered breaker go (default: the heartbeat's
    /// own target; "silent": nowhere).
    alerts_target: Option<String>,
    /// Tokens all agents together may use per day of `timezone` (the global cap).
    daily_tokens_max: Option<u64>,
    /// What all agents together may spend per day, in the price table's currency.
    daily_cost_max: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    id: String,
    timezone: Option<String>,
    /// Spacebot's marker of the default agent; accepted so its configs load unchanged.
    #[serde(rename = "default")]
    _default: Option<bool>,
    loop_iterations_max: Option<u32>,
    pause_minutes_max: Option<u32>,
    /// The shortest interval the `heartbeat` tool accepts from the model.
    model_interval_min: Option<String>,
    heartbeats_max: Option<usize>,
    /// LLM calls the agent's runs may make per local day (the daily budget).
    llm_calls_per_day: Option<u64>,
    /// Tokens (input and output) the agent's runs may use per local day.
    daily_tokens_max: Option<u64>,
    /// What the agent's runs may cost per local day, in the price table's currency.
    daily_cost_max: Option<f64>,
    /// Characters of note an `HEARTBEAT_OK` reply may carry and still not be delivered.
    ack_max_chars: Option<usize>,
    /// The folder of the agent's `HEARTBEAT.md` (relative to the config file).
    workspace: Option<String>,
    /// The agent heartbeat (the `HEARTBEAT.md` one); see `[defaults.heartbeat]`.
    heartbeat: Option<agent_heartbeat::RawAgentHeartbeat>,
    /// The tools the agent's runs may use (`server/tool`, `server/*`); none by default.
    tools: Option<Vec<String>>,
    /// Tool calls one run may make (`TOOL_CALLS_PER_RUN_MAX_DEFAULT`).
    tool_calls_max: Option<u32>,
    #[serde(default)]
    heartbeats: Vec<RawHeartbeat>,
    #[serde(default)]
    cron: Vec<RawCron>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeartbeat {
    id: String,
    prompt: String,
    every: Option<String>,
    /// Spacebot's name for the interval.
    interval_secs: Option<u64>,
    target: Option<String>,
    /// Spacebot's name for the target.
    delivery_target: Option<String>,
    active_hours: Option<RawActiveHours>,
    /// Spacebot's whole-hour window.
    active_start_hour: Option<u8>,
    active_end_hour: Option<u8>,
    timeout: Option<String>,
    cron: Option<String>,
    timezone: Option<String>,
    at: Option<String>,
    schedule: Option<RawSchedule>,
    catch_up: Option<String>,
    catch_up_window: Option<String>,
    overlap: Option<String>,
    jitter: Option<String>,
    delete_after_run: Option<bool>,
    /// `false` delivers a reply even if it is identical to one delivered within 24 h.
    dedup: Option<bool>,
    /// Narrows the agent's `tools` for this job's runs (ADR 0019).
    tools: Option<Vec<String>>,
    /// Tools that may write, opted into for this job (within the agent's `tools`).
    write_tools: Option<Vec<String>>,
    /// The model this job's runs ask for (a cheaper one for routine checks).
    model: Option<String>,
    /// Tools the runs cannot do without: if one is unavailable, the run fails naming it.
    required_tools: Option<Vec<String>>,
    /// The zero-token pre-check: a tool called before the model; a quiet answer skips it.
    check_tool: Option<String>,
    /// The check's arguments, a table.
    check_arguments: Option<toml::Value>,
}

/// `[[agents.cron]]`: a cron job as in the cron spec.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCron {
    id: String,
    prompt: Option<String>,
    /// The spec's `payload = { text = "..." }`, instead of `prompt`.
    payload: Option<RawPayload>,
    schedule: Option<RawSchedule>,
    target: Option<String>,
    /// `announce` (deliver to `target`) or `silent` (keep replies in the run log).
    delivery: Option<String>,
    /// `isolated` (a fresh run of its own) or `main` (a system event for the agent heartbeat).
    mode: Option<String>,
    /// `false` leaves the job unscheduled (and removes it from the store if seeded before).
    enabled: Option<bool>,
    active_hours: Option<RawActiveHours>,
    timeout: Option<String>,
    catch_up: Option<String>,
    catch_up_window: Option<String>,
    overlap: Option<String>,
    jitter: Option<String>,
    delete_after_run: Option<bool>,
    dedup: Option<bool>,
    /// Narrows the agent's `tools` for this job's runs (ADR 0019).
    tools: Option<Vec<String>>,
    /// Tools that may write, opted into for this job (within the agent's `tools`).
    write_tools: Option<Vec<String>>,
    /// The model this job's runs ask for (a cheaper one for routine checks).
    model: Option<String>,
    /// Tools the runs cannot do without: if one is unavailable, the run fails naming it.
    required_tools: Option<Vec<String>>,
    /// The zero-token pre-check: a tool called before the model; a quiet answer skips it.
    check_tool: Option<String>,
    /// The check's arguments, a table.
    check_arguments: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPayload {
    text: String,
}

/// `{ cron = "0 9 * * MON-FRI", timezone = "Asia/Shanghai" }`, `{ every = "1h" }` or
/// `{ at = "2026-12-01T14:00:00+08:00" }`; the spec's `{ kind = "cron", expr = "..." }` too.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    every: Option<String>,
    cron: Option<String>,
    at: Option<String>,
    timezone: Option<String>,
    kind: Option<String>,
    expr: Option<String>,
}

/// The policy fields of a heartbeat or cron job, gathered.
struct RawPolicy {
    catch_up: Option<String>,
    catch_up_window: Option<String>,
    overlap: Option<String>,
    jitter: Option<String>,
    delete_after_run: Option<bool>,
    dedup: Option<bool>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawActiveHours {
    start: String,
    end: String,
    timezone: Option<String>,
}

/// Reads and validates the config at `path`.
///
/// # Errors
/// When the file cannot be read, is not valid TOML of this shape, or a value is refused.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
        file: path.display().to_string(),
        field: "(file)".to_owned(),
        problem: format!("cannot be read: {error}"),
    })?;
    parse(&text, path)
}

/// Validates config `text` as if read from `path` (relative paths resolve against its folder).
///
/// # Errors
/// When the text is not valid TOML of this shape, or a value is refused.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let document = toml::Deserializer::parse(text).map_err(|error| toml_error(&file, text, &error, ""))?;
    // The path of the key a type error is about (`agents[0].heartbeats[1].interval_secs`).
    let raw: RawConfig = serde_path_to_error::deserialize(document).map_err(|error| {
        let path = error.path().to_string();
        toml_error(&file, text, error.inner(), if path == "." { "" } else { &path })
    })?;
    Validator { file, path, texts: RefCell::default() }.config(raw)
}

/// A TOML error as a config error: the key's path when known, and the line and column.
fn toml_error(file: &str, text: &str, error: &toml::de::Error, key: &str) -> ConfigError {
    let place = error.span().map(|span| {
        let before = text.get(..span.start.min(text.len())).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |tail| tail.chars().count()) + 1;
        format!("line {line}, column {column}")
    });
    let field = match (key.is_empty(), place) {
        (false, Some(place)) => format!("{key} ({place})"),
        (false, None) => key.to_owned(),
        (true, Some(place)) => place,
        (true, None) => "(document)".to_owned(),
    };
    ConfigError { file: file.to_owned(), field, problem: error.message().to_owned() }
}

struct Validator<'a> {
    file: String,
    path: &'a Path,
    /// The prompts and targets read so far: equal ones are one text (ADR 0064). The store
    /// shares them anyway; the copies a seed then freed left holes among the ids kept and
    /// the allocator's bookkeeping for a million blocks (41 B a heartbeat at a million).
    texts: RefCell<TextPool>,
}

impl Validator<'_> {
    fn error(&self, field: impl Into<String>, problem: impl ToString) -> ConfigError {
        ConfigError { file: self.file.clone(), field: field.into(), problem: problem.to_string() }
    }

    fn duration(&self, field: &str, text: &str, min: Duration, max: Duration) -> Result<Duration, ConfigError> {
        let duration = parse_duration(text).map_err(|e| self.error(field, e))?;
        if duration < min || duration > max {
            let problem = format!("{text:?} is out of range; allowed from {}s to {}s", min.as_secs(), max.as_secs());
            return Err(self.error(field, problem));
        }
        Ok(duration)
    }

    /// A whole number from 1 to `max`, or `default` when absent.
    fn count(&self, field: &str, value: Option<u64>, default: u64, max: u64) -> Result<u64, ConfigError> {
        match value {
            None => Ok(default),
            Some(value) if (1..=max).contains(&value) => Ok(value),
            Some(value) => Err(self.error(field, format!("{value} is out of range; allowed from 1 to {max}"))),
        }
    }

    /// A daily cost cap in micros: from one micro to `DAILY_COST_MICROS_MAX_LIMIT`, or
    /// `default` when absent (0 would stop every run).
    fn cost_cap(&self, field: &str, value: Option<f64>, default: u64) -> Result<u64, ConfigError> {
        let Some(value) = value else { return Ok(default) };
        #[allow(clippy::cast_precision_loss)]
        let cost_limit = DAILY_COST_MICROS_MAX_LIMIT as f64 / 1_000_000.0;
        let micros = self.micros(field, value, cost_limit)?;
        if micros == 0 {
            return Err(self.error(field, format!("{value} would stop every run; allowed from 0.000001")));
        }
        Ok(micros)
    }

    /// A timeout from 1 s to `RUN_TIMEOUT_SECS_MAX`, or `default` when absent.
    fn timeout(&self, field: &str, text: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
        match text {
            Some(text) => self.duration(field, text, Duration::from_secs(1), Duration::from_secs(RUN_TIMEOUT_SECS_MAX)),
            None => Ok(default),
        }
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let run_retention = self.run_retention(&raw.store)?;
        let postgres = self.postgres(&raw.store)?;
        let cluster = self.cluster(raw.cluster, postgres.is_some())?;
        let telemetry = self.telemetry(raw.telemetry)?;
        let store_path = self.store_path(raw.store)?;
        let api = self.api(raw.api)?;
        let mut llm = raw.llm.ok_or_else(|| {
            self.error("llm", "is missing; add an [llm] table (provider = \"scripted\" works offline)")
        })?;
        let system_prompt = llm.system_prompt.clone();
        let raw_prices = std::mem::take(&mut llm.prices);
        let llm = self.llm(llm)?;
        let default_model = match &llm {
            LlmConfig::OpenAi { model, .. } => Some(model.as_str()),
            LlmConfig::Scripted { .. } => None,
        };
        let prices = self.prices(raw_prices, default_model)?;
        let adapters = self.adapters(raw.adapters)?;
        let mcp = self.mcp(raw.mcp)?;
        let visibility = self.visibility(raw.visibility, &adapters)?;
        let (engine, timezone, run_timeout) = self.engine(raw.engine, &adapters)?;
        let mut allowed_targets: BTreeSet<String> = adapters.named_targets().collect();
        allowed_targets.insert(DeliveryTarget::STDOUT.to_owned());
        let agent_default =
            AgentSettings { timezone: timezone.clone(), run_timeout, allowed_targets, ..AgentSettings::default() };
        let mut agents = BTreeMap::new();
        let mut workspaces = BTreeMap::new();
        let mut heartbeats = Vec::new();
        let mut agent_ids = BTreeSet::new();
        for (index, agent) in raw.agents.into_iter().enumerate() {
            let field = format!("agents[{index}]");
            let id = AgentId::new(agent.id.clone())
                .map_err(|e| self.error(format!("{field}.id"), format!("{:?} {e}", agent.id)))?;
            if !agent_ids.insert(id.clone()) {
                return Err(self.error(format!("{field}.id"), format!("{:?} is used by an earlier agent", id.as_str())));
            }
            let timezone = match &agent.timezone {
                Some(zone) => {
                    zone_by_name(zone).map_err(|e| self.error(format!("{field}.timezone"), e))?;
                    zone.clone()
                }
                None => timezone.clone(),
            };
            let mut settings = self.agent_settings(&field, &agent, &agent_default, &timezone)?;
            settings.tools = self.agent_tools(&field, agent.tools.as_deref(), &mcp)?;
            if let Some(text) = &agent.workspace {
                workspaces.insert(id.clone(), self.workspace(&field, text)?);
            }
            let agent_tools = settings.tools.clone();
            let mut defaults = HeartbeatDefaults {
                agent: &id,
                agent_tools: &agent_tools,
                timezone: &timezone,
                run_timeout,
                adapters: &adapters,
                agent_heartbeat: false,
            };
            let mut heartbeat_ids = BTreeSet::new();
            let mut defs = Vec::new();
            let own = self.agent_heartbeat(
                &field,
                agent.heartbeat,
                agent.workspace.is_some(),
                &raw.defaults.heartbeat,
                &defaults,
                settings.ack_max_chars,
            )?;
            if let Some(own) = own {
                settings.agent_heartbeat = own.settings;
                defaults.agent_heartbeat = true;
                defs.push((format!("{field}.heartbeat"), own.def));
            }
            agents.insert(id.clone(), settings);
            for (position, heartbeat) in agent.heartbeats.into_iter().enumerate() {
                let field = format!("{field}.heartbeats[{position}]");
                defs.push((field.clone(), self.heartbeat(&field, heartbeat, &defaults)?));
            }
            for (position, cron) in agent.cron.into_iter().enumerate() {
                let field = format!("{field}.cron[{position}]");
                if let Some(def) = self.cron_job(&field, cron, &defaults)? {
                    defs.push((field, def));
                }
            }
            for (field, def) in defs {
                if !heartbeat_ids.insert(def.key.heartbeat.clone()) {
                    let problem = format!(
                        "{:?} is used by an earlier heartbeat or cron job of agent {id}",
                        def.key.heartbeat.as_str()
                    );
                    return Err(self.error(format!("{field}.id"), problem));
                }
                heartbeats.push(def);
            }
        }
        Ok(Config {
            file: self.path.to_owned(),
            store_path,
            postgres,
            cluster,
            run_retention,
            llm,
            prices,
            system_prompt,
            adapters,
            engine,
            heartbeats,
            agents,
            agent_default,
            workspaces,
            visibility,
            api,
            mcp,
            telemetry,
        })
    }

    fn telemetry(&self, raw: Option<RawTelemetry>) -> Result<Option<crate::adapters::otlp::OtlpSettings>, ConfigError> {
        let Some(raw) = raw else { return Ok(None) };
        let endpoint = raw.otlp_endpoint.ok_or_else(|| {
            self.error("telemetry.otlp_endpoint", "is missing; the OTLP/HTTP receiver, like \"http://127.0.0.1:4318\"")
        })?;
        self.http_url("telemetry.otlp_endpoint", &endpoint)?;
        let service_name = raw.service_name.unwrap_or_else(|| "systole".to_owned());
        if service_name.trim().is_empty() || service_name.chars().count() > ID_CHARS_MAX {
            let problem = format!("must have between 1 and {ID_CHARS_MAX} characters");
            return Err(self.error("telemetry.service_name", problem));
        }
        let mut headers = BTreeMap::new();
        for (header, variable) in raw.headers {
            let valid = !header.is_empty() && header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !valid {
                return Err(self.error("telemetry.headers", format!("{header:?} is not a header name")));
            }
            let variable = self.variable(&format!("telemetry.headers.{header}"), variable)?;
            headers.insert(header, variable);
        }
        Ok(Some(crate::adapters::otlp::OtlpSettings { endpoint, service_name, headers }))
    }

    fn agent_settings(
        &self,
        field: &str,
        agent: &RawAgent,
        defaults: &AgentSettings,
        timezone: &str,
    ) -> Result<AgentSettings, ConfigError> {
        let loop_iterations_max = self.count(
            &format!("{field}.loop_iterations_max"),
            agent.loop_iterations_max.map(u64::from),
            u64::from(defaults.loop_iterations_max),
            u64::from(AGENT_LOOP_ITERATIONS_MAX_LIMIT),
        )?;
        let pause_minutes_max = self.count(
            &format!("{field}.pause_minutes_max"),
            agent.pause_minutes_max.map(u64::from),
            u64::from(defaults.pause_minutes_max),
            u64::from(PAUSE_MINUTES_MAX_LIMIT),
        )?;
        let heartbeats_max = self.count(
            &format!("{field}.heartbeats_max"),
            agent.heartbeats_max.map(|n| n as u64),
            defaults.heartbeats_max as u64,
            HEARTBEATS_PER_AGENT_MAX_LIMIT,
        )?;
        let model_interval_min = match &agent.model_interval_min {
            Some(text) => self.duration(
                &format!("{field}.model_interval_min"),
                text,
                Duration::from_secs(INTERVAL_SECS_MIN),
                Duration::from_secs(INTERVAL_SECS_MAX),
            )?,
            None => defaults.model_interval_min,
        };
        let llm_calls_per_day = self.count(
            &format!("{field}.llm_calls_per_day"),
            agent.llm_calls_per_day,
            defaults.llm_calls_per_day,
            LLM_CALLS_PER_DAY_LIMIT,
        )?;
        let daily_tokens_max = self.count(
            &format!("{field}.daily_tokens_max"),
            agent.daily_tokens_max,
            defaults.daily_tokens_max,
            DAILY_TOKENS_MAX_LIMIT,
        )?;
        let daily_cost_max_micros =
            self.cost_cap(&format!("{field}.daily_cost_max"), agent.daily_cost_max, defaults.daily_cost_max_micros)?;
        let ack_max_chars = self.ack_max_chars(field, agent.ack_max_chars, defaults.ack_max_chars)?;
        let tool_calls_max = self.count(
            &format!("{field}.tool_calls_max"),
            agent.tool_calls_max.map(u64::from),
            u64::from(defaults.tool_calls_max),
            u64::from(TOOL_CALLS_PER_RUN_MAX_LIMIT),
        )?;
        Ok(AgentSettings {
            tool_calls_max: u32::try_from(tool_calls_max).unwrap_or(u32::MAX),
            ack_max_chars,
            llm_calls_per_day,
            daily_tokens_max,
            daily_cost_max_micros,
            loop_iterations_max: u32::try_from(loop_iterations_max).unwrap_or(u32::MAX),
            pause_minutes_max: u32::try_from(pause_minutes_max).unwrap_or(u32::MAX),
            model_interval_min,
            heartbeats_max: usize::try_from(heartbeats_max).unwrap_or(usize::MAX),
            timezone: timezone.to_owned(),
            ..defaults.clone()
        })
    }

    /// `ack_max_chars` of the table at `field`, from 0 to `ACK_MAX_CHARS_LIMIT`, or `default`.
    fn ack_max_chars(&self, field: &str, value: Option<usize>, default: usize) -> Result<usize, ConfigError> {
        match value {
            None => Ok(default),
            Some(chars) if chars <= ACK_MAX_CHARS_LIMIT => Ok(chars),
            Some(chars) => {
                let problem = format!("{chars} is out of range; allowed from 0 to {ACK_MAX_CHARS_LIMIT}");
                Err(self.error(format!("{field}.ack_max_chars"), problem))
            }
        }
    }

    fn run_retention(&self, raw: &RawStore) -> Result<RunRetention, ConfigError> {
        let kept_days = raw.runs_kept_days.unwrap_or(RUNS_KEPT_DAYS_DEFAULT);
        if !(RUNS_KEPT_DAYS_MIN..=RUNS_KEPT_DAYS_MAX).contains(&kept_days) {
            let problem = format!(
                "{kept_days} is out of range; allowed from {RUNS_KEPT_DAYS_MIN} (dedup and the daily budget read two \
                 days back) to {RUNS_KEPT_DAYS_MAX}"
            );
            return Err(self.error("store.runs_kept_days", problem));
        }
        let kept_per_heartbeat = raw.runs_kept_per_heartbeat.unwrap_or(RUNS_KEPT_PER_HEARTBEAT_DEFAULT);
        if !(1..=RUNS_KEPT_PER_HEARTBEAT_MAX).contains(&kept_per_heartbeat) {
            let problem =
                format!("{kept_per_heartbeat} is out of range; allowed from 1 to {RUNS_KEPT_PER_HEARTBEAT_MAX}");
            return Err(self.error("store.runs_kept_per_heartbeat", problem));
        }
        Ok(RunRetention { kept_days, kept_per_heartbeat })
    }

    fn cluster(&self, raw: Option<RawCluster>, on_postgres: bool) -> Result<Option<ClusterSettings>, ConfigError> {
        let Some(raw) = raw else { return Ok(None) };
        if !on_postgres {
            let problem =
                "needs store.url: the nodes of a cluster share one PostgreSQL database (SQLite is one process's)";
            return Err(self.error("cluster", problem));
        }
        let node =
            raw.node_id.ok_or_else(|| self.error("cluster.node_id", "is missing; name this node, like \"node-a\""))?;
        AgentId::new(node.clone()).map_err(|problem| self.error("cluster.node_id", problem))?;
        let lease_secs = raw.lease_secs.unwrap_or(LEASE_SECS_DEFAULT);
        if !(LEASE_SECS_MIN..=LEASE_SECS_MAX).contains(&lease_secs) {
            let problem =
                format!("{lease_secs} is out of range; allowed from {LEASE_SECS_MIN} to {LEASE_SECS_MAX} seconds");
            return Err(self.error("cluster.lease_secs", problem));
        }
        let api_url =
            raw.advertise_url.map(|url| advertise_url(&url).map_err(|p| self.error("cluster.advertise_url", p)));
        Ok(Some(ClusterSettings { node, lease: Duration::from_secs(lease_secs), api_url: api_url.transpose()? }))
    }

    fn postgres(&self, raw: &RawStore) -> Result<Option<PostgresConfig>, ConfigError> {
        let Some(url) = raw.url.clone() else {
            if raw.password_env.is_some() {
                return Err(self.error("store.password_env", "is set without store.url; SQLite has no password"));
            }
            return Ok(None);
        };
        let Some(rest) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")) else {
            let problem = format!("{url:?} is not a PostgreSQL URL; write postgres://user@host:5432/database");
            return Err(self.error("store.url", problem));
        };
        // The part before '@' is `user` or `user:password`: a password in the file would be
        // read by anyone who reads the config, and logged with it.
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        if authority.rsplit_once('@').is_some_and(|(user, _)| user.contains(':')) {
            let problem = "holds a password; remove it from the URL and put it in the environment variable that \
                           store.password_env names (PGPASSWORD by default)";
            return Err(self.error("store.url", problem));
        }
        let password_env =
            raw.password_env.clone().map(|name| self.variable("store.password_env", name)).transpose()?;
        Ok(Some(PostgresConfig { url, password_env }))
    }

    fn store_path(&self, raw: RawStore) -> Result<PathBuf, ConfigError> {
        let path = raw.path.unwrap_or_else(|| STORE_PATH_DEFAULT.to_owned());
        if path.trim().is_empty() {
            return Err(self.error("store.path", "is empty; name a SQLite file such as \"systole.db\""));
        }
        let base = self.path.parent().unwrap_or_else(|| Path::new("."));
        Ok(base.join(path))
    }

    fn llm(&self, raw: RawLlm) -> Result<LlmConfig, ConfigError> {
        match raw.provider.as_deref().unwrap_or("openai") {
            "scripted" => Ok(LlmConfig::Scripted { replies: raw.replies.unwrap_or_default() }),
            "openai" => {
                let base_url = raw
                    .base_url
                    .ok_or_else(|| self.error("llm.base_url", "is missing (like \"http://127.0.0.1:11434/v1\")"))?;
                if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                    return Err(self.error("llm.base_url", format!("{base_url:?} is not an http:// or https:// URL")));
                }
                let model =
                    raw.model.filter(|m| !m.trim().is_empty()).ok_or_else(|| self.error("llm.model", "is missing"))?;
                let timeout =
                    self.timeout("llm.timeout", raw.timeout.as_deref(), Duration::from_secs(LLM_TIMEOUT_SECS_DEFAULT))?;
                if raw.replies.is_some() {
                    return Err(self.error("llm.replies", "only applies to provider = \"scripted\""));
                }
                let attempts_max = self.count(
                    "llm.attempts",
                    raw.attempts.map(u64::from),
                    u64::from(LLM_ATTEMPTS_MAX_DEFAULT),
                    u64::from(LLM_ATTEMPTS_MAX_LIMIT),
                )?;
                let attempts_max = u32::try_from(attempts_max).unwrap_or(LLM_ATTEMPTS_MAX_LIMIT);
                Ok(LlmConfig::OpenAi { base_url, model, api_key_env: raw.api_key_env, timeout, attempts_max })
            }
            other => {
                Err(self.error("llm.provider", format!("{other:?} is not a provider; use \"openai\" or \"scripted\"")))
            }
        }
    }

    fn engine(
        &self,
        raw: RawEngine,
        adapters: &AdapterSettings,
    ) -> Result<(EngineSettings, String, Duration), ConfigError> {
        let timezone = raw.timezone.unwrap_or_else(|| TIMEZONE_DEFAULT.to_owned());
        zone_by_name(&timezone).map_err(|e| self.error("engine.timezone", e))?;
        let run_timeout = self.timeout(
            "engine.run_timeout",
            raw.run_timeout.as_deref(),
            Duration::from_secs(RUN_TIMEOUT_SECS_DEFAULT),
        )?;
        let breaker_failures_max = self.count(
            "engine.breaker_failures",
            raw.breaker_failures.map(u64::from),
            u64::from(BREAKER_FAILURES_MAX_DEFAULT),
            u64::from(BREAKER_FAILURES_LIMIT),
        )?;
        let breaker_failures_max = u32::try_from(breaker_failures_max).unwrap_or(BREAKER_FAILURES_LIMIT);
        let runs_in_flight_max = self.count(
            "engine.runs_in_flight_max",
            raw.runs_in_flight_max.map(|n| n as u64),
            RUNS_IN_FLIGHT_MAX_DEFAULT as u64,
            RUNS_IN_FLIGHT_LIMIT as u64,
        )?;
        let runs_in_flight_max = usize::try_from(runs_in_flight_max).unwrap_or(RUNS_IN_FLIGHT_LIMIT);
        let shutdown_grace = match raw.shutdown_grace {
            Some(text) => self.duration(
                "engine.shutdown_grace",
                &text,
                Duration::ZERO,
                Duration::from_secs(RUN_TIMEOUT_SECS_MAX),
            )?,
            None => Duration::from_secs(SHUTDOWN_GRACE_SECS_DEFAULT),
        };
        let error_backoff = self.error_backoff(raw.error_backoff)?;
        let breaker_cooldown = self.breaker_cooldown(raw.breaker_cooldown)?;
        let alerts_target = match raw.alerts_target {
            Some(text) => Some(self.known_target("engine.alerts_target", &text, adapters)?),
            None => None,
        };
        let global_caps = GlobalCaps {
            tokens: self.count(
                "engine.daily_tokens_max",
                raw.daily_tokens_max,
                GLOBAL_DAILY_TOKENS_MAX_DEFAULT,
                DAILY_TOKENS_MAX_LIMIT,
            )?,
            cost_micros: self.cost_cap(
                "engine.daily_cost_max",
                raw.daily_cost_max,
                GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT,
            )?,
            timezone: timezone.clone(),
        };
        let settings = EngineSettings {
            breaker_failures_max,
            error_backoff,
            breaker_cooldown,
            alerts_target,
            runs_in_flight_max,
            shutdown_grace,
            global_caps,
        };
        Ok((settings, timezone, run_timeout))
    }

    fn target(
        &self,
        field: &str,
        target: Option<String>,
        delivery_target: Option<String>,
        adapters: &AdapterSettings,
    ) -> Result<DeliveryTarget, ConfigError> {
        let (name, text) = match (target, delivery_target) {
            (Some(text), None) => ("target", text),
            (None, Some(text)) => ("delivery_target", text),
            (Some(_), Some(_)) => {
                return Err(self.error(format!("{field}.target"), "give either `target` or `delivery_target`, not both"))
            }
            (None, None) => return Err(self.error(format!("{field}.target"), "is missing (like target = \"stdout\")")),
        };
        self.known_target(&format!("{field}.{name}"), &text, adapters)
    }

    /// `prompt` as one text with every equal prompt of the config.
    fn shared_prompt(&self, prompt: &str) -> Arc<str> {
        self.texts.borrow_mut().prompt_text(prompt)
    }

    /// A delivery target whose adapter is configured.
    fn known_target(&self, field: &str, text: &str, adapters: &AdapterSettings) -> Result<DeliveryTarget, ConfigError> {
        let target = DeliveryTarget::parse(text).map_err(|e| self.error(field, e))?;
        if !adapters.knows(&target) {
            let problem = format!(
                "{text:?} names no configured adapter; use \"stdout\", \"webhook:NAME\" (an [adapters.webhook.NAME] table), \
                 \"discord:CHANNEL_ID\", \"slack:CHANNEL\" or \"telegram:CHAT_ID\" (an [adapters.discord] table, ...), \
                 or \"discord-webhook:NAME\" / \"slack-webhook:NAME\""
            );
            return Err(self.error(field, problem));
        }
        Ok(self.texts.borrow_mut().target(&target))
    }

    fn active_hours(
        &self,
        field: &str,
        window: Option<RawActiveHours>,
        start_hour: Option<u8>,
        end_hour: Option<u8>,
        timezone: &str,
    ) -> Result<Option<ActiveHours>, ConfigError> {
        match (window, start_hour, end_hour) {
            (None, None, None) => Ok(None),
            (Some(window), None, None) => {
                let zone = window.timezone.as_deref().unwrap_or(timezone);
                ActiveHours::new(&window.start, &window.end, zone)
                    .map(Some)
                    .map_err(|e| self.error(format!("{field}.active_hours"), e))
            }
            (None, Some(start), Some(end)) => ActiveHours::from_hours(start, end, timezone)
                .map(Some)
                .map_err(|e| self.error(format!("{field}.active_start_hour"), e)),
            (None, _, _) => {
                Err(self.error(format!("{field}.active_start_hour"), "give both active_start_hour and active_end_hour"))
            }
            (Some(_), _, _) => Err(self.error(
                format!("{field}.active_hours"),
                "give either active_hours or active_start_hour/active_end_hour, not both",
            )),
        }
    }
}

struct HeartbeatDefaults<'a> {
    agent: &'a AgentId,
    /// The agent's `tools`: a job's tool fields may only narrow them.
    agent_tools: &'a [crate::core::tool_policy::ToolPattern],
    timezone: &'a str,
    run_timeout: Duration,
    adapters: &'a AdapterSettings,
    /// The agent has an agent heartbeat (main-mode cron jobs need one).
    agent_heartbeat: bool,
}

#[path = "config_jobs.rs"]
mod jobs;

#[path = "config_mcp.rs"]
mod mcp;

#[path = "config_prices.rs"]
mod prices;

#[path = "config_agent.rs"]
mod agent_heartbeat;

#[path = "config_api.rs"]
mod api;
pub use api::{ApiConfig, TokenSource, API_LISTEN_DEFAULT, API_TOKEN_ENV_DEFAULT};

#[path = "config_visibility.rs"]
mod visibility;

#[path = "config_adapters.rs"]
mod adapters;
use adapters::RawAdapters;

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;

/// `[cluster] advertise_url`: `http(s)://host[:port]`, nothing after the address (the API's
/// routes are added to it) and no user or password (it is stored in the lease tables).
fn advertise_url(url: &str) -> Result<String, String> {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return Err(format!("{url:?} is not an http:// or https:// URL; write http://10.0.0.5:7878"));
    };
    let address = rest.strip_suffix('/').unwrap_or(rest);
    if address.is_empty() {
        return Err(format!("{url:?} names no host; write http://10.0.0.5:7878"));
    }
    if address.contains(['/', '?', '#', '@']) || address.chars().any(char::is_whitespace) {
        return Err(format!("{url:?} must be only a scheme, a host and a port, like http://10.0.0.5:7878"));
    }
    Ok(url.strip_suffix('/').unwrap_or(url).to_owned())
}
