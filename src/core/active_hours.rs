//! Active hours: a daily local-time window in an IANA time zone.
//!
//! `start` is inclusive and `end` exclusive, both `HH:MM`; `end` may be `24:00`, and a
//! window whose end is before its start wraps midnight (`22:00`-`06:00`). The zone is kept
//! by name, never as a fixed offset, so the window follows daylight-saving changes.

use std::fmt;
use std::sync::Arc;

use jiff::{tz::TimeZone, Timestamp};

const MINUTES_PER_DAY: u16 = 24 * 60;

/// Why an active-hours window was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActiveHoursError {
    #[error("{text:?} is not a time of day; write HH:MM from 00:00 to 24:00")]
    BadTime { text: String },
    #[error("24:00 is only allowed as the end of a window")]
    MidnightStart,
    #[error("start and end are both {text}; an empty window would never run (use 00:00-24:00 for all day)")]
    Empty { text: String },
    #[error("{name:?} is not a known IANA time zone (like \"Europe/Berlin\")")]
    UnknownZone { name: String },
}

/// A daily window, evaluated in local time of its zone. Shared: a definition holds a
/// pointer where the window inline made it 40 bytes (a heartbeat's copy in the memory
/// store 32 bytes larger, a size class up), and a copy takes a count, not the zone's name.
#[derive(Clone)]
pub struct ActiveHours {
    window: Arc<Window>,
}

struct Window {
    start_minute: u16,
    end_minute: u16,
    zone_name: String,
    zone: TimeZone,
}

impl Window {
    /// What equality and order compare: the zone by its name.
    fn compared(&self) -> (u16, u16, &str) {
        (self.start_minute, self.end_minute, &self.zone_name)
    }
}

// Written as the fields' derived form was, so logs and traces read the same.
impl fmt::Debug for ActiveHours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let window = &*self.window;
        f.debug_struct("ActiveHours")
            .field("start_minute", &window.start_minute)
            .field("end_minute", &window.end_minute)
            .field("zone_name", &window.zone_name)
            .field("zone", &window.zone)
            .finish()
    }
}

impl PartialEq for ActiveHours {
    fn eq(&self, other: &Self) -> bool {
        self.window.compared() == other.window.compared()
    }
}
impl Eq for ActiveHours {}

// In the order of what equality compares, so windows can be interned.
impl Ord for ActiveHours {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.window.compared().cmp(&other.window.compared())
    }
}

impl PartialOrd for ActiveHours {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl ActiveHours {
    /// Builds a window from `HH:MM` strings and an IANA zone name.
    ///
    /// # Errors
    /// On a malformed time, `24:00` as start, an empty window or an unknown zone.
    pub fn new(start: &str, end: &str, zone_name: &str) -> Result<Self, ActiveHoursError> {
        let start_minute = parse_minute_of_day(start)?;
        let end_minute = parse_minute_of_day(end)?;
        if start_minute == MINUTES_PER_DAY {
            return Err(ActiveHoursError::MidnightStart);
        }
        if start_minute == end_minute {
            return Err(ActiveHoursError::Empty { text: start.to_owned() });
        }
        let zone = zone_by_name(zone_name)?;
        Ok(Self { window: Arc::new(Window { start_minute, end_minute, zone_name: zone_name.to_owned(), zone }) })
    }

    /// Spacebot's whole-hour form: `active_start_hour = 9, active_end_hour = 17`.
    ///
    /// # Errors
    /// As [`ActiveHours::new`], with hours outside 0..=24 reported as bad times.
    pub fn from_hours(start_hour: u8, end_hour: u8, zone_name: &str) -> Result<Self, ActiveHoursError> {
        Self::new(&format!("{start_hour:02}:00"), &format!("{end_hour:02}:00"), zone_name)
    }

    /// Whether `at` falls inside the window, in the window's local time.
    pub fn contains(&self, at: Timestamp) -> bool {
        let local = at.to_zoned(self.window.zone.clone());
        // hour() is 0..=23 and minute() 0..=59, so the casts cannot truncate.
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.window.start_minute < self.window.end_minute {
            self.window.start_minute <= minute && minute < self.window.end_minute
        } else {
            minute >= self.window.start_minute || minute < self.window.end_minute
        }
    }

    pub fn start_text(&self) -> String {
        format_minute_of_day(self.window.start_minute)
    }

    pub fn end_text(&self) -> String {
        format_minute_of_day(self.window.end_minute)
    }

    pub fn zone_name(&self) -> &str {
        &self.window.zone_name
    }

    /// Where the window opens, as (hour, minute) of local time.
    pub fn start_hour_minute(&self) -> (u16, u16) {
        (self.window.start_minute / 60, self.window.start_minute % 60)
    }

