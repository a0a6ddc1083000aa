//! The ports of one simulated cluster node: the shared memory store seen through the
//! node's link (which a partition cuts), leases that record every grant, partition stores
//! that record every fenced write and its verdict, a model that answers after a seeded
//! delay, and the real delivery code posting to a receiver that records every part.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use serde_json::json;
use systole::core::breaker::BreakerStep;
use systole::core::budget::DaySpend;
use systole::core::heartbeat::{Heartbeat, HeartbeatDef};
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::partition::LeaseView;
use systole::core::pause::PauseRecord;
use systole::core::retention::RunRetention;
use systole::core::system_events::SystemEvent;
use systole::delivery::platform::Platform;
use systole::delivery::sender::{ChatSender, Destination};
use systole::driver::events::{EngineEvent, EventSink};
use systole::ports::clock::Clock;
use systole::ports::http::{HttpClient, HttpError, HttpRequest, HttpResponse};
use systole::ports::leases::{Lease, Leases};
use systole::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError, Role, ToolCall};
use systole::ports::messenger::Messenger;
use systole::ports::store::{
    ClaimOutcome, DedupQuery, Definitions, Execution, ExecutionStatus, NextSlot, Queued, RunRecord, SeedReport,
    SkipRecord, SlotClaim, Store, StoreError,
};

use super::freezes::{wait_for_row, Taken, Thawed};
use super::{ClusterWorld, FaultKind, Record, MODEL_HANG_SECS, REMINDER_PREFIX};
use crate::ports::store::HALF_OPEN_WRITE;
use systole::cluster;

/// The share of runs, in percent, whose model pauses its agent (for 2 to 7 minutes) or
/// sets it a one-shot reminder (due in 1 to 5 minutes), at any time of the seed.
const MODEL_PAUSE_PERCENT: u32 = 2;
const MODEL_PAUSE_MINUTES: std::ops::Range<u64> = 2..8;
const MODEL_REMINDER_PERCENT: u32 = 3;
const REMINDER_SECS: std::ops::Range<u64> = 60..300;

/// How long a call waits before a partitioned node learns the store is unreachable.
const UNREACHABLE_AFTER_SECS: u64 = 1;
/// How long a read of every row takes to reach its reader.
pub(crate) const HEARTBEATS_READ_MS: u64 = 500;

/// The node's link to the store: every call goes through it.
#[derive(Clone)]
pub struct Link {
    pub world: Arc<ClusterWorld>,
    pub node: String,
}

impl Link {
    async fn check(&self) -> Result<(), StoreError> {
        if self.world.is_partitioned(&self.node) {
            self.world.clock.sleep(Duration::from_secs(UNREACHABLE_AFTER_SECS)).await;
            return Err(StoreError::Backend(format!("{} cannot reach the store (partitioned)", self.node)));
        }
        Ok(())
    }
}

/// The store as one node sees it; `lease` is set for a partition's engine.
pub struct NodeStore {
    pub link: Link,
    pub inner: Arc<dyn Store>,
    pub lease: Option<Lease>,
}

impl NodeStore {
    /// A fenced write: reaches the store only over a healthy link; its verdict (written
    /// or refused as fenced) is recorded with the term it carried.
    async fn write<T>(
        &self,
        kind: &'static str,
        apply: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.write_of(kind, None, apply).await
    }

