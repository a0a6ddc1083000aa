//! The one-shot trigger scenario: an operator's trigger meets a run of a one-shot, the
//! paths that stop 73's fresh sweep found about 1 seed in 5,000 (ADR 0046). In a share of
//! seeds, a one-shot made at run time calls a model whose calls each take
//! [`ONE_SHOT_CALL_SECS`] and one of which fails, and a trigger comes while a run of it goes:
//!
//! - *beside its own run* (`allow_all`): the trigger's call fails at once while the
//!   one-shot's own run goes on to succeed. A failed trigger says nothing of the one-shot
//!   (seed 1927871577312: it armed a retry, which ran after the own run had succeeded).
//! - *beside its retry* (`skip`): the own run fails, and the trigger comes during the retry's
//!   run and is skipped as an overlap. A skipped trigger arms no retry (seed 1927871578372).
//! - *beside its failing run, with a disable* (`skip`): the trigger is skipped during the
//!   own run, and an operator disables the one-shot while that run goes; the run fails, no
//!   retry is armed while disabled, and an operator enables it again. How its last run
//!   ended is the run log's, and the skip's row, at a later slot, must not hide the
//!   failure (seed 1927871576798).
//! - *before its jittered own run* (`skip`): the one-shot's jitter puts its own run well
//!   after its instant, the trigger comes between the two, and the process is killed while
//!   the trigger's run goes, or an operator disables the one-shot then and enables it after.
//!   The trigger decides nothing of the schedule (ADR 0049): the own slot still runs.
//!   In a third of this version (`buffer_one`), the trigger comes a few seconds before
//!   the own run is due, which is then held behind the trigger's run, and the disable
//!   comes while it is held: the disable drops it, the one-shot is not retired over the
//!   operator's disable, and the enable runs it (seed 1927871742970; ADR 0050).
//!   In half of the kill's third of it, calls are short instead: the trigger's run succeeds and ends before
//!   the own run is due, the own run fails, and the process is killed during its retry.
//!   The start-up must read the own failure, not the trigger's success at a later slot,
//!   as the one-shot's last run, and retry (seed 1927871652031; ADR 0048).
//!
//! Drawn from a stream of its own, after every other part of a seed.

use std::ops::RangeInclusive;
use std::time::Duration;

use jiff::Timestamp;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{HeartbeatId, HeartbeatKey};
use systole::core::policy::{jitter_offset, Overlap};
use systole::core::schedule::Schedule;
use systole::core::tool_policy::SharedJobTools;

use crate::workload::{Op, ScheduledOp};

const ONE_SHOT_TRIGGERS_PROBABILITY: f64 = 0.6;
/// The one-shot's id, under the agent of a configured job.
const ONE_SHOT_ID: &str = "met-by-trigger";
/// How long each of its model calls takes, but one that fails at once.
pub const ONE_SHOT_CALL_SECS: u64 = 20;
/// How long after its creation (by the wall clock) its instant comes.
pub const ONE_SHOT_LEAD_SECS: RangeInclusive<u64> = 5..=30;
/// How long after the run it meets began the trigger comes: within that run.
const TRIGGER_AFTER_RUN_SECS: RangeInclusive<u64> = 2..=15;
/// How long after its failing run ended the one-shot is enabled again, at most.
const ENABLE_AFTER_RUN_SECS_MAX: u64 = 30;
/// When the process is killed after the own run ended, when its retirement failed.
const RESTART_AFTER_RUN_SECS: RangeInclusive<u64> = 5..=60;
/// Room left after the scenario's last op, before the end of the safety phase.
pub const SETTLE_SECS: u64 = 600;
/// How many times it draws a creation time no wall clock jump comes near.
const DRAWS_MAX: usize = 16;
/// The jitters tried, in order, for the version before the jittered own run: the first
/// whose offset for the one-shot's key leaves room for a trigger and a kill before it.
pub const JITTERS_MAX_SECS: [u64; 4] = [120, 90, 200, 60];
/// The least offset of that own run after the instant that the version takes.
const JITTER_OFFSET_SECS_MIN: u64 = 8;
/// How long each model call takes when the trigger's run must end before the own run is
/// due: short enough for the least offset, with a second on either side.
const SHORT_CALL_SECS: u64 = 3;
/// How far into the retry's run (of [`SHORT_CALL_SECS`]) the process is killed, in ms.
const KILL_INTO_RETRY_MS: u64 = 1_500;

