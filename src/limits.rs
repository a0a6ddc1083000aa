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

/// `pause_heartbeats` without `minutes` pauses this long (Letta's default).
pub const PAUSE_MINUTES_DEFAULT: u32 = 2;
/// The shortest pause.
pub const PAUSE_MINUTES_MIN: u32 = 1;
/// The longest pause unless the config allows more.
pub const PAUSE_MINUTES_MAX_DEFAULT: u32 = 60;
/// The longest pause a config may allow (Letta's own ceiling).
pub const PAUSE_MINUTES_MAX_LIMIT: u32 = 360;

/// LLM calls in one run's agent loop unless the agent's config says otherwise.
pub const AGENT_LOOP_ITERATIONS_MAX_DEFAULT: u32 = 5;
/// The most a config may allow.
pub const AGENT_LOOP_ITERATIONS_MAX_LIMIT: u32 = 50;

/// The shortest interval a model may give a heartbeat it creates.
pub const MODEL_INTERVAL_SECS_MIN_DEFAULT: u64 = 60;
/// Heartbeats one agent may have before the `heartbeat` tool refuses to create more.
pub const HEARTBEATS_PER_AGENT_MAX_DEFAULT: usize = 20;
/// Characters of a tool's arguments kept when quoting them back in an error.
pub const TOOL_ARGUMENTS_QUOTE_CHARS_MAX: usize = 200;

/// Attempts one LLM request gets when the endpoint answers 429 or 5xx.
pub const LLM_ATTEMPTS_MAX_DEFAULT: u32 = 3;
/// The most attempts a config may give one LLM request.
pub const LLM_ATTEMPTS_MAX_LIMIT: u32 = 10;
/// The longest `Retry-After` the LLM client honours; longer answers fail at once.
pub const LLM_RETRY_AFTER_SECS_MAX: u64 = 30;
/// Delay before the second LLM attempt when the endpoint names none; doubles after.
pub const LLM_RETRY_DELAY_MS_BASE: u64 = 1_000;