    /// [`Self::write`], of `pause_of`'s pause if it writes one: recorded with the agent, and
    /// a freeze may wait for the write that deletes it (a pause's end, whichever call the
    /// engine ends it with, or a resume).
    async fn write_of<T>(
        &self,
        kind: &'static str,
        pause_of: Option<&AgentId>,
        apply: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.link.check().await?;
        let world = &self.link.world;
        let deletes_pause = pause_of.filter(|_| kind != "set_pause");
        let taken = match &self.lease {
            Some(lease) => world.freezes.take(world, &self.link.node, lease.partition, deletes_pause),
            None => Taken::No,
        };
        let frozen = match (&self.lease, taken) {
            (Some(_), Taken::InTransaction) => match world.freezes.wait_thawed(&self.link.node).await {
                Thawed::Alive { partition } => Some(partition),
                Thawed::Ended => {
                    return Err(StoreError::Backend(
                        "terminating connection due to idle-in-transaction timeout".to_owned(),
                    ))
                }
            },
            _ => None,
        };
        let result = apply.await;
        if let Some(partition) = frozen {
            world.freezes.release(world, &self.link.node, partition);
        }
        let verdict = match &result {
            Ok(_) => Some(true),
            Err(StoreError::Fenced { .. }) => Some(false),
            Err(_) => None,
        };
        if let (Some(lease), Some(accepted)) = (&self.lease, verdict) {
            self.link.world.record(Record::Write {
                node: self.link.node.clone(),
                partition: lease.partition,
                term: lease.term,
                kind,
                agent: pause_of.cloned(),
                accepted,
            });
        }
        if taken == Taken::AfterCommit {
            world.freezes.stop_after_commit(&self.link.node).await;
        }
        result
    }
}

#[async_trait]
impl Store for NodeStore {
    async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
        self.link.check().await?;
        let rows = self.inner.load_heartbeats().await;
        // Every row takes a while to come: a reload's engines take its rows later, and an
        // operator's change may come in between (ADR 0056).
        self.link.world.clock.sleep(Duration::from_millis(HEARTBEATS_READ_MS)).await;
        rows
    }

    async fn heartbeats(&self, keys: &[HeartbeatKey]) -> Result<Vec<Heartbeat>, StoreError> {
        self.link.check().await?;
        self.inner.heartbeats(keys).await
    }

    async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError> {
        self.link.check().await?;
        let report = self.inner.seed_config(defs, at).await?;
        let keys: Vec<HeartbeatKey> = report.inserted.iter().chain(&report.updated).cloned().collect();
        if !keys.is_empty() {
            self.link.world.record(Record::Seeded { node: self.link.node.clone(), keys });
        }
        Ok(report)
    }

    async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError> {
        self.write("put_heartbeat", self.inner.put_heartbeat(def, at)).await
    }

    async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        self.write("delete_heartbeat", self.inner.delete_heartbeat(key)).await
    }

    async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError> {
        self.write("set_enabled", self.inner.set_enabled(key, enabled, reason)).await
    }

    async fn disable_if_enabled(&self, key: &HeartbeatKey, reason: &str) -> Result<bool, StoreError> {
        self.write("disable_if_enabled", self.inner.disable_if_enabled(key, reason)).await
    }

    async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
        self.write(HALF_OPEN_WRITE, self.inner.half_open_breaker(key)).await
    }

    async fn set_next_slots(&self, slots: &[(HeartbeatKey, NextSlot)]) -> Result<(), StoreError> {
        self.write("set_next_slots", self.inner.set_next_slots(slots)).await
    }

    async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let outcomes = self.write("claim_slots", self.inner.claim_slots(claims)).await?;
        for (claim, outcome) in claims.iter().zip(&outcomes) {
            if *outcome == ClaimOutcome::Claimed {
                self.link.world.record(Record::Claimed {
                    node: self.link.node.clone(),
                    key: claim.key.clone(),
                    slot: claim.slot,
                });
            }
        }
        Ok(outcomes)
    }

    async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError> {
        self.write("record_skips", self.inner.record_skips(skips)).await
    }

    async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError> {
        self.write("finish_runs", self.inner.finish_runs(runs, breaker_failures_max)).await
    }

    async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError> {
        self.write("recover_interrupted", self.inner.recover_interrupted(at)).await
    }

    async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError> {
        self.write_of("set_pause", Some(agent), self.inner.set_pause(agent, pause)).await
    }

    async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError> {
        self.write_of("clear_pause", Some(agent), self.inner.clear_pause(agent)).await
    }

    async fn end_pause(&self, agent: &AgentId, until: Timestamp) -> Result<(), StoreError> {
        self.write_of("end_pause", Some(agent), self.inner.end_pause(agent, until)).await
    }

    async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError> {
        self.link.check().await?;
        self.inner.load_pauses().await
    }

    async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError> {
        self.link.check().await?;
        self.inner.consecutive_failures(key).await
    }

    async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError> {
        self.link.check().await?;
        self.inner.prune_runs(now, retention).await
    }

    async fn latest_slots(&self, keys: &[HeartbeatKey]) -> Result<BTreeMap<HeartbeatKey, Timestamp>, StoreError> {
        self.link.check().await?;
        self.inner.latest_slots(keys).await
    }

    async fn executions_page(
        &self,
        key: &HeartbeatKey,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Execution>, StoreError> {
        self.link.check().await?;
        self.inner.executions_page(key, before, limit).await
    }

    async fn definitions(&self, keys: &[HeartbeatKey]) -> Result<Definitions, StoreError> {
        self.link.check().await?;
        self.inner.definitions(keys).await
    }

    async fn delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
        self.link.check().await?;
        self.inner.delivered_since(queries).await
    }

    async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError> {
        self.link.check().await?;
        self.inner.queue_system_event(agent, text, at).await
    }

    async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError> {
        self.link.check().await?;
        self.inner.pending_system_events(agent, now).await
    }

    async fn spent_since(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
        excluding: &[(HeartbeatKey, Timestamp)],
    ) -> Result<DaySpend, StoreError> {
        self.link.check().await?;
        self.inner.spent_since(agent, since, excluding).await
    }

    async fn transcript(&self, key: &HeartbeatKey, slot: Timestamp) -> Result<Option<String>, StoreError> {
        self.link.check().await?;
        self.inner.transcript(key, slot).await
    }

    async fn spent_by_job(
        &self,
        agent: Option<&AgentId>,
        since: Timestamp,
    ) -> Result<BTreeMap<HeartbeatKey, DaySpend>, StoreError> {
        self.link.check().await?;
        self.inner.spent_by_job(agent, since).await
    }
}

