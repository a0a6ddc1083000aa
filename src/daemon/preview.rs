//! `systole schedule preview`, like `systemd-analyze calendar`: the next runs of a
//! schedule, one line each, starting with the local time in RFC 3339 (seconds precision).

use std::fmt::Write;

use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::core::active_hours::zone_by_name;
use crate::core::cron::CronSchedule;
use crate::core::duration::{format_duration, parse_duration};
use crate::core::schedule_fields::parse_at;
use crate::core::slots::add;

/// The most runs one preview lists.
pub const PREVIEW_COUNT_MAX: usize = 1_000;

/// What to preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviewSpec {
    Cron { expression: String },
    Every { duration: String },
    At { time: String },
}

/// A preview that could not be made: the option at fault and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--{option}: {problem}")]
pub struct PreviewError {
    pub option: &'static str,
    pub problem: String,
}

fn refuse(option: &'static str, problem: impl ToString) -> PreviewError {
    PreviewError { option, problem: problem.to_string() }
}

/// The preview: a description, then one line per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    pub description: String,
    pub lines: Vec<String>,
}

/// Lists the first `count` runs of `spec` after `from`, in zone `tz` (UTC by default).
///
/// # Errors
/// When the expression, duration, time, zone or count is refused; the error names the option.
pub fn preview(spec: &PreviewSpec, tz: Option<&str>, from: Timestamp, count: usize) -> Result<Preview, PreviewError> {
    if count == 0 || count > PREVIEW_COUNT_MAX {
        return Err(refuse("count", format!("{count} is out of range; allowed from 1 to {PREVIEW_COUNT_MAX}")));
    }
    let zone_name = tz.unwrap_or("UTC");
    let zone = zone_by_name(zone_name).map_err(|e| refuse("tz", e))?;
    let (description, runs) = match spec {
        PreviewSpec::Cron { expression } => {
            let schedule = CronSchedule::parse(expression, zone_name).map_err(|e| refuse("cron", e))?;
            let mut runs = Vec::new();
            let mut at = from;
            while runs.len() < count {
                let Some(next) = schedule.next_after(at) else { break };
                runs.push(next);
                at = next;
            }
            if runs.is_empty() {
                return Err(refuse("cron", format!("{expression:?} has no run after {from}; it would never fire")));
            }
            (schedule.describe(), runs)
        }
        PreviewSpec::Every { duration } => {
            let interval = parse_duration(duration).map_err(|e| refuse("every", e))?;
            if interval.is_zero() {
                return Err(refuse("every", "must be longer than 0s"));
            }
            let runs = (1..=count as u32).map(|k| add(from, interval * k)).collect();
            (format!("every {} (elapsed time, from {from})", format_duration(interval)), runs)
        }
        PreviewSpec::At { time } => {
            let at = parse_at(time, &zone).map_err(|e| refuse("at", e))?;
            (format!("once at {at}"), vec![at])
        }
    };
    Ok(Preview { description, lines: lines(&runs, &zone) })
}

