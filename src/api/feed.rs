//! `GET /v1/events`: server-sent events of what the engine does, so a client (the status
//! page, `systole events`) can follow it live. `run` events are the engine's run events
//! (one per decided slot); `state` events are changes: a run started, a job armed for a
//! new slot, disarmed, retired or tripped, an agent paused or resumed. On a node of a
//! cluster the feed is the cluster's (`feed_peers`): every event names its `node`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use jiff::Timestamp;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::api::forward::FORWARDED_BY_HEADER;
use crate::api::{feed_peers, ApiState};
use crate::driver::events::{EngineEvent, EventSink};
use crate::driver::run_events::RunEvent;
use crate::limits::RUN_EVENTS_BUFFERED_MAX;

/// Seconds between keep-alive comments, so proxies do not close a quiet stream.
const SSE_KEEP_ALIVE_SECS: u64 = 15;

/// The engine's state changes as JSON, for subscribers.
pub struct EventFeed {
    sender: broadcast::Sender<Value>,
}

impl Default for EventFeed {
    fn default() -> Self {
        let (sender, _) = broadcast::channel(RUN_EVENTS_BUFFERED_MAX);
        Self { sender }
    }
}

impl EventFeed {
    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.sender.subscribe()
    }
}

impl EventSink for EventFeed {
    fn emit(&self, at: Timestamp, event: &EngineEvent) {
        let at = at.to_string();
        let value = match event {
            EngineEvent::RunStarted { key, slot } => json!({
                "type": "run-started", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str(), "slot": slot.to_string()
            }),
            EngineEvent::Armed { key, next_slot } => json!({
                "type": "armed", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str(), "next_slot": next_slot.to_string()
            }),
            EngineEvent::Disarmed { key } => {
                json!({ "type": "disarmed", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str() })
            }
            EngineEvent::Retired { key, deleted } => json!({
                "type": "retired", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str(), "deleted": deleted
            }),
            EngineEvent::BreakerTripped { key, consecutive_failures, probe_at } => json!({
                "type": "breaker-tripped", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str(),
                "consecutive_failures": consecutive_failures, "probe_at": probe_at.map(|t| t.to_string())
            }),
            EngineEvent::BreakerHalfOpen { key } => json!({
                "type": "breaker-half-open", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str()
            }),
            EngineEvent::BreakerClosed { key } => json!({
                "type": "breaker-closed", "at": at, "agent": key.agent.as_str(), "id": key.heartbeat.as_str()
            }),
            EngineEvent::Paused { agent, minutes, until } => json!({
                "type": "paused", "at": at, "agent": agent.as_str(), "minutes": minutes, "until": until.to_string()
            }),
            EngineEvent::Resumed { agent } => json!({ "type": "resumed", "at": at, "agent": agent.as_str() }),
            _ => return,
        };
        // No subscriber is not an error.
        let _ = self.sender.send(value);
    }
}

/// A run event as the stream and the API show it.
pub fn run_event_json(event: &RunEvent) -> Value {
    json!({
        "agent": event.key.agent.as_str(),
        "id": event.key.heartbeat.as_str(),
        "slot": event.slot.to_string(),
        "at": event.at.to_string(),
        "status": event.status.as_str(),
        "reason": event.reason,
        "preview": event.preview,
        "duration_ms": event.duration.as_millis() as u64,
        "indicator": event.indicator.map(|indicator| indicator.as_str()),
    })
}

pub async fn stream(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receivers = (state.engine.run_events().subscribe(), state.feed.subscribe());
    // On a node of a cluster, asked directly: every other owner's feed too, and each event
    // names its node.
    let cluster = state.engine.cluster().cloned();
    let node = cluster.as_ref().map(|route| route.node.clone());
    let peers = match cluster {
        Some(route) if !headers.contains_key(FORWARDED_BY_HEADER) => {
            Some(feed_peers::follow(route, headers.get(AUTHORIZATION).cloned(), Arc::clone(&state.clock)))
        }
        _ => None,
    };
    let events = stream::unfold((receivers, peers), move |((mut runs, mut changes), mut peers)| {
        let node = node.clone();
        async move {
            let named = |mut value: Value| {
                if let (Some(node), Some(object)) = (&node, value.as_object_mut()) {
                    object.insert("node".to_owned(), Value::String(node.clone()));
                }
                value
            };
            let peer = async {
                match peers.as_mut() {
                    Some(peers) => peers.recv().await,
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                run = runs.recv() => match run {
                    Ok(run) => Event::default().event("run").data(named(run_event_json(&run)).to_string()),
                    Err(broadcast::error::RecvError::Lagged(missed)) => lagged(missed),
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                change = changes.recv() => match change {
                    Ok(change) => Event::default().event("state").data(named(change).to_string()),
                    Err(broadcast::error::RecvError::Lagged(missed)) => lagged(missed),
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                Some((kind, value)) = peer => Event::default().event(kind).data(value.to_string()),
            };
            Some((Ok(event), ((runs, changes), peers)))
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(SSE_KEEP_ALIVE_SECS)))
}

/// Told to a subscriber that fell behind: it missed events and should re-read the status.
fn lagged(missed: u64) -> Event {
    Event::default().event("lagged").data(json!({ "missed": missed }).to_string())
}
