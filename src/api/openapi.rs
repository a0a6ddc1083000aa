//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the API. A test reads the router's
//! source and requires the same paths and methods here, and a validator checks the document.

use axum::Json;
use serde_json::{json, Map, Value};

use crate::limits::API_JOBS_PAGE_MAX;

/// An operation: summary, path parameters, request body schema (if any), success status
/// and schema, and the error statuses it may answer.
struct Operation {
    summary: &'static str,
    params: &'static [&'static str],
    body: Option<Value>,
    success: (&'static str, Value),
    errors: &'static [&'static str],
}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn parameter(name: &str) -> Value {
    let (description, schema) = match name {
        "collection" => (
            "`heartbeats` (with the agent heartbeat) or `cron`",
            json!({ "type": "string", "enum": ["heartbeats", "cron"] }),
        ),
        "agent" => ("an agent id", json!({ "type": "string" })),
        "id" => ("a heartbeat or cron job id", json!({ "type": "string" })),
        "slot" => (
            "a run's slot (RFC 3339), or `latest` for the newest run that called the model",
            json!({ "type": "string" }),
        ),
        _ => ("a user turn id", json!({ "type": "string" })),
    };
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": schema })
}

fn error_text(status: &str) -> &'static str {
    match status {
        "400" => "the body is not a JSON object",
        "401" => "the bearer token is missing or wrong",
        "404" => "no such agent, job or route",
        "409" => {
            "a conflict: the id exists, the job is disabled or comes from the config file; or, on a node of a \
             cluster, no node runs the agent right now (code `not-owner`), or, for a reload, another node's file \
             holds other heartbeats (code `nodes-disagree`)"
        }
        "502" => {
            "on a node of a cluster: the node that runs the agent did not answer the forwarded call (code \
             `owner-unreachable`; the message says whether anything may have been done)"
        }
        "422" => "a value is refused; the message names the field",
        _ => "the store or the engine did not answer",
    }
}

