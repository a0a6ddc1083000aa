//! `POST /v1/reload` (and SIGHUP, through the same [`Reloader`]): re-read the config file.
//! The daemon implements the reloader; the API only asks it.
//!
//! On a node of a cluster a reload reaches every node (ADR 0024): the node asked checks
//! that every other node's file holds the same heartbeats (`?check=DIGEST`), then reloads
//! and has each of them reload, so either every node applies the file or none does.

use async_trait::async_trait;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use crate::api::error::ApiError;
use crate::api::forward;
use crate::api::ApiState;

/// Why a reload changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadError {
    /// The file does not validate: the same error start-up would give.
    Invalid(String),
    /// The store or the engine did not answer.
    Unavailable(String),
    /// On a node of a cluster: another node's file holds other heartbeats, or it did not
    /// answer; nothing changed anywhere.
    Disagrees(String),
}

/// Who asks for a reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadCall {
    /// An operator (the API, SIGHUP): on a node of a cluster, every node reloads.
    Operator,
    /// Another node of the cluster, which reloads with heartbeats of this digest: this node
    /// only checks that its own file holds the same (`check_only`), or reloads its part.
    Node { digest: String, check_only: bool },
}

#[async_trait]
pub trait Reloader: Send + Sync + 'static {
    /// Re-reads the config and applies what can change while running; says what it did.
    async fn reload(&self, call: ReloadCall) -> Result<Value, ReloadError>;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReloadQuery {
    /// Set by a node of a cluster: the digest of the heartbeats it reloads.
    digest: Option<String>,
    /// Set with `digest`: only check, change nothing.
    check: Option<bool>,
}

pub async fn reload(
    State(state): State<ApiState>,
    headers: HeaderMap,
    query: Result<Query<ReloadQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|rejection| ApiError::malformed(rejection.body_text()))?;
    let Some(reloader) = &state.reloader else {
        return Err(ApiError::conflict("this engine has no config file to reload"));
    };
    let call = match (forward::forwarded(&headers), query.digest) {
        (true, Some(digest)) => ReloadCall::Node { digest, check_only: query.check.unwrap_or(false) },
        (false, None) if query.check.is_none() => ReloadCall::Operator,
        _ => return Err(ApiError::invalid("digest", "is only for the nodes of a cluster, with systole-forwarded-by")),
    };
    match reloader.reload(call).await {
        Ok(report) => Ok(Json(report)),
        Err(ReloadError::Invalid(message)) => Err(ApiError {
            status: axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid",
            message: format!("the config was not reloaded; nothing changed: {message}"),
        }),
        Err(ReloadError::Unavailable(message)) => Err(ApiError::unavailable(message)),
        Err(ReloadError::Disagrees(message)) => Err(ApiError {
            status: axum::http::StatusCode::CONFLICT,
            code: "nodes-disagree",
            message: format!("the config was not reloaded; nothing changed: {message}"),
        }),
    }
}