/// The lease port as one node sees it: over its link, every grant recorded.
pub struct NodeLeases {
    pub link: Link,
    pub inner: Arc<systole::store::memory::MemoryStore>,
}

#[async_trait]
impl Leases for NodeLeases {
    async fn announce(
        &self,
        node: &str,
        api_url: Option<&str>,
        ttl: Duration,
    ) -> Result<std::collections::BTreeSet<String>, StoreError> {
        self.link.check().await?;
        self.inner.announce(node, api_url, ttl).await
    }

    async fn lease_table(&self) -> Result<Vec<LeaseView>, StoreError> {
        self.link.check().await?;
        self.inner.lease_table().await
    }

    async fn acquire(&self, node: &str, partition: u32, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let world = &self.link.world;
        let sent = world.clock.monotonic().since_origin();
        self.link.check().await?;
        // The grant's UPDATE waits for a row a frozen transaction holds, but only when it
        // would take the row (the lease has expired), within the lease loop's lock bound.
        let expired = self.inner.lease_table().await?.iter().any(|row| row.partition == partition && row.expired);
        if expired && world.freezes.row_held_by_other(partition, node) {
            let bound = Duration::from_millis(cluster::LEASE_LOCK_WAIT_MS_MAX);
            let (waited, gave_up) = wait_for_row(world, node, partition, bound).await;
            world.record(Record::LockWaited { node: node.to_owned(), partition, waited, gave_up });
            if gave_up {
                return Err(StoreError::Backend("canceling statement due to lock timeout".to_owned()));
            }
        }
        let lease = self.inner.acquire(node, partition, ttl).await?;
        if let Some(lease) = &lease {
            self.link.world.record(Record::Granted { node: node.to_owned(), partition, term: lease.term, sent });
        }
        Ok(lease)
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        let sent = self.link.world.clock.monotonic().since_origin();
        self.link.check().await?;
        let renewed = self.inner.renew(lease, ttl).await?;
        if renewed {
            self.link.world.record(Record::Renewed {
                node: lease.node.clone(),
                partition: lease.partition,
                term: lease.term,
                sent,
            });
        }
        Ok(renewed)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.link.check().await?;
        self.inner.release(lease).await?;
        self.link.world.record(Record::Released {
            node: lease.node.clone(),
            partition: lease.partition,
            term: lease.term,
        });
        Ok(())
    }

