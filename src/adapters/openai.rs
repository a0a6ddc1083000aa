//! An OpenAI-compatible chat-completions client (Ollama, vLLM, llama.cpp's server and
//! hosted APIs all speak it), with tool calling and bounded retries on 429 and 5xx that
//! honour `Retry-After`. Retry delays go through the clock port.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::core::usage::TokenUsage;
use crate::limits::{LLM_ATTEMPTS_MAX_DEFAULT, LLM_RETRY_AFTER_SECS_MAX, LLM_RETRY_DELAY_MS_BASE};
use crate::ports::clock::Clock;
use crate::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError, ToolCall};

const ERROR_BODY_CHARS_MAX: usize = 500;

#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    endpoint: String,
    model: String,
    api_key: Option<String>,
    clock: Arc<dyn Clock>,
    attempts_max: u32,
}

impl OpenAiClient {
    /// A client for `base_url` (like `http://127.0.0.1:11434/v1`).
    ///
    /// # Errors
    /// When the HTTP client cannot be built (no TLS backend).
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        timeout: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .user_agent(crate::ports::http::USER_AGENT)
            .timeout(timeout)
            .build()
            .map_err(|error| LlmError::Unreachable(format!("cannot build HTTP client: {error}")))?;
        let endpoint = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Ok(Self { http, endpoint, model: model.to_owned(), api_key, clock, attempts_max: LLM_ATTEMPTS_MAX_DEFAULT })
    }

    /// Sets how many attempts a request gets (at least one).
    pub fn with_attempts_max(mut self, attempts_max: u32) -> Self {
        self.attempts_max = attempts_max.max(1);
        self
    }

    /// How long to wait before another attempt after `error`, or `None` when another
    /// attempt cannot help, or the endpoint asks for a longer wait than we allow.
    fn retry_delay(error: &LlmError, attempt: u32) -> Option<Duration> {
        let backoff =
            Duration::from_millis(LLM_RETRY_DELAY_MS_BASE.saturating_mul(1 << attempt.saturating_sub(1).min(10)));
        match error {
            LlmError::RateLimited { retry_after_secs: Some(secs) } if *secs > LLM_RETRY_AFTER_SECS_MAX => None,
            LlmError::RateLimited { retry_after_secs: Some(secs) } => Some(Duration::from_secs(*secs)),
            LlmError::RateLimited { retry_after_secs: None } => Some(backoff),
            LlmError::Status { status, .. } if *status >= 500 => Some(backoff),
            _ => None,
        }
    }

    async fn attempt(&self, body: &Value) -> Result<ChatResponse, LlmError> {
        let mut http_request = self.http.post(&self.endpoint).json(body);
        if let Some(key) = &self.api_key {
            http_request = http_request.bearer_auth(key);
        }
        let response = http_request.send().await.map_err(transport_error)?;
        read_response(response).await
    }
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ReplyUsage>,
}

/// `usage` as OpenAI reports it; proxies in front of other providers (LiteLLM) add the
/// Anthropic-style `cache_read_input_tokens` beside or instead of the details object.
#[derive(Deserialize)]
struct ReplyUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl ReplyUsage {
    fn tokens(&self) -> TokenUsage {
        let cached = self.prompt_tokens_details.as_ref().and_then(|details| details.cached_tokens);
        TokenUsage {
            input: self.prompt_tokens,
            cached: cached.or(self.cache_read_input_tokens).unwrap_or(0),
            output: self.completion_tokens,
            reasoning: self
                .completion_tokens_details
                .as_ref()
                .and_then(|details| details.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

#[derive(Deserialize)]
struct Choice {
    message: ReplyMessage,
}

#[derive(Deserialize)]
struct ReplyMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ReplyToolCall>,
}

#[derive(Deserialize)]
struct ReplyToolCall {
    id: String,
    function: ReplyFunction,
}

#[derive(Deserialize)]
struct ReplyFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

fn request_body(model: &str, request: &ChatRequest) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| {
            let mut value = json!({ "role": message.role, "content": message.content });
            if !message.tool_calls.is_empty() {
                value["tool_calls"] = message
                    .tool_calls
                    .iter()
                    .map(|call| json!({ "id": call.id, "type": "function", "function": { "name": call.name, "arguments": call.arguments } }))
                    .collect();
            }
            if let Some(id) = &message.tool_call_id {
                value["tool_call_id"] = json!(id);
            }
            value
        })
        .collect();
    let mut body = json!({ "model": request.model.as_deref().unwrap_or(model), "messages": messages });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| json!({ "type": "function", "function": { "name": tool.name, "description": tool.description, "parameters": tool.parameters } }))
            .collect();
    }
    body
}

#[async_trait]
impl Llm for OpenAiClient {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let body = request_body(&self.model, &request);
        let mut attempt = 1;
        loop {
            match self.attempt(&body).await {
                Err(error) if attempt < self.attempts_max => match Self::retry_delay(&error, attempt) {
                    Some(delay) => {
                        tracing::debug!(attempt, delay_ms = delay.as_millis() as u64, %error, "LLM request will be retried");
                        self.clock.sleep(delay).await;
                        attempt += 1;
                    }
                    None => return Err(error),
                },
                result => return result,
            }
        }
    }
}

fn transport_error(error: reqwest::Error) -> LlmError {
    if error.is_timeout() {
        LlmError::Timeout
    } else {
        LlmError::Unreachable(crate::adapters::http_error::describe(&error))
    }
}

async fn read_response(response: reqwest::Response) -> Result<ChatResponse, LlmError> {
    let status = response.status();
    if status.as_u16() == 429 {
        let retry_after_secs = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse().ok());
        return Err(LlmError::RateLimited { retry_after_secs });
    }
    let body = response.text().await.map_err(transport_error)?;
    if !status.is_success() {
        let body: String = body.chars().take(ERROR_BODY_CHARS_MAX).collect();
        return Err(LlmError::Status { status: status.as_u16(), body });
    }
    let completion: Completion =
        serde_json::from_str(&body).map_err(|error| LlmError::Malformed(format!("not a chat completion: {error}")))?;
    let usage = completion.usage.as_ref().map(ReplyUsage::tokens);
    let message = completion
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::Malformed("the reply has no choices".to_owned()))?
        .message;
    let tool_calls = message
        .tool_calls
        .into_iter()
        .map(|call| ToolCall { id: call.id, name: call.function.name, arguments: call.function.arguments })
        .collect();
    Ok(ChatResponse { text: message.content, tool_calls, usage })
}
