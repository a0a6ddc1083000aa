//! The `heartbeat` and `cron` tools: let the model list, create, update, delete, enable
//! and disable its own agent's heartbeats and cron jobs, and read a job's runs. One
//! implementation serves both; they differ in their list and in delivery (a cron job may
//! be `silent`).
//!
//! Accepts Spacebot's argument shape (`interval_secs`, `delivery_target`,
//! `active_start_hour`, `active_end_hour`), OpenClaw's action names (`add`, `remove`) and
//! this product's fields (`every`, `cron`, `at`, `schedule`, `target`, `active_hours`,
//! policies). Guardrails: a minimum spacing of runs, a maximum count per agent, the id
//! alphabet, and only targets the config defines. Every check runs before anything is
//! written, so a refused call changes nothing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::agent::tools::{Tool, ToolContext, ToolOutcome};
use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::duration::{format_duration, parse_duration};
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, JobKind, Origin};
use crate::core::ids::{HeartbeatId, HeartbeatKey};
use crate::core::policy::{CatchUp, Overlap, RunPolicy};
use crate::core::schedule::Schedule;
use crate::core::schedule_fields::{check_cron_meets_window, fit_every_to_window, ScheduleFields};
use crate::core::tool_check::ToolCheck;
use crate::core::tool_policy::{JobTools, ToolPattern};
use crate::limits::{JITTER_SECS_MAX, PROMPT_CHARS_MAX, TOOL_RUNS_LISTED_MAX};
use crate::ports::llm::ToolSpec;

pub const HEARTBEAT_TOOL_NAME: &str = "heartbeat";
pub const CRON_TOOL_NAME: &str = "cron";

/// Occurrences of a model's cron checked against the minimum spacing.
const SPACING_CHECK_SLOTS: usize = 16;

/// The `heartbeat` tool (`JobKind::Heartbeat`) or the `cron` tool (`JobKind::Cron`).
pub struct ScheduledTool {
    pub kind: JobKind,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    action: String,
    id: Option<String>,
    prompt: Option<String>,
    every: Option<String>,
    interval_secs: Option<u64>,
    cron: Option<String>,
    timezone: Option<String>,
    at: Option<String>,
    schedule: Option<ScheduleArgument>,
    target: Option<String>,
    delivery_target: Option<String>,
    delivery: Option<String>,
    active_hours: Option<Window>,
    active_start_hour: Option<u8>,
    active_end_hour: Option<u8>,
    catch_up: Option<String>,
    overlap: Option<String>,
    jitter: Option<String>,
    delete_after_run: Option<bool>,
    /// Narrows the agent's tools for this job (`server/tool`, `server/*`).
    tools: Option<Vec<String>>,
    /// Tools the job's runs cannot do without.
    required_tools: Option<Vec<String>>,
    /// Tools that may write, opted into: an operator's call only, never the model's.
    write_tools: Option<Vec<String>>,
    /// The zero-token pre-check: a tool called before the model (`""` removes it).
    check_tool: Option<String>,
    /// The check's arguments, an object.
    check_arguments: Option<serde_json::Value>,
    /// The model the job's runs ask for (`""` goes back to the agent's or the engine's):
    /// an operator's call only, so a model never moves its own job to a dearer model.
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleArgument {
    every: Option<String>,
    cron: Option<String>,
    timezone: Option<String>,
    at: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Window {
    start: String,
    end: String,
    timezone: Option<String>,
}

/// Why a call was refused; the API maps the kind to its status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such job.
    NotFound(String),
    /// The id is taken, or the agent has as many jobs as it may.
    Conflict(String),
    /// The arguments are wrong; the text names the field.
    Invalid(String),
    /// The store or the engine did not answer.
    Unavailable(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::NotFound(text) | Refusal::Conflict(text) | Refusal::Invalid(text) | Refusal::Unavailable(text) => {
                text
            }
        }
    }
}

impl From<String> for Refusal {
    fn from(text: String) -> Self {
        Refusal::Invalid(text)
    }
}

impl From<&str> for Refusal {
    fn from(text: &str) -> Self {
        Refusal::Invalid(text.to_owned())
    }
}

