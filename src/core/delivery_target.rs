//! Delivery targets: `stdout`, `adapter:target` such as `webhook:ops`, or `silent` (the
//! reply is kept in the run log only: a cron job with `delivery = "silent"`).

use std::fmt;

/// Where a heartbeat's text goes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryTarget {
    pub adapter: String,
    /// Adapter-specific; empty for `stdout`.
    pub target: String,
}

/// Why a delivery target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryTargetError {
    #[error("{text:?} is not a delivery target; write \"stdout\" or \"adapter:target\" (like \"webhook:ops\")")]
    Malformed { text: String },
}

impl DeliveryTarget {
    pub const STDOUT: &'static str = "stdout";
    pub const SILENT: &'static str = "silent";

    pub fn silent() -> Self {
        Self { adapter: Self::SILENT.to_owned(), target: String::new() }
    }

    /// Whether replies stay in the run log instead of being delivered.
    pub fn is_silent(&self) -> bool {
        self.adapter == Self::SILENT && self.target.is_empty()
    }

    /// Parses `stdout` or `adapter:target`.
    ///
    /// # Errors
    /// When the text has no `:`, or an empty adapter or target.
    pub fn parse(text: &str) -> Result<Self, DeliveryTargetError> {
        if text == Self::STDOUT || text == Self::SILENT {
            return Ok(Self { adapter: text.to_owned(), target: String::new() });
        }
        match text.split_once(':') {
            Some((adapter, target)) if !adapter.is_empty() && !target.is_empty() => {
                Ok(Self { adapter: adapter.to_owned(), target: target.to_owned() })
            }
            _ => Err(DeliveryTargetError::Malformed { text: text.to_owned() }),
        }
    }
}

impl fmt::Display for DeliveryTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.target.is_empty() {
            f.write_str(&self.adapter)
        } else {
            write!(f, "{}:{}", self.adapter, self.target)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        for text in ["stdout", "webhook:ops", "discord:123456789", "slack:#a:b"] {
            let target = DeliveryTarget::parse(text).expect("valid");
            assert_eq!(target.to_string(), text);
        }
        assert_eq!(DeliveryTarget::parse("slack:#a:b").map(|t| t.target), Ok("#a:b".to_owned()));
    }

    #[test]
    fn refuses_half_targets() {
        for text in ["", "webhook", "webhook:", ":ops", "std out"] {
            assert!(DeliveryTarget::parse(text).is_err(), "{text:?} should be refused");
        }
    }
}
