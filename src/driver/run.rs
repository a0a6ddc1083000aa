//! One claimed run: the agent loop and the delivery, inside one time budget, then the
//! result and the breaker step written through the group commit, awaited until durable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::agent::agent_loop::{call_recorded, run_loop};
use crate::agent::settings::AgentSettings;
use crate::agent::tools::external::ExternalTool;
use crate::agent::tools::{RunScope, Tool, ToolBox, ToolContext};
use crate::core::breaker::BreakerStep;
use crate::core::heartbeat::{HeartbeatDef, JobKind};
use crate::core::ids::{AgentId, HeartbeatKey};
use crate::core::reply::{self, Reply, ReplyKind};
use crate::core::system_events::cron_event_text;
use crate::core::text::{into_truncated_chars, into_without_nul, truncate_chars};
use crate::core::tool_check::{self, ToolCheck};
use crate::core::tool_policy::{tools_for_run, OfferedTool, RunTools};
use crate::core::usage::PriceTable;
use crate::core::visibility::VisibilityRules;
use crate::driver::control::Control;
use crate::driver::dedup_gate::{DedupGate, DedupHold};
use crate::driver::dedup_reads::DedupReads;
use crate::driver::events::{EngineEvent, EventSink};
use crate::driver::group_commit::ResultWriter;
use crate::driver::lanes::Lanes;
use crate::driver::metering::{MeterReader, MeteringLlm};
use crate::driver::run_events::RunEvents;
use crate::driver::transcript::Redactor;
use crate::limits::{DEDUP_WINDOW_SECS, ERROR_TEXT_CHARS_MAX, OUTPUT_PREVIEW_CHARS_MAX};
use crate::ports::clock::{Clock, Mono};
use crate::ports::fence::Fence;
use crate::ports::llm::Llm;
use crate::ports::messenger::{Delivery, DeliveryError, DeliveryKind, Messenger};
use crate::ports::store::{DedupQuery, DeliveryStatus, ExecutionStatus, Queued, RunRecord, StopReason, Store, ToolUse};
use crate::ports::telemetry::{RunTrace, Telemetry, ToolSpan};
use crate::ports::tools::{ServerState, ServerTool, ToolServers};
use crate::ports::workspace::Workspace;

/// Everything a run needs, shared by all runs.
#[derive(Clone)]
pub struct RunContext {
    pub clock: Arc<dyn Clock>,
    pub llm: Arc<dyn Llm>,
    pub messenger: Arc<dyn Messenger>,
    pub store: Arc<dyn Store>,
    pub events: Arc<dyn EventSink>,
    pub system_prompt: Arc<str>,
    pub model: Option<Arc<str>>,
    /// What each model's tokens cost (the run log and the daily cost cap read it).
    pub prices: Arc<PriceTable>,
    /// The secret values a run's transcript must never hold.
    pub redactor: Arc<Redactor>,
    pub breaker_failures_max: u32,
    /// Waits after consecutive failures (see [`crate::core::policy::backoff_delay`]).
    pub error_backoff: Arc<[std::time::Duration]>,
    /// Cooldowns of an open breaker (see [`crate::core::breaker::cooldown_length`]).
    pub breaker_cooldown: Arc<[std::time::Duration]>,
    /// Where the breaker's announcements go; `None`: each heartbeat's own target.
    pub alerts_target: Option<crate::core::delivery_target::DeliveryTarget>,
    pub toolbox: Arc<ToolBox>,
    /// Servers of tools: a run gets those its agent's and job's policy allow (ADR 0019).
    pub tool_servers: Arc<dyn ToolServers>,
    pub control: Control,
    pub agents: Arc<BTreeMap<AgentId, Arc<AgentSettings>>>,
    pub agent_default: Arc<AgentSettings>,
    /// The daily caps across all agents.
    pub global_caps: Arc<crate::core::budget::GlobalCaps>,
    pub workspace: Arc<dyn Workspace>,
    pub lanes: Arc<Lanes>,
    pub visibility: Arc<VisibilityRules>,
    pub run_events: Arc<RunEvents>,
    pub dedup_gate: Arc<DedupGate>,
    /// The duplicate checks of runs finishing together, read at once.
    pub dedup_reads: Arc<DedupReads>,
    /// What the run log keeps (the driver prunes the rest on a timer).
    pub run_retention: crate::core::retention::RunRetention,
    /// Where runs write their results: one transaction for all that finish together.
    pub results: ResultWriter,
    /// On a node of a cluster, the partition's lease: checked before every delivery.
    pub fence: Fence,
    /// Where each finished run's trace goes (nowhere by default).
    pub telemetry: Arc<dyn Telemetry>,
}

