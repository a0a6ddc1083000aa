//! The async side: the engine that feeds the pure core with `now`, executes its decisions
//! through the ports, and awaits every store write.

pub mod control;
pub mod dedup_gate;
pub mod dedup_reads;
pub mod engine;
pub mod events;
pub mod group_commit;
pub mod lanes;
pub mod metering;
pub mod run;
pub mod run_events;
pub mod transcript;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::adapters::memory_workspace::MemoryWorkspace;
use crate::agent::settings::AgentSettings;
use crate::agent::tools::ToolBox;
use crate::agent::HEARTBEAT_SYSTEM_PROMPT_DEFAULT;
use crate::core::budget::GlobalCaps;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::heartbeat::{Heartbeat, HeartbeatDef};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::pause::Pause;
use crate::core::retention::RunRetention;
use crate::core::usage::PriceTable;
use crate::core::visibility::VisibilityRules;
use crate::core::wake::WakeReason;
use crate::driver::control::Control;
pub use crate::driver::engine::operator::{EnabledCounts, JobView, TriggerOutcome};
use crate::driver::engine::{Command, Driver};
use crate::driver::events::{EngineEvent, EventSink, TracingSink};
use crate::driver::lanes::{Lanes, UserTurn};
use crate::driver::run::RunContext;
use crate::driver::run_events::RunEvents;
use crate::driver::transcript::Redactor;
use crate::limits::{
    BREAKER_COOLDOWN_SECS_DEFAULT, BREAKER_FAILURES_MAX_DEFAULT, ERROR_BACKOFF_SECS_DEFAULT,
    GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT, GLOBAL_DAILY_TOKENS_MAX_DEFAULT, RUNS_IN_FLIGHT_MAX_DEFAULT,
};
use crate::ports::clock::Clock;
use crate::ports::fence::Fence;
use crate::ports::llm::Llm;
use crate::ports::messenger::Messenger;
use crate::ports::store::{Queued, SeedReport, Store, StoreError};
use crate::ports::telemetry::{NoTelemetry, Telemetry};
use crate::ports::tools::{NoToolServers, ToolServers};
use crate::ports::workspace::Workspace;

/// The ports an engine runs on. Swap these and nothing else to simulate it.
#[derive(Clone)]
pub struct Ports {
    pub clock: Arc<dyn Clock>,
    pub llm: Arc<dyn Llm>,
    pub messenger: Arc<dyn Messenger>,
    pub store: Arc<dyn Store>,
    pub events: Arc<dyn EventSink>,
    pub workspace: Arc<dyn Workspace>,
    /// Servers of tools runs may use (MCP servers, native tools); none by default.
    pub tools: Arc<dyn ToolServers>,
    /// Where finished runs' traces go; nowhere by default.
    pub telemetry: Arc<dyn Telemetry>,
}

impl Ports {
    /// Ports that log events through `tracing`, with no workspace files (every agent's
    /// `HEARTBEAT.md` is missing until [`Ports::with_workspace`]).
    pub fn new(clock: Arc<dyn Clock>, llm: Arc<dyn Llm>, messenger: Arc<dyn Messenger>, store: Arc<dyn Store>) -> Self {
        let workspace = Arc::new(MemoryWorkspace::default());
        let tools = Arc::new(NoToolServers);
        let telemetry = Arc::new(NoTelemetry);
        Self { clock, llm, messenger, store, events: Arc::new(TracingSink), workspace, tools, telemetry }
    }

    /// The same ports with `telemetry` as where traces go.
    pub fn with_telemetry(self, telemetry: Arc<dyn Telemetry>) -> Self {
        Self { telemetry, ..self }
    }

    pub fn with_workspace(self, workspace: Arc<dyn Workspace>) -> Self {
        Self { workspace, ..self }
    }

    /// The same ports with `tools` as the servers of tools.
    pub fn with_tools(self, tools: Arc<dyn ToolServers>) -> Self {
        Self { tools, ..self }
    }
}

