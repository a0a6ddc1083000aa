//! The `heartbeat` tool: lets the model list, create, update, delete, enable and disable
//! its own agent's heartbeats. Accepts Spacebot's argument shape (`interval_secs`,
//! `delivery_target`, `active_start_hour`, `active_end_hour`) and this product's richer
//! fields (`every`, `target`, `active_hours`). Guardrails: a minimum interval, a maximum
//! count per agent, the id alphabet, and only targets the config defines. Every check runs
//! before anything is written, so a refused call changes nothing.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::agent::tools::{Tool, ToolContext, ToolOutcome};
use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::duration::{format_duration, parse_duration};
use crate::core::heartbeat::{Heartbeat, HeartbeatDef, Origin};
use crate::core::ids::{HeartbeatId, HeartbeatKey};
use crate::limits::{INTERVAL_SECS_MAX, PROMPT_CHARS_MAX};
use crate::ports::llm::ToolSpec;

pub struct HeartbeatTool;

pub const HEARTBEAT_TOOL_NAME: &str = "heartbeat";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    action: String,
    id: Option<String>,
    prompt: Option<String>,
    every: Option<String>,
    interval_secs: Option<u64>,
    target: Option<String>,
    delivery_target: Option<String>,
    active_hours: Option<Window>,
    active_start_hour: Option<u8>,
    active_end_hour: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Window {
    start: String,
    end: String,
    timezone: Option<String>,
}

type Refusal = String;

#[async_trait]
impl Tool for HeartbeatTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: HEARTBEAT_TOOL_NAME.to_owned(),
            description: "Manage your scheduled heartbeats: prompts that run on a timer and send what they find to a \
                          target. Actions: list, create, update, delete, enable, disable."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "action": { "type": "string", "enum": ["list", "create", "update", "delete", "enable", "disable"] },
                    "id": { "type": "string", "description": "lowercase letters, digits and '-', at most 64" },
                    "prompt": { "type": "string", "description": "what to do on each run" },
                    "every": { "type": "string", "description": "interval like \"30m\", \"1h\", \"1d\"" },
                    "interval_secs": { "type": "integer", "description": "interval in seconds (instead of every)" },
                    "delivery_target": { "type": "string", "description": "where to send results, like \"webhook:ops\"" },
                    "target": { "type": "string", "description": "same as delivery_target" },
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
            }),
        }
    }

    async fn call(&self, context: &ToolContext, arguments: &serde_json::Value) -> ToolOutcome {
        let arguments: Arguments = match serde_json::from_value(arguments.clone()) {
            Ok(arguments) => arguments,
            Err(error) => return ToolOutcome::error(format!("bad arguments: {error}")),
        };
        match act(context, arguments).await {
            Ok(text) => ToolOutcome::ok(text),
            Err(refusal) => ToolOutcome::error(refusal),
        }
    }
}

async fn act(context: &ToolContext, arguments: Arguments) -> Result<String, Refusal> {
    let mine = own_heartbeats(context).await?;
    match arguments.action.as_str() {
        "list" => Ok(list(&mine)),
        "create" => {
            let key = key(context, arguments.id.as_deref())?;
            if mine.iter().any(|h| h.def.key == key) {
                return Err(format!("a heartbeat {:?} exists already; use action \"update\"", key.heartbeat.as_str()));
            }
            if mine.len() >= context.settings.heartbeats_max {
                return Err(format!(
                    "this agent has {} heartbeats, the most it may have; delete one first",
                    mine.len()
                ));
            }
            let def = build(context, key, &arguments, None)?;
            let summary = describe(&def);
            context.control.upsert(def).await.map_err(|e| format!("not saved: {e}"))?;
            Ok(format!("created {summary}"))
        }
        "update" => {
            let existing = find(context, &mine, arguments.id.as_deref())?;
            let def = build(context, existing.def.key.clone(), &arguments, Some(&existing.def))?;
            let summary = describe(&def);
            context.control.upsert(def).await.map_err(|e| format!("not saved: {e}"))?;
            Ok(format!("updated {summary}"))
        }
        "delete" => {
            let existing = find(context, &mine, arguments.id.as_deref())?;
            context.control.delete(&existing.def.key).await.map_err(|e| format!("not deleted: {e}"))?;
            Ok(format!("deleted {}", existing.def.key.heartbeat))
        }
        action @ ("enable" | "disable") => {
            let existing = find(context, &mine, arguments.id.as_deref())?;
            let enabled = action == "enable";
            context.control.set_enabled(&existing.def.key, enabled).await.map_err(|e| format!("not changed: {e}"))?;
            Ok(format!("{action}d {}", existing.def.key.heartbeat))
        }
        other => Err(format!("unknown action {other:?}; use list, create, update, delete, enable or disable")),
    }
}

