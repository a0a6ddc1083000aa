//! The simulator runs the engine on the memory store; production runs it on SQLite. These
//! tests hold the two equal where the conformance suite's hand-picked cases cannot reach:
//! seeded random sequences of every write, applied to both, with every answer and every
//! read compared after each step; and SQLite killed with SIGKILL in the middle of such a
//! sequence, reopened, and found equal to the memory store after every write it
//! acknowledged, plus at most the one in flight (each call is one transaction, which is
//! what the simulator's crash faults assume). See ADR 0016.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use common::{cron_def, def, key, start};
use systole::core::breaker::DISABLED_BY_BREAKER;
use systole::core::guard::SkipReason;
use systole::core::heartbeat::{HeartbeatDef, Origin};
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::pause::PauseRecord;
use systole::core::policy::{CatchUp, Overlap};
use systole::core::reply::ReplyKind;
use systole::core::retention::RunRetention;
use systole::core::schedule::Schedule;
use systole::core::tool_policy::{JobTools, ToolPattern};
use systole::core::usage::{RunUsage, TokenUsage};
use systole::ports::store::{
    DedupQuery, DeliveryStatus, ExecutionStatus, NextSlot, RunRecord, SkipRecord, SlotClaim, StopReason, Store,
    ToolCallOutcome, ToolCallRecord, ToolUse,
};
use systole::store::memory::MemoryStore;
use systole::store::sqlite::SqliteStore;

/// Sequences each run compares; a divergence names its seed, which replays it alone
/// (`STORE_DIFF_SEED=N`).
const SEQUENCES: u64 = 48;
/// Writes per sequence.
const OPS_PER_SEQUENCE: usize = 60;
/// Sequences SQLite is killed in the middle of.
const KILLED_SEQUENCES: u64 = 12;
/// The child process's marker for "this write returned".
const ACK_PREFIX: &str = "store-diff-ack ";
const CHILD_ENV: &str = "SYSTOLE_STORE_DIFF_CHILD";

const AGENTS: [&str; 2] = ["a0", "a1"];
const HEARTBEATS: [&str; 3] = ["h0", "h1", "h2"];
const DIGESTS: [&str; 2] = ["digest-0", "digest-1"];
const EVENT_TEXTS: [&str; 3] = ["disk full", "backup done", "disk full"];
const BREAKER_FAILURES_MAX: u32 = 3;

/// splitmix64: a sequence is a function of its seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize].clone()
    }
}

fn at(secs: i64) -> Timestamp {
    start().checked_add(SignedDuration::from_secs(secs)).expect("in range")
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("valid agent")
}

fn all_keys() -> Vec<HeartbeatKey> {
    AGENTS.iter().flat_map(|a| HEARTBEATS.iter().map(move |h| key(a, h))).collect()
}

