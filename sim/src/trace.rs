//! The trace: every event of a run, in order, with its simulated time. Its hash is taken
//! over a canonical byte encoding of each event (tags and length-prefixed fields), never
//! over `Debug` output or a std hasher, so it is stable across builds and processes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use sha2::{Digest, Sha256};

use systole::core::heartbeat::HeartbeatDef;
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::driver::events::EngineEvent;
use systole::ports::messenger::DeliveryKind;

use crate::faults::FaultKind;
use crate::workload::Op;

/// One thing that happened, as the checker and the replay see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// What the engine itself reported, from incarnation `life` (1 for the first start).
    Engine {
        life: u32,
        event: EngineEvent,
    },
    Fault {
        kind: FaultKind,
        detail: String,
    },
    Crash {
        life: u32,
    },
    Restart {
        life: u32,
    },
    /// An incarnation finished start-up; what the durable store held right after.
    Started {
        life: u32,
        running_rows: usize,
        heartbeats: Vec<(HeartbeatKey, bool)>,
    },
    /// An incarnation's start-up failed (a store fault); the supervisor restarts it.
    StartFailed {
        life: u32,
        error: String,
    },
    LlmCall {
        life: u32,
        prompt: String,
        answer: String,
    },
    Delivered {
        life: u32,
        heartbeat: HeartbeatKey,
        idempotency_key: String,
        text: String,
        /// A run's reply, or the engine's announcement of its breaker.
        kind: DeliveryKind,
    },
    /// A request for one part of a message reached the simulated platform.
    PartPosted {
        life: u32,
        /// The part's idempotency key (`<slot key>/part-2-of-3`, or the slot's key alone).
        key: String,
        outcome: PartOutcome,
        shape: PartShape,
    },
    /// A run called a tool of the simulated server, with the timeout it gave the call.
    ToolCalled {
        life: u32,
        key: HeartbeatKey,
        slot: Timestamp,
        tool: String,
        timeout: Duration,
    },
    /// A tool answered a run (not with an error); `quiet`: with nothing to do (`[]`).
    ToolAnswered {
        life: u32,
        key: HeartbeatKey,
        slot: Timestamp,
        tool: String,
        quiet: bool,
    },
    /// A finished run handed its trace to the exporter (ADR 0022).
    RunTraced {
        life: u32,
        key: HeartbeatKey,
        slot: Timestamp,
        trace: crate::checker::traces::Traced,
    },
    /// A tool with an external effect did it (the world's record, not the engine's).
    ToolEffect {
        life: u32,
        key: HeartbeatKey,
        slot: Timestamp,
        tool: String,
    },
    OpAcked {
        life: u32,
        op: Op,
        /// What the engine answered: for an enable, disable or delete, whether it existed.
        applied: bool,
    },
    OpFailed {
        life: u32,
        op: Op,
        error: String,
    },
    /// The workload wrote (`Some`) or removed (`None`) an agent's `HEARTBEAT.md`.
    WorkspaceChanged {
        agent: AgentId,
        content: Option<String>,
    },
    /// A store write that really reached durable state.
    Durable {
        life: u32,
        write: DurableWrite,
    },
    /// A definitions read failed by injection: the heartbeats it asked for, whose claimed
    /// runs it leaves unreadable.
    DefinitionsUnread {
        keys: Vec<HeartbeatKey>,
    },
    /// A read of `key`'s run log failed by injection: until the next start-up the engine
    /// may not know which of its slots the store decided.
    LogUnread {
        key: HeartbeatKey,
    },
    /// Duplicate checks the store answered: how many its index of recent deliveries
    /// answered without a read (ADR 0066), and each answer that is not what the run log
    /// held when it was given.
    DuplicateChecked {
        life: u32,
        asked: usize,
        from_index: usize,
        wrong: Vec<String>,
    },
    Healed,
    End {
        heartbeats: Vec<(HeartbeatKey, bool)>,
    },
}

/// What a request for one part was, as the platform read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartShape {
    /// The text's length in UTF-16 units.
    pub units: usize,
    /// Whom the platform would have notified, if anyone.
    pub notified: Option<String>,
    pub user_agent: String,
}

