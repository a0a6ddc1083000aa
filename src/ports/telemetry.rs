//! Where a finished run's trace goes (ADR 0022): one span for the run, a child for each
//! completion and each tool call, built from what the run already measured. The daemon's
//! adapter exports them over OTLP when `[telemetry]` is set; by default nothing is sent.

use std::time::Duration;

use jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::core::ids::HeartbeatKey;
use crate::core::usage::TokenUsage;
use crate::ports::store::{ExecutionStatus, ToolCallOutcome};

/// One completion of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionSpan {
    /// From the run's start.
    pub offset: Duration,
    pub duration: Duration,
    /// The model the request named, else the endpoint's (`llm.model`) when known.
    pub model: Option<String>,
    /// What the provider reported, if it did.
    pub usage: Option<TokenUsage>,
    pub error: Option<String>,
}

/// One tool call of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpan {
    pub offset: Duration,
    pub duration: Duration,
    /// `server/tool`, as the run log names it.
    pub tool: String,
    pub outcome: ToolCallOutcome,
}

/// A finished run, as its trace shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTrace {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    /// Wall time at the run's start.
    pub started_at: Timestamp,
    pub duration: Duration,
    pub status: ExecutionStatus,
    pub error: Option<String>,
    pub completions: Vec<CompletionSpan>,
    pub tool_calls: Vec<ToolSpan>,
}

pub trait Telemetry: Send + Sync {
    /// Whether traces go anywhere (the run skips building one when not).
    fn enabled(&self) -> bool;

    /// Hands a finished run's trace over. Never blocks the run: an exporter that cannot
    /// keep up drops traces and says so.
    fn export(&self, trace: RunTrace);
}

/// No telemetry: the default.
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {
    fn enabled(&self) -> bool {
        false
    }

    fn export(&self, _trace: RunTrace) {}
}

/// The trace id of the run of `key` at `slot`: derived from the slot's idempotency key, so
/// the run log names it without storing it, and a replay gives the same one.
pub fn trace_id(key: &HeartbeatKey, slot: Timestamp) -> [u8; 16] {
    let digest = Sha256::digest(format!("{}/{}/{}", key.agent, key.heartbeat, slot.as_millisecond()).as_bytes());
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// The id of a run's span `index` (0: the run's own span; then completions and tool calls
/// in order).
pub fn span_id(trace: &[u8; 16], index: usize) -> [u8; 8] {
    let mut hasher = Sha256::new();
    hasher.update(trace);
    hasher.update((index as u64).to_le_bytes());
    let digest = hasher.finalize();
    let mut id = [0; 8];
    id.copy_from_slice(&digest[..8]);
    id
}

/// Lowercase hex, as OTLP writes ids in JSON and the run log shows them.
pub fn hex(bytes: &[u8]) -> String {
    crate::core::hex::lower_hex(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId};

    #[test]
    fn ids_are_stable_distinct_and_never_zero() {
        let key = HeartbeatKey {
            agent: AgentId::new("ops").expect("valid"),
            heartbeat: HeartbeatId::new("inbox").expect("valid"),
        };
        let slot = Timestamp::from_second(1_800_000_000).expect("valid");
        let trace = trace_id(&key, slot);
        assert_eq!(trace, trace_id(&key, slot), "the same run, the same trace");
        assert_ne!(trace, trace_id(&key, Timestamp::from_second(1_800_000_060).expect("valid")));
        assert_ne!(span_id(&trace, 0), span_id(&trace, 1));
        assert_ne!(trace, [0; 16], "OTLP treats an all-zero id as invalid");
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
        assert_eq!(hex(&trace).len(), 32);
    }
}