#[async_trait]
impl Tool for ScheduledTool {
    fn spec(&self) -> ToolSpec {
        let (name, description) = match self.kind.listed_as() {
            JobKind::Heartbeat | JobKind::Agent => (
                HEARTBEAT_TOOL_NAME,
                "Manage your scheduled heartbeats: prompts that run on a schedule and send what they find to a \
                 target. Actions: list, create, update, delete, enable, disable, runs.",
            ),
            JobKind::Cron | JobKind::CronMain => (
                CRON_TOOL_NAME,
                "Manage your cron jobs: prompts that run at calendar times (cron expression in a time zone), \
                 every interval, or once at a time, each in a fresh run. Actions: list, create (add), update, \
                 delete (remove), enable, disable, runs.",
            ),
        };
        ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters: Arc::new(json!({
                "type": "object",
                "properties": {
                    "action": { "type": "string", "enum": ["list", "create", "add", "update", "delete", "remove", "enable", "disable", "runs"] },
                    "id": { "type": "string", "description": "lowercase letters, digits and '-', at most 64" },
                    "prompt": { "type": "string", "description": "what to do on each run" },
                    "every": { "type": "string", "description": "interval like \"30m\", \"1h\", \"1d\"" },
                    "interval_secs": { "type": "integer", "description": "interval in seconds (instead of every)" },
                    "cron": { "type": "string", "description": "cron expression like \"0 9 * * 1-5\" (5 fields, or 6 with seconds)" },
                    "timezone": { "type": "string", "description": "IANA zone of cron or at, like Asia/Shanghai" },
                    "at": { "type": "string", "description": "run once at this time, RFC 3339 like 2026-12-01T14:00:00+08:00" },
                    "delivery_target": { "type": "string", "description": "where to send results, like \"webhook:ops\"" },
                    "target": { "type": "string", "description": "same as delivery_target" },
                    "delivery": { "type": "string", "enum": ["announce", "silent"], "description": "cron jobs: silent keeps replies in the run log" },
                    "catch_up": { "type": "string", "enum": ["skip", "once", "all"] },
                    "overlap": { "type": "string", "enum": ["skip", "buffer_one", "allow_all"] },
                    "jitter": { "type": "string", "description": "spread runs by a stable offset up to this, like \"5m\"" },
                    "delete_after_run": { "type": "boolean", "description": "delete once its last run succeeded (default for at)" },
                    "tools": { "type": "array", "items": { "type": "string" }, "description": "the tools its runs may use, within yours, like [\"inbox/search\"] or [\"inbox/*\"]" },
                    "required_tools": { "type": "array", "items": { "type": "string" }, "description": "tools its runs cannot do without; a run fails if one is unavailable" },
                    "check_tool": { "type": "string", "description": "a tool called before each run, like \"inbox/unread\"; an empty, [], 0 or false answer skips the run without asking you (\"\" removes it)" },
                    "check_arguments": { "type": "object", "description": "the arguments of check_tool" },
                    "active_start_hour": { "type": "integer", "minimum": 0, "maximum": 23 },
                    "active_end_hour": { "type": "integer", "minimum": 0, "maximum": 24 },
                    "active_hours": {
                        "type": "object",
                        "properties": {
                            "start": { "type": "string", "description": "HH:MM" },
                            "end": { "type": "string", "description": "HH:MM, may be 24:00" },
                            "timezone": { "type": "string", "description": "IANA zone like Europe/Berlin" }
                        },
                        "required": ["start", "end"]
                    }
                },
                "required": ["action"]
            })),
        }
    }

    async fn call(&self, context: &ToolContext, arguments: &serde_json::Value) -> ToolOutcome {
        let arguments: Arguments = match serde_json::from_value(arguments.clone()) {
            Ok(arguments) => arguments,
            Err(error) => return ToolOutcome::error(format!("bad arguments: {error}")),
        };
        match act(context, self.kind, arguments).await {
            Ok(text) => ToolOutcome::ok(text),
            Err(refusal) => ToolOutcome::error(refusal.message()),
        }
    }
}

/// What the operator API does with a job: the tool's own path, with the tool's
/// guardrails (the caller sets the minimum interval in `context.settings`). `arguments`
/// is the tool's argument object, `action` included.
///
/// # Errors
/// The refusal, when nothing was changed.
pub async fn act_as_operator(
    context: &ToolContext,
    kind: JobKind,
    arguments: serde_json::Value,
) -> Result<String, Refusal> {
    let arguments: Arguments = serde_path_to_error::deserialize(arguments).map_err(|error| {
        let path = error.path().to_string();
        Refusal::Invalid(if path == "." { error.inner().to_string() } else { format!("`{path}`: {}", error.inner()) })
    })?;
    act(context, kind, arguments).await
}

