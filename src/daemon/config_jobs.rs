//! Heartbeats and cron jobs in the config: `[[agents.heartbeats]]` and `[[agents.cron]]`,
//! their schedules and policies, and the engine's error backoff.

use std::time::Duration;

use jiff::Timestamp;

use super::mcp::RawJobTools;
use super::{ConfigError, HeartbeatDefaults, RawCron, RawHeartbeat, RawPolicy, RawSchedule, Validator};
use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use crate::core::ids::{HeartbeatId, HeartbeatKey};
use crate::core::policy::{CatchUp, Overlap, RunPolicy};
use crate::core::schedule::Schedule;
use crate::core::schedule_fields::{check_cron_meets_window, fit_every_to_window, ScheduleFields};
use crate::core::tool_policy::JobTools;
use crate::limits::{
    BREAKER_COOLDOWN_SECS_DEFAULT, BREAKER_COOLDOWN_SECS_MAX, BREAKER_COOLDOWN_SECS_MIN, BREAKER_COOLDOWN_STEPS_MAX,
    CATCHUP_WINDOW_SECS_MAX, ERROR_BACKOFF_SECS_DEFAULT, ERROR_BACKOFF_SECS_MAX, ERROR_BACKOFF_STEPS_MAX,
    JITTER_SECS_MAX, PROMPT_CHARS_MAX,
};

/// Where the check "does this cron ever meet its active hours" starts. Cron patterns
/// repeat from year to year, and config validation must not read the clock.
const WINDOW_CHECK_FROM_UNIX_SECS: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

/// What a heartbeat and a cron job have in common once read from their own fields.
struct Shared {
    key: HeartbeatKey,
    tools: JobTools,
    model: Option<String>,
    prompt: String,
    schedule: Schedule,
    target: DeliveryTarget,
    active_hours: Option<ActiveHours>,
    policy: RawPolicy,
    timeout: Option<String>,
}

