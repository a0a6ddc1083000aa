use proptest::prelude::*;

use super::*;
use crate::core::cron::CronSchedule;
use crate::core::policy::{CatchUp, RunPolicy};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

fn now(wall: &str, mono_secs: u64) -> Now {
    Now { wall: wall.parse().expect("test timestamp"), mono: Mono::from_duration(Duration::from_secs(mono_secs)) }
}

fn ts(text: &str) -> Timestamp {
    text.parse().expect("test timestamp")
}

fn every(interval: Duration) -> Schedule {
    Schedule::Every(interval)
}

fn cron(expression: &str, zone: &str) -> Schedule {
    Schedule::cron(CronSchedule::parse(expression, zone).expect("valid cron"))
}

fn policy(catch_up: CatchUp) -> RunPolicy {
    RunPolicy { catch_up, ..RunPolicy::default() }
}

fn first(at: Now, schedule: &Schedule) -> SlotTimer {
    SlotTimer::first(at, schedule, Duration::ZERO).expect("has a first slot")
}

#[test]
fn first_slot_is_one_interval_away() {
    let timer = first(now("2026-01-01T00:00:00Z", 0), &every(30 * MINUTE));
    assert_eq!(timer.next_slot, ts("2026-01-01T00:30:00Z"));
    assert!(!timer.is_due(now("2026-01-01T00:29:59Z", 1_799)));
    assert!(timer.is_due(now("2026-01-01T00:30:00Z", 1_800)));
}

#[test]
fn next_slot_follows_the_slot_not_the_finish() {
    let schedule = every(30 * MINUTE);
    let timer = first(now("2026-01-01T00:00:00Z", 0), &schedule);
    // The driver woke 7 s late: the slot keeps its label and the cadence does not drift.
    let fired = timer.fire(now("2026-01-01T00:30:07Z", 1_807), &schedule, &RunPolicy::default());
    assert_eq!(fired.run, vec![ts("2026-01-01T00:30:00Z")]);
    assert_eq!(fired.missed, 0);
    let next = fired.next.expect("every has no end");
    assert_eq!(next.next_slot, ts("2026-01-01T01:00:00Z"));
    assert_eq!(next.next_mono, Some(Mono::from_duration(Duration::from_secs(3_600))));
}

#[test]
fn downtime_runs_the_latest_missed_slot_once() {
    let schedule = every(30 * MINUTE);
    let at = now("2026-01-01T03:10:00Z", 0);
    let timer = SlotTimer::resume(at, &schedule, Duration::ZERO, ts("2026-01-01T01:00:00Z"));
    assert!(timer.is_due(at));
    let fired = timer.fire(at, &schedule, &RunPolicy::default());
    assert_eq!(fired.run, vec![ts("2026-01-01T03:00:00Z")]);
    assert_eq!(fired.missed, 4);
    let next = fired.next.expect("every has no end");
    assert_eq!(next.next_slot, ts("2026-01-01T03:30:00Z"));
    assert!(!next.is_due(now("2026-01-01T03:10:01Z", 1)));
}

#[test]
fn catch_up_skip_runs_nothing_late_but_runs_a_slot_barely_late() {
    let schedule = every(HOUR);
    let timer =
        SlotTimer::resume(now("2026-01-01T00:00:00Z", 0), &schedule, Duration::ZERO, ts("2026-01-01T01:00:00Z"));
    let fired = timer.fire(now("2026-01-01T05:30:00Z", 0), &schedule, &policy(CatchUp::Skip));
    assert!(fired.run.is_empty());
    assert_eq!(fired.missed, 5, "01:00 to 05:00 passed unrun");
    assert_eq!(fired.next.expect("next").next_slot, ts("2026-01-01T06:00:00Z"));
    let on_time = timer.fire(now("2026-01-01T01:00:30Z", 0), &schedule, &policy(CatchUp::Skip));
    assert_eq!(on_time.run, vec![ts("2026-01-01T01:00:00Z")], "30 s late is within the grace");
}

