use super::*;

fn ts(text: &str) -> Timestamp {
    text.parse().expect("test timestamp")
}

fn cron(expression: &str, zone: &str) -> Schedule {
    Schedule::cron(CronSchedule::parse(expression, zone).expect("valid cron"))
}

#[test]
fn every_is_checked_against_its_limits() {
    assert_eq!(Schedule::every("30m"), Ok(Schedule::Every(Duration::from_secs(1_800))));
    assert!(Schedule::every("0s").expect_err("zero").contains("out of range"));
    assert!(Schedule::every("400d").expect_err("too long").contains("out of range"));
    assert!(Schedule::every("soon").is_err());
}

#[test]
fn passed_counts_a_cron_gap_and_keeps_the_latest() {
    let hourly = cron("0 * * * *", "UTC");
    let passed = hourly.passed(ts("2026-01-01T01:00:00Z"), ts("2026-01-01T05:30:00Z"), 2);
    assert_eq!(passed.count, 5);
    assert_eq!(passed.recent, VecDeque::from([ts("2026-01-01T04:00:00Z"), ts("2026-01-01T05:00:00Z")]));
    assert_eq!(passed.next, Some(ts("2026-01-01T06:00:00Z")));
}

#[test]
fn passed_of_a_dense_cron_over_a_long_gap_is_bounded_and_exact_about_the_latest() {
    // Every second for 30 days: far more than the scan limit.
    let secondly = cron("* * * * * *", "UTC");
    let passed = secondly.passed(ts("2026-01-01T00:00:00Z"), ts("2026-01-31T00:00:00.5Z"), 1);
    assert_eq!(passed.latest(), ts("2026-01-31T00:00:00Z"));
    assert_eq!(passed.next, Some(ts("2026-01-31T00:00:01Z")));
    assert!(passed.count >= CATCHUP_SCAN_SLOTS_MAX, "a lower bound: {}", passed.count);
}

#[test]
fn passed_of_an_interval_is_arithmetic() {
    let every = Schedule::Every(Duration::from_secs(1));
    let passed = every.passed(ts("2026-01-01T00:00:00Z"), ts("2027-01-01T00:00:00Z"), 3);
    assert_eq!(passed.count, 365 * 86_400 + 1);
    assert_eq!(passed.latest(), ts("2027-01-01T00:00:00Z"));
    assert_eq!(passed.recent.len(), 3);
}

#[test]
fn at_has_one_slot() {
    let at = Schedule::At(ts("2026-06-01T12:00:00Z"));
    assert_eq!(at.first_slot(ts("2026-07-01T00:00:00Z")), Some(ts("2026-06-01T12:00:00Z")));
    assert_eq!(at.next_after(ts("2026-06-01T12:00:00Z")), None);
    let passed = at.passed(ts("2026-06-01T12:00:00Z"), ts("2026-07-01T00:00:00Z"), 5);
    assert_eq!((passed.count, passed.next), (1, None));
}

#[test]
fn display_names_the_kind() {
    assert_eq!(Schedule::Every(Duration::from_secs(90)).to_string(), "every 1m30s");
    assert_eq!(cron("0 9 * * 1-5", "Asia/Shanghai").to_string(), "cron \"0 9 * * 1-5\" in Asia/Shanghai");
}

#[test]
fn a_stored_slot_resumes_only_where_the_schedule_can_have_one() {
    let daily = cron("30 2 * * *", "UTC");
    assert!(daily.may_resume_at(ts("2025-03-16T02:30:00Z")));
    // The catch-up slot an `every 1m` wrote before a reload made it this cron.
    assert!(!daily.may_resume_at(ts("2025-03-15T16:12:42Z")));
    assert!(!daily.may_resume_at(ts("2025-03-16T02:30:00.001Z")));
    // `every` starts its grid wherever it is armed; a one-shot's retry lies past its instant.
    assert!(Schedule::every("1m").expect("valid").may_resume_at(ts("2025-03-15T16:12:42.250Z")));
    assert!(Schedule::At(ts("2025-03-15T11:39:10Z")).may_resume_at(ts("2025-03-15T15:43:22Z")));
}
