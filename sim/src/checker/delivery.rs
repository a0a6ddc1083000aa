//! What the platform saw of each message: every part accepted at most once, the parts of
//! a message accepted in order, nothing of a message sent again after the platform
//! refused a part of it; every part within the platform's limit in UTF-16 units, none
//! that notified anyone where mentions are off, and every request naming systole.

use std::collections::BTreeSet;

use super::{fail, Step};
use crate::ports::http::SimPlatform;
use crate::trace::{PartOutcome, PartShape};

pub const PART_ONCE: &str = "part-once";
pub const PARTS_IN_ORDER: &str = "parts-in-order";
pub const NO_RETRY_AFTER_REFUSAL: &str = "no-retry-after-refusal";
/// Every part fits its platform's limit, counted in UTF-16 units as the platforms count.
pub const PART_FITS: &str = "part-fits-platform";
/// With mentions off (the default), no part notifies a channel, a group or a person.
pub const PART_NOTIFIES_NOBODY: &str = "part-notifies-nobody";
/// Every request says it is systole; Discord's in the form its API requires of bots.
pub const REQUEST_NAMES_SYSTOLE: &str = "request-names-systole";

#[derive(Debug)]
pub struct DeliveryModel {
    accepted: BTreeSet<String>,
    /// Messages (their slot's key) a part of which the platform refused.
    refused: BTreeSet<String>,
    platform: SimPlatform,
    allow_mentions: bool,
}

impl Default for DeliveryModel {
    fn default() -> Self {
        Self::new(SimPlatform::Webhook { signed: false }, false)
    }
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
    pub fn new(platform: SimPlatform, allow_mentions: bool) -> Self {
        Self { accepted: BTreeSet::new(), refused: BTreeSet::new(), platform, allow_mentions }
    }

    /// What the request itself was: its size, whom it notified, who it said it was.
    fn shape(&self, key: &str, shape: &PartShape, count: &mut impl FnMut(&'static str)) -> Step {
        count(PART_FITS);
        if let Some(limit) = self.platform.limit_units().filter(|limit| shape.units > *limit) {
            return fail(
                PART_FITS,
                format!("{key} has {} UTF-16 units; {:?} takes {limit}", shape.units, self.platform),
            );
        }
        count(PART_NOTIFIES_NOBODY);
        if let (false, Some(who)) = (self.allow_mentions, &shape.notified) {
            return fail(PART_NOTIFIES_NOBODY, format!("{key} notified people with mentions off: {who}"));
        }
        count(REQUEST_NAMES_SYSTOLE);
        let expected = if self.platform == SimPlatform::Discord { "DiscordBot (" } else { "systole/" };
        if !shape.user_agent.starts_with(expected) {
            return fail(REQUEST_NAMES_SYSTOLE, format!("{key} had User-Agent {:?}", shape.user_agent));
        }
        Ok(())
    }

    /// A request for the part `key` came back with `outcome`. Returns the invariants checked.
    pub fn posted(
        &mut self,
        key: &str,
        outcome: PartOutcome,
        shape: &PartShape,
        mut count: impl FnMut(&'static str),
    ) -> Step {
        self.shape(key, shape, &mut count)?;
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

    fn shape() -> PartShape {
        PartShape { units: 5, notified: None, user_agent: "systole/0.1.0".to_owned() }
    }

    fn post(model: &mut DeliveryModel, key: &str, outcome: PartOutcome) -> Option<&'static str> {
        model.posted(key, outcome, &shape(), |_| {}).err().map(|(invariant, _)| invariant)
    }

    #[test]
    fn size_mentions_and_name_are_judged() {
        let judge = |model: &mut DeliveryModel, shape: PartShape| {
            model.posted("k/1", PartOutcome::Accepted, &shape, |_| {}).err().map(|(invariant, _)| invariant)
        };
        let mut discord = DeliveryModel::new(SimPlatform::Discord, false);
        assert_eq!(judge(&mut discord, PartShape { units: 2_001, ..shape() }), Some(PART_FITS));
        let pinged = PartShape { notified: Some("@everyone".to_owned()), ..shape() };
        assert_eq!(judge(&mut discord, pinged.clone()), Some(PART_NOTIFIES_NOBODY));
        assert_eq!(judge(&mut discord, shape()), Some(REQUEST_NAMES_SYSTOLE), "Discord wants its own form");
        let mut allowed = DeliveryModel::new(SimPlatform::Slack, true);
        assert_eq!(judge(&mut allowed, pinged), None, "mentions allowed by the target");
        let mut webhook = DeliveryModel::default();
        assert_eq!(judge(&mut webhook, PartShape { units: 1_000_000, ..shape() }), None, "no limit");
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
