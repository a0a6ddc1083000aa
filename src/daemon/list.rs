//! `systole heartbeat list|runs` and `systole cron list|runs`: read the store, also while
//! the daemon runs (SQLite in WAL mode lets readers in beside the writer).

use serde_json::{json, Value};

use crate::adapters::system_clock::SystemClock;
use crate::core::duration::format_duration;
use crate::core::heartbeat::{Heartbeat, JobKind};
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::usage::format_micros;
use crate::daemon::config::Config;
use crate::daemon::remote::local_time;
use crate::daemon::DaemonError;
use crate::ports::clock::Clock;
use crate::ports::store::{Execution, ExecutionStatus, Store};
use crate::ports::telemetry;
use jiff::tz::TimeZone;

/// One heartbeat as `heartbeat list --json` prints it.
pub fn heartbeat_json(heartbeat: &Heartbeat, last: Option<&Execution>) -> Value {
    let def = &heartbeat.def;
    let window = def
        .active_hours
        .as_ref()
        .map(|w| json!({ "start": w.start_text(), "end": w.end_text(), "timezone": w.zone_name() }));
    json!({
        "id": def.key.heartbeat.as_str(),
        "agent": def.key.agent.as_str(),
        "enabled": heartbeat.state.enabled,
        "disabled_reason": heartbeat.state.disabled_reason,
        "consecutive_failures": heartbeat.state.consecutive_failures,
        "kind": def.kind.as_str(),
        "schedule": def.schedule.to_string(),
        "every": def.schedule.interval().map(format_duration),
        "catch_up": def.policy.catch_up.as_str(),
        "overlap": def.policy.overlap.as_str(),
        "target": def.target.to_string(),
        "active_hours": window,
        "origin": def.origin.as_str(),
        // `null`: the agent heartbeat's model, else the engine's.
        "model": def.model,
        // The zero-token pre-check, if any (ADR 0021).
        "check": def.tools.check.as_ref().map(|check| json!({ "tool": check.tool.to_string(), "arguments": check.arguments })),
        "next_run_at": heartbeat.state.enabled.then_some(heartbeat.state.next_slot).flatten().map(|t| t.to_string()),
        "last_status": last.map(|e| e.status.as_str()),
        "last_reply": last.and_then(|e| e.reply).map(|r| r.as_str()),
        "last_skip_reason": last.and_then(|e| e.skip_reason).map(|r| r.as_str()),
        "last_slot": last.map(|e| e.slot.to_string()),
    })
}

/// One execution as `heartbeat runs --json` prints it.
pub fn execution_json(execution: &Execution) -> Value {
    json!({
        "agent": execution.key.agent.as_str(),
        "heartbeat": execution.key.heartbeat.as_str(),
        "scheduled_for": execution.slot.to_string(),
        // An operator's trigger, not the schedule's slot (runs only; a skip row says false).
        "triggered": execution.triggered,
        "started_at": execution.started_at.to_string(),
        "finished_at": execution.finished_at.map(|t| t.to_string()),
        "status": execution.status.as_str(),
        "skip_reason": execution.skip_reason.map(|r| r.as_str()),
        "delivery": execution.delivery.map(|d| d.as_str()),
        "duration_ms": execution.duration.map(|d| d.as_millis() as u64),
        "error": execution.error,
        "output_preview": execution.output_preview,
        "stop_reason": execution.stop_reason.map(|r| r.as_str()),
        "reply": execution.reply.map(|r| r.as_str()),
        // The id its trace has when `[telemetry]` exports traces (derived from the slot).
        "trace_id": (execution.status != ExecutionStatus::Skipped)
            .then(|| telemetry::hex(&telemetry::trace_id(&execution.key, execution.slot))),
        // The tools the run had and every call it made (`null`: it had none).
        "tools": execution.tool_use,
        // What its completions reported, silent runs included; cost by `[llm.prices]`.
        "llm_calls": execution.llm_calls,
        "tokens": execution.usage.tokens,
        "cost_micros": execution.usage.cost_micros,
        "cost": format_micros(execution.usage.cost_micros),
        "unpriced_calls": execution.usage.unpriced_calls,
    })
}

