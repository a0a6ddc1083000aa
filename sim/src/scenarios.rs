//! Rare paths made common: sequences that random ops and faults would line up once in
//! thousands of seeds, planted on purpose in a share of seeds. Drawn from a stream of their
//! own, so the rest of a seed's workload is the one it had before these existed.
//!
//! - pause, rewind, kill: an operator pause ends while the engine runs, the wall clock steps
//!   back before its end, and the process is killed, so a pause the engine failed to clear
//!   would come back at the restart;
//! - disable, rewind, enable: a heartbeat re-enabled after a backward jump must not re-arm
//!   below slots it already ran;
//! - delete and re-create on the same grid: a run-time cron deleted and created again with
//!   the same id and expression offers its slots afresh;
//! - slow repeats: an `allow_all` heartbeat whose runs outlast its interval and say the same
//!   thing every time, so concurrent runs race to deliver a duplicate;
//! - `dedup` off for some heartbeats, so repeated replies must all be delivered;
//! - grid finish: an `allow_all` heartbeat every minute whose runs all end on the same
//!   3-minute grid, every other one failing, so one group commit carries several results of
//!   one heartbeat, in an order that decides its breaker (issue 28);
//! - queued triggers: a slow-repeat heartbeat that keeps an engine of few places full is
//!   triggered by an operator in bursts, so its triggers and grid slots wait for places
//!   together, and is sometimes disabled and enabled while they wait (issue 28);
//! - grid chorus: beside the grid-finishing heartbeat, another ends on the same grid and
//!   always repeats one alert, so one duplicate-check read answers both ways (ADR 0027);
//! - twin claims: in an engine of a few places, an `allow_all` heartbeat whose runs end on
//!   the grid is triggered more times than there are places, so when its runs end together
//!   one pass claims several of its waiting slots, each needing the definition (ADR 0037);
//! - one-shot takeover: a config reload makes a recurring job a one-shot whose instant
//!   comes before the slot the old definition's timer had armed, so a replace that kept the
//!   old timer's slot as its floor would find it out of slots (seed 1927871251589).
//! - held one-shot enable: a reload makes a recurring job a one-shot due seconds after an
//!   operator's trigger began a slow run of it; under `buffer_one` its slot is held behind
//!   that run and an operator enables the job (enabled already) while it waits, so an
//!   enable that re-armed the held slot would offer it twice (seed 1927871444419); under
//!   `allow_all` the one-shot runs beside it and succeeds, and the slow run fails after,
//!   which must not make the one-shot run again (ADR 0046).
//!
//! The one-shot trigger scenario, an operator's trigger during a one-shot's run, is in
//! `one_shot_triggers.rs`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::cron::CronSchedule;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{HeartbeatId, HeartbeatKey};
use systole::core::policy::{CatchUp, Overlap};
use systole::core::schedule::Schedule;

use crate::options::ClockJump;
use crate::ports::llm::FLAKY_MARKER;
use crate::workload::{Op, ScheduledOp, CRON_EXPRESSIONS, ZONES};

const PAUSE_REWIND_KILL_PROBABILITY: f64 = 0.25;
const DISABLE_REWIND_ENABLE_PROBABILITY: f64 = 0.25;
const DELETE_RECREATE_PROBABILITY: f64 = 0.25;
const SLOW_REPEATS_PROBABILITY: f64 = 0.2;
/// The share of heartbeats that deliver every reply, repeated or not.
const DEDUP_OFF_PROBABILITY: f64 = 0.2;
/// How far back the wall clock steps after a disable, at most.
const REWIND_SECS_MAX: i64 = 2 * 3_600;
/// The longest pause the scenario asks for.
const PAUSE_MINUTES_MAX: u32 = 20;