fn lines(runs: &[Timestamp], zone: &TimeZone) -> Vec<String> {
    let mut previous_offset = None;
    runs.iter()
        .map(|run| {
            let local = run.to_zoned(zone.clone());
            let mut line = local.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
            let _ = write!(line, "  {}  {}", run.strftime("%Y-%m-%dT%H:%M:%SZ"), local.strftime("%a"));
            let offset = local.offset();
            if previous_offset.is_some_and(|previous| previous != offset) {
                let _ = write!(line, "  (UTC offset now {offset})");
            }
            previous_offset = Some(offset);
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: PreviewSpec, tz: Option<&str>, from: &str, count: usize) -> Result<Preview, PreviewError> {
        preview(&spec, tz, from.parse().expect("timestamp"), count)
    }

    fn cron(expression: &str) -> PreviewSpec {
        PreviewSpec::Cron { expression: expression.to_owned() }
    }

    #[test]
    fn lines_start_with_the_local_time_and_its_offset() {
        let preview = run(cron("30 2 * * *"), Some("America/New_York"), "2025-03-08T12:00:00Z", 2).expect("preview");
        assert!(preview.lines[0].starts_with("2025-03-09T03:00:00-04:00 "), "{:?}", preview.lines);
        assert!(preview.lines[1].starts_with("2025-03-10T02:30:00-04:00 "), "{:?}", preview.lines);
        assert!(preview.lines[0].contains("2025-03-09T07:00:00Z") && preview.lines[0].contains("Sun"));
        assert!(!preview.description.is_empty());
    }

    #[test]
    fn cronie_rules_show_in_the_preview() {
        let local = |preview: Preview| -> Vec<String> {
            preview.lines.iter().map(|line| line.split_whitespace().next().unwrap_or("").to_owned()).collect()
        };
        // A range is fixed-time: the repeated 01:30 runs once.
        let range = run(cron("30 1-3 * * *"), Some("America/New_York"), "2026-11-01T04:00:00Z", 3).expect("preview");
        assert!(range.description.contains("fixed-time"), "{}", range.description);
        assert_eq!(
            local(range),
            ["2026-11-01T01:30:00-04:00", "2026-11-01T02:30:00-05:00", "2026-11-01T03:30:00-05:00"]
        );
        // A list in the spring gap runs once, right after it.
        let list = run(cron("0,20 2 * * *"), Some("Australia/Sydney"), "2026-10-03T12:00:00Z", 1).expect("preview");
        assert_eq!(local(list), ["2026-10-04T03:00:00+11:00"]);
        // `*/2` in a day field with a weekday: both must match.
        let days = run(cron("0 0 */2 * 1"), Some("UTC"), "2026-01-01T00:00:00Z", 2).expect("preview");
        assert_eq!(local(days), ["2026-01-05T00:00:00+00:00", "2026-01-19T00:00:00+00:00"]);
        let weekly = run(cron("@weekly"), Some("UTC"), "2026-01-01T00:00:00Z", 1).expect("preview");
        assert_eq!(local(weekly), ["2026-01-04T00:00:00+00:00"]);
        let refused =
            run(cron("0,,5 * * * *"), Some("UTC"), "2026-01-01T00:00:00Z", 1).map(|_| ()).expect_err("refused");
        assert!(refused.to_string().contains("minute field"), "{refused}");
    }

    #[test]
    fn an_offset_change_is_noted() {
        let preview = run(cron("0 12 * * *"), Some("Europe/Berlin"), "2026-03-27T00:00:00Z", 3).expect("preview");
        assert!(preview.lines[2].contains("UTC offset now +02"), "{:?}", preview.lines);
        assert!(!preview.lines[0].contains("offset"));
    }

    #[test]
    fn every_and_at() {
        let every =
            run(PreviewSpec::Every { duration: "90m".into() }, None, "2026-01-01T00:00:00Z", 2).expect("preview");
        assert!(every.lines[0].starts_with("2026-01-01T01:30:00+00:00 "));
        assert!(every.lines[1].starts_with("2026-01-01T03:00:00+00:00 "));
        let at = PreviewSpec::At { time: "2026-12-01T14:00:00+08:00".into() };
        let once = run(at, Some("Asia/Shanghai"), "2026-01-01T00:00:00Z", 5).expect("preview");
        assert_eq!(once.lines.len(), 1);
        assert!(once.lines[0].starts_with("2026-12-01T14:00:00+08:00 "));
        let local = PreviewSpec::At { time: "2026-12-01T14:00:00".into() };
        let local = run(local, Some("Asia/Shanghai"), "2026-01-01T00:00:00Z", 1).expect("preview");
        assert!(local.lines[0].starts_with("2026-12-01T14:00:00+08:00 "), "a local time is read in --tz");
    }

    #[test]
    fn refusals_name_the_option() {
        let cases = [
            (run(cron("61 * * * *"), None, "2026-01-01T00:00:00Z", 1), "cron"),
            (run(cron("0 9 * * *"), Some("Mars/Base"), "2026-01-01T00:00:00Z", 1), "tz"),
            (run(cron("0 0 30 2 *"), None, "2026-01-01T00:00:00Z", 1), "cron"),
            (run(PreviewSpec::Every { duration: "5 minutes".into() }, None, "2026-01-01T00:00:00Z", 1), "every"),
            (run(PreviewSpec::At { time: "tomorrow".into() }, None, "2026-01-01T00:00:00Z", 1), "at"),
            (run(cron("* * * * *"), None, "2026-01-01T00:00:00Z", 0), "count"),
        ];
        for (result, option) in cases {
            let error = result.expect_err("refused");
            assert_eq!(error.option, option, "{error}");
            assert!(error.to_string().starts_with(&format!("--{option}: ")));
        }
    }
}
