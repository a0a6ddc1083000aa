//! Everything about one simulated run, derived from its seed alone: the workload, the
//! faults and their rates, the durations. Printed first in a replay and in every failure
//! report, so a seed's behaviour can be read before it is run.

use std::fmt::Write;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use systole::core::heartbeat::HeartbeatDef;

use crate::agents;
use crate::faults::FaultRates;
use crate::workload::{self, ScheduledOp};

/// Independent random streams cut from one seed, so adding a draw to one concern does not
/// shift every other.
pub enum Stream {
    Options = 0,
    Faults = 1,
    Llm = 2,
    /// Schedule kinds, policies and backoff: drawn apart so the base workload of a seed
    /// (intervals, windows, ops, faults) is the one it had before these existed.
    Schedules = 3,
    /// The agent layer: agent heartbeats, main-mode cron jobs, wakes, user turns, files.
    Agents = 4,
    /// The operator's API calls: triggers, pauses, resumes.
    Operator = 5,
    /// The breaker's cooldown ladder and where its announcements go.
    Breaker = 6,
    /// The chat platform behind the messenger, its answers, long replies, retry jitter.
    Delivery = 7,
    /// What the run log keeps (the engine prunes the rest hourly).
    Retention = 8,
    /// The agents' zone: where their budget's day begins.
    BudgetZone = 9,
    /// Whether a cron lives in a zone that changes its offset during the run.
    CronZones = 10,
    /// Rare paths planted on purpose (`scenarios.rs`).
    Scenarios = 11,
    /// Replies with mentions and markup, and whether the target allows mentions (issue 25).
    Mentions = 12,
    /// The model's draws of those replies during the run.
    MentionReplies = 13,
    /// The tool layer: jobs' tool fields, the agents' cap, the tool faults' rates (issue 26).
    Tools = 14,
    /// The tool server's draws during the run.
    ToolServer = 15,
    /// The model's tool calls during the run.
    ToolUse = 16,
    /// The agents' token and cost caps, and how often the provider refuses (issue 27).
    Spend = 17,
    /// The provider's refusals (401, 402, 403) during the run.
    Refusals = 18,
    /// How many runs may go at once (issue 28: admission before the claim).
    Admission = 19,
    /// The global caps across all agents, and the engine's zone their day is in.
    GlobalSpend = 20,
    /// Whether the prompt reads of claimed slots fail, and how often (issue 28).
    StoreReads = 21,
    /// A reload that makes a recurring job a one-shot below its armed slot (`scenarios`).
    OneShotTakeover = 22,
    /// Reloads that hold a one-shot's slot behind a slow run, and an enable (`scenarios`).
    HeldOneShot = 23,
    /// A one-shot whose runs an operator's trigger meets (`one_shot_triggers`).
    OneShotTriggers = 24,
    /// A one-shot enabled while an operator's trigger of it is held (`trigger_held_enable`).
    TriggerHeldEnable = 25,
    /// A one-shot edited in at an operator's trigger's slot after a restart
    /// (`one_shot_at_trigger`).
    OneShotAtTrigger = 26,
    /// A one-shot retired with its instant unlogged, then enabled (`retired_one_shot_revived`).
    RetiredOneShotRevived = 27,
    /// Whether reads of the run log fail, and how often.
    LogReads = 28,
    /// Those reads' failures during the run.
    LogReadFailures = 29,
}

pub fn rng(seed: u64, stream: Stream) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream as u64);
    rng
}

/// A step of the wall clock during the safety phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockJump {
    /// Elapsed time since the start of the run.
    pub after: Duration,
    pub by: SignedDuration,
}

