//! `/v1/agents/{agent}/heartbeats` and `/v1/agents/{agent}/cron`: list, create, show,
//! update, delete, enable, disable, trigger and the run log. Create and update go through
//! the `heartbeat` and `cron` tools' own path, with their guardrails, except that the
//! operator may go below the model's minimum interval. Jobs from the config file are
//! changed in the file (and reloaded), not here: update and delete refuse them.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::agent::tools::scheduled::act_as_operator;
use crate::agent::tools::ToolContext;
use crate::api::error::{ApiError, Body};
use crate::api::status::job_rows;
use crate::api::ApiState;
use crate::core::backfill::{window_slots, BackfillError};
use crate::core::heartbeat::{Heartbeat, JobKind, Origin};
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::daemon::list::execution_json;
use crate::driver::TriggerOutcome;
use crate::limits::{
    API_JOBS_PAGE_DEFAULT, API_JOBS_PAGE_MAX, API_RUNS_PAGE_DEFAULT, API_RUNS_PAGE_MAX, INTERVAL_SECS_MIN,
};

/// Which list a path names.
fn collection(text: &str) -> Result<JobKind, ApiError> {
    match text {
        "heartbeats" => Ok(JobKind::Heartbeat),
        "cron" => Ok(JobKind::Cron),
        other => Err(ApiError::not_found(format!("no route .../{other}; an agent has `heartbeats` and `cron`"))),
    }
}

/// An agent the engine knows: configured, or owning a job in the store.
pub async fn known_agent(state: &ApiState, text: &str) -> Result<AgentId, ApiError> {
    let unknown = || ApiError::not_found(format!("no agent {text:?}"));
    let agent = AgentId::new(text).map_err(|_| unknown())?;
    if state.agents.contains_key(&agent) {
        return Ok(agent);
    }
    if !state.store.jobs_of_agents(Some(&agent)).await?.is_empty() {
        Ok(agent)
    } else {
        Err(unknown())
    }
}

/// The job `id` of `agent` in the list `kind` (the agent heartbeat lists with heartbeats,
/// main-mode jobs with cron).
async fn find(state: &ApiState, agent: &str, kind: JobKind, id: &str) -> Result<Heartbeat, ApiError> {
    let agent = known_agent(state, agent).await?;
    let noun = kind.as_str();
    let missing = || ApiError::not_found(format!("agent {agent} has no {noun} {id:?}"));
    let heartbeat = HeartbeatId::new(id).map_err(|_| missing())?;
    let key = HeartbeatKey { agent: agent.clone(), heartbeat };
    let jobs = state.store.heartbeats(std::slice::from_ref(&key)).await?;
    jobs.into_iter().find(|job| job.def.key == key && job.def.kind.listed_as() == kind).ok_or_else(missing)
}

/// The job as the API shows it, with the driver's view of it.
async fn row(state: &ApiState, job: &Heartbeat, with_prompt: bool) -> Result<Value, ApiError> {
    let mut value = job_rows(state, &[job]).await?.pop().unwrap_or(Value::Null);
    if with_prompt {
        value["prompt"] = json!(job.def.prompt);
        value["timeout_secs"] = json!(job.def.timeout.as_secs());
        value["jitter_secs"] = json!(job.def.policy.jitter_max.as_secs());
        value["delete_after_run"] = json!(job.def.delete_after_run);
        value["dedup"] = json!(job.def.dedup);
    }
    Ok(value)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<String>,
    /// The cursor: jobs whose id comes after this one, as the page before gave it.
    after: Option<String>,
}

/// An agent's jobs of one list, a page at a time by id: at most `limit` of the agent's jobs
/// are read (both lists share the ids), those of this list shown, and `next_cursor` goes
/// in `after` while a page read `limit`. A page may so show fewer than `limit`.
pub async fn list(
    State(state): State<ApiState>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((agent, kind)) = path?;
    let Query(query) = query?;
    let kind = collection(&kind)?;
    let limit = page_limit(query.limit.as_deref())?;
    let after = match query.after.as_deref() {
        None => None,
        Some(text) => Some(HeartbeatId::new(text).map_err(|_| {
            ApiError::invalid("after", format!("{text:?} is not a job's id (as `next_cursor` gives it)"))
        })?),
    };
    let agent = known_agent(&state, &agent).await?;
    let jobs = state.store.heartbeats_of_agent(&agent, after.as_ref(), limit).await?;
    let next_cursor = (jobs.len() == limit).then(|| jobs.last().map(|job| job.def.key.heartbeat.to_string())).flatten();
    let mine: Vec<&Heartbeat> = jobs.iter().filter(|job| job.def.kind.listed_as() == kind).collect();
    Ok(Json(json!({ "items": job_rows(&state, &mine).await?, "next_cursor": next_cursor })))
}

