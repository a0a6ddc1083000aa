//! The daily caps per agent (field notes, failure 7, and issue 27): across all of an
//! agent's heartbeats and jobs, runs skip once the LLM calls (reason `budget`), the tokens
//! (`token-cap`) or the cost (`cost-cap`) recorded since the start of the agent's local
//! day reach its cap, until the next local day. Read back from the run log, so a restart
//! or a clock jump never resets them.
//!
//! Beside them, one global cap of tokens and cost across every agent (`[engine]
//! daily_tokens_max`, `daily_cost_max`), in the engine's day (`[engine] timezone`): the
//! ceiling of what all agents together may spend, whatever each agent's own caps add up to.

use jiff::tz::TimeZone;
use jiff::Timestamp;

/// The start of the local day that `now` falls in, in `zone` (midnight, or the first
/// instant of the day when a transition skips midnight).
pub fn day_start(now: Timestamp, zone: &TimeZone) -> Timestamp {
    let zoned = now.to_zoned(zone.clone());
    zoned.start_of_day().map_or(now, |start| start.timestamp())
}

/// The start of the local day after the one `now` falls in, in `zone` (a day may last
/// 23 or 25 hours); `None` past the end of time.
pub fn next_day_start(now: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
    let tomorrow = now.to_zoned(zone.clone()).tomorrow().ok()?;
    tomorrow.start_of_day().ok().map(|start| start.timestamp())
}

/// What an agent's recorded runs spent since its day began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DaySpend {
    pub calls: u64,
    /// Input and output tokens.
    pub tokens: u64,
    pub cost_micros: u64,
}

impl DaySpend {
    pub fn add(&mut self, other: DaySpend) {
        self.calls = self.calls.saturating_add(other.calls);
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.cost_micros = self.cost_micros.saturating_add(other.cost_micros);
    }
}

/// An agent's daily caps: LLM calls, tokens and cost (micros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayCaps {
    pub calls: u64,
    pub tokens: u64,
    pub cost_micros: u64,
}

/// The global daily caps across all agents: tokens and cost (micros), in the day of
/// `timezone` (an IANA name; the engine's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalCaps {
    pub tokens: u64,
    pub cost_micros: u64,
    pub timezone: String,
}

/// Which daily cap a day's spending reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DayCap {
    Calls,
    Tokens,
    Cost,
    /// All agents' tokens together reached the global cap.
    GlobalTokens,
    /// All agents' cost together reached the global cap.
    GlobalCost,
}

impl DayCap {
    /// The config field that sets it.
    pub fn field(self) -> &'static str {
        match self {
            DayCap::Calls => "llm_calls_per_day",
            DayCap::Tokens => "daily_tokens_max",
            DayCap::Cost => "daily_cost_max",
            DayCap::GlobalTokens => "engine.daily_tokens_max",
            DayCap::GlobalCost => "engine.daily_cost_max",
        }
    }

    /// Whether it is the global cap across all agents rather than one agent's.
    pub fn is_global(self) -> bool {
        matches!(self, DayCap::GlobalTokens | DayCap::GlobalCost)
    }
}

/// What an agent's runs spent since `day` began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayLedger {
    pub day: Timestamp,
    pub spent: DaySpend,
}

impl DayLedger {
    /// The first cap today's spending reached, if any: a run may start only when none is.
    /// A run already going when a cap is reached finishes (ADR 0020): the overrun is
    /// bounded by the runs in flight and each run's loop limit.
    pub fn reached(self, caps: DayCaps) -> Option<DayCap> {
        if self.spent.calls >= caps.calls {
            Some(DayCap::Calls)
        } else if self.spent.tokens >= caps.tokens {
            Some(DayCap::Tokens)
        } else if self.spent.cost_micros >= caps.cost_micros {
            Some(DayCap::Cost)
        } else {
            None
        }
    }

    /// The global cap that all agents' spending today reached, if any (calls have no
    /// global cap: each agent's budget bounds them).
    pub fn reached_global(self, caps: &GlobalCaps) -> Option<DayCap> {
        if self.spent.tokens >= caps.tokens {
            Some(DayCap::GlobalTokens)
        } else if self.spent.cost_micros >= caps.cost_micros {
            Some(DayCap::GlobalCost)
        } else {
            None
        }
    }

    /// Counts a recorded run's spending, if it finished within this ledger's day.
    pub fn record(&mut self, finished_at: Timestamp, spend: DaySpend) {
        if finished_at >= self.day {
            self.spent.add(spend);
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
        // The day before is 24 hours long; the day of the transition 23.
        assert_eq!(next_day_start(ts("2026-09-05T12:00:00Z"), &santiago), Some(ts("2026-09-06T04:00:00Z")));
        assert_eq!(next_day_start(ts("2026-09-06T12:00:00Z"), &santiago), Some(ts("2026-09-07T03:00:00Z")));
    }

    #[test]
    fn the_ledger_counts_today_and_names_the_first_cap_reached() {
        let caps = DayCaps { calls: 6, tokens: 1_000, cost_micros: 50_000 };
        let mut ledger = DayLedger { day: ts("2026-03-02T00:00:00Z"), spent: DaySpend::default() };
        ledger.record(ts("2026-03-01T23:59:59Z"), DaySpend { calls: 50, tokens: 5_000, cost_micros: 90_000 });
        assert_eq!(ledger.spent, DaySpend::default(), "yesterday's run does not count");
        ledger.record(ts("2026-03-02T08:00:00Z"), DaySpend { calls: 3, tokens: 400, cost_micros: 20_000 });
        assert_eq!(ledger.reached(caps), None);
        ledger.record(ts("2026-03-02T09:00:00Z"), DaySpend { calls: 2, tokens: 600, cost_micros: 20_000 });
        assert_eq!(ledger.reached(caps), Some(DayCap::Tokens));
        let global = GlobalCaps { tokens: 10_000, cost_micros: 40_000, timezone: "UTC".to_owned() };
        assert_eq!(ledger.reached_global(&global), Some(DayCap::GlobalCost), "40,000 micros reach the global cost cap");
        let roomy = GlobalCaps { tokens: 10_000, cost_micros: 40_001, ..global.clone() };
        assert_eq!(ledger.reached_global(&roomy), None);
        let tight = GlobalCaps { tokens: 1_000, ..global };
        assert_eq!(ledger.reached_global(&tight), Some(DayCap::GlobalTokens), "tokens are named first");
        ledger.record(ts("2026-03-02T10:00:00Z"), DaySpend { calls: 0, tokens: 0, cost_micros: 10_000 });
        assert_eq!(ledger.reached(DayCaps { tokens: u64::MAX, ..caps }), Some(DayCap::Cost));
        ledger.record(ts("2026-03-02T11:00:00Z"), DaySpend { calls: 1, tokens: 0, cost_micros: 0 });
        assert_eq!(ledger.reached(caps), Some(DayCap::Calls));
    }
}
