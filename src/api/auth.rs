//! The bearer token check. The comparison takes the same time wherever the first
//! difference is, so the token cannot be guessed a byte at a time.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::error::ApiError;
use crate::api::ApiState;

pub async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let Some(token) = state.token.as_deref() else { return next.run(request).await };
    // Health, and the page itself (it reads everything it shows with the token).
    if matches!(request.uri().path(), "/healthz" | "/") {
        return next.run(request).await;
    }
    let given = request.headers().get(AUTHORIZATION).and_then(|value| value.to_str().ok());
    match given.and_then(|value| value.strip_prefix("Bearer ")) {
        Some(given) if same(given.trim().as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => ApiError::unauthorized("the bearer token is wrong").into_response(),
        None => ApiError::unauthorized("send `Authorization: Bearer <token>` (the daemon's SYSTOLE_API_TOKEN)")
            .into_response(),
    }
}

/// Constant-time equality of two byte strings (their lengths aside).
fn same(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given.iter().zip(expected).fold(0u8, |difference, (a, b)| difference | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn equal_only_when_every_byte_is() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secreT", b"secret"));
        assert!(!same(b"secret!", b"secret"));
        assert!(!same(b"", b"secret"));
    }
}