/// What the simulated platform made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartOutcome {
    Accepted,
    RateLimited,
    Refused,
    /// No answer: the connection failed or timed out (nothing was posted).
    Unreachable,
}

impl PartOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            PartOutcome::Accepted => "accepted",
            PartOutcome::RateLimited => "rate-limited",
            PartOutcome::Refused => "refused",
            PartOutcome::Unreachable => "unreachable",
        }
    }
}

/// The durable writes the checker's model follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurableWrite {
    /// A slot claimed: its `running` row written, for the run that is to start; an
    /// operator's trigger's when `triggered` (the row's mark, ADR 0048).
    Claimed {
        key: HeartbeatKey,
        slot: Timestamp,
        triggered: bool,
    },
    /// A run's result and the breaker step it stored.
    Finish {
        key: HeartbeatKey,
        slot: Timestamp,
        /// How it ended, as recorded: the checker decides by its own rule what counts as
        /// a failure (the engine's `RunRecord::failed` is what it checks).
        status: systole::ports::store::ExecutionStatus,
        /// When the run finished (wall clock): an opened breaker's cooldown counts from it.
        finished_at: Timestamp,
        consecutive_failures: u32,
        tripped: bool,
        /// The breaker went from closed to open, or a probe closed it.
        opened: bool,
        closed: bool,
        /// The system events a successful run consumed in the same write.
        consumed: Vec<u64>,
        /// The LLM calls the run made, its tokens and cost: what the daily caps count.
        llm_calls: u32,
        tokens: u64,
        cost_micros: u64,
        /// The run's error, and the tools it was offered and called.
        error: Option<String>,
        tools: Option<systole::ports::store::ToolUse>,
        /// Why the run stopped (`quiet-check`: its pre-check found nothing to do).
        stop_reason: Option<systole::ports::store::StopReason>,
    },
    /// A system event queued for an agent heartbeat (`dropped` oldest ones made room).
    EventQueued {
        agent: AgentId,
        id: u64,
        text: String,
        dropped: usize,
    },
    SetEnabled {
        key: HeartbeatKey,
        enabled: bool,
    },
    /// The engine retired a heartbeat with no slot left: disabled, only if it was enabled
    /// (ADR 0050).
    Retired {
        key: HeartbeatKey,
    },
    /// The breaker's cooldown ended: enabled for one probe, its failure count kept.
    HalfOpen {
        key: HeartbeatKey,
    },
    /// A heartbeat created or replaced at run time, with its whole definition and the wall
    /// time it was stored at (its first slot counts from there, ADR 0028).
    Put {
        def: Box<HeartbeatDef>,
        at: Timestamp,
    },
    Delete {
        key: HeartbeatKey,
    },
    /// An agent's pause removed (an operator's resume).
    ClearPause {
        agent: AgentId,
    },
    /// An agent's pause removed once it ended, if the stored one ends at `until`.
    EndPause {
        agent: AgentId,
        until: Timestamp,
    },
    /// An agent's pause, as `pause_heartbeats` stored it.
    Pause {
        agent: AgentId,
        until: Timestamp,
        minutes: u32,
    },
    /// The run log was pruned at `now` under a retention of `kept_days` and
    /// `kept_per_heartbeat`: the rows it held before, and which of them went.
    Pruned {
        now: Timestamp,
        kept_days: u32,
        kept_per_heartbeat: u32,
        before: Vec<LoggedRow>,
        pruned: Vec<(HeartbeatKey, Timestamp)>,
    },
}

/// A row of the run log, as far as pruning is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRow {
    pub key: HeartbeatKey,
    pub slot: Timestamp,
    pub skip: bool,
    /// An operator's trigger's row, as the store marked it.
    pub triggered: bool,
    /// `None` while it runs.
    pub finished_at: Option<Timestamp>,
}

/// An event with when it happened: elapsed simulated time, and the wall clock's reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub elapsed: Duration,
    pub wall: Timestamp,
    pub event: Event,
}

/// Collects entries from every task of a run.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    entries: Arc<Mutex<Vec<Entry>>>,
}

