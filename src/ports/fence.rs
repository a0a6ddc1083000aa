//! The fence an external side effect checks first (ADR 0018). The store refuses a write
//! of a partition's engine once another node holds a newer term; nothing refuses a
//! delivery (or, later, a tool call that may write). So before each such effect the
//! engine asks this fence whether the partition's lease is still surely held, judged by
//! this node's own monotonic clock: a node paused past its lease (a stopped VM, a GC
//! pause) that wakes with a model reply in hand drops the delivery instead of sending it
//! for a partition another node may already run.
//!
//! A lease granted or renewed by a request sent at monotonic time `t` is held at least
//! until `t + lease` on the database's clock, so `t + lease` on this node's clock is a
//! bound that never claims more than the database granted (clock rates aside).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::ports::clock::{Clock, Mono};

/// Whether an effect may go out: `Fence::default()` (one node, no cluster) always lets it.
#[derive(Clone, Default)]
pub struct Fence(Option<Arc<LeaseFence>>);

struct LeaseFence {
    clock: Arc<dyn Clock>,
    partition: u32,
    term: u64,
    /// Nanoseconds since the clock's origin until which the lease is surely held.
    valid_until_nanos: AtomicU64,
    /// Set once the lease is lost or given back; never cleared (a new grant gets a new fence).
    revoked: AtomicBool,
}

/// An effect dropped because the lease was no longer surely held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "fenced: this node no longer surely holds partition {partition} (term {term}) by its own clock, so the \
     effect was dropped (another node may run the partition now)"
)]
pub struct Fenced {
    pub partition: u32,
    pub term: u64,
}

fn nanos(at: Mono) -> u64 {
    u64::try_from(at.since_origin().as_nanos()).unwrap_or(u64::MAX)
}

impl Fence {
    /// The fence of a lease of `partition` under `term`, surely held until `valid_until`
    /// on `clock`'s monotonic line.
    pub fn lease(clock: Arc<dyn Clock>, partition: u32, term: u64, valid_until: Mono) -> Self {
        Self(Some(Arc::new(LeaseFence {
            clock,
            partition,
            term,
            valid_until_nanos: AtomicU64::new(nanos(valid_until)),
            revoked: AtomicBool::new(false),
        })))
    }

    /// A renewal went through: the lease is surely held until `valid_until` (never less
    /// than before; a revoked fence stays revoked).
    pub fn extend(&self, valid_until: Mono) {
        if let Some(fence) = &self.0 {
            fence.valid_until_nanos.fetch_max(nanos(valid_until), Ordering::SeqCst);
        }
    }

    /// The lease is lost or given back: every later check refuses.
    pub fn revoke(&self) {
        if let Some(fence) = &self.0 {
            fence.revoked.store(true, Ordering::SeqCst);
        }
    }

    /// Whether an external effect may go out now.
    ///
    /// # Errors
    /// [`Fenced`] once the lease was revoked or its sure period has run out.
    pub fn check(&self) -> Result<(), Fenced> {
        let Some(fence) = &self.0 else { return Ok(()) };
        let now = nanos(fence.clock.monotonic());
        let held = !fence.revoked.load(Ordering::SeqCst) && now < fence.valid_until_nanos.load(Ordering::SeqCst);
        if held {
            Ok(())
        } else {
            Err(Fenced { partition: fence.partition, term: fence.term })
        }
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => formatter.write_str("Fence(none)"),
            Some(fence) => write!(formatter, "Fence(partition {}, term {})", fence.partition, fence.term),
        }
    }
}

/// Two fences are equal when they are the same handle (or both absent): a fence is a
/// handle on a lease, not a value.
impl PartialEq for Fence {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Fence {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::adapters::virtual_clock::VirtualClock;

    #[tokio::test(start_paused = true)]
    async fn a_lease_fence_holds_until_its_sure_end_and_a_renewal_extends_it() {
        let clock = Arc::new(VirtualClock::new(jiff::Timestamp::UNIX_EPOCH));
        let fence = Fence::lease(clock.clone(), 3, 7, clock.monotonic() + Duration::from_secs(10));
        assert_eq!(fence.check(), Ok(()));
        clock.sleep(Duration::from_secs(10)).await;
        assert_eq!(fence.check(), Err(Fenced { partition: 3, term: 7 }), "held only before its end");
        fence.extend(clock.monotonic() + Duration::from_secs(5));
        assert_eq!(fence.check(), Ok(()));
        fence.extend(clock.monotonic());
        assert_eq!(fence.check(), Ok(()), "an older renewal never shortens it");
        fence.revoke();
        fence.extend(clock.monotonic() + Duration::from_secs(60));
        assert!(fence.check().is_err(), "a revoked fence stays revoked");
        assert_eq!(Fence::default().check(), Ok(()), "one node: nothing to fence");
    }
}