/// Prints every heartbeat (or every cron job), of one agent if given, as a table (times in
/// each agent's zone, with the offset) or as a JSON array.
///
/// # Errors
/// When the store cannot be read, or the agent is unknown.
pub async fn list(
    store: &dyn Store,
    kind: JobKind,
    agent: Option<&str>,
    config: &Config,
    as_json: bool,
) -> Result<String, DaemonError> {
    let mut heartbeats = store.load_heartbeats().await?;
    heartbeats.retain(|heartbeat| heartbeat.def.kind.listed_as() == kind);
    if let Some(agent) = agent {
        let known = AgentId::new(agent).is_ok_and(|id| config.agents.contains_key(&id))
            || heartbeats.iter().any(|h| h.def.key.agent.as_str() == agent);
        if !known {
            return Err(DaemonError::Usage(format!("no agent {agent:?} in {} or its store", config.file.display())));
        }
        heartbeats.retain(|heartbeat| heartbeat.def.key.agent.as_str() == agent);
    }
    let now = SystemClock::new().wall();
    let pauses = store.load_pauses().await?;
    let paused_until = |agent: &AgentId| pauses.iter().find(|(a, p)| a == agent && p.until > now).map(|(_, p)| p.until);
    let mut rows = Vec::with_capacity(heartbeats.len());
    for heartbeat in &heartbeats {
        let last = store.executions(&heartbeat.def.key, 1).await?;
        let mut row = heartbeat_json(heartbeat, last.first());
        row["paused_until"] = json!(paused_until(&heartbeat.def.key.agent).map(|until| until.to_string()));
        rows.push(row);
    }
    if as_json {
        let mut text = serde_json::to_string_pretty(&rows).unwrap_or_else(|_| "[]".to_owned());
        text.push('\n');
        return Ok(text);
    }
    let mut out = format!(
        "{:<12} {:<20} {:<30} {:<8} {:<6} {:<26} {}\n",
        "AGENT", "ID", "SCHEDULE", "ENABLED", "FAILS", "NEXT RUN", "LAST"
    );
    for (row, heartbeat) in rows.iter().zip(&heartbeats) {
        let text = |key: &str| row[key].as_str().unwrap_or("-").to_owned();
        let last = match (row["last_status"].as_str(), row["last_skip_reason"].as_str()) {
            (Some(status), Some(reason)) => format!("{status} ({reason})"),
            (Some(status), None) => status.to_owned(),
            _ => "-".to_owned(),
        };
        let enabled = match (row["enabled"].as_bool(), row["disabled_reason"].as_str()) {
            (Some(true), _) if row["paused_until"].is_string() => "paused".to_owned(),
            (Some(true), _) => "yes".to_owned(),
            (_, Some(reason)) => format!("no: {reason}"),
            _ => "no".to_owned(),
        };
        let settings = config.agents.get(&heartbeat.def.key.agent).unwrap_or(&config.agent_default);
        let zone = TimeZone::get(&settings.timezone).unwrap_or(TimeZone::UTC);
        let next = heartbeat
            .state
            .next_slot
            .filter(|_| heartbeat.state.enabled)
            .map_or("-".to_owned(), |at| local_time(at, &zone));
        out.push_str(&format!(
            "{:<12} {:<20} {:<30} {:<8} {:<6} {:<26} {}\n",
            text("agent"),
            text("id"),
            text("schedule"),
            enabled,
            row["consecutive_failures"].to_string(),
            next,
            last
        ));
    }
    Ok(out)
}

/// Finds the heartbeat (or cron job) `id`, in `agent` if given, else in whichever single
/// agent has it.
///
/// # Errors
/// When no heartbeat, or more than one, matches.
pub async fn resolve(
    store: &dyn Store,
    kind: JobKind,
    agent: Option<&str>,
    id: &str,
) -> Result<HeartbeatKey, DaemonError> {
    let noun = kind.as_str();
    let heartbeat = HeartbeatId::new(id).map_err(|e| DaemonError::Usage(format!("heartbeat id {id:?} {e}")))?;
    let agent = match agent {
        Some(agent) => Some(AgentId::new(agent).map_err(|e| DaemonError::Usage(format!("agent id {agent:?} {e}")))?),
        None => None,
    };
    let matches: Vec<HeartbeatKey> = store
        .load_heartbeats()
        .await?
        .into_iter()
        .filter(|h| h.def.kind.listed_as() == kind && h.def.key.heartbeat == heartbeat)
        .filter(|h| agent.as_ref().is_none_or(|agent| h.def.key.agent == *agent))
        .map(|h| h.def.key)
        .collect();
    match matches.as_slice() {
        [key] => Ok(key.clone()),
        [] => Err(DaemonError::Usage(match agent {
            Some(agent) => format!("agent {agent} has no {noun} {id:?} in the store"),
            None => format!("no {noun} {id:?} in the store"),
        })),
        _ => Err(DaemonError::Usage(format!("several agents have a {noun} {id:?}; pass --agent"))),
    }
}