async fn own_heartbeats(context: &ToolContext) -> Result<Vec<Heartbeat>, Refusal> {
    let all = context.control.store().load_heartbeats().await.map_err(|e| format!("the store is unavailable: {e}"))?;
    Ok(all.into_iter().filter(|h| h.def.key.agent == context.agent).collect())
}

fn key(context: &ToolContext, id: Option<&str>) -> Result<HeartbeatKey, Refusal> {
    let id = id.ok_or("`id` is required")?;
    let heartbeat = HeartbeatId::new(id).map_err(|e| format!("id {id:?} {e}"))?;
    Ok(HeartbeatKey { agent: context.agent.clone(), heartbeat })
}

fn find(context: &ToolContext, mine: &[Heartbeat], id: Option<&str>) -> Result<Heartbeat, Refusal> {
    let key = key(context, id)?;
    mine.iter()
        .find(|h| h.def.key == key)
        .cloned()
        .ok_or_else(|| format!("there is no heartbeat {:?}; use action \"list\" to see them", key.heartbeat.as_str()))
}

/// A full definition from the arguments, on top of `existing` for an update.
fn build(
    context: &ToolContext,
    key: HeartbeatKey,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<HeartbeatDef, Refusal> {
    let settings = &context.settings;
    let prompt = match (&arguments.prompt, existing) {
        (Some(prompt), _) => prompt.clone(),
        (None, Some(def)) => def.prompt.clone(),
        (None, None) => return Err("`prompt` is required".to_owned()),
    };
    if prompt.trim().is_empty() || prompt.chars().count() > PROMPT_CHARS_MAX {
        return Err(format!("`prompt` must have between 1 and {PROMPT_CHARS_MAX} characters"));
    }
    let interval = match (&arguments.every, arguments.interval_secs, existing) {
        (Some(_), Some(_), _) => return Err("give `every` or `interval_secs`, not both".to_owned()),
        (Some(text), None, _) => parse_duration(text).map_err(|e| format!("`every` {e}"))?,
        (None, Some(secs), _) => Duration::from_secs(secs),
        (None, None, Some(def)) => def.interval,
        (None, None, None) => return Err("`every` (like \"1h\") or `interval_secs` is required".to_owned()),
    };
    if interval < settings.model_interval_min {
        return Err(format!(
            "the interval {} is too short; heartbeats you create must be at least {} apart",
            format_duration(interval),
            format_duration(settings.model_interval_min)
        ));
    }
    if interval > Duration::from_secs(INTERVAL_SECS_MAX) {
        return Err(format!("the interval {} is too long; the most is 366d", format_duration(interval)));
    }
    let target = match (&arguments.target, &arguments.delivery_target, existing) {
        (Some(_), Some(_), _) => return Err("give `target` or `delivery_target`, not both".to_owned()),
        (Some(text), None, _) | (None, Some(text), _) => allowed_target(context, text)?,
        (None, None, Some(def)) => def.target.clone(),
        (None, None, None) => return Err(format!("`delivery_target` is required; one of {}", targets(context))),
    };
    let active_hours = window(context, arguments, existing)?;
    Ok(HeartbeatDef {
        key,
        prompt,
        interval,
        target,
        active_hours,
        timeout: settings.run_timeout,
        origin: Origin::Runtime,
    })
}

fn targets(context: &ToolContext) -> String {
    context.settings.allowed_targets.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
}

fn allowed_target(context: &ToolContext, text: &str) -> Result<DeliveryTarget, Refusal> {
    let target = DeliveryTarget::parse(text).map_err(|e| e.to_string())?;
    if !context.settings.allowed_targets.contains(&target.to_string()) {
        return Err(format!("{text:?} is not a configured target; use one of {}", targets(context)));
    }
    Ok(target)
}

fn window(
    context: &ToolContext,
    arguments: &Arguments,
    existing: Option<&HeartbeatDef>,
) -> Result<Option<ActiveHours>, Refusal> {
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
    format!("{} every {} to {}{window}", def.key.heartbeat, format_duration(def.interval), def.target)
}

fn list(mine: &[Heartbeat]) -> String {
    let rows: Vec<serde_json::Value> = mine
        .iter()
        .map(|h| {
            json!({
                "id": h.def.key.heartbeat.as_str(),
                "prompt": h.def.prompt,
                "every": format_duration(h.def.interval),
                "delivery_target": h.def.target.to_string(),
                "active_hours": h.def.active_hours.as_ref().map(|w| json!({ "start": w.start_text(), "end": w.end_text(), "timezone": w.zone_name() })),
                "enabled": h.state.enabled,
                "origin": h.def.origin.as_str(),
            })
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
}
