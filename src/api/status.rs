//! `GET /v1/status`: every agent and job with what it will do next and, when a slot due
//! now would not run, why: the reason comes from the guard chain the engine runs.

use crate::cluster::engines::ClusterRoute;
use std::collections::{BTreeMap, BTreeSet};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::error::ApiError;
use crate::api::forward;
use crate::api::jobs::page_limit;
use crate::api::spend::{self, spend_json};
use crate::api::ApiState;
use crate::core::breaker::DISABLED_BY_BREAKER;
use crate::core::budget::DaySpend;
use crate::core::guard::SkipReason;
use crate::core::heartbeat::Heartbeat;
use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use crate::core::next_run::next_runnable;
use crate::core::policy::jitter_offset;
use crate::core::reply::ReplyKind;
use crate::core::schedule::Schedule;
use crate::core::text::truncate_chars;
use crate::daemon::list::heartbeat_json;
use crate::driver::JobView;
use crate::limits::{OUTPUT_PREVIEW_CHARS_MAX, RECENT_RUNS_HOURS, RECENT_RUNS_SHOWN_MAX};
use crate::ports::store::{Execution, ExecutionStatus, StopReason};

/// The pauses in the store that still hold.
pub struct PauseView {
    until: BTreeMap<AgentId, Timestamp>,
}

impl PauseView {
    pub async fn load(state: &ApiState) -> Result<Self, ApiError> {
        let now = state.clock.wall();
        let pauses = state.store.load_pauses().await?;
        let until = pauses.into_iter().filter(|(_, pause)| pause.until > now).map(|(a, p)| (a, p.until)).collect();
        Ok(Self { until })
    }

    pub fn until(&self, agent: &AgentId) -> Option<Timestamp> {
        self.until.get(agent).copied()
    }
}

/// A job's row: its definition and state (as `heartbeat list --json`), and the driver's
/// view: armed next slot, runs in flight, and `would_run_now` with the reason.
pub fn job_json(
    job: &Heartbeat,
    last: Option<&Execution>,
    view: Option<&JobView>,
    paused_until: Option<Timestamp>,
) -> Value {
    let mut value = heartbeat_json(job, last);
    let verdict = view.map(|view| view.would_run_now);
    let probe_at = view.and_then(|view| view.breaker_probe_at);
    let reason = match verdict {
        None | Some(Ok(())) => None,
        Some(Err(SkipReason::Paused)) => {
            Some(paused_until.map_or_else(|| "paused".to_owned(), |until| format!("paused until {until}")))
        }
        Some(Err(SkipReason::Backoff)) => Some(
            view.and_then(|view| view.backoff_until)
                .map_or_else(|| "backoff".to_owned(), |until| format!("backoff until {until}")),
        ),
        Some(Err(SkipReason::Disabled)) => Some(match (&job.state.disabled_reason, probe_at) {
            (Some(why), Some(at)) => format!("disabled: {why} (probe at {at})"),
            (Some(why), None) => format!("disabled: {why}"),
            (None, _) => "disabled".to_owned(),
        }),
        Some(Err(other)) => Some(other.as_str().to_owned()),
    };
    value["would_run_now"] = json!(verdict.map(|verdict| verdict.is_ok()));
    value["reason"] = json!(reason);
    value["skip_reason_now"] = json!(verdict.and_then(Result::err).map(SkipReason::as_str));
    value["paused_until"] = json!(paused_until.map(|until| until.to_string()));
    value["breaker"] = breaker_json(job, view);
    if let Some(view) = view {
        // The next slot a pause, a backoff or quiet hours will not skip.
        let not_before = paused_until.max(view.backoff_until);
        let jitter = jitter_offset(&job.def.key, job.def.policy.jitter_max);
        let next_run = view
            .next_slot
            .and_then(|slot| next_runnable(&job.def.schedule, slot, jitter, job.def.active_hours.as_ref(), not_before));
        value["next_slot"] = json!(view.next_slot.map(|slot| slot.to_string()));
        value["next_run_at"] = json!(next_run.map(|at| at.to_string()));
        value["runs_in_flight"] = json!(view.runs_in_flight);
        value["backoff_until"] = json!(view.backoff_until.map(|until| until.to_string()));
    }
    value
}