/// A slow-repeat heartbeat's interval, and how long each of its runs takes: longer.
pub const SLOW_REPEAT_INTERVAL_SECS: u64 = 60;
pub const SLOW_REPEAT_RUN_SECS: u64 = 90;
/// Ends the prompt of a heartbeat whose every LLM call takes `SLOW_REPEAT_RUN_SECS` and
/// answers the same alert.
pub const SLOW_REPEAT_MARKER: &str = "[slow, repeats]";
pub const SLOW_REPEAT_REPLY: &str = "The backup job failed again";
/// End the prompt of a heartbeat whose every LLM call takes `SLOW_REPEAT_RUN_SECS` and then,
/// while faults are on, is refused (HTTP 401, which trips the breaker at once) or fails
/// (HTTP 500); healed, it answers as a slow repeat.
pub const SLOW_REFUSED_MARKER: &str = "[slow, refused]";
pub const SLOW_FAILING_MARKER: &str = "[slow, fails]";

const GRID_FINISH_PROBABILITY: f64 = 0.35;
/// A grid-finishing heartbeat's interval, and the grid its runs end on.
const GRID_FINISH_INTERVAL_SECS: u64 = 60;
pub const GRID_FINISH_SECS: u64 = 180;
/// Ends the prompt of a heartbeat whose first LLM call of each run answers at the next
/// multiple of `GRID_FINISH_SECS` since the simulation began.
pub const GRID_FINISH_MARKER: &str = "[finishes on the grid]";

/// A grid chorus: beside the grid-finishing heartbeat, another ends its runs on the same
/// grid and always answers one alert, so at a grid instant one duplicate-check read answers
/// "delivered" for its repeat and "not delivered" for the other's fresh alert (ADR 0027).
const GRID_CHORUS_PROBABILITY: f64 = 0.6;
/// Only in engines of this many places or more: its runs hold a place almost all the time,
/// so in an engine of few places the others' backlog (a backfill's 50 slots) could not
/// drain within the liveness phase, as seed 1927870094469 showed under a first version.
const GRID_CHORUS_PLACES_MIN: usize = 4;
/// Ends the prompt of a heartbeat whose first LLM call of each run answers
/// `GRID_CHORUS_REPLY` at the next multiple of `GRID_FINISH_SECS`.
pub const GRID_CHORUS_MARKER: &str = "[finishes on the grid, repeats]";
pub const GRID_CHORUS_REPLY: &str = "The nightly export is late again";

/// Queued triggers: in an engine of few places that a slow-repeat heartbeat keeps full, an
/// operator triggers that heartbeat in bursts, so its triggers wait to be taken in and then
/// in the admission queue beside its grid slot, decided a pass apart; after some of the
/// bursts the heartbeat is disabled and enabled while triggers wait (issue 28).
const QUEUED_TRIGGERS_PLACES_MAX: usize = 3;
const QUEUED_TRIGGER_BURSTS_MIN: usize = 1;
const QUEUED_TRIGGER_BURSTS_MAX: usize = 4;
const QUEUED_TRIGGERS_PER_BURST: usize = 3;
/// The share of bursts followed by a disable and an enable: a disable clears the queue the
/// other half of the scenario needs.
const QUEUED_TRIGGERS_DISABLED_PROBABILITY: f64 = 0.3;
/// The seconds between two triggers of a burst, at most, and a burst's whole span.
const QUEUED_TRIGGER_GAP_SECS_MAX: u64 = 5;
const QUEUED_TRIGGER_SPAN_SECS_MAX: u64 = QUEUED_TRIGGER_GAP_SECS_MAX * QUEUED_TRIGGERS_PER_BURST as u64 + 1;

/// Twin claims: the triggers of a burst beyond the engine's places wait for them; the runs
/// that took the places end together at a grid instant, and one pass claims the waiting
/// ones (two runs of one heartbeat in one pass: stop 62 found the second failing as "no
/// longer stored"). Its own schedule is slow, so it adds load only through its bursts.
const TWIN_CLAIMS_PROBABILITY: f64 = 0.8;
const TWIN_CLAIMS_PLACES_MIN: usize = 2;
const TWIN_CLAIMS_INTERVAL_SECS: u64 = 3_600;
const TWIN_CLAIM_BURSTS_MIN: usize = 2;
const TWIN_CLAIM_BURSTS_MAX: usize = 4;
/// Triggers of a burst beyond the places, and the seconds between two triggers.
const TWIN_CLAIMS_WAITING: usize = 2;
const TWIN_CLAIM_GAP_SECS: u64 = 1;