#[test]
fn catch_up_all_runs_each_missed_slot_in_the_window_oldest_first() {
    let schedule = every(HOUR);
    let timer =
        SlotTimer::resume(now("2026-01-01T00:00:00Z", 0), &schedule, Duration::ZERO, ts("2026-01-01T01:00:00Z"));
    let window =
        RunPolicy { catch_up: CatchUp::All, catch_up_window: Duration::from_secs(3 * 3_600), ..RunPolicy::default() };
    let fired = timer.fire(now("2026-01-01T05:30:00Z", 0), &schedule, &window);
    let expected: Vec<Timestamp> =
        ["03:00", "04:00", "05:00"].iter().map(|t| ts(&format!("2026-01-01T{t}:00Z"))).collect();
    assert_eq!(fired.run, expected, "02:00 is 3.5 h old: outside the window");
    assert_eq!(fired.missed, 2);
    // A week of downtime on a 1-minute schedule is capped, the latest included.
    let schedule = every(MINUTE);
    let timer =
        SlotTimer::resume(now("2026-01-01T00:00:00Z", 0), &schedule, Duration::ZERO, ts("2026-01-01T00:01:00Z"));
    let fired = timer.fire(now("2026-01-08T00:00:00Z", 0), &schedule, &policy(CatchUp::All));
    assert_eq!(fired.run.len(), CATCHUP_RUNS_MAX);
    assert_eq!(fired.run.last(), Some(&ts("2026-01-08T00:00:00Z")));
    assert_eq!(fired.missed, 7 * 24 * 60 - CATCHUP_RUNS_MAX as u64);
}

#[test]
fn catch_up_all_always_runs_the_latest_even_outside_the_window() {
    let schedule = cron("0 9 * * *", "UTC");
    let timer =
        SlotTimer::resume(now("2026-01-01T00:00:00Z", 0), &schedule, Duration::ZERO, ts("2026-01-01T09:00:00Z"));
    let narrow = RunPolicy { catch_up: CatchUp::All, catch_up_window: HOUR, ..RunPolicy::default() };
    let fired = timer.fire(now("2026-01-04T12:00:00Z", 0), &schedule, &narrow);
    assert_eq!(fired.run, vec![ts("2026-01-04T09:00:00Z")]);
    assert_eq!(fired.missed, 3);
}

#[test]
fn cron_waits_for_the_wall_clock_after_a_backward_jump() {
    let schedule = cron("0 9 * * *", "Europe/Berlin");
    let timer = first(now("2026-03-02T07:00:00Z", 0), &schedule);
    assert_eq!(timer.next_slot, ts("2026-03-02T08:00:00Z"));
    assert_eq!(timer.next_mono, None, "calendar time: no monotonic chain");
    // The wall clock steps back two hours; a day of elapsed time passes by the wall's 07:00.
    assert!(!timer.is_due(now("2026-03-02T07:00:00Z", 86_400)));
    assert!(timer.is_due(now("2026-03-02T08:00:00Z", 90_000)));
}

#[test]
fn cron_next_slot_crosses_the_spring_gap() {
    // 02:30 does not exist in Berlin on 2026-03-29: the classic rule runs it at 03:00.
    let schedule = cron("30 2 * * *", "Europe/Berlin");
    let timer =
        SlotTimer::resume(now("2026-03-28T00:00:00Z", 0), &schedule, Duration::ZERO, ts("2026-03-28T01:30:00Z"));
    let fired = timer.fire(now("2026-03-28T01:30:00Z", 0), &schedule, &RunPolicy::default());
    assert_eq!(fired.next.expect("daily").next_slot, ts("2026-03-29T01:00:00Z"));
}

#[test]
fn at_runs_once_even_when_already_past_then_ends() {
    let schedule = Schedule::At(ts("2026-01-01T12:00:00Z"));
    let future = first(now("2026-01-01T00:00:00Z", 0), &schedule);
    assert_eq!(future.next_slot, ts("2026-01-01T12:00:00Z"));
    let past = first(now("2026-01-02T00:00:00Z", 0), &schedule);
    assert!(past.is_due(now("2026-01-02T00:00:00Z", 0)), "a past `at` is due at once");
    let fired = past.fire(now("2026-01-02T00:00:00Z", 0), &schedule, &RunPolicy::default());
    assert_eq!(fired.run, vec![ts("2026-01-01T12:00:00Z")]);
    assert_eq!(fired.next, None, "no second run");
    assert_eq!(
        SlotTimer::rearm(now("2026-01-02T00:00:00Z", 0), &schedule, Duration::ZERO, Some(ts("2026-01-01T12:00:01Z"))),
        None
    );
}

