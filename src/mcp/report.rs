//! What operators see of the tool servers (`GET /v1/mcp`, `systole mcp list` and
//! `mcp check`): each server's state and tools, with the server's own hints beside the
//! operator's read-only mark, and which agents and jobs may use each tool under the
//! policy a run applies (ADR 0019).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::agent::settings::AgentSettings;
use crate::core::heartbeat::HeartbeatDef;
use crate::core::ids::AgentId;
use crate::core::tool_policy::{tools_for_run, JobTools, OfferedTool};
use crate::ports::tools::{Catalog, ServerState, ServerTool};

/// The catalog as JSON, each tool with `agents` (whose list includes it) and `jobs`
/// (`agent/job` that would be offered it now).
pub fn catalog_json(catalog: &Catalog, agents: &BTreeMap<AgentId, AgentSettings>, jobs: &[HeartbeatDef]) -> Value {
    let servers: Vec<Value> = catalog
        .values()
        .map(|server| {
            let (why, retry_at) = match &server.state {
                ServerState::Down { why, retry_at } => (Some(why.clone()), retry_at.map(|at| at.to_string())),
                _ => (None, None),
            };
            let tools: Vec<Value> = server.tools.iter().map(|tool| tool_json(tool, agents, jobs)).collect();
            json!({
                "name": server.name,
                "transport": server.transport,
                "state": server.state.as_str(),
                "why": why,
                "retry_at": retry_at,
                "restarts": server.restarts,
                "tools": tools,
            })
        })
        .collect();
    json!({ "servers": servers })
}

fn tool_json(tool: &ServerTool, agents: &BTreeMap<AgentId, AgentSettings>, jobs: &[HeartbeatDef]) -> Value {
    let offered = [OfferedTool { name: tool.name.clone(), read_only: tool.read_only }];
    let by_agent = |agent: &AgentId, job_tools: &JobTools| {
        agents
            .get(agent)
            .is_some_and(|settings| !tools_for_run(&settings.tools, job_tools, &offered, |_| None).offered.is_empty())
    };
    let agent_names: Vec<&str> = agents
        .iter()
        .filter(|(_, settings)| tool_allowed_to_agent(settings, tool))
        .map(|(agent, _)| agent.as_str())
        .collect();
    let job_names: Vec<String> =
        jobs.iter().filter(|def| by_agent(&def.key.agent, &def.tools)).map(|def| def.key.to_string()).collect();
    let hints = &tool.hints;
    json!({
        "name": tool.name.to_string(),
        "description": tool.description,
        "read_only": tool.read_only,
        "hints": {
            "read_only": hints.read_only,
            "destructive": hints.destructive,
            "idempotent": hints.idempotent,
            "open_world": hints.open_world,
        },
        "agents": agent_names,
        "jobs": job_names,
    })
}

/// The configured agents that may use one of the catalog's tools: only their jobs can be
/// listed under a tool, so only theirs need be read (a million others' rows were read at
/// each look at the catalog).
pub fn agents_with_tools<'a>(catalog: &Catalog, agents: &'a BTreeMap<AgentId, AgentSettings>) -> Vec<&'a AgentId> {
    let tools: Vec<&ServerTool> = catalog.values().flat_map(|server| &server.tools).collect();
    agents
        .iter()
        .filter(|(_, settings)| tools.iter().any(|tool| tool_allowed_to_agent(settings, tool)))
        .map(|(agent, _)| agent)
        .collect()
}

fn tool_allowed_to_agent(settings: &AgentSettings, tool: &ServerTool) -> bool {
    settings.tools.iter().any(|pattern| pattern.matches(&tool.name))
}

/// The catalog as a terminal table: a line per server, then one per tool.
pub fn catalog_text(catalog: &Value) -> String {
    let mut out = String::new();
    for server in catalog["servers"].as_array().into_iter().flatten() {
        let state = match server["why"].as_str() {
            Some(why) => format!("{} ({why})", server["state"].as_str().unwrap_or("?")),
            None => server["state"].as_str().unwrap_or("?").to_owned(),
        };
        out.push_str(&format!(
            "{} [{}] {state}, {} restart(s)\n",
            server["name"].as_str().unwrap_or("?"),
            server["transport"].as_str().unwrap_or("?"),
            server["restarts"]
        ));
        for tool in server["tools"].as_array().into_iter().flatten() {
            let access = if tool["read_only"] == true { "read-only" } else { "may write" };
            let hint = match tool["hints"]["read_only"].as_bool() {
                Some(true) => ", server hints read-only",
                Some(false) => ", server hints it writes",
                None => "",
            };
            let list = |key: &str| {
                let names: Vec<&str> = tool[key].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            };
            out.push_str(&format!(
                "  {:<32} {access}{hint}; agents: {}; jobs: {}\n",
                tool["name"].as_str().unwrap_or("?"),
                list("agents"),
                list("jobs")
            ));
        }
    }
    if out.is_empty() {
        out.push_str("no MCP servers are configured ([mcp.servers.NAME] in the config)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tool_policy::{ToolName, ToolPattern};
    use crate::ports::tools::{ServerView, ToolHints};

    fn catalog(tools: &[&str]) -> Catalog {
        let tools = tools
            .iter()
            .map(|tool| ServerTool {
                name: ToolName::new("inbox", *tool),
                description: String::new(),
                input_schema: json!({ "type": "object" }),
                hints: ToolHints::default(),
                read_only: true,
            })
            .collect();
        let view =
            ServerView { name: "inbox".into(), transport: "stdio", state: ServerState::Ready, tools, restarts: 0 };
        BTreeMap::from([("inbox".to_owned(), view)])
    }

    fn agent(patterns: &[&str]) -> AgentSettings {
        let tools = patterns.iter().map(|pattern| ToolPattern::parse(pattern).expect("a pattern")).collect();
        AgentSettings { tools, ..AgentSettings::default() }
    }

    #[test]
    fn only_the_agents_whose_list_matches_a_served_tool_have_their_jobs_read() {
        let agents = BTreeMap::from([
            (AgentId::new("all").expect("valid"), agent(&["inbox/*"])),
            (AgentId::new("search").expect("valid"), agent(&["inbox/search"])),
            (AgentId::new("elsewhere").expect("valid"), agent(&["web/*"])),
            (AgentId::new("none").expect("valid"), agent(&[])),
        ]);
        let names = |catalog: &Catalog| -> Vec<String> {
            agents_with_tools(catalog, &agents).iter().map(|agent| agent.to_string()).collect()
        };
        assert_eq!(names(&catalog(&["search", "archive"])), ["all", "search"]);
        assert_eq!(names(&catalog(&["archive"])), ["all"], "a list that names another tool of the server");
        assert!(names(&catalog(&[])).is_empty(), "a server with no tools yet");
    }
}
