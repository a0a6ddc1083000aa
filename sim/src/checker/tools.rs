//! Tool calls, judged by the checker's own reading of the policy (ADR 0019), none of the
//! engine's: every call happens inside a run of its slot that is running in that process,
//! within what is left of the run's budget, in one run per slot only, within the run's
//! cap; a tool that may write is never called (or offered) without the job's opt-in; and
//! a run whose job requires a tool it was not offered fails, naming the tool; a job's
//! pre-check comes first, and the model is asked only when it found something.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use systole::core::heartbeat::HeartbeatDef;
use systole::core::ids::HeartbeatKey;
use systole::driver::run::DEFINITION_UNREADABLE;
use systole::ports::store::{ExecutionStatus, StopReason, ToolUse};

use super::{fail, Step};
use crate::ports::tools::{is_read_only, SERVER};

pub const TOOL_CALL_IN_RUN: &str = "tool-call-in-run";
pub const TOOL_CALLS_ONE_RUN: &str = "tool-calls-one-run";
pub const TOOL_CALL_IN_BUDGET: &str = "tool-call-within-budget";
pub const TOOL_CAP: &str = "tool-cap";
pub const TOOL_WRITE_OPT_IN: &str = "tool-write-opt-in";
pub const TOOL_REQUIRED: &str = "tool-required-fails";
pub const CHECK_GATES_MODEL: &str = "check-gates-model";

/// Runtime slack on the budget: the engine stops a call a little before the run's end.
const BUDGET_SLACK: Duration = Duration::from_millis(1);

/// One call as the tool server saw it.
#[derive(Debug, Clone)]
struct Call {
    life: u32,
    at: Duration,
    timeout: Duration,
    tool: String,
    /// How the server answered: `Some(true)` with nothing to do; `None`: no answer (yet).
    quiet: Option<bool>,
}

#[derive(Debug, Default)]
pub struct ToolModel {
    calls: BTreeMap<(HeartbeatKey, Timestamp), Vec<Call>>,
    /// When each run was reported started (the run itself starts at or after it).
    started: BTreeMap<(HeartbeatKey, Timestamp), Duration>,
    /// The cap of tool calls per run (the agents' `tool_calls_max`).
    cap: usize,
    /// The agents' `tools` list, as patterns written (`inbox/*`).
    agent_tools: Vec<String>,
}

/// The checker's own reading of a pattern: `server/tool`, `server/*`, `server/prefix*`.
fn matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

impl ToolModel {
    pub fn new(cap: usize, agent_tools: Vec<String>) -> Self {
        Self { calls: BTreeMap::new(), started: BTreeMap::new(), cap, agent_tools }
    }

    /// Whether `def`'s runs may be offered `tool` (`server/tool`) by the rules of the policy.
    fn may_offer(&self, def: &HeartbeatDef, tool: &str) -> bool {
        let name = tool.strip_prefix(&format!("{SERVER}/")).unwrap_or(tool);
        let agent = self.agent_tools.iter().any(|pattern| matches(pattern, tool));
        let job = def.tools.allow.as_ref().is_none_or(|allow| allow.iter().any(|p| matches(&p.to_string(), tool)));
        let write_ok = is_read_only(name) || def.tools.write.iter().any(|p| matches(&p.to_string(), tool));
        agent && job && write_ok
    }

    pub fn run_started(&mut self, key: &HeartbeatKey, slot: Timestamp, at: Duration) {
        self.started.insert((key.clone(), slot), at);
    }