/// Engine settings that are not per heartbeat.
#[derive(Clone)]
pub struct EngineOptions {
    pub breaker_failures_max: u32,
    /// Waits after the 1st, 2nd, ... consecutive failure before the next run (the last repeats).
    pub error_backoff: Vec<Duration>,
    /// How long an open breaker waits before its probe, per trip in a row (the last
    /// repeats); empty: it stays open until an operator enables the heartbeat.
    pub breaker_cooldown: Vec<Duration>,
    /// Where the breaker's announcements go; `None`: each heartbeat's own target.
    pub alerts_target: Option<DeliveryTarget>,
    /// Runs working at once (model, tools, delivery); as many more may wait for their
    /// result's write (ADR 0042).
    pub runs_in_flight_max: usize,
    pub system_prompt: String,
    /// Overrides the LLM provider's default model.
    pub model: Option<String>,
    /// What each model's tokens cost; with the provider's default model named, so a
    /// request that names none is priced too.
    pub prices: PriceTable,
    /// The secret values the daemon read from the environment: blanked in transcripts.
    pub redactor: Redactor,
    /// Per-agent settings; agents not named here get `agent_default`.
    pub agents: BTreeMap<AgentId, AgentSettings>,
    pub agent_default: AgentSettings,
    /// The daily caps of tokens and cost across all agents, in the engine's day.
    pub global_caps: GlobalCaps,
    /// The tools every run offers the model.
    pub toolbox: ToolBox,
    /// What each target shows of runs (`show_ok`, `show_alerts`, `use_indicator`).
    pub visibility: VisibilityRules,
    /// How long the run log keeps rows, by age and count per heartbeat.
    pub run_retention: RunRetention,
    /// On a node of a cluster, the lease of the partition this engine runs: every
    /// delivery checks it first (ADR 0018). The default never refuses.
    pub fence: Fence,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            breaker_failures_max: BREAKER_FAILURES_MAX_DEFAULT,
            error_backoff: ERROR_BACKOFF_SECS_DEFAULT.iter().copied().map(Duration::from_secs).collect(),
            breaker_cooldown: BREAKER_COOLDOWN_SECS_DEFAULT.iter().copied().map(Duration::from_secs).collect(),
            alerts_target: None,
            runs_in_flight_max: RUNS_IN_FLIGHT_MAX_DEFAULT,
            system_prompt: HEARTBEAT_SYSTEM_PROMPT_DEFAULT.to_owned(),
            model: None,
            prices: PriceTable::default(),
            redactor: Redactor::default(),
            agents: BTreeMap::new(),
            agent_default: AgentSettings::default(),
            global_caps: GlobalCaps {
                tokens: GLOBAL_DAILY_TOKENS_MAX_DEFAULT,
                cost_micros: GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT,
                timezone: "UTC".to_owned(),
            },
            toolbox: ToolBox::standard(),
            visibility: VisibilityRules::default(),
            run_retention: RunRetention::default(),
            fence: Fence::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the engine has stopped")]
    Stopped,
    /// On a node of a cluster: the agent's partition runs on another node (`owner`), or
    /// on none while it changes hands.
    #[error("{}", not_owner_text(*partition, owner.as_deref()))]
    NotOwner { partition: u32, owner: Option<String> },
}

fn not_owner_text(partition: u32, owner: Option<&str>) -> String {
    match owner {
        Some(owner) => format!("this agent's heartbeats (partition {partition}) run on node {owner}; ask that node"),
        None => format!("this agent's heartbeats (partition {partition}) are changing nodes; try again in a moment"),
    }
}

/// Controls a running engine. Every change is written to the store first, then applied
/// to the running schedule: when a call returns `Ok`, the change is durable and live.
///
/// It derefs to an [`EngineClient`], which has every call but `shutdown` and can be
/// cloned into tasks (the HTTP API's handlers, say).
pub struct EngineHandle {
    client: EngineClient,
    driver: JoinHandle<()>,
}

/// The calls of a running engine, cloneable; see [`EngineHandle`].
#[derive(Clone)]
pub struct EngineClient {
    control: Control,
    commands: mpsc::Sender<Command>,
    lanes: Arc<Lanes>,
    run_events: Arc<RunEvents>,
}

impl std::ops::Deref for EngineHandle {
    type Target = EngineClient;

    fn deref(&self) -> &EngineClient {
        &self.client
    }
}

const COMMAND_QUEUE_MAX: usize = 1_024;