/// More entries than any seed of the workload records by far: an engine that loops (a
/// breaker probing without end, say) ends its seed as a failure here instead of filling
/// the machine's memory.
pub const TRACE_ENTRIES_MAX: usize = 2_000_000;

/// Room a trace starts with: about what a seed of the default workload records.
const TRACE_ENTRIES_FIRST: usize = 32_768;

impl Recorder {
    pub fn push(&self, elapsed: Duration, wall: Timestamp, event: Event) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.capacity() == 0 {
            // A seed records tens of thousands: grown from nothing, the trace was copied a
            // dozen times on the way (2 % of the simulator's time).
            entries.reserve(TRACE_ENTRIES_FIRST);
        }
        assert!(entries.len() < TRACE_ENTRIES_MAX, "runaway: the trace reached {TRACE_ENTRIES_MAX} entries");
        entries.push(Entry { elapsed, wall, event });
    }

    pub fn take(&self) -> Vec<Entry> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// The first 8 bytes of SHA-256 over the canonical encoding of every entry, as 16 hex digits.
pub fn hash(entries: &[Entry]) -> String {
    let mut hasher = Sha256::new();
    let mut bytes = Vec::new();
    for entry in entries {
        bytes.clear();
        encode_entry(entry, &mut bytes);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    systole::core::hex::lower_hex(&hasher.finalize()[..8])
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn tag(&mut self, tag: u8) -> &mut Self {
        self.0.push(tag);
        self
    }
    fn u64(&mut self, value: u64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    fn i64(&mut self, value: i64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    fn bool(&mut self, value: bool) -> &mut Self {
        self.0.push(u8::from(value));
        self
    }
    fn str(&mut self, value: &str) -> &mut Self {
        self.u64(value.len() as u64);
        self.0.extend_from_slice(value.as_bytes());
        self
    }
    fn key(&mut self, key: &HeartbeatKey) -> &mut Self {
        self.str(key.agent.as_str()).str(key.heartbeat.as_str())
    }
    fn time(&mut self, at: Timestamp) -> &mut Self {
        self.i64(at.as_second()).i64(i64::from(at.subsec_nanosecond()))
    }
    fn duration(&mut self, duration: Duration) -> &mut Self {
        self.u64(duration.as_secs()).u64(u64::from(duration.subsec_nanos()))
    }
    fn heartbeats(&mut self, heartbeats: &[(HeartbeatKey, bool)]) -> &mut Self {
        self.u64(heartbeats.len() as u64);
        for (key, enabled) in heartbeats {
            self.key(key).bool(*enabled);
        }
        self
    }
}

fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.duration(entry.elapsed).time(entry.wall);
    match &entry.event {
        Event::Engine { life, event } => {
            w.tag(1).u64(u64::from(*life));
            encode_engine_event(event, &mut w);
        }
        Event::Fault { kind, detail } => {
            w.tag(2).str(kind.name()).str(detail);
        }
        Event::Crash { life } => {
            w.tag(3).u64(u64::from(*life));
        }
        Event::Restart { life } => {
            w.tag(4).u64(u64::from(*life));
        }
        Event::Started { life, running_rows, heartbeats } => {
            w.tag(5).u64(u64::from(*life)).u64(*running_rows as u64).heartbeats(heartbeats);
        }
        Event::StartFailed { life, error } => {
            w.tag(6).u64(u64::from(*life)).str(error);
        }
        Event::LlmCall { life, prompt, answer } => {
            w.tag(7).u64(u64::from(*life)).str(prompt).str(answer);
        }
        Event::Delivered { life, heartbeat, idempotency_key, text, kind } => {
            w.tag(8).u64(u64::from(*life)).key(heartbeat).str(idempotency_key).str(text).str(kind.as_str());
        }
        Event::PartPosted { life, key, outcome, shape } => {
            w.tag(15).u64(u64::from(*life)).str(key).str(outcome.as_str()).u64(shape.units as u64);
            w.str(shape.notified.as_deref().unwrap_or("")).str(&shape.user_agent);
        }
        Event::ToolCalled { life, key, slot, tool, timeout } => {
            w.tag(16).u64(u64::from(*life)).key(key).time(*slot).str(tool).u64(timeout.as_millis() as u64);
        }
        Event::ToolAnswered { life, key, slot, tool, quiet } => {
            w.tag(30).u64(u64::from(*life)).key(key).time(*slot).str(tool).bool(*quiet);
        }
        Event::RunTraced { life, key, slot, trace } => {
            w.tag(31).u64(u64::from(*life)).key(key).time(*slot).u64(trace.duration.as_nanos() as u64);
            w.u64(trace.completions as u64).u64(trace.children.len() as u64);
            for (offset, length) in &trace.children {
                w.u64(offset.as_nanos() as u64).u64(length.as_nanos() as u64);
            }
        }
        Event::ToolEffect { life, key, slot, tool } => {
            w.tag(17).u64(u64::from(*life)).key(key).time(*slot).str(tool);
        }
        Event::OpAcked { life, op, applied } => {
            w.tag(9).u64(u64::from(*life)).str(&op.describe()).bool(*applied);
        }
        Event::OpFailed { life, op, error } => {
            w.tag(10).u64(u64::from(*life)).str(&op.describe()).str(error);
        }
        Event::Durable { life, write } => {
            w.tag(13).u64(u64::from(*life));
            match write {
                DurableWrite::Finish {
                    key,
                    slot,
                    status,
                    finished_at,
                    consecutive_failures,
                    tripped,
                    opened,
                    closed,
                    consumed,
                    llm_calls,
                    tokens,
                    cost_micros,
                    error,
                    tools,
                    stop_reason,
                } => {
                    w.u64(*tokens).u64(*cost_micros).str(stop_reason.map_or("", |reason| reason.as_str()));
                    w.str(error.as_deref().unwrap_or(""))
                        .u64(tools.as_ref().map_or(0, |tools| tools.calls.len() as u64));
                    for tool in tools.iter().flat_map(|tools| &tools.offered) {
                        w.str(tool);
                    }
                    w.tag(1)
                        .u64(u64::from(*llm_calls))
                        .key(key)
                        .time(*slot)
                        .str(status.as_str())
                        .u64(u64::from(*consecutive_failures))
                        .bool(*tripped);
                    w.time(*finished_at).bool(*opened).bool(*closed);
                    w.u64(consumed.len() as u64);
                    for id in consumed {
                        w.u64(*id);
                    }
                }
                DurableWrite::EventQueued { agent, id, text, dropped } => {
                    w.tag(7).str(agent.as_str()).u64(*id).str(text).u64(*dropped as u64);
                }
                DurableWrite::SetEnabled { key, enabled } => {
                    w.tag(2).key(key).bool(*enabled);
                }
                // Hashed as the disable it stores: traces from before ADR 0050 keep their hashes.
                DurableWrite::Retired { key } => {
                    w.tag(2).key(key).bool(false);
                }
                DurableWrite::HalfOpen { key } => {
                    w.tag(8).key(key);
                }
                DurableWrite::Claimed { key, slot, triggered } => {
                    w.tag(11).key(key).time(*slot).bool(*triggered);
                }
                DurableWrite::Pruned { now, kept_days, kept_per_heartbeat, before, pruned } => {
                    w.tag(9).time(*now).u64(u64::from(*kept_days)).u64(u64::from(*kept_per_heartbeat));
                    w.u64(before.len() as u64);
                    for row in before {
                        w.key(&row.key).time(row.slot).bool(row.skip);
                        match row.finished_at {
                            Some(at) => w.bool(true).time(at),
                            None => w.bool(false),
                        };
                    }
                    w.u64(pruned.len() as u64);
                    for (key, slot) in pruned {
                        w.key(key).time(*slot);
                    }
                }
                DurableWrite::Put { def, at } => {
                    // The fingerprint covers every field of the definition.
                    w.tag(3).key(&def.key).str(&def.fingerprint()).time(*at);
                }
                DurableWrite::Delete { key } => {
                    w.tag(4).key(key);
                }
                DurableWrite::ClearPause { agent } => {
                    w.tag(6).str(agent.as_str());
                }
                DurableWrite::EndPause { agent, until } => {
                    w.tag(7).str(agent.as_str()).time(*until);
                }
                DurableWrite::Pause { agent, until, minutes } => {
                    w.tag(5).str(agent.as_str()).time(*until).u64(u64::from(*minutes));
                }
            }
        }
        Event::WorkspaceChanged { agent, content } => {
            w.tag(14).str(agent.as_str()).bool(content.is_some()).str(content.as_deref().unwrap_or(""));
        }
        Event::DefinitionsUnread { keys } => {
            w.tag(18).u64(keys.len() as u64);
            for key in keys {
                w.key(key);
            }
        }
        Event::LogUnread { key } => {
            w.tag(36).key(key);
        }
        Event::DuplicateChecked { life, asked, from_index, wrong } => {
            w.tag(37).u64(u64::from(*life)).u64(*asked as u64).u64(*from_index as u64).u64(wrong.len() as u64);
            for answer in wrong {
                w.str(answer);
            }
        }
        Event::Healed => {
            w.tag(11);
        }
        Event::End { heartbeats } => {
            w.tag(12).heartbeats(heartbeats);
        }
    }
}

fn encode_engine_event(event: &EngineEvent, w: &mut Writer<'_>) {
    match event {
        EngineEvent::Recovered { interrupted } => {
            w.tag(1).u64(*interrupted);
        }
        EngineEvent::Armed { key, next_slot } => {
            w.tag(2).key(key).time(*next_slot);
        }
        EngineEvent::Disarmed { key } => {
            w.tag(3).key(key);
        }
        EngineEvent::CaughtUp { key, slot, runs, missed } => {
            w.tag(4).key(key).time(*slot).u64(*runs).u64(*missed);
        }
        EngineEvent::Skipped { key, slot, reason } => {
            w.tag(5).key(key).time(*slot).str(reason.as_str());
        }
        EngineEvent::ClaimLost { key, slot } => {
            w.tag(6).key(key).time(*slot);
        }
        EngineEvent::RunStarted { key, slot } => {
            w.tag(7).key(key).time(*slot);
        }
        EngineEvent::RunLost { key, slot } => {
            w.tag(32).key(key).time(*slot);
        }
        EngineEvent::RunWorkDone { key, slot } => {
            w.tag(33).key(key).time(*slot);
        }
        EngineEvent::ClaimMetTrigger { key, slot, moved_to } => {
            w.tag(35).key(key).time(*slot).time(*moved_to);
        }
        EngineEvent::ClaimGone { key, slot } => {
            w.tag(22).key(key).time(*slot);
        }
        EngineEvent::Triggered { key, slot, backfill: false } => {
            w.tag(23).key(key).time(*slot);
        }
        EngineEvent::Triggered { key, slot, backfill: true } => {
            w.tag(34).key(key).time(*slot);
        }
        EngineEvent::DefinitionApplied { key } => {
            w.tag(24).key(key);
        }
        EngineEvent::RunFinished {
            key,
            slot,
            status,
            delivery,
            duration,
            error,
            reply,
            recorded,
            llm_calls,
            finished_at,
            usage,
        } => {
            w.tag(8).key(key).time(*slot).str(status.as_str()).str(delivery.as_str()).duration(*duration);
            w.str(error.as_deref().unwrap_or("")).str(reply.map_or("", |r| r.as_str())).bool(*recorded);
            w.u64(u64::from(*llm_calls)).time(*finished_at).u64(usage.tokens.total()).u64(usage.cost_micros);
        }
        EngineEvent::BreakerTripped { key, consecutive_failures, probe_at } => {
            w.tag(9).key(key).u64(u64::from(*consecutive_failures)).bool(probe_at.is_some());
            if let Some(probe_at) = probe_at {
                w.time(*probe_at);
            }
        }
        EngineEvent::BreakerHalfOpen { key } => {
            w.tag(25).key(key);
        }
        EngineEvent::BreakerClosed { key } => {
            w.tag(26).key(key);
        }
        EngineEvent::AlertFailed { key, error } => {
            w.tag(27).key(key).str(error);
        }
        EngineEvent::CapReached { agent, reason, day } => {
            w.tag(29).str(agent.as_str()).str(reason.as_str()).time(*day);
        }
        EngineEvent::Paused { agent, minutes, until } => {
            w.tag(11).str(agent.as_str()).u64(u64::from(*minutes)).time(*until);
        }
        EngineEvent::Resumed { agent } => {
            w.tag(12).str(agent.as_str());
        }
        EngineEvent::StoreFailed { operation, error, consequence } => {
            w.tag(10).str(operation).str(error).str(consequence);
        }
        EngineEvent::RunsPruned { deleted } => {
            w.tag(28).u64(*deleted);
        }
        EngineEvent::Retired { key, deleted } => {
            w.tag(13).key(key).bool(*deleted);
        }
        EngineEvent::ClaimFailed { key, slot } => {
            w.tag(14).key(key).time(*slot);
        }
        EngineEvent::WakeRequested { agent, reason } => {
            w.tag(15).str(agent.as_str()).str(reason.as_str());
        }
        EngineEvent::WakeDecided { key, slot, reason } => {
            w.tag(16).key(key).time(*slot).str(reason.as_str());
        }
        EngineEvent::WakeIgnored { agent, reason } => {
            w.tag(17).str(agent.as_str()).str(reason.as_str());
        }
        EngineEvent::SystemEventQueued { key, id, dropped } => {
            w.tag(18).key(key).bool(id.is_some()).u64(id.unwrap_or(0)).u64(*dropped as u64);
        }
        EngineEvent::UserTurnStarted { agent } => {
            w.tag(19).str(agent.as_str());
        }
        EngineEvent::UserTurnEnded { agent } => {
            w.tag(20).str(agent.as_str());
        }
        EngineEvent::WorkspaceFailed { agent, error } => {
            w.tag(21).str(agent.as_str()).str(error);
        }
    }
}

/// One line of a readable timeline.
pub fn describe(entry: &Entry) -> String {
    let when = format!("+{:>8.3}s {}", entry.elapsed.as_secs_f64(), entry.wall);
    let what = match &entry.event {
        Event::Engine { life, event } => format!("[life {life}] {}", describe_engine_event(event)),
        Event::Fault { kind, detail } => format!("FAULT {} {detail}", kind.name()),
        Event::Crash { life } => format!("CRASH of life {life}"),
        Event::Restart { life } => format!("RESTART as life {life}"),
        Event::Started { life, running_rows, heartbeats } => {
            format!("[life {life}] started: {running_rows} running rows, {} heartbeats", heartbeats.len())
        }
        Event::StartFailed { life, error } => format!("[life {life}] start-up failed: {error}"),
        Event::LlmCall { life, prompt, answer } => format!("[life {life}] llm <- {prompt:?} -> {answer}"),
        Event::Delivered { life, heartbeat, idempotency_key, text, kind } => {
            format!("[life {life}] delivered {heartbeat} ({}) key={idempotency_key} {text:?}", kind.as_str())
        }
        Event::PartPosted { life, key, outcome, shape } => {
            let notified = shape.notified.as_deref().map(|who| format!(", NOTIFIED: {who}")).unwrap_or_default();
            format!("[life {life}] platform: {key} {} ({} units{notified})", outcome.as_str(), shape.units)
        }
        Event::ToolCalled { life, key, slot, tool, timeout } => {
            format!("[life {life}] tool call {tool} for {key} slot {slot} within {} ms", timeout.as_millis())
        }
        Event::ToolAnswered { life, key, slot, tool, quiet } => {
            let what = if *quiet { "nothing to do" } else { "something" };
            format!("[life {life}] tool {tool} answered {what} for {key} slot {slot}")
        }
        Event::RunTraced { life, key, slot, trace } => format!(
            "[life {life}] trace of {key} slot {slot}: {} spans in {:?} ({} completions)",
            trace.children.len() + 1,
            trace.duration,
            trace.completions
        ),
        Event::ToolEffect { life, key, slot, tool } => {
            format!("[life {life}] tool effect {tool} for {key} slot {slot}")
        }
        Event::OpAcked { life, op, applied } => {
            format!(
                "[life {life}] op acknowledged: {}{}",
                op.describe(),
                if *applied { "" } else { " (nothing to change)" }
            )
        }
        Event::OpFailed { life, op, error } => format!("[life {life}] op failed: {} ({error})", op.describe()),
        Event::Durable { life, write } => format!("[life {life}] durable: {}", describe_write(write)),
        Event::WorkspaceChanged { agent, content } => match content {
            Some(content) => format!("workspace of {agent}: HEARTBEAT.md = {content:?}"),
            None => format!("workspace of {agent}: HEARTBEAT.md removed"),
        },
        Event::DefinitionsUnread { keys } => {
            let keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
            format!("definitions unread: {}", keys.join(", "))
        }
        Event::LogUnread { key } => format!("run log of {key} unread"),
        Event::DuplicateChecked { life, asked, from_index, wrong } => format!(
            "[life {life}] {asked} duplicate checks, {from_index} answered by the index of recent deliveries{}",
            if wrong.is_empty() { String::new() } else { format!("; WRONG: {}", wrong.join("; ")) }
        ),
        Event::Healed => "HEALED: faults off, liveness phase begins".to_owned(),
        Event::End { heartbeats } => format!("END with {} heartbeats", heartbeats.len()),
    };
    format!("{when}  {what}")
}

fn describe_write(write: &DurableWrite) -> String {
    match write {
        DurableWrite::Finish {
            key,
            slot,
            status,
            consecutive_failures,
            tripped,
            opened,
            closed,
            consumed,
            tools,
            ..
        } => {
            let tools = tools.as_ref().map_or_else(String::new, |tools| {
                let calls: Vec<String> =
                    tools.calls.iter().map(|c| format!("{} {}", c.tool, c.outcome.as_str())).collect();
                format!(", offered {:?}, calls [{}]", tools.offered, calls.join(", "))
            });
            format!(
                "finished {key} slot {slot} ({}){tools}, breaker at {consecutive_failures}{}{}{}",
                status.as_str(),
                match (tripped, opened) {
                    (true, true) => ", tripped (opened)",
                    (true, false) => ", tripped (open again)",
                    _ => "",
                },
                if *closed { ", closed by the probe" } else { "" },
                if consumed.is_empty() { String::new() } else { format!(", consumed events {consumed:?}") }
            )
        }
        DurableWrite::EventQueued { agent, id, text, dropped } => {
            format!("system event {id} queued for {agent}: {text:?} ({dropped} oldest dropped)")
        }
        DurableWrite::SetEnabled { key, enabled } => format!("{key} {}", if *enabled { "enabled" } else { "disabled" }),
        DurableWrite::Retired { key } => format!("{key} disabled as out of slots"),
        DurableWrite::HalfOpen { key } => format!("{key} half-open: enabled for one probe"),
        DurableWrite::Claimed { key, slot, triggered: false } => format!("claimed {key} slot {slot}"),
        DurableWrite::Claimed { key, slot, triggered: true } => format!("claimed {key} slot {slot} (trigger)"),
        DurableWrite::Pruned { now, kept_days, kept_per_heartbeat, before, pruned } => format!(
            "run log pruned at {now}: {} of {} rows went (kept {kept_days} days, {kept_per_heartbeat} per heartbeat)",
            pruned.len(),
            before.len()
        ),
        DurableWrite::Put { def, .. } => format!("created or replaced {}", crate::workload::describe_def(def)),
        DurableWrite::Delete { key } => format!("{key} deleted"),
        DurableWrite::ClearPause { agent } => format!("agent {agent} pause cleared"),
        DurableWrite::EndPause { agent, until } => format!("agent {agent} pause ending at {until} cleared"),
        DurableWrite::Pause { agent, until, minutes } => format!("agent {agent} paused {minutes} min until {until}"),
    }
}

fn describe_engine_event(event: &EngineEvent) -> String {
    match event {
        EngineEvent::Recovered { interrupted } => format!("recovered {interrupted} interrupted runs"),
        EngineEvent::Armed { key, next_slot } => format!("armed {key} for {next_slot}"),
        EngineEvent::Disarmed { key } => format!("disarmed {key}"),
        EngineEvent::CaughtUp { key, slot, runs, missed } => {
            format!("{key} catches up: {runs} runs from {slot}, {missed} slots missed")
        }
        EngineEvent::Skipped { key, slot, reason } => format!("skipped {key} slot {slot}: {}", reason.as_str()),
        EngineEvent::ClaimLost { key, slot } => format!("claim lost {key} slot {slot}"),
        EngineEvent::ClaimMetTrigger { key, slot, moved_to } => {
            format!("claim of {key} slot {slot} met a trigger's row: moved to {moved_to}")
        }
        EngineEvent::ClaimGone { key, slot } => format!("claim refused {key} slot {slot}: deleted"),
        EngineEvent::ClaimFailed { key, slot } => format!("claim failed {key} slot {slot}: not run"),
        EngineEvent::Retired { key, deleted } => {
            format!("retired {key}: no more slots ({})", if *deleted { "deleted" } else { "disabled" })
        }
        EngineEvent::RunStarted { key, slot } => format!("run started {key} slot {slot}"),
        EngineEvent::RunWorkDone { key, slot } => format!("run done working {key} slot {slot}: its place is free"),
        EngineEvent::RunLost { key, slot } => format!("run lost {key} slot {slot}: its task ended without a result"),
        EngineEvent::Triggered { key, slot, backfill: false } => format!("triggered {key} under slot {slot}"),
        EngineEvent::Triggered { key, slot, backfill: true } => format!("backfill of {key} asked for slot {slot}"),
        EngineEvent::DefinitionApplied { key } => format!("definition of {key} applied"),
        EngineEvent::RunFinished {
            key,
            slot,
            status,
            delivery,
            duration,
            error,
            reply,
            recorded,
            llm_calls,
            usage,
            ..
        } => format!(
            "run finished {key} slot {slot}: {} delivery {} reply {} in {:.3}s, {llm_calls} llm calls, {} tokens{}{}",
            status.as_str(),
            delivery.as_str(),
            reply.map_or("-", |r| r.as_str()),
            duration.as_secs_f64(),
            usage.tokens.total(),
            error.as_ref().map(|e| format!(" error {e:?}")).unwrap_or_default(),
            if *recorded { "" } else { " (not recorded)" }
        ),
        EngineEvent::BreakerTripped { key, consecutive_failures, probe_at } => match probe_at {
            Some(at) => format!("breaker tripped {key} after {consecutive_failures} failures; probe at {at}"),
            None => format!("breaker tripped {key} after {consecutive_failures} failures; no cooldown"),
        },
        EngineEvent::BreakerHalfOpen { key } => format!("breaker half-open {key}: the next run is a probe"),
        EngineEvent::BreakerClosed { key } => format!("breaker closed {key}: the probe succeeded"),
        EngineEvent::AlertFailed { key, error } => format!("breaker announcement for {key} failed: {error}"),
        EngineEvent::CapReached { agent, reason, day } => {
            format!("agent {agent} reached a daily cap ({}) of the day from {day}", reason.as_str())
        }
        EngineEvent::Paused { agent, minutes, until } => format!("agent {agent} paused {minutes} min until {until}"),
        EngineEvent::Resumed { agent } => format!("agent {agent} resumed"),
        EngineEvent::StoreFailed { operation, error, .. } => format!("store write {operation} failed: {error}"),
        EngineEvent::RunsPruned { deleted } => format!("run log pruned: {deleted} rows"),
        EngineEvent::WakeRequested { agent, reason } => format!("wake requested for {agent}: {}", reason.as_str()),
        EngineEvent::WakeDecided { key, slot, reason } => {
            format!("wake decided {key} slot {slot}: {}", reason.as_str())
        }
        EngineEvent::WakeIgnored { agent, reason } => format!("wake ignored for {agent}: {}", reason.as_str()),
        EngineEvent::SystemEventQueued { key, id, dropped } => match id {
            Some(id) => format!("{key} queued system event {id} ({dropped} dropped)"),
            None => format!("{key}: system event repeats the newest; not queued"),
        },
        EngineEvent::UserTurnStarted { agent } => format!("user turn started with {agent}"),
        EngineEvent::UserTurnEnded { agent } => format!("user turn ended with {agent}"),
        EngineEvent::WorkspaceFailed { agent, error } => format!("workspace of {agent} unreadable: {error}"),
    }
}
