//! On a node of a cluster, `GET /v1/events` follows every other owner's feed too (ADR
//! 0024): an operator watching one node sees the runs of the whole cluster, each event
//! naming the node it happened on. A peer's feed is asked with `Systole-Forwarded-By`, so
//! it streams only its own events and follows nobody else; the set of owners is read again
//! every few seconds, so a node that takes partitions over is followed from then on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderValue;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::api::forward::{FORWARDED_BY_HEADER, FORWARD_CONNECT_TIMEOUT_MS};
use crate::cluster::engines::ClusterRoute;
use crate::cluster::reload::other_owners;
use crate::limits::RUN_EVENTS_BUFFERED_MAX;
use crate::ports::clock::Clock;

/// How often the set of nodes followed is read again from the lease table.
pub const FEED_PEERS_REFRESH_SECS: u64 = 5;
/// The largest event taken from a peer's stream; a peer that sends more is dropped.
pub const FEED_PEER_EVENT_BYTES_MAX: usize = 1024 * 1024;

/// One event of a peer's feed: its kind (`run`, `state`, `lagged`) and its data, with
/// `node` set to the peer's name.
pub type PeerEvent = (String, Value);

/// Follows every other owner's feed until the receiver is dropped.
pub fn follow(
    route: ClusterRoute,
    authorization: Option<HeaderValue>,
    clock: Arc<dyn Clock>,
) -> mpsc::Receiver<PeerEvent> {
    let (sender, receiver) = mpsc::channel(RUN_EVENTS_BUFFERED_MAX);
    tokio::spawn(async move {
        let mut followed: BTreeMap<String, JoinHandle<()>> = BTreeMap::new();
        loop {
            // A feed that ended (its node stopped, lost its partitions) is asked again.
            followed.retain(|_, task| !task.is_finished());
            for (node, url) in other_owners(&route) {
                if let std::collections::btree_map::Entry::Vacant(entry) = followed.entry(node.clone()) {
                    let follower = follow_one(node, url, route.node.clone(), authorization.clone(), sender.clone());
                    entry.insert(tokio::spawn(follower));
                }
            }
            tokio::select! {
                () = sender.closed() => break,
                () = clock.sleep(Duration::from_secs(FEED_PEERS_REFRESH_SECS)) => {}
            }
        }
        for task in followed.values() {
            task.abort();
        }
    });
    receiver
}

/// A client without a total timeout: a feed is a stream that lasts.
fn stream_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS))
            .user_agent(crate::ports::http::USER_AGENT)
            .build()
            .unwrap_or_default()
    })
}

/// Reads `node`'s feed at `url` into `sender` until either side ends.
async fn follow_one(
    node: String,
    url: String,
    from: String,
    authorization: Option<HeaderValue>,
    sender: mpsc::Sender<PeerEvent>,
) {
    let mut request = stream_client().get(format!("{url}/v1/events")).header(FORWARDED_BY_HEADER, from);
    if let Some(value) = &authorization {
        request = request.header(AUTHORIZATION.as_str(), value.as_bytes());
    }
    let response = tokio::select! {
        () = sender.closed() => return,
        response = request.send() => response,
    };
    let Ok(response) = response else { return };
    if !response.status().is_success() {
        tracing::warn!(%node, status = %response.status(), "a node of the cluster refused its event feed");
        return;
    }
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            () = sender.closed() => return,
            chunk = body.next() => chunk,
        };
        let Some(Ok(chunk)) = chunk else { return };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|pair| pair == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            if let Some(event) = parse_event(&String::from_utf8_lossy(&block), &node) {
                if sender.send(event).await.is_err() {
                    return;
                }
            }
        }
        if buffer.len() > FEED_PEER_EVENT_BYTES_MAX {
            tracing::warn!(%node, "an event of a node's feed was too large; the feed is dropped");
            return;
        }
    }
}

/// One server-sent event (`event:` and `data:` lines; comments are keep-alives), its data
/// a JSON object that gains `node`.
fn parse_event(block: &str, node: &str) -> Option<PeerEvent> {
    let mut kind = "message".to_owned();
    let mut data = String::new();
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            value.trim().clone_into(&mut kind);
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.trim_start());
        }
    }
    let mut value: Value = serde_json::from_str(&data).ok()?;
    value.as_object_mut()?.insert("node".to_owned(), Value::String(node.to_owned()));
    Some((kind, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_gains_the_node_it_came_from() {
        let block = "event: run\ndata: {\"agent\":\"a\",\"status\":\"ok\"}\n\n";
        let (kind, value) = parse_event(block, "node-b").expect("an event");
        assert_eq!(kind, "run");
        assert_eq!(value["agent"], "a");
        assert_eq!(value["node"], "node-b");
    }

    #[test]
    fn keep_alives_and_garbage_are_not_events() {
        assert!(parse_event(":\n\n", "node-b").is_none());
        assert!(parse_event("event: run\ndata: not json\n\n", "node-b").is_none());
        assert!(parse_event("event: run\ndata: [1,2]\n\n", "node-b").is_none(), "only objects can name their node");
    }
}
