//! `[mcp.servers.NAME]`: MCP servers whose tools runs may use, and the agents' and jobs'
//! tool fields, checked against them (ADR 0019). Only variable names are read here; a
//! variable that is missing stops start-up, naming the field (`mcp::servers`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Validator};
use crate::core::tool_check::ToolCheck;
use crate::core::tool_policy::{check_server_name, JobTools, ToolPattern};
use crate::limits::{
    MCP_CONNECT_TIMEOUT_SECS_DEFAULT, MCP_SERVERS_MAX, TOOL_CALL_TIMEOUT_SECS_DEFAULT, TOOL_CALL_TIMEOUT_SECS_MAX,
};
use crate::mcp::settings::{McpSettings, ServerSettings, Transport};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    #[serde(default)]
    servers: BTreeMap<String, RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    cwd: Option<String>,
    /// Names of variables passed through to a stdio server.
    #[serde(default)]
    env: Vec<String>,
    url: Option<String>,
    /// Header name to the variable holding its value (`{ Authorization = "INBOX_TOKEN" }`).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    call_timeout: Option<String>,
    connect_timeout: Option<String>,
    #[serde(default)]
    read_only: Vec<String>,
    #[serde(default)]
    trust_annotations: bool,
    /// `false` leaves the server out (its tools are unavailable).
    enabled: Option<bool>,
}

/// A job's tool fields as the config has them.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJobTools {
    pub(super) tools: Option<Vec<String>>,
    pub(super) write_tools: Option<Vec<String>>,
    pub(super) required_tools: Option<Vec<String>>,
    pub(super) check_tool: Option<String>,
    pub(super) check_arguments: Option<toml::Value>,
}

impl Validator<'_> {
    pub(super) fn mcp(&self, raw: RawMcp) -> Result<McpSettings, ConfigError> {
        if raw.servers.len() > MCP_SERVERS_MAX {
            return Err(
                self.error("mcp.servers", format!("has {} servers; at most {MCP_SERVERS_MAX}", raw.servers.len()))
            );
        }
        let mut servers = McpSettings::new();
        for (name, server) in raw.servers {
            let field = format!("mcp.servers.{name}");
            check_server_name(&name).map_err(|problem| self.error(&field, problem))?;
            if server.enabled == Some(false) {
                continue;
            }
            let settings = self.mcp_server(&field, server)?;
            servers.insert(name, settings);
        }
        Ok(servers)
    }

    fn mcp_server(&self, field: &str, raw: RawServer) -> Result<ServerSettings, ConfigError> {
        let transport = match (raw.command, raw.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(self.error(format!("{field}.command"), "is empty"));
                }
                if !raw.headers.is_empty() {
                    return Err(
                        self.error(format!("{field}.headers"), "are for `url` servers; a stdio server takes `env`")
                    );
                }
                let env = raw
                    .env
                    .into_iter()
                    .map(|name| self.variable(&format!("{field}.env"), name))
                    .collect::<Result<_, _>>()?;
                let base = self.path.parent().unwrap_or_else(|| Path::new("."));
                Transport::Stdio { command, args: raw.args, cwd: raw.cwd.map(|cwd| base.join(cwd)), env }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(
                        self.error(format!("{field}.url"), format!("{url:?} is not an http:// or https:// URL"))
                    );
                }
                if !raw.args.is_empty() || raw.cwd.is_some() || !raw.env.is_empty() {
                    return Err(self.error(format!("{field}.url"), "a `url` server takes no `args`, `cwd` or `env`"));
                }
                let mut headers = BTreeMap::new();
                for (header, variable) in raw.headers {
                    let valid = !header.is_empty() && header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
                    if !valid {
                        return Err(self.error(format!("{field}.headers"), format!("{header:?} is not a header name")));
                    }
                    let variable = self.variable(&format!("{field}.headers.{header}"), variable)?;
                    headers.insert(header, variable);
                }
                Transport::Http { url, headers }
            }
            (Some(_), Some(_)) => return Err(self.error(format!("{field}.url"), "give `command` or `url`, not both")),
            (None, None) => {
                let problem = "is missing: give `command` (a stdio server) or `url` (streamable HTTP)";
                return Err(self.error(format!("{field}.command"), problem));
            }
        };
        let call_timeout =
            self.tool_timeout(&format!("{field}.call_timeout"), raw.call_timeout, TOOL_CALL_TIMEOUT_SECS_DEFAULT)?;
        let connect_timeout = self.tool_timeout(
            &format!("{field}.connect_timeout"),
            raw.connect_timeout,
            MCP_CONNECT_TIMEOUT_SECS_DEFAULT,
        )?;
        let name = field.rsplit('.').next().unwrap_or_default();
        let read_only = raw
            .read_only
            .iter()
            .map(|tool| ToolPattern::parse(&format!("{name}/{tool}")))
            .collect::<Result<_, _>>()
            .map_err(|problem| self.error(format!("{field}.read_only"), problem))?;
        Ok(ServerSettings {
            transport,
            call_timeout,
            connect_timeout,
            read_only,
            trust_annotations: raw.trust_annotations,
        })
    }

    fn tool_timeout(&self, field: &str, text: Option<String>, default_secs: u64) -> Result<Duration, ConfigError> {
        match text {
            Some(text) => {
                self.duration(field, &text, Duration::from_secs(1), Duration::from_secs(TOOL_CALL_TIMEOUT_SECS_MAX))
            }
            None => Ok(Duration::from_secs(default_secs)),
        }
    }

    /// An agent's `tools`: patterns naming configured servers only, so a typo is an error
    /// here, not a run that quietly has fewer tools.
    pub(super) fn agent_tools(
        &self,
        field: &str,
        raw: Option<&[String]>,
        servers: &McpSettings,
    ) -> Result<Vec<ToolPattern>, ConfigError> {
        let field = format!("{field}.tools");
        let mut patterns = Vec::new();
        for text in raw.unwrap_or_default() {
            let pattern = ToolPattern::parse(text).map_err(|problem| self.error(&field, problem))?;
            if !servers.contains_key(&pattern.server) {
                let known: Vec<&str> = servers.keys().map(String::as_str).collect();
                let known = if known.is_empty() { "none are configured".to_owned() } else { known.join(", ") };
                return Err(self.error(&field, format!("{text:?} names no [mcp.servers] entry (servers: {known})")));
            }
            patterns.push(pattern);
        }
        Ok(patterns)
    }

    /// A job's tool fields, within its agent's list.
    pub(super) fn job_tools(
        &self,
        field: &str,
        raw: &RawJobTools,
        agent: &[ToolPattern],
    ) -> Result<JobTools, ConfigError> {
        let named = |(name, problem): (&str, String)| self.error(format!("{field}.{name}"), problem);
        let tools = JobTools::from_fields(
            raw.tools.as_deref(),
            raw.write_tools.as_deref(),
            raw.required_tools.as_deref(),
            agent,
        )
        .map_err(named)?;
        let check = match (&raw.check_tool, &raw.check_arguments) {
            (None, None) => None,
            (None, Some(_)) => return Err(self.error(format!("{field}.check_arguments"), "needs `check_tool`")),
            (Some(tool), arguments) => {
                let arguments = arguments
                    .as_ref()
                    .map(serde_json::to_value)
                    .transpose()
                    .map_err(|error| self.error(format!("{field}.check_arguments"), error.to_string()))?;
                Some(ToolCheck::from_fields(tool, arguments).map_err(named)?)
            }
        };
        tools.with_check(check, agent).map_err(named)
    }
}