fn operation(op: Operation) -> Value {
    let mut responses = Map::new();
    let (status, schema) = op.success;
    let content = if schema.is_null() { json!(null) } else { json!({ "application/json": { "schema": schema } }) };
    let mut success = json!({ "description": "done" });
    if !content.is_null() {
        success["content"] = content;
    }
    responses.insert(status.to_owned(), success);
    for status in
        ["401", "503"].iter().chain(op.errors).chain(op.params.first().filter(|p| **p == "agent").map(|_| &"502"))
    {
        let error = json!({
            "description": error_text(status),
            "content": { "application/json": { "schema": reference("Error") } }
        });
        responses.insert((*status).to_owned(), error);
    }
    let mut value = json!({
        "summary": op.summary,
        "parameters": op.params.iter().map(|name| parameter(name)).collect::<Vec<_>>(),
        "responses": responses,
        "security": [{ "bearer": [] }],
    });
    if let Some(schema) = op.body {
        value["requestBody"] = json!({ "required": true, "content": { "application/json": { "schema": schema } } });
    }
    value
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

fn any_object() -> Value {
    json!({ "type": "object" })
}

/// The whole document.
pub fn document() -> Value {
    let job = reference("Job");
    let jobs = json!({ "type": "object", "properties": {
        "items": { "type": "array", "items": job.clone() },
        "next_cursor": { "type": ["string", "null"] },
    } });
    let fields = reference("JobFields");
    const AGENT: &[&str] = &["agent"];
    const JOB: &[&str] = &["agent", "collection", "id"];
    const RUN: &[&str] = &["agent", "collection", "id", "slot"];
    let mut paths = Map::new();
    let mut add = |path: &str, method: &str, op: Operation| {
        let entry = paths.entry(path.to_owned()).or_insert_with(|| json!({}));
        entry[method] = operation(op);
    };
    add(
        "/healthz",
        "get",
        Operation {
            summary: "Liveness; needs no token",
            params: &[],
            body: None,
            success: ("200", any_object()),
            errors: &[],
        },
    );
    add(
        "/metrics",
        "get",
        Operation {
            summary: "Prometheus text format (version 0.0.4)",
            params: &[],
            body: None,
            success: ("200", Value::Null),
            errors: &[],
        },
    );
    add(
        "/",
        "get",
        Operation {
            summary: "The status page (HTML); needs no token",
            params: &[],
            body: None,
            success: ("200", Value::Null),
            errors: &[],
        },
    );
    add(
        "/v1/status",
        "get",
        Operation {
            summary: "Every agent and job, a page at a time in key order (`next_cursor` goes in `after`): \
                      next run, last result, would_run_now and the guard's reason",
            params: &[],
            body: None,
            success: ("200", any_object()),
            errors: &["422"],
        },
    );
    add(
        "/v1/agents",
        "get",
        Operation { summary: "List agents", params: &[], body: None, success: ("200", any_object()), errors: &[] },
    );
    add(
        "/v1/agents/{agent}",
        "get",
        Operation {
            summary: "Show an agent: pause, today's LLM calls, last run event",
            params: AGENT,
            body: None,
            success: ("200", any_object()),
            errors: &["404"],
        },
    );
    add(
        "/v1/agents/{agent}/pause",
        "post",
        Operation {
            summary: "Pause the agent's timed heartbeats",
            params: AGENT,
            body: Some(object(json!({ "minutes": { "type": "integer", "minimum": 1 } }), &["minutes"])),
            success: ("200", any_object()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/resume",
        "post",
        Operation {
            summary: "End the agent's pause",
            params: AGENT,
            body: None,
            success: ("200", any_object()),
            errors: &["404", "409"],
        },
    );
    add(
        "/v1/agents/{agent}/wake",
        "post",
        Operation {
            summary: "Wake the agent heartbeat now; `text` is queued as a system event first",
            params: AGENT,
            body: Some(object(
                json!({ "reason": { "type": "string", "description": "manual, hook:NAME or exec-event" }, "text": { "type": "string" } }),
                &[],
            )),
            success: ("202", any_object()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/events",
        "post",
        Operation {
            summary: "Queue a system event for the agent heartbeat",
            params: AGENT,
            body: Some(object(
                json!({ "text": { "type": "string" }, "mode": { "type": "string", "enum": ["now", "next-heartbeat"] } }),
                &["text"],
            )),
            success: ("202", any_object()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/user-turns",
        "post",
        Operation {
            summary: "Begin a user turn: holds the agent's lane until ended or timed out",
            params: AGENT,
            body: Some(object(json!({ "timeout_secs": { "type": "integer", "minimum": 1 } }), &[])),
            success: ("201", any_object()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/user-turns/{turn}",
        "delete",
        Operation {
            summary: "End a user turn",
            params: &["agent", "turn"],
            body: None,
            success: ("204", Value::Null),
            errors: &["404"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}",
        "get",
        Operation {
            summary: "List the agent's heartbeats or cron jobs, a page at a time by id (`next_cursor` goes in `after`)",
            params: &["agent", "collection"],
            body: None,
            success: ("200", jobs),
            errors: &["404", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}",
        "post",
        Operation {
            summary: "Create one, with the `heartbeat` and `cron` tools' fields and guardrails",
            params: &["agent", "collection"],
            body: Some(fields.clone()),
            success: ("201", job.clone()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}/{id}",
        "get",
        Operation { summary: "Show one", params: JOB, body: None, success: ("200", job.clone()), errors: &["404"] },
    );
    add(
        "/v1/agents/{agent}/{collection}/{id}",
        "patch",
        Operation {
            summary: "Update one made at run time (only the fields given)",
            params: JOB,
            body: Some(fields),
            success: ("200", job.clone()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}/{id}",
        "delete",
        Operation {
            summary: "Delete one made at run time",
            params: JOB,
            body: None,
            success: ("204", Value::Null),
            errors: &["404", "409"],
        },
    );
    for (action, summary) in [("enable", "Enable (also clears a tripped breaker)"), ("disable", "Disable")] {
        add(
            &format!("/v1/agents/{{agent}}/{{collection}}/{{id}}/{action}"),
            "post",
            Operation { summary, params: JOB, body: None, success: ("200", job.clone()), errors: &["404", "409"] },
        );
    }
    add(
        "/v1/agents/{agent}/{collection}/{id}/trigger",
        "post",
        Operation {
            summary: "Run now, once, under a slot of its own",
            params: JOB,
            body: None,
            success: ("202", any_object()),
            errors: &["404", "409"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}/{id}/backfill",
        "post",
        Operation {
            summary: "Run the slots a past window held that were never decided, oldest first",
            params: JOB,
            body: Some(object(
                json!({ "from": { "type": "string", "format": "date-time" }, "to": { "type": "string", "format": "date-time" } }),
                &["from", "to"],
            )),
            success: ("202", any_object()),
            errors: &["400", "404", "409", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}/{id}/runs",
        "get",
        Operation {
            summary: "The run log, newest first; `next_cursor` goes in `before`",
            params: JOB,
            body: None,
            success: ("200", any_object()),
            errors: &["404", "422"],
        },
    );
    add(
        "/v1/agents/{agent}/{collection}/{id}/runs/{slot}/transcript",
        "get",
        Operation {
            summary: "What the model was sent and answered in the run of `slot` (RFC 3339, or `latest`): \
                      every message, tool calls and results included, bounded, secrets blanked",
            params: RUN,
            body: None,
            success: ("200", any_object()),
            errors: &["404", "422"],
        },
    );
    add(
        "/v1/events",
        "get",
        Operation {
            summary: "Server-sent events: `run` and `state`",
            params: &[],
            body: None,
            success: ("200", Value::Null),
            errors: &[],
        },
    );
    add(
        "/v1/mcp",
        "get",
        Operation {
            summary: "The tool servers (MCP), their state and tools, and which agents and jobs may use each",
            params: &[],
            body: None,
            success: ("200", any_object()),
            errors: &[],
        },
    );
    add(
        "/v1/reload",
        "post",
        Operation {
            summary: "Re-read the config file; a file that does not validate changes nothing",
            params: &[],
            body: None,
            success: ("200", any_object()),
            errors: &["409", "422"],
        },
    );
    add(
        "/v1/openapi.json",
        "get",
        Operation { summary: "This document", params: &[], body: None, success: ("200", any_object()), errors: &[] },
    );
    let runs = paths.get_mut("/v1/agents/{agent}/{collection}/{id}/runs").and_then(|path| path.get_mut("get"));
    if let Some(parameters) = runs.and_then(|get| get["parameters"].as_array_mut()) {
        parameters.push(json!({ "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 1 } }));
        parameters
            .push(json!({ "name": "before", "in": "query", "schema": { "type": "string", "format": "date-time" } }));
    }
    for paged in ["/v1/status", "/v1/agents/{agent}/{collection}"] {
        let get = paths.get_mut(paged).and_then(|path| path.get_mut("get"));
        if let Some(parameters) = get.and_then(|get| get["parameters"].as_array_mut()) {
            let limit = json!({ "type": "integer", "minimum": 1, "maximum": API_JOBS_PAGE_MAX });
            parameters.push(json!({ "name": "limit", "in": "query", "schema": limit }));
            parameters.push(json!({ "name": "after", "in": "query", "schema": { "type": "string" } }));
        }
    }
    for open in ["/healthz", "/"] {
        if let Some(get) = paths.get_mut(open).and_then(|path| path.get_mut("get")) {
            get["security"] = json!([]);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "systole operator API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A request may name the store it means in the `Systole-Store` header (as `GET /v1/status` \
                            reports it: `sqlite:/path` or `postgres://user@host:port/db`, with `node ID` on a node \
                            of a cluster); a daemon serving another store refuses it with 409, code `wrong-daemon`, \
                            before doing anything. The CLI always sends it. On a node of a cluster, a call about \
                            an agent another node runs is forwarded to that node and answered by it (the \
                            `Systole-Node` header names the node that answered), `GET /v1/status` and \
                            `GET /v1/agents` show every agent of the cluster with its `owner`, and a reload \
                            reaches every node."
        },
        "paths": paths,
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Error": object(json!({ "error": object(json!({ "code": { "type": "string" }, "message": { "type": "string" } }), &["code", "message"]) }), &["error"]),
                "Job": { "type": "object", "properties": {
                    "id": { "type": "string" }, "agent": { "type": "string" }, "kind": { "type": "string" },
                    "enabled": { "type": "boolean" }, "schedule": { "type": "string" },
                    "next_run_at": { "type": ["string", "null"] }, "would_run_now": { "type": ["boolean", "null"] },
                    "reason": { "type": ["string", "null"] },
                    "breaker": object(json!({
                        "state": { "type": "string", "enum": ["closed", "open", "half-open"] },
                        "consecutive_failures": { "type": "integer" },
                        "opened_at": { "type": ["string", "null"] }, "probe_at": { "type": ["string", "null"] }
                    }), &["state", "consecutive_failures"]),
                    "timezone": { "type": "string", "description": "the zone the job's times read in: its cron's, its active hours', or its agent's" },
                    "recent": { "type": "array", "description": "the last day's runs, oldest first (at most 48)", "items": object(json!({
                        "slot": { "type": "string" },
                        "outcome": { "type": "string", "enum": ["ok", "alert", "silent", "skipped", "failed", "running"] },
                        "why": { "type": ["string", "null"] }
                    }), &["slot", "outcome"]) },
                    "last_output": { "type": ["string", "null"], "description": "the newest run's reply preview" }
                } },
                "JobFields": { "type": "object", "properties": {
                    "id": { "type": "string" }, "prompt": { "type": "string" }, "every": { "type": "string" },
                    "interval_secs": { "type": "integer" }, "cron": { "type": "string" }, "timezone": { "type": "string" },
                    "at": { "type": "string" }, "target": { "type": "string" }, "delivery_target": { "type": "string" },
                    "delivery": { "type": "string", "enum": ["announce", "silent"] },
                    "active_hours": { "type": "object" }, "catch_up": { "type": "string" }, "overlap": { "type": "string" },
                    "jitter": { "type": "string" }, "delete_after_run": { "type": "boolean" },
                    "tools": { "type": "array", "items": { "type": "string" } },
                    "write_tools": { "type": "array", "items": { "type": "string" } },
                    "required_tools": { "type": "array", "items": { "type": "string" } },
                    "model": { "type": "string" },
                    "check_tool": { "type": "string", "description": "a tool called before each run; a quiet answer skips the model" },
                    "check_arguments": { "type": "object" }
                } }
            }
        }
    })
}

pub async fn serve() -> Json<Value> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use super::document;

    /// The routes `router()` registers, read from its source: (method, path).
    fn routes() -> Vec<(String, String)> {
        let source = include_str!("mod.rs");
        let body = source.split("pub fn router").nth(1).expect("router() in mod.rs");
        let mut routes = Vec::new();
        let mut prefix = "/v1";
        for line in body.lines() {
            if line.contains("Router::new()") && line.trim_start().starts_with("Router::new()") {
                prefix = ""; // the outer router follows the nested one
            }
            let Some(rest) = line.trim().strip_prefix(".route(\"") else { continue };
            let (path, handlers) = rest.split_once('"').expect("a quoted path");
            for method in ["get", "post", "patch", "delete"] {
                if handlers.contains(&format!("{method}(")) || handlers.contains(&format!(".{method}(")) {
                    let path =
                        if path == "/" && prefix.is_empty() { "/".to_owned() } else { format!("{prefix}{path}") };
                    routes.push((method.to_owned(), path));
                }
            }
        }
        routes.sort();
        routes
    }

    #[test]
    fn the_document_has_exactly_the_routes_of_the_router() {
        let document = document();
        let mut documented: Vec<(String, String)> = document["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .flat_map(|(path, item)| {
                item.as_object().expect("path item").keys().map(move |m| (m.clone(), path.clone()))
            })
            .collect();
        documented.sort();
        let routes = routes();
        assert!(routes.len() >= 20, "the router's routes were read: {routes:?}");
        assert_eq!(documented, routes);
    }
}