#[derive(Debug, Clone)]
pub struct SimOptions {
    pub seed: u64,
    /// The wall clock's reading at the start (before skew).
    pub start: Timestamp,
    pub clock_skew: SignedDuration,
    pub clock_jumps: Vec<ClockJump>,
    /// Faults on.
    pub safety: Duration,
    /// Faults off: everything healthy must converge.
    pub liveness: Duration,
    pub heartbeats: Vec<HeartbeatDef>,
    pub ops: Vec<ScheduledOp>,
    /// How often a healthy LLM reply has something to say.
    pub alert_probability: f64,
    pub fault_rates: FaultRates,
    pub crashes_max: u32,
    pub downtime_max: Duration,
    pub breaker_failures_max: u32,
    /// Waits after consecutive failures (the engine's `error_backoff`).
    pub error_backoff: Vec<Duration>,
    /// How long an open breaker waits before its probe (the engine's `breaker_cooldown`).
    pub breaker_cooldown: Vec<Duration>,
    /// The platform every delivery goes through (the real adapter code over simulated HTTP).
    pub platform: crate::ports::http::SimPlatform,
    /// Whether the platform target lets replies notify people (`allow_mentions`).
    pub allow_mentions: bool,
    /// Every agent's `tools` list, and the cap of tool calls per run.
    pub agent_tools: Vec<String>,
    pub tool_calls_max: u32,
    /// Where the breaker's announcements go (`None`: each heartbeat's target).
    pub alerts_target: Option<systole::core::delivery_target::DeliveryTarget>,
    /// What the run log keeps (the engine's `run_retention`).
    pub run_retention: systole::core::retention::RunRetention,
    /// Each agent's `HEARTBEAT.md` at the start (`None`: no file).
    pub files: Vec<(systole::core::ids::AgentId, Option<String>)>,
    /// What the simulated inbox shows of runs.
    pub visibility: systole::core::visibility::Visibility,
    /// Each agent's daily budget of LLM calls.
    pub llm_calls_per_day: u64,
    /// Each agent's daily caps of tokens and cost (micros), priced by [`SIM_PRICE`].
    pub daily_tokens_max: u64,
    pub daily_cost_max_micros: u64,
    /// The agents' zone (`timezone`): their budget's day begins at its midnight, so
    /// zones with daylight saving and part-hour offsets move the rollover.
    pub budget_zone: &'static str,
    /// The caps of all agents together (`[engine] daily_tokens_max`, `daily_cost_max`),
    /// low enough to be reached in a share of seeds, in the day of `global_zone`.
    pub global_tokens_max: u64,
    pub global_cost_max_micros: u64,
    pub global_zone: &'static str,
    /// The engine's `runs_in_flight_max`: a handful in a good share of seeds, so slow and
    /// hanging runs fill it and due slots wait for a place (ADR 0023).
    pub runs_in_flight_max: usize,
    /// Store writes that fail once, aimed at one path (`one_shot_triggers`).
    pub planted_store_faults: Vec<crate::one_shot_triggers::PlantedStoreFault>,
}

const SAFETY_SECS_MIN: u64 = 2 * 3_600;
/// Token and cost caps low enough that a day of the workload reaches them, in half the
/// seeds each (the others keep the defaults, which a simulated day never reaches).
const DAILY_TOKENS_MAX_MIN: u64 = 5_000;
const DAILY_TOKENS_MAX_MAX: u64 = 300_000;
const DAILY_COST_MICROS_MAX_MIN: u64 = 5_000;
const DAILY_COST_MICROS_MAX_MAX: u64 = 400_000;

/// The simulated model's name and price per million tokens (1.00 input, 0.25 cached, 4.00
/// output), so every run has a cost.
pub const SIM_MODEL: &str = "sim-model";
pub const SIM_PRICE: systole::core::usage::Price = systole::core::usage::Price {
    input_micros_per_million: 1_000_000,
    cached_micros_per_million: 250_000,
    output_micros_per_million: 4_000_000,
};

