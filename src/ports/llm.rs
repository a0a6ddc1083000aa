//! The LLM port: one chat completion, messages in, text and/or tool calls out.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::core::usage::TokenUsage;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Shared: a run's requests and its transcript carry the same texts, and every run
    /// sends the engine's system prompt.
    pub content: Arc<str>,
    /// The tool calls an assistant message asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `Tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(content: impl Into<Arc<str>>) -> Self {
        Self { role: Role::System, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    pub fn user(content: impl Into<Arc<str>>) -> Self {
        Self { role: Role::User, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }
}

/// A tool the model may call: a name, what it does, and a JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Shared: every run's request carries the built-in tools' schemas.
    pub parameters: Arc<serde_json::Value>,
}

/// A tool call the model asked for. `arguments` is the raw JSON text the model wrote:
/// it may be malformed, and the tool layer must say so instead of failing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// Overrides the provider's default model, when set.
    pub model: Option<String>,
    pub messages: Vec<Message>,
    /// Shared: a run's requests offer the same tools, and runs share the engine's.
    pub tools: Arc<[ToolSpec]>,
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatResponse {
    /// The text of the reply, if any. `None` and an empty string both mean "nothing to say".
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// The tokens the provider reports for this completion; `None` when it reports none.
    pub usage: Option<TokenUsage>,
}

/// Why a completion failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    #[error("LLM endpoint unreachable: {0}")]
    Unreachable(String),
    #[error("LLM request timed out")]
    Timeout,
    #[error("LLM endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("LLM rate limit (HTTP 429)")]
    RateLimited { retry_after_secs: Option<u64> },
    #[error("LLM reply could not be read: {0}")]
    Malformed(String),
}

impl LlmError {
    /// Whether the provider refused the request in a way no retry heals: a bad key (401),
    /// a spend cap or an unpaid bill (402), no access to the model (403). The breaker opens
    /// on the first such failure; its half-open probe finds out when it is fixed.
    pub fn needs_operator(&self) -> bool {
        matches!(self, LlmError::Status { status: 401..=403, .. })
    }
}

/// A chat-completion provider.
#[async_trait]
pub trait Llm: Send + Sync + 'static {
    /// Runs one completion.
    ///
    /// # Errors
    /// Whenever the provider cannot produce a reply; see [`LlmError`].
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError>;
}
