//! Any node answers any call (ADR 0024). On a node of a cluster, a call about an agent
//! whose partition another node runs is sent to that node's API, at the address the lease
//! table gives for it, and its answer is returned as it came; `GET /v1/status` and
//! `GET /v1/agents` gather each owner's own rows. A single node forwards nothing.
//!
//! The call is checked here first (token, store) and again by the owner, with the caller's
//! own `Authorization`: the nodes of a cluster share one token. A forwarded call carries
//! [`FORWARDED_BY_HEADER`] and is never forwarded again, so two nodes with different views
//! of the table cannot pass a call back and forth: the second answers `not-owner`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::api::error::ApiError;
use crate::api::ApiState;
use crate::cluster::engines::ClusterRoute;
use crate::cluster::reload::other_owners;
use crate::core::ids::AgentId;
use crate::core::partition::{partition_of, PARTITIONS_COUNT};
use crate::core::routing::{agent_in_path, Route};
use crate::limits::API_BODY_BYTES_MAX;

/// Set on a call one node sends another; its value names the sender.
pub const FORWARDED_BY_HEADER: &str = "systole-forwarded-by";
/// Set on every answer of a node of a cluster: the node that answered.
pub const NODE_HEADER: &str = "systole-node";
/// The longest a forwarded call may take, the owner's answer included.
pub const FORWARD_TIMEOUT_SECS: u64 = 30;
/// The longest a connection to the owner may take: a node that does not accept one in
/// this time is down or cut off, and the caller hears so at once.
pub const FORWARD_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// The largest answer taken from an owner (a status of many agents is the largest).
pub const FORWARD_ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The HTTP client the forwarding uses: one per process, so its connections to the other
/// nodes are kept and reused.
fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(FORWARD_TIMEOUT_SECS))
            .connect_timeout(Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS))
            .user_agent(crate::ports::http::USER_AGENT)
            .build()
            .unwrap_or_default()
    })
}

/// The middleware: answers here, or sends the call to the owner of its agent.
pub async fn to_owner(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let Some(route) = state.engine.cluster() else { return next.run(request).await };
    let target = match agent_in_path(request.uri().path()) {
        Some(agent) if !forwarded(request.headers()) => Some((route.route(&agent), agent)),
        _ => None,
    };
    match target {
        None => next.run(request).await,
        Some((Route::NoAddress { node: owner }, agent)) => ApiError::not_owner(format!(
            "agent {agent} runs on node {owner}, which serves no API (api.listen is off there); ask it there"
        ))
        .into_response(),
        Some((Route::Forward { node: owner, url }, agent)) => match forward(route, request, &url).await {
            Ok(response) => response,
            Err(problem) => {
                ApiError::owner_unreachable(format!("agent {agent} runs on node {owner} ({url}): {problem}"))
                    .into_response()
            }
        },
        // Here, or nobody: the handler answers (`not-owner` while nobody owns it).
        Some((Route::Here | Route::NoOwner { .. }, _)) => next.run(request).await,
    }
}

/// The outermost middleware of a node of a cluster: every answer names the node that
/// answered ([`NODE_HEADER`]), a forwarded one the owner (its header comes back with it).
pub async fn name_node(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if let Some(route) = state.engine.cluster() {
        if !response.headers().contains_key(NODE_HEADER) {
            if let Ok(value) = HeaderValue::from_str(&route.node) {
                response.headers_mut().insert(NODE_HEADER, value);
            }
        }
    }
    response
}

/// Sends `request` to the owner at `base` and returns its answer as it came.
async fn forward(route: &ClusterRoute, request: Request, base: &str) -> Result<Response, String> {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, API_BODY_BYTES_MAX).await else {
        let limit = API_BODY_BYTES_MAX;
        return Ok(ApiError::too_large(format!("the body is larger than {limit} bytes")).into_response());
    };
    let path = parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).map_err(|e| e.to_string())?;
    let mut outgoing = client().request(method, format!("{base}{path}")).header(FORWARDED_BY_HEADER, &route.node);
    for name in [AUTHORIZATION, CONTENT_TYPE] {
        if let Some(value) = parts.headers.get(&name) {
            outgoing = outgoing.header(name.as_str(), value.as_bytes());
        }
    }
    let sent_nothing = |error: &reqwest::Error| error.is_connect() || error.is_builder();
    let answer = outgoing.body(body).send().await.map_err(|error| {
        if sent_nothing(&error) {
            format!("it did not accept the call ({error}); nothing was done")
        } else {
            format!("its answer did not come ({error}); the change may or may not have been made")
        }
    })?;
    read_answer(answer).await
}

