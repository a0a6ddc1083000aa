//! Schedules as users write them (config tables, tool arguments, the preview command):
//! exactly one of `every`, `cron` (with an optional `timezone`) or `at`, validated into a
//! [`Schedule`] with an error that names the field at fault.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

use crate::core::active_hours::{zone_by_name, ActiveHours};
use crate::core::cron::CronSchedule;
use crate::core::schedule::Schedule;
use crate::limits::{CRON_ACTIVE_SEARCH_DAYS, CRON_ACTIVE_SEARCH_SLOTS_MAX};

/// The schedule fields of one definition, as written.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScheduleFields<'a> {
    pub every: Option<&'a str>,
    pub cron: Option<&'a str>,
    /// The zone of `cron` (and of an `at` written without an offset).
    pub timezone: Option<&'a str>,
    pub at: Option<&'a str>,
}

/// A refused schedule: the field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct ScheduleFieldError {
    pub field: &'static str,
    pub problem: String,
}

fn refuse(field: &'static str, problem: impl ToString) -> ScheduleFieldError {
    ScheduleFieldError { field, problem: problem.to_string() }
}

impl ScheduleFields<'_> {
    pub fn is_empty(&self) -> bool {
        self.every.is_none() && self.cron.is_none() && self.at.is_none()
    }

    /// The schedule these fields describe; `default_zone` is the agent's (or the
    /// config's) zone, used when no `timezone` is given. Never a fixed offset: a cron
    /// must follow its zone's daylight-saving rules.
    ///
    /// # Errors
    /// None or more than one kind given, or a value refused; the error names the field.
    pub fn schedule(&self, default_zone: &str) -> Result<Schedule, ScheduleFieldError> {
        let zone_name = self.timezone.unwrap_or(default_zone);
        match (self.every, self.cron, self.at) {
            (Some(every), None, None) => {
                if self.timezone.is_some() {
                    return Err(refuse("timezone", "applies to `cron` and `at` only; `every` is elapsed time"));
                }
                Schedule::every(every).map_err(|problem| refuse("every", problem))
            }
            (None, Some(cron), None) => CronSchedule::parse(cron, zone_name).map(Schedule::cron).map_err(|error| {
                let field = if matches!(error, crate::core::cron::CronScheduleError::Zone { .. }) {
                    "timezone"
                } else {
                    "cron"
                };
                refuse(field, error)
            }),
            (None, None, Some(at)) => {
                let zone = zone_by_name(zone_name).map_err(|error| refuse("timezone", error))?;
                parse_at(at, &zone).map(Schedule::At).map_err(|problem| refuse("at", problem))
            }
            (None, None, None) => Err(refuse("schedule", "is missing; give one of `every`, `cron` or `at`")),
            _ => Err(refuse("schedule", "give only one of `every`, `cron` or `at`")),
        }
    }
}

/// An `at` time: RFC 3339 with an offset, a zoned time with its zone in brackets, or a
/// local time read in `zone`.
///
/// # Errors
/// A text that is none of these, or a local time that does not exist in `zone`.
pub fn parse_at(text: &str, zone: &TimeZone) -> Result<Timestamp, String> {
    if let Ok(at) = text.parse::<Timestamp>() {
        return Ok(at);
    }
    if let Ok(zoned) = text.parse::<Zoned>() {
        return Ok(zoned.timestamp());
    }
    let local: jiff::civil::DateTime = text
        .parse()
        .map_err(|_| format!("{text:?} is not a time; write RFC 3339 like \"2026-12-01T14:00:00+08:00\""))?;
    local.to_zoned(zone.clone()).map(|zoned| zoned.timestamp()).map_err(|e| e.to_string())
}

/// An `every` schedule made to meet its active hours (ADR 0010). Daily (`every = "24h"`,
/// Spacebot's `interval_secs = 86400`) with a window means "once a day, in the window":
/// it becomes a cron at the window's opening, in the window's zone, so it runs there every
/// day whatever the time the daemon started and across DST changes. Any other `every`
/// whose slots keep a fixed set of times of day (its interval shares a factor with a day
/// larger than the window) could miss the window forever, depending on when it was armed:
/// refused, with what to write instead. Other schedules pass unchanged.
///
/// # Errors
/// A message saying why the slots could miss the window and what to write instead.
pub fn fit_every_to_window(schedule: Schedule, window: Option<&ActiveHours>) -> Result<Schedule, String> {
    let (Schedule::Every(interval), Some(window)) = (&schedule, window) else { return Ok(schedule) };
    let (hour, minute) = window.start_hour_minute();
    let daily_cron = format!("{minute} {hour} * * *");
    let interval_secs = interval.as_secs();
    if interval_secs == SECS_PER_DAY && interval.subsec_nanos() == 0 {
        return CronSchedule::parse(&daily_cron, window.zone_name()).map(Schedule::cron).map_err(|e| e.to_string());
    }
    // The slots' times of day are the arming time plus multiples of gcd(interval, day).
    let spacing_secs = gcd(interval_secs.max(1), SECS_PER_DAY);
    let window_secs = u64::from(window.length_minutes()) * 60;
    if spacing_secs > window_secs {
        let spacing = crate::core::duration::format_duration(std::time::Duration::from_secs(spacing_secs));
        return Err(format!(
            "every {} falls at the same times of day, {spacing} apart, and the window {}-{} ({}) is shorter, \
             so it could miss the window every day; for once a day in the window write every = 24h (it runs \
             at {}) or a cron like {daily_cron:?}, or use an interval of at most {} minutes",
            crate::core::duration::format_duration(*interval),
            window.start_text(),
            window.end_text(),
            window.zone_name(),
            window.start_text(),
            window.length_minutes(),
        ));
    }
    Ok(schedule)
}