impl RunContext {
    /// The settings of `agent`, or the defaults for an agent the config does not name.
    pub fn settings(&self, agent: &AgentId) -> Arc<AgentSettings> {
        self.agents.get(agent).cloned().unwrap_or_else(|| Arc::clone(&self.agent_default))
    }
}

/// What a target that shows acknowledgements (`show_ok`) gets for a bare `HEARTBEAT_OK`:
/// never the token itself.
pub const ACK_SHOWN_TEXT: &str = "OK";

/// How the error of a run begins whose definition could not be read from the store: it
/// failed before choosing its tools or calling the model.
pub const DEFINITION_UNREADABLE: &str = "its definition could not be read from the store";
/// Why, when the store no longer held it (a delete landed between the claim and the read).
pub const DEFINITION_GONE: &str = "it is no longer stored";

/// What a claimed slot runs: its heartbeat's definition as the store holds it (read with
/// its pass's claims, ADR 0026), or why that read failed.
pub enum Claimed {
    Read(Arc<HeartbeatDef>),
    /// The run fails at once with the error: its slot is claimed, so it ends with a result.
    Unreadable {
        key: HeartbeatKey,
        kind: JobKind,
        error: String,
    },
}

/// The key a receiver can drop duplicates by: the same for every attempt at one slot.
pub fn idempotency_key(key: &HeartbeatKey, slot: Timestamp) -> String {
    use std::fmt::Write as _;
    // Sized at once (`format!` grew it three times a run): two slashes and an i64.
    let (agent, heartbeat) = (key.agent.as_str(), key.heartbeat.as_str());
    let mut text = String::with_capacity(agent.len() + heartbeat.len() + 2 + 20);
    let _ = write!(text, "{agent}/{heartbeat}/{}", slot.as_millisecond());
    text
}

struct Outcome {
    status: ExecutionStatus,
    delivery: DeliveryStatus,
    error: Option<String>,
    preview: Option<String>,
    stop_reason: Option<StopReason>,
    reply: Option<ReplyKind>,
    reply_digest: Option<String>,
    /// Why a successful run delivered nothing though it had something to say.
    withheld: Option<Withheld>,
}

/// Why a reply with something to say was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// The target is `silent`: the reply stays in the run log.
    Silent,
    /// The target does not show alerts (`show_alerts = false`).
    AlertsHidden,
    /// Identical to one delivered within the dedup window.
    Duplicate,
    /// A main-mode cron job: its text went to the agent heartbeat as a system event.
    SystemEvent,
}

impl Withheld {
    pub fn as_str(self) -> &'static str {
        match self {
            Withheld::Silent => "silent",
            Withheld::AlertsHidden => "alerts-hidden",
            Withheld::Duplicate => "duplicate",
            Withheld::SystemEvent => "system-event",
        }
    }
}

impl Outcome {
    fn failed(error: String, stop_reason: Option<StopReason>) -> Self {
        Self {
            status: ExecutionStatus::Failed,
            delivery: DeliveryStatus::NotNeeded,
            error: Some(error),
            preview: None,
            stop_reason,
            reply: None,
            reply_digest: None,
            withheld: None,
        }
    }

    fn withheld(mut self, why: Withheld) -> Self {
        self.withheld = Some(why);
        self
    }

    /// A successful run that delivers nothing.
    fn quiet(reply: Option<ReplyKind>, preview: Option<String>, stop_reason: Option<StopReason>) -> Self {
        Self {
            status: ExecutionStatus::Succeeded,
            delivery: DeliveryStatus::NotNeeded,
            error: None,
            preview,
            stop_reason,
            reply,
            reply_digest: None,
            withheld: None,
        }
    }
}