/// The owner's answer as this node's, its status and type kept.
async fn read_answer(mut answer: reqwest::Response) -> Result<Response, String> {
    let status = StatusCode::from_u16(answer.status().as_u16()).map_err(|e| e.to_string())?;
    let kept: Vec<(String, Vec<u8>)> = [CONTENT_TYPE.as_str(), NODE_HEADER]
        .iter()
        .filter_map(|name| answer.headers().get(*name).map(|value| ((*name).to_owned(), value.as_bytes().to_vec())))
        .collect();
    let mut bytes = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|e| format!("its answer broke off ({e})"))? {
        if bytes.len() + chunk.len() > FORWARD_ANSWER_BYTES_MAX {
            return Err(format!("its answer is larger than {FORWARD_ANSWER_BYTES_MAX} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    for (name, value) in kept {
        if let (Ok(name), Ok(value)) =
            (axum::http::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(&value))
        {
            response.headers_mut().insert(name, value);
        }
    }
    Ok(response)
}

/// What each other owner answers to `GET path` for its own agents (a call carrying
/// [`FORWARDED_BY_HEADER`] is answered from that node's view only), by node. A node that
/// does not answer is named in the second part, with why.
pub async fn gather(
    route: &ClusterRoute,
    headers: &HeaderMap,
    path: &str,
) -> (BTreeMap<String, Value>, BTreeMap<String, String>) {
    let answers = call_owners(route, reqwest::Method::GET, path, headers.get(AUTHORIZATION)).await;
    let mut answered = BTreeMap::new();
    let mut silent = BTreeMap::new();
    for (owner, answer) in answers {
        match answer {
            Ok(value) => {
                answered.insert(owner, value);
            }
            Err(problem) => {
                silent.insert(owner, problem);
            }
        }
    }
    (answered, silent)
}

/// Sends `method path` to every other node that owns a partition now, at the address the
/// lease table gives, all at once; each node's JSON answer, or why there is none.
pub async fn call_owners(
    route: &ClusterRoute,
    method: reqwest::Method,
    path: &str,
    authorization: Option<&HeaderValue>,
) -> BTreeMap<String, Result<Value, String>> {
    let calls = other_owners(route).into_iter().map(|(owner, url)| {
        let method = method.clone();
        async move {
            let answer = call_node(&route.node, &url, method, path, authorization).await;
            (owner, answer)
        }
    });
    futures_util::future::join_all(calls).await.into_iter().collect()
}

/// Sends `method path` to the node at `url` (an address from the lease table) on behalf
/// of node `from`: its JSON answer, or why there is none (a refusal included).
pub async fn call_node(
    from: &str,
    url: &str,
    method: reqwest::Method,
    path: &str,
    authorization: Option<&HeaderValue>,
) -> Result<Value, String> {
    let mut call = client().request(method, format!("{url}{path}")).header(FORWARDED_BY_HEADER, from);
    if let Some(value) = authorization {
        call = call.header(AUTHORIZATION.as_str(), value.as_bytes());
    }
    let answer = call.send().await.map_err(|e| e.to_string())?;
    let status = answer.status();
    let body: Value = answer.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        let message = body["error"]["message"].as_str().map_or_else(|| body.to_string(), str::to_owned);
        return Err(format!("answered {status}: {message}"));
    }
    Ok(body)
}

/// Merges the owners' rows into this node's: each row of `rows` (objects with an `id`)
/// about an agent another node runs is replaced by that node's own row when it answered,
/// and every row gains `owner`, the node that runs the agent (`null` between owners).
pub fn merge_rows(route: &ClusterRoute, rows: &mut [Value], answers: &BTreeMap<String, Value>, field: &str) {
    let (table, _) = route.leases();
    for row in rows.iter_mut() {
        let Some(agent) = row["id"].as_str().and_then(|id| AgentId::new(id).ok()) else { continue };
        let partition = partition_of(&agent, PARTITIONS_COUNT);
        let owner = table.iter().find(|l| l.partition == partition && !l.expired).and_then(|l| l.owner.clone());
        if let Some(owner) = owner.as_ref().filter(|owner| **owner != route.node) {
            let theirs = answers
                .get(owner)
                .and_then(|answer| answer[field].as_array())
                .and_then(|rows| rows.iter().find(|their| their["id"] == row["id"]));
            if let Some(theirs) = theirs {
                *row = theirs.clone();
            }
        }
        row["owner"] = serde_json::json!(owner);
    }
}

/// Whether a request came from another node (answered from this node's view only).
pub fn forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED_BY_HEADER)
}
