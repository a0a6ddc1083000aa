use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use systole::driver::events::EngineEvent;

use super::*;
use crate::options::SimOptions;
use crate::trace::{Entry, Event};

fn entry(secs: u64, event: Event) -> Entry {
    let wall = Timestamp::UNIX_EPOCH.checked_add(SignedDuration::from_secs(secs as i64)).expect("in range");
    Entry { elapsed: Duration::from_secs(secs), wall, event }
}

fn started(options: &SimOptions, life: u32, secs: u64, slot_secs: i64) -> Entry {
    let key = options.heartbeats[0].key.clone();
    let slot = Timestamp::from_second(slot_secs).expect("in range");
    entry(secs, Event::Engine { life, event: EngineEvent::RunStarted { key, slot } })
}

fn options_without_window() -> SimOptions {
    let mut options = SimOptions::from_seed(1);
    options.heartbeats.iter_mut().for_each(|def| def.active_hours = None);
    options.ops.clear();
    options
}

#[test]
fn a_slot_started_twice_is_caught_even_across_lives() {
    let options = options_without_window();
    let entries = vec![started(&options, 1, 60, 60), entry(61, Event::Crash { life: 1 }), started(&options, 2, 90, 60)];
    let verdict = check(&options, &entries);
    let violation = verdict.violation.expect("a violation");
    assert_eq!((violation.invariant, violation.index), (SLOT_ONCE, 2));
    assert_eq!(verdict.checks[SLOT_ONCE], 2);
}

#[test]
fn an_overlap_in_one_life_is_caught_but_a_crash_closes_runs() {
    let options = options_without_window();
    let overlapping = vec![started(&options, 1, 60, 60), started(&options, 1, 120, 120)];
    assert_eq!(check(&options, &overlapping).violation.map(|v| v.invariant), Some(NO_OVERLAP));
    let after_crash =
        vec![started(&options, 1, 60, 60), entry(61, Event::Crash { life: 1 }), started(&options, 2, 120, 120)];
    assert_eq!(check(&options, &after_crash).violation, None);
}

#[test]
fn a_duplicate_delivery_is_caught() {
    let options = options_without_window();
    let key = options.heartbeats[0].key.clone();
    let delivered = |secs| {
        entry(secs, Event::Delivered { life: 1, heartbeat: key.clone(), idempotency_key: "k".into(), text: "t".into() })
    };
    let verdict = check(&options, &[delivered(1), delivered(2)]);
    assert_eq!(verdict.violation.map(|v| v.invariant), Some(DELIVERY_ONCE));
}

#[test]
fn a_breaker_count_that_restarts_from_zero_is_caught() {
    let options = options_without_window();
    let key = options.heartbeats[0].key.clone();
    let finish = |secs: u64, failures| {
        let write = DurableWrite::Finish {
            consumed: Vec::new(),
            key: key.clone(),
            slot: Timestamp::from_second(secs as i64).expect("in range"),
            failed: true,
            consecutive_failures: failures,
            tripped: false,
        };
        entry(secs, Event::Durable { life: 1, write })
    };
    let verdict = check(&options, &[finish(60, 1), finish(120, 1)]);
    assert_eq!(verdict.violation.map(|v| v.invariant), Some(BREAKER_EXACT));
}

#[test]
fn the_reference_window_wraps_midnight() {
    let window = ActiveHours::new("22:00", "06:00", "UTC").expect("valid");
    assert!(window_contains(&window, "2026-01-01T23:00:00Z".parse().expect("ts")));
    assert!(window_contains(&window, "2026-01-01T05:59:00Z".parse().expect("ts")));
    assert!(!window_contains(&window, "2026-01-01T06:00:00Z".parse().expect("ts")));
    let to_midnight = ActiveHours::new("20:00", "24:00", "UTC").expect("valid");
    assert!(window_contains(&to_midnight, "2026-01-01T23:59:00Z".parse().expect("ts")));
    assert!(!window_contains(&to_midnight, "2026-01-01T00:00:00Z".parse().expect("ts")));
}
