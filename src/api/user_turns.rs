//! `POST /v1/agents/{agent}/user-turns` and `DELETE .../user-turns/{id}`: a client
//! talking to the agent holds its lane, so the agent heartbeat does not run beside the
//! conversation. A turn ends when its client says so, or by itself after its timeout,
//! so a client that crashed cannot hold the lane for good.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::error::{ApiError, Body};
use crate::api::jobs::known_agent;
use crate::api::ApiState;
use crate::core::ids::AgentId;
use crate::core::slots::add;
use crate::driver::lanes::UserTurn;
use crate::limits::{USER_TURN_SECS_DEFAULT, USER_TURN_SECS_MAX};

/// The user turns begun over the API and not yet ended.
#[derive(Default)]
pub struct UserTurns {
    turns: Mutex<BTreeMap<u64, (AgentId, UserTurn)>>,
    next_id: AtomicU64,
}

impl UserTurns {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (AgentId, UserTurn)>> {
        self.turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the turn (dropping it gives the lane back). Returns whether it was held.
    fn end(&self, id: u64, agent: &AgentId) -> bool {
        let mut turns = self.lock();
        if turns.get(&id).is_some_and(|(owner, _)| owner == agent) {
            turns.remove(&id);
            return true;
        }
        false
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginBody {
    timeout_secs: Option<u64>,
}

/// Begins a turn once the agent heartbeat that is running (if any) has finished.
pub async fn begin(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    Body(body): Body<BeginBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Path(agent) = path?;
    let agent = known_agent(&state, &agent).await?;
    let timeout_secs = body.timeout_secs.unwrap_or(USER_TURN_SECS_DEFAULT);
    if !(1..=USER_TURN_SECS_MAX).contains(&timeout_secs) {
        return Err(ApiError::invalid(
            "timeout_secs",
            format!("{timeout_secs} is out of range; from 1 to {USER_TURN_SECS_MAX}"),
        ));
    }
    // On a node of a cluster the lane that holds the agent's heartbeat is its owner's.
    state.engine.for_agent(&agent)?;
    let turn = state.engine.lanes().begin_user_turn(&agent).await;
    let id = state.user_turns.next_id.fetch_add(1, Ordering::Relaxed) + 1;
    state.user_turns.lock().insert(id, (agent.clone(), turn));
    let timeout = Duration::from_secs(timeout_secs);
    let expires_at = add(state.clock.wall(), timeout);
    let (turns, clock, owner) = (Arc::clone(&state.user_turns), Arc::clone(&state.clock), agent.clone());
    tokio::spawn(async move {
        clock.sleep(timeout).await;
        if turns.end(id, &owner) {
            tracing::warn!(agent = %owner, turn = id, "user turn timed out; its client never ended it");
        }
    });
    let body = json!({ "id": id.to_string(), "agent": agent.as_str(), "expires_at": expires_at.to_string() });
    Ok((StatusCode::CREATED, Json(body)))
}

pub async fn end(
    State(state): State<ApiState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path((agent, id)) = path?;
    let agent = known_agent(&state, &agent).await?;
    let missing = || ApiError::not_found(format!("agent {agent} has no user turn {id:?} (ended, or timed out)"));
    let number: u64 = id.parse().map_err(|_| missing())?;
    if state.user_turns.end(number, &agent) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(missing())
    }
}