fn day_caps(rng: &mut ChaCha8Rng) -> (u64, u64) {
    let tokens = if rng.random_bool(0.5) {
        rng.random_range(DAILY_TOKENS_MAX_MIN..=DAILY_TOKENS_MAX_MAX)
    } else {
        systole::limits::DAILY_TOKENS_MAX_DEFAULT
    };
    let cost = if rng.random_bool(0.5) {
        rng.random_range(DAILY_COST_MICROS_MAX_MIN..=DAILY_COST_MICROS_MAX_MAX)
    } else {
        systole::limits::DAILY_COST_MICROS_MAX_DEFAULT
    };
    (tokens, cost)
}
/// The share of seeds whose global caps are low enough to be reached, and their ranges
/// (the sum of several agents' spending: above one agent's low caps).
const GLOBAL_CAPS_LOW_PROBABILITY: f64 = 0.3;
const GLOBAL_TOKENS_MAX_MIN: u64 = 20_000;
const GLOBAL_TOKENS_MAX_MAX: u64 = 600_000;
const GLOBAL_COST_MICROS_MAX_MIN: u64 = 20_000;
const GLOBAL_COST_MICROS_MAX_MAX: u64 = 800_000;

fn global_caps(rng: &mut ChaCha8Rng) -> (u64, u64) {
    let tokens = if rng.random_bool(GLOBAL_CAPS_LOW_PROBABILITY) {
        rng.random_range(GLOBAL_TOKENS_MAX_MIN..=GLOBAL_TOKENS_MAX_MAX)
    } else {
        systole::limits::GLOBAL_DAILY_TOKENS_MAX_DEFAULT
    };
    let cost = if rng.random_bool(GLOBAL_CAPS_LOW_PROBABILITY) {
        rng.random_range(GLOBAL_COST_MICROS_MAX_MIN..=GLOBAL_COST_MICROS_MAX_MAX)
    } else {
        systole::limits::GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT
    };
    (tokens, cost)
}

/// The agents' cap of tool calls per run: low, so a model's burst meets it.
const TOOL_CALLS_MAX_MIN: u32 = 2;
/// The share of seeds whose engine runs at most [`RUNS_IN_FLIGHT_FEW_MAX`] runs at once.
const RUNS_IN_FLIGHT_FEW_PROBABILITY: f64 = 0.4;
const RUNS_IN_FLIGHT_FEW_MAX: usize = 3;
const TOOL_CALLS_MAX_MAX: u32 = 8;
/// Most seeds keep mentions off, the default that protects chats.
const ALLOW_MENTIONS_PROBABILITY: f64 = 0.2;
const SAFETY_SECS_MAX: u64 = 18 * 3_600;
const CLOCK_JUMPS_MAX: u32 = 4;
const CLOCK_JUMP_SECS_MAX: i64 = 6 * 3_600;
const CLOCK_SKEW_SECS_MAX: i64 = 2 * 3_600;
const CRASHES_MAX: u32 = 6;
const DOWNTIME_SECS_MAX: u64 = 45 * 60;
/// The first instant a run may start at: 2025-01-01T00:00:00Z.
const START_SECS_MIN: i64 = 1_735_689_600;
/// Three years later.
const START_SPAN_SECS: i64 = 3 * 365 * 86_400;
/// How often a run starts just before a daylight-saving transition of one of its zones.
const START_NEAR_TRANSITION_PROBABILITY: f64 = 0.5;