/// Makes `def` a slow-repeat heartbeat: `allow_all`, every minute, each run longer.
fn make_slow_repeat(def: &mut HeartbeatDef) {
    def.schedule = Schedule::Every(Duration::from_secs(SLOW_REPEAT_INTERVAL_SECS));
    def.policy.overlap = Overlap::AllowAll;
    def.active_hours = None;
    def.timeout = Duration::from_secs(SLOW_REPEAT_RUN_SECS * 2);
    def.prompt = format!("{}\n{SLOW_REPEAT_MARKER}", def.prompt).into();
}

/// What the scenarios add to a seed.
#[derive(Debug, Default)]
pub struct Planted {
    pub ops: Vec<ScheduledOp>,
    pub clock_jumps: Vec<ClockJump>,
}

/// Plants the scenarios in a seed whose config is `heartbeats`, within `safety`.
pub fn plant(
    rng: &mut ChaCha8Rng,
    heartbeats: &mut [HeartbeatDef],
    safety: Duration,
    runs_in_flight_max: usize,
) -> Planted {
    let mut planted = Planted::default();
    let secs = safety.as_secs();
    let timed: Vec<usize> = (0..heartbeats.len()).filter(|&i| heartbeats[i].kind != JobKind::Agent).collect();
    let at =
        |rng: &mut ChaCha8Rng, room: u64| Duration::from_secs(rng.random_range(60..secs.saturating_sub(room).max(61)));
    if rng.random_bool(PAUSE_REWIND_KILL_PROBABILITY) && !timed.is_empty() {
        let agent = heartbeats[timed[rng.random_range(0..timed.len())]].key.agent.clone();
        let minutes = rng.random_range(1..=PAUSE_MINUTES_MAX);
        let length = u64::from(minutes) * 60;
        let start = at(rng, length + 600);
        // Past the end by more than a driver sleep, so a live engine cleared it; then back
        // to before the end, and the process dies.
        let ended = start + Duration::from_secs(length + 90);
        let back = rng.random_range(150..=length as i64 + 150);
        planted.ops.push(ScheduledOp { after: start, op: Op::Pause(agent, minutes) });
        planted.clock_jumps.push(ClockJump { after: ended, by: SignedDuration::from_secs(-back) });
        planted.ops.push(ScheduledOp { after: ended + Duration::from_secs(30), op: Op::Kill });
    }
    if rng.random_bool(DISABLE_REWIND_ENABLE_PROBABILITY) && !timed.is_empty() {
        let key = heartbeats[timed[rng.random_range(0..timed.len())]].key.clone();
        let start = at(rng, 600);
        let back = rng.random_range(60..=REWIND_SECS_MAX);
        planted.ops.push(ScheduledOp { after: start, op: Op::Disable(key.clone()) });
        planted
            .clock_jumps
            .push(ClockJump { after: start + Duration::from_secs(30), by: SignedDuration::from_secs(-back) });
        planted.ops.push(ScheduledOp { after: start + Duration::from_secs(60), op: Op::Enable(key) });
    }
    if rng.random_bool(DELETE_RECREATE_PROBABILITY) && !timed.is_empty() {
        let mut def = heartbeats[timed[rng.random_range(0..timed.len())]].clone();
        def.key =
            HeartbeatKey { agent: def.key.agent.clone(), heartbeat: HeartbeatId::new("regrown").expect("a valid id") };
        def.prompt = crate::workload::prompt_for(&def.key).into();
        def.origin = Origin::Runtime;
        def.kind = JobKind::Cron;
        let expression = CRON_EXPRESSIONS[rng.random_range(0..CRON_EXPRESSIONS.len())];
        let zone = ZONES[rng.random_range(0..ZONES.len())];
        if let Ok(cron) = CronSchedule::parse(expression, zone) {
            def.schedule = Schedule::cron(cron);
            let created = at(rng, 3_600);
            let deleted = created + Duration::from_secs(rng.random_range(60..=1_800));
            let again = deleted + Duration::from_secs(rng.random_range(1..=900));
            planted.ops.push(ScheduledOp { after: created, op: Op::Create(Box::new(def.clone())) });
            planted.ops.push(ScheduledOp { after: deleted, op: Op::Delete(def.key.clone()) });
            planted.ops.push(ScheduledOp { after: again, op: Op::Create(Box::new(def)) });
        }
    }
    // A main-mode job's prompt becomes a system event, not an LLM call.
    let calling: Vec<usize> = timed.iter().copied().filter(|&i| heartbeats[i].kind != JobKind::CronMain).collect();
    let mut slow_repeats = None;
    if rng.random_bool(SLOW_REPEATS_PROBABILITY) && !calling.is_empty() {
        let def = &mut heartbeats[calling[rng.random_range(0..calling.len())]];
        slow_repeats = Some(def.key.clone());
        make_slow_repeat(def);
    }
    for def in heartbeats.iter_mut() {
        if rng.random_bool(DEDUP_OFF_PROBABILITY) {
            def.dedup = false;
        }
    }
    let plain: Vec<usize> = calling.iter().copied().filter(|&i| !heartbeats[i].prompt.ends_with(']')).collect();
    // In engines of any size: in one of few places its runs hold every place for minutes,
    // which is how seed 1927000002369 showed a slot that waited for a place running beside
    // its next timer after a backward jump.
    let mut grid_finish = false;
    if rng.random_bool(GRID_FINISH_PROBABILITY) && !plain.is_empty() {
        grid_finish = true;
        let def = &mut heartbeats[plain[rng.random_range(0..plain.len())]];
        make_grid_runner(def, GRID_FINISH_INTERVAL_SECS, GRID_FINISH_MARKER);
    }
    // Drawn last, so the scenarios above are the ones a seed had before this one existed.
    // An engine of one place decides one queued slot a pass, the case the scenario is
    // for: there it plants a slow-repeat heartbeat of its own when the seed has none.
    if slow_repeats.is_none() && runs_in_flight_max == 1 && !plain.is_empty() && rng.random_bool(0.5) {
        let def = &mut heartbeats[plain[rng.random_range(0..plain.len())]];
        make_slow_repeat(def);
        slow_repeats = Some(def.key.clone());
    }
    if let Some(key) = slow_repeats.filter(|_| runs_in_flight_max <= QUEUED_TRIGGERS_PLACES_MAX) {
        // `once`: a grid slot that waited is then caught up to the latest one, which the
        // checker can tell from a slot run as it was.
        for def in heartbeats.iter_mut().filter(|def| def.key == key) {
            def.policy.catch_up = CatchUp::Once;
        }
        for _ in 0..rng.random_range(QUEUED_TRIGGER_BURSTS_MIN..=QUEUED_TRIGGER_BURSTS_MAX) {
            // A burst: the first may take a place that frees, the others wait to be taken
            // in, then in the admission queue ahead of the grid slot that came due meanwhile.
            let mut after = at(rng, QUEUED_TRIGGER_SPAN_SECS_MAX);
            for _ in 0..QUEUED_TRIGGERS_PER_BURST {
                planted.ops.push(ScheduledOp { after, op: Op::Trigger(key.clone()) });
                after += Duration::from_secs(rng.random_range(1..=QUEUED_TRIGGER_GAP_SECS_MAX));
            }
            // After some a disable and an enable follow while triggers wait: those go with
            // the backlog, never to be decided (seed 1927760016712).
            if rng.random_bool(QUEUED_TRIGGERS_DISABLED_PROBABILITY) {
                planted.ops.push(ScheduledOp { after, op: Op::Disable(key.clone()) });
                planted.ops.push(ScheduledOp { after: after + Duration::from_secs(1), op: Op::Enable(key.clone()) });
            }
        }
    }
    // Drawn after all the above, which a seed keeps as it had them.
    let plain: Vec<usize> = calling.iter().copied().filter(|&i| !heartbeats[i].prompt.ends_with(']')).collect();
    if grid_finish
        && runs_in_flight_max >= GRID_CHORUS_PLACES_MIN
        && !plain.is_empty()
        && rng.random_bool(GRID_CHORUS_PROBABILITY)
    {
        let def = &mut heartbeats[plain[rng.random_range(0..plain.len())]];
        // One run a grid interval is enough to meet the other's runs at each grid instant.
        make_grid_runner(def, GRID_FINISH_SECS, GRID_CHORUS_MARKER);
        def.dedup = true;
    }
    // Drawn after all the above, which a seed keeps as it had them.
    let plain: Vec<usize> = calling.iter().copied().filter(|&i| !heartbeats[i].prompt.ends_with(']')).collect();
    if (TWIN_CLAIMS_PLACES_MIN..=QUEUED_TRIGGERS_PLACES_MAX).contains(&runs_in_flight_max)
        && !plain.is_empty()
        && rng.random_bool(TWIN_CLAIMS_PROBABILITY)
    {
        let def = &mut heartbeats[plain[rng.random_range(0..plain.len())]];
        make_grid_runner(def, TWIN_CLAIMS_INTERVAL_SECS, GRID_FINISH_MARKER);
        let triggers = runs_in_flight_max + TWIN_CLAIMS_WAITING;
        let span = TWIN_CLAIM_GAP_SECS * triggers as u64;
        for _ in 0..rng.random_range(TWIN_CLAIM_BURSTS_MIN..=TWIN_CLAIM_BURSTS_MAX) {
            let start = at(rng, span + 1);
            for index in 0..triggers {
                let after = start + Duration::from_secs(TWIN_CLAIM_GAP_SECS * index as u64);
                planted.ops.push(ScheduledOp { after, op: Op::Trigger(def.key.clone()) });
            }
        }
    }
    planted
}