/// One write to the store, as the engine makes them.
#[derive(Debug, Clone)]
enum Op {
    Seed(Vec<HeartbeatDef>),
    Put(Box<HeartbeatDef>),
    Delete(HeartbeatKey),
    SetEnabled(HeartbeatKey, bool, Option<&'static str>),
    /// The engine's retirement: a disable only of an enabled row (ADR 0050).
    Retire(HeartbeatKey),
    HalfOpen(HeartbeatKey),
    SetNextSlots(Vec<(HeartbeatKey, NextSlot)>),
    Claim(Vec<SlotClaim>),
    Skip(Vec<SkipRecord>),
    Finish(Vec<RunRecord>),
    Recover(Timestamp),
    SetPause(AgentId, PauseRecord),
    ClearPause(AgentId),
    EndPause(AgentId, Timestamp),
    Prune(Timestamp, RunRetention),
    Queue(AgentId, &'static str, Timestamp),
}

fn random_def(rng: &mut Rng, k: &HeartbeatKey, now_secs: i64) -> HeartbeatDef {
    let (a, h) = (k.agent.as_str(), k.heartbeat.as_str());
    let mut made = match rng.below(4) {
        0 => def(a, h, 60),
        1 => def(a, h, 300),
        2 => cron_def(a, h, "*/5 * * * *", "Europe/Berlin"),
        _ => HeartbeatDef { schedule: Schedule::At(at(now_secs + 120)), ..def(a, h, 60) },
    };
    if rng.chance(30) {
        made.prompt = format!("{h} (edited)").into();
    }
    made.origin = if rng.chance(50) { Origin::Config } else { Origin::Runtime };
    made.delete_after_run = rng.chance(20);
    made.dedup = rng.chance(70);
    made.policy.catch_up = rng.pick(&[CatchUp::Skip, CatchUp::Once, CatchUp::All]);
    made.policy.overlap = rng.pick(&[Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll]);
    made.policy.jitter_max = Duration::from_secs(rng.below(3) * 30);
    if rng.chance(25) {
        let agent = [ToolPattern::parse("inbox/*").expect("valid")];
        let allow = rng.chance(50).then(|| vec!["inbox/search".to_owned()]);
        let required = ["inbox/search".to_owned()];
        made.tools = JobTools::from_fields(allow.as_deref(), None, Some(&required), &agent).expect("within").into();
    }
    if rng.chance(25) {
        made.model = Some(rng.pick(&["small-model", "large-model"]).to_owned());
    }
    made
}

/// A next slot under a schedule the heartbeat has or had, or one it never has: the
/// stores keep it only under the row's own schedule.
/// Whether a claim or skip at `slot` (whole minutes) is an operator's trigger: half of them.
fn slot_minute_is_even(slot: Timestamp) -> bool {
    (slot.as_second() / 60) % 2 == 0
}

fn random_next_slot(rng: &mut Rng, now_secs: i64) -> NextSlot {
    let schedule = match rng.below(6) {
        0 => Schedule::Every(Duration::from_secs(60)),
        1 => Schedule::Every(Duration::from_secs(300)),
        2 => cron_def("a", "h", "*/5 * * * *", "Europe/Berlin").schedule,
        3 => cron_def("a", "h", "*/5 * * * *", "UTC").schedule,
        4 => Schedule::At(at(now_secs + 120)),
        _ => Schedule::Every(Duration::from_secs(120)),
    };
    NextSlot { at: at(now_secs + 60), schedule }
}

fn random_run(rng: &mut Rng, k: HeartbeatKey, slot: Timestamp, now: Timestamp) -> RunRecord {
    let status = rng.pick(&[
        ExecutionStatus::Succeeded,
        ExecutionStatus::Succeeded,
        ExecutionStatus::Failed,
        ExecutionStatus::TimedOut,
    ]);
    let delivered = status == ExecutionStatus::Succeeded && rng.chance(50);
    RunRecord {
        key: k,
        slot,
        finished_at: now,
        status,
        delivery: if delivered { DeliveryStatus::Delivered } else { DeliveryStatus::NotNeeded },
        duration: Duration::from_millis(rng.below(5_000)),
        error: (status != ExecutionStatus::Succeeded).then(|| "boom".to_owned()),
        output_preview: delivered.then(|| "the backup failed".to_owned()),
        stop_reason: Some(StopReason::Completed),
        reply: Some(if delivered { ReplyKind::Sent } else { ReplyKind::Empty }),
        reply_digest: delivered.then(|| rng.pick(&DIGESTS).to_owned()),
        consumes: (0..rng.below(3)).map(|_| 1 + rng.below(8)).collect(),
        llm_calls: rng.below(4) as u32,
        usage: RunUsage {
            tokens: TokenUsage {
                input: rng.below(5_000),
                cached: rng.below(1_000),
                output: rng.below(800),
                reasoning: rng.below(200),
            },
            cost_micros: rng.below(90_000),
            unpriced_calls: rng.below(2) as u32,
        },
        provider_refused: status == ExecutionStatus::Failed && rng.chance(30),
        transcript: rng
            .chance(50)
            .then(|| format!(r#"{{"messages":[{{"role":"user","content":"run {}"}}]}}"#, rng.below(9))),
        tool_use: rng.chance(30).then(|| ToolUse {
            offered: vec!["inbox/search".to_owned()],
            calls: vec![ToolCallRecord {
                tool: "inbox/search".to_owned(),
                arguments: r#"{"q":"urgent"}"#.to_owned(),
                duration_ms: rng.below(900),
                outcome: rng.pick(&[ToolCallOutcome::Ok, ToolCallOutcome::Timeout]),
                error: None,
            }],
        }),
    }
}

/// A sequence of writes over a few heartbeats and a short stretch of time, so that claims
/// collide, runs finish for slots claimed or not, and deletes meet re-creations.
fn sequence(seed: u64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let keys = all_keys();
    let mut now_secs = 0_i64;
    let mut claimed: Vec<(HeartbeatKey, Timestamp)> = Vec::new();
    // The ends of the pauses set so far: a pause's end names one of them, or another time.
    let mut pause_ends: Vec<Timestamp> = Vec::new();
    let mut ops = Vec::with_capacity(OPS_PER_SEQUENCE);
    // Start from a seeded config, as the daemon does.
    let config: Vec<HeartbeatDef> =
        keys.iter().take(4).map(|k| HeartbeatDef { origin: Origin::Config, ..random_def(&mut rng, k, 0) }).collect();
    ops.push(Op::Seed(config));
    while ops.len() < OPS_PER_SEQUENCE {
        now_secs += rng.below(90) as i64;
        let now = at(now_secs);
        let k = rng.pick(&keys);
        // Slots on the minute grid around now, so claims and skips meet.
        let slot = |rng: &mut Rng| at((now_secs / 60 + rng.below(5) as i64 - 3) * 60);
        let op = match rng.below(100) {
            0..=4 => {
                let mut defs = Vec::new();
                for k in &keys {
                    if rng.chance(60) {
                        defs.push(random_def(&mut rng, k, now_secs));
                    }
                }
                Op::Seed(defs)
            }
            5..=11 => Op::Put(Box::new(random_def(&mut rng, &k, now_secs))),
            12..=15 => Op::Delete(k),
            16..=17 => Op::Retire(k),
            18..=21 => {
                let enabled = rng.chance(50);
                let reason =
                    if enabled { None } else { rng.pick(&[Some("operator"), Some(DISABLED_BY_BREAKER), None]) };
                Op::SetEnabled(k, enabled, reason)
            }
            22..=25 => Op::HalfOpen(k),
            26..=29 => Op::SetNextSlots(vec![(k, random_next_slot(&mut rng, now_secs))]),
            30..=49 => {
                let claims: Vec<SlotClaim> = (0..1 + rng.below(3))
                    .map(|_| {
                        let k = rng.pick(&keys);
                        let slot = slot(&mut rng);
                        claimed.push((k.clone(), slot));
                        // Half of them an operator's trigger, told by the slot's minute (no
                        // draw of its own, so the sequences stay the ones they were; slots
                        // are whole minutes, so their second would mark every one).
                        let triggered = slot_minute_is_even(slot);
                        let next_slot = random_next_slot(&mut rng, now_secs);
                        SlotClaim { key: k, slot, claimed_at: now, next_slot, triggered }
                    })
                    .collect();
                Op::Claim(claims)
            }
            50..=57 => {
                let reason = rng.pick(&SkipReason::ALL);
                let slot = slot(&mut rng);
                let next_slot = random_next_slot(&mut rng, now_secs);
                // A trigger's skip as often, told the same way.
                let triggered = slot_minute_is_even(slot);
                Op::Skip(vec![SkipRecord { key: k, slot, at: now, reason, next_slot, triggered }])
            }
            58..=74 => {
                let runs: Vec<RunRecord> = (0..1 + rng.below(2))
                    .map(|_| {
                        // Mostly slots claimed before, sometimes one that never was.
                        let (k, slot) = if !claimed.is_empty() && rng.chance(85) {
                            claimed.remove(rng.below(claimed.len() as u64) as usize)
                        } else {
                            (k.clone(), slot(&mut rng))
                        };
                        random_run(&mut rng, k, slot, now)
                    })
                    .collect();
                Op::Finish(runs)
            }
            75..=77 => Op::Recover(now),
            78..=82 => {
                let until = at(now_secs + 60 * (1 + rng.below(30) as i64));
                pause_ends.push(until);
                Op::SetPause(agent(rng.pick(&AGENTS)), PauseRecord { until, minutes: 30, set_at: now })
            }
            83 => Op::ClearPause(agent(rng.pick(&AGENTS))),
            84..=85 => {
                let until = if pause_ends.is_empty() || rng.chance(20) { now } else { rng.pick(&pause_ends) };
                Op::EndPause(agent(rng.pick(&AGENTS)), until)
            }
            86..=88 => {
                let later = at(now_secs + 86_400 * rng.below(10) as i64);
                let retention =
                    RunRetention { kept_days: 1 + rng.below(3) as u32, kept_per_heartbeat: 1 + rng.below(4) as u32 };
                Op::Prune(later, retention)
            }
            _ => Op::Queue(agent(rng.pick(&AGENTS)), rng.pick(&EVENT_TEXTS), now),
        };
        ops.push(op);
    }
    ops
}

/// Applies one write; its answer, in a form both stores share. An error is compared by
/// its presence only: the two stores word their errors differently.
async fn apply(store: &dyn Store, op: &Op) -> String {
    fn answer<T: std::fmt::Debug>(result: Result<T, systole::ports::store::StoreError>) -> String {
        match result {
            Ok(value) => format!("{value:?}"),
            Err(_) => "error".to_owned(),
        }
    }
    match op {
        Op::Seed(defs) => answer(store.seed_config(defs, start()).await),
        Op::Put(made) => answer(store.put_heartbeat(made, start()).await),
        Op::Delete(k) => answer(store.delete_heartbeat(k).await),
        Op::SetEnabled(k, enabled, reason) => answer(store.set_enabled(k, *enabled, *reason).await),
        Op::Retire(k) => answer(store.disable_if_enabled(k, "no-more-slots").await),
        Op::HalfOpen(k) => answer(store.half_open_breaker(k).await),
        Op::SetNextSlots(slots) => answer(store.set_next_slots(slots).await),
        // A batch of more than one claim also reads what its claims won, as a dispatch pass
        // does (ADR 0037: SQLite's writer reads it itself); one alone is a plain claim.
        Op::Claim(claims) if claims.len() > 1 => answer(store.claim_and_read(claims).await),
        Op::Claim(claims) => answer(store.claim_slots(claims).await),
        Op::Skip(skips) => answer(store.record_skips(skips).await),
        Op::Finish(runs) => answer(store.finish_runs(runs, BREAKER_FAILURES_MAX).await),
        Op::Recover(now) => answer(store.recover_interrupted(*now).await),
        Op::SetPause(a, pause) => answer(store.set_pause(a, pause).await),
        Op::ClearPause(a) => answer(store.clear_pause(a).await),
        Op::EndPause(a, until) => answer(store.end_pause(a, *until).await),
        Op::Prune(now, retention) => answer(store.prune_runs(*now, *retention).await),
        Op::Queue(a, text, now) => answer(store.queue_system_event(a, text, *now).await),
    }
}

/// What a start-up's load gives to arm, by key: each heartbeat's latest slot (the prompts
/// a store may leave out are compared by `load_heartbeats`).
async fn armed_latest_slots(store: &dyn Store) -> Result<BTreeMap<HeartbeatKey, Option<Timestamp>>, String> {
    let mut armed = BTreeMap::new();
    store
        .load_for_arming_in_pages(&mut |page| {
            armed.extend(page.into_iter().map(|armable| (armable.heartbeat.def.key, armable.latest_slot)));
        })
        .await
        .map_err(|error| error.to_string())?;
    Ok(armed)
}

/// Everything the engine can read back, at `now`.
async fn snapshot(store: &dyn Store, now: Timestamp) -> Vec<String> {
    let mut seen = vec![
        format!("heartbeats {:?}", store.load_heartbeats().await),
        format!("pauses {:?}", store.load_pauses().await),
        format!("latest slots {:?}", store.latest_slots(&all_keys()).await),
        format!("armed latest slots {:?}", armed_latest_slots(store).await),
        format!("jobs of each agent {:?}", store.jobs_of_agents(None).await),
        format!("recent runs {:?}", store.recent_executions(&all_keys(), 3).await),
    ];
    // Pages of three, each after the last key of the one before.
    let mut after: Option<HeartbeatKey> = None;
    loop {
        let page = store.heartbeats_page(after.as_ref(), 3).await;
        seen.push(format!("page after {after:?} {page:?}"));
        match page.as_deref() {
            Ok([.., last]) => after = Some(last.def.key.clone()),
            _ => break,
        }
    }
    for k in all_keys() {
        let runs = store.executions_page(&k, None, 1_000).await;
        for run in runs.iter().flatten() {
            seen.push(format!("{k} transcript {} {:?}", run.slot, store.transcript(&k, run.slot).await));
        }
        seen.push(format!("{k} runs {runs:?}"));
        seen.push(format!("{k} failures {:?}", store.consecutive_failures(&k).await));
        // From the start, then from a day before it: SQLite answers the first from its index
        // of recent deliveries once filled, and reads the second, from before the index's
        // floor, from the run log (ADR 0066); both are compared.
        for since in [start(), at(-86_400)] {
            for digest in DIGESTS {
                seen.push(format!(
                    "{k} delivered {digest} since {since} {:?}",
                    store.delivered_since(&[DedupQuery { key: k.clone(), digest: digest.into(), since }]).await
                ));
            }
        }
    }
    for name in AGENTS {
        let a = agent(name);
        seen.push(format!("{a} jobs {:?}", store.heartbeats_of_agent(&a, None, usize::MAX).await));
        let first = systole::core::ids::HeartbeatId::new(HEARTBEATS[0]).expect("valid");
        seen.push(format!("{a} jobs after the first, two {:?}", store.heartbeats_of_agent(&a, Some(&first), 2).await));
        seen.push(format!("{a} count {:?}", store.jobs_of_agents(Some(&a)).await));
        seen.push(format!("{a} events {:?}", store.pending_system_events(&a, now).await));
        seen.push(format!("{a} spent {:?}", store.spent_since(Some(&a), start(), &[]).await));
        seen.push(format!("{a} spent late {:?}", store.spent_since(Some(&a), at(1_800), &[]).await));
        seen.push(format!("{a} spent by job {:?}", store.spent_by_job(Some(&a), at(600)).await));
        // Leaving out the runs in flight, as the driver does: every slot of one heartbeat.
        let in_flight: Vec<(HeartbeatKey, Timestamp)> =
            (-5..65).map(|minute| (key(name, "h0"), at(minute * 60))).collect();
        seen.push(format!("{a} spent but h0 {:?}", store.spent_since(Some(&a), start(), &in_flight).await));
    }
    seen
}

fn snapshot_time() -> Timestamp {
    at(3_600)
}

/// The first difference between two snapshots.
fn first_difference(memory: &[String], sqlite: &[String]) -> Option<String> {
    memory.iter().zip(sqlite).find(|(m, s)| m != s).map(|(m, s)| format!("memory: {m}\n  sqlite: {s}"))
}

/// Runs one sequence on both stores; the first divergence, if any.
async fn diverges(seed: u64, dir: &Path) -> Option<String> {
    let memory = MemoryStore::new();
    let sqlite = SqliteStore::open(&dir.join(format!("diff-{seed}.db"))).await.expect("open sqlite");
    for (index, op) in sequence(seed).iter().enumerate() {
        let (m, s) = (apply(&memory, op).await, apply(&sqlite, op).await);
        if m != s {
            return Some(format!("step {index} {op:?}\n  memory answered {m}\n  sqlite answered {s}"));
        }
        let (m, s) = (snapshot(&memory, snapshot_time()).await, snapshot(&sqlite, snapshot_time()).await);
        if let Some(difference) = first_difference(&m, &s) {
            return Some(format!("after step {index} {op:?}\n  {difference}"));
        }
    }
    None
}

#[tokio::test]
async fn memory_and_sqlite_agree_on_random_write_sequences() {
    let dir = tempfile::tempdir().expect("temp dir");
    let seeds: Vec<u64> = match std::env::var("STORE_DIFF_SEED") {
        Ok(seed) => vec![seed.parse().expect("STORE_DIFF_SEED is a number")],
        Err(_) => (0..SEQUENCES).collect(),
    };
    // The store mutant check stops at the divergences its catch rate needs: each sequence
    // snapshots both stores after every write, about half a second each.
    let stop_after: Option<usize> = std::env::var("STORE_DIFF_STOP_AFTER").ok().and_then(|n| n.parse().ok());
    let mut diverged = Vec::new();
    let mut compared = 0;
    for &seed in &seeds {
        compared += 1;
        if let Some(difference) = diverges(seed, dir.path()).await {
            diverged.push((seed, difference));
            if stop_after.is_some_and(|needed| diverged.len() >= needed) {
                break;
            }
        }
    }
    // The rate is what scripts/check-store-mutants.sh reads.
    println!("store differential: diverged in {} of {compared} sequences", diverged.len());
    if let Some((seed, difference)) = diverged.first() {
        panic!(
            "the stores diverged in {} of {compared} sequences; first, seed {seed} (STORE_DIFF_SEED={seed}):\n{difference}",
            diverged.len(),
        );
    }
}

/// The child side of the kill test: applies a sequence to SQLite, saying after each write
/// that it returned, until the parent kills it. Does nothing in a normal test run.
#[tokio::test]
async fn killed_child_applies_a_sequence() {
    let Ok(job) = std::env::var(CHILD_ENV) else { return };
    let (seed, path) = job.split_once(':').expect("seed:path");
    let sqlite = SqliteStore::open(Path::new(path)).await.expect("open sqlite");
    for (index, op) in sequence(seed.parse().expect("seed")).iter().enumerate() {
        apply(&sqlite, op).await;
        println!("{ACK_PREFIX}{index}");
    }
    // Not killed in time: wait to be (the parent decides when).
    std::thread::sleep(Duration::from_secs(60));
}

/// The index a line acknowledges. The first one shares its line with libtest's
/// `test killed_child_applies_a_sequence ... `, so it is looked for anywhere in the line
/// (matching only at the start missed it: the test then counted one write too few and
/// failed whenever the write in flight had committed).
fn ack_index(line: &str) -> Option<usize> {
    line.split(ACK_PREFIX).nth(1)?.trim().parse().ok()
}

#[tokio::test]
async fn sqlite_killed_mid_sequence_keeps_exactly_the_writes_it_made() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary");
    let mut in_flight_committed = 0;
    for seed in 0..KILLED_SEQUENCES {
        let path = dir.path().join(format!("killed-{seed}.db"));
        let ops = sequence(seed);
        let kill_after = 1 + Rng(seed ^ 0xDEAD).below(ops.len() as u64 - 2) as usize;
        let mut child = Command::new(&exe)
            .args(["--exact", "killed_child_applies_a_sequence", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{seed}:{}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("piped");
        let mut acked = 0;
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let line = line.expect("child output");
            if let Some(index) = ack_index(&line) {
                acked = index + 1;
                if acked == kill_after {
                    child.kill().expect("SIGKILL the child");
                    break;
                }
            }
        }
        // Writes that returned before the signal landed.
        for line in lines.map_while(Result::ok) {
            if let Some(index) = ack_index(&line) {
                acked = acked.max(index + 1);
            }
        }
        let status = child.wait().expect("reap the child");
        assert!(!status.success(), "seed {seed}: the child must have been killed, not have finished");

        let reopened = SqliteStore::open(&path).await.expect("reopen after the kill");
        let found = snapshot(&reopened, snapshot_time()).await;
        let memory = MemoryStore::new();
        for op in &ops[..acked] {
            apply(&memory, op).await;
        }
        let without = snapshot(&memory, snapshot_time()).await;
        if found == without {
            continue;
        }
        // The write in flight may have committed before its acknowledgement was printed.
        if let Some(op) = ops.get(acked) {
            apply(&memory, op).await;
        }
        let with = snapshot(&memory, snapshot_time()).await;
        let difference = first_difference(&with, &found).unwrap_or_default();
        assert!(
            found == with,
            "seed {seed}: killed after {acked} acknowledged writes, SQLite holds neither those nor those plus \
             the one in flight (a torn transaction):\n  {difference}"
        );
        in_flight_committed += 1;
    }
    println!("sqlite kill test: {KILLED_SEQUENCES} kills, {in_flight_committed} with the write in flight committed");
}