    async fn leave(&self, node: &str) -> Result<(), StoreError> {
        self.link.check().await?;
        self.inner.leave(node).await
    }

    fn partition_store(&self, lease: &Lease) -> Arc<dyn Store> {
        Arc::new(NodeStore {
            link: self.link.clone(),
            inner: self.inner.partition_store(lease),
            lease: Some(lease.clone()),
        })
    }
}

/// A model that answers every prompt with a new line of text after a seeded delay; the
/// world counts its calls in flight (a pause-with-reply fault waits for one).
pub struct SlowModel {
    pub world: Arc<ClusterWorld>,
    pub node: String,
    pub replies: AtomicU64,
}

#[async_trait]
impl Llm for SlowModel {
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let world = &self.world;
        let options = &world.options;
        let hangs = world.strikes(FaultKind::ModelHung, options.model_hang_percent);
        let delay = if hangs { MODEL_HANG_SECS * 1_000 } else { world.draw(200..8_000) };
        world.count_call(&self.node, 1);
        world.clock.sleep(Duration::from_millis(delay)).await;
        world.count_call(&self.node, -1);
        if world.strikes(FaultKind::ModelRefused, options.model_refusal_percent) {
            return Err(LlmError::Status { status: 402, body: "spend cap reached".to_owned() });
        }
        if world.strikes(FaultKind::ModelFailed, options.model_failure_percent) {
            return Err(LlmError::Status { status: 500, body: "internal error".to_owned() });
        }
        // The agent layer: a run's first call may pause the agent's heartbeats or set it a
        // one-shot reminder, through the engine's own tools and its partition's store.
        let first_call = !request.messages.iter().any(|message| message.role == Role::Tool);
        let offered = |name: &str| request.tools.iter().any(|tool| tool.name == name);
        if first_call
            && offered("pause_heartbeats")
            && world.strikes_always(FaultKind::ModelPaused, MODEL_PAUSE_PERCENT)
        {
            let minutes = world.draw(MODEL_PAUSE_MINUTES.start..MODEL_PAUSE_MINUTES.end);
            let call = ToolCall {
                id: "pause".to_owned(),
                name: "pause_heartbeats".to_owned(),
                arguments: json!({ "minutes": minutes }).to_string(),
            };
            return Ok(ChatResponse { text: None, tool_calls: vec![call], usage: None });
        }
        if first_call && offered("heartbeat") && world.strikes_always(FaultKind::ModelReminder, MODEL_REMINDER_PERCENT)
        {
            let due = world
                .clock
                .wall()
                .saturating_add(Duration::from_secs(world.draw(REMINDER_SECS.start..REMINDER_SECS.end)))
                .unwrap_or(world.clock.wall());
            let due = Timestamp::from_second(due.as_second()).unwrap_or(due);
            let arguments = json!({
                "action": "create",
                "id": format!("{REMINDER_PREFIX}{}", due.as_second()),
                "prompt": "reminder",
                "at": due.to_string(),
                "delivery_target": "sim:inbox",
            });
            let call =
                ToolCall { id: "remind".to_owned(), name: "heartbeat".to_owned(), arguments: arguments.to_string() };
            return Ok(ChatResponse { text: None, tool_calls: vec![call], usage: None });
        }
        let count = self.replies.fetch_add(1, Ordering::SeqCst);
        Ok(ChatResponse { text: Some(format!("status report {count}")), tool_calls: Vec::new(), usage: None })
    }
}

/// The node's messenger: the engine's real delivery code (`ChatSender`, which checks the
/// lease's fence before each part) posting to a webhook that records every part.
pub fn recording_messenger(link: &Link, clock: Arc<dyn Clock>) -> Arc<dyn Messenger> {
    let destination = Destination {
        platform: Platform::Webhook { url: "http://receiver.sim/hook".to_owned(), secret: None },
        timeout: Duration::from_secs(10),
        attempts_max: 3,
        allow_mentions: false,
    };
    let http = Arc::new(RecordingHttp { link: link.clone() });
    let rng = ChaCha8Rng::seed_from_u64(link.world.options.seed);
    Arc::new(ChatSender::new(http, clock, rng, BTreeMap::from([("sim".to_owned(), destination)])))
}