async fn act(context: &ToolContext, kind: JobKind, arguments: Arguments) -> Result<String, Refusal> {
    let all_mine = own_definitions(context).await?;
    let mine: Vec<Heartbeat> = all_mine.iter().filter(|h| h.def.kind == kind).cloned().collect();
    let noun = kind.as_str();
    match arguments.action.as_str() {
        "list" => Ok(list(&mine)),
        "create" | "add" => {
            let key = key(context, arguments.id.as_deref())?;
            if let Some(existing) = all_mine.iter().find(|h| h.def.key == key) {
                let what = existing.def.kind.as_str();
                let id = key.heartbeat.as_str();
                return Err(Refusal::Conflict(format!("a {what} {id:?} exists already; use action \"update\"")));
            }
            if all_mine.len() >= context.settings.heartbeats_max {
                return Err(Refusal::Conflict(format!(
                    "this agent has {} heartbeats and cron jobs, the most it may have; delete one first",
                    all_mine.len()
                )));
            }
            let def = build(context, kind, key, &arguments, None)?;
            let summary = describe(&def);
            context.control.upsert(def).await.map_err(|e| Refusal::Unavailable(format!("not saved: {e}")))?;
            Ok(format!("created {summary}"))
        }
        "update" => {
            let existing = find(context, noun, &mine, arguments.id.as_deref())?;
            let def = build(context, kind, existing.def.key.clone(), &arguments, Some(&existing.def))?;
            let summary = describe(&def);
            context.control.upsert(def).await.map_err(|e| Refusal::Unavailable(format!("not saved: {e}")))?;
            Ok(format!("updated {summary}"))
        }
        "delete" | "remove" => {
            let existing = find(context, noun, &mine, arguments.id.as_deref())?;
            context
                .control
                .delete(&existing.def.key)
                .await
                .map_err(|e| Refusal::Unavailable(format!("not deleted: {e}")))?;
            Ok(format!("deleted {}", existing.def.key.heartbeat))
        }
        action @ ("enable" | "disable") => {
            let existing = find(context, noun, &mine, arguments.id.as_deref())?;
            let enabled = action == "enable";
            context
                .control
                .set_enabled(&existing.def.key, enabled)
                .await
                .map_err(|e| Refusal::Unavailable(format!("not changed: {e}")))?;
            Ok(format!("{action}d {}", existing.def.key.heartbeat))
        }
        "runs" => {
            let existing = find(context, noun, &mine, arguments.id.as_deref())?;
            let runs = context
                .control
                .store()
                .executions(&existing.def.key, TOOL_RUNS_LISTED_MAX)
                .await
                .map_err(|e| Refusal::Unavailable(format!("the store is unavailable: {e}")))?;
            let rows: Vec<serde_json::Value> = runs
                .iter()
                .map(|run| {
                    json!({
                        "slot": run.slot.to_string(),
                        "status": run.status.as_str(),
                        "skip_reason": run.skip_reason.map(|reason| reason.as_str()),
                        "error": run.error,
                        "output_preview": run.output_preview,
                    })
                })
                .collect();
            Ok(serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned()))
        }
        other => {
            Err(format!("unknown action {other:?}; use list, create, update, delete, enable, disable or runs").into())
        }
    }
}

async fn own_definitions(context: &ToolContext) -> Result<Vec<Heartbeat>, Refusal> {
    context
        .control
        .store()
        .heartbeats_of_agent(&context.agent, None, usize::MAX)
        .await
        .map_err(|e| Refusal::Unavailable(format!("the store is unavailable: {e}")))
}

fn key(context: &ToolContext, id: Option<&str>) -> Result<HeartbeatKey, String> {
    let id = id.ok_or("`id` is required")?;
    let heartbeat = HeartbeatId::new(id).map_err(|e| format!("id {id:?} {e}"))?;
    if heartbeat.is_reserved() {
        return Err(format!("id {id:?} is reserved for the agent heartbeat (HEARTBEAT.md); choose another"));
    }
    Ok(HeartbeatKey { agent: context.agent.clone(), heartbeat })
}

