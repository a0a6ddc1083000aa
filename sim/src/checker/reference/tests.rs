//! The reference and the engine answer the same questions alike: both are checked here
//! against each other over the workload's expressions and zones, around every
//! daylight-saving change of 2025-2027, and against the examples docs/cron.md spells out.

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use systole::core::cron::CronSchedule;
use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::usage::RunUsage;

use super::cron::CronReference;
use super::*;
use crate::workload::{CRON_EXPRESSIONS, ZONES};

/// Slots followed from each starting instant.
const SLOTS_PER_START: usize = 30;

fn at(text: &str) -> Timestamp {
    text.parse().expect("a valid instant")
}

/// Starting instants for `zone`: a day before and an hour before each of its transitions
/// in 2025-2027, and a plain January day.
fn starts(zone: &TimeZone) -> Vec<Timestamp> {
    let mut starts = vec![at("2026-01-14T10:17:00Z")];
    for transition in
        zone.following(at("2025-01-01T00:00:00Z")).take_while(|t| t.timestamp() < at("2028-01-01T00:00:00Z"))
    {
        for hours in [24, 3, 1] {
            starts.push(transition.timestamp() - SignedDuration::from_hours(hours));
        }
    }
    starts
}

#[test]
fn reference_cron_agrees_with_the_engine_around_every_transition() {
    let mut compared = 0;
    for expression in CRON_EXPRESSIONS.iter().chain(["30 1-3 * * *", "0,20 2 * * *", "45 1 * * *", "0 3 * * *"].iter())
    {
        for zone_name in ZONES {
            let engine = CronSchedule::parse(expression, zone_name).expect("the engine reads it");
            let reference = CronReference::parse(expression, zone_name).expect("the reference reads it");
            for start in starts(engine.zone()) {
                let (mut ours, mut theirs) = (start, start);
                for _ in 0..SLOTS_PER_START {
                    let (next_ours, next_theirs) = (reference.next_run_after(ours), engine.next_after(theirs));
                    assert_eq!(
                        next_ours, next_theirs,
                        "{expression} in {zone_name} after {ours}: the reference and the engine disagree"
                    );
                    let Some(next) = next_ours else { break };
                    (ours, theirs) = (next, next);
                    compared += 1;
                }
            }
        }
    }
    assert!(compared > 10_000, "only {compared} slots compared");
}

/// The examples of docs/cron.md, answered by the reference alone.
#[test]
fn reference_cron_follows_the_documented_examples() {
    let next = |expression: &str, zone: &str, after: &str| {
        CronReference::parse(expression, zone).expect("parses").next_run_after(at(after)).map(|t| t.to_string())
    };
    let walk = |expression: &str, zone: &str, after: &str, count: usize| {
        let reference = CronReference::parse(expression, zone).expect("parses");
        let mut cursor = at(after);
        let mut slots = Vec::new();
        for _ in 0..count {
            cursor = reference.next_run_after(cursor).expect("a next slot");
            slots.push(cursor.to_zoned(TimeZone::get(zone).expect("zone")).strftime("%H:%M%:z").to_string());
        }
        slots
    };
    // 02:30 does not exist in New York on 8 March 2026: runs at 03:00 EDT (07:00Z).
    assert_eq!(next("30 2 * * *", "America/New_York", "2026-03-08T05:00:00Z").as_deref(), Some("2026-03-08T07:00:00Z"));
    // Both times skipped in Sydney on 4 October 2026: one run at 03:00+11:00.
    assert_eq!(walk("0,20 2 * * *", "Australia/Sydney", "2026-10-03T14:00:00Z", 2), ["03:00+11:00", "02:00+11:00"]);
    // A wildcard minute: nothing at 02:xx that day; next 02:00 on 9 March.
    assert_eq!(
        next("*/15 2 * * *", "America/New_York", "2026-03-08T05:00:00Z").as_deref(),
        Some("2026-03-09T06:00:00Z")
    );
    // A range is fixed-time: 01:30 EDT, 02:30 EST, 03:30 EST, not 01:30 EST.
    assert_eq!(
        walk("30 1-3 * * *", "America/New_York", "2026-11-01T04:00:00Z", 3),
        ["01:30-04:00", "02:30-05:00", "03:30-05:00"]
    );
    // Hourly runs in both passes of the repeated hour.
    assert_eq!(
        walk("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", 3),
        ["01:00-04:00", "01:00-05:00", "02:00-05:00"]
    );
    assert_eq!(
        walk("*/30 1 * * *", "America/New_York", "2026-11-01T04:30:00Z", 4),
        ["01:00-04:00", "01:30-04:00", "01:00-05:00", "01:30-05:00"]
    );
    // Chatham skips 02:45-03:45: `0 3` runs at 03:45+13:45.
    assert_eq!(walk("0 3 * * *", "Pacific/Chatham", "2026-09-26T12:00:00Z", 1), ["03:45+13:45"]);
    // Lord Howe repeats 01:30-02:00: `45 1` runs once, at +11:00.
    assert_eq!(walk("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00Z", 2), ["01:45+11:00", "01:45+10:30"]);
}

