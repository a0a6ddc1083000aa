//! The agent loop of one run: call the LLM with its tools, run the tool calls it asks for,
//! feed the results back, until it answers without tools, a tool signals a stop, or the
//! iteration cap is reached.

use crate::agent::tools::{ToolBox, ToolContext, ToolSignal};
use crate::ports::llm::{ChatRequest, Llm, LlmError, Message, Role};
use crate::ports::store::StopReason;

/// How the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopOutcome {
    /// The model's text: what the run delivers, if anything.
    pub text: Option<String>,
    pub stop: StopReason,
    /// LLM calls made.
    pub iterations: u32,
    pub signal: Option<ToolSignal>,
}

/// Runs the loop in a fresh context: the system prompt and the heartbeat's prompt.
///
/// # Errors
/// When an LLM call fails.
pub async fn run_loop(
    llm: &dyn Llm,
    toolbox: &ToolBox,
    context: &ToolContext,
    system_prompt: &str,
    prompt: &str,
    model: Option<&str>,
) -> Result<LoopOutcome, LlmError> {
    let iterations_max = context.settings.loop_iterations_max.max(1);
    let mut messages = vec![Message::system(system_prompt), Message::user(prompt)];
    let tools = toolbox.specs();
    let mut iterations = 0;
    loop {
        iterations += 1;
        let request = ChatRequest { model: model.map(str::to_owned), messages: messages.clone(), tools: tools.clone() };
        let response = llm.complete(request).await?;
        let text = response.text.filter(|text| !text.trim().is_empty());
        if response.tool_calls.is_empty() {
            return Ok(LoopOutcome { text, stop: StopReason::Completed, iterations, signal: None });
        }
        messages.push(Message {
            role: Role::Assistant,
            content: text.clone().unwrap_or_default(),
            tool_calls: response.tool_calls.clone(),
            tool_call_id: None,
        });
        for call in &response.tool_calls {
            let outcome = toolbox.call(context, &call.name, &call.arguments).await;
            if let Some(signal @ ToolSignal::PauseHeartbeats { .. }) = outcome.signal {
                return Ok(LoopOutcome { text, stop: StopReason::PauseHeartbeats, iterations, signal: Some(signal) });
            }
            messages.push(Message {
                role: Role::Tool,
                content: outcome.content,
                tool_calls: Vec::new(),
                tool_call_id: Some(call.id.clone()),
            });
        }
        if iterations >= iterations_max {
            return Ok(LoopOutcome { text, stop: StopReason::IterationCap, iterations, signal: None });
        }
    }
}
