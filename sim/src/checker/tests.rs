use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use systole::driver::events::EngineEvent;
use systole::ports::messenger::DeliveryKind;

use super::*;
use crate::options::SimOptions;
use crate::trace::{DurableWrite, Entry, Event};

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

/// A failed run's durable finish: `failures` in a row, the breaker tripped (and opened) or not.
fn failed_finish(
    key: &HeartbeatKey,
    slot: Timestamp,
    llm_calls: u32,
    error: Option<&str>,
    failures: u32,
    tripped: bool,
) -> DurableWrite {
    DurableWrite::Finish {
        consumed: Vec::new(),
        llm_calls,
        tokens: 0,
        cost_micros: 0,
        error: error.map(str::to_owned),
        tools: None,
        stop_reason: None,
        key: key.clone(),
        slot,
        status: systole::ports::store::ExecutionStatus::Failed,
        finished_at: slot,
        consecutive_failures: failures,
        tripped,
        opened: tripped,
        closed: false,
    }
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
        entry(
            secs,
            Event::Delivered {
                life: 1,
                heartbeat: key.clone(),
                idempotency_key: "k".into(),
                text: "t".into(),
                kind: DeliveryKind::Reply,
            },
        )
    };
    let verdict = check(&options, &[delivered(1), delivered(2)]);
    assert_eq!(verdict.violation.map(|v| v.invariant), Some(DELIVERY_ONCE));
}

#[test]
fn a_breaker_count_that_restarts_from_zero_is_caught() {
    let options = options_without_window();
    let key = options.heartbeats[0].key.clone();
    let finish = |secs: u64, failures| {
        let slot = Timestamp::from_second(secs as i64).expect("in range");
        let write = failed_finish(&key, slot, 0, None, failures, false);
        entry(secs, Event::Durable { life: 1, write })
    };
    let verdict = check(&options, &[finish(60, 1), finish(120, 1)]);
    assert_eq!(verdict.violation.map(|v| v.invariant), Some(BREAKER_EXACT));
}

/// Three failures in a row of the first heartbeat, the third tripping (and opening) it.
fn three_failures(options: &SimOptions) -> Vec<Entry> {
    let key = options.heartbeats[0].key.clone();
    (1..=3u32)
        .map(|failures| {
            let secs = u64::from(failures) * 60;
            let at = Timestamp::from_second(secs as i64).expect("in range");
            let tripped = failures == 3;
            let write = failed_finish(&key, at, 0, None, failures, tripped);
            entry(secs, Event::Durable { life: 1, write })
        })
        .collect()
}

fn breaker_options() -> SimOptions {
    SimOptions { breaker_cooldown: vec![Duration::from_secs(600)], ..options_without_window() }
}

#[test]
fn a_probe_before_the_cooldown_is_caught_and_one_after_it_is_not() {
    let options = breaker_options();
    let key = options.heartbeats[0].key.clone();
    let half_open = |secs| entry(secs, Event::Durable { life: 1, write: DurableWrite::HalfOpen { key: key.clone() } });
    let early: Vec<Entry> = three_failures(&options).into_iter().chain([half_open(180 + 599)]).collect();
    assert_eq!(check(&options, &early).violation.map(|v| v.invariant), Some(breaker::BREAKER_COOLDOWN));
    let on_time: Vec<Entry> = three_failures(&options).into_iter().chain([half_open(180 + 600)]).collect();
    assert_eq!(check(&options, &on_time).violation.map(|v| v.invariant), None);
}

