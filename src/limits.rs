//! Every limit of the engine, in one place, with its unit in its name.
//!
//! Limits that protect a user's money or inbox are on by default; the config may change
//! some of them, never switch them off.

/// A run (LLM calls plus delivery) that takes longer than this is cut off and counts as a failure.
pub const RUN_TIMEOUT_SECS_DEFAULT: u64 = 120;
/// The longest run timeout a config may ask for.
pub const RUN_TIMEOUT_SECS_MAX: u64 = 3_600;

/// Consecutive failures after which the circuit breaker disables a heartbeat.
pub const BREAKER_FAILURES_MAX_DEFAULT: u32 = 3;

/// The shortest interval a config may give a heartbeat.
pub const INTERVAL_SECS_MIN: u64 = 1;
/// The longest interval a heartbeat may have (a year), so slot arithmetic never overflows.
pub const INTERVAL_SECS_MAX: u64 = 366 * 24 * 3_600;

/// How many runs may be in flight at once across all heartbeats.
pub const RUNS_IN_FLIGHT_MAX_DEFAULT: usize = 64;

/// The driver never sleeps longer than this before re-reading the wall clock, so a wall
/// clock step or a suspended machine is noticed (field notes, section 2).
pub const DRIVER_SLEEP_SECS_MAX: u64 = 30;

/// How long `serve` lets in-flight runs finish after SIGINT/SIGTERM before abandoning them.
pub const SHUTDOWN_GRACE_SECS_DEFAULT: u64 = 30;

/// Attempts a webhook delivery gets, the first included. Never unbounded (field notes, failure 10).
pub const WEBHOOK_ATTEMPTS_MAX_DEFAULT: u32 = 3;
/// The most attempts a config may ask for.
pub const WEBHOOK_ATTEMPTS_MAX_LIMIT: u32 = 10;
/// Timeout of one webhook HTTP request.
pub const WEBHOOK_TIMEOUT_SECS_DEFAULT: u64 = 10;
/// Delay before the second webhook attempt; doubles for each further attempt.
pub const WEBHOOK_RETRY_DELAY_MS_BASE: u64 = 500;

/// Timeout of one LLM HTTP request.
pub const LLM_TIMEOUT_SECS_DEFAULT: u64 = 60;

/// Characters of a reply kept in the execution log as its preview.
pub const OUTPUT_PREVIEW_CHARS_MAX: usize = 200;
/// Characters of an error message kept in the execution log.
pub const ERROR_TEXT_CHARS_MAX: usize = 1_000;

/// Longest id of an agent or a heartbeat.
pub const ID_CHARS_MAX: usize = 64;
/// Longest heartbeat prompt accepted.
pub const PROMPT_CHARS_MAX: usize = 16_384;

/// Rows written in one multi-row statement by the SQLite store (SQLite allows 32,766
/// bound parameters; rows here bind at most 12).
pub const STORE_BATCH_ROWS_MAX: usize = 1_000;
/// How long SQLite waits on a locked database before failing a statement.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 5_000;

/// Due heartbeats the driver handles in one wake-up; the rest follow at once in the next.
pub const DUE_PER_WAKE_MAX: usize = 1_024;