fn key(agent: &str, heartbeat: &str) -> HeartbeatKey {
    HeartbeatKey { agent: AgentId::new(agent).expect("id"), heartbeat: HeartbeatId::new(heartbeat).expect("id") }
}

#[test]
fn reference_backoff_jitter_and_failure_rule_agree_with_the_engine() {
    use systole::core::policy::{backoff_delay, jitter_offset};
    let ladders: [&[u64]; 4] = [&[], &[30], &[30, 60, 300], &[0, 600, 5, 90, 1]];
    for ladder in ladders {
        let ladder: Vec<Duration> = ladder.iter().copied().map(Duration::from_secs).collect();
        for failures in 1..10 {
            assert_eq!(
                backoff_after(&ladder, failures),
                backoff_delay(&ladder, failures),
                "{ladder:?} after {failures}"
            );
        }
    }
    for agent in ["agent-0", "agent-1", "main"] {
        for index in 0..50 {
            let key = key(agent, &format!("hb-{index}"));
            for max in [0, 1, 999, 300_000] {
                let max = Duration::from_millis(max);
                assert_eq!(jitter(&key, max), jitter_offset(&key, max), "{key} within {max:?}");
            }
        }
    }
    for status in systole::ports::store::ExecutionStatus::ALL {
        let record = systole::ports::store::RunRecord { status, ..sample_record() };
        assert_eq!(counts_as_failure(status), record.failed(), "{status:?}");
    }
}

fn sample_record() -> systole::ports::store::RunRecord {
    systole::ports::store::RunRecord {
        key: key("agent-0", "hb-0"),
        slot: at("2026-01-01T00:00:00Z"),
        finished_at: at("2026-01-01T00:00:01Z"),
        status: systole::ports::store::ExecutionStatus::Succeeded,
        delivery: systole::ports::store::DeliveryStatus::NotNeeded,
        duration: Duration::from_secs(1),
        error: None,
        output_preview: None,
        stop_reason: None,
        reply: None,
        reply_digest: None,
        consumes: Vec::new(),
        llm_calls: 0,
        usage: RunUsage::default(),
        provider_refused: false,
        transcript: None,
        tool_use: None,
    }
}

#[test]
fn reference_day_start_agrees_with_the_engine_in_every_zone() {
    use systole::core::budget::day_start;
    for zone_name in ZONES {
        let zone = TimeZone::get(zone_name).expect("zone");
        for start in starts(&zone) {
            for hours in 0..30 {
                let instant = start + SignedDuration::from_secs(hours * 3_600 + 1_234);
                assert_eq!(local_day_start(instant, &zone), day_start(instant, &zone), "{instant} in {zone_name}");
            }
        }
    }
}
