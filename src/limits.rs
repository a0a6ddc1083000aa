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
/// How long a tripped breaker stays open before one probe run, per trip in a row (the
/// last repeats): half-open recovery is on by default, so an outage is not forever.
pub const BREAKER_COOLDOWN_SECS_DEFAULT: [u64; 3] = [3_600, 4 * 3_600, 24 * 3_600];
/// The shortest cooldown step a config may ask for: a probe is an LLM run.
pub const BREAKER_COOLDOWN_SECS_MIN: u64 = 60;
/// The longest cooldown step a config may ask for (a week).
pub const BREAKER_COOLDOWN_SECS_MAX: u64 = 7 * 24 * 3_600;
/// Steps a `breaker_cooldown` list may have.
pub const BREAKER_COOLDOWN_STEPS_MAX: usize = 10;
/// When the store refused to open a breaker for its probe, how long until the engine tries again.
pub const BREAKER_HALF_OPEN_RETRY_SECS: u64 = 30;
/// Characters of a run's error an announcement of a trip quotes.
pub const BREAKER_ANNOUNCEMENT_ERROR_CHARS_MAX: usize = 300;

/// The shortest interval a config may give a heartbeat.
pub const INTERVAL_SECS_MIN: u64 = 1;
/// The longest interval a heartbeat may have (a year), so slot arithmetic never overflows.
pub const INTERVAL_SECS_MAX: u64 = 366 * 24 * 3_600;

/// A slot whose run starts at most this long after it was due is on time, not missed, so
/// the `skip` catch-up policy still runs it.
pub const CATCHUP_GRACE_SECS: u64 = 60;
/// The most missed slots the `all` catch-up policy runs after one gap (each one costs an LLM run).
pub const CATCHUP_RUNS_MAX: usize = 24;
/// How old a missed slot may be for the `all` catch-up policy to run it, unless configured.
pub const CATCHUP_WINDOW_SECS_DEFAULT: u64 = 24 * 3_600;
/// The longest catch-up window a config may ask for.
pub const CATCHUP_WINDOW_SECS_MAX: u64 = 7 * 24 * 3_600;
/// Slots of a cron the catch-up search walks one by one before it looks back from the end instead.
pub const CATCHUP_SCAN_SLOTS_MAX: u64 = 10_000;
/// Waits after the 1st, 2nd, ... consecutive failure before a heartbeat runs again (the last
/// repeats); the breaker may disable it first.
pub const ERROR_BACKOFF_SECS_DEFAULT: [u64; 5] = [30, 60, 300, 900, 3_600];
/// The longest backoff step a config may ask for (a day).
pub const ERROR_BACKOFF_SECS_MAX: u64 = 24 * 3_600;
/// Steps an `error_backoff` list may have.
pub const ERROR_BACKOFF_STEPS_MAX: usize = 10;
/// The largest stable jitter a config may give a job.
pub const JITTER_SECS_MAX: u64 = 3_600;
/// How far ahead a cron is searched for an occurrence inside its active hours before it is
/// refused as one that would never run.
pub const CRON_ACTIVE_SEARCH_DAYS: i64 = 366;
/// Occurrences that search looks at before it accepts the cron as dense enough to run.
pub const CRON_ACTIVE_SEARCH_SLOTS_MAX: u32 = 20_000;

/// A reply identical (case and whitespace aside) to one a heartbeat delivered this recently
/// is not delivered again.
pub const DEDUP_WINDOW_SECS: u64 = 24 * 3_600;
/// Delivered replies a SQLite store keeps in memory to answer duplicate checks without a
/// read (ADR 0066): about 150 B each. Beyond it the older half goes and checks that reach
/// back past what it holds are read from the run log.
pub const DEDUP_INDEX_ENTRIES_MAX: usize = 100_000;
/// Characters of note an `HEARTBEAT_OK` reply may carry and still count as "all is well".
pub const ACK_MAX_CHARS_DEFAULT: usize = 300;
/// The most a config may allow.
pub const ACK_MAX_CHARS_LIMIT: usize = 10_000;

/// How many runs may be in flight at once across all heartbeats.
pub const RUNS_IN_FLIGHT_MAX_DEFAULT: usize = 64;

/// Runs done working whose results wait for their write, per place of
/// `runs_in_flight_max`: they hold no place (ADR 0042), but a store that writes slowly
/// must still hold back new runs, so their number is bounded.
pub const RESULTS_WAITING_PER_PLACE_MAX: usize = 1;

/// The driver never sleeps longer than this before re-reading the wall clock, so a wall
/// clock step or a suspended machine is noticed (field notes, section 2).
pub const DRIVER_SLEEP_SECS_MAX: u64 = 30;