#[test]
fn a_cron_with_no_future_slot_has_no_timer() {
    let schedule = cron("0 0 30 2 *", "UTC");
    assert_eq!(SlotTimer::first(now("2026-01-01T00:00:00Z", 0), &schedule, Duration::ZERO), None);
}

#[test]
fn jitter_delays_the_due_time_but_not_the_label() {
    let schedule = cron("0 * * * *", "UTC");
    let timer =
        SlotTimer::first(now("2026-01-01T00:10:00Z", 0), &schedule, 90 * Duration::from_secs(1)).expect("hourly");
    assert_eq!(timer.next_slot, ts("2026-01-01T01:00:00Z"));
    assert!(!timer.is_due(now("2026-01-01T01:01:29Z", 0)));
    assert!(timer.is_due(now("2026-01-01T01:01:30Z", 0)));
    let fired = timer.fire(now("2026-01-01T01:01:30Z", 0), &schedule, &policy(CatchUp::Skip));
    assert_eq!(fired.run, vec![ts("2026-01-01T01:00:00Z")], "on time once the jitter is counted");
}

#[test]
fn restart_before_the_slot_neither_runs_early_nor_late() {
    // Field notes, failure 1: a restart must not add a run.
    let schedule = every(24 * HOUR);
    let timer =
        SlotTimer::resume(now("2026-01-01T22:30:00Z", 5), &schedule, Duration::ZERO, ts("2026-01-02T22:00:00Z"));
    assert!(!timer.is_due(now("2026-01-02T21:59:59Z", 5 + 84_599)));
    assert!(timer.is_due(now("2026-01-02T22:00:00Z", 5 + 84_600)));
}

#[test]
fn backward_wall_jump_does_not_delay_an_interval_run() {
    let schedule = every(30 * MINUTE);
    let timer = first(now("2026-01-01T00:00:00Z", 0), &schedule);
    // The wall clock steps back two hours after ten minutes.
    assert!(!timer.is_due(now("2025-12-31T22:10:00Z", 600)));
    let at_interval = now("2025-12-31T22:30:00Z", 1_800);
    assert!(timer.is_due(at_interval));
    let fired = timer.fire(at_interval, &schedule, &RunPolicy::default());
    assert_eq!(fired.run, vec![ts("2026-01-01T00:30:00Z")], "the slot label keeps moving forward");
    assert_eq!(fired.next.expect("next").next_mono, Some(Mono::from_duration(Duration::from_secs(3_600))));
}

#[test]
fn rearming_never_goes_below_the_previous_next_slot() {
    // Labels ran two hours ahead of the wall clock after a backward jump.
    let schedule = every(30 * MINUTE);
    let floor = ts("2026-01-01T02:00:00Z");
    let at = now("2026-01-01T00:00:00Z", 500);
    let timer = SlotTimer::rearm(at, &schedule, Duration::ZERO, Some(floor)).expect("every");
    assert_eq!(timer.next_slot, floor);
    assert_eq!(timer.next_mono, Some(Mono::from_duration(Duration::from_secs(500 + 1_800))), "one interval away");
    let fresh = SlotTimer::rearm(at, &schedule, Duration::ZERO, Some(ts("2025-12-31T00:00:00Z"))).expect("every");
    assert_eq!(fresh.next_slot, ts("2026-01-01T00:30:00Z"), "an old floor changes nothing");
    // A cron's floor lands on its next occurrence, never between occurrences.
    let hourly = cron("0 * * * *", "UTC");
    let timer = SlotTimer::rearm(at, &hourly, Duration::ZERO, Some(ts("2026-01-01T02:10:00Z"))).expect("hourly");
    assert_eq!(timer.next_slot, ts("2026-01-01T03:00:00Z"));
}

