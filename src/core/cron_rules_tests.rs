//! cronie's rules for lists, ranges, day fields and macros (docs/cron.md), each with
//! explicit times in both hemispheres and in zones with 30- and 45-minute offsets; and a
//! minute-by-minute reference walk that the search must agree with.

use jiff::tz::AmbiguousOffset;
use proptest::prelude::*;

use super::tests::{next_n, ts};
use super::*;

fn refused(expression: &str) -> String {
    match CronSchedule::parse(expression, "UTC") {
        Err(error) => error.to_string(),
        Ok(_) => panic!("{expression:?} was accepted"),
    }
}

#[test]
fn a_list_in_the_spring_gap_is_fixed_time_and_runs_once_after_it() {
    // Sydney skips 02:00-03:00 on 2026-10-04: 02:00 and 02:20 run once, at 03:00+11:00.
    let runs = next_n("0,20 2 * * *", "Australia/Sydney", "2026-10-03T12:00:00Z", 3);
    assert_eq!(runs, ["2026-10-03T16:00:00Z", "2026-10-04T15:00:00Z", "2026-10-04T15:20:00Z"]);
    // The same in the north: New York skips 02:00-03:00 on 2026-03-08.
    let runs = next_n("30,37 2 * * *", "America/New_York", "2026-03-08T05:00:00Z", 2);
    assert_eq!(runs, ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]);
}

#[test]
fn a_range_in_the_repeated_hour_runs_only_in_the_first_pass() {
    // New York repeats 01:00-02:00 on 2026-11-01: 01:30 EDT runs, 01:30 EST does not.
    let runs = next_n("30 1-3 * * *", "America/New_York", "2026-11-01T04:00:00Z", 3);
    assert_eq!(runs, ["2026-11-01T05:30:00Z", "2026-11-01T07:30:00Z", "2026-11-01T08:30:00Z"]);
    // Sydney repeats 02:00-03:00 on 2026-04-05.
    let runs = next_n("15,45 2 * * *", "Australia/Sydney", "2026-04-04T14:00:00Z", 3);
    assert_eq!(runs, ["2026-04-04T15:15:00Z", "2026-04-04T15:45:00Z", "2026-04-05T16:15:00Z"]);
}

#[test]
fn a_wildcard_minute_makes_a_wildcard_job() {
    // `*/15 2 * * *` has a wildcard minute: nothing runs for the skipped hour...
    let runs = next_n("*/15 2 * * *", "America/New_York", "2026-03-08T05:00:00Z", 1);
    assert_eq!(runs, ["2026-03-09T06:00:00Z"]);
    // ...and it runs in both passes of a repeated one.
    let runs = next_n("*/30 1 * * *", "America/New_York", "2026-11-01T04:00:00Z", 4);
    assert_eq!(runs, ["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z"]);
}

#[test]
fn the_seconds_field_does_not_change_the_rule() {
    // Minute and hour decide: `30 30 2 * * *` is fixed-time, and runs at the gap's end.
    let runs = next_n("30 30 2 * * *", "America/New_York", "2026-03-08T05:00:00Z", 2);
    assert_eq!(runs, ["2026-03-08T07:00:00Z", "2026-03-09T06:30:30Z"]);
    let schedule = CronSchedule::parse("*/10 30 2 * * *", "UTC").expect("valid");
    assert!(schedule.is_fixed_time());
}

#[test]
fn half_and_three_quarter_hour_zones_follow_the_same_rules() {
    // Lord Howe moves 30 minutes: 02:00-02:30 is skipped on 2026-10-04 (southern spring)...
    let runs = next_n("0,15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00Z", 2);
    assert_eq!(runs, ["2026-10-03T15:30:00Z", "2026-10-04T15:00:00Z"]);
    // ...and 01:30-02:00 repeats on 2026-04-05: fixed once, wildcard twice.
    let fixed = next_n("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00Z", 2);
    assert_eq!(fixed, ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]);
    let wild = next_n("*/30 * * * *", "Australia/Lord_Howe", "2026-04-04T14:20:00Z", 3);
    assert_eq!(wild, ["2026-04-04T14:30:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z"]);
    // Chatham (+12:45 to +13:45) skips 02:45-03:45 on 2026-09-27: 03:00 runs at 03:45.
    let runs = next_n("0 3 * * *", "Pacific/Chatham", "2026-09-26T06:00:00Z", 2);
    assert_eq!(runs, ["2026-09-26T14:00:00Z", "2026-09-27T13:15:00Z"]);
    // Adelaide (+09:30 to +10:30) and St John's (-03:30 to -02:30).
    let runs = next_n("0,30 2 * * *", "Australia/Adelaide", "2026-10-03T12:00:00Z", 2);
    assert_eq!(runs, ["2026-10-03T16:30:00Z", "2026-10-04T15:30:00Z"]);
    let runs = next_n("30 2 * * *", "America/St_Johns", "2026-03-08T03:00:00Z", 2);
    assert_eq!(runs, ["2026-03-08T05:30:00Z", "2026-03-09T05:00:00Z"]);
    // Kathmandu (+05:45) has no changes at all.
    assert_eq!(next_n("0 9 * * *", "Asia/Kathmandu", "2026-01-01T00:00:00Z", 1), ["2026-01-01T03:15:00Z"]);
}

