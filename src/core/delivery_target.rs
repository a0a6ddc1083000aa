//! Delivery targets: `stdout`, `adapter:target` such as `webhook:ops`, or `silent` (the
//! reply is kept in the run log only: a cron job with `delivery = "silent"`).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use arcstr::ArcStr;

/// Where a heartbeat's text goes.
///
/// Kept as its one text, shared: the heartbeats of one target (most of an agent's) hold one
/// copy, and a start-up of a million allocates no text per row that it then frees among
/// the ids it keeps (two such strings a row left 64 MB of holes, `docs/performance.md`).
#[derive(Clone)]
pub struct DeliveryTarget {
    /// `adapter` or `adapter:target`, as written.
    text: ArcStr,
    /// The adapter's length in `text`; a target follows after a `:`.
    adapter_len: usize,
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

    /// The target `target` of `adapter` (none when empty, as `stdout` has).
    pub fn new(adapter: &str, target: &str) -> Self {
        let text = if target.is_empty() { ArcStr::from(adapter) } else { ArcStr::from(format!("{adapter}:{target}")) };
        Self { text, adapter_len: adapter.len() }
    }

    pub fn silent() -> Self {
        Self { text: arcstr::literal!("silent"), adapter_len: Self::SILENT.len() }
    }

    /// The adapter that delivers: `stdout`, `webhook`, a chat bot's name.
    pub fn adapter(&self) -> &str {
        self.text.get(..self.adapter_len).unwrap_or_default()
    }

    /// Adapter-specific (a webhook's name, a chat's id); empty for `stdout`.
    pub fn target(&self) -> &str {
        self.text.get(self.adapter_len + 1..).unwrap_or_default()
    }

    /// The text as written, shared: a copy of it allocates nothing.
    pub fn text(&self) -> &ArcStr {
        &self.text
    }

    /// Whether replies stay in the run log instead of being delivered.
    pub fn is_silent(&self) -> bool {
        self.adapter() == Self::SILENT && self.target().is_empty()
    }

    /// Parses `stdout` or `adapter:target`.
    ///
    /// # Errors
    /// When the text has no `:`, or an empty adapter or target.
    pub fn parse(text: &str) -> Result<Self, DeliveryTargetError> {
        if text == Self::STDOUT || text == Self::SILENT {
            return Ok(Self { text: ArcStr::from(text), adapter_len: text.len() });
        }
        match text.split_once(':') {
            Some((adapter, target)) if !adapter.is_empty() && !target.is_empty() => {
                Ok(Self { text: ArcStr::from(text), adapter_len: adapter.len() })
            }
            _ => Err(DeliveryTargetError::Malformed { text: text.to_owned() }),
        }
    }
}

// Compared as the pair it names, adapter first (not as its text: `:` sorts after `-`);
// two copies of one shared text without reading it (a start-up compares a million).
impl PartialEq for DeliveryTarget {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for DeliveryTarget {}

impl PartialOrd for DeliveryTarget {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DeliveryTarget {
    fn cmp(&self, other: &Self) -> Ordering {
        if ArcStr::ptr_eq(&self.text, &other.text) {
            return Ordering::Equal;
        }
        (self.adapter(), self.target()).cmp(&(other.adapter(), other.target()))
    }
}

impl Hash for DeliveryTarget {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.adapter(), self.target()).hash(state);
    }
}

impl fmt::Debug for DeliveryTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryTarget").field("adapter", &self.adapter()).field("target", &self.target()).finish()
    }
}

impl fmt::Display for DeliveryTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
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
        assert_eq!(DeliveryTarget::parse("slack:#a:b").map(|t| t.target().to_owned()), Ok("#a:b".to_owned()));
    }

    #[test]
    fn names_its_adapter_and_target() {
        let parsed = DeliveryTarget::parse("slack:#a:b").expect("valid");
        assert_eq!((parsed.adapter(), parsed.target()), ("slack", "#a:b"));
        assert_eq!(parsed, DeliveryTarget::new("slack", "#a:b"));
        let stdout = DeliveryTarget::parse("stdout").expect("valid");
        assert_eq!((stdout.adapter(), stdout.target()), ("stdout", ""));
        assert_eq!(stdout, DeliveryTarget::new("stdout", ""));
        assert!(DeliveryTarget::silent().is_silent() && !stdout.is_silent());
        assert_eq!(DeliveryTarget::silent().to_string(), "silent");
    }

    #[test]
    fn orders_by_adapter_then_target() {
        // As text, "a:z" sorts after "a-x:b" (':' after '-'); as a pair, adapter "a" first.
        let (short, long) = (DeliveryTarget::new("a", "z"), DeliveryTarget::new("a-x", "b"));
        assert!(short < long);
    }

    #[test]
    fn refuses_half_targets() {
        for text in ["", "webhook", "webhook:", ":ops", "std out"] {
            assert!(DeliveryTarget::parse(text).is_err(), "{text:?} should be refused");
        }
    }
}
