//! The CLI names the store its config points at (`Systole-Store`); a daemon serving
//! another store refuses the request before it does anything, naming both, so a CLI run
//! with one config never steers the daemon of another (issue 24). A request without the
//! header (a script, `--url`, the status page) is served as before.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::error::ApiError;
use crate::api::ApiState;

/// The request header a client names the store it expects in.
pub const STORE_HEADER: &str = "systole-store";

pub async fn require_same_store(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let (Some(served), Some(expected)) = (state.store_identity.as_deref(), request.headers().get(STORE_HEADER)) else {
        return next.run(request).await;
    };
    let expected = String::from_utf8_lossy(expected.as_bytes());
    if expected == served {
        return next.run(request).await;
    }
    ApiError::wrong_daemon(format!(
        "this daemon serves {served}, not {expected} (the store your config names); nothing was done"
    ))
    .into_response()
}
