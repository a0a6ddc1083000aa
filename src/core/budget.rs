//! The daily budget of LLM calls per agent (field notes, failure 7): across all of an
//! agent's heartbeats and jobs, runs skip with reason `budget` once the calls recorded
//! since the start of the agent's local day reach it, until the next local day.

use jiff::tz::TimeZone;
use jiff::Timestamp;

/// The start of the local day that `now` falls in, in `zone` (midnight, or the first
/// instant of the day when a transition skips midnight).
pub fn day_start(now: Timestamp, zone: &TimeZone) -> Timestamp {
    let zoned = now.to_zoned(zone.clone());
    zoned.start_of_day().map_or(now, |start| start.timestamp())
}

/// LLM calls an agent's recorded runs made since `day` began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayLedger {
    pub day: Timestamp,
    pub calls: u64,
}

impl DayLedger {
    /// Whether a run may start: the calls recorded today are below `max`.
    pub fn allows(self, max: u64) -> bool {
        self.calls < max
    }

    /// Counts a recorded run's calls, if it finished within this ledger's day.
    pub fn record(&mut self, finished_at: Timestamp, calls: u64) {
        if finished_at >= self.day {
            self.calls = self.calls.saturating_add(calls);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("test timestamp")
    }

    #[test]
    fn the_day_is_the_agent_s_local_day() {
        let shanghai = TimeZone::get("Asia/Shanghai").expect("zone");
        // 2026-03-01T17:00Z is 01:00 on March 2nd in Shanghai.
        assert_eq!(day_start(ts("2026-03-01T17:00:00Z"), &shanghai), ts("2026-03-01T16:00:00Z"));
        assert_eq!(day_start(ts("2026-03-01T15:59:59Z"), &shanghai), ts("2026-02-28T16:00:00Z"));
        // Santiago skips midnight when it springs forward (2026-09-06): the day starts at 01:00.
        let santiago = TimeZone::get("America/Santiago").expect("zone");
        assert_eq!(day_start(ts("2026-09-06T12:00:00Z"), &santiago), ts("2026-09-06T04:00:00Z"));
    }

    #[test]
    fn the_ledger_counts_today_and_closes_at_the_budget() {
        let mut ledger = DayLedger { day: ts("2026-03-02T00:00:00Z"), calls: 0 };
        ledger.record(ts("2026-03-01T23:59:59Z"), 50);
        assert_eq!(ledger.calls, 0, "yesterday's run does not count");
        ledger.record(ts("2026-03-02T08:00:00Z"), 3);
        ledger.record(ts("2026-03-02T09:00:00Z"), 2);
        assert!(!ledger.allows(5));
        assert!(ledger.allows(6));
    }
}