/// A finished run and what the store made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRun {
    pub record: RunRecord,
    /// The breaker step the store applied; `None` when `finish_runs` failed: the store
    /// still says `running` (start-up will mark it interrupted) and the breaker did not
    /// move, so the driver must not act on it either.
    pub breaker: Option<BreakerStep>,
    /// Why a successful run with something to say delivered nothing.
    pub withheld: Option<Withheld>,
}

/// Runs a claimed slot to the end and records it. Never panics on what the LLM, the tools
/// or the messenger return; every failure becomes a recorded status. `consumes` names the
/// system events the prompt lists: they leave the queue with the record of a success.
/// A definition that could not be read fails the run at once, before any tool or model
/// call.
pub async fn run_claimed(context: Arc<RunContext>, claimed: Claimed, slot: Timestamp, consumes: Vec<u64>) {
    let (key, kind, timeout) = match &claimed {
        Claimed::Read(def) => (def.key.clone(), def.kind, def.timeout),
        Claimed::Unreadable { key, kind, .. } => (key.clone(), *kind, Duration::ZERO),
    };
    let started = context.clock.monotonic();
    let started_at = context.clock.wall();
    let deadline = started + timeout;
    let llm =
        MeteringLlm::new(Arc::clone(&context.llm), Arc::clone(&context.prices), Arc::clone(&context.clock), started);
    let meter = llm.reader();
    // Dropped only after the result is in the store, where the next dedup check reads it.
    let mut dedup_hold = None;
    let scope = Arc::new(RunScope {
        key: key.clone(),
        slot,
        deadline,
        clock: Arc::clone(&context.clock),
        fence: context.fence.clone(),
        records: std::sync::Mutex::default(),
        call_starts: std::sync::Mutex::default(),
    });
    // What the servers offer as the run starts, narrowed by the agent's and the job's lists.
    let run_tools = match &claimed {
        Claimed::Read(def) if def.kind != JobKind::CronMain => Some(tools_of_run(&context, def)),
        _ => None,
    };
    let outcome = match &claimed {
        Claimed::Unreadable { error, .. } => Outcome::failed(format!("{DEFINITION_UNREADABLE}: {error}"), None),
        Claimed::Read(def) => tokio::select! {
            biased;
            outcome = attempt(&context, def, slot, &llm, &mut dedup_hold, &scope, run_tools.as_ref(), !consumes.is_empty()) => outcome,
            () = context.clock.sleep_until(deadline) => Outcome {
                status: ExecutionStatus::TimedOut,
                // A delivery cut off mid-way may or may not have arrived; the idempotency key
                // lets a receiver drop a repeat.
                delivery: DeliveryStatus::NotNeeded,
                error: Some(format!("run exceeded its {} s budget", def.timeout.as_secs())),
                preview: None,
                stop_reason: None,
                reply: None,
                reply_digest: None,
                withheld: None,
            },
        },
    };
    let metered = meter.read();
    let transcript = meter.transcript(&context.redactor);
    let record = RunRecord {
        key: key.clone(),
        slot,
        finished_at: context.clock.wall(),
        status: outcome.status,
        delivery: outcome.delivery,
        duration: context.clock.monotonic().saturating_since(started),
        // Display copies: a NUL (which PostgreSQL cannot keep) becomes U+FFFD on every store.
        error: outcome.error.map(|text| into_without_nul(into_truncated_chars(text, ERROR_TEXT_CHARS_MAX))),
        output_preview: outcome.preview.map(into_without_nul),
        stop_reason: outcome.stop_reason,
        reply: outcome.reply,
        reply_digest: outcome.reply_digest,
        consumes,
        llm_calls: metered.calls,
        usage: metered.usage,
        provider_refused: metered.refused,
        transcript,
        tool_use: tool_use(run_tools.as_ref(), &scope),
    };
    if context.telemetry.enabled() {
        context.telemetry.export(run_trace(&record, started, started_at, &meter, &scope));
    }
    if kind == JobKind::Agent {
        // The agent's main context is free once the turn is over.
        context.lanes.end_heartbeat(&key.agent);
    }
    // The writer hands the driver this run's completion in the store's commit order.
    context.results.finish(record, outcome.withheld).await;
    drop(dedup_hold);
}