/// How long `serve` lets in-flight runs finish after SIGINT/SIGTERM before abandoning them.
pub const SHUTDOWN_GRACE_SECS_DEFAULT: u64 = 30;
/// How long a stop waits for the store to close (SQLite: its WAL copied into the file).
pub const STORE_CLOSE_MILLIS_MAX: u64 = 500;

/// Rows of a one-shot's run log read, newest first, to find its latest run past the skips
/// (ADR 0046); a one-shot with only skips among them is taken to have no run that decides.
pub const ONE_SHOT_LOG_ROWS_READ_MAX: usize = 64;

/// Discord's longest message, in characters.
pub const DISCORD_MESSAGE_CHARS_MAX: usize = 2_000;
/// Where a Slack message is split (Slack truncates past 40,000; its guidance is 4,000).
pub const SLACK_MESSAGE_CHARS_MAX: usize = 4_000;
/// Telegram's longest message, in UTF-16 code units.
pub const TELEGRAM_MESSAGE_CHARS_MAX: usize = 4_096;
/// Parts one message may be split into; past it the last part says what was not sent
/// (a runaway reply must not flood a chat).
pub const DELIVERY_PARTS_MAX: usize = 10;
/// The longest wait a platform's `Retry-After` may ask for before the delivery gives up
/// (the run's budget would run out anyway).
pub const DELIVERY_RETRY_AFTER_SECS_MAX: u64 = 60;
/// Characters of a platform's answer kept in an error.
pub const DELIVERY_ERROR_BODY_CHARS_MAX: usize = 300;
/// Attempts per part on the chat platforms, unless configured.
pub const CHAT_ATTEMPTS_MAX_DEFAULT: u32 = 3;
/// One attempt's timeout on the chat platforms, unless configured.
pub const CHAT_TIMEOUT_SECS_DEFAULT: u64 = 10;
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
/// Traces waiting for the OTLP exporter; past this, traces are dropped (and counted), never
/// the run slowed.
pub const TELEMETRY_QUEUE_TRACES_MAX: usize = 1_024;
/// Traces sent in one OTLP request, and the most one request may take.
pub const TELEMETRY_BATCH_TRACES_MAX: usize = 64;
pub const TELEMETRY_EXPORT_TIMEOUT_SECS: u64 = 10;
/// The status page's strip of outcomes per job: the runs of this many hours, at most
/// this many (one store read per job and refresh).
pub const RECENT_RUNS_HOURS: i64 = 24;
pub const RECENT_RUNS_SHOWN_MAX: usize = 48;
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
/// How long a write waits for its turn at the process's one SQLite writer connection.
/// Several writes may be ahead of it, each allowed `SQLITE_BUSY_TIMEOUT_MS` for the lock,
/// so this is longer: at the busy timeout itself, writes queued behind commits slowed by
/// a busy disk failed with "pool timed out" though none had waited that long for the lock.
pub const SQLITE_WRITE_QUEUE_TIMEOUT_MS: u64 = 30_000;
/// Opening a SQLite file another process writes may answer "database is locked" at once,
/// without the busy wait (its set-up pragmas); the open tries again this often, this far
/// apart: the busy timeout again in all.
pub const SQLITE_OPEN_BUSY_ATTEMPTS_MAX: u32 = 25;
pub const SQLITE_OPEN_BUSY_RETRY_MS: u64 = 200;

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
/// Runs the `heartbeat` and `cron` tools' `runs` action lists, newest first.
pub const TOOL_RUNS_LISTED_MAX: usize = 20;
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

