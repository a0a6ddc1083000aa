//! What an agent and each of its jobs spent today (LLM calls, tokens, cost) against the
//! agent's daily caps, as `/v1/agents` and `/v1/status` show it.

use std::collections::{BTreeMap, BTreeSet};

use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde_json::{json, Value};

use crate::api::error::ApiError;
use crate::api::ApiState;
use crate::core::budget::{day_start, DayLedger, DaySpend};
use crate::core::guard::SkipReason;
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::usage::format_micros;

/// An agent's spending since its local day began, in total and per job.
pub struct Today {
    pub agent: Value,
    pub jobs: BTreeMap<HeartbeatId, Value>,
}

pub async fn today(state: &ApiState, agent: &AgentId) -> Result<Today, ApiError> {
    let day = agent_day_start(state, agent);
    let by_job = state.store.spent_by_job(Some(agent), day).await?;
    Ok(today_from(state, agent, day, by_job))
}

/// Every agent's spending today, with one read of the store per distinct local day start
/// (agents in one zone share it), not one per agent.
pub async fn today_of_each(state: &ApiState, agents: &BTreeSet<AgentId>) -> Result<BTreeMap<AgentId, Today>, ApiError> {
    let mut by_day: BTreeMap<Timestamp, Vec<&AgentId>> = BTreeMap::new();
    for agent in agents {
        by_day.entry(agent_day_start(state, agent)).or_default().push(agent);
    }
    let mut each = BTreeMap::new();
    for (day, members) in by_day {
        let mut by_agent: BTreeMap<AgentId, BTreeMap<HeartbeatKey, DaySpend>> = BTreeMap::new();
        for (key, spent) in state.store.spent_by_job(None, day).await? {
            by_agent.entry(key.agent.clone()).or_default().insert(key, spent);
        }
        for agent in members {
            let by_job = by_agent.remove(agent).unwrap_or_default();
            each.insert(agent.clone(), today_from(state, agent, day, by_job));
        }
    }
    Ok(each)
}

fn agent_day_start(state: &ApiState, agent: &AgentId) -> Timestamp {
    let zone = TimeZone::get(&state.settings(agent).timezone).unwrap_or(TimeZone::UTC);
    day_start(state.clock.wall(), &zone)
}

fn today_from(state: &ApiState, agent: &AgentId, day: Timestamp, by_job: BTreeMap<HeartbeatKey, DaySpend>) -> Today {
    let mut total = DaySpend::default();
    for spent in by_job.values() {
        total.add(*spent);
    }
    let caps = state.settings(agent).day_caps();
    let reached = DayLedger { day, spent: total }.reached(caps).map(|cap| SkipReason::for_cap(cap).as_str());
    let mut agent = spend_json(total);
    agent["day_started_at"] = json!(day.to_string());
    agent["llm_calls_per_day"] = json!(caps.calls);
    agent["daily_tokens_max"] = json!(caps.tokens);
    agent["daily_cost_max"] = json!(format_micros(caps.cost_micros));
    agent["cap_reached"] = json!(reached);
    // Kept for clients of the first version of this object.
    agent["llm_calls_today"] = json!(total.calls);
    let jobs = by_job.into_iter().map(|(key, spent)| (key.heartbeat, spend_json(spent))).collect();
    Today { agent, jobs }
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
