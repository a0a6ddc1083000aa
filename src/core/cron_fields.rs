//! The classic cron syntax (Vixie cron / cronie), parsed into one bit set per field.
//!
//! Five fields (minute, hour, day of month, month, day of week) or six with seconds
//! first; `*`, numbers, names (`JAN`-`DEC`, `SUN`-`SAT`), ranges `a-b`, steps `*/n`,
//! `a-b/n` and `a/n` (from `a` to the field's end), lists joined by commas, 7 as
//! Sunday, and the macros `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily`
//! (`@midnight`) and `@hourly`. Two flags come from how the fields are written, as cronie
//! reads them (docs/cron.md):
//! - a job is *fixed-time* when neither its minute nor its hour field starts with `*`;
//! - days match both day fields when either starts with `*` (so `*/2` with a weekday
//!   means odd days that are that weekday), and either field otherwise.

use jiff::civil::{Date, DateTime, Time, Weekday};

/// An error message quotes at most this many characters of what it refuses.
const QUOTE_CHARS_MAX: usize = 40;

/// What a field is called in errors, its range, and its names.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const SECOND: FieldSpec = FieldSpec { name: "second", min: 0, max: 59, names: &[] };
const MINUTE: FieldSpec = FieldSpec { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: FieldSpec = FieldSpec { name: "hour", min: 0, max: 23, names: &[] };
const DAY_OF_MONTH: FieldSpec = FieldSpec { name: "day-of-month", min: 1, max: 31, names: &[] };
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
};
/// 0 and 7 are Sunday; names start at Sunday = 0.
const DAY_OF_WEEK: FieldSpec =
    FieldSpec { name: "day-of-week", min: 0, max: 7, names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"] };

/// Why an expression was refused: the field (when one is to blame) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSyntaxError {
    pub field: Option<&'static str>,
    pub problem: String,
}

impl std::fmt::Display for CronSyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(field) => write!(f, "{field} field: {}", self.problem),
            None => f.write_str(&self.problem),
        }
    }
}

/// A parsed expression: which values each field allows, and the two classic flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronFields {
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bits 1..=31.
    days_of_month: u64,
    /// Bits 1..=12.
    months: u64,
    /// Bits 0..=6, Sunday = 0.
    days_of_week: u64,
    /// Neither the minute nor the hour field starts with `*` (cronie's fixed-time job).
    pub fixed_time: bool,
    /// A day must match both day fields (one of them starts with `*`).
    days_match_both: bool,
}

/// Reads `expression`: a macro, or five or six fields.
///
/// # Errors
/// A wrong number of fields, an unknown macro, or a field that is not valid, named.
pub fn parse(expression: &str) -> Result<CronFields, CronSyntaxError> {
    let text = expression.trim();
    let expanded;
    let text = if let Some(name) = text.strip_prefix('@') {
        expanded = macro_fields(name)?;
        expanded.as_str()
    } else {
        text
    };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (second, rest) = match fields.len() {
        5 => ("0", &fields[..]),
        6 => (fields[0], &fields[1..]),
        count => {
            let problem = format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, found {count}"
            );
            return Err(CronSyntaxError { field: None, problem });
        }
    };
    let [minute, hour, day_of_month, month, day_of_week] = [rest[0], rest[1], rest[2], rest[3], rest[4]];
    let mut days_of_week = parse_field(day_of_week, &DAY_OF_WEEK)?;
    if days_of_week & (1 << 7) != 0 {
        days_of_week = (days_of_week & !(1 << 7)) | 1;
    }
    Ok(CronFields {
        seconds: parse_field(second, &SECOND)?,
        minutes: parse_field(minute, &MINUTE)?,
        hours: parse_field(hour, &HOUR)?,
        days_of_month: parse_field(day_of_month, &DAY_OF_MONTH)?,
        months: parse_field(month, &MONTH)?,
        days_of_week,
        fixed_time: !minute.starts_with('*') && !hour.starts_with('*'),
        days_match_both: day_of_month.starts_with('*') || day_of_week.starts_with('*'),
    })
}

