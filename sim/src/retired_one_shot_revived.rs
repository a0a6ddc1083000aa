//! The retired one-shot revived: in a share of seeds, a one-shot made at run time is
//! retired with its instant never decided in the store, and an operator's enable runs it.
//!
//! - An operator triggers it a few seconds before its instant. The trigger's run is still
//!   going when the instant comes, so the own slot is skipped as an overlap, and a planted
//!   fault fails that skip's write. Once the trigger's run ends, the engine retires the
//!   one-shot (its slot was decided, as far as this process knows).
//! - An operator enables it. The store never logged the instant, so the enable runs it: the
//!   one-shot is live again (the engine's mark of a retired one-shot clears).
//! - That run fails after its time, and an operator disables the one-shot while it goes.
//!   An enable after it must retry the failed one-shot, not retire it again.
//! - In half of them, a planted fault fails that run's result's write too: its row stays
//!   `running`, and the enable must take the failure this process heard from it (seed
//!   1927871559156, whose fix had no mutant that fresh seeds caught either).
//!
//! The engine's mark was found by seed 1927871872102 (a skip in quiet hours whose write
//! failed, then a breaker's probe), and a mutant that kept the mark survived fresh seeds:
//! the path needed a store fault on one write among thousands. Here it is planted.
//!
//! Drawn from a stream of its own.

use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::heartbeat::HeartbeatDef;
use systole::core::policy::Overlap;
use systole::core::slots::truncate_to_millis;

use crate::one_shot_triggers::{
    created_clear_of_jumps, one_shot_key, runtime_one_shot, CallPlan, Planted, PlantedStoreFault, ONE_SHOT_CALL_SECS,
    SETTLE_SECS,
};
use crate::workload::{Op, ScheduledOp};

const RETIRED_ONE_SHOT_REVIVED_PROBABILITY: f64 = 0.3;
/// How often the revived run's result is not written either.
const RESULT_UNWRITTEN_PROBABILITY: f64 = 0.5;
/// The one-shot's id, under the agent of a configured job.
const ONE_SHOT_ID: &str = "retired-then-enabled";
/// How long after its creation its instant comes: room for the trigger before it.
const INSTANT_AFTER_CREATED_SECS: u64 = 25;
/// How long before the instant the trigger comes: its run (one call) still goes then.
const TRIGGER_BEFORE_INSTANT_SECS_MAX: u64 = ONE_SHOT_CALL_SECS - 5;
/// How long after the trigger's run ended the first enable comes, at most.
const ENABLE_AFTER_TRIGGER_RUN_SECS_MAX: u64 = 10;
/// How long after the first enable the disable comes, at most: while the revived run goes.
const DISABLE_AFTER_ENABLE_SECS_MAX: u64 = ONE_SHOT_CALL_SECS - 5;
/// How long after the revived run ended the second enable comes, at most.
const ENABLE_AFTER_FAILED_RUN_SECS_MAX: u64 = 30;

/// The scenario's ops and its planted fault, in a share of seeds. `jump_times`: when the
/// wall clock jumps (the scenario keeps clear of them).
pub fn retired_one_shot_revived(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    safety: Duration,
    wall_at: impl Fn(Duration) -> jiff::Timestamp,
    jump_times: &[Duration],
) -> Planted {
    if !rng.random_bool(RETIRED_ONE_SHOT_REVIVED_PROBABILITY) {
        return Planted::default();
    }
    let Some((template, key)) = one_shot_key(rng, config, ONE_SHOT_ID) else { return Planted::default() };
    let call = Duration::from_secs(ONE_SHOT_CALL_SECS);
    let span = INSTANT_AFTER_CREATED_SECS
        + ENABLE_AFTER_TRIGGER_RUN_SECS_MAX
        + ONE_SHOT_CALL_SECS * 4
        + ENABLE_AFTER_FAILED_RUN_SECS_MAX;
    let Some(created) = created_clear_of_jumps(rng, safety, span, SETTLE_SECS, jump_times) else {
        return Planted::default();
    };
    let lead = Duration::from_secs(INSTANT_AFTER_CREATED_SECS);
    let Ok(instant) = wall_at(created).checked_add(lead) else { return Planted::default() };
    let due = created + lead;
    let trigger = due - Duration::from_secs(rng.random_range(2..=TRIGGER_BEFORE_INSTANT_SECS_MAX));
    let trigger_run_end = trigger + call;
    let enable = trigger_run_end + Duration::from_secs(rng.random_range(1..=ENABLE_AFTER_TRIGGER_RUN_SECS_MAX));
    let disable = enable + Duration::from_secs(rng.random_range(2..=DISABLE_AFTER_ENABLE_SECS_MAX));
    let enable_again = enable + call + Duration::from_secs(rng.random_range(1..=ENABLE_AFTER_FAILED_RUN_SECS_MAX));
    // The trigger's run (the first call) succeeds; the revived run (the second) fails after
    // its time; the retry (the third) succeeds.
    let plan = CallPlan { secs: ONE_SHOT_CALL_SECS, failing_call: 2, fails_early: false };
    let mut def = runtime_one_shot(template, &key, instant, Overlap::Skip, plan);
    // Its own slot comes at the instant itself, inside the trigger's run.
    def.policy.jitter_max = Duration::ZERO;
    def.delete_after_run = rng.random_bool(0.5);
    let ops = vec![
        ScheduledOp { after: created, op: Op::Create(Box::new(def)) },
        ScheduledOp { after: trigger, op: Op::Trigger(key.clone()) },
        ScheduledOp { after: enable, op: Op::Enable(key.clone()) },
        ScheduledOp { after: disable, op: Op::Disable(key.clone()) },
        ScheduledOp { after: enable_again, op: Op::Enable(key.clone()) },
    ];
    let mut store_faults = vec![PlantedStoreFault::OwnSkip(key.clone())];
    if rng.random_bool(RESULT_UNWRITTEN_PROBABILITY) {
        // The revived run's slot is the instant itself (no jitter).
        store_faults.push(PlantedStoreFault::OwnResult(key, truncate_to_millis(instant)));
    }
    Planted { ops, store_faults }
}
