//! Per-agent settings of runs and tools, with defaults that protect money and inboxes.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::core::budget::DayCaps;
use crate::core::tool_policy::ToolPattern;
use crate::limits::{
    ACK_MAX_CHARS_DEFAULT, AGENT_LOOP_ITERATIONS_MAX_DEFAULT, DAILY_COST_MICROS_MAX_DEFAULT, DAILY_TOKENS_MAX_DEFAULT,
    HEARTBEATS_PER_AGENT_MAX_DEFAULT, LLM_CALLS_PER_DAY_DEFAULT, MODEL_INTERVAL_SECS_MIN_DEFAULT,
    PAUSE_MINUTES_MAX_DEFAULT, RUN_TIMEOUT_SECS_DEFAULT, TOOL_CALLS_PER_RUN_MAX_DEFAULT,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    /// LLM calls one run's agent loop may make.
    pub loop_iterations_max: u32,
    /// The longest pause `pause_heartbeats` may ask for.
    pub pause_minutes_max: u32,
    /// The shortest interval the `heartbeat` tool accepts.
    pub model_interval_min: Duration,
    /// How many heartbeats the agent may have before the `heartbeat` tool refuses to create more.
    pub heartbeats_max: usize,
    /// The zone of active hours a model gives without one.
    pub timezone: String,
    /// The run budget of heartbeats a model creates.
    pub run_timeout: Duration,
    /// Targets (`stdout`, `webhook:ops`) the `heartbeat` tool may deliver to: only what
    /// the config defines, so a model cannot send to an address it made up.
    pub allowed_targets: BTreeSet<String>,
    /// Characters of note an `HEARTBEAT_OK` reply may carry and still not be delivered.
    pub ack_max_chars: usize,
    /// The agent heartbeat's own model and acknowledgement length.
    pub agent_heartbeat: AgentHeartbeatSettings,
    /// LLM calls the agent's runs may make per local day (in `timezone`), all its
    /// heartbeats and jobs together; then runs skip with reason `budget`.
    pub llm_calls_per_day: u64,
    /// Tokens (input and output) the agent's runs may use per local day; then runs skip
    /// with reason `token-cap`.
    pub daily_tokens_max: u64,
    /// What the agent's runs may cost per local day, in micros of the price table's
    /// currency; then runs skip with reason `cost-cap`. Counts only priced models.
    pub daily_cost_max_micros: u64,
    /// The tools (`server/tool`, `server/*`) the agent's runs may use; a job may narrow
    /// them (ADR 0019). None by default.
    pub tools: Vec<ToolPattern>,
    /// Tool calls one run may make; past it, a call answers the model with an error.
    pub tool_calls_max: u32,
}

/// What `[agents.heartbeat]` sets for the agent heartbeat's runs only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHeartbeatSettings {
    /// Overrides the engine's model for the agent heartbeat.
    pub model: Option<String>,
    pub ack_max_chars: usize,
}

impl Default for AgentHeartbeatSettings {
    fn default() -> Self {
        Self { model: None, ack_max_chars: ACK_MAX_CHARS_DEFAULT }
    }
}

impl AgentSettings {
    /// The daily caps the agent's runs are held to.
    pub fn day_caps(&self) -> DayCaps {
        DayCaps {
            calls: self.llm_calls_per_day,
            tokens: self.daily_tokens_max,
            cost_micros: self.daily_cost_max_micros,
        }
    }
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            loop_iterations_max: AGENT_LOOP_ITERATIONS_MAX_DEFAULT,
            pause_minutes_max: PAUSE_MINUTES_MAX_DEFAULT,
            model_interval_min: Duration::from_secs(MODEL_INTERVAL_SECS_MIN_DEFAULT),
            heartbeats_max: HEARTBEATS_PER_AGENT_MAX_DEFAULT,
            timezone: "UTC".to_owned(),
            run_timeout: Duration::from_secs(RUN_TIMEOUT_SECS_DEFAULT),
            allowed_targets: BTreeSet::from(["stdout".to_owned()]),
            ack_max_chars: ACK_MAX_CHARS_DEFAULT,
            agent_heartbeat: AgentHeartbeatSettings::default(),
            llm_calls_per_day: LLM_CALLS_PER_DAY_DEFAULT,
            daily_tokens_max: DAILY_TOKENS_MAX_DEFAULT,
            daily_cost_max_micros: DAILY_COST_MICROS_MAX_DEFAULT,
            tools: Vec::new(),
            tool_calls_max: TOOL_CALLS_PER_RUN_MAX_DEFAULT,
        }
    }
}
