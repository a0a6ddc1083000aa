//! What an agent and each of its jobs spent today (LLM calls, tokens, cost) against the
//! agent's daily caps, as `/v1/agents` and `/v1/status` show it.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;
use serde_json::{json, Value};

use crate::api::error::ApiError;
use crate::api::ApiState;
use crate::core::budget::{day_start, DayLedger, DaySpend};
use crate::core::guard::SkipReason;
use crate::core::ids::{AgentId, HeartbeatId};
use crate::core::usage::format_micros;

/// An agent's spending since its local day began, in total and per job.
pub struct Today {
    pub agent: Value,
    pub jobs: BTreeMap<HeartbeatId, Value>,
}

pub async fn today(state: &ApiState, agent: &AgentId) -> Result<Today, ApiError> {
    let settings = state.settings(agent);
    let zone = TimeZone::get(&settings.timezone).unwrap_or(TimeZone::UTC);
    let day = day_start(state.clock.wall(), &zone);
    let by_job = state.store.spent_by_job(agent, day).await?;
    let mut total = DaySpend::default();
    for spent in by_job.values() {
        total.add(*spent);
    }
    let caps = settings.day_caps();
    let reached = DayLedger { day, spent: total }.reached(caps).map(|cap| SkipReason::for_cap(cap).as_str());
    let mut agent = spend_json(total);
    agent["day_started_at"] = json!(day.to_string());
    agent["llm_calls_per_day"] = json!(caps.calls);
    agent["daily_tokens_max"] = json!(caps.tokens);
    agent["daily_cost_max"] = json!(format_micros(caps.cost_micros));
    agent["cap_reached"] = json!(reached);
    // Kept for clients of the first version of this object.
    agent["llm_calls_today"] = json!(total.calls);
    let jobs = by_job.into_iter().map(|(job, spent)| (job, spend_json(spent))).collect();
    Ok(Today { agent, jobs })
}

/// What all agents spent since the engine's day began, against the global caps.
pub async fn global_today(state: &ApiState) -> Result<Value, ApiError> {
    let caps = &state.global_caps;
    let zone = TimeZone::get(&caps.timezone).unwrap_or(TimeZone::UTC);
    let day = day_start(state.clock.wall(), &zone);
    let total = state.store.spent_since(None, day, &[]).await?;
    let reached = DayLedger { day, spent: total }.reached_global(caps).map(|cap| SkipReason::for_cap(cap).as_str());
    let mut global = spend_json(total);
    global["day_started_at"] = json!(day.to_string());
    global["timezone"] = json!(caps.timezone);
    global["daily_tokens_max"] = json!(caps.tokens);
    global["daily_cost_max"] = json!(format_micros(caps.cost_micros));
    global["cap_reached"] = json!(reached);
    Ok(global)
}

/// One spending as JSON: cost both exact (micros) and as a decimal for people.
pub fn spend_json(spent: DaySpend) -> Value {
    json!({
        "llm_calls": spent.calls,
        "tokens": spent.tokens,
        "cost_micros": spent.cost_micros,
        "cost": format_micros(spent.cost_micros),
    })
}
