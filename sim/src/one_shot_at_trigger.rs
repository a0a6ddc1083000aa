//! The one-shot at a trigger's millisecond: in a share of seeds, an operator triggers a job
//! made at run time, the process is killed while the trigger's run goes, and after the
//! restart an edit makes the job a one-shot whose instant is that trigger's slot, to the
//! millisecond (as a reload that makes one-shots for "now" may).
//!
//! The run log holds one row a slot, and the row there is the trigger's. The new process
//! made no trigger, so it cannot keep the one-shot off it (ADR 0052): the one-shot's claim
//! of its instant meets the trigger's row. The trigger decided nothing of the schedule (ADR
//! 0049), so the one-shot's own slot must still run, a millisecond later (ADR 0055). Before,
//! the lost claim retired the one-shot unrun; the fresh seeds that met it were about 1 in
//! 30,000.
//!
//! In half of them (when the job's jitter leaves room), the process lives on instead: the
//! edit comes a second after the trigger, so this process arms the one-shot at the next
//! free millisecond itself (ADR 0052), with a jitter of minutes, and an operator enables
//! it (enabled already) before that run is due. The enable's re-arm must keep the moved
//! slot (seed 1927872091756: it found no slot at or above it, and retired the one-shot
//! unrun). In half of those, a second trigger comes between the edit and the enable, so
//! the enable's re-arm comes after the first trigger is no longer this process's latest;
//! and in half of the same-life seeds, the process is killed once the edit stored the moved
//! slot, and the enable is queued for the next life, which made no trigger.
//! After a restart, in half of the seeds, an operator's enable follows the edit:
//! its re-arm must keep the slot the claim moved to (seed 1927872100004).
//!
//! In half of the seeds with an enable, the next read of the job's run log fails as the
//! enable is asked: a re-arm that reads the log then finds it unreadable, and must keep
//! the armed own slot all the same (ADR 0052, amended in stop 83). The store's own failed
//! log reads met that read in about 1 fresh seed of 300.
//!
//! Drawn from a stream of its own.

use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::heartbeat::HeartbeatDef;
use systole::core::ids::HeartbeatKey;
use systole::core::policy::Overlap;

use crate::one_shot_triggers::{
    created_clear_of_jumps, jitter_leaving_room, one_shot_key, runtime_one_shot, CallPlan, JITTERS_MAX_SECS,
    ONE_SHOT_CALL_SECS, SETTLE_SECS,
};
use crate::workload::{Op, ScheduledOp};

const ONE_SHOT_AT_TRIGGER_PROBABILITY: f64 = 0.3;
/// The job's id, under the agent of a configured job.
const JOB_ID: &str = "one-shot-at-trigger";
/// How long after its creation the job's first instant comes: far past the scenario, so
/// only the trigger runs it before the edit.
const FIRST_INSTANT_AFTER_SECS: u64 = 6 * 3_600;
/// How long after its creation the trigger comes.
const TRIGGER_AFTER_CREATED_SECS: u64 = 5;
/// How long after the trigger the process is killed: while the trigger's run goes.
const KILL_AFTER_TRIGGER_SECS_MAX: u64 = ONE_SHOT_CALL_SECS - 5;
/// How often the process lives on, and the edit comes in the same life.
const SAME_LIFE_PROBABILITY: f64 = 0.5;
/// How long after the trigger the edit comes in the same life.
const EDIT_AFTER_TRIGGER_SECS: u64 = 1;
/// The least offset of the own run after the instant that the same life takes.
const SAME_LIFE_JITTER_OFFSET_SECS_MIN: u64 = 6;
/// How often, in the same life, a second trigger comes between the edit and the enable.
const SECOND_TRIGGER_PROBABILITY: f64 = 0.5;
/// How long after the first trigger the second one comes in the same life.
const SECOND_TRIGGER_AFTER_TRIGGER_SECS: u64 = EDIT_AFTER_TRIGGER_SECS + 1;
/// How often, in the same life, the process is killed after the edit (and the second
/// trigger), and the enable is queued for the next life.
const RESTART_BEFORE_ENABLE_PROBABILITY: f64 = 0.5;
/// The jitters tried, in order, when the process is killed before the enable: an offset of
/// [`RESTART_JITTER_OFFSET_SECS_MIN`] or more outlasts most downtimes, so that the next life
/// starts, and its enable is applied, before the own run is due.
const RESTART_JITTERS_MAX_SECS: [u64; 3] = [7_200, 5_400, 3_600];
/// The least offset of the own run after the instant that a restart before the enable takes.
const RESTART_JITTER_OFFSET_SECS_MIN: u64 = 1_800;
/// How often, after a restart, an operator's enable follows the edit.
const ENABLE_AFTER_EDIT_PROBABILITY: f64 = 0.5;
/// How often the next read of the job's run log fails as an operator's enable is asked.
const LOG_UNREADABLE_AT_ENABLE_PROBABILITY: f64 = 0.5;