/// Ends the one-shot's prompt: `[calls: S s, call N fails early|late]`. Each model call
/// takes S seconds; the Nth (counted over the prompt's calls, across restarts) fails while
/// faults are on, at once (`early`) or after its S seconds (`late`).
pub const ONE_SHOT_CALLS_MARKER: &str = "[calls: ";

/// What a prompt's [`ONE_SHOT_CALLS_MARKER`] asks of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPlan {
    pub secs: u64,
    pub failing_call: u32,
    pub fails_early: bool,
}

impl CallPlan {
    fn marker(self) -> String {
        let when = if self.fails_early { "early" } else { "late" };
        format!("{ONE_SHOT_CALLS_MARKER}{}s, call {} fails {when}]", self.secs, self.failing_call)
    }

    /// The plan a prompt ends with, if any.
    pub fn of(prompt: &str) -> Option<Self> {
        let (_, rest) = prompt.rsplit_once(ONE_SHOT_CALLS_MARKER)?;
        let rest = rest.strip_suffix(']')?;
        let (secs, rest) = rest.split_once("s, call ")?;
        let (call, when) = rest.split_once(" fails ")?;
        Some(Self {
            secs: secs.parse().ok()?,
            failing_call: call.parse().ok()?,
            fails_early: match when {
                "early" => true,
                "late" => false,
                _ => return None,
            },
        })
    }
}

/// A store write the scenario makes fail once, while faults are on: aimed at one path,
/// where the swarm's store faults hit it about once in a few thousand seeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlantedStoreFault {
    /// The first claim batch that holds an operator's trigger of this job (seed
    /// 1927871661338: the failed claim armed the one-shot's retry).
    TriggerClaim(HeartbeatKey),
    /// The first write that retires this job, a disable as out of slots or a delete (seed
    /// 1927871660412: after a restart, the one-shot's last run is the log's to tell).
    Retirement(HeartbeatKey),
    /// The first batch of skips that holds a skip of this job's own slot (the retired
    /// one-shot revived: its instant never decided in the store).
    OwnSkip(HeartbeatKey),
    /// The first group commit that holds the result of this job's run of this slot (seed
    /// 1927871559156: the row stays `running`, and how the run ended is the process's).
    OwnResult(HeartbeatKey, Timestamp),
    /// The first read of this job's run log (a read, not a write: planted by
    /// [`crate::workload::Op::LogUnreadable`] as the op is applied, not at the start).
    LogRead(HeartbeatKey),
}

/// What the scenario adds to a seed.
#[derive(Debug, Default)]
pub struct Planted {
    pub ops: Vec<ScheduledOp>,
    pub store_faults: Vec<PlantedStoreFault>,
}

/// Which run the trigger meets.
#[derive(Debug, Clone, Copy)]
enum Meeting {
    OwnRunThatSucceeds,
    RetryAfterAFailure,
    FailingRunWhileDisabled,
    /// After the instant, before the jittered own run: `offset` from the instant to it.
    BeforeJitteredRun {
        offset: Duration,
        then: DuringTheTrigger,
    },
}

/// What comes while the trigger's run goes, in the version before the jittered own run.
#[derive(Debug, Clone, Copy)]
enum DuringTheTrigger {
    /// The process is killed before the own run is due.
    Kill,
    /// An operator disables the one-shot before the own run is due, and enables it after
    /// the trigger's run.
    DisableAndEnable,
    /// The own run falls due and is held behind the trigger's run (`buffer_one`); an
    /// operator disables the one-shot then, and enables it after the trigger's run.
    DisableWhileHeld,
    /// Nothing: the trigger's run succeeds and ends before the own run is due. The own run
    /// fails, and the process is killed during its retry.
    OwnFailsRetryKilled,
}

