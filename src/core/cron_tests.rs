//! Every daylight-saving rule of the field notes, with explicit times, in zones of both
//! hemispheres.

use proptest::prelude::*;

use super::*;

pub(super) fn ts(text: &str) -> Timestamp {
    text.parse().expect("test timestamp")
}

pub(super) fn next_n(expression: &str, zone: &str, from: &str, count: usize) -> Vec<String> {
    let schedule = CronSchedule::parse(expression, zone).expect("valid");
    let mut at = ts(from);
    let mut out = Vec::new();
    for _ in 0..count {
        at = schedule.next_after(at).expect("an occurrence");
        out.push(at.to_string());
    }
    out
}

#[test]
fn spring_gap_daily_runs_once_after_the_gap() {
    // 02:30 does not exist in New York on 2025-03-09: it runs at 03:00 EDT (07:00Z).
    let runs = next_n("30 2 * * *", "America/New_York", "2025-03-08T12:00:00Z", 3);
    assert_eq!(runs, ["2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z", "2025-03-11T06:30:00Z"]);
}

#[test]
fn spring_gap_weekly_runs_that_day_not_a_week_later() {
    let runs = next_n("30 2 * * SUN", "America/New_York", "2025-03-08T12:00:00Z", 2);
    assert_eq!(runs, ["2025-03-09T07:00:00Z", "2025-03-16T06:30:00Z"]);
}

#[test]
fn spring_gap_every_thirty_minutes_has_no_burst() {
    // 01:30 EST, then 03:00 EDT: the missing hour is not made up.
    let runs = next_n("*/30 * * * *", "America/New_York", "2025-03-09T06:15:00Z", 3);
    assert_eq!(runs, ["2025-03-09T06:30:00Z", "2025-03-09T07:00:00Z", "2025-03-09T07:30:00Z"]);
}

#[test]
fn fall_back_fixed_time_runs_once_at_the_first_pass() {
    // 01:30 occurs twice on 2025-11-02; a fixed-time job runs at 01:30 EDT (05:30Z) only.
    let runs = next_n("30 1 * * *", "America/New_York", "2025-11-01T12:00:00Z", 3);
    assert_eq!(runs, ["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z", "2025-11-04T06:30:00Z"]);
}

#[test]
fn fall_back_hourly_runs_in_both_passes() {
    let runs = next_n("0 * * * *", "America/New_York", "2025-11-02T04:30:00Z", 3);
    // 01:00 EDT (05:00Z), 01:00 EST (06:00Z), 02:00 EST (07:00Z).
    assert_eq!(runs, ["2025-11-02T05:00:00Z", "2025-11-02T06:00:00Z", "2025-11-02T07:00:00Z"]);
}

#[test]
fn a_search_inside_the_second_pass_never_goes_back() {
    // 01:10 EST (06:10Z) is in the second pass of the repeated hour. A fixed 01:30 job already
    // ran in the first pass: the next is tomorrow, not 05:30Z (before the start).
    let runs = next_n("30 1 * * *", "America/New_York", "2025-11-02T06:10:00Z", 1);
    assert_eq!(runs, ["2025-11-03T06:30:00Z"]);
    let hourly = next_n("*/20 * * * *", "America/New_York", "2025-11-02T06:10:00Z", 2);
    assert_eq!(hourly, ["2025-11-02T06:20:00Z", "2025-11-02T06:40:00Z"]);
}

#[test]
fn southern_hemisphere_changes_run_the_same_rules() {
    // Sydney springs forward on 2025-10-05 at 02:00 -> 03:00 (AEST +10 -> AEDT +11).
    let gap = next_n("30 2 * * *", "Australia/Sydney", "2025-10-04T00:00:00Z", 2);
    assert_eq!(gap, ["2025-10-04T16:00:00Z", "2025-10-05T15:30:00Z"], "02:30 missing: 03:00 AEDT (16:00Z)");
    // and falls back on 2025-04-06 at 03:00 -> 02:00: 02:30 runs once, at its first pass (+11).
    let fold = next_n("30 2 * * *", "Australia/Sydney", "2025-04-05T00:00:00Z", 2);
    assert_eq!(fold, ["2025-04-05T15:30:00Z", "2025-04-06T16:30:00Z"]);
}