/// The scenario's ops, in a share of seeds: the job's creation, its trigger, the kill, and
/// the edit to a one-shot at the trigger's slot (applied by the next life: the slot is read
/// from the run log then, [`Op::OneShotAtLatestTrigger`]). `jump_times`: when the wall clock
/// jumps (the scenario keeps clear of them).
pub fn one_shot_at_trigger(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    safety: Duration,
    wall_at: impl Fn(Duration) -> jiff::Timestamp,
    jump_times: &[Duration],
) -> Vec<ScheduledOp> {
    if !rng.random_bool(ONE_SHOT_AT_TRIGGER_PROBABILITY) {
        return Vec::new();
    }
    let Some((template, key)) = one_shot_key(rng, config, JOB_ID) else { return Vec::new() };
    let span = TRIGGER_AFTER_CREATED_SECS + KILL_AFTER_TRIGGER_SECS_MAX + ONE_SHOT_CALL_SECS * 3;
    let Some(created) = created_clear_of_jumps(rng, safety, span, SETTLE_SECS, jump_times) else { return Vec::new() };
    let Ok(first_instant) = wall_at(created).checked_add(Duration::from_secs(FIRST_INSTANT_AFTER_SECS)) else {
        return Vec::new();
    };
    let trigger = created + Duration::from_secs(TRIGGER_AFTER_CREATED_SECS);
    let kill = trigger + Duration::from_secs(rng.random_range(1..=KILL_AFTER_TRIGGER_SECS_MAX));
    // No call fails: each takes its time.
    let plan = CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 0, fails_early: true };
    let mut def = runtime_one_shot(template, &key, first_instant, Overlap::Skip, plan);
    def.delete_after_run = rng.random_bool(0.5);
    let same_life = rng.random_bool(SAME_LIFE_PROBABILITY);
    let restart_before_enable = rng.random_bool(RESTART_BEFORE_ENABLE_PROBABILITY);
    // The first jitter of the one-shot trigger scenario's list that leaves room for the edit
    // and the enable before the own run (and for a restart, before the enable).
    let jittered = if restart_before_enable {
        jitter_leaving_room(&key, &RESTART_JITTERS_MAX_SECS, Duration::from_secs(RESTART_JITTER_OFFSET_SECS_MIN))
    } else {
        jitter_leaving_room(&key, &JITTERS_MAX_SECS, Duration::from_secs(SAME_LIFE_JITTER_OFFSET_SECS_MIN))
    };
    if let (true, Some((max, offset))) = (same_life, jittered) {
        def.policy.jitter_max = max;
        let edit = trigger + Duration::from_secs(EDIT_AFTER_TRIGGER_SECS);
        // Before the own run is due: its slot is the trigger's (whole seconds) plus a
        // millisecond, and it comes `offset` after it.
        let second_trigger = rng.random_bool(SECOND_TRIGGER_PROBABILITY);
        let enable_secs_min =
            if second_trigger { SECOND_TRIGGER_AFTER_TRIGGER_SECS + 1 } else { EDIT_AFTER_TRIGGER_SECS + 1 };
        let enable_secs_max = (offset.as_secs() - 1).max(enable_secs_min);
        let mut enable = trigger + Duration::from_secs(rng.random_range(enable_secs_min..=enable_secs_max));
        let mut ops = vec![
            ScheduledOp { after: created, op: Op::Create(Box::new(def.clone())) },
            ScheduledOp { after: trigger, op: Op::Trigger(key.clone()) },
            ScheduledOp { after: edit, op: Op::OneShotAtLatestTrigger(Box::new(def)) },
        ];
        if second_trigger {
            // Skipped as an overlap of the first trigger's run, but this process's latest
            // trigger from then on: the enable's re-arm must still keep the own slot off the
            // first trigger's millisecond.
            let after = trigger + Duration::from_secs(SECOND_TRIGGER_AFTER_TRIGGER_SECS);
            ops.push(ScheduledOp { after, op: Op::Trigger(key.clone()) });
        }
        if restart_before_enable {
            // The moved slot is stored by now; the next life made no trigger, and its enable,
            // applied as it starts, knows the triggers' rows only from the run log (the
            // own run is then still to come when the downtime is shorter than its jitter).
            let kill = trigger + Duration::from_secs(enable_secs_min);
            ops.push(ScheduledOp { after: kill, op: Op::Kill });
            enable = kill + Duration::from_secs(1);
        }
        ops.extend(enable_ops(rng, enable, key));
        return ops;
    }
    let mut ops = vec![
        ScheduledOp { after: created, op: Op::Create(Box::new(def.clone())) },
        ScheduledOp { after: trigger, op: Op::Trigger(key.clone()) },
        ScheduledOp { after: kill, op: Op::Kill },
        // Queued while the process is down: the next life applies it as it starts.
        ScheduledOp { after: kill + Duration::from_secs(1), op: Op::OneShotAtLatestTrigger(Box::new(def)) },
    ];
    if rng.random_bool(ENABLE_AFTER_EDIT_PROBABILITY) {
        // Queued behind the edit: applied as the next life starts too, once its claim of
        // the instant may have met the trigger's row and moved (seed 1927872100004).
        ops.extend(enable_ops(rng, kill + Duration::from_secs(1), key));
    }
    ops
}

/// An operator's enable at `after`, in half of the seeds with the next read of the job's
/// run log planted to fail right before it (the draw comes after the scenario's others,
/// so they stay as they were).
fn enable_ops(rng: &mut ChaCha8Rng, after: Duration, key: HeartbeatKey) -> Vec<ScheduledOp> {
    let mut ops = Vec::new();
    if rng.random_bool(LOG_UNREADABLE_AT_ENABLE_PROBABILITY) {
        // Applied first: ops of one instant keep their order.
        ops.push(ScheduledOp { after, op: Op::LogUnreadable(key.clone()) });
    }
    ops.push(ScheduledOp { after, op: Op::Enable(key) });
    ops
}
