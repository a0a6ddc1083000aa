//! Cron schedules in an IANA time zone, through croner (jiff backend).
//!
//! POSIX day-of-week (`1-5` is Monday to Friday; names accepted), five fields or six with
//! seconds, and the classic cron rule at daylight-saving changes (croner's own): a local
//! time that does not exist runs once at the first instant after the gap; a fixed-time job
//! runs once in a repeated hour, at its first pass; wildcard and step hours run in both.
//! The search is wrapped so that a zone transition croner cannot step over (a whole day
//! skipped) yields the next valid time instead of an error.

use std::sync::Arc;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use crate::core::active_hours::zone_by_name;

/// How many days the search may step over a spot croner cannot resolve before giving up.
const SEARCH_RETRY_DAYS_MAX: i64 = 32;

/// Why a cron schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronScheduleError {
    #[error("{expression:?} is not a cron expression: {problem}")]
    Expression { expression: String, problem: String },
    #[error("{name:?} is not a known IANA time zone (like \"Europe/Berlin\")")]
    Zone { name: String },
}

/// A parsed cron expression with its zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    /// Shared: a parsed pattern is large and clones of a schedule are common.
    cron: Arc<Cron>,
    zone_name: String,
    zone: TimeZone,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        (&self.expression, &self.zone_name) == (&other.expression, &other.zone_name)
    }
}
impl Eq for CronSchedule {}

impl CronSchedule {
    /// Parses `expression` (5 fields, or 6 with seconds first) in the zone named `zone_name`.
    ///
    /// # Errors
    /// When the expression does not parse or the zone is unknown.
    pub fn parse(expression: &str, zone_name: &str) -> Result<Self, CronScheduleError> {
        let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let cron = parser.parse(expression.trim()).map_err(|error| CronScheduleError::Expression {
            expression: expression.to_owned(),
            problem: error.to_string(),
        })?;
        let zone = zone_by_name(zone_name).map_err(|_| CronScheduleError::Zone { name: zone_name.to_owned() })?;
        Ok(Self {
            expression: expression.trim().to_owned(),
            cron: Arc::new(cron),
            zone_name: zone_name.to_owned(),
            zone,
        })
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    /// croner's plain-English reading of the expression.
    pub fn describe(&self) -> String {
        self.cron.describe()
    }

    /// The first occurrence strictly after `after`, or `None` when there is none (a
    /// pattern such as 30 February, or one past the search horizon).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let mut from = after.to_zoned(self.zone.clone());
        let mut inclusive = false;
        for _ in 0..SEARCH_RETRY_DAYS_MAX {
            match self.cron.find_next_occurrence(&from, inclusive) {
                Ok(next) if next.timestamp() > after => return Some(next.timestamp()),
                // Never return a time at or before the start, whatever croner says.
                Ok(next) => {
                    from = next.timestamp().checked_add(SignedDuration::from_secs(1)).ok()?.to_zoned(self.zone.clone());
                    inclusive = true;
                }
                // croner gives up on some transitions (Samoa skipped 2011-12-30 entirely):
                // search again from the start of the next local day. A pattern that never
                // matches fails every retry.
                Err(_) => {
                    from = start_of_next_day(&from)?;
                    inclusive = true;
                }
            }
        }
        None
    }
}

fn start_of_next_day(from: &Zoned) -> Option<Zoned> {
    let tomorrow = from.date().tomorrow().ok()?;
    tomorrow.to_zoned(from.time_zone().clone()).ok()
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;