#[test]
fn a_step_in_a_day_field_counts_as_unrestricted_so_both_day_fields_must_match() {
    // `*/2` starts with `*`: Mondays that are odd days (5 and 19 January 2026).
    let runs = next_n("0 0 */2 * 1", "UTC", "2026-01-01T00:00:00Z", 3);
    assert_eq!(runs, ["2026-01-05T00:00:00Z", "2026-01-19T00:00:00Z", "2026-02-09T00:00:00Z"]);
    // Neither starts with `*`: the 1st, the 15th, or any Monday.
    let runs = next_n("0 0 1,15 * 1", "UTC", "2026-01-01T00:00:00Z", 4);
    assert_eq!(runs, ["2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z", "2026-01-15T00:00:00Z", "2026-01-19T00:00:00Z"]);
    // A weekday step starting with `*` likewise: days 1-10 that are Sun, Tue, Thu or Sat
    // (1 January 2026 is a Thursday; the search starts after its midnight).
    let runs = next_n("0 0 1-10 * */2", "UTC", "2026-01-01T00:00:00Z", 4);
    assert_eq!(runs, ["2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-06T00:00:00Z", "2026-01-08T00:00:00Z"]);
}

#[test]
fn macros_mean_their_five_fields() {
    let pairs = [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ];
    for (name, fields) in pairs {
        for zone in ["America/New_York", "Australia/Lord_Howe"] {
            assert_eq!(
                next_n(name, zone, "2026-03-01T00:00:00Z", 5),
                next_n(fields, zone, "2026-03-01T00:00:00Z", 5),
                "{name} in {zone}"
            );
        }
    }
    assert!(CronSchedule::parse("@DAILY", "UTC").is_ok(), "macros ignore case, as in cronie");
    // @hourly has a wildcard hour: both passes of a repeated hour.
    let runs = next_n("@hourly", "America/New_York", "2026-11-01T04:30:00Z", 2);
    assert_eq!(runs, ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"]);
}

#[test]
fn malformed_lists_and_values_are_refused_naming_the_field() {
    for (expression, expected) in [
        ("0,,5 * * * *", "minute field: \"0,,5\" has an empty list item"),
        ("0, * * * *", "minute field: \"0,\" has an empty list item"),
        (",0 * * * *", "minute field"),
        ("61 * * * *", "minute field: 61 is out of range 0-59"),
        ("0 24 * * *", "hour field: 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field: 0 is out of range 1-31"),
        ("0 0 * 13 *", "month field: 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field: 8 is out of range 0-7"),
        ("5-1 * * * *", "minute field: the range \"5-1\" runs backwards"),
        ("*/0 * * * *", "minute field: the step \"0\""),
        ("*/61 * * * *", "minute field: the step \"61\""),
        ("0 0 * FOO *", "month field: \"FOO\" is not a number or a name like FEB"),
        ("0 0 L * *", "day-of-month field: \"L\" is not a number"),
        ("0 0 ? * *", "day-of-month field: \"?\" is not a number"),
        ("0 0 * * 1#2", "day-of-week field"),
        ("-1 * * * *", "minute field"),
        ("* * * *", "expected 5 fields"),
        ("60 * * * * *", "second field: 60 is out of range 0-59"),
        ("@reboot", "@reboot has no time"),
        ("@fortnightly", "unknown macro @fortnightly"),
    ] {
        let message = refused(expression);
        assert!(message.contains(expected), "{expression:?}: {message}");
    }
}

#[test]
fn a_huge_expression_is_not_echoed_whole() {
    let huge = format!("{} * * * *", "1,".repeat(50_000));
    let message = refused(&huge);
    assert!(message.len() < 300, "{} characters", message.len());
    let long_value = format!("{} * * * *", "9".repeat(100_000));
    assert!(refused(&long_value).len() < 300);
}

#[test]
fn names_ranges_and_sunday_as_seven() {
    assert_eq!(next_n("0 9 * * MON-FRI", "UTC", "2026-01-03T00:00:00Z", 1), ["2026-01-05T09:00:00Z"]);
    assert_eq!(next_n("0 9 * jan-feb sun", "UTC", "2026-01-01T00:00:00Z", 1), ["2026-01-04T09:00:00Z"]);
    assert_eq!(
        next_n("0 9 * * 5-7", "UTC", "2026-01-05T00:00:00Z", 3),
        ["2026-01-09T09:00:00Z", "2026-01-10T09:00:00Z", "2026-01-11T09:00:00Z"]
    );
    // `a/n` runs from `a` to the field's end.
    assert_eq!(
        next_n("50/5 * * * *", "UTC", "2026-01-01T00:00:00Z", 3),
        ["2026-01-01T00:50:00Z", "2026-01-01T00:55:00Z", "2026-01-01T01:50:00Z"]
    );
}

/// The rules, checked minute by minute with nothing but the zone's answer for each local
/// time: is it skipped (a gap), lived twice (a fold), or plain?
fn reference_next(schedule: &CronSchedule, fields: &CronFields, after: Timestamp, minutes: i64) -> Option<Timestamp> {
    let zone = schedule.zone();
    let first_minute = after.as_second().div_euclid(60) + 1;
    for index in 0..minutes {
        let at = Timestamp::from_second((first_minute + index) * 60).ok()?;
        let local = zone.to_datetime(at);
        let earlier = zone.to_offset(at.checked_sub(SignedDuration::from_secs(60)).ok()?);
        let offset = zone.to_offset(at);
        let shift = offset.seconds() - earlier.seconds();
        let dst = shift != 0 && shift.abs() < 3 * 3600;
        if dst && shift > 0 && fields.fixed_time {
            // A gap just opened: any skipped local minute that matches runs now.
            let mut skipped = earlier.to_datetime(at);
            while skipped < local {
                if fields.matches(skipped) {
                    return Some(at);
                }
                skipped = skipped.checked_add(SignedDuration::from_secs(60)).ok()?;
            }
        }
        if !fields.matches(local) {
            continue;
        }
        let second_pass = match zone.to_ambiguous_timestamp(local).offset() {
            AmbiguousOffset::Fold { before, after } => {
                offset == after && (before.seconds() - after.seconds()) < 3 * 3600
            }
            _ => false,
        };
        if second_pass && fields.fixed_time {
            continue;
        }
        return Some(at);
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// The search agrees with the minute-by-minute walk around daylight-saving changes.
    #[test]
    fn search_agrees_with_a_minute_by_minute_walk(
        minute in prop::sample::select(vec!["0", "30", "0,20", "*/15", "*", "15-45/15", "45"]),
        hour in prop::sample::select(vec!["1", "2", "1-3", "*", "*/2", "2,3", "0"]),
        zone in prop::sample::select(vec![
            "America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "Pacific/Chatham",
            "America/St_Johns", "Europe/Berlin", "Australia/Adelaide",
        ]),
        day in 0i64..4,
        offset_minutes in 0i64..1_440,
    ) {
        let expression = format!("{minute} {hour} * * *");
        let schedule = CronSchedule::parse(&expression, zone).expect("valid");
        let fields = cron_fields::parse(&expression).expect("valid");
        // Around the changes of 2026 in each hemisphere (March/April and September-November).
        let bases = ["2026-03-07T00:00:00Z", "2026-04-03T00:00:00Z", "2026-09-25T00:00:00Z", "2026-10-30T00:00:00Z"];
        let start = ts(bases[usize::try_from(day).expect("small")])
            .checked_add(SignedDuration::from_mins(offset_minutes * 3 + day * 7)).expect("in range");
        let mut at = start;
        for _ in 0..6 {
            let expected = reference_next(&schedule, &fields, at, 3 * 1_440);
            let found = schedule.next_after(at);
            prop_assert_eq!(found, expected, "{} in {} after {}", expression, zone, at);
            match found { Some(next) => at = next, None => break }
        }
    }
}