/// One recurring config job that calls the model and carries no scenario's marker, drawn
/// from `config` (the one-shot scenarios make it a one-shot); `None` when there is none.
fn recurring_config_job(rng: &mut ChaCha8Rng, config: &[HeartbeatDef]) -> Option<usize> {
    let recurring: Vec<usize> = (0..config.len())
        .filter(|&i| {
            let def = &config[i];
            def.origin == Origin::Config
                && matches!(def.kind, JobKind::Heartbeat | JobKind::Cron)
                && !matches!(def.schedule, Schedule::At(_))
                && !def.prompt.ends_with(']')
        })
        .collect();
    if recurring.is_empty() {
        return None;
    }
    Some(recurring[rng.random_range(0..recurring.len())])
}

const ONE_SHOT_TAKEOVER_PROBABILITY: f64 = 0.5;
/// How long after the reload the one-shot's instant comes, at most: short beside the
/// recurring job's interval, so its armed slot mostly lies past the instant.
const ONE_SHOT_TAKEOVER_LEAD_SECS_MAX: u64 = 30;

/// The one-shot takeover, in a share of seeds: a reload of `config` (the seed's config as it
/// stands) in which one recurring config job becomes a one-shot due shortly after the
/// reload by the wall clock (`wall_at` tells the wall time at an elapsed time).
pub fn one_shot_takeover(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    safety: Duration,
    wall_at: impl Fn(Duration) -> Timestamp,
) -> Option<ScheduledOp> {
    if !rng.random_bool(ONE_SHOT_TAKEOVER_PROBABILITY) {
        return None;
    }
    let chosen = recurring_config_job(rng, config)?;
    let after = Duration::from_secs(rng.random_range(60..safety.as_secs().max(61)));
    let lead = SignedDuration::from_secs(rng.random_range(1..=ONE_SHOT_TAKEOVER_LEAD_SECS_MAX) as i64);
    let instant = wall_at(after).checked_add(lead).ok()?;
    let mut reloaded = config.to_vec();
    let def = &mut reloaded[chosen];
    def.schedule = Schedule::At(instant);
    def.kind = JobKind::Cron;
    def.active_hours = None;
    def.delete_after_run = rng.random_bool(0.5);
    Some(ScheduledOp { after, op: Op::Reload(reloaded) })
}

