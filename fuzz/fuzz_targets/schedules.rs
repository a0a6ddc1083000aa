//! Arbitrary cron, duration and `at` strings, zones and start instants through parsing and
//! the next-occurrence search: never a panic, never a result at or before the start.
#![no_main]

use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use systole::core::active_hours::zone_by_name;
use systole::core::cron::CronSchedule;
use systole::core::duration::parse_duration;
use systole::daemon::preview::parse_at;

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
    if let Ok(schedule) = CronSchedule::parse(text, zone) {
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
