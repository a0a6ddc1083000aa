//! The cases that run systole: the real engine, the real clock, the memory store or SQLite
//! on disk, an LLM that answers at once and a messenger that accepts at once. Each case
//! runs in a process of its own, so its resident memory is its own.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use tokio::sync::Notify;

use systole::adapters::scripted_llm::ScriptedLlm;
use systole::adapters::system_clock::SystemClock;
use systole::core::delivery_target::DeliveryTarget;
use systole::core::guard::SkipReason;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::{jitter_offset, RunPolicy};
use systole::core::schedule::Schedule;
use systole::driver::events::{EngineEvent, EventSink};
use systole::driver::{self, EngineHandle, EngineOptions, Ports};
use systole::ports::messenger::{Delivery, DeliveryError, Messenger};
use systole::ports::store::{NextSlot, SkipRecord, Store};
use systole::store::memory::MemoryStore;
use systole::store::sqlite::SqliteStore;

use crate::measure::{cpu_time, heap_in_use_bytes, lateness_figures, resident_bytes, Figures};

/// Heartbeats are spread over this many agents, as a multi-tenant deployment would be.
const AGENTS: usize = 1_000;
/// A prompt of a realistic length (a few sentences of instructions).
const PROMPT_BYTES: usize = 240;
/// How long a case waits for its runs before counting the rest as lost.
const RUNS_WAIT_SECS_MAX: u64 = 300;
/// A reply with something to say, so every run goes through dedup and delivery.
const ALERT_REPLY: &str = "Queue depth is 4,812, above the threshold of 1,000: the consumer looks stuck.";
const SILENT_REPLY: &str = "HEARTBEAT_OK";

pub enum StoreKind {
    Memory,
    Sqlite,
}

impl StoreKind {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "memory" => Some(Self::Memory),
            "sqlite" => Some(Self::Sqlite),
            _ => None,
        }
    }
}

/// The key of the `index`th heartbeat. Its agent's id is one shared text, as the daemon's
/// config gives every heartbeat of an agent (`config_jobs`) and a SQL store's load shares
/// them: a text of its own for each heartbeat made the driver's key comparisons read a
/// hundred thousand agent texts where a process holds a thousand.
pub fn key(index: usize) -> HeartbeatKey {
    static AGENT_IDS: std::sync::LazyLock<Vec<AgentId>> = std::sync::LazyLock::new(|| {
        (0..AGENTS).map(|agent| AgentId::new(format!("agent-{agent}")).expect("a valid agent id")).collect()
    });
    let agent = AGENT_IDS[index % AGENTS].clone();
    let heartbeat = HeartbeatId::new(format!("check-{index}")).expect("a valid heartbeat id");
    HeartbeatKey { agent, heartbeat }
}

/// `count` heartbeats from `first` on, every `every`, spread by a jitter of up to `jitter`.
pub fn defs(first: usize, count: usize, every: Duration, jitter: Duration) -> Vec<HeartbeatDef> {
    defs_with_prompt(first, count, every, jitter, PROMPT_BYTES)
}

/// The same with prompts of `prompt_bytes` (what a heartbeat's memory must not grow with).
pub fn defs_with_prompt(
    first: usize,
    count: usize,
    every: Duration,
    jitter: Duration,
    prompt_bytes: usize,
) -> Vec<HeartbeatDef> {
    let base = "Look at the job queue, the error rate and the disk; say what needs a person, or nothing. ";
    let prompt: String = base.chars().cycle().take(prompt_bytes).collect();
    // One prompt and one parsed target for all, as a config's parse shares equal ones (a copy
    // of its own for each, freed once the store shared them, left a 32-byte hole among the
    // ids and 8 B of the allocator's bookkeeping a heartbeat).
    let prompt: Arc<str> = prompt.into();
    let target = DeliveryTarget::parse("webhook:ops").expect("a valid target");
    (first..first + count)
        .map(|index| HeartbeatDef {
            key: key(index),
            kind: JobKind::Heartbeat,
            prompt: Arc::clone(&prompt),
            schedule: Schedule::Every(every),
            policy: RunPolicy { jitter_max: jitter, ..RunPolicy::default() },
            delete_after_run: false,
            dedup: true,
            target: target.clone(),
            active_hours: None,
            timeout: Duration::from_secs(60),
            origin: Origin::Config,
            tools: Default::default(),
            model: None,
        })
        .collect()
}