    /// How long the window is open each day, in minutes (a window may wrap midnight).
    pub fn length_minutes(&self) -> u16 {
        if self.window.end_minute > self.window.start_minute {
            self.window.end_minute - self.window.start_minute // `00:00`-`24:00` is the whole day
        } else {
            self.window.end_minute + MINUTES_PER_DAY - self.window.start_minute
        }
    }
}

/// Looks up an IANA zone by name, refusing fixed offsets.
///
/// # Errors
/// When the name is not in the time-zone database.
pub fn zone_by_name(name: &str) -> Result<TimeZone, ActiveHoursError> {
    TimeZone::get(name).map_err(|_| ActiveHoursError::UnknownZone { name: name.to_owned() })
}

fn parse_minute_of_day(text: &str) -> Result<u16, ActiveHoursError> {
    let bad = || ActiveHoursError::BadTime { text: text.to_owned() };
    let (hours, minutes) = text.split_once(':').ok_or_else(bad)?;
    if hours.len() != 2 || minutes.len() != 2 {
        return Err(bad());
    }
    let hours: u16 = hours.parse().map_err(|_| bad())?;
    let minutes: u16 = minutes.parse().map_err(|_| bad())?;
    if minutes > 59 || hours > 24 || (hours == 24 && minutes != 0) {
        return Err(bad());
    }
    Ok(hours * 60 + minutes)
}

fn format_minute_of_day(minute: u16) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("test timestamp")
    }

    #[test]
    fn plain_window_is_start_inclusive_end_exclusive() {
        let window = ActiveHours::new("09:00", "17:00", "UTC").expect("valid");
        assert!(!window.contains(at("2026-01-05T08:59:59Z")));
        assert!(window.contains(at("2026-01-05T09:00:00Z")));
        assert!(window.contains(at("2026-01-05T16:59:59Z")));
        assert!(!window.contains(at("2026-01-05T17:00:00Z")));
    }

    #[test]
    fn window_wraps_midnight() {
        let window = ActiveHours::new("22:00", "06:00", "UTC").expect("valid");
        assert!(window.contains(at("2026-01-05T23:30:00Z")));
        assert!(window.contains(at("2026-01-06T00:10:00Z")));
        assert!(window.contains(at("2026-01-06T05:59:00Z")));
        assert!(!window.contains(at("2026-01-06T06:00:00Z")));
        assert!(!window.contains(at("2026-01-06T12:00:00Z")));
    }

    #[test]
    fn end_of_day_is_allowed_as_end() {
        let window = ActiveHours::new("20:00", "24:00", "UTC").expect("valid");
        assert!(window.contains(at("2026-01-05T23:59:59Z")));
        assert!(!window.contains(at("2026-01-06T00:00:00Z")));
        let all_day = ActiveHours::new("00:00", "24:00", "UTC").expect("valid");
        assert!(all_day.contains(at("2026-01-06T00:00:00Z")));
    }

    #[test]
    fn follows_the_zone_across_daylight_saving() {
        // Berlin is UTC+1 in winter and UTC+2 in summer: 09:00 local moves in UTC.
        let window = ActiveHours::new("09:00", "17:00", "Europe/Berlin").expect("valid");
        assert!(window.contains(at("2026-01-05T08:00:00Z")));
        assert!(!window.contains(at("2026-07-06T16:00:00Z")));
        assert!(window.contains(at("2026-07-06T07:00:00Z")));
    }

    #[test]
    fn shanghai_window_after_midnight_restart() {
        // Field notes, failure 8: 00:56 in Asia/Shanghai is outside 08:00-23:00.
        let window = ActiveHours::new("08:00", "23:00", "Asia/Shanghai").expect("valid");
        assert!(!window.contains(at("2026-03-01T16:56:00Z")));
        assert!(window.contains(at("2026-03-02T00:05:00Z")));
    }

    #[test]
    fn refuses_bad_input_with_reasons() {
        assert!(matches!(ActiveHours::new("9:00", "17:00", "UTC"), Err(ActiveHoursError::BadTime { .. })));
        assert!(matches!(ActiveHours::new("09:60", "17:00", "UTC"), Err(ActiveHoursError::BadTime { .. })));
        assert!(matches!(ActiveHours::new("24:00", "17:00", "UTC"), Err(ActiveHoursError::MidnightStart)));
        assert!(matches!(ActiveHours::new("24:30", "17:00", "UTC"), Err(ActiveHoursError::BadTime { .. })));
        assert!(matches!(ActiveHours::new("10:00", "10:00", "UTC"), Err(ActiveHoursError::Empty { .. })));
        assert!(matches!(
            ActiveHours::new("09:00", "17:00", "Mars/Olympus"),
            Err(ActiveHoursError::UnknownZone { .. })
        ));
        assert!(matches!(ActiveHours::new("09:00", "17:00", "+02:00"), Err(ActiveHoursError::UnknownZone { .. })));
    }

    #[test]
    fn spacebot_hours() {
        let window = ActiveHours::from_hours(9, 17, "UTC").expect("valid");
        assert_eq!((window.start_text(), window.end_text()), ("09:00".to_owned(), "17:00".to_owned()));
        assert!(ActiveHours::from_hours(9, 25, "UTC").is_err());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    const ZONES: [&str; 5] = ["UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham"];

    proptest! {
        /// A window and its complement split every instant between them: wrapping
        /// windows included, in zones with odd offsets and daylight saving.
        #[test]
        fn a_window_and_its_complement_partition_time(
            start in 0u16..1_440,
            end in 0u16..1_440,
            zone in 0usize..ZONES.len(),
            at in 1_600_000_000i64..1_900_000_000,
        ) {
            prop_assume!(start != end);
            let text = |minute: u16| format!("{:02}:{:02}", minute / 60, minute % 60);
            let window = ActiveHours::new(&text(start), &text(end), ZONES[zone]).expect("valid");
            let complement = ActiveHours::new(&text(end), &text(start), ZONES[zone]).expect("valid");
            let at = Timestamp::from_second(at).expect("in range");
            prop_assert_ne!(window.contains(at), complement.contains(at));
        }
    }
}