impl Validator<'_> {
    pub(super) fn heartbeat(
        &self,
        field: &str,
        raw: RawHeartbeat,
        defaults: &HeartbeatDefaults<'_>,
    ) -> Result<HeartbeatDef, ConfigError> {
        let key = self.key(field, &raw.id, defaults)?;
        let policy = RawPolicy {
            catch_up: raw.catch_up,
            catch_up_window: raw.catch_up_window,
            overlap: raw.overlap,
            jitter: raw.jitter,
            delete_after_run: raw.delete_after_run,
            dedup: raw.dedup,
        };
        let prompt = self.prompt(&format!("{field}.prompt"), raw.prompt)?;
        let tools = RawJobTools {
            tools: raw.tools,
            write_tools: raw.write_tools,
            required_tools: raw.required_tools,
            check_tool: raw.check_tool,
            check_arguments: raw.check_arguments,
        };
        let tools = self.job_tools(field, &tools, defaults.agent_tools)?;
        let flat = raw.every.is_some() || raw.interval_secs.is_some() || raw.cron.is_some() || raw.at.is_some();
        let schedule = match (raw.schedule, flat) {
            (Some(_), true) => {
                return Err(self.error(format!("{field}.schedule"), "give `schedule` or `every`/`cron`/`at`, not both"))
            }
            (Some(schedule), false) => self.schedule(&format!("{field}.schedule"), schedule, defaults.timezone)?,
            (None, _) => {
                if raw.every.is_some() && raw.interval_secs.is_some() {
                    return Err(
                        self.error(format!("{field}.every"), "give either `every` or `interval_secs`, not both")
                    );
                }
                let interval_text = raw.interval_secs.map(|secs| format!("{secs}s"));
                let fields = ScheduleFields {
                    every: raw.every.as_deref().or(interval_text.as_deref()),
                    cron: raw.cron.as_deref(),
                    timezone: raw.timezone.as_deref(),
                    at: raw.at.as_deref(),
                };
                fields.schedule(defaults.timezone).map_err(|error| {
                    let name = if error.field == "every" && raw.interval_secs.is_some() {
                        "interval_secs"
                    } else if error.field == "schedule" {
                        "every"
                    } else {
                        error.field
                    };
                    self.error(format!("{field}.{name}"), error.problem)
                })?
            }
        };
        let target = self.target(field, raw.target, raw.delivery_target, defaults.adapters)?;
        let active_hours =
            self.active_hours(field, raw.active_hours, raw.active_start_hour, raw.active_end_hour, defaults.timezone)?;
        let every_field = if raw.interval_secs.is_some() { "interval_secs" } else { "every" };
        let schedule = self.fit_to_window(field, every_field, schedule, active_hours.as_ref())?;
        let model = self.model(field, raw.model)?;
        let shared = Shared { key, tools, model, prompt, schedule, target, active_hours, policy, timeout: raw.timeout };
        self.definition(field, JobKind::Heartbeat, shared, defaults)
    }

    /// A cron job, or `None` when it says `enabled = false`.
    pub(super) fn cron_job(
        &self,
        field: &str,
        raw: RawCron,
        defaults: &HeartbeatDefaults<'_>,
    ) -> Result<Option<HeartbeatDef>, ConfigError> {
        let key = self.key(field, &raw.id, defaults)?;
        let policy = RawPolicy {
            catch_up: raw.catch_up,
            catch_up_window: raw.catch_up_window,
            overlap: raw.overlap,
            jitter: raw.jitter,
            delete_after_run: raw.delete_after_run,
            dedup: raw.dedup,
        };
        let prompt = match (raw.prompt, raw.payload) {
            (Some(prompt), None) => self.prompt(&format!("{field}.prompt"), prompt)?,
            (None, Some(payload)) => self.prompt(&format!("{field}.payload.text"), payload.text)?,
            (Some(_), Some(_)) => {
                return Err(self.error(format!("{field}.prompt"), "give `prompt` or `payload`, not both"))
            }
            (None, None) => {
                return Err(self.error(format!("{field}.prompt"), "is missing (or payload = { text = \"...\" })"))
            }
        };
        let tools = RawJobTools {
            tools: raw.tools,
            write_tools: raw.write_tools,
            required_tools: raw.required_tools,
            check_tool: raw.check_tool,
            check_arguments: raw.check_arguments,
        };
        let tools = self.job_tools(field, &tools, defaults.agent_tools)?;
        let kind = match raw.mode.as_deref() {
            None | Some("isolated") => JobKind::Cron,
            Some("main") if !defaults.agent_heartbeat => {
                let problem = "\"main\" hands the job to the agent heartbeat, and this agent has none; give the \
                               agent a `workspace` or a [agents.heartbeat] table, or use \"isolated\"";
                return Err(self.error(format!("{field}.mode"), problem));
            }
            Some("main") if raw.target.is_some() || raw.delivery.is_some() => {
                let problem = "a main-mode job's results go out through the agent heartbeat's target; \
                               remove `target`/`delivery` or use mode \"isolated\"";
                return Err(self.error(format!("{field}.mode"), problem));
            }
            Some("main") if tools.check.is_some() => {
                let problem = "a main-mode job makes no run of its own to check for; use mode \"isolated\"";
                return Err(self.error(format!("{field}.check_tool"), problem));
            }
            Some("main") => JobKind::CronMain,
            Some(other) => {
                let problem = format!("{other:?} is not \"isolated\" or \"main\"");
                return Err(self.error(format!("{field}.mode"), problem));
            }
        };
        let schedule = match raw.schedule {
            Some(schedule) => self.schedule(&format!("{field}.schedule"), schedule, defaults.timezone)?,
            None => {
                let problem =
                    "is missing (like schedule = { cron = \"0 9 * * MON-FRI\", timezone = \"Asia/Shanghai\" })";
                return Err(self.error(format!("{field}.schedule"), problem));
            }
        };
        let target = match (raw.delivery.as_deref(), raw.target) {
            (Some("silent"), _) => DeliveryTarget::silent(),
            (Some("announce") | None, Some(target)) => self.target(field, Some(target), None, defaults.adapters)?,
            (None, None) => DeliveryTarget::silent(),
            (Some("announce"), None) => {
                return Err(self.error(format!("{field}.target"), "is missing; delivery = \"announce\" needs a target"))
            }
            (Some(other), _) => {
                let problem = format!("{other:?} is not \"announce\" or \"silent\"");
                return Err(self.error(format!("{field}.delivery"), problem));
            }
        };
        let active_hours = self.active_hours(field, raw.active_hours, None, None, defaults.timezone)?;
        let schedule = self.fit_to_window(&format!("{field}.schedule"), "every", schedule, active_hours.as_ref())?;
        let model = self.model(field, raw.model)?;
        let shared = Shared { key, tools, model, prompt, schedule, target, active_hours, policy, timeout: raw.timeout };
        let def = self.definition(field, kind, shared, defaults)?;
        Ok((raw.enabled != Some(false)).then_some(def))
    }

    /// The definition from what heartbeats and cron jobs share, once each kind's own
    /// fields are read: policies, dedup and the run budget.
    fn definition(
        &self,
        field: &str,
        kind: JobKind,
        shared: Shared,
        defaults: &HeartbeatDefaults<'_>,
    ) -> Result<HeartbeatDef, ConfigError> {
        let dedup = shared.policy.dedup.unwrap_or(true);
        let (policy, delete_after_run) = self.policy(field, shared.policy, &shared.schedule)?;
        let timeout = self.timeout(&format!("{field}.timeout"), shared.timeout.as_deref(), defaults.run_timeout)?;
        Ok(HeartbeatDef {
            key: shared.key,
            kind,
            prompt: self.shared_prompt(&shared.prompt),
            schedule: shared.schedule,
            policy,
            delete_after_run,
            dedup,
            target: shared.target,
            active_hours: shared.active_hours,
            timeout,
            origin: Origin::Config,
            tools: shared.tools.into(),
            model: shared.model,
        })
    }

    /// A job's `model`: a name the provider knows, checked only for being one.
    fn model(&self, field: &str, model: Option<String>) -> Result<Option<String>, ConfigError> {
        let Some(model) = model else { return Ok(None) };
        let problem = crate::core::text::model_name_problem(&model);
        match problem {
            Some(problem) => Err(self.error(format!("{field}.model"), problem)),
            None => Ok(Some(model)),
        }
    }

    fn key(&self, field: &str, id: &str, defaults: &HeartbeatDefaults<'_>) -> Result<HeartbeatKey, ConfigError> {
        let heartbeat = HeartbeatId::new(id).map_err(|e| self.error(format!("{field}.id"), format!("{id:?} {e}")))?;
        if heartbeat.is_reserved() {
            let problem = format!("{id:?} is reserved for the agent heartbeat ([agents.heartbeat])");
            return Err(self.error(format!("{field}.id"), problem));
        }
        Ok(HeartbeatKey { agent: defaults.agent.clone(), heartbeat })
    }

    pub(super) fn prompt(&self, field: &str, prompt: String) -> Result<String, ConfigError> {
        if prompt.trim().is_empty() {
            return Err(self.error(field, "is empty"));
        }
        if prompt.chars().count() > PROMPT_CHARS_MAX {
            return Err(self.error(field, format!("is longer than {PROMPT_CHARS_MAX} characters")));
        }
        crate::core::text::refuse_nul(&prompt).map_err(|problem| self.error(field, problem))?;
        Ok(prompt)
    }

    fn schedule(&self, field: &str, raw: RawSchedule, zone: &str) -> Result<Schedule, ConfigError> {
        let (every, cron, at) = match (raw.kind.as_deref(), raw.expr) {
            (None, None) => (raw.every, raw.cron, raw.at),
            (Some(kind), Some(expr)) if raw.every.is_none() && raw.cron.is_none() && raw.at.is_none() => match kind {
                "every" => (Some(expr), None, None),
                "cron" => (None, Some(expr), None),
                "at" => (None, None, Some(expr)),
                other => {
                    let problem = format!("{other:?} is not \"every\", \"cron\" or \"at\"");
                    return Err(self.error(format!("{field}.kind"), problem));
                }
            },
            _ => return Err(self.error(field, "give `kind` and `expr` together, or one of `every`, `cron`, `at`")),
        };
        let fields = ScheduleFields {
            every: every.as_deref(),
            cron: cron.as_deref(),
            timezone: raw.timezone.as_deref(),
            at: at.as_deref(),
        };
        fields.schedule(zone).map_err(|error| {
            let name = if error.field == "schedule" { field.to_owned() } else { format!("{field}.{}", error.field) };
            self.error(name, error.problem)
        })
    }

    /// The schedule made to meet its active hours: a daily `every` runs at the window's
    /// opening; one that could miss the window, or a cron that never meets it, is refused.
    fn fit_to_window(
        &self,
        field: &str,
        every_field: &str,
        schedule: Schedule,
        window: Option<&ActiveHours>,
    ) -> Result<Schedule, ConfigError> {
        let from = Timestamp::from_second(WINDOW_CHECK_FROM_UNIX_SECS).unwrap_or(Timestamp::UNIX_EPOCH);
        let in_table = field.ends_with(".schedule");
        let every_field = if in_table { format!("{field}.every") } else { format!("{field}.{every_field}") };
        let schedule =
            fit_every_to_window(schedule, window).map_err(|problem| self.error(every_field.clone(), problem))?;
        let cron_field = if in_table { field.to_owned() } else { format!("{field}.cron") };
        check_cron_meets_window(&schedule, window, from).map_err(|problem| self.error(cron_field, problem))?;
        Ok(schedule)
    }

    fn policy(&self, field: &str, raw: RawPolicy, schedule: &Schedule) -> Result<(RunPolicy, bool), ConfigError> {
        let mut policy = RunPolicy::default();
        if let Some(text) = raw.catch_up {
            policy.catch_up = CatchUp::parse(&text).ok_or_else(|| {
                self.error(format!("{field}.catch_up"), format!("{text:?} is not one of {}", CatchUp::NAMES))
            })?;
        }
        if let Some(text) = raw.catch_up_window {
            let max = Duration::from_secs(CATCHUP_WINDOW_SECS_MAX);
            policy.catch_up_window =
                self.duration(&format!("{field}.catch_up_window"), &text, Duration::from_secs(1), max)?;
        }
        if let Some(text) = raw.overlap {
            policy.overlap = Overlap::parse(&text).ok_or_else(|| {
                self.error(format!("{field}.overlap"), format!("{text:?} is not one of {}", Overlap::NAMES))
            })?;
        }
        if let Some(text) = raw.jitter {
            policy.jitter_max =
                self.duration(&format!("{field}.jitter"), &text, Duration::ZERO, Duration::from_secs(JITTER_SECS_MAX))?;
        }
        let delete_after_run = raw.delete_after_run.unwrap_or(matches!(schedule, Schedule::At(_)));
        Ok((policy, delete_after_run))
    }

    pub(super) fn breaker_cooldown(&self, raw: Option<Vec<String>>) -> Result<Vec<Duration>, ConfigError> {
        let Some(steps) = raw else {
            return Ok(BREAKER_COOLDOWN_SECS_DEFAULT.iter().copied().map(Duration::from_secs).collect());
        };
        if steps.len() > BREAKER_COOLDOWN_STEPS_MAX {
            let problem = format!("has at most {BREAKER_COOLDOWN_STEPS_MAX} steps, like [\"1h\", \"4h\", \"24h\"]");
            return Err(self.error("engine.breaker_cooldown", problem));
        }
        let (min, max) =
            (Duration::from_secs(BREAKER_COOLDOWN_SECS_MIN), Duration::from_secs(BREAKER_COOLDOWN_SECS_MAX));
        steps
            .iter()
            .enumerate()
            .map(|(index, text)| self.duration(&format!("engine.breaker_cooldown[{index}]"), text, min, max))
            .collect()
    }

    pub(super) fn error_backoff(&self, raw: Option<Vec<String>>) -> Result<Vec<Duration>, ConfigError> {
        let Some(steps) = raw else {
            return Ok(ERROR_BACKOFF_SECS_DEFAULT.iter().copied().map(Duration::from_secs).collect());
        };
        if steps.is_empty() || steps.len() > ERROR_BACKOFF_STEPS_MAX {
            let problem = format!("needs from 1 to {ERROR_BACKOFF_STEPS_MAX} steps, like [\"30s\", \"1m\", \"5m\"]");
            return Err(self.error("engine.error_backoff", problem));
        }
        let max = Duration::from_secs(ERROR_BACKOFF_SECS_MAX);
        steps
            .iter()
            .enumerate()
            .map(|(index, text)| self.duration(&format!("engine.error_backoff[{index}]"), text, Duration::ZERO, max))
            .collect()
    }
}
