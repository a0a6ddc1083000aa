//! The daemon saturated, for `tests/saturation.rs` and the scale benchmark's saturation
//! row: a local model that holds each request `MODEL_SECS` and counts how many it holds at
//! once, and a config of heartbeats due every second with the default runs in flight.
#![allow(dead_code)] // each user takes what it needs

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// How long the model takes to answer: each run holds its place this long.
pub const MODEL_SECS: u64 = 2;
/// The grace a stop gives the runs that began (`[engine] shutdown_grace`).
pub const SHUTDOWN_GRACE_SECS: u64 = 10;

/// The model's view: how many requests it holds now and held at most, and how many came.
#[derive(Default)]
pub struct SlowModel {
    pub in_flight: AtomicUsize,
    pub in_flight_max: AtomicUsize,
    pub requests: AtomicUsize,
}

impl SlowModel {
    /// The model, served on a free port of 127.0.0.1 (OpenAI's chat completions).
    pub async fn serve() -> (Arc<Self>, SocketAddr) {
        let model = Arc::new(Self::default());
        let app = Router::new().route("/v1/chat/completions", post(chat)).with_state(Arc::clone(&model));
        (model, crate::daemon_process::serve_loopback(app).await)
    }
}

async fn chat(State(model): State<Arc<SlowModel>>, Json(_body): Json<Value>) -> Json<Value> {
    model.requests.fetch_add(1, Ordering::SeqCst);
    let now = model.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    model.in_flight_max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(MODEL_SECS)).await;
    model.in_flight.fetch_sub(1, Ordering::SeqCst);
    let message = json!({ "role": "assistant", "content": "HEARTBEAT_OK" });
    Json(json!({ "choices": [{ "index": 0, "message": message, "finish_reason": "stop" }] }))
}

/// Pauses `agent` for half an hour through the API at `url`: how long the answer took, and
/// the wall time in milliseconds once it came (the daemon stamps its runs with the same
/// system clock).
pub async fn pause(http: &reqwest::Client, url: &str, token: &str, agent: &str) -> (Duration, i64) {
    let started = std::time::Instant::now();
    let response = http
        .post(format!("{url}/v1/agents/{agent}/pause"))
        .bearer_auth(token)
        .json(&json!({ "minutes": 30 }))
        .send()
        .await
        .expect("the API answers");
    assert!(response.status().is_success(), "pause: {}", response.status());
    let took = started.elapsed();
    let paused_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX));
    (took, paused_at_ms)
}

/// `agents` agents (`a0`, `a1`, ...) of `per_agent` heartbeats each, due every second, on
/// the model at `model`, with the default runs in flight and a `SHUTDOWN_GRACE_SECS` grace.
pub fn config(model: SocketAddr, agents: usize, per_agent: usize) -> String {
    let mut config = format!(
        "[api]\nlisten = \"127.0.0.1:0\"\n[store]\npath = \"state.db\"\n\
         [llm]\nbase_url = \"http://{model}/v1\"\nmodel = \"m\"\nattempts = 1\ntimeout = \"30s\"\n\
         [engine]\nshutdown_grace = \"{SHUTDOWN_GRACE_SECS}s\"\nrun_timeout = \"30s\"\n"
    );
    for agent in 0..agents {
        config.push_str(&format!("[[agents]]\nid = \"a{agent}\"\n"));
        for heartbeat in 0..per_agent {
            config.push_str(&format!(
                "[[agents.heartbeats]]\nid = \"h{heartbeat}\"\nprompt = \"check for agent a{agent}.\"\n\
                 every = \"1s\"\ntarget = \"stdout\"\n"
            ));
        }
    }
    config
}

/// Rows of the run log in the daemon's SQLite file at `path` that match `condition`.
pub async fn count_rows(path: &std::path::Path, condition: &str) -> i64 {
    use sqlx::Connection;
    let url = format!("sqlite://{}?mode=ro", path.display());
    let mut connection = sqlx::SqliteConnection::connect(&url).await.expect("open the store");
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM executions WHERE {condition}"))
        .fetch_one(&mut connection)
        .await
        .expect("count rows")
}