#[test]
fn announcements_must_match_an_opening_and_come_once() {
    let options = breaker_options();
    let key = options.heartbeats[0].key.clone();
    let announce = |secs, id: &str| {
        let event = Event::Delivered {
            life: 1,
            heartbeat: key.clone(),
            idempotency_key: id.into(),
            text: "t".into(),
            kind: DeliveryKind::BreakerOpened,
        };
        entry(secs, event)
    };
    let unowed = vec![announce(30, "a")];
    assert_eq!(check(&options, &unowed).violation.map(|v| v.invariant), Some(breaker::BREAKER_ANNOUNCED));
    let once: Vec<Entry> = three_failures(&options).into_iter().chain([announce(181, "a")]).collect();
    assert_eq!(check(&options, &once).violation.map(|v| v.invariant), None);
    let twice: Vec<Entry> =
        three_failures(&options).into_iter().chain([announce(181, "a"), announce(182, "b")]).collect();
    assert_eq!(check(&options, &twice).violation.map(|v| v.invariant), Some(breaker::BREAKER_ANNOUNCED));
}

#[test]
fn a_cooldown_that_ends_after_healing_without_a_probe_is_caught() {
    let options = breaker_options();
    let mut entries = three_failures(&options);
    entries.push(entry(200, Event::Healed));
    entries.push(entry(180 + 600 + 60, Event::End { heartbeats: Vec::new() }));
    assert_eq!(check(&options, &entries).violation.map(|v| v.invariant), None, "within the bound");
    entries.pop();
    entries.push(entry(180 + 600 + 3_600, Event::End { heartbeats: Vec::new() }));
    assert_eq!(check(&options, &entries).violation.map(|v| v.invariant), Some(breaker::BREAKER_COOLDOWN));
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

#[test]
fn a_provider_s_refusal_must_open_the_breaker_on_the_first_failure() {
    let options = options_without_window();
    let key = options.heartbeats[0].key.clone();
    let refused = |failures, tripped| {
        let slot = Timestamp::from_second(60).expect("in range");
        let error = Some("LLM endpoint answered HTTP 402: spend cap reached");
        let write = failed_finish(&key, slot, 1, error, failures, tripped);
        vec![entry(60, Event::Durable { life: 1, write })]
    };
    let counted_as_one = check(&options, &refused(1, false));
    assert_eq!(counted_as_one.violation.map(|v| v.invariant), Some(BREAKER_EXACT));
    let max = options.breaker_failures_max;
    assert_eq!(check(&options, &refused(max, true)).violation.map(|v| v.invariant), None);
}

#[test]
fn a_cap_reached_twice_a_day_or_announced_unowed_is_caught() {
    let options = options_without_window();
    let agent = options.heartbeats[0].key.agent.clone();
    let day = Timestamp::UNIX_EPOCH;
    let reached = |secs| {
        let event = EngineEvent::CapReached { agent: agent.clone(), reason: SkipReason::TokenCap, day };
        entry(secs, Event::Engine { life: 1, event })
    };
    let announced = |secs| {
        let event = Event::Delivered {
            life: 1,
            heartbeat: options.heartbeats[0].key.clone(),
            idempotency_key: format!("{agent}/{day}/token-cap"),
            text: "t".into(),
            kind: DeliveryKind::CapReached,
        };
        entry(secs, event)
    };
    assert_eq!(check(&options, &[announced(10)]).violation.map(|v| v.invariant), Some(guards::CAP_ANNOUNCED));
    assert_eq!(check(&options, &[reached(10), announced(11)]).violation.map(|v| v.invariant), None);
    let twice = [reached(10), reached(20)];
    assert_eq!(check(&options, &twice).violation.map(|v| v.invariant), Some(guards::CAP_ANNOUNCED));
}

/// After healing, a one-minute heartbeat whose run started a second before its next slot
/// came due, with `overlap = skip`: the skip of that slot is a lost slot (liveness) unless
/// the run started late because it waited for a place (seed 1927870895655).
#[test]
fn an_overlap_skip_after_healing_is_excused_only_after_a_wait_for_a_place() {
    let mut options = options_without_window();
    options.runs_in_flight_max = 1;
    options.heartbeats[0].schedule = Schedule::Every(Duration::from_secs(60));
    options.heartbeats[0].policy.overlap = Overlap::Skip;
    let key = options.heartbeats[0].key.clone();
    let other = options.heartbeats[1].key.clone();
    let slot = |secs: i64| Timestamp::from_second(secs).expect("in range");
    let engine = |secs, event| entry(secs, Event::Engine { life: 1, event });
    let overlap_after = |waited: bool| {
        let mut entries = vec![entry(0, Event::Healed)];
        if waited {
            // Another heartbeat's run holds the only place while the slot is due.
            entries.push(engine(330, EngineEvent::RunStarted { key: other.clone(), slot: slot(330) }));
            entries.push(engine(399, EngineEvent::RunLost { key: other.clone(), slot: slot(330) }));
        }
        // Its slot (due at 340) starts late after the wait, on time without one.
        let start = if waited { 400 } else { 340 };
        entries.push(engine(start, EngineEvent::RunStarted { key: key.clone(), slot: slot(340) }));
        let skipped = EngineEvent::Skipped { key: key.clone(), slot: slot(400), reason: SkipReason::Overlap };
        entries.push(engine(start + 1, skipped));
        entries.push(entry(430, Event::End { heartbeats: vec![(key.clone(), true)] }));
        entries
    };
    let violation = |entries: &[Entry]| check(&options, entries).violation.map(|v| (v.invariant, v.message));
    assert_eq!(violation(&overlap_after(true)), None);
    let (invariant, message) =
        violation(&overlap_after(false)).expect("a run that did not wait outlasted its interval");
    assert_eq!(invariant, LIVENESS, "{message}");
    assert!(message.contains("skipped (overlap)"), "{message}");
}

/// A one-shot due at 60 s that ran and failed, in a world healed right after, with the
/// timers the engine armed after that run (none, or one at `rearmed_secs`).
fn a_failed_one_shot(rearmed_secs: Option<i64>) -> (SimOptions, Vec<Entry>) {
    let mut options = options_without_window();
    let slot = Timestamp::from_second(60).expect("in range");
    options.heartbeats[0].schedule = Schedule::At(slot);
    // No check tool to gate the model (`check-gates-model`).
    options.heartbeats[0].tools = Default::default();
    let key = options.heartbeats[0].key.clone();
    let engine = |secs, event| entry(secs, Event::Engine { life: 1, event });
    let all: Vec<(HeartbeatKey, bool)> = options.heartbeats.iter().map(|def| (def.key.clone(), true)).collect();
    let finished = EngineEvent::RunFinished {
        key: key.clone(),
        slot,
        status: systole::ports::store::ExecutionStatus::Failed,
        delivery: systole::ports::store::DeliveryStatus::NotNeeded,
        duration: Duration::ZERO,
        error: Some("injected".into()),
        reply: None,
        recorded: true,
        llm_calls: 1,
        finished_at: slot,
        usage: Default::default(),
    };
    let recorded = failed_finish(&key, slot, 1, Some("injected"), 1, false);
    let mut entries = vec![
        entry(0, Event::Started { life: 1, running_rows: 0, heartbeats: all.clone() }),
        engine(0, EngineEvent::Armed { key: key.clone(), next_slot: slot }),
        engine(60, EngineEvent::RunStarted { key: key.clone(), slot }),
        entry(
            60,
            Event::RunTraced {
                life: 1,
                key: key.clone(),
                slot,
                trace: traces::Traced { duration: Duration::ZERO, children: Vec::new(), completions: 1 },
            },
        ),
        entry(60, Event::Durable { life: 1, write: recorded }),
        engine(60, finished),
    ];
    if let Some(secs) = rearmed_secs {
        let next_slot = Timestamp::from_second(secs).expect("in range");
        entries.push(engine(60, EngineEvent::Armed { key: key.clone(), next_slot }));
    }
    entries.push(entry(61, Event::Healed));
    entries.push(entry(62, Event::End { heartbeats: all }));
    (options, entries)
}

#[test]
fn a_failed_one_shot_left_without_a_retry_is_caught() {
    let (options, unarmed) = a_failed_one_shot(None);
    let verdict = check(&options, &unarmed);
    assert_eq!(verdict.violation.map(|v| v.invariant), Some(AT_RETRY_ARMED));
    let (options, armed_again_at_its_slot) = a_failed_one_shot(Some(60));
    assert_eq!(check(&options, &armed_again_at_its_slot).violation.map(|v| v.invariant), Some(AT_RETRY_ARMED));
    let (options, retrying) = a_failed_one_shot(Some(90));
    let verdict = check(&options, &retrying);
    assert_eq!(verdict.violation.map(|v| v.invariant), None);
    assert_eq!(verdict.checks[AT_RETRY_ARMED], 1);
}

#[test]
fn a_retirement_written_over_a_disable_is_caught() {
    let options = options_without_window();
    let key = options.heartbeats[0].key.clone();
    let all: Vec<(HeartbeatKey, bool)> = options.heartbeats.iter().map(|def| (def.key.clone(), true)).collect();
    let durable = |secs, write| entry(secs, Event::Durable { life: 1, write });
    let start = entry(0, Event::Started { life: 1, running_rows: 0, heartbeats: all });
    let over_a_disable = vec![
        start.clone(),
        durable(10, DurableWrite::SetEnabled { key: key.clone(), enabled: false }),
        durable(20, DurableWrite::Retired { key: key.clone() }),
    ];
    let verdict = check(&options, &over_a_disable);
    assert_eq!(verdict.violation.map(|v| (v.invariant, v.index)), Some((RETIREMENT_KEEPS_DISABLE, 2)));
    let over_an_enabled_row = vec![start, durable(20, DurableWrite::Retired { key })];
    let verdict = check(&options, &over_an_enabled_row);
    assert_eq!(verdict.violation.map(|v| v.invariant), None);
    assert_eq!(verdict.checks[RETIREMENT_KEEPS_DISABLE], 1);
}

#[test]
fn a_new_schedule_armed_at_the_old_timer_s_slot_is_caught() {
    let mut options = options_without_window();
    let mut def = options.heartbeats[0].clone();
    def.schedule = Schedule::Every(Duration::from_secs(3_600));
    options.heartbeats[0] = def.clone();
    let key = def.key.clone();
    let all: Vec<(HeartbeatKey, bool)> = options.heartbeats.iter().map(|def| (def.key.clone(), true)).collect();
    let engine = |secs, event| entry(secs, Event::Engine { life: 1, event });
    let at = |secs: i64| Timestamp::from_second(secs).expect("in range");
    let every_five_minutes = HeartbeatDef { schedule: Schedule::Every(Duration::from_secs(300)), ..def };
    // Stored hourly at 0 (first slot 3,600), made one of every five minutes at 600.
    let replaced_and_armed = |armed_secs: i64| {
        vec![
            entry(0, Event::Started { life: 1, running_rows: 0, heartbeats: all.clone() }),
            engine(0, EngineEvent::Armed { key: key.clone(), next_slot: at(3_600) }),
            entry(
                600,
                Event::Durable {
                    life: 1,
                    write: DurableWrite::Put { def: Box::new(every_five_minutes.clone()), at: at(600) },
                },
            ),
            engine(600, EngineEvent::DefinitionApplied { key: key.clone() }),
            engine(600, EngineEvent::Armed { key: key.clone(), next_slot: at(armed_secs) }),
        ]
    };
    let verdict = check(&options, &replaced_and_armed(3_600));
    assert_eq!(verdict.violation.map(|v| (v.invariant, v.index)), Some((first_slots::NEW_SCHEDULE_ARMED_AT_ONCE, 4)));
    let verdict = check(&options, &replaced_and_armed(900));
    assert_eq!(verdict.violation.map(|v| v.invariant), None);
    assert_eq!(verdict.checks[first_slots::NEW_SCHEDULE_ARMED_AT_ONCE], 1);
}