/// The five fields a macro stands for (cronie's meanings and flags: `@hourly` has a
/// wildcard hour, the others run at a fixed time, midnight).
fn macro_fields(name: &str) -> Result<String, CronSyntaxError> {
    let fields = match name.to_ascii_lowercase().as_str() {
        "yearly" | "annually" => "0 0 1 1 *",
        "monthly" => "0 0 1 * *",
        "weekly" => "0 0 * * 0",
        "daily" | "midnight" => "0 0 * * *",
        "hourly" => "0 * * * *",
        "reboot" => {
            let problem = "@reboot has no time to schedule; a heartbeat runs on a schedule".to_owned();
            return Err(CronSyntaxError { field: None, problem });
        }
        _ => {
            let problem = format!(
                "unknown macro @{}; use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly",
                quote(name)
            );
            return Err(CronSyntaxError { field: None, problem });
        }
    };
    Ok(fields.to_owned())
}

fn parse_field(text: &str, spec: &FieldSpec) -> Result<u64, CronSyntaxError> {
    let refuse = |problem: String| CronSyntaxError { field: Some(spec.name), problem };
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(refuse(format!("{:?} has an empty list item (a comma with nothing on one side)", quote(text))));
        }
        bits |= parse_item(item, spec).map_err(refuse)?;
    }
    Ok(bits)
}

/// One list item: `*`, `a`, `a-b`, each optionally with `/step` (`a/step` runs from `a` to
/// the field's end).
fn parse_item(item: &str, spec: &FieldSpec) -> Result<u64, String> {
    let (base, step) = match item.split_once('/') {
        Some((base, step)) => (base, Some(step)),
        None => (item, None),
    };
    let (low, high) = if base == "*" {
        (spec.min, spec.max)
    } else if let Some((low, high)) = base.split_once('-') {
        let (low, high) = (value(low, spec)?, value(high, spec)?);
        if low > high {
            return Err(format!("the range {:?} runs backwards ({low} is after {high})", quote(base)));
        }
        (low, high)
    } else {
        let low = value(base, spec)?;
        (low, if step.is_some() { spec.max } else { low })
    };
    let step = match step {
        None => 1,
        Some(text) => {
            let span = spec.max - spec.min + 1;
            match text.parse::<u32>() {
                Ok(step) if (1..=span).contains(&step) => step,
                _ => {
                    return Err(format!(
                        "the step {:?} in {:?} must be a whole number from 1 to {span}",
                        quote(text),
                        quote(item)
                    ))
                }
            }
        }
    };
    let mut bits = 0u64;
    let mut at = low;
    while at <= high {
        bits |= 1 << at;
        at += step;
    }
    Ok(bits)
}

/// A number or a name of this field, within its range.
fn value(text: &str, spec: &FieldSpec) -> Result<u32, String> {
    if let Some(index) = spec.names.iter().position(|name| name.eq_ignore_ascii_case(text)) {
        // Names count from the field's first value: JAN is 1, SUN is 0.
        return Ok(spec.min + u32::try_from(index).unwrap_or(0));
    }
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        let names = if spec.names.is_empty() { String::new() } else { format!(" or a name like {}", spec.names[1]) };
        return Err(format!("{:?} is not a number{names}", quote(text)));
    }
    match text.parse::<u32>() {
        Ok(number) if (spec.min..=spec.max).contains(&number) => Ok(number),
        _ => Err(format!("{} is out of range {}-{}", quote(text), spec.min, spec.max)),
    }
}

/// At most `QUOTE_CHARS_MAX` characters of `text`, so a huge input is not echoed whole.
pub fn quote(text: &str) -> String {
    if text.chars().count() <= QUOTE_CHARS_MAX {
        return text.to_owned();
    }
    let cut: String = text.chars().take(QUOTE_CHARS_MAX).collect();
    format!("{cut}...")
}

fn has(bits: u64, at: u32) -> bool {
    bits & (1 << at) != 0
}

/// The least set bit at or above `from`, if any (below 64).
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let rest = bits >> from;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

impl CronFields {
    /// Whether the fields allow this date (month, and the day rule).
    pub fn matches_date(&self, date: Date) -> bool {
        let month = u32::try_from(date.month()).unwrap_or(0);
        if !has(self.months, month) {
            return false;
        }
        let day = u32::try_from(date.day()).unwrap_or(0);
        let weekday = u32::from(date.weekday().to_sunday_zero_offset().unsigned_abs());
        let (by_month, by_week) = (has(self.days_of_month, day), has(self.days_of_week, weekday));
        if self.days_match_both {
            by_month && by_week
        } else {
            by_month || by_week
        }
    }

