//! The checker's own cron: a plain reading of docs/cron.md, written without looking at the
//! engine's search. It walks whole minutes of real time one at a time and asks, for each,
//! what the local clock reads there; slow (a day is 1,440 steps) and obviously right.
//!
//! The DST rules, for a *fixed-time* job (neither minute nor hour starts with `*`):
//! - a minute whose local time repeats one seen just before (the second pass of a fall-back)
//!   does not run;
//! - at the first minute after a spring-forward gap, the job runs if any skipped local
//!   minute matched.
//!
//! A wildcard job runs at every minute whose local time matches. Offset changes of 3 hours
//! or more get no special treatment.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// Offset changes at least this large are not daylight saving (a zone crossing the date line).
const DST_SHIFT_SECS_LIMIT: i64 = 3 * 3_600;
/// How far the walk looks for a next time before it gives up.
const WALK_DAYS_MAX: i64 = 400;

const MINUTE: SignedDuration = SignedDuration::from_secs(60);

/// One cron field: which values match, and whether its text starts with `*`.
#[derive(Debug, Clone)]
struct Field {
    allowed: Vec<bool>,
    star: bool,
}

impl Field {
    fn has(&self, value: i64) -> bool {
        usize::try_from(value).ok().and_then(|index| self.allowed.get(index)).copied().unwrap_or(false)
    }
}

/// A cron expression in its zone, as the reference reads it.
#[derive(Debug, Clone)]
pub struct CronReference {
    seconds: Field,
    minutes: Field,
    hours: Field,
    days: Field,
    months: Field,
    weekdays: Field,
    zone: TimeZone,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One value: a number, or a name (`names[i]` stands for `first + i`).
fn value(text: &str, names: &[&str], first: i64) -> Option<i64> {
    if let Ok(number) = text.parse::<i64>() {
        return Some(number);
    }
    let lower = text.to_ascii_lowercase();
    names.iter().position(|name| *name == lower).map(|index| first + index as i64)
}

/// A field's text: a comma list of `*`, `a`, `a-b`, each with an optional `/step`.
fn field(text: &str, low: i64, high: i64, names: &[&str]) -> Option<Field> {
    let mut allowed = vec![false; usize::try_from(high + 1).ok()?];
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, step.parse::<i64>().ok().filter(|step| *step > 0)?),
            None => (item, 1),
        };
        let (from, to) = if range == "*" {
            (low, high)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, names, low)?, value(b, names, low)?)
        } else {
            let a = value(range, names, low)?;
            // `a/n` runs from `a` to the field's end.
            (a, if item.contains('/') { high } else { a })
        };
        if from < low || to > high || from > to {
            return None;
        }
        let mut at = from;
        while at <= to {
            allowed[usize::try_from(at).ok()?] = true;
            at += step;
        }
    }
    Some(Field { allowed, star: text.starts_with('*') })
}

impl CronReference {
    /// Reads `expression` in the zone named `zone`; `None` for anything it does not know.
    pub fn parse(expression: &str, zone: &str) -> Option<Self> {
        let expanded = match expression.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let mut parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() == 5 {
            parts.insert(0, "0");
        }
        let [seconds, minutes, hours, days, months, weekdays] = parts.as_slice() else { return None };
        let mut weekdays = field(weekdays, 0, 7, &WEEKDAYS)?;
        // 7 is Sunday too.
        if weekdays.allowed[7] {
            weekdays.allowed[0] = true;
        }
        Some(Self {
            seconds: field(seconds, 0, 59, &[])?,
            minutes: field(minutes, 0, 59, &[])?,
            hours: field(hours, 0, 23, &[])?,
            days: field(days, 1, 31, &[])?,
            months: field(months, 1, 12, &MONTHS)?,
            weekdays,
            zone: TimeZone::get(zone).ok()?,
        })
    }

    fn fixed_time(&self) -> bool {
        !self.minutes.star && !self.hours.star
    }

    /// Whether a local minute matches (the seconds field aside).
    fn matches(&self, local: DateTime) -> bool {
        let day = self.days.has(i64::from(local.day()));
        let weekday = self.weekdays.has(i64::from(local.weekday().to_sunday_zero_offset()));
        // Both day fields restricted: either one; otherwise both must match.
        let day_ok = if !self.days.star && !self.weekdays.star { day || weekday } else { day && weekday };
        self.minutes.has(i64::from(local.minute()))
            && self.hours.has(i64::from(local.hour()))
            && self.months.has(i64::from(local.month()))
            && day_ok
    }

    fn local(&self, at: Timestamp) -> DateTime {
        self.zone.to_datetime(at)
    }

    fn offset_secs(&self, at: Timestamp) -> i64 {
        i64::from(self.zone.to_offset(at).seconds())
    }

    /// Whether the minute starting at `minute` runs the job (at its matching seconds).
    fn minute_runs(&self, minute: Timestamp) -> bool {
        let before = minute - MINUTE;
        let shift = self.offset_secs(minute) - self.offset_secs(before);
        let dst = shift != 0 && shift.abs() < DST_SHIFT_SECS_LIMIT;
        let local = self.local(minute);
        if self.fixed_time() && self.repeats_earlier_minute(minute) {
            return false;
        }
        if self.matches(local) {
            return true;
        }
        if self.fixed_time() && dst && shift > 0 {
            // Spring-forward: the local minutes from (local - shift) up to local were skipped.
            let skipped = shift / 60;
            return (1..=skipped).any(|back| {
                local.checked_sub(SignedDuration::from_secs(back * 60)).is_ok_and(|time| self.matches(time))
            });
        }
        false
    }

    /// Whether the local time at `minute` was already shown a little earlier: the second
    /// pass of a fall-back. The clock went back by `d` within the last 3 hours exactly when
    /// the offset 3 hours ago exceeds today's by `d`; then `minute - d` showed the same time.
    fn repeats_earlier_minute(&self, minute: Timestamp) -> bool {
        let now_offset = self.offset_secs(minute);
        let back = self.offset_secs(minute - SignedDuration::from_secs(DST_SHIFT_SECS_LIMIT)) - now_offset;
        if back <= 0 || back >= DST_SHIFT_SECS_LIMIT {
            return false;
        }
        let earlier = minute - SignedDuration::from_secs(back);
        self.offset_secs(earlier) == now_offset + back && self.local(earlier) == self.local(minute)
    }

    /// The first run strictly after `after`.
    pub fn next_run_after(&self, after: Timestamp) -> Option<Timestamp> {
        let first_minute = Timestamp::from_second(after.as_second().div_euclid(60) * 60).ok()?;
        for step in 0..WALK_DAYS_MAX * 1_440 {
            let minute = first_minute + SignedDuration::from_secs(step * 60);
            if !self.minute_runs(minute) {
                continue;
            }
            let matched_local = self.matches(self.local(minute));
            for second in 0..60_i64 {
                let at = minute + SignedDuration::from_secs(second);
                // A gap's catch-up run falls on the minute's first instant.
                let runs = if matched_local { self.seconds.has(second) } else { second == 0 };
                if runs && at > after {
                    return Some(at);
                }
            }
        }
        None
    }
}