/// The scenario's ops, in a share of seeds: a one-shot created at run time under the agent
/// of one of `config`'s jobs, a trigger during one of its runs, and in one version a disable
/// and an enable. Beside the own run that succeeds, a third of them fail the trigger's claim
/// and the rest the one-shot's retirement, with a restart after it (the trigger's run, not
/// its claim, fails there). `retry_after`: the first backoff step, after which a failed one-shot
/// retries; `jump_times`: when the wall clock jumps (the scenario keeps clear of them).
pub fn one_shot_triggers(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    safety: Duration,
    wall_at: impl Fn(Duration) -> Timestamp,
    jump_times: &[Duration],
    retry_after: Duration,
) -> Planted {
    if !rng.random_bool(ONE_SHOT_TRIGGERS_PROBABILITY) {
        return Planted::default();
    }
    let Some((template, key)) = one_shot_key(rng, config, ONE_SHOT_ID) else { return Planted::default() };
    let backoff = retry_after.as_secs();
    // A third beside the own run (its store faults make two paths of it), the rest a sixth
    // each; the version before the jittered own run needs a jitter that leaves room.
    let jittered = jitter_leaving_room(&key, &JITTERS_MAX_SECS, Duration::from_secs(JITTER_OFFSET_SECS_MIN));
    let meeting = match (rng.random_range(0..6), jittered) {
        (0 | 1, _) => Meeting::OwnRunThatSucceeds,
        (2, _) => Meeting::RetryAfterAFailure,
        (3, _) | (_, None) => Meeting::FailingRunWhileDisabled,
        (_, Some((_, offset))) => {
            // The kill's third is split: half of it kills during the retry instead (the
            // other thirds keep their seeds, and their mutants' catches).
            let then = match rng.random_range(0..3) {
                0 if rng.random_bool(0.5) => DuringTheTrigger::OwnFailsRetryKilled,
                0 => DuringTheTrigger::Kill,
                1 => DuringTheTrigger::DisableAndEnable,
                _ => DuringTheTrigger::DisableWhileHeld,
            };
            Meeting::BeforeJitteredRun { offset, then }
        }
    };
    // The jitter of the version before the jittered own run delays that run (and a retry).
    let retried = matches!(meeting, Meeting::BeforeJitteredRun { then: DuringTheTrigger::OwnFailsRetryKilled, .. });
    let jitter = jittered.map_or(0, |(max, _)| max.as_secs() * if retried { 2 } else { 1 });
    let span = ONE_SHOT_LEAD_SECS.end()
        + backoff
        + jitter
        + ONE_SHOT_CALL_SECS * 3
        + ENABLE_AFTER_RUN_SECS_MAX.max(*RESTART_AFTER_RUN_SECS.end());
    let Some(created) = created_clear_of_jumps(rng, safety, span, SETTLE_SECS, jump_times) else {
        return Planted::default();
    };
    let lead = Duration::from_secs(rng.random_range(ONE_SHOT_LEAD_SECS));
    let Ok(instant) = wall_at(created).checked_add(lead) else { return Planted::default() };
    let due = created + lead;
    let call = Duration::from_secs(ONE_SHOT_CALL_SECS);
    let into_run = Duration::from_secs(rng.random_range(TRIGGER_AFTER_RUN_SECS));
    let (overlap, plan, trigger_at) = match meeting {
        // The own run (the first call) takes its time and succeeds; the trigger's (the
        // second) fails at once beside it.
        Meeting::OwnRunThatSucceeds => (
            Overlap::AllowAll,
            CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 2, fails_early: true },
            due + into_run,
        ),
        // The own run fails at once; its retry takes its time, and the trigger is skipped.
        Meeting::RetryAfterAFailure => (
            Overlap::Skip,
            CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 1, fails_early: true },
            due + retry_after + into_run,
        ),
        // The own run fails after its time, the trigger skipped while it goes.
        Meeting::FailingRunWhileDisabled => {
            (Overlap::Skip, CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 1, fails_early: false }, due + into_run)
        }
        // The trigger's run (the first call) takes its time; none fails. The trigger comes
        // within the first half of the wait for the own run, or, for the own run to be held
        // behind it, 2 s or more before that run is due and 4 s or more before its own end.
        Meeting::BeforeJitteredRun { offset, then } => {
            let plan = CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 0, fails_early: true };
            match then {
                // The trigger's run (the first call) ends a second or more before the own
                // run is due; the own run (the second) fails at once.
                DuringTheTrigger::OwnFailsRetryKilled => {
                    let plan = CallPlan { secs: SHORT_CALL_SECS, failing_call: 2, fails_early: true };
                    let before = rng.random_range(1..=offset.as_secs().saturating_sub(SHORT_CALL_SECS + 1).max(1));
                    (Overlap::Skip, plan, due + Duration::from_secs(before))
                }
                DuringTheTrigger::DisableWhileHeld => {
                    let lead_max = (offset.as_secs() - 1).min(ONE_SHOT_CALL_SECS - 4);
                    let lead = Duration::from_secs(rng.random_range(2..=lead_max));
                    (Overlap::BufferOne, plan, due + offset - lead)
                }
                DuringTheTrigger::Kill | DuringTheTrigger::DisableAndEnable => {
                    let before = Duration::from_secs(rng.random_range(1..=offset.as_secs() / 2));
                    (Overlap::Skip, plan, due + before)
                }
            }
        }
    };
    let mut def = runtime_one_shot(template, &key, instant, overlap, plan);
    if let (Meeting::BeforeJitteredRun { .. }, Some((max, _))) = (meeting, jittered) {
        def.policy.jitter_max = max;
    }
    if let Meeting::BeforeJitteredRun { then: DuringTheTrigger::OwnFailsRetryKilled, .. } = meeting {
        // A silent target runs whatever the channel's visibility: the trigger must succeed
        // and the own run fail, not both be skipped as alerts-disabled.
        def.target = systole::core::delivery_target::DeliveryTarget::silent();
    }
    def.delete_after_run = rng.random_bool(0.5);
    let mut ops = vec![
        ScheduledOp { after: created, op: Op::Create(Box::new(def)) },
        ScheduledOp { after: trigger_at, op: Op::Trigger(key.clone()) },
    ];
    let mut store_faults = Vec::new();
    if let Meeting::OwnRunThatSucceeds = meeting {
        match rng.random_range(0..3) {
            0 => store_faults.push(PlantedStoreFault::TriggerClaim(key.clone())),
            _ => {
                // Its retirement is not written; a restart after it finds the one-shot stored
                // as it was, and its runs in the log.
                store_faults.push(PlantedStoreFault::Retirement(key.clone()));
                let after_run = Duration::from_secs(rng.random_range(RESTART_AFTER_RUN_SECS));
                ops.push(ScheduledOp { after: due + call + after_run, op: Op::Kill });
            }
        }
    }
    let second = Duration::from_secs(1);
    if let Meeting::BeforeJitteredRun { offset, then } = meeting {
        let own_due = due + offset;
        match then {
            DuringTheTrigger::Kill => {
                // Killed while the trigger's run goes, a second or more before the own run
                // is due. (`trigger_at` and `own_due` are whole seconds.)
                let latest = own_due.saturating_sub(second).min(trigger_at + call - second).max(trigger_at + second);
                let kill = Duration::from_secs(rng.random_range((trigger_at.as_secs() + 1)..=latest.as_secs()));
                ops.push(ScheduledOp { after: kill, op: Op::Kill });
            }
            // Disabled while the trigger's run goes, enabled after it ended.
            DuringTheTrigger::DisableAndEnable => {
                ops.extend(disable_then_enable(rng, &key, trigger_at + second, trigger_at + call));
            }
            // Disabled a second or more after the own run fell due, and as long before the
            // trigger's run ends.
            DuringTheTrigger::DisableWhileHeld => {
                let latest = (trigger_at + call).saturating_sub(second * 2).max(own_due + second);
                let disable = Duration::from_secs(rng.random_range((own_due.as_secs() + 1)..=latest.as_secs()));
                ops.extend(disable_then_enable(rng, &key, disable, trigger_at + call));
            }
            // The own run fails as it starts; its retry comes after the first backoff step,
            // jittered as the own run was, and the kill comes within its call: the retry's
            // row is interrupted, and the trigger's success lies between it and the failure.
            DuringTheTrigger::OwnFailsRetryKilled => {
                let retry_start = own_due + retry_after + offset;
                ops.push(ScheduledOp { after: retry_start + Duration::from_millis(KILL_INTO_RETRY_MS), op: Op::Kill });
            }
        }
    }
    if let Meeting::FailingRunWhileDisabled = meeting {
        // After the trigger, while the run goes; enabled once it failed.
        ops.extend(disable_then_enable(rng, &key, trigger_at + second, due + call));
    }
    Planted { ops, store_faults }
}