/// The run's trace: its span, each completion and each tool call, from what it measured.
fn run_trace(
    record: &RunRecord,
    started: Mono,
    started_at: Timestamp,
    meter: &MeterReader,
    scope: &RunScope,
) -> RunTrace {
    let tool_calls = scope
        .records()
        .into_iter()
        .zip(scope.call_starts())
        .map(|(call, start)| ToolSpan {
            offset: start.saturating_since(started),
            duration: std::time::Duration::from_millis(call.duration_ms),
            tool: call.tool,
            outcome: call.outcome,
        })
        .collect();
    RunTrace {
        key: record.key.clone(),
        slot: record.slot,
        started_at,
        duration: record.duration,
        status: record.status,
        error: record.error.clone(),
        completions: meter.completions(),
        tool_calls,
    }
}

/// The tools a run gets: what the servers offer now, within its agent's and job's lists.
fn tools_of_run(context: &RunContext, def: &HeartbeatDef) -> (RunTools, Vec<ServerTool>) {
    let catalog = context.tool_servers.catalog();
    let ready = catalog.values().filter(|server| server.state == ServerState::Ready);
    let listed: Vec<&ServerTool> = ready.flat_map(|server| &server.tools).collect();
    let available: Vec<OfferedTool> =
        listed.iter().map(|tool| OfferedTool { name: tool.name.clone(), read_only: tool.read_only }).collect();
    let down = |server: &str| match catalog.get(server).map(|view| &view.state) {
        None => Some(format!("no server named {server} is configured")),
        Some(ServerState::Ready) => None,
        Some(ServerState::Starting) => Some(format!("server {server} is still starting")),
        Some(ServerState::Down { why, .. }) => Some(format!("server {server} is down: {why}")),
    };
    let settings = context.settings(&def.key.agent);
    let decided = tools_for_run(&settings.tools, &def.tools, &available, down);
    let offered = decided
        .offered
        .iter()
        .filter_map(|offer| listed.iter().find(|tool| tool.name == offer.name).map(|tool| (*tool).clone()))
        .collect();
    (decided, offered)
}

/// The run log's record of tools: `None` for a run that had none and called none.
fn tool_use(run_tools: Option<&(RunTools, Vec<ServerTool>)>, scope: &RunScope) -> Option<ToolUse> {
    let offered: Vec<String> =
        run_tools.map(|(_, tools)| tools.iter().map(|tool| tool.name.to_string()).collect()).unwrap_or_default();
    let calls = scope.records();
    (!offered.is_empty() || !calls.is_empty()).then_some(ToolUse { offered, calls })
}