impl SimOptions {
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = rng(seed, Stream::Options);
        let mut heartbeats = workload::config_heartbeats(&mut rng);
        let start = start_instant(&mut rng, &heartbeats);
        let safety = Duration::from_secs(rng.random_range(SAFETY_SECS_MIN..=SAFETY_SECS_MAX));
        let clock_skew = if rng.random_bool(0.5) {
            SignedDuration::from_secs(rng.random_range(-CLOCK_SKEW_SECS_MAX..=CLOCK_SKEW_SECS_MAX))
        } else {
            SignedDuration::ZERO
        };
        let jumps_count = if rng.random_bool(0.5) { rng.random_range(1..=CLOCK_JUMPS_MAX) } else { 0 };
        let mut clock_jumps: Vec<ClockJump> = (0..jumps_count)
            .map(|_| ClockJump {
                after: Duration::from_secs(rng.random_range(60..safety.as_secs())),
                by: SignedDuration::from_secs(rng.random_range(-CLOCK_JUMP_SECS_MAX..=CLOCK_JUMP_SECS_MAX)),
            })
            .filter(|jump| !jump.by.is_zero())
            .collect();
        clock_jumps.sort_by_key(|jump| jump.after);
        let mut ops = workload::runtime_ops(&mut rng, &heartbeats, safety);
        let interval_max = heartbeats.iter().filter_map(|h| h.schedule.interval()).max();
        let interval_max = interval_max.unwrap_or(Duration::from_secs(3_600));
        let ops_interval_max = ops.iter().filter_map(|op| op.op.created_interval()).max().unwrap_or(Duration::ZERO);
        let liveness = interval_max.max(ops_interval_max) * 3 + Duration::from_secs(600);
        let mut schedules_rng = self::rng(seed, Stream::Schedules);
        let mut zones_rng = self::rng(seed, Stream::CronZones);
        workload::vary_schedules(&mut schedules_rng, &mut zones_rng, &mut heartbeats, &mut ops, start, safety);
        let error_backoff = workload::error_backoff(&mut schedules_rng);
        let layer = agents::agent_layer(&mut self::rng(seed, Stream::Agents), &heartbeats, safety);
        heartbeats.extend(layer.heartbeats);
        ops.extend(layer.ops);
        // Triggers aim at timed jobs; the agent heartbeat's manual run is a wake, drawn above.
        let jobs: Vec<_> = heartbeats
            .iter()
            .filter(|def| def.kind != systole::core::heartbeat::JobKind::Agent)
            .map(|def| def.key.clone())
            .chain(ops.iter().filter_map(|op| op.op.def().map(|def| def.key.clone())))
            .collect();
        ops.extend(workload::operator_ops(&mut self::rng(seed, Stream::Operator), &heartbeats, &jobs, safety));
        let runs_in_flight_max = {
            let mut rng = self::rng(seed, Stream::Admission);
            if rng.random_bool(RUNS_IN_FLIGHT_FEW_PROBABILITY) {
                rng.random_range(1..=RUNS_IN_FLIGHT_FEW_MAX)
            } else {
                systole::limits::RUNS_IN_FLIGHT_MAX_DEFAULT
            }
        };
        let planted = crate::scenarios::plant(
            &mut self::rng(seed, Stream::Scenarios),
            &mut heartbeats,
            safety,
            runs_in_flight_max,
        );
        ops.extend(planted.ops);
        ops.sort_by_key(|op| op.after);
        clock_jumps.extend(planted.clock_jumps);
        clock_jumps.sort_by_key(|jump| jump.after);
        let (breaker_cooldown, alerts_target) = workload::breaker_recovery(&mut self::rng(seed, Stream::Breaker));
        let mut fault_rates = FaultRates::swarm(&mut rng);
        fault_rates.add_reply_shapes(&mut schedules_rng);
        let mut delivery_rng = self::rng(seed, Stream::Delivery);
        fault_rates.add_delivery_shapes(&mut delivery_rng);
        let platform = crate::ports::http::SimPlatform::draw(&mut delivery_rng);
        let mut mentions_rng = self::rng(seed, Stream::Mentions);
        fault_rates.add_ping_replies(&mut mentions_rng);
        let allow_mentions = mentions_rng.random_bool(ALLOW_MENTIONS_PROBABILITY);
        let mut tools_rng = self::rng(seed, Stream::Tools);
        fault_rates.add_tool_faults(&mut tools_rng);
        workload::assign_tools(&mut tools_rng, &mut heartbeats);
        let tool_calls_max = tools_rng.random_range(TOOL_CALLS_MAX_MIN..=TOOL_CALLS_MAX_MAX);
        let mut global_rng = self::rng(seed, Stream::GlobalSpend);
        let (global_tokens_max, global_cost_max_micros) = global_caps(&mut global_rng);
        let global_zone = workload::ZONES[global_rng.random_range(0..workload::ZONES.len())];
        let mut spend_rng = self::rng(seed, Stream::Spend);
        let (daily_tokens_max, daily_cost_max_micros) = day_caps(&mut spend_rng);
        fault_rates.add_refusals(&mut spend_rng);
        fault_rates.add_store_reads(&mut self::rng(seed, Stream::StoreReads));
        fault_rates.add_log_reads(&mut self::rng(seed, Stream::LogReads));
        // Last: its reload carries the config as the seed has it by now, tools included.
        let wall_at = |after: Duration| {
            let jumped = clock_jumps.iter().filter(|jump| jump.after <= after).map(|jump| jump.by);
            let shift = jumped.fold(clock_skew, |sum, by| sum.saturating_add(by));
            let elapsed = SignedDuration::try_from(after).unwrap_or(SignedDuration::MAX);
            start.checked_add(shift.saturating_add(elapsed)).unwrap_or(start)
        };
        let takeover = crate::scenarios::one_shot_takeover(
            &mut self::rng(seed, Stream::OneShotTakeover),
            &heartbeats,
            safety,
            wall_at,
        );
        ops.extend(takeover);
        // The one-shot scenarios keep clear of the wall clock's jumps and wait out a retry.
        let jump_times: Vec<Duration> = clock_jumps.iter().map(|jump| jump.after).collect();
        let retry_after = error_backoff.first().copied().unwrap_or_default();
        ops.extend(crate::scenarios::held_one_shot_enable(
            &mut self::rng(seed, Stream::HeldOneShot),
            &heartbeats,
            safety,
            wall_at,
            &jump_times,
            retry_after,
        ));
        let triggers = crate::one_shot_triggers::one_shot_triggers(
            &mut self::rng(seed, Stream::OneShotTriggers),
            &heartbeats,
            safety,
            wall_at,
            &jump_times,
            retry_after,
        );
        ops.extend(triggers.ops);
        ops.extend(crate::trigger_held_enable::trigger_held_enable(
            &mut self::rng(seed, Stream::TriggerHeldEnable),
            &heartbeats,
            safety,
            wall_at,
            &jump_times,
        ));
        ops.extend(crate::one_shot_at_trigger::one_shot_at_trigger(
            &mut self::rng(seed, Stream::OneShotAtTrigger),
            &heartbeats,
            safety,
            wall_at,
            &jump_times,
        ));
        let revived = crate::retired_one_shot_revived::retired_one_shot_revived(
            &mut self::rng(seed, Stream::RetiredOneShotRevived),
            &heartbeats,
            safety,
            wall_at,
            &jump_times,
        );
        ops.extend(revived.ops);
        let mut planted_store_faults = triggers.store_faults;
        planted_store_faults.extend(revived.store_faults);
        ops.sort_by_key(|op| op.after);
        Self {
            seed,
            start,
            clock_skew,
            clock_jumps,
            safety,
            liveness,
            heartbeats,
            ops,
            alert_probability: rng.random_range(0.05..0.6),
            fault_rates,
            crashes_max: rng.random_range(0..=CRASHES_MAX),
            downtime_max: Duration::from_secs(rng.random_range(1..=DOWNTIME_SECS_MAX)),
            breaker_failures_max: systole::limits::BREAKER_FAILURES_MAX_DEFAULT,
            error_backoff,
            breaker_cooldown,
            alerts_target,
            run_retention: workload::run_retention(&mut self::rng(seed, Stream::Retention)),
            platform,
            allow_mentions,
            agent_tools: workload::AGENT_TOOLS.iter().map(|pattern| (*pattern).to_owned()).collect(),
            tool_calls_max,
            files: layer.files,
            visibility: layer.visibility,
            llm_calls_per_day: layer.llm_calls_per_day,
            daily_tokens_max,
            daily_cost_max_micros,
            budget_zone: {
                let mut rng = self::rng(seed, Stream::BudgetZone);
                workload::ZONES[rng.random_range(0..workload::ZONES.len())]
            },
            global_tokens_max,
            global_cost_max_micros,
            global_zone,
            runs_in_flight_max,
            planted_store_faults,
        }
    }

    /// Every heartbeat the run may ever have: config ones and those created by ops.
    pub fn all_defs(&self) -> Vec<HeartbeatDef> {
        let mut defs = self.heartbeats.clone();
        for op in &self.ops {
            let added: Vec<HeartbeatDef> = match &op.op {
                crate::workload::Op::Reload(reloaded) => reloaded.clone(),
                crate::workload::Op::OneShotAtLatestTrigger(def) => vec![(**def).clone()],
                other => other.def().cloned().into_iter().collect(),
            };
            for def in added {
                if !defs.iter().any(|known| known.key == def.key) {
                    defs.push(def);
                }
            }
        }
        defs
    }
    /// A readable account of the options, one fact a line.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "seed: {}", self.seed);
        let _ = writeln!(out, "start: {} (skew {})", self.start, self.clock_skew);
        let _ = writeln!(out, "safety phase: {}s, liveness phase: {}s", self.safety.as_secs(), self.liveness.as_secs());
        for jump in &self.clock_jumps {
            let _ = writeln!(out, "clock jump: after {}s by {}", jump.after.as_secs(), jump.by);
        }
        let _ = writeln!(out, "crashes max: {}, downtime max: {}s", self.crashes_max, self.downtime_max.as_secs());
        let _ = writeln!(out, "alert probability: {:.3}", self.alert_probability);
        let _ = writeln!(out, "runs in flight max: {}", self.runs_in_flight_max);
        let backoff: Vec<u64> = self.error_backoff.iter().map(Duration::as_secs).collect();
        let _ = writeln!(out, "error backoff: {backoff:?} s");
        let cooldown: Vec<u64> = self.breaker_cooldown.iter().map(Duration::as_secs).collect();
        let alerts =
            self.alerts_target.as_ref().map_or_else(|| "each heartbeat's target".to_owned(), ToString::to_string);
        let _ = writeln!(out, "breaker cooldown: {cooldown:?} s, announcements to {alerts}");
        let _ = writeln!(
            out,
            "deliveries through: {:?}{}",
            self.platform,
            if self.allow_mentions { " (mentions allowed)" } else { "" }
        );
        let retention = self.run_retention;
        let _ = writeln!(
            out,
            "run log kept: {} days, {} rows per heartbeat",
            retention.kept_days, retention.kept_per_heartbeat
        );
        for (kind, rate) in &self.fault_rates.per_call {
            let _ = writeln!(out, "fault {}: {:.4}", kind.name(), rate);
        }
        for def in &self.heartbeats {
            let _ = writeln!(out, "heartbeat: {}", workload::describe_def(def));
        }
        let _ = writeln!(out, "visibility of the inbox: {:?}", self.visibility);
        let _ = writeln!(out, "LLM calls per agent and day: {} (days in {})", self.llm_calls_per_day, self.budget_zone);
        let _ = writeln!(
            out,
            "all agents per day: {} tokens, {} micros (days in {})",
            self.global_tokens_max, self.global_cost_max_micros, self.global_zone
        );
        for (agent, file) in &self.files {
            let _ = writeln!(out, "HEARTBEAT.md of {agent}: {file:?}");
        }
        for op in &self.ops {
            let _ = writeln!(out, "op: after {}s {}", op.after.as_secs(), op.op.describe());
        }
        out
    }
}

fn start_instant(rng: &mut ChaCha8Rng, heartbeats: &[HeartbeatDef]) -> Timestamp {
    let base =
        Timestamp::from_second(START_SECS_MIN + rng.random_range(0..START_SPAN_SECS)).unwrap_or(Timestamp::UNIX_EPOCH);
    let zones: Vec<_> =
        heartbeats.iter().filter_map(|h| h.active_hours.as_ref()).map(|w| w.zone_name().to_owned()).collect();
    if zones.is_empty() || !rng.random_bool(START_NEAR_TRANSITION_PROBABILITY) {
        return base;
    }
    let zone = &zones[rng.random_range(0..zones.len())];
    let Ok(tz) = jiff::tz::TimeZone::get(zone) else { return base };
    match tz.following(base).next() {
        Some(transition) => {
            let before = SignedDuration::from_secs(rng.random_range(0..6 * 3_600));
            transition.timestamp().checked_sub(before).unwrap_or(base)
        }
        None => base,
    }
}
