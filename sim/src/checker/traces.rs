//! Traces (ADR 0022), judged against what the checker saw of each run: every finished run
//! hands over exactly one trace, before its end is reported; each completion and tool
//! call in it lies within the run; and its completions are the run's LLM calls (all of
//! them, unless the run's budget cut one off).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;
use systole::ports::store::ExecutionStatus;

use super::{fail, Step};

pub const TRACE_ONCE: &str = "trace-once";
pub const TRACE_WITHIN_RUN: &str = "trace-within-run";

/// A trace as the simulated exporter received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traced {
    pub duration: Duration,
    /// Each child span: its offset from the run's start, and its length.
    pub children: Vec<(Duration, Duration)>,
    pub completions: usize,
}

#[derive(Debug, Default)]
pub struct TraceModel {
    /// Traces handed over and not yet matched with their run's end, per life and slot.
    waiting: BTreeMap<(u32, HeartbeatKey, Timestamp), usize>,
}

impl TraceModel {
    pub fn traced(
        &mut self,
        mut count: impl FnMut(&'static str),
        life: u32,
        key: &HeartbeatKey,
        slot: Timestamp,
        trace: &Traced,
    ) -> Step {
        for (offset, length) in &trace.children {
            count(TRACE_WITHIN_RUN);
            if offset.saturating_add(*length) > trace.duration {
                return fail(
                    TRACE_WITHIN_RUN,
                    format!(
                        "{key} slot {slot}: a span at {offset:?} for {length:?} passes its run's {:?}",
                        trace.duration
                    ),
                );
            }
        }
        count(TRACE_ONCE);
        let seen = self.waiting.insert((life, key.clone(), slot), trace.completions);
        if seen.is_some() {
            return fail(TRACE_ONCE, format!("{key} slot {slot} handed over a second trace in life {life}"));
        }
        Ok(())
    }

    /// The run's end was reported: its trace came first, with its LLM calls.
    pub fn finished(
        &mut self,
        mut count: impl FnMut(&'static str),
        life: u32,
        key: &HeartbeatKey,
        slot: Timestamp,
        status: ExecutionStatus,
        llm_calls: u32,
    ) -> Step {
        count(TRACE_ONCE);
        let Some(completions) = self.waiting.remove(&(life, key.clone(), slot)) else {
            return fail(TRACE_ONCE, format!("{key} slot {slot} finished in life {life} without a trace"));
        };
        let calls = usize::try_from(llm_calls).unwrap_or(usize::MAX);
        let cut_off = status == ExecutionStatus::TimedOut;
        count(TRACE_WITHIN_RUN);
        if completions > calls || (!cut_off && completions != calls) {
            return fail(
                TRACE_WITHIN_RUN,
                format!(
                    "{key} slot {slot}: {completions} completions traced, {calls} LLM calls made ({})",
                    status.as_str()
                ),
            );
        }
        Ok(())
    }
}
