//! The agent layer's workload: agent heartbeats that follow `HEARTBEAT.md`, main-mode cron
//! jobs that hand work to them, wake requests in bursts, user conversations that hold the
//! agent's lane, and edits of the file. Drawn from its own stream, so the rest of a seed's
//! workload is what it was before this layer existed.

use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::delivery_target::DeliveryTarget;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::RunPolicy;
use systole::core::schedule::Schedule;
use systole::core::visibility::Visibility;
use systole::core::wake::WakeReason;
use systole::limits::LLM_CALLS_PER_DAY_DEFAULT;

use crate::workload::{prompt_for, Op, ScheduledOp};

/// Files with nothing to do (spec 1.2): the checker knows them by heart, independently of
/// the engine's classifier.
pub const EMPTY_FILES: [&str; 5] =
    ["", "# Heartbeat\n", "# Heartbeat\n- [ ]\n\n## Later\n* [x]\n", "   \n\n## Tasks\n+ \n", "#\n-\n"];
/// Files with something to do.
pub const ACTIVE_FILES: [&str; 4] = [
    "- check the deploy\n",
    "# Tasks\n- [ ] water the plants\n",
    "Look at the inbox.",
    "## Weekly\n- [x] done\nmore\n",
];

const AGENT_HEARTBEAT_PROBABILITY: f64 = 0.7;
const AGENT_EVERY_SECS: [u64; 5] = [60, 120, 300, 600, 1_800];
const CRON_MAIN_JOBS_MAX: usize = 3;
const CRON_MAIN_EVERY_SECS: [u64; 5] = [60, 120, 300, 900, 1_800];
const AGENT_OPS_MAX: usize = 60;
const WAKE_BURST_MAX: usize = 12;
const USER_TURN_SECS_MAX: u64 = 180;
const TIMEOUT_SECS: u64 = 60;
/// Budgets small enough that a day of the workload reaches them.
const LLM_CALLS_PER_DAY_MIN: u64 = 20;
const LLM_CALLS_PER_DAY_MAX: u64 = 400;

/// What the layer adds to a seed.
pub struct AgentLayer {
    /// What the simulated inbox shows of runs.
    pub visibility: Visibility,
    /// Each agent's daily budget of LLM calls.
    pub llm_calls_per_day: u64,
    pub heartbeats: Vec<HeartbeatDef>,
    /// Each agent's `HEARTBEAT.md` at the start (`None`: no file).
    pub files: Vec<(AgentId, Option<String>)>,
    pub ops: Vec<ScheduledOp>,
}

/// The agent layer for the agents of `heartbeats`, its ops within the safety phase.
pub fn agent_layer(rng: &mut ChaCha8Rng, heartbeats: &[HeartbeatDef], safety: Duration) -> AgentLayer {
    let mut agents: Vec<AgentId> = heartbeats.iter().map(|def| def.key.agent.clone()).collect();
    agents.dedup();
    let mut layer = AgentLayer {
        visibility: random_visibility(rng),
        llm_calls_per_day: if rng.random_bool(0.5) {
            rng.random_range(LLM_CALLS_PER_DAY_MIN..=LLM_CALLS_PER_DAY_MAX)
        } else {
            LLM_CALLS_PER_DAY_DEFAULT
        },
        heartbeats: Vec::new(),
        files: Vec::new(),
        ops: Vec::new(),
    };
    let mut woken = Vec::new();
    for agent in agents {
        if !rng.random_bool(AGENT_HEARTBEAT_PROBABILITY) {
            continue;
        }
        let key = HeartbeatKey::agent_heartbeat(&agent);
        let every = Duration::from_secs(AGENT_EVERY_SECS[rng.random_range(0..AGENT_EVERY_SECS.len())]);
        let target = DeliveryTarget::new("sim", "inbox");
        layer.heartbeats.push(def(key, JobKind::Agent, Schedule::Every(every), target));
        for index in 0..rng.random_range(0..=CRON_MAIN_JOBS_MAX) {
            let id = HeartbeatId::new(format!("main-job-{index}")).expect("generated ids use the id alphabet");
            let every = Duration::from_secs(CRON_MAIN_EVERY_SECS[rng.random_range(0..CRON_MAIN_EVERY_SECS.len())]);
            let key = HeartbeatKey { agent: agent.clone(), heartbeat: id };
            layer.heartbeats.push(def(key, JobKind::CronMain, Schedule::Every(every), DeliveryTarget::silent()));
        }
        layer.files.push((agent.clone(), random_file(rng)));
        woken.push(agent);
    }
    if woken.is_empty() {
        return layer;
    }
    let mut count = 0;
    while count < rng.random_range(0..=AGENT_OPS_MAX) {
        let agent = woken[rng.random_range(0..woken.len())].clone();
        let after = Duration::from_secs(rng.random_range(1..safety.as_secs()));
        match rng.random_range(0..4) {
            0 => layer.ops.push(ScheduledOp { after, op: Op::SetFile(agent, random_file(rng)) }),
            1 => {
                let hold = Duration::from_secs(rng.random_range(1..=USER_TURN_SECS_MAX));
                layer.ops.push(ScheduledOp { after, op: Op::UserTurn(agent, hold) });
            }
            _ => {
                // A burst: requests a few hundred milliseconds apart, some inside the
                // coalescing window, some after it, all against the flood guard.
                for step in 0..rng.random_range(1..=WAKE_BURST_MAX) {
                    let reason = WakeReason::ALL[rng.random_range(0..WakeReason::ALL.len())];
                    let at = after + Duration::from_millis(step as u64 * rng.random_range(0..2_000));
                    layer.ops.push(ScheduledOp { after: at, op: Op::Wake(agent.clone(), reason) });
                }
            }
        }
        count += 1;
    }
    layer.ops.sort_by_key(|op| op.after);
    layer
}

fn def(key: HeartbeatKey, kind: JobKind, schedule: Schedule, target: DeliveryTarget) -> HeartbeatDef {
    HeartbeatDef {
        prompt: prompt_for(&key).into(),
        key,
        kind,
        schedule,
        policy: RunPolicy::default(),
        delete_after_run: false,
        dedup: true,
        target,
        active_hours: None,
        timeout: Duration::from_secs(TIMEOUT_SECS),
        origin: Origin::Config,
        tools: Default::default(),
        model: None,
    }
}

/// Mostly the defaults; sometimes acknowledgements shown, alerts hidden, or nothing shown.
fn random_visibility(rng: &mut ChaCha8Rng) -> Visibility {
    match rng.random_range(0..10) {
        0 => Visibility { show_ok: true, ..Visibility::default() },
        1 => Visibility { show_alerts: false, ..Visibility::default() },
        2 => Visibility { show_ok: false, show_alerts: false, use_indicator: false },
        _ => Visibility::default(),
    }
}

fn random_file(rng: &mut ChaCha8Rng) -> Option<String> {
    match rng.random_range(0..3) {
        0 => None,
        1 => Some(EMPTY_FILES[rng.random_range(0..EMPTY_FILES.len())].to_owned()),
        _ => Some(ACTIVE_FILES[rng.random_range(0..ACTIVE_FILES.len())].to_owned()),
    }
}
