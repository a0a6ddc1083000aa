//! The heartbeats a seed runs and the run-time changes it makes to them.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::active_hours::ActiveHours;
use systole::core::cron::CronSchedule;
use systole::core::delivery_target::DeliveryTarget;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::{CatchUp, Overlap, RunPolicy};
use systole::core::schedule::Schedule;
use systole::core::wake::WakeReason;

/// Zones with and without daylight saving, both hemispheres, whole- and part-hour offsets
/// (Lord Howe shifts by 30 minutes; Chatham sits at +12:45).
pub const ZONES: [&str; 9] = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "Asia/Kolkata",
    "Asia/Shanghai",
    "America/Sao_Paulo",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
];

const INTERVALS_SECS: [u64; 8] = [60, 120, 300, 600, 900, 1_800, 3_600, 7_200];
const AGENTS_MAX: usize = 3;
const HEARTBEATS_PER_AGENT_MAX: usize = 4;
const OPS_MAX: usize = 6;
/// How many seeds reload their config once during the safety phase.
const RELOAD_PROBABILITY: f64 = 0.3;
/// Operator ops (trigger, pause, resume) per seed, at most.
const OPERATOR_OPS_MAX: usize = 6;
/// Backfills per seed, at most, and the spans of past time they cover.
const BACKFILLS_MAX: usize = 2;
const BACKFILL_SPAN_SECS_MIN: u64 = 600;
const BACKFILL_SPAN_SECS_MAX: u64 = 6 * 3_600;
/// The longest pause an operator op asks for (the engine's default maximum is 60).
const OPERATOR_PAUSE_MINUTES_MAX: u32 = 30;
/// How many one-shots get a prompt whose first calls fail.
const ONE_SHOT_FLAKY_PROBABILITY: f64 = 0.5;
const TIMEOUT_SECS_MIN: u64 = 20;
const TIMEOUT_SECS_MAX: u64 = 120;

/// The prompt of a simulated heartbeat names it, so the simulated LLM and the checker can
/// tell which heartbeat a call belongs to.
pub fn prompt_for(key: &HeartbeatKey) -> String {
    format!("heartbeat {key}")
}

fn random_def(rng: &mut ChaCha8Rng, key: HeartbeatKey, origin: Origin) -> HeartbeatDef {
    let interval = Duration::from_secs(INTERVALS_SECS[rng.random_range(0..INTERVALS_SECS.len())]);
    let active_hours = if rng.random_bool(0.5) {
        let zone = ZONES[rng.random_range(0..ZONES.len())];
        let start_quarter: u32 = rng.random_range(0..96);
        let mut end_quarter: u32 = rng.random_range(1..=96);
        if end_quarter == start_quarter {
            end_quarter = (start_quarter + 8) % 96;
        }
        let text = |quarter: u32| format!("{:02}:{:02}", quarter / 4, (quarter % 4) * 15);
        let end = if end_quarter == 0 { "24:00".to_owned() } else { text(end_quarter) };
        ActiveHours::new(&text(start_quarter), &end, zone).ok()
    } else {
        None
    };
    HeartbeatDef {
        prompt: prompt_for(&key).into(),
        key,
        kind: JobKind::Heartbeat,
        schedule: Schedule::Every(interval),
        policy: RunPolicy::default(),
        delete_after_run: false,
        dedup: true,
        target: DeliveryTarget::new("sim", "inbox"),
        active_hours,
        timeout: Duration::from_secs(rng.random_range(TIMEOUT_SECS_MIN..=TIMEOUT_SECS_MAX)),
        origin,
        tools: Default::default(),
        model: None,
    }
}

fn key(agent: usize, heartbeat: &str) -> HeartbeatKey {
    HeartbeatKey {
        agent: AgentId::new(format!("agent-{agent}")).expect("generated ids use the id alphabet"),
        heartbeat: HeartbeatId::new(heartbeat).expect("generated ids use the id alphabet"),
    }
}

/// The heartbeats in the simulated config file.
pub fn config_heartbeats(rng: &mut ChaCha8Rng) -> Vec<HeartbeatDef> {
    let agents = rng.random_range(1..=AGENTS_MAX);
    let mut defs = Vec::new();
    for agent in 0..agents {
        for index in 0..rng.random_range(1..=HEARTBEATS_PER_AGENT_MAX) {
            defs.push(random_def(rng, key(agent, &format!("hb-{index}")), Origin::Config));
        }
    }
    defs
}

