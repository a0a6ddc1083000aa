//! The checker's own answers to the questions the engine decides: the next slot of a
//! schedule, the wait after a failure, a heartbeat's jitter, the start of a local day, and
//! which outcomes count against the breaker. Each is written again from the documentation,
//! as plainly as it can be, and never calls the engine's version: a bug there must show as
//! a disagreement, not be copied. (`checker_imports_no_decision_code` enforces it.)

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sha2::{Digest, Sha256};

use systole::core::delivery_target::DeliveryTarget;
use systole::core::ids::HeartbeatKey;
use systole::core::schedule::Schedule;
use systole::core::visibility::Visibility;
use systole::ports::store::ExecutionStatus;

pub mod cron;

use cron::CronReference;

/// The next slot strictly after `after`: an `every` slot comes one interval later, an `at`
/// has its one instant (to the millisecond, as stored), a cron the reference cron's.
pub fn next_slot(crons: &mut CronCache, schedule: &Schedule, after: Timestamp) -> Option<Timestamp> {
    match schedule {
        Schedule::Every(interval) => after.checked_add(SignedDuration::try_from(*interval).ok()?).ok(),
        Schedule::At(at) => {
            let at = Timestamp::from_millisecond(at.as_millisecond()).ok()?;
            (at > after).then_some(at)
        }
        Schedule::Cron(cron) => crons.get(cron.expression(), cron.zone_name())?.next_run_after(after),
    }
}

/// Parsed reference crons, by expression and zone.
#[derive(Debug, Default)]
pub struct CronCache {
    parsed: BTreeMap<(String, String), Option<CronReference>>,
}

impl CronCache {
    fn get(&mut self, expression: &str, zone: &str) -> Option<&CronReference> {
        self.parsed
            .entry((expression.to_owned(), zone.to_owned()))
            .or_insert_with(|| CronReference::parse(expression, zone))
            .as_ref()
    }
}

/// The wait after the n-th failure in a row (docs: "the n-th step of `error_backoff`, the
/// last one for every failure beyond").
pub fn backoff_after(ladder: &[Duration], failures_in_a_row: u32) -> Duration {
    if failures_in_a_row == 0 || ladder.is_empty() {
        return Duration::ZERO;
    }
    let step = (failures_in_a_row as usize).min(ladder.len());
    ladder[step - 1]
}

/// A heartbeat's constant jitter (docs: "the first 8 bytes, little-endian, of
/// SHA-256(agent, a zero byte, heartbeat id), modulo `jitter_max` in milliseconds").
pub fn jitter(key: &HeartbeatKey, jitter_max: Duration) -> Duration {
    let max_ms = jitter_max.as_millis() as u64;
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let mut input = key.agent.as_str().as_bytes().to_vec();
    input.push(0);
    input.extend_from_slice(key.heartbeat.as_str().as_bytes());
    let digest = Sha256::digest(&input);
    let head =
        u64::from_le_bytes([digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]]);
    Duration::from_millis(head % max_ms)
}

/// Whether a finished run counts as a failure for the breaker and the backoff: anything
/// that did not succeed (an error, a timeout).
pub fn counts_as_failure(status: ExecutionStatus) -> bool {
    !matches!(status, ExecutionStatus::Succeeded)
}

/// Whether a failed run's error is the provider refusing the request with 401, 402 or
/// 403 (the engine's error text for an HTTP status: `answered HTTP 402: ...`).
pub fn provider_refused(error: Option<&str>) -> bool {
    let Some((_, rest)) = error.and_then(|error| error.split_once("answered HTTP ")) else { return false };
    matches!(rest.get(..3), Some("401" | "402" | "403"))
}

/// The first instant of the local day `at` falls on in `zone`: walk back a minute at a
/// time while the local date stays the same (offsets are whole minutes).
pub fn local_day_start(at: Timestamp, zone: &TimeZone) -> Timestamp {
    let date = |instant: Timestamp| -> Date { zone.to_datetime(instant).date() };
    let today = date(at);
    let Ok(mut start) = Timestamp::from_second(at.as_second().div_euclid(60) * 60) else { return at };
    if date(start) != today {
        return at; // the day began within this minute: not in any zone the simulator uses
    }
    while let Some(earlier) = start.checked_sub(SignedDuration::from_secs(60)).ok().filter(|m| date(*m) == today) {
        start = earlier;
    }
    start
}

/// Whether a target shows nothing of a run (docs: no acknowledgements, no alerts and no
/// indicator), so a run for it would call the LLM for nobody.
pub fn shows_nothing(visibility: Visibility) -> bool {
    !(visibility.show_ok || visibility.show_alerts || visibility.use_indicator)
}

/// Whether a target is `silent` (kept in the run log on purpose, delivered nowhere).
pub fn is_silent(target: &DeliveryTarget) -> bool {
    target.adapter() == "silent" && target.target().is_empty()
}

#[cfg(test)]
mod tests;