/// The key of a scenario's one-shot, `id` under the agent of one of `config`'s timed jobs
/// (drawn), and the first timed job, its template; `None` when there is none.
pub fn one_shot_key<'c>(
    rng: &mut ChaCha8Rng,
    config: &'c [HeartbeatDef],
    id: &str,
) -> Option<(&'c HeartbeatDef, HeartbeatKey)> {
    let timed: Vec<&HeartbeatDef> = config.iter().filter(|def| def.kind != JobKind::Agent).collect();
    let template = *timed.first()?;
    let agent = timed[rng.random_range(0..timed.len())].key.agent.clone();
    let heartbeat = HeartbeatId::new(id).ok()?;
    Some((template, HeartbeatKey { agent, heartbeat }))
}

/// When a scenario that lasts `span_secs` starts (elapsed, 60 s or more in), with `settle_secs`
/// left after it before the safety phase ends, clear of the wall clock's jumps so that its
/// instants come when its ops expect them; drawn up to [`DRAWS_MAX`] times.
pub fn created_clear_of_jumps(
    rng: &mut ChaCha8Rng,
    safety: Duration,
    span_secs: u64,
    settle_secs: u64,
    jump_times: &[Duration],
) -> Option<Duration> {
    let room = span_secs + settle_secs;
    for _ in 0..DRAWS_MAX {
        let at = Duration::from_secs(rng.random_range(60..safety.as_secs().saturating_sub(room).max(61)));
        let end = at + Duration::from_secs(span_secs);
        if !jump_times.iter().any(|jump| (at..=end).contains(jump)) {
            return Some(at);
        }
    }
    None
}