#[allow(clippy::too_many_arguments)]
async fn attempt(
    context: &RunContext,
    def: &HeartbeatDef,
    slot: Timestamp,
    llm: &dyn Llm,
    dedup_hold: &mut Option<DedupHold>,
    scope: &Arc<RunScope>,
    run_tools: Option<&(RunTools, Vec<ServerTool>)>,
    has_events: bool,
) -> Outcome {
    let Some((decided, offered)) = run_tools else {
        return queue_system_event(context, def).await;
    };
    if !decided.missing.is_empty() {
        // A run never starts with fewer tools than it must have.
        let missing: Vec<String> = decided.missing.iter().map(ToString::to_string).collect();
        return Outcome::failed(missing.join("; "), None);
    }
    let toolbox = if offered.is_empty() {
        Arc::clone(&context.toolbox)
    } else {
        let external = offered
            .iter()
            .map(|tool| Arc::new(ExternalTool::new(tool.clone(), Arc::clone(&context.tool_servers))) as Arc<dyn Tool>);
        Arc::new(context.toolbox.with(external))
    };
    let settings = context.settings(&def.key.agent);
    let tools = ToolContext {
        agent: def.key.agent.clone(),
        settings: Arc::clone(&settings),
        control: Arc::new(context.control.clone()),
        operator: false,
        run: Some(Arc::clone(scope)),
    };
    // The job's own model first (a cheaper one for routine checks), then the agent
    // heartbeat's, then the engine's.
    let (model, ack_max_chars) = match def.kind {
        JobKind::Agent => (
            settings.agent_heartbeat.model.as_deref().or(context.model.as_deref()),
            settings.agent_heartbeat.ack_max_chars,
        ),
        _ => (context.model.as_deref(), settings.ack_max_chars),
    };
    let model = def.model.as_deref().or(model);
    // The job's pre-check: a quiet answer ends the run before any LLM call (ADR 0021),
    // unless the run carries system events: they are work the model must see, and a run
    // that succeeds consumes them.
    let mut prompt = Arc::clone(&def.prompt);
    if let Some(check) = &def.tools.check {
        match pre_check(&toolbox, &tools, check).await {
            Checked::Quiet if has_events => {}
            Checked::Quiet => {
                let preview = format!("{} found nothing to do; the model was not asked", check.tool);
                return Outcome::quiet(None, Some(preview), Some(StopReason::QuietCheck));
            }
            Checked::Found(answer) => prompt = tool_check::prompt_with_answer(&def.prompt, check, &answer).into(),
            Checked::Failed(error) => {
                return Outcome::failed(format!("the check {} failed: {error}", check.tool), None)
            }
        }
    }
    let looped = match run_loop(llm, &toolbox, &tools, &context.system_prompt, prompt, model).await {
        Ok(looped) => looped,
        Err(error) => return Outcome::failed(error.to_string(), None),
    };
    let stop_reason = Some(looped.stop);
    if looped.stop == StopReason::IterationCap {
        // A model that only ever asks for tools spends money and says nothing: a failure.
        let error = format!("the agent loop reached its cap of {} LLM calls", settings.loop_iterations_max);
        return Outcome::failed(error, stop_reason);
    }
    let raw = looped.text.unwrap_or_default();
    let visibility = context.visibility.resolve(&def.target);
    let (text, kind, digest, preview) = match reply::classify(&raw, ack_max_chars) {
        Reply::Empty => return Outcome::quiet(Some(ReplyKind::Empty), None, stop_reason),
        // "All is well": the token is never delivered to anyone, named heartbeats included;
        // a target that shows acknowledgements gets their note (or `ACK_SHOWN_TEXT`).
        Reply::Ack { note } => {
            let preview = (!note.is_empty()).then(|| truncate_chars(&note, OUTPUT_PREVIEW_CHARS_MAX));
            if !visibility.show_ok || def.target.is_silent() {
                return Outcome::quiet(Some(ReplyKind::Token), preview, stop_reason);
            }
            let text = if note.is_empty() { ACK_SHOWN_TEXT.to_owned() } else { note };
            let preview = Some(truncate_chars(&text, OUTPUT_PREVIEW_CHARS_MAX));
            (text, ReplyKind::Token, None, preview)
        }
        Reply::Alert { text } => {
            let preview = Some(truncate_chars(&text, OUTPUT_PREVIEW_CHARS_MAX));
            if def.target.is_silent() {
                // `delivery = "silent"`: the reply stays in the run log.
                return Outcome::quiet(None, preview, stop_reason).withheld(Withheld::Silent);
            }
            if !visibility.show_alerts {
                return Outcome::quiet(None, preview, stop_reason).withheld(Withheld::AlertsHidden);
            }
            let digest = reply::digest(&text);
            if def.dedup {
                *dedup_hold = Some(context.dedup_gate.hold(&def.key, &digest).await);
            }
            if def.dedup && delivered_recently(context, def, &digest).await {
                let outcome = Outcome::quiet(Some(ReplyKind::Duplicate), preview, stop_reason);
                return outcome.withheld(Withheld::Duplicate);
            }
            (text, ReplyKind::Sent, Some(digest), preview)
        }
    };
    let delivery = Delivery {
        target: def.target.clone(),
        heartbeat: def.key.clone(),
        scheduled_for: slot,
        idempotency_key: idempotency_key(&def.key, slot),
        text,
        kind: DeliveryKind::Reply,
        fence: context.fence.clone(),
    };
    // A node that lost its lease while the model answered (paused past it, cut from the
    // store) must not deliver for a partition another node may run by now (ADR 0018).
    let delivered = match context.fence.check() {
        Ok(()) => context.messenger.deliver(&delivery).await,
        Err(fenced) => Err(DeliveryError::Fenced { target: def.target.to_string(), parts_sent: 0, fenced }),
    };
    match delivered {
        Ok(()) => Outcome {
            status: ExecutionStatus::Succeeded,
            delivery: DeliveryStatus::Delivered,
            error: None,
            preview,
            stop_reason,
            reply: Some(kind),
            reply_digest: digest,
            withheld: None,
        },
        Err(error) => Outcome {
            status: ExecutionStatus::Failed,
            delivery: DeliveryStatus::Failed,
            error: Some(error.to_string()),
            preview,
            stop_reason,
            reply: Some(kind),
            reply_digest: None,
            withheld: None,
        },
    }
}