/// A page's `limit` of jobs: [`API_JOBS_PAGE_DEFAULT`] when none is asked, at most
/// [`API_JOBS_PAGE_MAX`].
pub fn page_limit(text: Option<&str>) -> Result<usize, ApiError> {
    match text {
        None => Ok(API_JOBS_PAGE_DEFAULT),
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if (1..=API_JOBS_PAGE_MAX).contains(&limit) => Ok(limit),
            _ => Err(ApiError::invalid("limit", format!("{text:?} is not a number from 1 to {API_JOBS_PAGE_MAX}"))),
        },
    }
}

pub async fn show(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((agent, kind, id)) = path?;
    let job = find(&state, &agent, collection(&kind)?, &id).await?;
    Ok(Json(row(&state, &job, true).await?))
}

/// The tool context an operator's change runs in: the agent's guardrails, but the
/// shortest interval any config may give.
fn operator_context(state: &ApiState, agent: &AgentId) -> Result<ToolContext, ApiError> {
    let mut settings = state.settings(agent).clone();
    settings.model_interval_min = Duration::from_secs(INTERVAL_SECS_MIN);
    let control = state.engine.for_agent(agent)?.control().clone();
    Ok(ToolContext {
        agent: agent.clone(),
        settings: Arc::new(settings),
        control: Arc::new(control),
        operator: true,
        run: None,
    })
}

/// The tool's arguments from a request body: the body's fields, the action and the id.
fn arguments(mut body: Map<String, Value>, action: &str, id: Option<&str>) -> Result<Value, ApiError> {
    if body.contains_key("action") {
        return Err(ApiError::invalid("action", "is given by the route, not the body"));
    }
    if let Some(id) = id {
        if body.contains_key("id") {
            return Err(ApiError::invalid("id", "is given by the route, not the body"));
        }
        body.insert("id".to_owned(), json!(id));
    }
    body.insert("action".to_owned(), json!(action));
    Ok(Value::Object(body))
}

pub async fn create(
    State(state): State<ApiState>,
    path: Result<Path<(String, String)>, PathRejection>,
    Body(body): Body<Map<String, Value>>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Path((agent, kind)) = path?;
    let kind = collection(&kind)?;
    let agent = known_agent(&state, &agent).await?;
    if !state.agents.contains_key(&agent) {
        return Err(ApiError::not_found(format!("agent {agent} is not in the config; add it there first")));
    }
    let id = body.get("id").and_then(Value::as_str).map(str::to_owned);
    act_as_operator(&operator_context(&state, &agent)?, kind, arguments(body, "create", None)?).await?;
    let job = find(&state, agent.as_str(), kind, id.as_deref().unwrap_or_default()).await?;
    Ok((StatusCode::CREATED, Json(row(&state, &job, true).await?)))
}

fn refuse_config_job(job: &Heartbeat, verb: &str) -> Result<(), ApiError> {
    if job.def.origin == Origin::Config {
        let id = job.def.key.heartbeat.as_str();
        return Err(ApiError::conflict(format!(
            "{id:?} comes from the config file; {verb} it there and reload (`POST /v1/reload` or SIGHUP)"
        )));
    }
    Ok(())
}

pub async fn update(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    Body(body): Body<Map<String, Value>>,
) -> Result<Json<Value>, ApiError> {
    let Path((agent, kind, id)) = path?;
    let kind = collection(&kind)?;
    let job = find(&state, &agent, kind, &id).await?;
    refuse_config_job(&job, "change")?;
    let context = operator_context(&state, &job.def.key.agent)?;
    act_as_operator(&context, job.def.kind, arguments(body, "update", Some(&id))?).await?;
    let job = find(&state, &agent, kind, &id).await?;
    Ok(Json(row(&state, &job, true).await?))
}

