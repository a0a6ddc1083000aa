//! Cron schedules in an IANA time zone, with the classic rules at daylight-saving
//! changes (Vixie cron / cronie; docs/cron.md, ADR 0009):
//! - a *fixed-time* job (neither its minute nor its hour field starts with `*`) whose
//!   times fall in a spring-forward gap runs once, at the first instant after the gap;
//! - in a repeated (fall-back) hour a fixed-time job runs only in the first pass;
//! - a wildcard job runs at every instant whose local time matches, in both passes of a
//!   repeated hour, and not at all for times a gap skipped;
//! - a change of offset of 3 hours or more (a zone changing sides of the date line) is no
//!   daylight-saving change: times it skips or repeats get no special treatment.
//!
//! The search walks the zone's offset segments: within one, local time runs with the
//! instant, so the first matching local time is the first instant.

use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use crate::core::active_hours::zone_by_name;
use crate::core::cron_fields::{self, CronFields, CronSyntaxError};

/// Offset changes smaller than this get cronie's daylight-saving treatment.
const DST_SHIFT_SECS_MAX: i32 = 3 * 3600;

/// How far ahead the search looks before it says a pattern has no next time (a 29 February
/// that must also be a given weekday recurs within 28 years; 30 February never does).
const SEARCH_HORIZON_YEARS: i16 = 30;

/// Why a cron schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronScheduleError {
    #[error("{expression:?} is not a cron expression: {problem}")]
    Expression { expression: String, problem: String },
    #[error("{name:?} is not a known IANA time zone (like \"Europe/Berlin\")")]
    Zone { name: String },
}

impl CronScheduleError {
    fn syntax(expression: &str, error: &CronSyntaxError) -> Self {
        Self::Expression { expression: cron_fields::quote(expression.trim()), problem: error.to_string() }
    }
}

/// A parsed cron expression with its zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    fields: CronFields,
    zone_name: String,
    zone: TimeZone,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        (&self.expression, &self.zone_name) == (&other.expression, &other.zone_name)
    }
}
impl Eq for CronSchedule {}

// In the order of what equality compares (the text, then the zone's name).
impl Ord for CronSchedule {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.expression, &self.zone_name).cmp(&(&other.expression, &other.zone_name))
    }
}

impl PartialOrd for CronSchedule {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl CronSchedule {
    /// Parses `expression` (5 fields, 6 with seconds first, or a macro such as `@daily`)
    /// in the zone named `zone_name`.
    ///
    /// # Errors
    /// When the expression does not parse (the error names the field and the value) or
    /// the zone is unknown.
    pub fn parse(expression: &str, zone_name: &str) -> Result<Self, CronScheduleError> {
        let fields = cron_fields::parse(expression).map_err(|error| CronScheduleError::syntax(expression, &error))?;
        let zone = zone_by_name(zone_name).map_err(|_| CronScheduleError::Zone { name: zone_name.to_owned() })?;
        Ok(Self { expression: expression.trim().to_owned(), fields, zone_name: zone_name.to_owned(), zone })
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

    /// Whether cronie treats it as a fixed-time job (see the module docs).
    pub fn is_fixed_time(&self) -> bool {
        self.fields.fixed_time
    }

    /// What the fields allow, in words.
    pub fn describe(&self) -> String {
        self.fields.describe()
    }

    /// The first occurrence strictly after `after`, or `None` when there is none within
    /// the search horizon (a pattern such as 30 February).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // Occurrences are whole seconds: start at the first whole second after `after`.
        let mut cursor = Timestamp::from_second(after.as_second().checked_add(1)?).ok()?;
        let horizon = {
            let civil = self.zone.to_datetime(after);
            civil.checked_add(jiff::Span::new().years(SEARCH_HORIZON_YEARS)).unwrap_or(DateTime::MAX)
        };
        loop {
            let offset = self.zone.to_offset(cursor);
            let civil = offset.to_datetime(cursor);
            if civil >= horizon {
                return None;
            }
            // The transition that began this segment, with the offset before it.
            let began = self
                .zone
                .preceding(cursor.checked_add(SignedDuration::from_nanos(1)).ok()?)
                .next()
                .map(|transition| (transition.timestamp(), self.zone.to_offset(before(transition.timestamp()))));
            let mut from = civil;
            if let Some((at, offset_before)) = began {
                let shift = offset.seconds() - offset_before.seconds();
                let dst = shift != 0 && shift.abs() < DST_SHIFT_SECS_MAX;
                if dst && self.fields.fixed_time {
                    if shift > 0 && at == cursor && self.matches_in_gap(at, offset_before, offset) {
                        // Skipped by the gap: runs once, now, at its first instant.
                        return Some(cursor);
                    }
                    if shift < 0 {
                        // The repeated local times ran in the first pass.
                        from = from.max(offset_before.to_datetime(at));
                    }
                }
            }
            let next_transition = self.zone.following(cursor).next().map(|transition| transition.timestamp());
            let until = next_transition.map_or(horizon, |at| offset.to_datetime(at).min(horizon));
            if let Some(found) = self.fields.next_civil(from, until) {
                return offset.to_timestamp(found).ok();
            }
            cursor = next_transition?;
        }
    }

    /// Whether any local time the gap at `at` skipped (from `before` to `after`) matches.
    fn matches_in_gap(&self, at: Timestamp, before: Offset, after: Offset) -> bool {
        self.fields.next_civil(before.to_datetime(at), after.to_datetime(at)).is_some()
    }
}

/// The second before `at` (the offset in force just before a transition).
fn before(at: Timestamp) -> Timestamp {
    at.checked_sub(SignedDuration::from_secs(1)).unwrap_or(at)
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "cron_rules_tests.rs"]
mod rules_tests;