    /// Whether the fields allow this local time (the day rule included).
    pub fn matches(&self, at: DateTime) -> bool {
        let time = at.time();
        self.matches_date(at.date())
            && has(self.hours, time.hour().unsigned_abs().into())
            && has(self.minutes, time.minute().unsigned_abs().into())
            && has(self.seconds, time.second().unsigned_abs().into())
    }

    /// The first time of day at or after `from` the fields allow (seconds resolution).
    fn next_time_of_day(&self, from: Time) -> Option<Time> {
        let (h0, m0, s0) = (
            from.hour().unsigned_abs().into(),
            from.minute().unsigned_abs().into(),
            from.second().unsigned_abs().into(),
        );
        let mut hour = next_bit(self.hours, h0)?;
        loop {
            let minute_from = if hour == h0 { m0 } else { 0 };
            let mut minute = next_bit(self.minutes, minute_from);
            while let Some(m) = minute {
                let second_from = if hour == h0 && m == m0 { s0 } else { 0 };
                if let Some(second) = next_bit(self.seconds, second_from) {
                    return Time::new(i8::try_from(hour).ok()?, i8::try_from(m).ok()?, i8::try_from(second).ok()?, 0)
                        .ok();
                }
                minute = next_bit(self.minutes, m + 1);
            }
            hour = next_bit(self.hours, hour + 1)?;
        }
    }

    /// The first civil time at or after `from` and before `until` that the fields allow.
    pub fn next_civil(&self, from: DateTime, until: DateTime) -> Option<DateTime> {
        let mut date = from.date();
        let mut time = Some(from.time());
        while date.to_datetime(Time::midnight()) < until {
            if !has(self.months, u32::try_from(date.month()).unwrap_or(0)) {
                // Skip to the first of the next month.
                date = date.first_of_month().checked_add(jiff::Span::new().months(1)).ok()?;
                time = Some(Time::midnight());
                continue;
            }
            if self.matches_date(date) {
                if let Some(found) = time.and_then(|time| self.next_time_of_day(time)) {
                    let found = date.to_datetime(found);
                    return (found < until).then_some(found);
                }
            }
            date = date.tomorrow().ok()?;
            time = Some(Time::midnight());
        }
        None
    }

    /// Plain words for what the fields allow (the preview's header).
    pub fn describe(&self) -> String {
        let kind = if self.fixed_time { "fixed-time" } else { "wildcard" };
        let days = if self.days_match_both { "both day fields" } else { "either day field" };
        format!(
            "seconds {}; minutes {}; hours {}; days of month {}; months {}; days of week {} ({kind} job; a day matches {days})",
            list(self.seconds, 0, 59),
            list(self.minutes, 0, 59),
            list(self.hours, 0, 23),
            list(self.days_of_month, 1, 31),
            list(self.months, 1, 12),
            weekdays(self.days_of_week),
        )
    }
}

/// `*` for every value, else the values as ranges (`1-5,7`).
fn list(bits: u64, min: u32, max: u32) -> String {
    if (min..=max).all(|at| has(bits, at)) {
        return "*".to_owned();
    }
    let mut parts = Vec::new();
    let mut at = min;
    while at <= max {
        if has(bits, at) {
            let start = at;
            while at < max && has(bits, at + 1) {
                at += 1;
            }
            parts.push(if start == at { start.to_string() } else { format!("{start}-{at}") });
        }
        at += 1;
    }
    parts.join(",")
}

fn weekdays(bits: u64) -> String {
    if (0..=6).all(|at| has(bits, at)) {
        return "*".to_owned();
    }
    let names = [
        Weekday::Sunday,
        Weekday::Monday,
        Weekday::Tuesday,
        Weekday::Wednesday,
        Weekday::Thursday,
        Weekday::Friday,
        Weekday::Saturday,
    ];
    (0..=6u32)
        .filter(|at| has(bits, *at))
        .map(|at| format!("{:?}", names[at as usize])[..3].to_owned())
        .collect::<Vec<_>>()
        .join(",")
}