/// How often the agent heartbeat (the `HEARTBEAT.md` one) runs unless configured.
pub const AGENT_HEARTBEAT_EVERY_SECS_DEFAULT: u64 = 30 * 60;
/// Wake requests for one agent that arrive within this window become one run.
pub const WAKE_COALESCE_MS: u64 = 250;
/// A heartbeat skipped because the agent was busy (user lane) tries again after this.
pub const WAKE_BUSY_RETRY_MS: u64 = 1_000;
/// A wake whose slot could not be placed (the read of the agent heartbeat's latest slot
/// failed) is decided again after this.
pub const WAKE_SLOT_READ_RETRY_SECS: u64 = 5;
/// A timer held because the read of its heartbeat's latest logged slot failed is lifted
/// again after this.
pub const LATEST_SLOT_READ_RETRY_SECS: u64 = 5;
/// Flood guard: the agent heartbeat never starts sooner than this after its last start,
/// whatever wakes it (field notes, failure 6).
pub const AGENT_HEARTBEAT_SPACING_SECS_MIN: u64 = 30;
/// Flood guard: at most this many agent heartbeat starts per `AGENT_HEARTBEAT_FLOOD_WINDOW_SECS`.
pub const AGENT_HEARTBEAT_STARTS_PER_WINDOW_MAX: usize = 5;
/// The flood guard's sliding window.
pub const AGENT_HEARTBEAT_FLOOD_WINDOW_SECS: u64 = 60;
/// System events (main-mode cron) kept per agent; the oldest are dropped beyond it.
pub const SYSTEM_EVENTS_PER_AGENT_MAX: usize = 20;
/// A system event not consumed within this is dropped.
pub const SYSTEM_EVENT_TTL_SECS: u64 = 3_600;
/// Bytes of `HEARTBEAT.md` put into the prompt; a longer file is cut (and says so).
pub const HEARTBEAT_FILE_BYTES_MAX: usize = 64 * 1024;
/// LLM calls one agent's runs may make per local day unless its config says otherwise
/// (a heartbeat every minute with one call each stays below it).
pub const LLM_CALLS_PER_DAY_DEFAULT: u64 = 2_000;
/// The most a config may allow per agent and day.
pub const LLM_CALLS_PER_DAY_LIMIT: u64 = 1_000_000;
/// Tokens (input and output) one agent's runs may use per local day unless its config
/// says otherwise: a heartbeat that burns more than this is the field's loudest complaint
/// (issue 27), so an operator raises it on purpose.
pub const DAILY_TOKENS_MAX_DEFAULT: u64 = 2_000_000;
/// The most tokens a config may allow per agent and day.
pub const DAILY_TOKENS_MAX_LIMIT: u64 = 100_000_000_000;
/// What one agent's runs may cost per local day unless its config says otherwise, in
/// micros of the price table's currency (5.00); only models with a price count.
pub const DAILY_COST_MICROS_MAX_DEFAULT: u64 = 5_000_000;
/// The most a config may allow per agent and day, in micros (1,000,000.00).
pub const DAILY_COST_MICROS_MAX_LIMIT: u64 = 1_000_000 * 1_000_000;
/// Tokens all agents together may use per day of the engine's zone unless `[engine]
/// daily_tokens_max` says otherwise: ten agents at their default cap. The ceiling on a
/// config where every agent's own cap was raised.
pub const GLOBAL_DAILY_TOKENS_MAX_DEFAULT: u64 = 10 * DAILY_TOKENS_MAX_DEFAULT;
/// What all agents together may spend per day unless `[engine] daily_cost_max` says
/// otherwise, in micros (50.00): ten agents at their default cap.
pub const GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT: u64 = 10 * DAILY_COST_MICROS_MAX_DEFAULT;
/// How often an engine reads back all agents' spending for the global cap, in seconds:
/// it counts its own runs as they end, and in a cluster the other nodes' runs reach it
/// only through this read.
pub const GLOBAL_SPEND_READ_SECS: u64 = 60;
/// Characters of one message (or tool call's arguments) a run's transcript keeps; the
/// rest is cut with a note.
pub const TRANSCRIPT_MESSAGE_CHARS_MAX: usize = 8_000;
/// Characters of JSON a run's transcript keeps at most (about 64 KB per run in the run
/// log); later messages are left out with a note.
pub const TRANSCRIPT_CHARS_MAX: usize = 64_000;
/// The longest model name a job may name (`model` on a heartbeat or cron job).
pub const MODEL_NAME_CHARS_MAX: usize = 200;
/// The highest price per million tokens a price table accepts (10,000.00): a higher one is
/// a typo (a price per token written as per million would be far lower, not higher).
pub const PRICE_PER_MILLION_MAX: f64 = 10_000.0;
/// Run events a slow subscriber may fall behind by before it misses some (it is told how many).
pub const RUN_EVENTS_BUFFERED_MAX: usize = 1_024;

/// A failed one-shot's retry that a guard held (quiet hours, a pause) tries again after at
/// least this long, so a long hold costs a skip row per period, not one per wake.
pub const AT_RETRY_AFTER_HOLD_SECS_MIN: u64 = 60;