/// A run-time change, as an embedding application or the model's tools would make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create(Box<HeartbeatDef>),
    Delete(HeartbeatKey),
    Disable(HeartbeatKey),
    Enable(HeartbeatKey),
    /// Writes (`Some`) or removes (`None`) the agent's `HEARTBEAT.md`.
    SetFile(AgentId, Option<String>),
    /// `request_now` for the agent heartbeat.
    Wake(AgentId, WakeReason),
    /// A user conversation that holds the agent's lane this long.
    UserTurn(AgentId, Duration),
    /// The process is killed (`kill -9`) wherever it is.
    Kill,
    /// An operator runs a job now, once (the API's `trigger`).
    Trigger(HeartbeatKey),
    /// An operator pauses an agent's timed heartbeats for this many minutes, or ends a pause.
    Pause(AgentId, u32),
    Resume(AgentId),
    /// The config file now has these heartbeats; the operator reloads it.
    Reload(Vec<HeartbeatDef>),
    /// An operator backfills the job's slots of the last this long.
    Backfill(HeartbeatKey, Duration),
    /// The job is edited into this one-shot, its instant the slot of its latest operator's
    /// trigger in the run log, read as the op is applied (`one_shot_at_trigger`): applied,
    /// it is the `Create` of that definition.
    OneShotAtLatestTrigger(Box<HeartbeatDef>),
    /// The next read of the job's run log fails, while faults are on: planted right before
    /// an operator's enable, whose re-arm may read it (`one_shot_at_trigger`). Not a change
    /// of the job.
    LogUnreadable(HeartbeatKey),
}

impl Op {
    /// The heartbeat a change is about (`None` for the agent layer's ops).
    pub fn key(&self) -> Option<&HeartbeatKey> {
        match self {
            Op::Create(def) | Op::OneShotAtLatestTrigger(def) => Some(&def.key),
            Op::Delete(key) | Op::Disable(key) | Op::Enable(key) | Op::Trigger(key) | Op::Backfill(key, _) => Some(key),
            Op::SetFile(..)
            | Op::Wake(..)
            | Op::UserTurn(..)
            | Op::Pause(..)
            | Op::Resume(..)
            | Op::Reload(..)
            | Op::Kill
            | Op::LogUnreadable(_) => None,
        }
    }

    pub fn def(&self) -> Option<&HeartbeatDef> {
        match self {
            Op::Create(def) => Some(def.as_ref()),
            _ => None,
        }
    }

    pub fn created_interval(&self) -> Option<Duration> {
        self.def().and_then(|def| def.schedule.interval())
    }

