//! `/v1/agents`: list and show agents (pause, today's spending against the caps, last run event), pause and
//! resume their timed heartbeats, wake the agent heartbeat, and queue system events.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::error::{ApiError, Body};
use crate::api::feed::run_event_json;
use crate::api::forward;
use crate::api::jobs::known_agent;
use crate::api::spend::{self, Today};
use crate::api::status::PauseView;
use crate::api::ApiState;
use crate::core::heartbeat::JobKind;
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::system_events::exec_event_text;
use crate::core::wake::WakeReason;
use crate::limits::{PAUSE_MINUTES_MIN, SYSTEM_EVENT_CHARS_MAX};
use crate::ports::store::{AgentJobs, Queued};

/// What the agents' rows share, read once a request: a list of a thousand agents reads
/// the store's heartbeats and the engine's views once, not once an agent (0.6 s for 100
/// agents of 30 jobs under saturation when it did, stop 87).
struct Seen {
    pauses: PauseView,
    /// Each agent's jobs: how many, and whether one is its agent heartbeat.
    jobs: BTreeMap<AgentId, AgentJobs>,
    /// Each agent heartbeat's flood guard: when it opens, `None` while open.
    flood_guards: BTreeMap<AgentId, Option<jiff::Timestamp>>,
}

impl Seen {
    /// For every agent (`only` none) or for one: the store's count of its jobs, not its
    /// rows (a million rows for the list's few fields), and the views of the agent
    /// heartbeats alone.
    async fn load(state: &ApiState, only: Option<&AgentId>) -> Result<Self, ApiError> {
        let pauses = PauseView::load(state).await?;
        let jobs = state.store.jobs_of_agents(only).await?;
        let agent_heartbeats: Vec<HeartbeatKey> = jobs
            .iter()
            .filter(|(_, counted)| counted.has_agent_heartbeat)
            .map(|(agent, _)| HeartbeatKey::agent_heartbeat(agent))
            .collect();
        let flood_guards = state
            .engine
            .inspect_keys(&agent_heartbeats)
            .await?
            .into_iter()
            .filter(|view| view.kind == JobKind::Agent)
            .map(|view| (view.key.agent, view.flood_guard_opens))
            .collect();
        Ok(Self { pauses, jobs, flood_guards })
    }
}

fn agent_json(state: &ApiState, agent: &AgentId, seen: &Seen, today: Today) -> Value {
    let settings = state.settings(agent);
    let AgentJobs { count: jobs, has_agent_heartbeat } = seen.jobs.get(agent).copied().unwrap_or_default();
    let flood_guard = seen.flood_guards.get(agent).map(|opens| match opens {
        Some(opens) => json!({ "open": false, "opens_at": opens.to_string() }),
        None => json!({ "open": true }),
    });
    json!({
        "id": agent.as_str(),
        "configured": state.agents.contains_key(agent),
        "timezone": settings.timezone,
        "paused_until": seen.pauses.until(agent).map(|until| until.to_string()),
        "jobs": jobs,
        "has_agent_heartbeat": has_agent_heartbeat,
        "flood_guard": flood_guard,
        "budget": today.agent,
        "last_event": state.engine.run_events().last(agent).map(|event| run_event_json(&event)),
    })
}

pub async fn list(State(state): State<ApiState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let seen = Seen::load(&state, None).await?;
    let mut agents: BTreeSet<AgentId> = state.agents.keys().cloned().collect();
    agents.extend(seen.jobs.keys().cloned());
    let mut spending = spend::today_of_each(&state, &agents).await?;
    let mut items = Vec::new();
    for agent in &agents {
        let Some(today) = spending.remove(agent) else { continue };
        items.push(agent_json(&state, agent, &seen, today));
    }
    // On a node of a cluster asked directly: each agent as its owner sees it.
    if let Some(route) = state.engine.cluster().filter(|_| !forward::forwarded(&headers)) {
        let (answers, _) = forward::gather(route, &headers, "/v1/agents").await;
        forward::merge_rows(route, &mut items, &answers, "items");
    }
    Ok(Json(json!({ "items": items })))
}