/// Makes `def` an `allow_all` heartbeat every `interval_secs` whose model answers on the
/// grid of `GRID_FINISH_SECS` (the simulated LLM reads `marker` at its prompt's end).
fn make_grid_runner(def: &mut HeartbeatDef, interval_secs: u64, marker: &str) {
    def.schedule = Schedule::Every(Duration::from_secs(interval_secs));
    def.policy.overlap = Overlap::AllowAll;
    // Not `all`: behind a backlog, caught-up slots run one at a time (ADR 0011), and runs
    // three intervals long would never let it drain.
    def.policy.catch_up = CatchUp::Once;
    def.active_hours = None;
    def.timeout = Duration::from_secs(GRID_FINISH_SECS * 2);
    def.prompt = format!("{}\n{marker}", def.prompt).into();
}

const HELD_ONE_SHOT_PROBABILITY: f64 = 0.4;
/// The slow version's interval: longer than its runs, so that under `buffer_one` no slot is
/// skipped as an overlap once healed (where the liveness model wants none), should the
/// takeover's reload fail and leave it so.
const HELD_ONE_SHOT_INTERVAL_SECS: u64 = SLOW_REPEAT_RUN_SECS + 30;
/// How long the slow version is stored before the takeover: less than its interval, so no
/// slot of its own is decided first (a replace arms it no lower than the old definition's
/// armed slot, which may lie ahead of the wall by an interval of the old definition: a slot
/// decided there would decide the one-shot's instant too). The trigger's run is the one the
/// one-shot waits behind.
const HELD_ONE_SHOT_BUSY_SECS_MIN: u64 = 10;
const HELD_ONE_SHOT_BUSY_SECS_MAX: u64 = 60;
/// The share of seeds of the scenario in which the one-shot runs beside the trigger's slow
/// run instead of waiting behind it, and that run fails after the one-shot's succeeded.
const BESIDE_PROBABILITY: f64 = 0.4;
/// The share of held one-shots whose own run fails once (then a restart and an enable).
const HELD_ONE_SHOT_FLAKY_PROBABILITY: f64 = 0.5;
/// Slack after the one-shot's retry, and between the restart and the enable.
const HELD_ONE_SHOT_SETTLE: Duration = Duration::from_secs(60);
/// How many times the scenario draws its times for a moment the wall clock has caught up
/// with its backward jumps, before it gives up on the seed.
const HELD_ONE_SHOT_DRAWS_MAX: usize = 16;
/// How long after the takeover (by the wall clock) the one-shot's instant comes, at most:
/// soon, so its slot fires while the run going then still goes; and after the trigger's
/// slot, or the run log would have decided the instant already (ADR 0018).
const HELD_ONE_SHOT_LEAD_SECS_MAX: u64 = 20;
/// An operator's trigger this long before the takeover starts a slow run (or is held
/// behind one going), so that a run is going when the one-shot's slot fires.
const HELD_ONE_SHOT_TRIGGER_LEAD_SECS: u64 = 2;
/// When the operator's enable comes after the one-shot's slot fired, at most: well within
/// the slow run, so the slot still waits behind it.
const HELD_ONE_SHOT_ENABLE_SECS_MAX: u64 = 30;