/// The normal start-up path, shared by the daemon and the simulator: seeds the config's
/// heartbeats into the store (see [`Store::seed_config`]), then [`start`]s the engine.
///
/// # Errors
/// When the store cannot be seeded or read.
pub async fn boot(
    ports: Ports,
    config_heartbeats: &[HeartbeatDef],
    options: EngineOptions,
) -> Result<(EngineHandle, SeedReport), StoreError> {
    let report = ports.store.seed_config(config_heartbeats, ports.clock.wall()).await?;
    let engine = start(ports, options).await?;
    Ok((engine, report))
}

/// Starts an engine: marks runs a previous process left `running` as interrupted, loads
/// every heartbeat and pause from the store, arms the enabled heartbeats and spawns the
/// driver.
///
/// # Errors
/// When the store cannot be read at start-up.
pub async fn start(ports: Ports, options: EngineOptions) -> Result<EngineHandle, StoreError> {
    let shared = Shared::new(&ports);
    start_sharing(ports, options, shared).await
}

/// What the engines of one process share when it runs several (one per partition it
/// holds, see `cluster`): an agent's lane and its run events do not move with its partition.
#[derive(Clone)]
pub struct Shared {
    pub lanes: Arc<Lanes>,
    pub run_events: Arc<RunEvents>,
}

impl Shared {
    pub fn new(ports: &Ports) -> Self {
        Self {
            lanes: Arc::new(Lanes::new(Arc::clone(&ports.clock), Arc::clone(&ports.events))),
            run_events: Arc::new(RunEvents::default()),
        }
    }
}

/// [`start`], with lanes and run events shared with other engines of this process.
///
/// # Errors
/// When the store cannot be read at start-up.
pub async fn start_sharing(ports: Ports, options: EngineOptions, shared: Shared) -> Result<EngineHandle, StoreError> {
    let interrupted = ports.store.recover_interrupted(ports.clock.wall()).await?;
    if interrupted > 0 {
        ports.events.emit(ports.clock.wall(), &EngineEvent::Recovered { interrupted });
    }
    let pauses = ports.store.load_pauses().await?;
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE_MAX);
    let Shared { lanes, run_events } = shared;
    let control = Control::new(Arc::clone(&ports.store), Arc::clone(&ports.clock), commands.clone());
    let (completions_tx, completions) = mpsc::unbounded_channel();
    let context = RunContext {
        clock: Arc::clone(&ports.clock),
        llm: Arc::clone(&ports.llm),
        messenger: Arc::clone(&ports.messenger),
        store: Arc::clone(&ports.store),
        events: Arc::clone(&ports.events),
        system_prompt: options.system_prompt.into(),
        model: options.model.map(Into::into),
        prices: Arc::new(options.prices),
        redactor: Arc::new(options.redactor),
        breaker_failures_max: options.breaker_failures_max,
        error_backoff: options.error_backoff.into(),
        breaker_cooldown: options.breaker_cooldown.into(),
        alerts_target: options.alerts_target,
        toolbox: Arc::new(options.toolbox),
        tool_servers: Arc::clone(&ports.tools),
        telemetry: Arc::clone(&ports.telemetry),
        control: control.clone(),
        agents: Arc::new(options.agents.into_iter().map(|(agent, settings)| (agent, Arc::new(settings))).collect()),
        agent_default: Arc::new(options.agent_default),
        global_caps: Arc::new(options.global_caps),
        workspace: Arc::clone(&ports.workspace),
        lanes: Arc::clone(&lanes),
        visibility: Arc::new(options.visibility),
        run_events: Arc::clone(&run_events),
        dedup_gate: Arc::default(),
        dedup_reads: Arc::default(),
        run_retention: options.run_retention,
        results: group_commit::ResultWriter::spawn(
            Arc::clone(&ports.store),
            options.breaker_failures_max,
            Arc::clone(&ports.events),
            Arc::clone(&ports.clock),
            completions_tx,
        ),
        fence: options.fence,
    };
    let mut driver = Driver::new(context, options.runs_in_flight_max, receiver, completions);
    let mut loading = driver.begin_load(pauses).await;
    // Each page is armed as it comes, while the store reads the next.
    ports.store.load_for_arming_in_pages(&mut |page| driver.arm_loaded(&mut loading, page)).await?;
    driver.finish_load(loading).await;
    // The load freed most of what it allocated; what the engine keeps stays.
    crate::adapters::heap_trim::release_free_heap();
    let driver = tokio::spawn(driver.run());
    Ok(EngineHandle { client: EngineClient { control, commands, lanes, run_events }, driver })
}