/// The breaker: `closed`, `open` (with when its probe runs, if it has a cooldown) or
/// `half-open` (the next run is the probe).
fn breaker_json(job: &Heartbeat, view: Option<&JobView>) -> Value {
    let open = !job.state.enabled && job.state.disabled_reason.as_deref() == Some(DISABLED_BY_BREAKER);
    let state = match view {
        _ if open => "open",
        Some(view) if view.breaker_half_open => "half-open",
        _ => "closed",
    };
    json!({
        "state": state,
        "consecutive_failures": job.state.consecutive_failures,
        "opened_at": job.state.breaker_opened_at.map(|at| at.to_string()),
        "probe_at": view.and_then(|view| view.breaker_probe_at).map(|at| at.to_string()),
    })
}

/// How one run of the recent strip ended, as an operator reads it: `ok` (nothing to say),
/// `alert` (a reply went out), `silent` (a reply kept in the run log), `skipped` (with
/// the reason), `failed` (with the error) or `running`.
pub fn outcome(run: &Execution) -> (&'static str, Option<String>) {
    let short = |text: &str| truncate_chars(text, OUTPUT_PREVIEW_CHARS_MAX);
    match run.status {
        ExecutionStatus::Running => ("running", None),
        ExecutionStatus::Skipped => ("skipped", run.skip_reason.map(|reason| reason.as_str().to_owned())),
        ExecutionStatus::Failed | ExecutionStatus::TimedOut | ExecutionStatus::Interrupted => {
            ("failed", Some(run.error.as_deref().map_or_else(|| run.status.as_str().to_owned(), short)))
        }
        ExecutionStatus::Succeeded => match (run.stop_reason, run.reply) {
            (Some(StopReason::QuietCheck), _) => ("skipped", Some(StopReason::QuietCheck.as_str().to_owned())),
            (_, Some(ReplyKind::Sent)) => ("alert", None),
            (_, Some(ReplyKind::Duplicate)) => ("skipped", Some(ReplyKind::Duplicate.as_str().to_owned())),
            (_, Some(ReplyKind::Empty | ReplyKind::Token)) => ("ok", None),
            // Something to say, withheld (a silent target, alerts hidden, a system event).
            (_, None) if run.output_preview.is_some() => ("silent", None),
            (_, None) => ("ok", None),
        },
    }
}

/// The runs of the last day (at most `RECENT_RUNS_SHOWN_MAX`), oldest first, for the
/// status page's strip of outcomes.
fn recent_json(runs: &[Execution], now: Timestamp) -> Value {
    let since = now.checked_sub(SignedDuration::from_hours(RECENT_RUNS_HOURS)).unwrap_or(Timestamp::MIN);
    let recent: Vec<Value> = runs
        .iter()
        .rev()
        .filter(|run| run.slot >= since)
        .map(|run| {
            let (outcome, why) = outcome(run);
            json!({ "slot": run.slot.to_string(), "outcome": outcome, "why": why })
        })
        .collect();
    json!(recent)
}

/// The zone a job's times read best in: its cron's, else its active hours', else its
/// agent's.
fn job_zone(job: &Heartbeat, agent_zone: &str) -> String {
    match (&job.def.schedule, &job.def.active_hours) {
        (Schedule::Cron(cron), _) => cron.zone_name().to_owned(),
        (_, Some(window)) => window.zone_name().to_owned(),
        _ => agent_zone.to_owned(),
    }
}

/// The rows of `jobs` as the API shows them: each with its recent runs, the driver's view
/// and its agent's pause, read once for all of them.
pub async fn job_rows(state: &ApiState, jobs: &[&Heartbeat]) -> Result<Vec<Value>, ApiError> {
    let keys: Vec<HeartbeatKey> = jobs.iter().map(|job| job.def.key.clone()).collect();
    let views = state.engine.inspect_keys(&keys).await?;
    let pauses = PauseView::load(state).await?;
    job_rows_seen(state, jobs, &by_key(&views), &pauses, None).await
}

fn by_key(views: &[JobView]) -> BTreeMap<&HeartbeatKey, &JobView> {
    views.iter().map(|view| (&view.key, view)).collect()
}

