//! The agent side of a run: a fresh context per run, an agent loop with tools, and the
//! tools themselves.

pub mod agent_loop;
pub mod settings;
pub mod tools;

/// The system prompt of a heartbeat run unless the config gives another.
pub const HEARTBEAT_SYSTEM_PROMPT_DEFAULT: &str = "You are running a scheduled heartbeat: a task that fires on a \
timer, not a message from the user. Do the task below. If there is nothing that needs the user's attention, reply \
with an empty message and nothing will be sent. If nothing will need attention for a while, you may call \
pause_heartbeats.";
