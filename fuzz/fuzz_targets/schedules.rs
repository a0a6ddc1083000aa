//! Arbitrary cron, duration and `at` strings, zones and start instants through parsing,
//! the next-occurrence search, the catch-up walk and the active-window check: never a
//! panic, never a result at or before the start.
#![no_main]

use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use systole::core::active_hours::zone_by_name;
use systole::core::active_hours::ActiveHours;
use systole::core::cron::CronSchedule;
use systole::core::duration::parse_duration;
use systole::core::policy::{CatchUp, RunPolicy};
use systole::core::schedule::Schedule;
use systole::core::schedule_fields::{check_cron_meets_window, parse_at};
use systole::core::slots::SlotTimer;
use systole::ports::clock::{Mono, Now};

const ZONES: [&str; 8] = [
    "UTC",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "Europe/Berlin",
    "America/Sao_Paulo",
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let zone = ZONES[usize::from(data[0]) % ZONES.len()];
    let seconds = i64::from_le_bytes(data[1..9].try_into().expect("eight bytes")) % 100_000_000_000;
    let Ok(start) = Timestamp::from_second(seconds) else { return };
    let Ok(text) = std::str::from_utf8(&data[9..]) else { return };
    let _ = parse_duration(text);
    if let Ok(tz) = zone_by_name(zone) {
        let _ = parse_at(text, &tz);
    }
    if let Ok(cron) = CronSchedule::parse(text, zone) {
        let schedule = Schedule::Cron(cron.clone());
        if let Ok(window) = ActiveHours::new("09:00", "17:00", zone) {
            let _ = check_cron_meets_window(&schedule, Some(&window), start);
        }
        // Armed at `start`, fired a day later: every slot run is after the first and in order.
        if let Some(timer) = SlotTimer::first(Now { wall: start, mono: Mono::ZERO }, &schedule, Default::default()) {
            assert!(timer.next_slot > start);
            if let Ok(later) = start.checked_add(jiff::SignedDuration::from_hours(24)) {
                let policy = RunPolicy { catch_up: CatchUp::All, ..RunPolicy::default() };
                let now = Now { wall: later, mono: Mono::ZERO };
                if timer.is_due(now) {
                    let fired = timer.fire(now, &schedule, &policy);
                    assert!(fired.run.windows(2).all(|pair| pair[0] < pair[1]), "{text:?}: slots out of order");
                    assert!(fired.run.iter().all(|slot| *slot >= timer.next_slot && *slot <= later));
                    assert!(fired.next.is_none_or(|next| !next.is_due(now)), "{text:?}: due again at once");
                }
            }
        }
        let schedule = cron;
        let mut at = start;
        for _ in 0..3 {
            match schedule.next_after(at) {
                Some(next) => {
                    assert!(next > at, "{text:?} in {zone}: {next} is not after {at}");
                    at = next;
                }
                None => break,
            }
        }
    }
});