impl EngineClient {
    /// Creates or replaces a heartbeat at run time; it waits one full interval.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn upsert(&self, def: HeartbeatDef) -> Result<(), EngineError> {
        self.control.upsert(def).await
    }

    /// Deletes a heartbeat; it never fires again. Returns whether it existed.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn delete(&self, key: &HeartbeatKey) -> Result<bool, EngineError> {
        self.control.delete(key).await
    }

    /// Enables (clearing the breaker) or disables a heartbeat. Returns whether it existed.
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool) -> Result<bool, EngineError> {
        self.control.set_enabled(key, enabled).await
    }

    /// Pauses an agent's timed heartbeats for `minutes` (what `pause_heartbeats` does).
    ///
    /// # Errors
    /// When the store write fails (no pause) or the engine has stopped.
    pub async fn pause(&self, agent: &AgentId, minutes: u32) -> Result<Pause, EngineError> {
        self.control.pause(agent, minutes).await
    }

    /// Re-seeds the config's heartbeats after the config changed (see [`Control::reseed`]).
    ///
    /// # Errors
    /// When the store write fails (nothing changed) or the engine has stopped.
    pub async fn reload_heartbeats(&self, defs: &[HeartbeatDef]) -> Result<SeedReport, EngineError> {
        self.control.reseed(defs).await
    }

    /// Runs heartbeats as the store holds them after a reload seeded elsewhere (see
    /// [`Control::adopt_stored`]).
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn adopt_stored(&self, heartbeats: Vec<Heartbeat>, removed: &[HeartbeatKey]) -> Result<(), EngineError> {
        self.control.adopt_stored(heartbeats, removed).await
    }

    /// Adopts the rows among `heartbeats` that the engine arms otherwise, or not at all
    /// (see [`Control::adopt_changed`]).
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn adopt_changed(&self, heartbeats: Vec<Heartbeat>) -> Result<(), EngineError> {
        self.control.adopt_changed(heartbeats).await
    }

    /// Stops every config-seeded heartbeat that `in_file` lacks (see
    /// [`Control::keep_config_only`]).
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn keep_config_only(&self, in_file: BTreeSet<HeartbeatKey>) -> Result<(), EngineError> {
        self.control.keep_config_only(in_file).await
    }

    /// Ends an agent's pause early. Returns whether it had one.
    ///
    /// # Errors
    /// When the store write fails (the pause stays) or the engine has stopped.
    pub async fn resume(&self, agent: &AgentId) -> Result<bool, EngineError> {
        self.control.resume(agent).await
    }

    /// Every job as the driver sees it now, with the guard's verdict for a slot due now.
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn inspect(&self) -> Result<Vec<JobView>, EngineError> {
        self.inspect_only(None).await
    }

    /// Those of `keys` the driver runs, as [`EngineClient::inspect`] sees them: a page of a
    /// status or one agent's jobs, where the whole list is a view a job (a million).
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn inspect_keys(&self, keys: Vec<HeartbeatKey>) -> Result<Vec<JobView>, EngineError> {
        self.inspect_only(Some(keys)).await
    }

    async fn inspect_only(&self, only: Option<Vec<HeartbeatKey>>) -> Result<Vec<JobView>, EngineError> {
        let (answer, view) = oneshot::channel();
        self.commands.send(Command::Inspect { only, answer }).await.map_err(|_| EngineError::Stopped)?;
        view.await.map_err(|_| EngineError::Stopped)
    }

    /// Each agent's jobs, enabled and disabled, counted on the engine's side.
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn enabled_counts(&self) -> Result<BTreeMap<AgentId, EnabledCounts>, EngineError> {
        let (answer, counts) = oneshot::channel();
        self.commands.send(Command::Count { answer }).await.map_err(|_| EngineError::Stopped)?;
        counts.await.map_err(|_| EngineError::Stopped)
    }

    /// The jobs with a run going, in key order: what a stop waits for.
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn keys_in_flight(&self) -> Result<Vec<HeartbeatKey>, EngineError> {
        let (answer, keys) = oneshot::channel();
        self.commands.send(Command::InFlight { answer }).await.map_err(|_| EngineError::Stopped)?;
        keys.await.map_err(|_| EngineError::Stopped)
    }

    /// Runs a job now, once, through the normal claim (see [`TriggerOutcome`]).
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn trigger(&self, key: &HeartbeatKey) -> Result<TriggerOutcome, EngineError> {
        let (answer, outcome) = oneshot::channel();
        let command = Command::Trigger { key: key.clone(), answer };
        self.commands.send(command).await.map_err(|_| EngineError::Stopped)?;
        outcome.await.map_err(|_| EngineError::Stopped)
    }

    /// Queues a system event for `agent`'s heartbeat (the `HEARTBEAT.md` one), which reads
    /// it on its next run, as a main-mode cron job's event. Durable before it returns.
    ///
    /// # Errors
    /// When the store write fails (nothing queued).
    pub async fn queue_system_event(&self, agent: &AgentId, text: &str) -> Result<Queued, EngineError> {
        let at = self.control.clock().wall();
        Ok(self.control.store().queue_system_event(agent, text, at).await?)
    }

    /// Runs past `slots` of a job, oldest first (see `core::backfill::window_slots`).
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn backfill(
        &self,
        key: &HeartbeatKey,
        slots: Vec<jiff::Timestamp>,
    ) -> Result<TriggerOutcome, EngineError> {
        let (answer, outcome) = oneshot::channel();
        let command = Command::Backfill { key: key.clone(), slots, answer };
        self.commands.send(command).await.map_err(|_| EngineError::Stopped)?;
        outcome.await.map_err(|_| EngineError::Stopped)
    }

    /// Asks `agent`'s heartbeat (the `HEARTBEAT.md` one) to run now. Requests within
    /// `WAKE_COALESCE_MS` become one run named by the most important reason; a request
    /// made while it runs waits for the run to end. Returns whether the agent has an
    /// agent heartbeat to wake.
    ///
    /// # Errors
    /// When the engine has stopped.
    pub async fn request_now(&self, agent: &AgentId, reason: WakeReason) -> Result<bool, EngineError> {
        let (accepted, answer) = oneshot::channel();
        let command = Command::Wake { agent: agent.clone(), reason, accepted };
        self.commands.send(command).await.map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)
    }

    /// Begins a user conversation with `agent`: waits for its agent heartbeat if one is
    /// running, then holds the agent's lane (its heartbeat does not start) until the
    /// returned turn is dropped.
    pub async fn begin_user_turn(&self, agent: &AgentId) -> UserTurn {
        self.lanes.begin_user_turn(agent).await
    }

    /// Run events: subscribe, or read an agent's last one.
    pub fn run_events(&self) -> &RunEvents {
        &self.run_events
    }

    /// The run events, shared, for tasks that outlive a borrow of the handle.
    pub fn run_events_shared(&self) -> Arc<RunEvents> {
        Arc::clone(&self.run_events)
    }

    /// The agents' lanes, for user turns begun from tasks that outlive a borrow of the handle.
    pub fn lanes(&self) -> Arc<Lanes> {
        Arc::clone(&self.lanes)
    }

    /// The control the agent's tools use, for embedding applications that run tools themselves.
    pub fn control(&self) -> &Control {
        &self.control
    }
}

impl EngineHandle {
    /// A cloneable client of this engine.
    pub fn client(&self) -> EngineClient {
        self.client.clone()
    }

    /// Stops scheduling, lets in-flight runs finish within `grace`, and waits for the
    /// driver to end. Returns how many runs were abandoned at the end of the grace period.
    pub async fn shutdown(self, grace: Duration) -> usize {
        let (done, abandoned) = oneshot::channel();
        if self.client.commands.send(Command::Shutdown { grace, done }).await.is_err() {
            return 0;
        }
        let abandoned = abandoned.await.unwrap_or(0);
        let _ = self.driver.await;
        abandoned
    }
}
