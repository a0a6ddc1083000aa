//! The enable over a held trigger: in a share of seeds, a one-shot made at run time with a
//! jitter that puts its own run well after its instant (`buffer_one`). Between the instant
//! and that run, an operator triggers it twice: the second trigger comes while the first's
//! run goes and is held behind it. While it is held, and before the own run is due, an
//! operator enables the one-shot, which is enabled already.
//!
//! An enable checks whether the one-shot's slot is decided already (a slot held behind a
//! run, or waiting for a place, is as good as decided). A held trigger is not the
//! one-shot's slot, and decides nothing of the schedule (ADR 0049): taken for it, the enable
//! retired the one-shot unrun (seed 1927871794526). The one-shot trigger scenario met this
//! path about once in 30,000 seeds; this one takes it in most seeds that plant it.
//!
//! Drawn from a stream of its own.

use std::ops::RangeInclusive;
use std::time::Duration;

use jiff::Timestamp;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::heartbeat::HeartbeatDef;
use systole::core::policy::Overlap;

use crate::one_shot_triggers::{
    created_clear_of_jumps, jitter_leaving_room, one_shot_key, runtime_one_shot, CallPlan, ONE_SHOT_CALL_SECS,
    ONE_SHOT_LEAD_SECS, SETTLE_SECS,
};
use crate::workload::{Op, ScheduledOp};

const TRIGGER_HELD_ENABLE_PROBABILITY: f64 = 0.3;
/// The one-shot's id, under the agent of a configured job.
const ONE_SHOT_ID: &str = "enabled-over-held-trigger";
/// The jitters tried, in order: the first whose offset for the one-shot's key leaves room
/// for both triggers' runs before the own run.
const JITTERS_MAX_SECS: [u64; 4] = [200, 120, 240, 90];
/// Room the offset leaves after the first trigger's run, at least.
const OWN_RUN_AFTER_FIRST_RUN_SECS_MIN: u64 = 6;
/// How long after the first trigger the second comes: within the first's run.
const SECOND_TRIGGER_AFTER_SECS: RangeInclusive<u64> = 2..=12;

/// The scenario's ops, in a share of seeds: the one-shot's creation, two triggers, and the
/// enable while the second is held. `jump_times`: when the wall clock jumps (the scenario
/// keeps clear of them).
pub fn trigger_held_enable(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    safety: Duration,
    wall_at: impl Fn(Duration) -> Timestamp,
    jump_times: &[Duration],
) -> Vec<ScheduledOp> {
    if !rng.random_bool(TRIGGER_HELD_ENABLE_PROBABILITY) {
        return Vec::new();
    }
    let Some((template, key)) = one_shot_key(rng, config, ONE_SHOT_ID) else { return Vec::new() };
    let call = Duration::from_secs(ONE_SHOT_CALL_SECS);
    let room_min = ONE_SHOT_CALL_SECS + OWN_RUN_AFTER_FIRST_RUN_SECS_MIN + 1;
    let Some((jitter_max, offset)) = jitter_leaving_room(&key, &JITTERS_MAX_SECS, Duration::from_secs(room_min)) else {
        return Vec::new();
    };
    // The own run, and both triggers' runs after it, before the safety phase ends.
    let span = ONE_SHOT_LEAD_SECS.end() + jitter_max.as_secs() + ONE_SHOT_CALL_SECS * 3;
    let Some(created) = created_clear_of_jumps(rng, safety, span, SETTLE_SECS, jump_times) else { return Vec::new() };
    let lead = Duration::from_secs(rng.random_range(ONE_SHOT_LEAD_SECS));
    let Ok(instant) = wall_at(created).checked_add(lead) else { return Vec::new() };
    let due = created + lead;
    // The first trigger's run ends that much or more before the own run is due.
    let first_latest = offset.as_secs() - ONE_SHOT_CALL_SECS - OWN_RUN_AFTER_FIRST_RUN_SECS_MIN;
    let first = due + Duration::from_secs(rng.random_range(1..=first_latest));
    let second = first + Duration::from_secs(rng.random_range(SECOND_TRIGGER_AFTER_SECS));
    // Enabled while the second is held: a second or more after it, before the first's
    // run ends. (Every time here is a whole second.)
    let enable_latest = (first + call).saturating_sub(Duration::from_secs(2)).max(second + Duration::from_secs(1));
    let enable = Duration::from_secs(rng.random_range((second.as_secs() + 1)..=enable_latest.as_secs()));
    // No call fails: each takes its time.
    let plan = CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 0, fails_early: true };
    let mut def = runtime_one_shot(template, &key, instant, Overlap::BufferOne, plan);
    def.policy.jitter_max = jitter_max;
    def.delete_after_run = rng.random_bool(0.5);
    vec![
        ScheduledOp { after: created, op: Op::Create(Box::new(def)) },
        ScheduledOp { after: first, op: Op::Trigger(key.clone()) },
        ScheduledOp { after: second, op: Op::Trigger(key.clone()) },
        ScheduledOp { after: enable, op: Op::Enable(key) },
    ]
}
