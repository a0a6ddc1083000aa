//! `GET /v1/mcp`: the tool servers, their state and tools, and which agents and jobs may
//! use each tool (ADR 0019).

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use crate::api::error::ApiError;
use crate::api::ApiState;
use crate::mcp::report::catalog_json;

pub async fn list(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let jobs: Vec<_> = state.store.load_heartbeats().await?.into_iter().map(|job| job.def).collect();
    Ok(Json(catalog_json(&state.tools.catalog(), &state.agents, &jobs)))
}
