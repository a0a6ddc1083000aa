//! `pause_heartbeats(minutes)`: Letta's name and argument. Pauses the agent's timed
//! heartbeats and ends the run at once.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;

use crate::agent::tools::{Tool, ToolContext, ToolOutcome, ToolSignal};
use crate::core::pause::pause_minutes;
use crate::limits::{PAUSE_MINUTES_DEFAULT, PAUSE_MINUTES_MIN};
use crate::ports::llm::ToolSpec;

pub struct PauseHeartbeats;

pub const PAUSE_TOOL_NAME: &str = "pause_heartbeats";

#[async_trait]
impl Tool for PauseHeartbeats {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: PAUSE_TOOL_NAME.to_owned(),
            description: "Temporarily stop your scheduled heartbeats and end this run. Use it when nothing needs \
                          attention for a while. Heartbeats resume by themselves after the given minutes."
                .to_owned(),
            parameters: Arc::new(json!({
                "type": "object",
                "properties": {
                    "minutes": {
                        "type": "integer",
                        "description": "How many minutes to pause heartbeats",
                        "minimum": PAUSE_MINUTES_MIN,
                        "default": PAUSE_MINUTES_DEFAULT
                    }
                },
                "required": []
            })),
        }
    }

    async fn call(&self, context: &ToolContext, arguments: &serde_json::Value) -> ToolOutcome {
        let minutes = match pause_minutes(arguments, context.settings.pause_minutes_max) {
            Ok(minutes) => minutes,
            Err(error) => return ToolOutcome::error(error.to_string()),
        };
        // A model's pause never shortens one already in place (an operator's, say): a run
        // that began before the operator's pause would otherwise end it early (seed
        // 31000050147 of the cluster simulation).
        if !context.operator {
            if let Some(until) = longer_pause(context, minutes).await {
                return ToolOutcome {
                    content: format!("Heartbeats are already paused until {until}; that pause stays."),
                    signal: Some(ToolSignal::PauseHeartbeats { minutes, until }),
                    is_error: false,
                    kind: crate::ports::store::ToolCallOutcome::Ok,
                };
            }
        }
        // Durable and live before the model hears it worked.
        match context.control.pause(&context.agent, minutes).await {
            Ok(pause) => ToolOutcome {
                content: format!("Heartbeats paused for {minutes} minutes, until {}.", pause.record.until),
                signal: Some(ToolSignal::PauseHeartbeats { minutes, until: pause.record.until }),
                is_error: false,
                kind: crate::ports::store::ToolCallOutcome::Ok,
            },
            Err(error) => ToolOutcome::error(format!("the pause could not be saved: {error}")),
        }
    }
}

/// The end of the agent's pause in the store, when it ends after a pause of `minutes` from
/// now would.
async fn longer_pause(context: &ToolContext, minutes: u32) -> Option<jiff::Timestamp> {
    let wanted =
        context.control.clock().wall().checked_add(jiff::SignedDuration::from_mins(i64::from(minutes))).ok()?;
    let pauses = context.control.store().load_pauses().await.ok()?;
    let (_, record) = pauses.into_iter().find(|(agent, _)| *agent == context.agent)?;
    (record.until >= wanted).then_some(record.until)
}
