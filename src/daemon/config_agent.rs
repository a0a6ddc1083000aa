//! The agent heartbeat in the config: `[defaults.heartbeat]`, overridden per agent by
//! `[agents.heartbeat]`, and the agent's `workspace` where its `HEARTBEAT.md` lives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::mcp::RawJobTools;
use super::{ConfigError, HeartbeatDefaults, RawActiveHours, Validator};
use crate::agent::settings::AgentHeartbeatSettings;
use crate::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use crate::core::heartbeat_file::HEARTBEAT_PROMPT_DEFAULT;
use crate::core::ids::HeartbeatKey;
use crate::core::policy::RunPolicy;
use crate::core::schedule::Schedule;
use crate::core::schedule_fields::fit_every_to_window;
use crate::limits::{AGENT_HEARTBEAT_EVERY_SECS_DEFAULT, AGENT_HEARTBEAT_SPACING_SECS_MIN, INTERVAL_SECS_MAX};

/// `[defaults.heartbeat]` and `[agents.heartbeat]`: every field optional, the agent's
/// table wins field by field.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgentHeartbeat {
    enabled: Option<bool>,
    every: Option<String>,
    prompt: Option<String>,
    target: Option<String>,
    model: Option<String>,
    ack_max_chars: Option<usize>,
    active_hours: Option<RawActiveHours>,
    timeout: Option<String>,
    tools: Option<Vec<String>>,
    write_tools: Option<Vec<String>>,
    required_tools: Option<Vec<String>>,
    check_tool: Option<String>,
    check_arguments: Option<toml::Value>,
}

impl RawAgentHeartbeat {
    fn over(self, defaults: &RawAgentHeartbeat) -> RawAgentHeartbeat {
        let defaults = defaults.clone();
        RawAgentHeartbeat {
            enabled: self.enabled.or(defaults.enabled),
            every: self.every.or(defaults.every),
            prompt: self.prompt.or(defaults.prompt),
            target: self.target.or(defaults.target),
            model: self.model.or(defaults.model),
            ack_max_chars: self.ack_max_chars.or(defaults.ack_max_chars),
            active_hours: self.active_hours.or(defaults.active_hours),
            timeout: self.timeout.or(defaults.timeout),
            tools: self.tools.or(defaults.tools),
            write_tools: self.write_tools.or(defaults.write_tools),
            required_tools: self.required_tools.or(defaults.required_tools),
            check_tool: self.check_tool.or(defaults.check_tool),
            check_arguments: self.check_arguments.or(defaults.check_arguments),
        }
    }
}

/// `[defaults]`: what every agent starts from.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    #[serde(default)]
    pub(super) heartbeat: RawAgentHeartbeat,
}

/// An agent's own heartbeat, read from the config.
pub(super) struct AgentHeartbeat {
    pub(super) def: HeartbeatDef,
    pub(super) settings: AgentHeartbeatSettings,
}

impl Validator<'_> {
    /// The agent heartbeat of an agent that has a `workspace` or an `[agents.heartbeat]`
    /// table (and does not say `enabled = false`); `None` otherwise. Agents that ask for
    /// neither get none: a heartbeat every 30 minutes is an LLM bill nobody asked for.
    pub(super) fn agent_heartbeat(
        &self,
        field: &str,
        own: Option<RawAgentHeartbeat>,
        has_workspace: bool,
        defaults: &RawAgentHeartbeat,
        jobs: &HeartbeatDefaults<'_>,
        agent_ack_max_chars: usize,
    ) -> Result<Option<AgentHeartbeat>, ConfigError> {
        if own.is_none() && !has_workspace {
            return Ok(None);
        }
        let field = format!("{field}.heartbeat");
        let raw = own.unwrap_or_default().over(defaults);
        if raw.enabled == Some(false) {
            return Ok(None);
        }
        let every = match &raw.every {
            Some(text) => self.duration(
                &format!("{field}.every"),
                text,
                Duration::from_secs(AGENT_HEARTBEAT_SPACING_SECS_MIN),
                Duration::from_secs(INTERVAL_SECS_MAX),
            )?,
            None => Duration::from_secs(AGENT_HEARTBEAT_EVERY_SECS_DEFAULT),
        };
        let prompt = match raw.prompt {
            Some(prompt) => self.prompt(&format!("{field}.prompt"), prompt)?,
            None => HEARTBEAT_PROMPT_DEFAULT.to_owned(),
        };
        let target = self.target(&field, raw.target, None, jobs.adapters)?;
        let active_hours = self.active_hours(&field, raw.active_hours, None, None, jobs.timezone)?;
        // A daily heartbeat with a window runs at its opening; one that could miss it is refused.
        let schedule = fit_every_to_window(Schedule::Every(every), active_hours.as_ref())
            .map_err(|problem| self.error(format!("{field}.every"), problem))?;
        let timeout = self.timeout(&format!("{field}.timeout"), raw.timeout.as_deref(), jobs.run_timeout)?;
        let ack_max_chars = self.ack_max_chars(&field, raw.ack_max_chars, agent_ack_max_chars)?;
        if raw.model.as_deref().is_some_and(|model| model.trim().is_empty()) {
            return Err(self.error(format!("{field}.model"), "is empty"));
        }
        let tools = RawJobTools {
            tools: raw.tools,
            write_tools: raw.write_tools,
            required_tools: raw.required_tools,
            check_tool: raw.check_tool,
            check_arguments: raw.check_arguments,
        };
        let tools = self.job_tools(&field, &tools, jobs.agent_tools)?;
        let def = HeartbeatDef {
            key: HeartbeatKey::agent_heartbeat(jobs.agent),
            kind: JobKind::Agent,
            prompt: self.shared_prompt(&prompt),
            schedule,
            // One run at a time, never stacked (spec H16); after downtime, one run.
            policy: RunPolicy::default(),
            delete_after_run: false,
            dedup: true,
            target,
            active_hours,
            timeout,
            origin: Origin::Config,
            tools: tools.into(),
            // Its model stays in the agent's settings (`[agents.heartbeat] model`).
            model: None,
        };
        Ok(Some(AgentHeartbeat { def, settings: AgentHeartbeatSettings { model: raw.model, ack_max_chars } }))
    }

    /// An agent's `workspace`, resolved against the config file's folder.
    pub(super) fn workspace(&self, field: &str, text: &str) -> Result<PathBuf, ConfigError> {
        if text.trim().is_empty() {
            return Err(self.error(format!("{field}.workspace"), "is empty"));
        }
        let base = self.path.parent().unwrap_or_else(|| Path::new("."));
        Ok(base.join(text))
    }
}
