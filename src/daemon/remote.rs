//! The CLI verbs that steer a running daemon through its API, and how their answers look
//! in a terminal: times in the agent's zone with the offset and how far off they are.

use futures_util::StreamExt;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::core::heartbeat::JobKind;
use crate::daemon::client::{segment, ApiClient};
use crate::daemon::DaemonError;
use crate::limits::{API_JOBS_PAGE_MAX, CLI_OWNER_LOOKUPS_IN_FLIGHT_MAX};

/// `2026-11-23 18:00:00 +01:00 (in 12m)`: an API time in `zone`, with how far from `now`.
pub fn human_time(text: Option<&str>, zone: &TimeZone, now: Timestamp) -> String {
    let Some(at) = text.and_then(|text| text.parse::<Timestamp>().ok()) else { return "-".to_owned() };
    let stamp = local_time(at, zone);
    let seconds = at.duration_since(now).as_secs();
    let span = human_span(seconds.unsigned_abs());
    if seconds >= 0 {
        format!("{stamp} (in {span})")
    } else {
        format!("{stamp} ({span} ago)")
    }
}

/// `2026-11-23 18:00:00 +01:00`: an instant in `zone`, with the offset.
pub fn local_time(at: Timestamp, zone: &TimeZone) -> String {
    let local = at.to_zoned(zone.clone());
    let offset = local.offset().seconds();
    let (sign, offset) = if offset < 0 { ('-', -offset) } else { ('+', offset) };
    format!("{} {sign}{:02}:{:02}", local.strftime("%Y-%m-%d %H:%M:%S"), offset / 3_600, offset % 3_600 / 60)
}

fn human_span(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3_600 => format!("{}m", seconds / 60),
        3_600..86_400 => format!("{}h{:02}m", seconds / 3_600, seconds % 3_600 / 60),
        _ => format!("{}d{}h", seconds / 86_400, seconds % 86_400 / 3_600),
    }
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".to_owned());
    text.push('\n');
    text
}

fn zone_of(agent: &Value) -> TimeZone {
    agent["timezone"].as_str().and_then(|name| TimeZone::get(name).ok()).unwrap_or(TimeZone::UTC)
}

/// The whole status, read a page at a time (`GET /v1/status` answers at most
/// [`API_JOBS_PAGE_MAX`] jobs): the first page's fields, every page's agents, an agent
/// whose jobs span two pages as one.
async fn whole_status(client: &ApiClient) -> Result<Value, DaemonError> {
    let mut whole = Value::Null;
    let mut agents: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/status?limit={API_JOBS_PAGE_MAX}");
        if let Some(after) = &cursor {
            path.push_str("&after=");
            path.push_str(&segment(after));
        }
        let mut page = client.call(Method::GET, &path, None).await?;
        for agent in page["agents"].as_array_mut().map(std::mem::take).unwrap_or_default() {
            match agents.last_mut() {
                Some(last) if last["id"] == agent["id"] => {
                    let more = agent["jobs"].as_array().cloned().unwrap_or_default();
                    if let Some(jobs) = last["jobs"].as_array_mut() {
                        jobs.extend(more);
                    }
                }
                _ => agents.push(agent),
            }
        }
        let next = page["next_cursor"].as_str().map(str::to_owned);
        if whole.is_null() {
            whole = page;
        }
        // A cursor that does not move on would read the same page for good.
        if next.is_none() || next == cursor {
            break;
        }
        cursor = next;
    }
    if let Some(fields) = whole.as_object_mut() {
        fields.insert("agents".to_owned(), Value::Array(agents));
        fields.remove("next_cursor");
        fields.remove("limit");
    }
    Ok(whole)
}

/// `systole status`: one line per job, with the next run and why it would not run now.
///
/// # Errors
/// When the API cannot be reached or refuses.
pub async fn status(client: &ApiClient, as_json: bool) -> Result<String, DaemonError> {
    let status = whole_status(client).await?;
    if as_json {
        return Ok(pretty(&status));
    }
    let now = status["now"].as_str().and_then(|t| t.parse().ok()).unwrap_or(Timestamp::UNIX_EPOCH);
    // On a node of a cluster: which node runs each agent.
    let clustered = status.get("cluster").is_some();
    let node_column = |name: &str| if clustered { format!("{name:<12} ") } else { String::new() };
    let mut out = format!(
        "{:<12} {}{:<20} {:<10} {:<38} {:<22} {}\n",
        "AGENT",
        node_column("NODE"),
        "ID",
        "KIND",
        "NEXT RUN",
        "LAST",
        "NOW"
    );
    for agent in status["agents"].as_array().into_iter().flatten() {
        let zone = zone_of(agent);
        let owner = node_column(agent["owner"].as_str().unwrap_or("-"));
        for job in agent["jobs"].as_array().into_iter().flatten() {
            let last = match (job["last_status"].as_str(), job["last_skip_reason"].as_str()) {
                (Some(status), Some(reason)) => format!("{status} ({reason})"),
                (Some(status), None) => status.to_owned(),
                _ => "-".to_owned(),
            };
            let verdict = if job["would_run_now"] == true {
                "would run".to_owned()
            } else {
                format!("held: {}", job["reason"].as_str().unwrap_or("unknown"))
            };
            out.push_str(&format!(
                "{:<12} {owner}{:<20} {:<10} {:<38} {:<22} {}\n",
                agent["id"].as_str().unwrap_or("-"),
                job["id"].as_str().unwrap_or("-"),
                job["kind"].as_str().unwrap_or("-"),
                human_time(job["next_run_at"].as_str(), &zone, now),
                last,
                verdict
            ));
        }
    }
    out.push_str(&global_spend_line(&status["today"]));
    if let Some(cluster) = status.get("cluster") {
        out.push_str(&cluster_lines(cluster));
    }
    Ok(out)
}

