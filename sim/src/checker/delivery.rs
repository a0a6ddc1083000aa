//! What the platform saw of each message: every part accepted at most once, the parts of
//! a message accepted in order, and nothing of a message sent again after the platform
//! refused a part of it.

use std::collections::BTreeSet;

use super::{fail, Step};
use crate::trace::PartOutcome;

pub const PART_ONCE: &str = "part-once";
pub const PARTS_IN_ORDER: &str = "parts-in-order";
pub const NO_RETRY_AFTER_REFUSAL: &str = "no-retry-after-refusal";

#[derive(Debug, Default)]
pub struct DeliveryModel {
    accepted: BTreeSet<String>,
    /// Messages (their slot's key) a part of which the platform refused.
    refused: BTreeSet<String>,
}

/// A part's key read back: the message's key, the part's number and the count of parts
/// (`key/part-2-of-3`; a message in one part is its key alone).
fn parse(key: &str) -> (&str, u32, u32) {
    if let Some((message, part)) = key.rsplit_once("/part-") {
        if let Some((number, count)) = part.split_once("-of-") {
            if let (Ok(number), Ok(count)) = (number.parse(), count.parse()) {
                return (message, number, count);
            }
        }
    }
    (key, 1, 1)
}

impl DeliveryModel {
    /// A request for the part `key` came back with `outcome`. Returns the invariants checked.
    pub fn posted(&mut self, key: &str, outcome: PartOutcome, mut count: impl FnMut(&'static str)) -> Step {
        let (message, number, parts) = parse(key);
        count(NO_RETRY_AFTER_REFUSAL);
        if self.refused.contains(message) {
            return fail(NO_RETRY_AFTER_REFUSAL, format!("{key} was sent after the platform refused that message"));
        }
        match outcome {
            PartOutcome::Accepted => {
                count(PART_ONCE);
                if !self.accepted.insert(key.to_owned()) {
                    return fail(PART_ONCE, format!("the platform took {key} twice"));
                }
                count(PARTS_IN_ORDER);
                if number > 1 && !self.accepted.contains(&format!("{message}/part-{}-of-{parts}", number - 1)) {
                    return fail(PARTS_IN_ORDER, format!("{key} was taken before part {} of that message", number - 1));
                }
            }
            PartOutcome::Refused => {
                self.refused.insert(message.to_owned());
            }
            PartOutcome::RateLimited | PartOutcome::Unreachable => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(model: &mut DeliveryModel, key: &str, outcome: PartOutcome) -> Option<&'static str> {
        model.posted(key, outcome, |_| {}).err().map(|(invariant, _)| invariant)
    }

    #[test]
    fn each_rule_is_caught() {
        let mut model = DeliveryModel::default();
        assert_eq!(post(&mut model, "a/1/part-1-of-2", PartOutcome::Accepted), None);
        assert_eq!(post(&mut model, "a/1/part-1-of-2", PartOutcome::Accepted), Some(PART_ONCE));
        assert_eq!(post(&mut model, "b/1/part-2-of-2", PartOutcome::Accepted), Some(PARTS_IN_ORDER));
        assert_eq!(post(&mut model, "c/1/part-1-of-2", PartOutcome::Refused), None);
        assert_eq!(post(&mut model, "c/1/part-2-of-2", PartOutcome::Accepted), Some(NO_RETRY_AFTER_REFUSAL));
        assert_eq!(post(&mut model, "d/1", PartOutcome::RateLimited), None);
        assert_eq!(post(&mut model, "d/1", PartOutcome::Accepted), None);
    }
}
