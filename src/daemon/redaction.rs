//! The secret values the daemon reads from the environment (or the token file), gathered
//! once at start-up so transcripts can blank them: the LLM's API key, the API token, the
//! adapters' bot tokens and webhook secrets, the PostgreSQL password, the trace
//! receiver's headers and the variables MCP servers are given. Only values are kept, never logged.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::daemon::config::{Config, LlmConfig, POSTGRES_PASSWORD_ENV_DEFAULT};
use crate::delivery::settings::destinations;
use crate::driver::transcript::Redactor;
use crate::mcp::connection::Secrets;

/// The redactor of `config`'s secrets; `env` reads a variable, `mcp` and `api_token` are
/// what start-up already read.
pub fn transcript_redactor(
    config: &Config,
    mcp: &BTreeMap<String, Secrets>,
    api_token: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Redactor {
    let found = RefCell::new(Vec::new());
    let recording = |name: &str| {
        let value = env(name);
        if let Some(value) = &value {
            found.borrow_mut().push(value.clone());
        }
        value
    };
    // The adapters read their secrets through the lookup they are given: record them.
    let _ = destinations(&config.adapters, recording);
    if let LlmConfig::OpenAi { api_key_env: Some(name), .. } = &config.llm {
        recording(name);
    }
    if let Some(telemetry) = &config.telemetry {
        for variable in telemetry.headers.values() {
            recording(variable);
        }
    }
    if let Some(postgres) = &config.postgres {
        recording(postgres.password_env.as_deref().unwrap_or(POSTGRES_PASSWORD_ENV_DEFAULT));
    }
    let mut secrets = found.into_inner();
    secrets.extend(api_token.map(str::to_owned));
    for server in mcp.values() {
        secrets.extend(server.env.iter().chain(&server.headers).map(|(_, value)| value.clone()));
    }
    Redactor::new(secrets)
}
