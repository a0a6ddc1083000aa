//! The API's errors: `{"error": {"code", "message"}}` with the status that says whose
//! fault it is. Bad input is never a 500, and a refused request has changed nothing.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::agent::tools::scheduled::Refusal;
use crate::driver::EngineError;
use crate::ports::store::StoreError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    /// The body is not JSON, or not an object.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, code: "malformed", message: message.into() }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self { status: StatusCode::UNAUTHORIZED, code: "unauthorized", message: message.into() }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self { status: StatusCode::NOT_FOUND, code: "not-found", message: message.into() }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self { status: StatusCode::CONFLICT, code: "conflict", message: message.into() }
    }

    /// Well-formed, but a value is refused: `field` names it.
    pub fn invalid(field: &str, problem: impl std::fmt::Display) -> Self {
        Self { status: StatusCode::UNPROCESSABLE_ENTITY, code: "invalid", message: format!("{field}: {problem}") }
    }

    /// The request named a store this daemon does not serve (`Systole-Store`).
    pub fn wrong_daemon(message: impl Into<String>) -> Self {
        Self { status: StatusCode::CONFLICT, code: "wrong-daemon", message: message.into() }
    }

    /// On a node of a cluster: the agent's owner cannot be asked from here.
    pub fn not_owner(message: impl Into<String>) -> Self {
        Self { status: StatusCode::CONFLICT, code: "not-owner", message: message.into() }
    }

    /// On a node of a cluster: the call was sent to the agent's owner, which did not answer.
    pub fn owner_unreachable(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_GATEWAY, code: "owner-unreachable", message: message.into() }
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self { status: StatusCode::PAYLOAD_TOO_LARGE, code: "too-large", message: message.into() }
    }

    /// The store or the engine did not answer: not the caller's fault, and worth a retry.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self { status: StatusCode::SERVICE_UNAVAILABLE, code: "unavailable", message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": { "code": self.code, "message": self.message } }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            // Bad input that slipped past a handler's own check is still bad input.
            StoreError::Refused { field, problem } => ApiError::invalid(&field, problem),
            // A node of a cluster that has just lost the agent's partition: nothing was done.
            StoreError::Fenced { .. } => {
                ApiError::not_owner(format!("{error}; nothing was done: ask again, and the agent's owner answers"))
            }
            _ => ApiError::unavailable(format!("the store did not answer: {error}")),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            // A client that asked the wrong node of a cluster: retry where the message says.
            EngineError::NotOwner { .. } => {
                Self { status: StatusCode::CONFLICT, code: "not-owner", message: error.to_string() }
            }
            EngineError::Store(store) => store.into(),
            _ => ApiError::unavailable(error.to_string()),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound(text) => ApiError::not_found(text),
            Refusal::Conflict(text) => ApiError::conflict(text),
            Refusal::Invalid(text) => Self { status: StatusCode::UNPROCESSABLE_ENTITY, code: "invalid", message: text },
            Refusal::Unavailable(text) => ApiError::unavailable(text),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::not_found(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self { status: StatusCode::UNPROCESSABLE_ENTITY, code: "invalid", message: rejection.body_text() }
    }
}

/// A JSON object body: 400 when it is not JSON or not an object, 422 naming the field
/// when a value does not fit `T`. An empty body reads as `{}`.
pub struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state).await.map_err(|rejection| ApiError {
            status: rejection.status(),
            code: "malformed",
            message: rejection.body_text(),
        })?;
        let value: serde_json::Value = if bytes.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(&bytes)
                .map_err(|error| ApiError::malformed(format!("the body is not JSON: {error}")))?
        };
        if !value.is_object() {
            return Err(ApiError::malformed("the body must be a JSON object"));
        }
        serde_path_to_error::deserialize(value).map(Body).map_err(|error| {
            let path = error.path().to_string();
            let field = if path == "." { "body".to_owned() } else { path };
            ApiError::invalid(&field, error.inner())
        })
    }
}