/// The largest request body the operator API reads (a prompt of `PROMPT_CHARS_MAX`
/// characters fits, in any script).
pub const API_BODY_BYTES_MAX: usize = 128 * 1024;
/// Runs one page of `GET .../runs` lists unless `limit` says otherwise, and the most it may ask.
pub const API_RUNS_PAGE_DEFAULT: usize = 20;
pub const API_RUNS_PAGE_MAX: usize = 500;
/// Jobs one page of `GET /v1/status` or of an agent's list shows unless `limit` says
/// otherwise, and the most it may ask: a status of every job was a million rows of JSON
/// (about 750 bytes each) built in one answer.
pub const API_JOBS_PAGE_DEFAULT: usize = 500;
pub const API_JOBS_PAGE_MAX: usize = 2_000;
/// A user turn begun over the API ends by itself after this long unless its client ends it
/// (so a crashed client cannot hold the agent's lane), and the longest it may ask for.
pub const USER_TURN_SECS_DEFAULT: u64 = 300;
pub const USER_TURN_SECS_MAX: u64 = 3_600;
/// Characters of a system event sent over the API.
pub const SYSTEM_EVENT_CHARS_MAX: usize = 4_096;
/// How long the CLI waits for one answer of the operator API.
pub const CLI_REQUEST_TIMEOUT_SECS: u64 = 30;
/// Requests the CLI has in flight at once when it asks each agent whether a job is its
/// own (a job named without `--agent`).
pub const CLI_OWNER_LOOKUPS_IN_FLIGHT_MAX: usize = 16;
/// The most slots one backfill runs (each one costs an LLM run).
pub const BACKFILL_SLOTS_MAX: usize = 100;
/// Slots `status` walks to find a job's next run past quiet hours, a pause or a backoff.
pub const NEXT_RUN_SCAN_SLOTS_MAX: usize = 10_000;

/// How long finished runs are kept in the log by default (the age rule).
pub const RUNS_KEPT_DAYS_DEFAULT: u32 = 30;
/// The shortest age a config may keep runs for: never under what dedup and the budget read.
pub const RUNS_KEPT_DAYS_MIN: u32 = 2;
/// The longest age a config may keep runs for (ten years).
pub const RUNS_KEPT_DAYS_MAX: u32 = 3_650;
/// Rows kept per heartbeat by default (the count rule); older ones go, within the rules
/// of `core::retention`.
pub const RUNS_KEPT_PER_HEARTBEAT_DEFAULT: u32 = 1_000;
/// The largest count a config may keep per heartbeat.
pub const RUNS_KEPT_PER_HEARTBEAT_MAX: u32 = 1_000_000;
/// Runs that finished this recently are never pruned by count: dedup reads a day of
/// delivered digests and the budget a local day (at most 26 hours) of LLM calls.
pub const RUNS_PROTECTED_HOURS: u64 = 48;
/// How often the engine prunes the run log.
pub const RUNS_PRUNE_INTERVAL_SECS: u64 = 3_600;
/// How long after start-up the first prune runs (not in the start-up's own rush).
pub const RUNS_PRUNE_FIRST_DELAY_SECS: u64 = 300;

// Tools from MCP servers and native tools (ADR 0019).
/// The most one tool call may take by default (the run's budget may cut it shorter).
pub const TOOL_CALL_TIMEOUT_SECS_DEFAULT: u64 = 30;
/// The most a config may give one tool call.
pub const TOOL_CALL_TIMEOUT_SECS_MAX: u64 = 600;
/// The most connecting to a server and listing its tools may take by default.
pub const MCP_CONNECT_TIMEOUT_SECS_DEFAULT: u64 = 30;
/// Tool calls one run may make by default (on by default: each may cost money or act).
pub const TOOL_CALLS_PER_RUN_MAX_DEFAULT: u32 = 16;
/// The most a config may allow one run.
pub const TOOL_CALLS_PER_RUN_MAX_LIMIT: u32 = 256;
/// Characters of a tool's result the model reads; the rest is cut with a note saying so.
pub const TOOL_RESULT_CHARS_MAX: usize = 16_000;
/// Characters of a call's arguments the run log keeps.
pub const TOOL_ARGUMENTS_LOGGED_CHARS_MAX: usize = 500;
/// Servers a config may name, and tools one server may list (more are ignored, logged).
pub const MCP_SERVERS_MAX: usize = 32;
pub const MCP_TOOLS_PER_SERVER_MAX: usize = 256;
/// Waits before restarting a server that died: the first, doubled up to the last.
pub const MCP_RESTART_BACKOFF_SECS_MIN: u64 = 1;
pub const MCP_RESTART_BACKOFF_SECS_MAX: u64 = 60;
/// Lines of a stdio server's stderr logged per minute (the rest are counted and dropped),
/// and the longest line logged.
pub const MCP_STDERR_LINES_PER_MINUTE_MAX: u32 = 120;
pub const MCP_STDERR_LINE_CHARS_MAX: usize = 500;
/// How long a stdio server's process group has to exit after SIGTERM before SIGKILL.
pub const MCP_STOP_GRACE_MILLIS: u64 = 2_000;
