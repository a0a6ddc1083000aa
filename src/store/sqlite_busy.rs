//! How this process's SQLite writers wait for the write lock (ADR 0034).
//!
//! The store has two writer connections: sqlx's, for an operator's and the engine's rarer
//! writes, and the dispatch writer's. SQLite's own busy handler sleeps 1, 2, 5, 10 ms and
//! more between tries, for a lock the other writer holds a fraction of a millisecond
//! (ADR 0032 counted over 400 such sleeps in one dispatch). Both writers use this handler
//! instead: short sleeps while the wait is short, then a millisecond a try, giving up at
//! the busy timeout as SQLite's would.

use std::ffi::{c_int, c_void};
use std::ptr::{self, NonNull};
use std::time::Duration;

use libsqlite3_sys as ffi;

use crate::limits::SQLITE_BUSY_TIMEOUT_MS;

/// A try's sleep while the wait is young: about one write transaction's commit.
const BUSY_SHORT_SLEEP_US: u64 = 50;
/// Tries with the short sleep (2 ms in all), before a millisecond a try.
const BUSY_SHORT_TRIES: u64 = 40;
/// A try's sleep after that: another process (the CLI) holds the lock, or a long write.
const BUSY_LONG_SLEEP_US: u64 = 1_000;

/// The sleep before try `tries + 1`, or `None` once the busy timeout is spent.
pub(super) fn busy_sleep(tries: u64) -> Option<Duration> {
    let short_tries = tries.min(BUSY_SHORT_TRIES);
    let slept_us = short_tries * BUSY_SHORT_SLEEP_US + (tries - short_tries) * BUSY_LONG_SLEEP_US;
    if slept_us >= SQLITE_BUSY_TIMEOUT_MS * 1_000 {
        return None;
    }
    let sleep_us = if tries < BUSY_SHORT_TRIES { BUSY_SHORT_SLEEP_US } else { BUSY_LONG_SLEEP_US };
    Some(Duration::from_micros(sleep_us))
}

/// SQLite calls this on the connection's own thread when the lock is taken; non-zero
/// means "try again".
extern "C" fn busy_handler(_: *mut c_void, tries: c_int) -> c_int {
    match busy_sleep(u64::try_from(tries).unwrap_or(0)) {
        Some(sleep) => {
            // The connection's own thread (sqlx's or the dispatch writer's), never the
            // runtime's: waiting here is the point.
            std::thread::sleep(sleep);
            1
        }
        None => 0,
    }
}

/// Makes `db` wait for a busy database as described above.
///
/// # Safety
/// `db` is a live connection that the caller holds (no other thread uses it meanwhile).
pub(crate) unsafe fn wait_briefly_when_busy(db: NonNull<ffi::sqlite3>) {
    // SAFETY: as the caller promises; the handler keeps no state (a null argument).
    unsafe {
        ffi::sqlite3_busy_handler(db.as_ptr(), Some(busy_handler), ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_young_wait_sleeps_briefly_and_the_whole_wait_ends_at_the_busy_timeout() {
        assert_eq!(busy_sleep(0), Some(Duration::from_micros(BUSY_SHORT_SLEEP_US)));
        assert_eq!(busy_sleep(BUSY_SHORT_TRIES - 1), Some(Duration::from_micros(BUSY_SHORT_SLEEP_US)));
        assert_eq!(busy_sleep(BUSY_SHORT_TRIES), Some(Duration::from_micros(BUSY_LONG_SLEEP_US)));
        let mut slept = Duration::ZERO;
        let mut tries = 0;
        while let Some(sleep) = busy_sleep(tries) {
            slept += sleep;
            tries += 1;
        }
        let timeout = Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS);
        assert!(slept >= timeout && slept < timeout + Duration::from_micros(BUSY_LONG_SLEEP_US), "{slept:?}");
    }
}