const SECS_PER_DAY: u64 = 24 * 60 * 60;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Refuses a cron that would never run: one with no occurrence after `from` (30 February),
/// or whose every occurrence falls outside its active hours. Searches from `from` for [`CRON_ACTIVE_SEARCH_DAYS`] days or
/// [`CRON_ACTIVE_SEARCH_SLOTS_MAX`] occurrences; a schedule too dense to search that far
/// has occurrences every few minutes and is accepted.
///
/// # Errors
/// A message naming the expression and the window.
pub fn check_cron_meets_window(
    schedule: &Schedule,
    window: Option<&ActiveHours>,
    from: Timestamp,
) -> Result<(), String> {
    let Schedule::Cron(cron) = schedule else { return Ok(()) };
    if cron.next_after(from).is_none() {
        return Err(format!("cron {:?} has no future occurrence; it would never run", cron.expression()));
    }
    let Some(window) = window else { return Ok(()) };
    let horizon = from.checked_add(SignedDuration::from_hours(24 * CRON_ACTIVE_SEARCH_DAYS)).unwrap_or(Timestamp::MAX);
    let mut at = from;
    let mut seen = 0;
    loop {
        if seen >= CRON_ACTIVE_SEARCH_SLOTS_MAX {
            return Ok(()); // too dense to search a year: it runs every few minutes
        }
        match cron.next_after(at) {
            None if seen == 0 => return Err(format!("cron {:?} has no future occurrence", cron.expression())),
            None => break,
            // Rarer than yearly (29 February): nothing to judge within the horizon.
            Some(next) if next > horizon && seen == 0 => return Ok(()),
            Some(next) if next > horizon => break,
            Some(next) if window.contains(next) => return Ok(()),
            Some(next) => {
                seen += 1;
                at = next;
            }
        }
    }
    Err(format!(
        "every occurrence of cron {:?} in {} falls outside active_hours {}-{} {}; it would never run",
        cron.expression(),
        cron.zone_name(),
        window.start_text(),
        window.end_text(),
        window.zone_name()
    ))
}

#[cfg(test)]
mod window_fit_tests {
    use std::time::Duration;

    use super::*;

    fn window(start: &str, end: &str) -> ActiveHours {
        ActiveHours::new(start, end, "Europe/Berlin").expect("valid window")
    }

    #[test]
    fn daily_with_a_window_becomes_a_cron_at_its_opening_in_its_zone() {
        let fitted = fit_every_to_window(Schedule::Every(Duration::from_secs(86_400)), Some(&window("09:00", "10:00")));
        let Ok(Schedule::Cron(cron)) = fitted else { panic!("a daily cron, got {fitted:?}") };
        assert_eq!((cron.expression(), cron.zone_name()), ("0 9 * * *", "Europe/Berlin"));
        let late = fit_every_to_window(Schedule::Every(Duration::from_secs(86_400)), Some(&window("22:30", "01:00")));
        assert!(matches!(late, Ok(Schedule::Cron(cron)) if cron.expression() == "30 22 * * *"));
    }

    #[test]
    fn intervals_whose_slots_could_miss_the_window_are_refused() {
        for (secs, start, end) in [
            (2 * 86_400, "09:00", "17:00"),
            (12 * 3_600, "09:00", "10:00"),
            (3_600, "09:00", "09:30"),
            (90, "09:00", "09:01"),
        ] {
            let fitted = fit_every_to_window(Schedule::Every(Duration::from_secs(secs)), Some(&window(start, end)));
            let Err(problem) = fitted else { panic!("every {secs}s in {start}-{end} accepted") };
            assert!(problem.contains("could miss the window"), "{problem}");
        }
    }