/// A webhook receiver that records each part it is posted, by its idempotency key
/// (`agent/heartbeat/slot ms`, with `/part-...` for a later part).
struct RecordingHttp {
    link: Link,
}

#[async_trait]
impl HttpClient for RecordingHttp {
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let key = request.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("idempotency-key"));
        let Some((_, key)) = key else { return Err(HttpError("no Idempotency-Key header".to_owned())) };
        let agent = key.split('/').next().and_then(|agent| AgentId::new(agent).ok());
        let Some(agent) = agent else { return Err(HttpError(format!("no agent in the key {key:?}"))) };
        let world = &self.link.world;
        if world.strikes(FaultKind::DeliveryRefused, world.options.delivery_refusal_percent) {
            return Ok(HttpResponse { status: 503, headers: Vec::new(), body: Vec::new() });
        }
        // Breaker announcements carry the slot's key with a suffix; only replies are judged.
        if key.split('/').count() == 3 {
            self.link.world.record(Record::Delivered {
                node: self.link.node.clone(),
                agent,
                idempotency_key: key.clone(),
            });
        }
        Ok(HttpResponse { status: 200, headers: Vec::new(), body: Vec::new() })
    }
}

/// Whether to print every engine event of every node (`SIM_EVENTS=1`, for a replay: the
/// record keeps only what the checker reads).
fn print_events() -> bool {
    static PRINT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRINT.get_or_init(|| std::env::var_os("SIM_EVENTS").is_some())
}

/// Records the runs each node starts, and the deliveries its fence dropped.
pub struct RunSink {
    pub link: Link,
}

impl EventSink for RunSink {
    fn emit(&self, at: Timestamp, event: &EngineEvent) {
        if print_events() {
            let true_time = self.link.world.clock.monotonic().since_origin().as_secs_f64();
            eprintln!("EVENT {true_time:.3}s {} {at} {event:?}", self.link.node);
        }
        match event {
            EngineEvent::RunStarted { key, slot } => {
                let node = self.link.node.clone();
                self.link.world.record(Record::RunStarted { node, key: key.clone(), slot: *slot });
            }
            // A delivery the lease's fence dropped: proof that the fence fires.
            EngineEvent::RunFinished { key, error: Some(error), .. } if error.contains("fenced: ") => {
                self.link.world.record(Record::EffectFenced { node: self.link.node.clone(), key: key.clone() });
            }
            EngineEvent::RunFinished {
                key, slot, status: ExecutionStatus::Failed | ExecutionStatus::TimedOut, ..
            } => {
                let node = self.link.node.clone();
                self.link.world.record(Record::RunFailed { node, key: key.clone(), slot: *slot });
            }
            EngineEvent::RunsPruned { deleted } => self.link.world.count_by(FaultKind::RunsPruned, *deleted),
            EngineEvent::Skipped { key, slot, .. } => {
                let node = self.link.node.clone();
                self.link.world.record(Record::Skipped { node, key: key.clone(), slot: *slot });
            }
            EngineEvent::Triggered { key, slot, .. } => {
                let node = self.link.node.clone();
                self.link.world.record(Record::SlotTriggered { node, key: key.clone(), slot: *slot });
            }
            EngineEvent::Paused { agent, minutes, until } => {
                let node = self.link.node.clone();
                let (agent, minutes, until) = (agent.clone(), *minutes, *until);
                self.link.world.record(Record::AgentPaused { node, agent, minutes, until });
            }
            EngineEvent::DefinitionApplied { key } if key.heartbeat.as_str().starts_with(REMINDER_PREFIX) => {
                let node = self.link.node.clone();
                self.link.world.record(Record::ReminderSet { node, key: key.clone() });
            }
            EngineEvent::BreakerTripped { key, probe_at, .. } => {
                let cooldown = probe_at.map(|probe_at| probe_at.duration_since(at).unsigned_abs());
                let node = self.link.node.clone();
                self.link.world.record(Record::BreakerTripped { node, key: key.clone(), cooldown });
            }
            _ => {}
        }
    }
}
