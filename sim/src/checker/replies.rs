//! The reply invariants: the `HEARTBEAT_OK` token is never delivered, and no heartbeat
//! delivers the same reply twice within 24 hours. Spelled here independently of the engine.

use jiff::{SignedDuration, Timestamp};

use systole::core::ids::HeartbeatKey;

use super::{fail, Model, Step, NO_DUPLICATE_DAY, NO_TOKEN_DELIVERED};
use crate::trace::Entry;

/// The token a model answers when nothing needs attention.
const TOKEN: &str = "HEARTBEAT_OK";
/// How long an identical reply must not be delivered again.
const DEDUP_WINDOW: SignedDuration = SignedDuration::from_hours(24);

impl Model<'_> {
    /// A delivered reply never carries the token at its edges, and never repeats (case and
    /// whitespace aside) a reply the same heartbeat delivered, in a run whose success is
    /// durable, within the last 24 h of wall time.
    pub(super) fn reply_delivered(
        &mut self,
        entry: &Entry,
        key: &HeartbeatKey,
        idempotency_key: &str,
        text: &str,
    ) -> Step {
        self.count(NO_TOKEN_DELIVERED);
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with(TOKEN) || trimmed.ends_with(TOKEN) {
            return fail(NO_TOKEN_DELIVERED, format!("{key} delivered {text:?}"));
        }
        let slot = idempotency_key
            .rsplit('/')
            .next()
            .and_then(|ms| ms.parse::<i64>().ok())
            .and_then(|ms| Timestamp::from_millisecond(ms).ok())
            .unwrap_or(Timestamp::MIN);
        let normal = text.to_lowercase().split_whitespace().collect::<Vec<_>>().join(" ");
        // Shown acknowledgements are not deduplicated: each one was asked for.
        // Judged by the definition its run read from the store at its claim (ADR 0026): a
        // replace written before the claim applies to it though the driver has not applied
        // it yet, and one written while it runs does not (seed 1927871435790: a reload
        // turned `dedup` off just before a catch-up claim, and the run delivered a repeat).
        let slot_key = (key.clone(), slot);
        let def =
            self.run_read_defs.get(&slot_key).or_else(|| self.run_defs.get(&slot_key)).or_else(|| self.defs.get(key));
        let dedup = def.is_none_or(|def| def.dedup) && !super::guards::is_ack_text(text);
        let deliveries = self.deliveries.entry(key.clone()).or_default();
        if dedup {
            self.checks.entry(NO_DUPLICATE_DAY).and_modify(|count| *count += 1);
            let earlier = deliveries
                .iter()
                .find(|(form, at, _, durable)| *durable && *form == normal && *at >= entry.wall - DEDUP_WINDOW);
            if let Some((_, at, earlier_slot, _)) = earlier {
                let message =
                    format!("{key} delivered {text:?} at {}, as it did at {at} (slot {earlier_slot})", entry.wall);
                return fail(NO_DUPLICATE_DAY, message);
            }
        }
        deliveries.push((normal, entry.wall, slot, false));
        Ok(())
    }
}
