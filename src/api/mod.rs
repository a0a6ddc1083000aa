//! The operator API: steer a running engine over HTTP (JSON in and out). Served by
//! `systole serve`; the CLI's `status`, `agent` and job verbs are its clients.
//!
//! Every route but `GET /healthz` needs the bearer token when one is set. Errors are
//! `{"error": {"code", "message"}}` (see [`error`]); a refused request changes nothing.

pub mod agents;
pub mod auth;
pub mod error;
pub mod feed;
mod feed_peers;
pub mod forward;
pub mod jobs;
pub mod mcp;
pub mod openapi;
pub mod reload;
pub mod spend;
pub mod status;
pub mod store_check;
pub mod user_turns;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use axum::Router;

use crate::agent::settings::AgentSettings;
use crate::api::error::ApiError;
use crate::api::feed::EventFeed;
use crate::api::status::PauseView;
use crate::api::user_turns::UserTurns;
use crate::cluster::engines::{ClusterRoute, Engines};
use crate::core::ids::AgentId;
use crate::limits::API_BODY_BYTES_MAX;
use crate::metrics::Metrics;
use crate::ports::clock::Clock;
use crate::ports::store::Store;

/// What every handler may reach.
#[derive(Clone)]
pub struct ApiState {
    /// The engine (or, on a node of a cluster, the engines) the API steers.
    pub engine: Engines,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    /// The configured agents' settings; others get `agent_default`.
    pub agents: Arc<BTreeMap<AgentId, AgentSettings>>,
    pub agent_default: Arc<AgentSettings>,
    /// The daily caps across all agents (`[engine] daily_tokens_max`, `daily_cost_max`).
    pub global_caps: Arc<crate::core::budget::GlobalCaps>,
    pub metrics: Arc<Metrics>,
    pub feed: Arc<EventFeed>,
    pub user_turns: Arc<UserTurns>,
    /// The bearer token every route but `/healthz` needs, when set.
    pub token: Option<Arc<str>>,
    /// Re-reads the config (`POST /v1/reload`); `None` for an engine without a config file.
    pub reloader: Option<Arc<dyn reload::Reloader>>,
    /// The store this daemon serves (`daemon::identity`), when it runs from a config: a
    /// request naming another one is refused.
    pub store_identity: Option<Arc<str>>,
    /// The servers of tools runs may use (MCP servers), for `GET /v1/mcp` and `/metrics`.
    pub tools: Arc<dyn crate::ports::tools::ToolServers>,
}

impl ApiState {
    pub fn settings(&self, agent: &AgentId) -> &AgentSettings {
        self.agents.get(agent).unwrap_or(&self.agent_default)
    }
}

/// Every route, with the token check and the body limit.
pub fn router(state: ApiState) -> Router {
    let v1 = Router::new()
        .route("/status", get(status::status))
        .route("/agents", get(agents::list))
        .route("/agents/{agent}", get(agents::show))
        .route("/agents/{agent}/pause", post(agents::pause))
        .route("/agents/{agent}/resume", post(agents::resume))
        .route("/agents/{agent}/wake", post(agents::wake))
        .route("/agents/{agent}/events", post(agents::system_event))
        .route("/agents/{agent}/user-turns", post(user_turns::begin))
        .route("/agents/{agent}/user-turns/{turn}", delete(user_turns::end))
        .route("/agents/{agent}/{collection}", get(jobs::list).post(jobs::create))
        .route("/agents/{agent}/{collection}/{id}", get(jobs::show).patch(jobs::update).delete(jobs::remove))
        .route("/agents/{agent}/{collection}/{id}/enable", post(jobs::enable))
        .route("/agents/{agent}/{collection}/{id}/disable", post(jobs::disable))
        .route("/agents/{agent}/{collection}/{id}/trigger", post(jobs::trigger))
        .route("/agents/{agent}/{collection}/{id}/backfill", post(jobs::backfill))
        .route("/agents/{agent}/{collection}/{id}/runs", get(jobs::runs))
        .route("/agents/{agent}/{collection}/{id}/runs/{slot}/transcript", get(jobs::transcript))
        .route("/mcp", get(mcp::list))
        .route("/events", get(feed::stream))
        .route("/reload", post(reload::reload))
        .route("/openapi.json", get(openapi::serve));
    Router::new()
        .route("/", get(status_page))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .nest("/v1", v1)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), forward::to_owner))
        .layer(middleware::from_fn_with_state(state.clone(), store_check::require_same_store))
        .layer(middleware::from_fn_with_state(state.clone(), auth::require_token))
        .layer(middleware::from_fn_with_state(state.clone(), forward::name_node))
        .layer(DefaultBodyLimit::max(API_BODY_BYTES_MAX))
        .with_state(state)
}

/// The status page: one file, no build step, no external assets. It holds no data; what
/// it shows it reads from the API with the token.
async fn status_page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("status_page.html"))
}

async fn healthz() -> impl IntoResponse {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

async fn metrics(State(state): State<ApiState>) -> Result<impl IntoResponse, ApiError> {
    // Counted by the engine an agent at a time: a view a job, each looked up among the
    // pauses, was a million views and a search each at every scrape.
    let of_each = state.engine.enabled_counts().await?;
    let paused = PauseView::load(&state).await?;
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::from([("enabled", 0), ("disabled", 0), ("paused", 0)]);
    for (agent, counted) in &of_each {
        let enabled = if paused.until(agent).is_some() { "paused" } else { "enabled" };
        *counts.entry(enabled).or_default() += counted.enabled;
        *counts.entry("disabled").or_default() += counted.disabled;
    }
    let mut text = state.metrics.render(&counts);
    text.push_str(&crate::metrics::render_tool_servers(&state.tools.catalog()));
    if let Some(route) = state.engine.cluster() {
        text.push_str(&cluster_metrics(route));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text))
}

/// A node's leases in the Prometheus text format.
fn cluster_metrics(route: &ClusterRoute) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let (_, held) = route.leases();
    let stats = &route.stats;
    let node = &route.node;
    let mut text = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node=\"{node}\"}} {value}\n"));
    };
    metric("systole_leases_held", "gauge", "Partitions this node holds now.", u64::try_from(held.len()).unwrap_or(0));
    metric("systole_leases_acquired_total", "counter", "Free partitions this node took.", stats.acquired.load(Relaxed));
    metric(
        "systole_leases_taken_over_total",
        "counter",
        "Partitions this node took over after another node's lease expired.",
        stats.taken_over.load(Relaxed),
    );
    metric(
        "systole_leases_lost_total",
        "counter",
        "Leases this node lost: taken over, or not renewed within their period.",
        stats.lost.load(Relaxed),
    );
    metric(
        "systole_leases_released_total",
        "counter",
        "Leases this node gave back (rebalance, shutdown).",
        stats.released.load(Relaxed),
    );
    text
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see the README's API section")
}
