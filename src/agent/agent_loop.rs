//! The agent loop of one run: call the LLM with its tools, run the tool calls it asks for,
//! feed the results back, until it answers without tools, a tool signals a stop, or the
//! iteration cap is reached. Every call is recorded in the run's scope; past the run's
//! cap of tool calls, a call answers the model with an error instead of running.

use std::sync::Arc;

use crate::agent::tools::{ToolBox, ToolContext, ToolOutcome, ToolSignal};
use crate::core::text::truncate_chars;
use crate::limits::TOOL_ARGUMENTS_LOGGED_CHARS_MAX;
use crate::ports::llm::{ChatRequest, Llm, LlmError, Message, Role};
use crate::ports::store::StopReason;
use crate::ports::store::ToolCallOutcome;

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
    system_prompt: &Arc<str>,
    prompt: Arc<str>,
    model: Option<&str>,
) -> Result<LoopOutcome, LlmError> {
    let iterations_max = context.settings.loop_iterations_max.max(1);
    let mut messages = vec![Message::system(Arc::clone(system_prompt)), Message::user(prompt)];
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
            content: text.as_deref().unwrap_or_default().into(),
            tool_calls: response.tool_calls.clone(),
            tool_call_id: None,
        });
        for call in &response.tool_calls {
            let outcome = call_recorded(toolbox, context, &call.name, &call.arguments).await;
            if let Some(signal @ ToolSignal::PauseHeartbeats { .. }) = outcome.signal {
                return Ok(LoopOutcome { text, stop: StopReason::PauseHeartbeats, iterations, signal: Some(signal) });
            }
            messages.push(Message {
                role: Role::Tool,
                content: outcome.content.into(),
                tool_calls: Vec::new(),
                tool_call_id: Some(call.id.clone()),
            });
        }
        if iterations >= iterations_max {
            return Ok(LoopOutcome { text, stop: StopReason::IterationCap, iterations, signal: None });
        }
    }
}

/// One tool call, recorded in the run's scope (before it goes out, so a call the run's
/// budget cuts off stays in the record), refused once the run reached its cap.
pub async fn call_recorded(toolbox: &ToolBox, context: &ToolContext, name: &str, arguments: &str) -> ToolOutcome {
    let Some(run) = &context.run else { return toolbox.call(context, name, arguments).await };
    let max = context.settings.tool_calls_max;
    let over_cap = run.calls() >= usize::try_from(max).unwrap_or(usize::MAX);
    let logged_name = toolbox.logged_name(name);
    let index = run.start(logged_name, truncate_chars(arguments, TOOL_ARGUMENTS_LOGGED_CHARS_MAX));
    let started = run.clock.monotonic();
    let outcome = if over_cap {
        ToolOutcome::failed(
            ToolCallOutcome::Cap,
            format!("this run reached its cap of {max} tool calls; answer with what you have"),
        )
    } else {
        toolbox.call(context, name, arguments).await
    };
    run.finish(index, run.clock.monotonic().saturating_since(started), &outcome);
    outcome
}
