//! The agent's system-events queue (OpenClaw spec 2.1-2.4): main-mode cron jobs put
//! `[CRON:id] text` into it and wake the agent heartbeat, which lists the events in its
//! prompt and consumes them only after a successful run. The stores persist the queue;
//! these are its rules.

use std::time::Duration;

use jiff::Timestamp;

use crate::limits::{SYSTEM_EVENTS_PER_AGENT_MAX, SYSTEM_EVENT_TTL_SECS};

/// The spec's prompt for a heartbeat that has events to process (2.4), verbatim.
pub const CRON_EVENT_PROMPT: &str = "Scheduled tasks have fired and their details are shown above. \
Process each task and relay the results. \
If you completed all tasks successfully, include HEARTBEAT_OK at the end.";

/// The spec's prompt for a heartbeat woken by async commands that finished (2.4), verbatim.
pub const EXEC_EVENT_PROMPT: &str = "An async command you ran earlier has completed. The result is shown above. \
Relay the output to the user — share relevant output on success, explain what went wrong on failure.";

/// How an exec event's text starts in the queue (as a main-mode job's starts with `[CRON:id]`).
pub const EXEC_EVENT_MARK: &str = "[EXEC] ";

/// One queued event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemEvent {
    /// Increasing in the order events were queued; consumption names the events by it.
    pub id: u64,
    pub text: String,
    pub queued_at: Timestamp,
}

/// What a main-mode cron job puts into the queue.
pub fn cron_event_text(job: &str, payload: &str) -> String {
    format!("[CRON:{job}] {payload}")
}

/// What an exec event (an async command that finished, told over the API) puts into the queue.
pub fn exec_event_text(result: &str) -> String {
    format!("{EXEC_EVENT_MARK}{result}")
}

/// The prompt of a heartbeat run with events pending: the events as a list, then the
/// exec-event prompt when every one is an exec event, else the cron-event prompt.
pub fn cron_event_prompt(events: &[SystemEvent]) -> String {
    let listed: Vec<String> = events.iter().map(|event| format!("- {}", event.text)).collect();
    let all_exec = !events.is_empty() && events.iter().all(|event| event.text.starts_with(EXEC_EVENT_MARK));
    let prompt = if all_exec { EXEC_EVENT_PROMPT } else { CRON_EVENT_PROMPT };
    format!("{}\n\n{prompt}", listed.join("\n"))
}

/// Whether a queued event is still within its time to live at `now` (wall clock: the TTL
/// is a promise about calendar time, and it must hold across a restart).
pub fn is_live(event: &SystemEvent, now: Timestamp) -> bool {
    let ttl = Duration::from_secs(SYSTEM_EVENT_TTL_SECS);
    now.duration_since(event.queued_at).unsigned_abs() < ttl || now < event.queued_at
}

/// Whether `text` joins a queue whose newest pending event says `newest`: a consecutive
/// duplicate is dropped.
pub fn admits(newest: Option<&str>, text: &str) -> bool {
    newest != Some(text)
}

/// How many of the oldest pending events to drop once `pending` are queued.
pub fn overflow(pending: usize) -> usize {
    pending.saturating_sub(SYSTEM_EVENTS_PER_AGENT_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_events_alone_get_the_exec_prompt() {
        let at: Timestamp = "2026-11-23T10:00:00Z".parse().expect("time");
        let exec = SystemEvent { id: 1, text: exec_event_text("make: done"), queued_at: at };
        let cron = SystemEvent { id: 2, text: cron_event_text("digest", "sum up"), queued_at: at };
        assert_eq!(
            cron_event_prompt(std::slice::from_ref(&exec)),
            format!("- [EXEC] make: done\n\n{EXEC_EVENT_PROMPT}")
        );
        assert!(cron_event_prompt(&[exec, cron]).ends_with(CRON_EVENT_PROMPT), "a mix is a scheduled-task run");
    }

    fn event(id: u64, text: &str, queued_at: &str) -> SystemEvent {
        SystemEvent { id, text: text.to_owned(), queued_at: queued_at.parse().expect("test timestamp") }
    }

    #[test]
    fn the_prompt_lists_events_above_the_spec_prompt() {
        let events = [
            event(1, "[CRON:a] check mail", "2026-01-01T00:00:00Z"),
            event(2, "[CRON:b] backup", "2026-01-01T00:00:00Z"),
        ];
        assert_eq!(
            cron_event_prompt(&events),
            format!("- [CRON:a] check mail\n- [CRON:b] backup\n\n{CRON_EVENT_PROMPT}")
        );
        assert_eq!(cron_event_text("daily", "sum up"), "[CRON:daily] sum up");
    }

    #[test]
    fn events_live_one_hour() {
        let queued = event(1, "x", "2026-01-01T00:00:00Z");
        assert!(is_live(&queued, "2026-01-01T00:59:59Z".parse().expect("ts")));
        assert!(!is_live(&queued, "2026-01-01T01:00:00Z".parse().expect("ts")));
        // A wall clock set back before the event does not expire it.
        assert!(is_live(&queued, "2025-12-31T20:00:00Z".parse().expect("ts")));
    }

    #[test]
    fn consecutive_duplicates_and_overflow() {
        assert!(admits(None, "a"));
        assert!(!admits(Some("a"), "a"));
        assert!(admits(Some("a"), "b"));
        assert_eq!(overflow(20), 0);
        assert_eq!(overflow(25), 5);
    }
}
