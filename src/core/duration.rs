//! Human durations as written in configs and tool calls: `90s`, `30m`, `1h`, `2d`, `1h30m`.
//!
//! The grammar is deliberately small: one or more `<digits><unit>` groups, units `s`, `m`,
//! `h`, `d` (a day is 86,400 s: intervals are elapsed time, not calendar days).

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("is empty; write a number and a unit, like \"30m\"")]
    Empty,
    #[error("{text:?} has a number without a unit; add s, m, h or d (like \"{text}s\")")]
    MissingUnit { text: String },
    #[error("{text:?} has unit {unit:?}; use s, m, h or d")]
    UnknownUnit { text: String, unit: char },
    #[error("{text:?} has {found:?} where a number should start")]
    MissingNumber { text: String, found: char },
    #[error("{text:?} is too large")]
    Overflow { text: String },
}

/// Parses a duration such as `"30m"` or `"1h30m"`.
///
/// # Errors
/// On an empty string, a number with no unit, an unknown unit, a unit with no number,
/// or a total that does not fit in `u64` seconds.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let overflow = || DurationError::Overflow { text: text.to_owned() };
    let mut total_secs: u64 = 0;
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let mut number: u64 = 0;
        let mut digits = 0usize;
        while let Some(digit) = chars.peek().and_then(|c| c.to_digit(10)) {
            number = number.checked_mul(10).and_then(|n| n.checked_add(u64::from(digit))).ok_or_else(overflow)?;
            digits += 1;
            chars.next();
        }
        let Some(unit) = chars.next() else {
            return Err(DurationError::MissingUnit { text: text.to_owned() });
        };
        if digits == 0 {
            return Err(DurationError::MissingNumber { text: text.to_owned(), found: unit });
        }
        let unit_secs: u64 = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(DurationError::UnknownUnit { text: text.to_owned(), unit }),
        };
        let group_secs = number.checked_mul(unit_secs).ok_or_else(overflow)?;
        total_secs = total_secs.checked_add(group_secs).ok_or_else(overflow)?;
    }
    Ok(Duration::from_secs(total_secs))
}

/// Formats a duration in the same grammar, largest units first (`5400s` → `1h30m`).
pub fn format_duration(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, unit_secs) in [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)] {
        if secs >= unit_secs {
            out.push_str(&(secs / unit_secs).to_string());
            out.push(unit);
            secs %= unit_secs;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_each_unit_and_compounds() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3_600)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
    }

    #[test]
    fn refuses_with_the_offending_part() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("30"), Err(DurationError::MissingUnit { text: "30".into() }));
        assert_eq!(parse_duration("5w"), Err(DurationError::UnknownUnit { text: "5w".into(), unit: 'w' }));
        assert_eq!(parse_duration("m"), Err(DurationError::MissingNumber { text: "m".into(), found: 'm' }));
        assert_eq!(parse_duration(" 5m"), Err(DurationError::MissingNumber { text: " 5m".into(), found: ' ' }));
        assert!(matches!(parse_duration("99999999999999999999s"), Err(DurationError::Overflow { .. })));
        assert!(matches!(parse_duration("999999999999999999d"), Err(DurationError::Overflow { .. })));
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(secs in 0u64..10_000_000_000) {
            let duration = Duration::from_secs(secs);
            prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }

        #[test]
        fn never_panics(text in "\\PC{0,24}") {
            let _ = parse_duration(&text);
        }
    }
}