/// What a job's pre-check answered.
enum Checked {
    Quiet,
    Found(String),
    Failed(String),
}

/// Calls the job's check tool as the model would (recorded, within the per-run cap and the
/// run's budget, fenced when it may write). A failed check fails the run: without its
/// answer the run cannot tell a quiet inbox from a full one, and a failure is announced.
async fn pre_check(toolbox: &ToolBox, tools: &ToolContext, check: &ToolCheck) -> Checked {
    let outcome = call_recorded(toolbox, tools, &check.tool.model_name(), &check.arguments_text()).await;
    if outcome.is_error {
        Checked::Failed(outcome.content)
    } else if tool_check::is_quiet(&outcome.content) {
        Checked::Quiet
    } else {
        Checked::Found(outcome.content)
    }
}

/// A main-mode cron job's run: its text goes into the agent's system-events queue (the
/// driver then wakes the agent heartbeat). No LLM call of its own.
async fn queue_system_event(context: &RunContext, def: &HeartbeatDef) -> Outcome {
    let text = cron_event_text(def.key.heartbeat.as_str(), &def.prompt);
    match context.store.queue_system_event(&def.key.agent, &text, context.clock.wall()).await {
        Ok(queued) => {
            let (id, dropped) = match queued {
                Queued::Added { id, dropped } => (Some(id), dropped),
                Queued::Duplicate => (None, 0),
            };
            let event = EngineEvent::SystemEventQueued { key: def.key.clone(), id, dropped };
            context.events.emit(context.clock.wall(), &event);
            let preview = match id {
                Some(id) => format!("queued for the agent heartbeat as system event {id}"),
                None => "the newest queued system event says the same; not queued again".to_owned(),
            };
            Outcome::quiet(None, Some(preview), None).withheld(Withheld::SystemEvent)
        }
        Err(error) => Outcome::failed(format!("could not queue the system event: {error}"), None),
    }
}

/// Whether this heartbeat delivered the same reply within the dedup window. When the store
/// cannot say, the reply is delivered: an alert twice is better than an alert lost.
async fn delivered_recently(context: &RunContext, def: &HeartbeatDef, digest: &str) -> bool {
    let window = SignedDuration::from_secs(i64::try_from(DEDUP_WINDOW_SECS).unwrap_or(i64::MAX));
    let since = context.clock.wall().checked_sub(window).unwrap_or(Timestamp::MIN);
    let query = DedupQuery { key: def.key.clone(), digest: digest.to_owned(), since };
    let store = context.store.as_ref();
    let read = |queries: Vec<DedupQuery>| async move { store.delivered_since(&queries).await };
    match context.dedup_reads.delivered_since(query, read).await {
        Ok(found) => found,
        Err(error) => {
            let event = EngineEvent::StoreFailed {
                operation: "delivered_since",
                error: error.to_string(),
                consequence: "the reply is delivered without the duplicate check",
            };
            context.events.emit(context.clock.wall(), &event);
            false
        }
    }
}