    pub fn describe(&self) -> String {
        match self {
            Op::Create(def) => format!("create {}", describe_def(def)),
            Op::Delete(key) => format!("delete {key}"),
            Op::Disable(key) => format!("disable {key}"),
            Op::Enable(key) => format!("enable {key}"),
            Op::SetFile(agent, Some(content)) => format!("write HEARTBEAT.md of {agent}: {content:?}"),
            Op::SetFile(agent, None) => format!("remove HEARTBEAT.md of {agent}"),
            Op::Wake(agent, reason) => format!("wake {agent} ({})", reason.as_str()),
            Op::UserTurn(agent, hold) => format!("user turn with {agent} for {}s", hold.as_secs()),
            Op::Trigger(key) => format!("trigger {key}"),
            Op::Kill => "the process is killed".to_owned(),
            Op::Pause(agent, minutes) => format!("operator pauses {agent} for {minutes} min"),
            Op::Resume(agent) => format!("operator resumes {agent}"),
            Op::Backfill(key, span) => format!("backfill {key} over the last {}s", span.as_secs()),
            Op::OneShotAtLatestTrigger(def) => format!("edit {} into a one-shot at its latest trigger's slot", def.key),
            Op::LogUnreadable(key) => format!("the next read of {key}'s run log fails"),
            Op::Reload(defs) => {
                let keys: Vec<String> = defs.iter().map(|def| def.key.to_string()).collect();
                format!("reload the config: now {}", keys.join(", "))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledOp {
    /// Elapsed time since the start of the run.
    pub after: Duration,
    pub op: Op,
}

/// Run-time changes during the safety phase. Config heartbeats are disabled or enabled,
/// never deleted (the config would seed them back at the next start, by design); deletes
/// target heartbeats created at run time.
pub fn runtime_ops(rng: &mut ChaCha8Rng, config: &[HeartbeatDef], safety: Duration) -> Vec<ScheduledOp> {
    let mut ops = Vec::new();
    let mut created: Vec<HeartbeatKey> = Vec::new();
    for index in 0..rng.random_range(0..=OPS_MAX) {
        let after = Duration::from_secs(rng.random_range(1..safety.as_secs()));
        let op = match rng.random_range(0..4) {
            0 => {
                let agent = rng.random_range(0..AGENTS_MAX);
                let def = random_def(rng, key(agent, &format!("made-{index}")), Origin::Runtime);
                created.push(def.key.clone());
                Op::Create(Box::new(def))
            }
            1 if !created.is_empty() => Op::Delete(created[rng.random_range(0..created.len())].clone()),
            2 => Op::Disable(config[rng.random_range(0..config.len())].key.clone()),
            _ => Op::Enable(config[rng.random_range(0..config.len())].key.clone()),
        };
        ops.push(ScheduledOp { after, op });
    }
    ops.sort_by_key(|op| op.after);
    // A delete drawn before its create in time would be a no-op; keep the order honest.
    ops.retain({
        let mut seen = std::collections::BTreeSet::new();
        move |scheduled| match &scheduled.op {
            Op::Create(def) => {
                seen.insert(def.key.clone());
                true
            }
            Op::Delete(key) => seen.contains(key),
            _ => true,
        }
    });
    ops
}

/// What an operator does through the API during the safety phase: trigger jobs (config
/// ones and those created at run time), pause agents and end pauses early. Drawn from a
/// stream of their own, so a seed's other ops are the ones it had before these existed.
pub fn operator_ops(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    jobs: &[HeartbeatKey],
    safety: Duration,
) -> Vec<ScheduledOp> {
    let mut ops = Vec::new();
    if rng.random_bool(RELOAD_PROBABILITY) {
        let after = Duration::from_secs(rng.random_range(1..safety.as_secs()));
        ops.push(ScheduledOp { after, op: Op::Reload(reloaded_config(rng, config)) });
    }
    if jobs.is_empty() {
        return ops;
    }
    let agents: Vec<AgentId> = jobs.iter().map(|key| key.agent.clone()).collect();
    for _ in 0..rng.random_range(0..=OPERATOR_OPS_MAX) {
        let after = Duration::from_secs(rng.random_range(1..safety.as_secs()));
        let op = match rng.random_range(0..4) {
            0 | 1 => Op::Trigger(jobs[rng.random_range(0..jobs.len())].clone()),
            2 => Op::Pause(
                agents[rng.random_range(0..agents.len())].clone(),
                rng.random_range(1..=OPERATOR_PAUSE_MINUTES_MAX),
            ),
            _ => Op::Resume(agents[rng.random_range(0..agents.len())].clone()),
        };
        ops.push(ScheduledOp { after, op });
    }
    // Drawn after the others, so adding them left a seed's other operator ops as they were.
    for _ in 0..rng.random_range(0..=BACKFILLS_MAX) {
        let after = Duration::from_secs(rng.random_range(1..safety.as_secs()));
        let span = Duration::from_secs(rng.random_range(BACKFILL_SPAN_SECS_MIN..=BACKFILL_SPAN_SECS_MAX));
        ops.push(ScheduledOp { after, op: Op::Backfill(jobs[rng.random_range(0..jobs.len())].clone(), span) });
    }
    ops
}

/// The config after an edit: one timed heartbeat gone, one with a new interval, one new.
/// The agent layer's heartbeats stay as they were.
fn reloaded_config(rng: &mut ChaCha8Rng, config: &[HeartbeatDef]) -> Vec<HeartbeatDef> {
    let mut defs = config.to_vec();
    let timed: Vec<usize> = (0..defs.len()).filter(|&index| defs[index].kind == JobKind::Heartbeat).collect();
    if let Some(&index) = timed.get(rng.random_range(0..timed.len().max(1))) {
        let interval = Duration::from_secs(INTERVALS_SECS[rng.random_range(0..INTERVALS_SECS.len())]);
        defs[index].schedule = Schedule::Every(interval);
    }
    if timed.len() > 1 && rng.random_bool(0.5) {
        let gone = timed[rng.random_range(0..timed.len())];
        defs.remove(gone);
    }
    let agent = rng.random_range(0..AGENTS_MAX);
    defs.push(random_def(rng, key(agent, "reloaded"), Origin::Config));
    defs
}

pub fn describe_def(def: &HeartbeatDef) -> String {
    let window = def
        .active_hours
        .as_ref()
        .map_or("always".to_owned(), |w| format!("{}-{} {}", w.start_text(), w.end_text(), w.zone_name()));
    let policy = &def.policy;
    format!(
        "{} {} ({}), window {window}, timeout {}s, catch-up {} (window {}s), overlap {}, jitter up to {}s{}",
        def.key,
        def.schedule,
        def.kind.as_str(),
        def.timeout.as_secs(),
        policy.catch_up.as_str(),
        policy.catch_up_window.as_secs(),
        policy.overlap.as_str(),
        policy.jitter_max.as_secs(),
        if def.delete_after_run { ", deleted after its run" } else { "" }
    )
}

/// Cron expressions of the workload: dense and sparse, irregular gaps (`*/7` resets at
/// each hour), a daily time that falls in spring-forward gaps (02:30), seconds.
pub const CRON_EXPRESSIONS: [&str; 8] = [
    "*/5 * * * *",
    "*/7 * * * *",
    "0 * * * *",
    "15,45 * * * *",
    "30 */2 * * *",
    "30 2 * * *",
    "0 9-17 * * 1-5",
    "30 */10 * * * *",
];
const JITTER_SECS_MAX: u64 = 300;
/// How often a cron is put in a zone whose offset changes during the safety phase.
const CRON_ZONE_CHANGING_PROBABILITY: f64 = 0.5;

/// The zones whose offset changes between `start` and `start + span`.
fn zones_changing_within(start: Timestamp, span: Duration) -> Vec<&'static str> {
    let end = start.checked_add(SignedDuration::try_from(span).unwrap_or(SignedDuration::ZERO)).unwrap_or(start);
    ZONES
        .into_iter()
        .filter(|name| {
            jiff::tz::TimeZone::get(name)
                .is_ok_and(|zone| zone.following(start).next().is_some_and(|change| change.timestamp() < end))
        })
        .collect()
}
const CATCHUP_WINDOW_SECS: [u64; 4] = [600, 3_600, 6 * 3_600, 24 * 3_600];
const AT_BEFORE_START_SECS_MAX: i64 = 2 * 3_600;

/// Gives some heartbeats a cron or `at` schedule, and every one random policies. Ops that
/// create heartbeats get the same treatment.
pub fn vary_schedules(
    rng: &mut ChaCha8Rng,
    zones_rng: &mut ChaCha8Rng,
    heartbeats: &mut [HeartbeatDef],
    ops: &mut [ScheduledOp],
    start: Timestamp,
    safety: Duration,
) {
    let created = ops.iter_mut().filter_map(|op| match &mut op.op {
        Op::Create(def) => Some(def.as_mut()),
        _ => None,
    });
    for def in heartbeats.iter_mut().chain(created) {
        let roll: f64 = rng.random();
        if roll < 0.35 {
            let expression = CRON_EXPRESSIONS[rng.random_range(0..CRON_EXPRESSIONS.len())];
            let mut zone = ZONES[rng.random_range(0..ZONES.len())];
            // Half the crons live in a zone that changes its offset during the run, so
            // the daylight-saving rules (and a search that ignores them) get exercised.
            let changing = zones_changing_within(start, safety);
            if !changing.is_empty() && zones_rng.random_bool(CRON_ZONE_CHANGING_PROBABILITY) {
                zone = changing[zones_rng.random_range(0..changing.len())];
            }
            if let Ok(cron) = CronSchedule::parse(expression, zone) {
                def.schedule = Schedule::cron(cron);
                def.kind = if rng.random_bool(0.5) { JobKind::Cron } else { JobKind::Heartbeat };
            }
        } else if roll < 0.45 {
            let offset = rng.random_range(-AT_BEFORE_START_SECS_MAX..safety.as_secs() as i64);
            def.schedule = Schedule::At(start.checked_add(SignedDuration::from_secs(offset)).unwrap_or(start));
            def.kind = JobKind::Cron;
            def.delete_after_run = rng.random_bool(0.7);
            if rng.random_bool(ONE_SHOT_FLAKY_PROBABILITY) {
                // Its first calls fail: the retry after the backoff, and the breaker, get run.
                let failures = rng.random_range(1..=3);
                def.prompt = format!("{}\n{}{failures}]", def.prompt, crate::ports::llm::FLAKY_MARKER).into();
            }
        }
        def.policy = RunPolicy {
            catch_up: [CatchUp::Skip, CatchUp::Once, CatchUp::All][rng.random_range(0..3)],
            catch_up_window: Duration::from_secs(CATCHUP_WINDOW_SECS[rng.random_range(0..CATCHUP_WINDOW_SECS.len())]),
            overlap: [Overlap::Skip, Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll][rng.random_range(0..4)],
            jitter_max: if rng.random_bool(0.3) {
                Duration::from_secs(rng.random_range(1..=JITTER_SECS_MAX))
            } else {
                Duration::ZERO
            },
        };
    }
}

/// The engine's default backoff, or a short random one that the safety phase exercises
/// step by step.
/// The breaker's cooldown ladder: the default (hours, so within a run a trip mostly stays
/// open), none (open until enabled), or minutes (so probes, failed and good, happen
/// within the safety phase); and where announcements go.
pub fn breaker_recovery(
    rng: &mut ChaCha8Rng,
) -> (Vec<Duration>, Option<systole::core::delivery_target::DeliveryTarget>) {
    let ladder = match rng.random_range(0..10) {
        0 => Vec::new(),
        1..=2 => systole::limits::BREAKER_COOLDOWN_SECS_DEFAULT.iter().copied().map(Duration::from_secs).collect(),
        _ => {
            let steps = rng.random_range(1..=4);
            let min = systole::limits::BREAKER_COOLDOWN_SECS_MIN;
            (0..steps).map(|_| Duration::from_secs(rng.random_range(min..=1_800))).collect()
        }
    };
    let alerts = rng.random_bool(0.3).then(|| systole::core::delivery_target::DeliveryTarget::parse("sim:alerts"));
    (ladder, alerts.and_then(Result::ok))
}

/// What the run log keeps: the default (nothing goes within a run), or a few rows per
/// heartbeat, so the hourly prune deletes skips within the run and the checker judges it.
pub fn run_retention(rng: &mut ChaCha8Rng) -> systole::core::retention::RunRetention {
    use systole::core::retention::RunRetention;
    if rng.random_bool(0.3) {
        return RunRetention::default();
    }
    RunRetention {
        kept_days: rng.random_range(systole::limits::RUNS_KEPT_DAYS_MIN..=3),
        kept_per_heartbeat: rng.random_range(1..=20),
    }
}

pub fn error_backoff(rng: &mut ChaCha8Rng) -> Vec<Duration> {
    if rng.random_bool(0.5) {
        return systole::limits::ERROR_BACKOFF_SECS_DEFAULT.iter().copied().map(Duration::from_secs).collect();
    }
    let steps = rng.random_range(1..=5);
    (0..steps).map(|_| Duration::from_secs(rng.random_range(0..=600))).collect()
}

/// Every agent's `tools` list: the simulated server's tools.
pub const AGENT_TOOLS: [&str; 1] = ["inbox/*"];

/// Gives each configured job tool fields, from the tool stream: most say nothing (only
/// read-only tools), some narrow to one tool, some opt into the tool that writes, some
/// require a tool (rarely one the server never lists, so its runs fail naming it), some
/// check `inbox/search` before the model (a quiet answer skips it: ADR 0021).
pub fn assign_tools(rng: &mut ChaCha8Rng, heartbeats: &mut [HeartbeatDef]) {
    use systole::core::tool_check::ToolCheck;
    use systole::core::tool_policy::{JobTools, ToolName, ToolPattern};
    let pattern = |text: &str| ToolPattern::parse(text).expect("a valid pattern");
    for def in heartbeats.iter_mut().filter(|def| def.kind != systole::core::heartbeat::JobKind::CronMain) {
        def.tools = match rng.random_range(0..100) {
            0..50 => JobTools::default(),
            50..65 => JobTools { allow: Some(vec![pattern("inbox/search")]), ..JobTools::default() },
            65..85 => JobTools { write: vec![pattern("inbox/archive")], ..JobTools::default() },
            85..91 => JobTools { required: vec![ToolName::new("inbox", "search")], ..JobTools::default() },
            91..97 => JobTools {
                check: Some(ToolCheck { tool: ToolName::new("inbox", "search"), arguments: serde_json::Map::new() }),
                ..JobTools::default()
            },
            _ => JobTools { required: vec![ToolName::new("inbox", "missing")], ..JobTools::default() },
        }
        .into();
    }
}