#[test]
fn lifting_moves_only_forward() {
    let schedule = every(30 * MINUTE);
    let timer = first(now("2026-01-01T00:00:00Z", 0), &schedule);
    let lifted = timer.lifted_above(ts("2026-01-01T05:00:00Z"), &schedule).expect("every");
    assert_eq!(lifted.next_slot, ts("2026-01-01T05:30:00Z"));
    assert_eq!(lifted.next_mono, timer.next_mono);
    assert_eq!(timer.lifted_above(ts("2025-01-01T00:00:00Z"), &schedule), Some(timer));
}

#[test]
fn resume_with_a_slot_far_ahead_waits_at_most_one_interval() {
    let timer = SlotTimer::resume(
        now("2026-01-01T00:00:00Z", 100),
        &every(30 * MINUTE),
        Duration::ZERO,
        ts("2026-01-01T05:00:00Z"),
    );
    assert_eq!(timer.next_mono, Some(Mono::from_duration(Duration::from_secs(100 + 1_800))));
}

fn schedule_strategy() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        (1u64..100_000).prop_map(|secs| Schedule::Every(Duration::from_secs(secs))),
        prop::sample::select(vec!["*/7 * * * *", "0 9 * * 1-5", "30 2 * * *", "0 */3 * * *", "15,45 * * * * *"])
            .prop_flat_map(|expression| {
                prop::sample::select(vec!["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
                    .prop_map(move |zone| cron(expression, zone))
            }),
    ]
}

fn catch_up_strategy() -> impl Strategy<Value = CatchUp> {
    prop::sample::select(vec![CatchUp::Skip, CatchUp::Once, CatchUp::All])
}

proptest! {
    /// Whatever the clocks do, slots strictly increase, each is a slot of the schedule,
    /// and a fire never leaves the timer due (no spin).
    #[test]
    fn slots_strictly_increase_on_the_schedule(
        schedule in schedule_strategy(),
        catch_up in catch_up_strategy(),
        jitter_secs in 0u64..600,
        steps in proptest::collection::vec((-200_000i64..200_000, 0u64..200_000), 1..30),
    ) {
        let start = ts("2026-03-01T00:00:00Z");
        let jitter = Duration::from_secs(jitter_secs);
        let mut timer = SlotTimer::first(Now { wall: start, mono: Mono::ZERO }, &schedule, jitter);
        let first_slot = timer.map(|timer| timer.next_slot);
        let mut wall = start;
        let mut mono = Mono::ZERO;
        let mut last_slot: Option<Timestamp> = None;
        let run_policy = policy(catch_up);
        for (wall_step_secs, mono_step_secs) in steps {
            mono = mono + Duration::from_secs(mono_step_secs);
            wall = wall.checked_add(SignedDuration::from_secs(wall_step_secs + mono_step_secs as i64)).unwrap_or(wall);
            let now = Now { wall, mono };
            while let Some(current) = timer.filter(|timer| timer.is_due(now)) {
                let fired = current.fire(now, &schedule, &run_policy);
                prop_assert!(fired.run.len() <= CATCHUP_RUNS_MAX);
                for slot in &fired.run {
                    if let Some(last) = last_slot {
                        prop_assert!(*slot > last);
                    }
                    match &schedule {
                        Schedule::Every(interval) => {
                            let offset_ms = slot.duration_since(first_slot.expect("every has a first slot")).as_millis();
                            prop_assert_eq!(offset_ms % interval.as_millis() as i128, 0);
                        }
                        other => prop_assert_eq!(other.at_or_after(*slot), Some(*slot), "a slot of the schedule"),
                    }
                    last_slot = Some(*slot);
                }
                if let Some(next) = fired.next {
                    prop_assert!(!next.is_due(now), "a fire never leaves the timer due: no spin");
                    prop_assert!(next.next_slot > current.next_slot);
                }
                timer = fired.next;
            }
        }
    }
}

#[test]
fn the_first_free_millisecond_steps_past_each_taken_one() {
    let slot = ts("2026-01-05T12:00:00Z");
    let taken = [slot, ts("2026-01-05T12:00:00.001Z"), ts("2026-01-05T12:00:00.003Z")];
    assert_eq!(first_free_millisecond(slot, |at| taken.contains(&at)), ts("2026-01-05T12:00:00.002Z"));
    assert_eq!(
        first_free_millisecond(ts("2026-01-05T12:00:01Z"), |at| taken.contains(&at)),
        ts("2026-01-05T12:00:01Z")
    );
}
