//! The real HTTP adapters against local servers on 127.0.0.1: the OpenAI-compatible
//! client's error mapping and retries (delivery is in `tests/delivery.rs`).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;

use systole::adapters::openai::OpenAiClient;
use systole::adapters::system_clock::SystemClock;
use systole::ports::llm::{ChatRequest, Llm, LlmError, Message};

/// One canned answer: status, extra headers, body.
type Answer = (u16, Vec<(&'static str, &'static str)>, &'static str);

/// A server that answers the n-th request with `answers[n]` (the last one repeats).
#[derive(Clone)]
struct Scripted {
    answers: Arc<Vec<Answer>>,
    requests: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<String>>>,
}

async fn answer(State(server): State<Scripted>, headers: HeaderMap) -> axum::response::Response {
    let index = server.requests.fetch_add(1, Ordering::SeqCst).min(server.answers.len() - 1);
    if let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
        server.keys.lock().expect("lock").push(key.to_owned());
    }
    let (status, extra, body) = server.answers[index].clone();
    let mut response = (StatusCode::from_u16(status).expect("status"), body).into_response();
    for (name, value) in extra {
        response.headers_mut().insert(name, value.parse().expect("header"));
    }
    response
}

async fn serve(answers: Vec<Answer>) -> (Scripted, String) {
    let server = Scripted { answers: Arc::new(answers), requests: Arc::default(), keys: Arc::default() };
    let app = Router::new()
        .route("/v1/chat/completions", post(answer))
        .route("/hook", post(answer))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (server, format!("http://{address}"))
}

fn request() -> ChatRequest {
    ChatRequest { model: None, messages: vec![Message::user("hi")], tools: Vec::new().into() }
}

async fn complete(answer: Answer) -> Result<Option<String>, LlmError> {
    let (_, base) = serve(vec![answer]).await;
    client(&base, 1).complete(request()).await.map(|response| response.text)
}

fn client(base: &str, attempts_max: u32) -> OpenAiClient {
    OpenAiClient::new(&format!("{base}/v1"), "m", None, Duration::from_secs(5), Arc::new(SystemClock::new()))
        .expect("client")
        .with_attempts_max(attempts_max)
}

#[tokio::test]
async fn the_llm_client_maps_each_answer_to_a_clear_result() {
    let ok = r#"{"choices":[{"message":{"role":"assistant","content":"hello"}}]}"#;
    assert_eq!(complete((200, vec![], ok)).await, Ok(Some("hello".to_owned())));
    let empty = r#"{"choices":[{"message":{"role":"assistant","content":null}}]}"#;
    assert_eq!(complete((200, vec![], empty)).await, Ok(None));
    assert_eq!(
        complete((500, vec![], "model exploded")).await,
        Err(LlmError::Status { status: 500, body: "model exploded".into() })
    );
    assert_eq!(
        complete((429, vec![("retry-after", "17")], "slow down")).await,
        Err(LlmError::RateLimited { retry_after_secs: Some(17) })
    );
    assert!(matches!(complete((200, vec![], "not json")).await, Err(LlmError::Malformed(_))));
    assert!(matches!(complete((200, vec![], r#"{"choices":[]}"#)).await, Err(LlmError::Malformed(_))));
}

#[tokio::test]
async fn an_unreachable_llm_is_reported_as_such() {
    // Bind then drop a listener: nothing listens on that port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
    let client = client(&format!("http://127.0.0.1:{port}"), 1);
    match client.complete(request()).await {
        // The root cause stays in the message: refused here, not "error sending request" alone.
        Err(LlmError::Unreachable(text)) => assert!(text.to_lowercase().contains("connection refused"), "{text}"),
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

const OK: &str = r#"{"choices":[{"message":{"role":"assistant","content":"hello"}}]}"#;

#[tokio::test]
async fn the_llm_client_retries_5xx_and_429_within_its_attempts() {
    let (server, base) = serve(vec![(503, vec![], ""), (429, vec![("retry-after", "1")], ""), (200, vec![], OK)]).await;
    let text = client(&base, 3).complete(request()).await.map(|r| r.text);
    assert_eq!(text, Ok(Some("hello".to_owned())));
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);

    let (server, base) = serve(vec![(500, vec![], "down")]).await;
    let result = client(&base, 2).complete(request()).await;
    assert!(matches!(result, Err(LlmError::Status { status: 500, .. })), "{result:?}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 2, "bounded by its attempts");
}

#[tokio::test]
async fn the_llm_client_does_not_wait_out_a_long_retry_after_or_retry_a_4xx() {
    let (server, base) = serve(vec![(429, vec![("retry-after", "3600")], ""), (200, vec![], OK)]).await;
    let result = client(&base, 3).complete(request()).await;
    assert_eq!(result.map(|r| r.text), Err(LlmError::RateLimited { retry_after_secs: Some(3_600) }));
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);

    let (server, base) = serve(vec![(401, vec![], "bad key"), (200, vec![], OK)]).await;
    let result = client(&base, 3).complete(request()).await;
    assert!(matches!(result, Err(LlmError::Status { status: 401, .. })), "{result:?}");
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "an auth error is not retried");
}