/// Counts what the engine reports, and how late each run started.
struct Recorder {
    jitter_max: Duration,
    started: AtomicU64,
    finished: AtomicU64,
    /// Each start's slot and how late it started (milliseconds after its due time).
    lateness_ms: Mutex<Vec<(Timestamp, f64)>>,
    last_started: Mutex<Option<Instant>>,
    finished_target: u64,
    all_finished: Notify,
}

impl Recorder {
    fn new(jitter_max: Duration, finished_target: u64) -> Self {
        Self {
            jitter_max,
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            lateness_ms: Mutex::new(Vec::new()),
            last_started: Mutex::new(None),
            finished_target,
            all_finished: Notify::new(),
        }
    }

    /// How late the runs of the first `windows` slots started (every `every` heartbeat
    /// armed at one start shares its slots; jitter spreads their due times).
    fn lateness_of_first_slots(&self, windows: usize) -> Vec<f64> {
        let starts = self.lateness_ms.lock().expect("not poisoned").clone();
        let slots: std::collections::BTreeSet<Timestamp> = starts.iter().map(|(slot, _)| *slot).collect();
        let Some(last) = slots.iter().nth(windows.saturating_sub(1)).or(slots.last()).copied() else {
            return Vec::new();
        };
        starts.into_iter().filter(|(slot, _)| *slot <= last).map(|(_, late)| late).collect()
    }
}

impl EventSink for Recorder {
    fn emit(&self, at: Timestamp, event: &EngineEvent) {
        match event {
            EngineEvent::RunStarted { key, slot } => {
                self.started.fetch_add(1, Ordering::Relaxed);
                *self.last_started.lock().expect("not poisoned") = Some(Instant::now());
                let jitter = SignedDuration::try_from(jitter_offset(key, self.jitter_max)).unwrap_or_default();
                let due = slot.checked_add(jitter).unwrap_or(*slot);
                let late = at.duration_since(due).as_secs_f64() * 1000.0;
                self.lateness_ms.lock().expect("not poisoned").push((*slot, late));
            }
            EngineEvent::RunFinished { .. } => {
                let finished = self.finished.fetch_add(1, Ordering::Relaxed) + 1;
                if finished == self.finished_target {
                    self.all_finished.notify_one();
                }
            }
            _ => {}
        }
    }
}

/// Accepts every delivery at once.
#[derive(Default)]
struct CountingMessenger {
    delivered: AtomicU64,
}