pub async fn remove(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path((agent, kind, id)) = path?;
    let job = find(&state, &agent, collection(&kind)?, &id).await?;
    refuse_config_job(&job, "remove")?;
    state.engine.for_agent(&job.def.key.agent)?.delete(&job.def.key).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_enabled(
    state: ApiState,
    path: Result<Path<(String, String, String)>, PathRejection>,
    enabled: bool,
) -> Result<Json<Value>, ApiError> {
    let Path((agent, kind, id)) = path?;
    let kind = collection(&kind)?;
    let job = find(&state, &agent, kind, &id).await?;
    state.engine.for_agent(&job.def.key.agent)?.set_enabled(&job.def.key, enabled).await?;
    let job = find(&state, &agent, kind, &id).await?;
    Ok(Json(row(&state, &job, false).await?))
}

/// Enables a job; this also clears a tripped breaker and its failure count.
pub async fn enable(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    set_enabled(state, path, true).await
}

pub async fn disable(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    set_enabled(state, path, false).await
}

/// Runs a job now, once, under a slot of its own (see `TriggerOutcome`). Answers 202: the
/// run's result shows in its run log and on `/v1/events`.
pub async fn trigger(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Path((agent, kind, id)) = path?;
    let job = find(&state, &agent, collection(&kind)?, &id).await?;
    match state.engine.for_agent(&job.def.key.agent)?.trigger(&job.def.key).await? {
        TriggerOutcome::Queued { slot } => Ok((StatusCode::ACCEPTED, Json(json!({ "slot": slot.to_string() })))),
        TriggerOutcome::WakeRequested => Ok((StatusCode::ACCEPTED, Json(json!({ "wake_requested": true })))),
        TriggerOutcome::Backfilling { slots } => {
            let slots: Vec<String> = slots.iter().map(ToString::to_string).collect();
            Ok((StatusCode::ACCEPTED, Json(json!({ "slots": slots }))))
        }
        TriggerOutcome::NotFound => Err(ApiError::not_found(format!("{id:?} was deleted"))),
        TriggerOutcome::Disabled => {
            Err(ApiError::conflict(format!("{id:?} is disabled; enable it first (that also clears a tripped breaker)")))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillBody {
    from: String,
    to: String,
}

/// Runs the slots a past window held that were never decided, oldest first, each under
/// its own slot (like Temporal's backfill); bounded by `BACKFILL_SLOTS_MAX`.
pub async fn backfill(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    Body(body): Body<BackfillBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Path((agent, kind, id)) = path?;
    let time = |field: &str, text: &str| {
        text.parse::<Timestamp>().map_err(|_| ApiError::invalid(field, format!("{text:?} is not an RFC 3339 time")))
    };
    let (from, to) = (time("from", &body.from)?, time("to", &body.to)?);
    let job = find(&state, &agent, collection(&kind)?, &id).await?;
    let slots = window_slots(&job.def.schedule, from, to, state.clock.wall()).map_err(|error| {
        let field = if matches!(error, BackfillError::Future) { "to" } else { "from" };
        ApiError::invalid(field, error)
    })?;
    match state.engine.for_agent(&job.def.key.agent)?.backfill(&job.def.key, slots).await? {
        TriggerOutcome::NotFound => Err(ApiError::not_found(format!("{id:?} was deleted"))),
        TriggerOutcome::Disabled => Err(ApiError::conflict(format!("{id:?} is disabled; enable it first"))),
        // What was queued: slots from the armed one on are the schedule's own.
        TriggerOutcome::Backfilling { slots } => {
            let slots: Vec<String> = slots.iter().map(ToString::to_string).collect();
            Ok((StatusCode::ACCEPTED, Json(json!({ "slots": slots }))))
        }
        TriggerOutcome::Queued { .. } | TriggerOutcome::WakeRequested => {
            Err(ApiError::unavailable("unexpected answer"))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    limit: Option<String>,
    /// The cursor: runs whose slot is before this RFC 3339 time.
    before: Option<String>,
}

/// The run log, newest first, a page at a time: `next_cursor` goes in `before`.
pub async fn runs(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((agent, kind, id)) = path?;
    let Query(query) = query?;
    let limit = match query.limit.as_deref() {
        None => API_RUNS_PAGE_DEFAULT,
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if (1..=API_RUNS_PAGE_MAX).contains(&limit) => limit,
            _ => {
                return Err(ApiError::invalid(
                    "limit",
                    format!("{text:?} is not a number from 1 to {API_RUNS_PAGE_MAX}"),
                ))
            }
        },
    };
    let before = match query.before.as_deref() {
        None => None,
        Some(text) => Some(
            text.parse::<Timestamp>()
                .map_err(|_| ApiError::invalid("before", format!("{text:?} is not an RFC 3339 time")))?,
        ),
    };
    let job = find(&state, &agent, collection(&kind)?, &id).await?;
    let page = state.store.executions_page(&job.def.key, before, limit).await?;
    let next_cursor = (page.len() == limit).then(|| page.last().map(|run| run.slot.to_string())).flatten();
    let items: Vec<Value> = page.iter().map(execution_json).collect();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

/// The transcript of one run: what the model was sent and answered. `latest` names the
/// newest run in the log that has one.
pub async fn transcript(
    State(state): State<ApiState>,
    path: Result<Path<(String, String, String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((agent, kind, id, slot)) = path?;
    let job = find(&state, &agent, collection(&kind)?, &id).await?;
    let key = &job.def.key;
    let slot = if slot == "latest" {
        let page = state.store.executions_page(key, None, API_RUNS_PAGE_MAX).await?;
        let latest = page.iter().find(|run| run.llm_calls > 0).map(|run| run.slot);
        latest.ok_or_else(|| ApiError::not_found(format!("{key} has no run that called the model in its log")))?
    } else {
        slot.parse::<Timestamp>()
            .map_err(|_| ApiError::invalid("slot", format!("{slot:?} is not an RFC 3339 time or `latest`")))?
    };
    let text = state.store.transcript(key, slot).await?.ok_or_else(|| {
        ApiError::not_found(format!("{key} has no transcript for slot {slot} (no such run, no LLM call, or pruned)"))
    })?;
    let mut transcript: Value = serde_json::from_str(&text).map_err(|error| {
        ApiError::unavailable(format!("the stored transcript of {key} slot {slot} is unreadable: {error}"))
    })?;
    transcript["agent"] = json!(key.agent.as_str());
    transcript["id"] = json!(key.heartbeat.as_str());
    transcript["slot"] = json!(slot.to_string());
    Ok(Json(transcript))
}
