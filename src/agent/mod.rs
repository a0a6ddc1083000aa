//! The agent side of a run: one fresh context per run, prompt in, reply out.
//! (The tool-calling loop arrives with the agent-loop issue.)

use crate::ports::llm::{ChatRequest, Llm, LlmError, Message};

/// The system prompt of a heartbeat run unless the config gives another.
pub const HEARTBEAT_SYSTEM_PROMPT_DEFAULT: &str = "You are running a scheduled heartbeat: a task that fires on a \
timer, not a message from the user. Do the task below. If there is nothing that needs the user's attention, reply \
with an empty message and nothing will be sent.";

/// Runs one heartbeat turn in a fresh context and returns the reply text, if any.
///
/// # Errors
/// When the LLM call fails.
pub async fn run_turn(
    llm: &dyn Llm,
    system_prompt: &str,
    prompt: &str,
    model: Option<&str>,
) -> Result<Option<String>, LlmError> {
    let request = ChatRequest {
        model: model.map(str::to_owned),
        messages: vec![Message::system(system_prompt), Message::user(prompt)],
        tools: Vec::new(),
    };
    let response = llm.complete(request).await?;
    Ok(response.text.filter(|text| !text.trim().is_empty()))
}
