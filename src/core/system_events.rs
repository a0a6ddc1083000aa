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

/// The prompt of a heartbeat run with events pending: the events as a list, then the
/// cron-event prompt.
pub fn cron_event_prompt(events: &[SystemEvent]) -> String {
    let listed: Vec<String> = events.iter().map(|event| format!("- {}", event.text)).collect();
    format!("{}\n\n{CRON_EVENT_PROMPT}", listed.join("\n"))
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