/// The held one-shot enable, in a share of seeds: a reload of `config` makes one recurring
/// config job a `buffer_one` slow repeat; an operator's trigger starts a run of it just
/// before a second reload makes it a one-shot due soon after, still slow, so its slot is
/// held behind that run; then an operator enables it, enabled already, while it waits.
pub fn held_one_shot_enable(
    rng: &mut ChaCha8Rng,
    config: &[HeartbeatDef],
    safety: Duration,
    wall_at: impl Fn(Duration) -> Timestamp,
    jump_times: &[Duration],
    retry_after: Duration,
) -> Vec<ScheduledOp> {
    if !rng.random_bool(HELD_ONE_SHOT_PROBABILITY) {
        return Vec::new();
    }
    let Some(chosen) = recurring_config_job(rng, config) else { return Vec::new() };
    let flaky_room = SLOW_REPEAT_RUN_SECS * 2 + retry_after.as_secs() + HELD_ONE_SHOT_SETTLE.as_secs() * 2;
    let room = HELD_ONE_SHOT_BUSY_SECS_MAX + HELD_ONE_SHOT_LEAD_SECS_MAX + HELD_ONE_SHOT_ENABLE_SECS_MAX + flaky_room;
    // The wall clock at its highest yet by the trigger: after a backward jump, slots decided
    // before it lie ahead of the wall, and an instant below them is decided at once (ADR
    // 0018), so the one-shot would never wait behind the run.
    let trigger_lead = Duration::from_secs(HELD_ONE_SHOT_TRIGGER_LEAD_SECS);
    let caught_up = |takeover: Duration| {
        let trigger = takeover.saturating_sub(trigger_lead);
        let wall = wall_at(trigger);
        let before_jumps = jump_times.iter().filter(|after| **after <= trigger);
        before_jumps.map(|after| wall_at(after.saturating_sub(Duration::from_millis(1)))).all(|high| high <= wall)
    };
    let mut drawn = None;
    for _ in 0..HELD_ONE_SHOT_DRAWS_MAX {
        let busy_from = Duration::from_secs(rng.random_range(60..safety.as_secs().saturating_sub(room).max(61)));
        let busy_for = rng.random_range(HELD_ONE_SHOT_BUSY_SECS_MIN..=HELD_ONE_SHOT_BUSY_SECS_MAX);
        let takeover = busy_from + Duration::from_secs(busy_for);
        if caught_up(takeover) {
            drawn = Some((busy_from, takeover));
            break;
        }
    }
    let Some((busy_from, takeover)) = drawn else { return Vec::new() };
    let lead = Duration::from_secs(rng.random_range(1..=HELD_ONE_SHOT_LEAD_SECS_MAX));
    let Ok(instant) = wall_at(takeover).checked_add(lead) else { return Vec::new() };
    let mut busy = config.to_vec();
    make_slow_repeat(&mut busy[chosen]);
    busy[chosen].schedule = Schedule::Every(Duration::from_secs(HELD_ONE_SHOT_INTERVAL_SECS));
    busy[chosen].policy.overlap = Overlap::BufferOne;
    let mut one_shot = busy.clone();
    let def = &mut one_shot[chosen];
    def.schedule = Schedule::At(instant);
    def.kind = JobKind::Cron;
    def.delete_after_run = rng.random_bool(0.5);
    // In some, the one-shot's own run fails once and its retry succeeds: its stored slot
    // then lies past its instant, which a start-up takes for a retry still to come.
    let flaky = rng.random_bool(HELD_ONE_SHOT_FLAKY_PROBABILITY);
    if flaky {
        def.prompt = format!("{}\n{FLAKY_MARKER}1]", config[chosen].prompt).into();
    }
    let key = def.key.clone();
    let enable = takeover + lead + Duration::from_secs(rng.random_range(1..=HELD_ONE_SHOT_ENABLE_SECS_MAX));
    let mut ops = vec![
        ScheduledOp { after: busy_from, op: Op::Reload(busy) },
        ScheduledOp { after: takeover.saturating_sub(trigger_lead), op: Op::Trigger(key.clone()) },
        ScheduledOp { after: takeover, op: Op::Reload(one_shot) },
        ScheduledOp { after: enable, op: Op::Enable(key.clone()) },
    ];
    if flaky {
        // Once the held run, the one-shot's own and its retry are over: a restart forgets
        // how its last run ended, and an operator enables it, retired, again.
        let done = Duration::from_secs(SLOW_REPEAT_RUN_SECS * 2) + retry_after + HELD_ONE_SHOT_SETTLE;
        ops.push(ScheduledOp { after: enable + done, op: Op::Kill });
        ops.push(ScheduledOp { after: enable + done + HELD_ONE_SHOT_SETTLE, op: Op::Enable(key) });
    }
    // In others the trigger's run goes beside the one-shot's (`allow_all`) and fails after
    // it succeeded, with a refusal (tripping the breaker) or an error: it says nothing of
    // the one-shot, which must not retry (seeds 1927871484937, 1927871493901).
    if rng.random_bool(BESIDE_PROBABILITY) {
        let marker = if rng.random_bool(0.5) { SLOW_REFUSED_MARKER } else { SLOW_FAILING_MARKER };
        ops.truncate(3);
        for op in &mut ops {
            let Op::Reload(defs) = &mut op.op else { continue };
            let def = &mut defs[chosen];
            def.policy.overlap = Overlap::AllowAll;
            // The slow version fails; the one-shot answers at once.
            def.prompt = match def.schedule {
                Schedule::At(_) => config[chosen].prompt.clone(),
                _ => format!("{}\n{marker}", config[chosen].prompt).into(),
            };
        }
    }
    ops
}