/// The same, with the driver's views and the pauses already read (once for every agent
/// of a status: reading them per agent made it quadratic in the jobs), and, for a status,
/// every job's recent runs in one read (`recent`; else one read per job).
async fn job_rows_seen(
    state: &ApiState,
    jobs: &[&Heartbeat],
    views: &BTreeMap<&HeartbeatKey, &JobView>,
    pauses: &PauseView,
    recent: Option<&BTreeMap<HeartbeatKey, Vec<Execution>>>,
) -> Result<Vec<Value>, ApiError> {
    let now = state.clock.wall();
    let mut rows = Vec::new();
    for job in jobs.iter().copied() {
        let runs = match recent {
            Some(recent) => recent.get(&job.def.key).cloned().unwrap_or_default(),
            None => state.store.executions(&job.def.key, RECENT_RUNS_SHOWN_MAX).await?,
        };
        let view = views.get(&job.def.key).copied();
        let mut row = job_json(job, runs.first(), view, pauses.until(&job.def.key.agent));
        row["recent"] = recent_json(&runs, now);
        row["last_output"] = json!(runs.iter().find_map(|run| run.output_preview.as_deref()));
        row["timezone"] = json!(job_zone(job, &state.settings(&job.def.key.agent).timezone));
        rows.push(row);
    }
    Ok(rows)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    limit: Option<String>,
    /// The cursor: jobs after this key (`agent/job`), as the page before gave it.
    after: Option<String>,
}

impl StatusQuery {
    fn after(&self) -> Result<Option<HeartbeatKey>, ApiError> {
        let Some(text) = self.after.as_deref() else { return Ok(None) };
        let invalid = || {
            ApiError::invalid("after", format!("{text:?} is not a job's key (`agent/job`, as `next_cursor` gives it)"))
        };
        let (agent, heartbeat) = text.split_once('/').ok_or_else(invalid)?;
        let agent = AgentId::new(agent).map_err(|_| invalid())?;
        let heartbeat = HeartbeatId::new(heartbeat).map_err(|_| invalid())?;
        Ok(Some(HeartbeatKey { agent, heartbeat }))
    }

    /// The page's path, for the other nodes of a cluster (an id's characters need no
    /// escape in a query: lowercase letters, digits and `-`).
    fn path(limit: usize, after: Option<&HeartbeatKey>) -> String {
        let mut path = format!("/v1/status?limit={limit}");
        if let Some(after) = after {
            path.push_str("&after=");
            path.push_str(&after.to_string());
        }
        path
    }
}

/// A page of every agent and job in key order, at most `limit` jobs after `after`:
/// `next_cursor` goes in `after` for the next page. An agent shows on each page that
/// holds one of its jobs; one with no job, on the page whose range of agents holds it.
pub async fn status(
    State(state): State<ApiState>,
    headers: HeaderMap,
    query: Result<Query<StatusQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit.as_deref())?;
    let after = query.after()?;
    let jobs = state.store.heartbeats_page(after.as_ref(), limit).await?;
    let next_cursor = (jobs.len() == limit).then(|| jobs.last().map(|job| job.def.key.clone())).flatten();
    let keys: Vec<HeartbeatKey> = jobs.iter().map(|job| job.def.key.clone()).collect();
    let views = state.engine.inspect_keys(&keys).await?;
    let views_by_key = by_key(&views);
    let pauses = PauseView::load(&state).await?;
    let recent = state.store.recent_executions(&keys, RECENT_RUNS_SHOWN_MAX).await?;
    // The agents this page's range holds: after the cursor's agent (which the page before
    // showed), up to the last job's agent when another page follows.
    let in_range = |agent: &AgentId| {
        after.as_ref().is_none_or(|after| *agent > after.agent)
            && next_cursor.as_ref().is_none_or(|last| *agent <= last.agent)
    };
    let mut agents: BTreeSet<AgentId> = state.agents.keys().filter(|agent| in_range(agent)).cloned().collect();
    agents.extend(jobs.iter().map(|job| job.def.key.agent.clone()));
    let mut jobs_of: BTreeMap<&AgentId, Vec<&Heartbeat>> = BTreeMap::new();
    for job in &jobs {
        jobs_of.entry(&job.def.key.agent).or_default().push(job);
    }
    let mut rows = Vec::new();
    // Every agent, in order, with what it spent today.
    for (agent, today) in spend::today_of_each(&state, &agents).await? {
        let mine = jobs_of.remove(&agent).unwrap_or_default();
        let mut items = job_rows_seen(&state, &mine, &views_by_key, &pauses, Some(&recent)).await?;
        for (item, job) in items.iter_mut().zip(&mine) {
            item["today"] =
                today.jobs.get(&job.def.key.heartbeat).cloned().unwrap_or_else(|| spend_json(DaySpend::default()));
        }
        rows.push(json!({
            "id": agent.as_str(),
            "timezone": state.settings(&agent).timezone,
            "paused_until": pauses.until(&agent).map(|until| until.to_string()),
            "today": today.agent,
            "jobs": items,
        }));
    }
    let mut body = json!({
        "now": state.clock.wall().to_string(),
        "store": state.store_identity.as_deref(),
        "today": spend::global_today(&state).await?,
        "agents": rows,
        "limit": limit,
        "next_cursor": next_cursor.map(|last| last.to_string()),
    });
    if let Some(route) = state.engine.cluster() {
        body["cluster"] = cluster_json(route);
        // Asked directly: every agent of the page, each as its owner sees it (the same page:
        // every node reads the one store).
        if !forward::forwarded(&headers) {
            let (answers, silent) = forward::gather(route, &headers, &StatusQuery::path(limit, after.as_ref())).await;
            if let Some(rows) = body["agents"].as_array_mut() {
                forward::merge_rows(route, rows, &answers, "agents");
            }
            body["cluster"]["unreachable"] = json!(silent);
        }
    }
    Ok(Json(body))
}