/// Prints the newest executions of one heartbeat.
///
/// # Errors
/// When the store cannot be read.
pub async fn runs(store: &dyn Store, key: &HeartbeatKey, limit: usize, as_json: bool) -> Result<String, DaemonError> {
    let executions = store.executions(key, limit).await?;
    let rows: Vec<Value> = executions.iter().map(execution_json).collect();
    if as_json {
        let mut text = serde_json::to_string_pretty(&rows).unwrap_or_else(|_| "[]".to_owned());
        text.push('\n');
        return Ok(text);
    }
    let mut out = format!(
        "{:<26} {:<12} {:<11} {:<9} {:<16} {:>8} {:>9} {:>10}  {}\n",
        "SCHEDULED FOR", "STATUS", "DELIVERY", "REPLY", "STOP", "MS", "TOKENS", "COST", "DETAIL"
    );
    for execution in &executions {
        let detail = execution
            .skip_reason
            .map(|r| r.as_str().to_owned())
            .or_else(|| execution.error.clone())
            .or_else(|| execution.output_preview.clone())
            .unwrap_or_default();
        let detail = match &execution.tool_use {
            Some(tools) if !tools.calls.is_empty() => {
                let calls: Vec<String> =
                    tools.calls.iter().map(|call| format!("{} {}", call.tool, call.outcome.as_str())).collect();
                format!("[tools: {}] {detail}", calls.join(", "))
            }
            _ => detail,
        };
        let (tokens, cost) = if execution.llm_calls == 0 {
            ("-".to_owned(), "-".to_owned())
        } else {
            (execution.usage.tokens.total().to_string(), format_micros(execution.usage.cost_micros))
        };
        out.push_str(&format!(
            "{:<26} {:<12} {:<11} {:<9} {:<16} {:>8} {:>9} {:>10}  {}\n",
            execution.slot.to_string(),
            execution.status.as_str(),
            execution.delivery.map_or("-", |d| d.as_str()),
            execution.reply.map_or("-", |r| r.as_str()),
            execution.stop_reason.map_or("-", |r| r.as_str()),
            execution.duration.map_or("-".to_owned(), |d| d.as_millis().to_string()),
            tokens,
            cost,
            detail.replace('\n', " ")
        ));
    }
    Ok(out)
}

/// Runs searched for the newest one that called the model (`--transcript latest`).
const TRANSCRIPT_SEARCH_RUNS_MAX: usize = 500;

/// Prints one run's transcript: each message with its role, tool calls and results.
///
/// # Errors
/// When the slot is not a time, the run has no transcript, or the store cannot be read.
pub async fn transcript(
    store: &dyn Store,
    key: &HeartbeatKey,
    slot: &str,
    as_json: bool,
) -> Result<String, DaemonError> {
    let slot = if slot == "latest" {
        let runs = store.executions(key, TRANSCRIPT_SEARCH_RUNS_MAX).await?;
        let latest = runs.iter().find(|run| run.llm_calls > 0).map(|run| run.slot);
        latest.ok_or_else(|| DaemonError::Usage(format!("{key} has no run that called the model in its log")))?
    } else {
        slot.parse::<jiff::Timestamp>()
            .map_err(|_| DaemonError::Usage(format!("--transcript: {slot:?} is not an RFC 3339 time or `latest`")))?
    };
    let text = store.transcript(key, slot).await?.ok_or_else(|| {
        DaemonError::Usage(format!("{key} has no transcript for slot {slot} (no such run, no LLM call, or pruned)"))
    })?;
    if as_json {
        return Ok(format!("{text}\n"));
    }
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let mut out = format!("transcript of {key}, slot {slot}\n");
    for message in value["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or("?");
        let answering = message["tool_call_id"].as_str().map(|id| format!(" (answers {id})")).unwrap_or_default();
        out.push_str(&format!("\n--- {role}{answering}\n"));
        if let Some(content) = message["content"].as_str().filter(|content| !content.is_empty()) {
            out.push_str(content);
            out.push('\n');
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "[calls {} ({}) with {}]\n",
                call["name"].as_str().unwrap_or("?"),
                call["id"].as_str().unwrap_or("?"),
                call["arguments"].as_str().unwrap_or("")
            ));
        }
    }
    if let Some(cut) = value["cut"].as_str() {
        out.push_str(&format!("\n[{cut}]\n"));
    }
    Ok(out)
}
