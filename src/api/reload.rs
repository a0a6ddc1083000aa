//! `POST /v1/reload` (and SIGHUP, through the same [`Reloader`]): re-read the config file.
//! The daemon implements the reloader; the API only asks it.

use async_trait::async_trait;
use axum::extract::State;
use axum::Json;
use serde_json::Value;

use crate::api::error::ApiError;
use crate::api::ApiState;

/// Why a reload changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadError {
    /// The file does not validate: the same error start-up would give.
    Invalid(String),
    /// The store or the engine did not answer.
    Unavailable(String),
}

#[async_trait]
pub trait Reloader: Send + Sync + 'static {
    /// Re-reads the config and applies what can change while running; says what it did.
    async fn reload(&self) -> Result<Value, ReloadError>;
}

pub async fn reload(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let Some(reloader) = &state.reloader else {
        return Err(ApiError::conflict("this engine has no config file to reload"));
    };
    match reloader.reload().await {
        Ok(report) => Ok(Json(report)),
        Err(ReloadError::Invalid(message)) => Err(ApiError {
            status: axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid",
            message: format!("the config was not reloaded; nothing changed: {message}"),
        }),
        Err(ReloadError::Unavailable(message)) => Err(ApiError::unavailable(message)),
    }
}