/// All agents' spending today against the global caps (absent from an older daemon).
fn global_spend_line(today: &Value) -> String {
    if today.is_null() {
        return String::new();
    }
    let reached = today["cap_reached"].as_str().map_or(String::new(), |reason| format!("; runs skip: {reason}"));
    format!(
        "all agents today ({}): {} of {} tokens, {} of {}{reached}\n",
        today["timezone"].as_str().unwrap_or("-"),
        today["tokens"],
        today["daily_tokens_max"],
        today["cost"].as_str().unwrap_or("-"),
        today["daily_cost_max"].as_str().unwrap_or("-"),
    )
}

/// On a node of a cluster: what this node runs, and how the partitions are shared.
fn cluster_lines(cluster: &Value) -> String {
    let held: Vec<String> =
        cluster["partitions_held"].as_array().into_iter().flatten().map(|partition| partition.to_string()).collect();
    let mut owners: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for partition in cluster["partitions"].as_array().into_iter().flatten() {
        let owner = partition["owner"].as_str().unwrap_or("(none: changing hands)");
        *owners.entry(owner.to_owned()).or_default() += 1;
    }
    let shares: Vec<String> = owners.iter().map(|(owner, count)| format!("{owner} {count}")).collect();
    let mut text = format!(
        "\nnode {} runs partitions {}; partitions by node: {}\n",
        cluster["node"].as_str().unwrap_or("?"),
        if held.is_empty() { "none".to_owned() } else { held.join(",") },
        shares.join(", ")
    );
    // The owners that did not answer: their agents show what the store has, no verdict.
    for (node, problem) in cluster["unreachable"].as_object().into_iter().flatten() {
        text.push_str(&format!(
            "node {node} did not answer ({}); its agents show no verdict\n",
            problem.as_str().unwrap_or("?")
        ));
    }
    text
}

/// The agent that has job `id` in list `kind`, when the user did not say.
///
/// # Errors
/// When no agent, or more than one, has it.
pub async fn agent_of(client: &ApiClient, kind: JobKind, id: &str, agent: Option<&str>) -> Result<String, DaemonError> {
    if let Some(agent) = agent {
        return Ok(agent.to_owned());
    }
    // Each agent with jobs is asked for this one, a few at a time: a read of one job by its
    // key, where reading every page of the status read every job (a million of them).
    let agents = client.call(Method::GET, "/v1/agents", None).await?;
    // A set: an agent listed twice (by two nodes of a cluster) is one owner.
    let with_jobs: std::collections::BTreeSet<String> = agents["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|agent| agent["jobs"].as_u64() != Some(0))
        .filter_map(|agent| agent["id"].as_str().map(str::to_owned))
        .collect();
    let asked = futures_util::stream::iter(with_jobs)
        .map(|agent| async move {
            let found = client.call_unless_missing(Method::GET, &job_path(kind, &agent, id, ""), None).await?;
            Ok::<_, DaemonError>(found.ok().map(|_| agent))
        })
        .buffered(CLI_OWNER_LOOKUPS_IN_FLIGHT_MAX);
    let answers: Vec<Result<Option<String>, DaemonError>> = asked.collect().await;
    let mut owners = Vec::new();
    for answer in answers {
        owners.extend(answer?);
    }
    let noun = kind.as_str();
    match owners.as_slice() {
        [agent] => Ok(agent.clone()),
        [] => Err(DaemonError::Usage(format!("no {noun} {id:?} in the running daemon"))),
        _ => Err(DaemonError::Usage(format!("several agents have a {noun} {id:?}; pass --agent"))),
    }
}

/// The path of a job, or of one of its actions.
pub fn job_path(kind: JobKind, agent: &str, id: &str, action: &str) -> String {
    let collection = if kind == JobKind::Cron { "cron" } else { "heartbeats" };
    let mut path = format!("/v1/agents/{}/{collection}/{}", segment(agent), segment(id));
    if !action.is_empty() {
        path.push('/');
        path.push_str(action);
    }
    path
}

/// A job as `show` prints it: its fields, one per line.
pub fn job_text(job: &Value) -> String {
    let Some(fields) = job.as_object() else { return pretty(job) };
    let width = fields.keys().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in fields {
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Null => "-".to_owned(),
            other => other.to_string(),
        };
        out.push_str(&format!("{key:<width$}  {text}\n"));
    }
    out
}