#[test]
fn half_hour_shifts_and_odd_offsets() {
    // Lord Howe shifts by 30 minutes: on 2025-10-05 02:00 -> 02:30 (+10:30 -> +11).
    // 02:15 on 2025-10-05 falls in the gap: it runs at 02:30 (+11), then 02:15 (+11) after.
    let runs = next_n("15 2 * * *", "Australia/Lord_Howe", "2025-10-04T00:00:00Z", 2);
    assert_eq!(runs, ["2025-10-04T15:30:00Z", "2025-10-05T15:15:00Z"]);
    // Kolkata (+05:30, no DST): 09:00 local is 03:30Z every day.
    assert_eq!(next_n("0 9 * * *", "Asia/Kolkata", "2026-01-01T00:00:00Z", 1), ["2026-01-01T03:30:00Z"]);
}

#[test]
fn a_whole_skipped_day_still_yields_the_next_time() {
    // Samoa skipped 2011-12-30 entirely (UTC-10 -> UTC+14).
    let runs = next_n("0 12 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z", 2);
    assert_eq!(runs, ["2011-12-29T22:00:00Z", "2011-12-30T22:00:00Z"], "29 Dec noon, then 31 Dec noon");
}

#[test]
fn posix_weekdays_and_names() {
    // 2026-01-05 is a Monday.
    let weekdays = next_n("0 9 * * 1-5", "UTC", "2026-01-03T00:00:00Z", 6);
    assert_eq!(weekdays[0], "2026-01-05T09:00:00Z", "1 is Monday");
    assert_eq!(weekdays[4], "2026-01-09T09:00:00Z", "5 is Friday");
    assert_eq!(weekdays[5], "2026-01-12T09:00:00Z", "no weekend");
    assert_eq!(next_n("0 9 * * MON-FRI", "UTC", "2026-01-03T00:00:00Z", 6), weekdays);
    assert_eq!(
        next_n("0 9 * * 0", "UTC", "2026-01-03T00:00:00Z", 1),
        next_n("0 9 * * 7", "UTC", "2026-01-03T00:00:00Z", 1)
    );
}

#[test]
fn seconds_field_is_optional() {
    assert_eq!(
        next_n("*/15 * * * * *", "UTC", "2026-01-01T00:00:01Z", 2),
        ["2026-01-01T00:00:15Z", "2026-01-01T00:00:30Z"]
    );
}

#[test]
fn impossible_patterns_have_no_next_time() {
    let never = CronSchedule::parse("0 0 30 2 *", "UTC").expect("parses");
    assert_eq!(never.next_after(ts("2026-01-01T00:00:00Z")), None);
}

#[test]
fn bad_input_names_the_problem() {
    assert!(matches!(CronSchedule::parse("61 * * * *", "UTC"), Err(CronScheduleError::Expression { .. })));
    assert!(matches!(CronSchedule::parse("* * *", "UTC"), Err(CronScheduleError::Expression { .. })));
    assert!(matches!(CronSchedule::parse("0 9 * * *", "+02:00"), Err(CronScheduleError::Zone { .. })));
    assert!(CronSchedule::parse("0 9 * * MON-FRI", "Asia/Shanghai").is_ok_and(|s| !s.describe().is_empty()));
}

proptest! {
    /// Never a result at or before the start, in any zone.
    #[test]
    fn never_before_the_start(
        minute in 0u32..60,
        hour_step in 1u32..24,
        zone in 0usize..5,
        at in 1_600_000_000i64..1_900_000_000,
    ) {
        let zones = ["America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Europe/London", "Pacific/Chatham"];
        let schedule = CronSchedule::parse(&format!("{minute} */{hour_step} * * *"), zones[zone]).expect("valid");
        let start = Timestamp::from_second(at).expect("in range");
        let next = schedule.next_after(start).expect("an hourly-ish pattern always has a next time");
        prop_assert!(next > start);
        prop_assert!(next.duration_since(start) <= SignedDuration::from_hours(26));
    }
}