/// On a node of a cluster: who this node is, what it runs, and every partition's owner.
fn cluster_json(route: &ClusterRoute) -> Value {
    let (table, held) = route.leases();
    let partitions: Vec<Value> = table
        .iter()
        .map(|lease| {
            json!({
                "partition": lease.partition,
                "owner": if lease.expired { None } else { lease.owner.clone() },
                "term": lease.term,
            })
        })
        .collect();
    json!({ "node": route.node, "partitions_held": held, "partitions": partitions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{HeartbeatId, HeartbeatKey};
    use crate::core::usage::RunUsage;

    fn run(minutes_ago: i64, status: ExecutionStatus) -> Execution {
        let slot = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(48) - SignedDuration::from_mins(minutes_ago);
        Execution {
            key: HeartbeatKey {
                agent: AgentId::new("ops").expect("valid"),
                heartbeat: HeartbeatId::new("inbox").expect("valid"),
            },
            slot,
            triggered: false,
            started_at: slot,
            finished_at: Some(slot),
            status,
            skip_reason: None,
            delivery: None,
            duration: None,
            error: None,
            output_preview: None,
            stop_reason: None,
            reply: None,
            llm_calls: 0,
            usage: RunUsage::default(),
            tool_use: None,
        }
    }

    #[test]
    fn each_run_reads_as_one_outcome_and_the_strip_keeps_the_last_day_oldest_first() {
        let now = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(48);
        let sent = Execution { reply: Some(ReplyKind::Sent), ..run(10, ExecutionStatus::Succeeded) };
        let acked = Execution { reply: Some(ReplyKind::Token), ..run(20, ExecutionStatus::Succeeded) };
        let withheld = Execution { output_preview: Some("kept".into()), ..run(30, ExecutionStatus::Succeeded) };
        let checked = Execution { stop_reason: Some(StopReason::QuietCheck), ..run(40, ExecutionStatus::Succeeded) };
        let skipped = Execution { skip_reason: Some(SkipReason::QuietHours), ..run(50, ExecutionStatus::Skipped) };
        let failed = Execution { error: Some("HTTP 500".into()), ..run(60, ExecutionStatus::Failed) };
        let timed_out = run(70, ExecutionStatus::TimedOut);
        let old = Execution { reply: Some(ReplyKind::Sent), ..run(60 * 25, ExecutionStatus::Succeeded) };
        let runs = [sent, acked, withheld, checked, skipped, failed, timed_out, old];
        let strip = recent_json(&runs, now);
        let read: Vec<(String, Option<String>)> = strip
            .as_array()
            .expect("a list")
            .iter()
            .map(|r| (r["outcome"].as_str().unwrap_or("").to_owned(), r["why"].as_str().map(str::to_owned)))
            .collect();
        let expected = [
            ("failed", Some("timed-out")),
            ("failed", Some("HTTP 500")),
            ("skipped", Some("quiet-hours")),
            ("skipped", Some("quiet-check")),
            ("silent", None),
            ("ok", None),
            ("alert", None),
        ];
        let expected: Vec<(String, Option<String>)> =
            expected.iter().map(|(o, w)| ((*o).to_owned(), w.map(str::to_owned))).collect();
        assert_eq!(read, expected, "the run older than a day is left out");
    }
}