    #[test]
    fn intervals_that_sweep_the_day_or_fit_the_window_pass_unchanged() {
        for (secs, start, end) in [
            (1_800, "09:00", "10:00"),
            (3_600, "09:00", "17:00"),
            (25 * 3_600, "09:00", "10:00"),
            (7 * 60, "09:00", "09:05"),
        ] {
            let every = Schedule::Every(Duration::from_secs(secs));
            assert_eq!(fit_every_to_window(every.clone(), Some(&window(start, end))), Ok(every));
        }
        let daily = Schedule::Every(Duration::from_secs(86_400));
        assert_eq!(fit_every_to_window(daily.clone(), None), Ok(daily), "no window, nothing to fit");
        let whole_day = window("00:00", "24:00");
        assert_eq!(whole_day.length_minutes(), 1_440);
        let every = Schedule::Every(Duration::from_secs(2 * 3_600));
        assert_eq!(fit_every_to_window(every.clone(), Some(&whole_day)), Ok(every), "a whole-day window fits all");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(every: Option<&'a str>, cron: Option<&'a str>, at: Option<&'a str>) -> ScheduleFields<'a> {
        ScheduleFields { every, cron, timezone: None, at }
    }

    fn from() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("valid")
    }

    #[test]
    fn exactly_one_kind_and_errors_name_the_field() {
        assert!(matches!(fields(Some("1h"), None, None).schedule("UTC"), Ok(Schedule::Every(_))));
        assert!(matches!(fields(None, Some("0 9 * * 1-5"), None).schedule("Asia/Shanghai"), Ok(Schedule::Cron(_))));
        assert!(matches!(fields(None, None, Some("2026-12-01T14:00:00+08:00")).schedule("UTC"), Ok(Schedule::At(_))));
        assert_eq!(fields(None, None, None).schedule("UTC").expect_err("none").field, "schedule");
        assert_eq!(fields(Some("1h"), Some("* * * * *"), None).schedule("UTC").expect_err("two").field, "schedule");
        assert_eq!(fields(None, Some("61 * * * *"), None).schedule("UTC").expect_err("bad").field, "cron");
        assert_eq!(fields(Some("often"), None, None).schedule("UTC").expect_err("bad").field, "every");
        assert_eq!(fields(None, None, Some("tomorrow")).schedule("UTC").expect_err("bad").field, "at");
        let zoned = ScheduleFields { cron: Some("0 9 * * *"), timezone: Some("Mars/Olympus"), ..Default::default() };
        assert_eq!(zoned.schedule("UTC").expect_err("zone").field, "timezone");
        let offset = ScheduleFields { cron: Some("0 9 * * *"), timezone: Some("+08:00"), ..Default::default() };
        assert_eq!(offset.schedule("UTC").expect_err("fixed offsets are refused").field, "timezone");
    }

    #[test]
    fn a_local_at_is_read_in_the_zone() {
        let local =
            ScheduleFields { at: Some("2026-07-01T09:00:00"), timezone: Some("Europe/Berlin"), ..Default::default() };
        assert_eq!(local.schedule("UTC"), Ok(Schedule::At("2026-07-01T07:00:00Z".parse().expect("valid"))));
    }

    #[test]
    fn a_cron_that_never_meets_its_window_is_refused() {
        let night = ActiveHours::new("09:00", "17:00", "Europe/Berlin").expect("valid");
        let at_three = fields(None, Some("0 3 * * *"), None).schedule("Europe/Berlin").expect("valid");
        let error = check_cron_meets_window(&at_three, Some(&night), from()).expect_err("never inside");
        assert!(error.contains("would never run") && error.contains("0 3 * * *"), "{error}");
        let at_ten = fields(None, Some("0 10 * * *"), None).schedule("Europe/Berlin").expect("valid");
        assert_eq!(check_cron_meets_window(&at_ten, Some(&night), from()), Ok(()));
        assert_eq!(check_cron_meets_window(&at_three, None, from()), Ok(()), "no window, nothing to check");
        // Only on 29 February: the next one is in 2028, beyond a year's search; not refused.
        let leap = fields(None, Some("0 3 29 2 *"), None).schedule("Europe/Berlin").expect("valid");
        assert_eq!(check_cron_meets_window(&leap, Some(&night), from()), Ok(()));
        // Dense: every minute; the window is hit at once.
        let dense = fields(None, Some("* * * * *"), None).schedule("Europe/Berlin").expect("valid");
        assert_eq!(check_cron_meets_window(&dense, Some(&night), from()), Ok(()));
    }

    #[test]
    fn a_cron_with_no_occurrence_is_refused() {
        let never = fields(None, Some("0 0 30 2 *"), None).schedule("UTC").expect("parses");
        let window = ActiveHours::new("00:00", "24:00", "UTC").expect("valid");
        assert!(check_cron_meets_window(&never, Some(&window), from()).is_err());
        let error = check_cron_meets_window(&never, None, from()).expect_err("refused without a window too");
        assert!(error.contains("no future occurrence"), "{error}");
    }
}