#[async_trait]
impl Messenger for CountingMessenger {
    async fn deliver(&self, _delivery: &Delivery) -> Result<(), DeliveryError> {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

async fn open_store(kind: &StoreKind, path: &Path) -> Arc<dyn Store> {
    match kind {
        StoreKind::Memory => Arc::new(MemoryStore::new()),
        StoreKind::Sqlite => Arc::new(SqliteStore::open(path).await.expect("the benchmark database opens")),
    }
}

async fn start_engine(store: Arc<dyn Store>, recorder: Arc<Recorder>, reply: &str) -> EngineHandle {
    let ports = Ports {
        events: recorder,
        ..Ports::new(
            Arc::new(SystemClock::new()),
            Arc::new(ScriptedLlm::new(vec![reply.to_owned()])),
            Arc::new(CountingMessenger::default()),
            store,
        )
    };
    driver::start(ports, EngineOptions::default()).await.expect("the engine starts")
}

/// Registration: `count` heartbeats seeded into the store the way the daemon seeds its
/// config, then the engine started on them. Time for each, and resident memory. Their
/// prompts are one text (as a config's parse gives equal prompts), or with
/// `distinct_prompts` each a text of its own.
pub async fn register(kind: StoreKind, count: usize, path: &Path, distinct_prompts: bool) -> Figures {
    let (resident_before, _) = resident_bytes();
    let heap_before = heap_in_use_bytes();
    let store = open_store(&kind, path).await;
    let mut defs = defs(0, count, Duration::from_secs(3_600), Duration::from_secs(3_600));
    if distinct_prompts {
        // Its id in place of the prompt's last characters, so that its length stays.
        for def in &mut defs {
            let id = def.key.heartbeat.as_str();
            let kept = def.prompt.len().saturating_sub(id.len());
            def.prompt = format!("{}{id}", &def.prompt[..kept]).into();
        }
    }
    let seeding = Instant::now();
    store.seed_config(&defs, Timestamp::now()).await.expect("the heartbeats are stored");
    let seed_secs = seeding.elapsed().as_secs_f64();
    drop(defs);
    // The store's own copy (the memory store's) apart from the engine's: the heap in use
    // before and after the start.
    let heap_stored = heap_in_use_bytes();
    let starting = Instant::now();
    let engine = start_engine(store, Arc::new(Recorder::new(Duration::ZERO, 0)), SILENT_REPLY).await;
    let start_secs = starting.elapsed().as_secs_f64();
    let (resident, peak) = resident_bytes();
    let engine_heap = heap_in_use_bytes().saturating_sub(heap_stored);
    engine.shutdown(Duration::ZERO).await;
    Figures::from([
        ("seed_secs".to_owned(), seed_secs),
        ("start_secs".to_owned(), start_secs),
        ("total_secs".to_owned(), seed_secs + start_secs),
        ("resident_mb".to_owned(), resident as f64 / 1e6),
        ("peak_mb".to_owned(), peak as f64 / 1e6),
        ("bytes_each".to_owned(), resident.saturating_sub(resident_before) as f64 / count as f64),
        ("engine_heap_bytes_each".to_owned(), engine_heap as f64 / count as f64),
        ("store_heap_bytes_each".to_owned(), heap_stored.saturating_sub(heap_before) as f64 / count as f64),
    ])
}

/// Seeds `count` heartbeats into a new SQLite file, for the cold-start case.
pub async fn prepare(count: usize, path: &Path, prompt_bytes: usize) -> Figures {
    let store = open_store(&StoreKind::Sqlite, path).await;
    let prompt_bytes = if prompt_bytes == 0 { PROMPT_BYTES } else { prompt_bytes };
    let hour = Duration::from_secs(3_600);
    let defs = defs_with_prompt(0, count, hour, hour, prompt_bytes);
    let seeding = Instant::now();
    store.seed_config(&defs, Timestamp::now()).await.expect("the heartbeats are stored");
    Figures::from([("seed_secs".to_owned(), seeding.elapsed().as_secs_f64())])
}

/// One logged slot for every heartbeat of an existing file (its stored next slot, skipped,
/// the next an hour later), as a store that has run for a while holds: a start-up seeks
/// each heartbeat's latest slot to arm above it.
pub async fn log_runs(path: &Path) -> Figures {
    let store = open_store(&StoreKind::Sqlite, path).await;
    let heartbeats = store.load_heartbeats().await.expect("the heartbeats load");
    let logging = Instant::now();
    let hour = SignedDuration::from_hours(1);
    for chunk in heartbeats.chunks(LOG_RUNS_BATCH) {
        let skips: Vec<SkipRecord> = chunk
            .iter()
            .filter_map(|heartbeat| {
                let slot = heartbeat.state.next_slot?;
                let next = NextSlot { at: slot.checked_add(hour).ok()?, schedule: heartbeat.def.schedule.clone() };
                let at = slot;
                Some(SkipRecord {
                    key: heartbeat.def.key.clone(),
                    slot,
                    at,
                    reason: SkipReason::Overlap,
                    next_slot: next,
                    triggered: false,
                })
            })
            .collect();
        store.record_skips(&skips).await.expect("the skips are logged");
    }
    Figures::from([("log_secs".to_owned(), logging.elapsed().as_secs_f64())])
}

/// Skips one `log_runs` write holds.
const LOG_RUNS_BATCH: usize = 10_000;

/// Cold start: from this process's start to a scheduling engine on an existing file.
pub async fn cold_start(path: &Path, process_start: Instant) -> Figures {
    let store = open_store(&StoreKind::Sqlite, path).await;
    let engine = start_engine(store, Arc::new(Recorder::new(Duration::ZERO, 0)), SILENT_REPLY).await;
    let secs = process_start.elapsed().as_secs_f64();
    let (resident, _) = resident_bytes();
    let heap = heap_in_use_bytes();
    engine.shutdown(Duration::ZERO).await;
    Figures::from([
        ("start_secs".to_owned(), secs),
        ("resident_mb".to_owned(), resident as f64 / 1e6),
        ("heap_mb".to_owned(), heap as f64 / 1e6),
    ])
}

/// Dispatch: `count` heartbeats due at the same instant, each run ending in a delivery.
/// Runs a second end to end (claim, LLM, dedup, delivery, result written), how long
/// until the last one started, and how many never ran.
pub async fn dispatch(kind: StoreKind, count: usize, path: &Path) -> Figures {
    let store = open_store(&kind, path).await;
    // Every heartbeat's next slot is the same instant, shortly after the engine is up.
    let due = seed_all_due(store.as_ref(), count, 2).await;
    let recorder = Arc::new(Recorder::new(Duration::ZERO, count as u64));
    let engine = start_engine(store, Arc::clone(&recorder), ALERT_REPLY).await;
    let Waited { begun, finished, took, cpu } = wait_for_all(&recorder, due).await;
    let last_started = recorder
        .last_started
        .lock()
        .expect("not poisoned")
        .map_or(f64::NAN, |at| at.checked_duration_since(begun).unwrap_or_default().as_secs_f64());
    let runs = recorder.finished.load(Ordering::Relaxed);
    engine.shutdown(Duration::ZERO).await;
    Figures::from([
        ("runs_per_sec".to_owned(), runs as f64 / took),
        ("last_started_secs".to_owned(), last_started),
        ("all_finished".to_owned(), f64::from(u8::from(finished))),
        ("lost".to_owned(), count as f64 - recorder.started.load(Ordering::Relaxed) as f64),
        ("cpu_ms_per_run".to_owned(), cpu * 1000.0 / runs.max(1) as f64),
    ])
}

/// Lateness: `busy` heartbeats every `spread`, their slots spread over it by jitter,
/// beside `idle` ones due a day later; the busy ones' starts over `windows` intervals.
pub async fn lateness(busy: usize, idle: usize, spread: Duration, windows: u32) -> Figures {
    let store = open_store(&StoreKind::Memory, Path::new("")).await;
    let mut all = defs(0, busy, spread, spread);
    all.extend(defs(busy, idle, Duration::from_secs(86_400), Duration::ZERO));
    store.seed_config(&all, Timestamp::now()).await.expect("the heartbeats are stored");
    drop(all);
    let recorder = Arc::new(Recorder::new(spread, 0));
    let engine = start_engine(store, Arc::clone(&recorder), SILENT_REPLY).await;
    // Slots are anchored at the engine's start: the first is one interval after it, and
    // `windows` intervals later every busy heartbeat has started `windows` times.
    let cpu_before = cpu_time();
    tokio::time::sleep(spread * (windows + 1) + Duration::from_secs(1)).await;
    let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64();
    engine.shutdown(Duration::ZERO).await;
    let late = recorder.lateness_of_first_slots(windows as usize);
    lateness_figures(late, busy as f64 * f64::from(windows), cpu)
}

/// A lease short enough that nodes started together share the partitions within seconds.
const CLUSTER_LEASE_SECS: u64 = 3;
/// When the heartbeats fall due, after the nodes started: time to share the partitions.
const CLUSTER_DUE_AFTER_SECS: i64 = 10;

/// Dispatch on a cluster: `count` heartbeats due at one instant, run by `nodes` nodes of
/// this process on one PostgreSQL database (each node its own connection pool, as
/// separate daemons would have). Runs per second from the due instant to the last result.
pub async fn cluster_dispatch(nodes: usize, count: usize, url: &str, password: &str) -> Figures {
    use systole::cluster::{self, ClusterSettings};
    use systole::ports::leases::Leases;
    use systole::store::postgres::PostgresStore;

    let connect = || async { PostgresStore::connect(url, Some(password)).await.expect("PostgreSQL is reachable") };
    let due = seed_all_due(&connect().await, count, CLUSTER_DUE_AFTER_SECS).await;
    let recorder = Arc::new(Recorder::new(Duration::ZERO, count as u64));
    let mut handles = Vec::new();
    for index in 0..nodes {
        let node_store = Arc::new(connect().await);
        let ports = Ports {
            events: Arc::clone(&recorder) as Arc<dyn EventSink>,
            ..Ports::new(
                Arc::new(SystemClock::new()),
                Arc::new(ScriptedLlm::new(vec![ALERT_REPLY.to_owned()])),
                Arc::new(CountingMessenger::default()),
                Arc::clone(&node_store) as Arc<dyn Store>,
            )
        };
        let settings = ClusterSettings {
            node: format!("node-{index}"),
            lease: Duration::from_secs(CLUSTER_LEASE_SECS),
            api_url: None,
        };
        handles.push(cluster::start(settings, node_store as Arc<dyn Leases>, ports, EngineOptions::default()));
    }
    let Waited { finished, took, cpu, .. } = wait_for_all(&recorder, due).await;
    let runs = recorder.finished.load(Ordering::Relaxed);
    let held: Vec<usize> =
        handles.iter().map(|handle| handle.view.read().map_or(0, |view| view.engines.len())).collect();
    for handle in handles {
        handle.shutdown(Duration::ZERO).await;
    }
    Figures::from([
        ("runs_per_sec".to_owned(), runs as f64 / took),
        ("all_finished".to_owned(), f64::from(u8::from(finished))),
        ("lost".to_owned(), count as f64 - recorder.started.load(Ordering::Relaxed) as f64),
        ("cpu_ms_per_run".to_owned(), cpu * 1000.0 / runs.max(1) as f64),
        ("fewest_partitions".to_owned(), held.iter().copied().min().unwrap_or(0) as f64),
    ])
}

/// Seeds `count` heartbeats whose next slot is one instant, `after_secs` from now.
async fn seed_all_due(store: &dyn Store, count: usize, after_secs: i64) -> Timestamp {
    let defs = defs(0, count, Duration::from_secs(3_600), Duration::ZERO);
    store.seed_config(&defs, Timestamp::now()).await.expect("the heartbeats are stored");
    let due = Timestamp::now() + SignedDuration::from_secs(after_secs);
    let slots: Vec<(HeartbeatKey, NextSlot)> =
        defs.iter().map(|def| (def.key.clone(), NextSlot { at: due, schedule: def.schedule.clone() })).collect();
    store.set_next_slots(&slots).await.expect("the slots are stored");
    due
}

/// From the due instant until every run finished (or the wait ran out).
struct Waited {
    begun: Instant,
    finished: bool,
    took: f64,
    cpu: f64,
}

async fn wait_for_all(recorder: &Recorder, due: Timestamp) -> Waited {
    let until_due = due.duration_since(Timestamp::now()).as_secs_f64().max(0.0);
    let begun = Instant::now() + Duration::from_secs_f64(until_due);
    let cpu_before = cpu_time();
    let finished =
        tokio::time::timeout(Duration::from_secs(RUNS_WAIT_SECS_MAX), recorder.all_finished.notified()).await.is_ok();
    let took = begun.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64();
    Waited { begun, finished, took, cpu }
}