fn find(context: &ToolContext, noun: &str, mine: &[Heartbeat], id: Option<&str>) -> Result<Heartbeat, Refusal> {
    let key = key(context, id)?;
    mine.iter().find(|h| h.def.key == key).cloned().ok_or_else(|| {
        Refusal::NotFound(format!("there is no {noun} {:?}; use action \"list\" to see them", key.heartbeat.as_str()))
    })
}

/// A full definition from the arguments, on top of `existing` for an update.
fn build(
    context: &ToolContext,
    kind: JobKind,
    key: HeartbeatKey,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<HeartbeatDef, String> {
    let settings = &context.settings;
    let prompt = match (&arguments.prompt, existing) {
        (Some(prompt), _) => prompt.as_str().into(),
        (None, Some(def)) => def.prompt.clone(),
        (None, None) => return Err("`prompt` is required".to_owned()),
    };
    if prompt.trim().is_empty() || prompt.chars().count() > PROMPT_CHARS_MAX {
        return Err(format!("`prompt` must have between 1 and {PROMPT_CHARS_MAX} characters"));
    }
    crate::core::text::refuse_nul(&prompt).map_err(|problem| format!("`prompt` {problem}"))?;
    let schedule = schedule(context, arguments, existing)?;
    check_spacing(&schedule, settings.model_interval_min, context.control.clock().wall())?;
    let target = target(context, kind, arguments, existing)?;
    let active_hours = window(context, arguments, existing)?;
    let schedule =
        fit_every_to_window(schedule, active_hours.as_ref()).map_err(|problem| format!("`every`: {problem}"))?;
    check_cron_meets_window(&schedule, active_hours.as_ref(), context.control.clock().wall())
        .map_err(|problem| format!("`cron`: {problem}"))?;
    let policy = policy(arguments, existing.map(|def| def.policy))?;
    let delete_after_run = match (arguments.delete_after_run, existing) {
        (Some(delete), _) => delete,
        (None, Some(def)) if def.schedule.kind() == schedule.kind() => def.delete_after_run,
        (None, _) => matches!(schedule, Schedule::At(_)),
    };
    Ok(HeartbeatDef {
        key,
        kind,
        prompt,
        schedule,
        policy,
        delete_after_run,
        dedup: existing.is_none_or(|def| def.dedup),
        target,
        active_hours,
        timeout: existing.map_or(settings.run_timeout, |def| def.timeout),
        origin: Origin::Runtime,
        tools: job_tools(context, kind, arguments, existing)?.into(),
        model: job_model(context, arguments, existing)?,
    })
}

/// The job's model: the one given (an operator's call only), else the existing job's.
fn job_model(
    context: &ToolContext,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<Option<String>, String> {
    let Some(model) = &arguments.model else { return Ok(existing.and_then(|def| def.model.clone())) };
    if !context.operator {
        return Err("`model`: only an operator may choose the model a job's runs use".to_owned());
    }
    if model.is_empty() {
        return Ok(None);
    }
    match crate::core::text::model_name_problem(model) {
        Some(problem) => Err(format!("`model` {problem}")),
        None => Ok(Some(model.clone())),
    }
}

/// The job's tool fields: each one given in the arguments, else the existing job's, all
/// within the agent's list. Only an operator may opt a job into tools that may write; a
/// model never can.
fn job_tools(
    context: &ToolContext,
    kind: JobKind,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<JobTools, String> {
    if arguments.write_tools.is_some() && !context.operator {
        return Err("`write_tools`: only an operator may opt a job into tools that may write".to_owned());
    }
    let kept = existing.map(|def| def.tools.clone()).unwrap_or_default();
    let texts = |patterns: &[ToolPattern]| patterns.iter().map(ToString::to_string).collect::<Vec<_>>();
    let allow = arguments.tools.clone().or_else(|| kept.allow.as_deref().map(texts));
    let write = arguments.write_tools.clone().unwrap_or_else(|| texts(&kept.write));
    let required =
        arguments.required_tools.clone().unwrap_or_else(|| kept.required.iter().map(ToString::to_string).collect());
    let named = |(field, problem): (&str, String)| format!("`{field}`: {problem}");
    let tools = JobTools::from_fields(allow.as_deref(), Some(&write), Some(&required), &context.settings.tools)
        .map_err(named)?;
    let check = match (&arguments.check_tool, &arguments.check_arguments) {
        (Some(tool), _) if tool.is_empty() => None,
        (Some(tool), given) => {
            let kept_arguments = kept.check.as_ref().filter(|check| check.tool.to_string() == *tool);
            let arguments = given.clone().or_else(|| kept_arguments.map(|check| check.arguments.clone().into()));
            Some(ToolCheck::from_fields(tool, arguments).map_err(named)?)
        }
        (None, Some(given)) => match &kept.check {
            Some(check) => Some(ToolCheck::from_fields(&check.tool.to_string(), Some(given.clone())).map_err(named)?),
            None => return Err("`check_arguments`: needs `check_tool`".to_owned()),
        },
        (None, None) => kept.check.clone(),
    };
    if check.is_some() && kind == JobKind::CronMain {
        return Err("`check_tool`: a main-mode job makes no run of its own to check for".to_owned());
    }
    tools.with_check(check, &context.settings.tools).map_err(named)
}

fn schedule(context: &ToolContext, arguments: &Arguments, existing: Option<&HeartbeatDef>) -> Result<Schedule, String> {
    let nested = arguments.schedule.as_ref();
    let flat_given = arguments.every.is_some()
        || arguments.interval_secs.is_some()
        || arguments.cron.is_some()
        || arguments.at.is_some()
        || arguments.timezone.is_some();
    if nested.is_some() && flat_given {
        return Err("give `schedule` or the flat `every`/`cron`/`at` fields, not both".to_owned());
    }
    if arguments.every.is_some() && arguments.interval_secs.is_some() {
        return Err("give `every` or `interval_secs`, not both".to_owned());
    }
    let interval_text = arguments.interval_secs.map(|secs| format!("{secs}s"));
    let fields = match nested {
        Some(nested) => ScheduleFields {
            every: nested.every.as_deref(),
            cron: nested.cron.as_deref(),
            timezone: nested.timezone.as_deref(),
            at: nested.at.as_deref(),
        },
        None => ScheduleFields {
            every: arguments.every.as_deref().or(interval_text.as_deref()),
            cron: arguments.cron.as_deref(),
            timezone: arguments.timezone.as_deref(),
            at: arguments.at.as_deref(),
        },
    };
    match existing {
        Some(def) if fields.is_empty() && fields.timezone.is_none() => Ok(def.schedule.clone()),
        _ => {
            fields.schedule(&context.settings.timezone).map_err(|error| format!("`{}`: {}", error.field, error.problem))
        }
    }
}

/// Runs a model creates must be at least `minimum` apart, whatever the schedule kind.
fn check_spacing(schedule: &Schedule, minimum: Duration, now: jiff::Timestamp) -> Result<(), String> {
    let too_close = |gap: Duration| {
        format!(
            "runs {} apart is too short an interval; heartbeats and jobs you create must run at least {} apart",
            format_duration(gap),
            format_duration(minimum)
        )
    };
    match schedule {
        Schedule::Every(interval) if *interval < minimum => Err(too_close(*interval)),
        Schedule::Cron(_) => {
            let mut previous = schedule.next_after(now);
            for _ in 0..SPACING_CHECK_SLOTS {
                let (Some(slot), Some(next)) = (previous, previous.and_then(|slot| schedule.next_after(slot))) else {
                    break;
                };
                let gap = next.duration_since(slot).unsigned_abs();
                if gap < minimum {
                    return Err(too_close(gap));
                }
                previous = Some(next);
            }
            Ok(())
        }
        Schedule::Every(_) | Schedule::At(_) => Ok(()),
    }
}

fn targets(context: &ToolContext) -> String {
    context.settings.allowed_targets.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
}

fn target(
    context: &ToolContext,
    kind: JobKind,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<DeliveryTarget, String> {
    let is_cron = kind.listed_as() == JobKind::Cron;
    let silent = match (is_cron, arguments.delivery.as_deref()) {
        (_, None) => false,
        (true, Some("silent")) => true,
        (true, Some("announce")) => false,
        (false, Some(_)) => return Err("`delivery` applies to cron jobs only".to_owned()),
        (true, Some(other)) => return Err(format!("`delivery` {other:?} is not \"announce\" or \"silent\"")),
    };
    let given = match (&arguments.target, &arguments.delivery_target) {
        (Some(_), Some(_)) => return Err("give `target` or `delivery_target`, not both".to_owned()),
        (Some(text), None) | (None, Some(text)) => Some(text),
        (None, None) => None,
    };
    let target = match (given, existing) {
        _ if silent => DeliveryTarget::silent(),
        (Some(text), _) => allowed_target(context, text)?,
        (None, Some(def)) => def.target.clone(),
        (None, None) if is_cron => DeliveryTarget::silent(),
        (None, None) => return Err(format!("`delivery_target` is required; one of {}", targets(context))),
    };
    if arguments.delivery.as_deref() == Some("announce") && target.is_silent() {
        return Err(format!("`delivery` \"announce\" needs a `target`; one of {}", targets(context)));
    }
    Ok(target)
}

fn allowed_target(context: &ToolContext, text: &str) -> Result<DeliveryTarget, String> {
    let target = DeliveryTarget::parse(text).map_err(|e| e.to_string())?;
    if !target.is_silent() && !context.settings.allowed_targets.contains(&target.to_string()) {
        return Err(format!("{text:?} is not a configured target; use one of {}", targets(context)));
    }
    Ok(target)
}

fn policy(arguments: &Arguments, existing: Option<RunPolicy>) -> Result<RunPolicy, String> {
    let mut policy = existing.unwrap_or_default();
    if let Some(text) = &arguments.catch_up {
        policy.catch_up =
            CatchUp::parse(text).ok_or_else(|| format!("`catch_up` {text:?} is not one of {}", CatchUp::NAMES))?;
    }
    if let Some(text) = &arguments.overlap {
        policy.overlap =
            Overlap::parse(text).ok_or_else(|| format!("`overlap` {text:?} is not one of {}", Overlap::NAMES))?;
    }
    if let Some(text) = &arguments.jitter {
        let jitter = parse_duration(text).map_err(|e| format!("`jitter` {e}"))?;
        if jitter > Duration::from_secs(JITTER_SECS_MAX) {
            return Err(format!("`jitter` {text:?} is too long; the most is {JITTER_SECS_MAX}s"));
        }
        policy.jitter_max = jitter;
    }
    Ok(policy)
}

fn window(
    context: &ToolContext,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<Option<ActiveHours>, String> {
    let zone = &context.settings.timezone;
    match (&arguments.active_hours, arguments.active_start_hour, arguments.active_end_hour) {
        (Some(window), None, None) => {
            let zone = window.timezone.as_deref().unwrap_or(zone);
            ActiveHours::new(&window.start, &window.end, zone).map(Some).map_err(|e| format!("`active_hours`: {e}"))
        }
        (None, Some(start), Some(end)) => {
            ActiveHours::from_hours(start, end, zone).map(Some).map_err(|e| format!("active hours {start}-{end}: {e}"))
        }
        (None, None, None) => Ok(existing.and_then(|def| def.active_hours.clone())),
        (None, _, _) => Err("give both `active_start_hour` and `active_end_hour`".to_owned()),
        (Some(_), _, _) => Err("give `active_hours` or the start/end hours, not both".to_owned()),
    }
}

fn describe(def: &HeartbeatDef) -> String {
    let window = def
        .active_hours
        .as_ref()
        .map(|w| format!(", active {}-{} {}", w.start_text(), w.end_text(), w.zone_name()))
        .unwrap_or_default();
    format!("{} {} to {}{window}", def.key.heartbeat, def.schedule, def.target)
}

fn list(mine: &[Heartbeat]) -> String {
    let rows: Vec<serde_json::Value> = mine
        .iter()
        .map(|h| {
            json!({
                "id": h.def.key.heartbeat.as_str(),
                "prompt": h.def.prompt,
                "schedule": h.def.schedule.to_string(),
                "delivery_target": h.def.target.to_string(),
                "active_hours": h.def.active_hours.as_ref().map(|w| json!({ "start": w.start_text(), "end": w.end_text(), "timezone": w.zone_name() })),
                "catch_up": h.def.policy.catch_up.as_str(),
                "overlap": h.def.policy.overlap.as_str(),
                "enabled": h.state.enabled,
                "disabled_reason": h.state.disabled_reason,
                "next_slot": h.state.next_slot.map(|slot| slot.to_string()),
                "origin": h.def.origin.as_str(),
            })
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
}