    /// A call reached the tool server. `running`: the run of that slot is open in `life`.
    #[allow(clippy::too_many_arguments)]
    pub fn called(
        &mut self,
        mut count: impl FnMut(&'static str),
        at: Duration,
        life: u32,
        key: &HeartbeatKey,
        slot: Timestamp,
        tool: &str,
        timeout: Duration,
        running: bool,
        def: Option<&HeartbeatDef>,
    ) -> Step {
        count(TOOL_CALL_IN_RUN);
        if !running {
            return fail(
                TOOL_CALL_IN_RUN,
                format!("{tool} was called for {key} slot {slot}, which is not running in life {life}"),
            );
        }
        let calls = self.calls.entry((key.clone(), slot)).or_default();
        count(TOOL_CALLS_ONE_RUN);
        if let Some(other) = calls.iter().find(|call| call.life != life) {
            return fail(
                TOOL_CALLS_ONE_RUN,
                format!("{key} slot {slot} called tools in life {} and again in life {life}", other.life),
            );
        }
        calls.push(Call { life, at, timeout, tool: tool.to_owned(), quiet: None });
        count(TOOL_CAP);
        if calls.len() > self.cap {
            return fail(
                TOOL_CAP,
                format!("{key} slot {slot} made {} tool calls; the cap is {}", calls.len(), self.cap),
            );
        }
        count(TOOL_WRITE_OPT_IN);
        if let Some(def) = def {
            if !self.may_offer(def, tool) {
                return fail(TOOL_WRITE_OPT_IN, format!("{key} slot {slot} called {tool}, which its job may not use"));
            }
        }
        Ok(())
    }

    /// The server answered the run's latest call of `tool`.
    pub fn answered(&mut self, key: &HeartbeatKey, slot: Timestamp, tool: &str, quiet: bool) {
        let calls = self.calls.entry((key.clone(), slot)).or_default();
        if let Some(call) = calls.iter_mut().rev().find(|call| call.tool == tool && call.quiet.is_none()) {
            call.quiet = Some(quiet);
        }
    }

    /// A job with a pre-check: its run's first call is the check, a quiet answer ends the
    /// run with no LLM call (stop reason `quiet-check`), and the model is asked only after
    /// an answer with something in it, or for system events the run consumed (`events`):
    /// those are work the model must see, whatever the check says.
    #[allow(clippy::too_many_arguments)]
    pub fn check_gated(
        &self,
        mut count: impl FnMut(&'static str),
        key: &HeartbeatKey,
        slot: Timestamp,
        status: ExecutionStatus,
        llm_calls: u32,
        stop_reason: Option<StopReason>,
        events: bool,
        def: Option<&HeartbeatDef>,
    ) -> Step {
        let Some(check) = def.and_then(|def| def.tools.check.as_ref()) else { return Ok(()) };
        count(CHECK_GATES_MODEL);
        let check = check.tool.to_string();
        let first = self.calls.get(&(key.clone(), slot)).and_then(|calls| calls.first());
        let first_answer = first.filter(|call| call.tool == check).and_then(|call| call.quiet);
        let quiet_stop = stop_reason == Some(StopReason::QuietCheck);
        let problem = if quiet_stop && (first_answer != Some(true) || llm_calls > 0 || events) {
            Some(format!(
                "stopped as quiet-check, but its check answered {first_answer:?}, it made {llm_calls} LLM calls \
                 and consumed events: {events}"
            ))
        } else if events {
            None
        } else if llm_calls > 0 && first_answer != Some(false) {
            Some(format!("asked the model {llm_calls} times, but its check {check} answered {first_answer:?} first"))
        } else if first_answer == Some(true) && !quiet_stop && status != ExecutionStatus::TimedOut {
            Some(format!("its check {check} found nothing, yet it ended {} ({stop_reason:?})", status.as_str()))
        } else {
            None
        };
        match problem {
            Some(problem) => fail(CHECK_GATES_MODEL, format!("{key} slot {slot} {problem}")),
            None => Ok(()),
        }
    }

    /// The run of `key` at `slot` finished after `duration`, reported at `at`: each of its
    /// calls started after the run was reported started, and was given no more than its
    /// budget had left (the run began at most `at - duration`, so its budget ended no later
    /// than that plus the budget).
    pub fn finished(
        &mut self,
        mut count: impl FnMut(&'static str),
        at: Duration,
        key: &HeartbeatKey,
        slot: Timestamp,
        duration: Duration,
        budget: Duration,
    ) -> Step {
        let reported = self.started.remove(&(key.clone(), slot));
        let Some(calls) = self.calls.get(&(key.clone(), slot)) else { return Ok(()) };
        let started = reported.unwrap_or(Duration::ZERO);
        let end = at.saturating_sub(duration) + budget + BUDGET_SLACK;
        for call in calls {
            count(TOOL_CALL_IN_BUDGET);
            if call.at < started || call.at + call.timeout > end {
                return fail(
                    TOOL_CALL_IN_BUDGET,
                    format!(
                        "{key} slot {slot}: a call at {:?} given {:?} passes the run's budget (from {started:?}, {budget:?})",
                        call.at, call.timeout
                    ),
                );
            }
        }
        Ok(())
    }

    /// A run's result became durable: what it was offered, and how it ended.
    #[allow(clippy::too_many_arguments)]
    pub fn recorded(
        &self,
        mut count: impl FnMut(&'static str),
        key: &HeartbeatKey,
        slot: Timestamp,
        status: ExecutionStatus,
        error: Option<&str>,
        tools: Option<&ToolUse>,
        def: Option<&HeartbeatDef>,
    ) -> Step {
        let Some(def) = def else { return Ok(()) };
        // Its prompt could not be read: it failed before choosing its tools.
        let unread =
            status == ExecutionStatus::Failed && error.is_some_and(|error| error.starts_with(DEFINITION_UNREADABLE));
        let offered = tools.map(|tools| tools.offered.as_slice()).unwrap_or_default();
        count(TOOL_WRITE_OPT_IN);
        if let Some(tool) = offered.iter().find(|tool| !self.may_offer(def, tool)) {
            return fail(TOOL_WRITE_OPT_IN, format!("{key} slot {slot} was offered {tool}, which its job may not use"));
        }
        for required in &def.tools.required {
            let required = required.to_string();
            if offered.contains(&required) || status == ExecutionStatus::TimedOut || unread {
                continue;
            }
            count(TOOL_REQUIRED);
            let named = error.is_some_and(|error| error.contains(&required));
            if status != ExecutionStatus::Failed || !named {
                return fail(
                    TOOL_REQUIRED,
                    format!("{key} slot {slot} ran without required {required}: {} ({error:?})", status.as_str()),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_read_as_the_policy_says() {
        assert!(matches("inbox/*", "inbox/search") && matches("inbox/sea*", "inbox/search"));
        assert!(!matches("inbox/search", "inbox/searches") && !matches("web/*", "inbox/search"));
    }
}