/// The first of `maxes_secs` under which `key`'s jitter offset is `offset_min` or more, and
/// that offset: room a scenario needs between a one-shot's instant and its jittered own run.
pub fn jitter_leaving_room(
    key: &HeartbeatKey,
    maxes_secs: &[u64],
    offset_min: Duration,
) -> Option<(Duration, Duration)> {
    maxes_secs.iter().map(|secs| Duration::from_secs(*secs)).find_map(|max| {
        let offset = jitter_offset(key, max);
        (offset >= offset_min).then_some((max, offset))
    })
}

/// A one-shot `key` made at run time for `instant`, like `template` but with no active hours
/// and no tools (its calls go to the model and nowhere else), its model calls as `plan`
/// says, and time for three of them.
pub fn runtime_one_shot(
    template: &HeartbeatDef,
    key: &HeartbeatKey,
    instant: Timestamp,
    overlap: Overlap,
    plan: CallPlan,
) -> HeartbeatDef {
    let mut def = template.clone();
    def.key = key.clone();
    def.kind = JobKind::Cron;
    def.origin = Origin::Runtime;
    def.schedule = Schedule::At(instant);
    def.policy.overlap = overlap;
    def.active_hours = None;
    def.tools = SharedJobTools::default();
    def.timeout = Duration::from_secs(ONE_SHOT_CALL_SECS) * 3;
    def.prompt = format!("{}\n{}", crate::workload::prompt_for(key), plan.marker()).into();
    def
}

/// An operator's disable of `key` at `disable_at`, and an enable up to
/// [`ENABLE_AFTER_RUN_SECS_MAX`] after `run_end`.
fn disable_then_enable(
    rng: &mut ChaCha8Rng,
    key: &HeartbeatKey,
    disable_at: Duration,
    run_end: Duration,
) -> [ScheduledOp; 2] {
    let enable = run_end + Duration::from_secs(rng.random_range(1..=ENABLE_AFTER_RUN_SECS_MAX));
    [
        ScheduledOp { after: disable_at, op: Op::Disable(key.clone()) },
        ScheduledOp { after: enable, op: Op::Enable(key.clone()) },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_plan_reads_back_from_its_marker() {
        for plan in [
            CallPlan { secs: 20, failing_call: 2, fails_early: true },
            CallPlan { secs: 7, failing_call: 1, fails_early: false },
        ] {
            assert_eq!(CallPlan::of(&format!("heartbeat a/b\n{}", plan.marker())), Some(plan));
        }
        assert_eq!(CallPlan::of("heartbeat a/b\n[calls: 20s, call 2 fails soon]"), None);
        assert_eq!(CallPlan::of("heartbeat a/b"), None);
    }
}