pub async fn show(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(agent) = path?;
    let agent = known_agent(&state, &agent).await?;
    let seen = Seen::load(&state, Some(&agent)).await?;
    let today = spend::today(&state, &agent).await?;
    Ok(Json(agent_json(&state, &agent, &seen, today)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    minutes: u32,
}

/// Pauses the agent's timed heartbeats, as its `pause_heartbeats` tool would, within the
/// same limits.
pub async fn pause(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    Body(body): Body<PauseBody>,
) -> Result<Json<Value>, ApiError> {
    let Path(agent) = path?;
    let agent = known_agent(&state, &agent).await?;
    let max = state.settings(&agent).pause_minutes_max;
    if !(PAUSE_MINUTES_MIN..=max).contains(&body.minutes) {
        return Err(ApiError::invalid(
            "minutes",
            format!("{} is out of range; from {PAUSE_MINUTES_MIN} to {max}", body.minutes),
        ));
    }
    let pause = state.engine.for_agent(&agent)?.pause(&agent, body.minutes).await?;
    Ok(Json(json!({ "agent": agent.as_str(), "paused_until": pause.record.until.to_string() })))
}

pub async fn resume(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(agent) = path?;
    let agent = known_agent(&state, &agent).await?;
    let was_paused = state.engine.for_agent(&agent)?.resume(&agent).await?;
    Ok(Json(json!({ "agent": agent.as_str(), "was_paused": was_paused })))
}

/// Refuses an agent without an agent heartbeat: nothing would read its events or wake.
async fn require_agent_heartbeat(state: &ApiState, agent: &AgentId) -> Result<(), ApiError> {
    let own = state.store.heartbeats(&[HeartbeatKey::agent_heartbeat(agent)]).await?;
    if own.iter().any(|job| job.def.kind == JobKind::Agent) {
        Ok(())
    } else {
        Err(ApiError::conflict(format!(
            "agent {agent} has no agent heartbeat (give it a `workspace` with a HEARTBEAT.md in the config)"
        )))
    }
}

fn event_text(text: &str) -> Result<&str, ApiError> {
    let length = text.chars().count();
    if text.trim().is_empty() || length > SYSTEM_EVENT_CHARS_MAX {
        return Err(ApiError::invalid("text", format!("must have between 1 and {SYSTEM_EVENT_CHARS_MAX} characters")));
    }
    crate::core::text::refuse_nul(text).map_err(|problem| ApiError::invalid("text", problem))?;
    Ok(text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeBody {
    /// `manual`, `hook:NAME` or `exec-event`.
    reason: Option<String>,
    /// Queued as a system event the woken run reads.
    text: Option<String>,
}

/// Wakes the agent heartbeat now (merged with other requests and held by its flood guard).
pub async fn wake(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    Body(body): Body<WakeBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Path(agent) = path?;
    let agent = known_agent(&state, &agent).await?;
    let reason = match body.reason.as_deref().unwrap_or("manual") {
        "manual" => WakeReason::Manual,
        "exec-event" => WakeReason::ExecEvent,
        hook if hook.strip_prefix("hook:").is_some_and(|name| !name.trim().is_empty()) => WakeReason::Hook,
        other => {
            return Err(ApiError::invalid(
                "reason",
                format!("{other:?} is not \"manual\", \"hook:NAME\" or \"exec-event\""),
            ))
        }
    };
    let text = body.text.as_deref().map(event_text).transpose()?;
    require_agent_heartbeat(&state, &agent).await?;
    // An exec event's text is the command's result: the woken run gets the spec's
    // exec-event prompt for it.
    let text = text.map(|text| if reason == WakeReason::ExecEvent { exec_event_text(text) } else { text.to_owned() });
    let queued = match text {
        Some(text) => Some(state.engine.for_agent(&agent)?.queue_system_event(&agent, &text).await?),
        None => None,
    };
    state.engine.for_agent(&agent)?.request_now(&agent, reason).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "agent": agent.as_str(), "reason": reason.as_str(), "event": queued_json(queued) })),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventBody {
    text: String,
    /// `next-heartbeat` (default): read on the agent heartbeat's next run; `now`: wake it.
    mode: Option<String>,
}

/// Queues a system event for the agent heartbeat (OpenClaw's `system event`).
pub async fn system_event(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    Body(body): Body<EventBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Path(agent) = path?;
    let agent = known_agent(&state, &agent).await?;
    let now = match body.mode.as_deref().unwrap_or("next-heartbeat") {
        "now" => true,
        "next-heartbeat" => false,
        other => return Err(ApiError::invalid("mode", format!("{other:?} is not \"now\" or \"next-heartbeat\""))),
    };
    let text = event_text(&body.text)?;
    require_agent_heartbeat(&state, &agent).await?;
    let queued = state.engine.for_agent(&agent)?.queue_system_event(&agent, text).await?;
    if now {
        state.engine.for_agent(&agent)?.request_now(&agent, WakeReason::Manual).await?;
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "agent": agent.as_str(), "event": queued_json(Some(queued)), "woken": now })),
    ))
}

fn queued_json(queued: Option<Queued>) -> Value {
    match queued {
        None => Value::Null,
        Some(Queued::Added { id, dropped }) => json!({ "id": id, "dropped": dropped }),
        Some(Queued::Duplicate) => json!({ "duplicate": true }),
    }
}
