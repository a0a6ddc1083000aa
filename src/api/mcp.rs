//! `GET /v1/mcp`: the tool servers, their state and tools, and which agents and jobs may
//! use each tool (ADR 0019).

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use crate::api::error::ApiError;
use crate::api::ApiState;
use crate::mcp::report::{agents_with_tools, catalog_json};

pub async fn list(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let catalog = state.tools.catalog();
    let mut jobs = Vec::new();
    for agent in agents_with_tools(&catalog, &state.agents) {
        jobs.extend(state.store.heartbeats_of_agent(agent, None, usize::MAX).await?.into_iter().map(|job| job.def));
    }
    Ok(Json(catalog_json(&catalog, &state.agents, &jobs)))
}