/// Sends one job verb and prints its answer.
///
/// # Errors
/// When the API cannot be reached or refuses.
pub async fn job_call(
    client: &ApiClient,
    method: Method,
    path: &str,
    body: Option<Value>,
    as_json: bool,
) -> Result<String, DaemonError> {
    let answer = client.call(method, path, body.as_ref()).await?;
    Ok(if as_json { pretty(&answer) } else { job_text(&answer) })
}

/// The request body of `create` and `update` from the options given (absent ones are left
/// out, so an update changes only what it names).
pub fn job_body(
    pairs: &[(&str, Option<String>)],
    active: (Option<String>, Option<String>),
) -> Result<Value, DaemonError> {
    let mut body = Map::new();
    for (name, value) in pairs {
        if let Some(value) = value {
            body.insert((*name).to_owned(), json!(value));
        }
    }
    match active {
        (Some(start), Some(end)) => {
            body.insert("active_hours".to_owned(), json!({ "start": start, "end": end }));
        }
        (None, None) => {}
        _ => return Err(DaemonError::Usage("give both --active-start and --active-end".to_owned())),
    }
    Ok(Value::Object(body))
}

/// `systole agent list`: a table, or JSON.
///
/// # Errors
/// When the API cannot be reached or refuses.
pub async fn agents(client: &ApiClient, as_json: bool) -> Result<String, DaemonError> {
    let list = client.call(Method::GET, "/v1/agents", None).await?;
    if as_json {
        return Ok(pretty(&list));
    }
    let mut out =
        format!("{:<12} {:<6} {:<16} {:<28} {}\n", "AGENT", "JOBS", "LLM CALLS TODAY", "PAUSED UNTIL", "LAST EVENT");
    for agent in list["items"].as_array().into_iter().flatten() {
        let budget = &agent["budget"];
        let paused = agent["paused_until"]
            .as_str()
            .and_then(|until| until.parse::<Timestamp>().ok())
            .map_or("-".to_owned(), |until| local_time(until, &zone_of(agent)));
        let last = &agent["last_event"];
        let last = match (last["id"].as_str(), last["status"].as_str()) {
            (Some(id), Some(status)) => format!("{id}: {status}"),
            _ => "-".to_owned(),
        };
        out.push_str(&format!(
            "{:<12} {:<6} {:<16} {:<28} {}\n",
            agent["id"].as_str().unwrap_or("-"),
            agent["jobs"],
            format!("{}/{}", budget["llm_calls_today"], budget["llm_calls_per_day"]),
            paused,
            last
        ));
    }
    Ok(out)
}

/// Prints the answer of an agent verb.
pub fn answer_text(answer: &Value, as_json: bool) -> String {
    if as_json {
        pretty(answer)
    } else {
        job_text(answer)
    }
}

/// `systole events`: follows the live stream, one line per event, until it ends.
///
/// # Errors
/// When the API cannot be reached or refuses.
pub async fn follow(client: &ApiClient) -> Result<(), DaemonError> {
    let mut response =
        client.request(Method::GET, "/v1/events").send().await.map_err(|error| client.unreachable(&error))?;
    if !response.status().is_success() {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let message = body["error"]["message"].as_str().unwrap_or("");
        if body["error"]["code"] == "wrong-daemon" {
            return Err(client.wrong_daemon(message));
        }
        return Err(DaemonError::Usage(format!("the API answered {status}: {message}")));
    }
    let mut buffer = String::new();
    let mut event = String::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| DaemonError::Remote(format!("the stream broke: {e}")))? {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find('\n') {
            let line: String = buffer.drain(..=end).collect();
            let line = line.trim_end();
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                println!("{event} {data}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_nodes_status_names_what_it_runs_and_who_holds_the_rest() {
        let cluster = json!({
            "node": "node-a",
            "partitions_held": [0, 2],
            "partitions": [
                { "partition": 0, "owner": "node-a", "term": 3 },
                { "partition": 1, "owner": "node-b", "term": 1 },
                { "partition": 2, "owner": "node-a", "term": 1 },
                { "partition": 3, "owner": null, "term": 4 },
            ],
            "unreachable": { "node-c": "connection refused" },
        });
        let text = cluster_lines(&cluster);
        assert!(text.contains("node node-a runs partitions 0,2;"), "{text}");
        assert!(text.contains("partitions by node: (none: changing hands) 1, node-a 2, node-b 1"), "{text}");
        assert!(text.contains("node node-c did not answer (connection refused)"), "{text}");
    }
}
