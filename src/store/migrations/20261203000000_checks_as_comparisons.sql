-- The checks on a column's few allowed texts, written as comparisons instead of `IN` lists
-- (ADR 0035). SQLite evaluates an `IN` list of more than two constants by building a
-- temporary table of it once per execution of a statement, and the dispatch path runs its
-- statements once per row: six such tables for every run (three when its slot is claimed,
-- three when its result is written), a sixth of the dispatch writer's time. The rows and
-- what the checks allow are unchanged. SQLite cannot change a CHECK in place, so the three
-- tables with such lists are rebuilt with every row, each keeping its rowid (heartbeats
-- are stored in key order, which a start-up's load reads by rowid ranges), its indexes,
-- and the system events their id counter.

CREATE TABLE heartbeats_rebuilt (
    agent_id             TEXT    NOT NULL,
    heartbeat_id         TEXT    NOT NULL,
    kind                 TEXT    NOT NULL
        CHECK (kind = 'heartbeat' OR kind = 'cron' OR kind = 'cron-main' OR kind = 'agent'),
    prompt               TEXT    NOT NULL,
    schedule_kind        TEXT    NOT NULL
        CHECK (schedule_kind = 'every' OR schedule_kind = 'cron' OR schedule_kind = 'at'),
    every_ms             INTEGER CHECK (every_ms > 0),
    cron_expr            TEXT,
    cron_timezone        TEXT,
    at_ms                INTEGER,
    catch_up             TEXT    NOT NULL CHECK (catch_up = 'skip' OR catch_up = 'once' OR catch_up = 'all'),
    catch_up_window_ms   INTEGER NOT NULL CHECK (catch_up_window_ms > 0),
    overlap              TEXT    NOT NULL
        CHECK (overlap = 'skip' OR overlap = 'buffer_one' OR overlap = 'allow_all'),
    jitter_max_ms        INTEGER NOT NULL CHECK (jitter_max_ms >= 0),
    delete_after_run     INTEGER NOT NULL CHECK (delete_after_run IN (0, 1)),
    delivery_target      TEXT    NOT NULL,
    active_start         TEXT,
    active_end           TEXT,
    active_timezone      TEXT,
    timeout_ms           INTEGER NOT NULL CHECK (timeout_ms > 0),
    origin               TEXT    NOT NULL CHECK (origin IN ('config', 'runtime')),
    config_fingerprint   TEXT,
    enabled              INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    disabled_reason      TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    next_slot_ms         INTEGER,
    created_at_ms        INTEGER NOT NULL,
    updated_at_ms        INTEGER NOT NULL,
    dedup                INTEGER NOT NULL DEFAULT 1 CHECK (dedup IN (0, 1)),
    breaker_opened_at_ms INTEGER,
    tools                TEXT,
    model                TEXT,
    latest_slot_ms       INTEGER,
    CHECK ((schedule_kind = 'every') = (every_ms IS NOT NULL)),
    CHECK ((schedule_kind = 'cron') = (cron_expr IS NOT NULL AND cron_timezone IS NOT NULL)),
    CHECK ((schedule_kind = 'at') = (at_ms IS NOT NULL)),
    PRIMARY KEY (agent_id, heartbeat_id)
) STRICT;

INSERT INTO heartbeats_rebuilt (rowid,
    agent_id, heartbeat_id, kind, prompt, schedule_kind, every_ms, cron_expr, cron_timezone, at_ms, catch_up,
    catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, delivery_target, active_start, active_end,
    active_timezone, timeout_ms, origin, config_fingerprint, enabled, disabled_reason, consecutive_failures,
    next_slot_ms, created_at_ms, updated_at_ms, dedup, breaker_opened_at_ms, tools, model, latest_slot_ms)
SELECT rowid,
    agent_id, heartbeat_id, kind, prompt, schedule_kind, every_ms, cron_expr, cron_timezone, at_ms, catch_up,
    catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, delivery_target, active_start, active_end,
    active_timezone, timeout_ms, origin, config_fingerprint, enabled, disabled_reason, consecutive_failures,
    next_slot_ms, created_at_ms, updated_at_ms, dedup, breaker_opened_at_ms, tools, model, latest_slot_ms
FROM heartbeats ORDER BY rowid;

DROP TABLE heartbeats;
ALTER TABLE heartbeats_rebuilt RENAME TO heartbeats;

CREATE TABLE executions_rebuilt (
    id               INTEGER PRIMARY KEY,
    agent_id         TEXT    NOT NULL,
    heartbeat_id     TEXT    NOT NULL,
    slot_ms          INTEGER NOT NULL,
    started_at_ms    INTEGER NOT NULL,
    finished_at_ms   INTEGER,
    status           TEXT    NOT NULL
        CHECK (status = 'running' OR status = 'succeeded' OR status = 'failed' OR status = 'timed-out'
            OR status = 'skipped' OR status = 'interrupted'),
    skip_reason      TEXT,
    delivery         TEXT CHECK (delivery = 'not-needed' OR delivery = 'delivered' OR delivery = 'failed'),
    duration_ms      INTEGER,
    error            TEXT,
    output_preview   TEXT,
    stop_reason      TEXT,
    reply            TEXT
        CHECK (reply = 'ok-empty' OR reply = 'ok-token' OR reply = 'sent' OR reply = 'duplicate'),
    reply_digest     TEXT,
    llm_calls        INTEGER NOT NULL DEFAULT 0 CHECK (llm_calls >= 0),
    tool_use         TEXT,
    input_tokens     INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    cached_tokens    INTEGER NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),
    output_tokens    INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    reasoning_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reasoning_tokens >= 0),
    cost_micros      INTEGER NOT NULL DEFAULT 0 CHECK (cost_micros >= 0),
    unpriced_calls   INTEGER NOT NULL DEFAULT 0 CHECK (unpriced_calls >= 0),
    transcript       TEXT,
    UNIQUE (agent_id, heartbeat_id, slot_ms)
) STRICT;

INSERT INTO executions_rebuilt (
    id, agent_id, heartbeat_id, slot_ms, started_at_ms, finished_at_ms, status, skip_reason, delivery, duration_ms,
    error, output_preview, stop_reason, reply, reply_digest, llm_calls, tool_use, input_tokens, cached_tokens,
    output_tokens, reasoning_tokens, cost_micros, unpriced_calls, transcript)
SELECT
    id, agent_id, heartbeat_id, slot_ms, started_at_ms, finished_at_ms, status, skip_reason, delivery, duration_ms,
    error, output_preview, stop_reason, reply, reply_digest, llm_calls, tool_use, input_tokens, cached_tokens,
    output_tokens, reasoning_tokens, cost_micros, unpriced_calls, transcript
FROM executions ORDER BY id;

DROP TABLE executions;
ALTER TABLE executions_rebuilt RENAME TO executions;

CREATE INDEX executions_running ON executions (status) WHERE status = 'running';
CREATE INDEX executions_reply_digest ON executions (agent_id, heartbeat_id, reply_digest)
    WHERE reply_digest IS NOT NULL;
CREATE INDEX executions_agent_finished ON executions (agent_id, finished_at_ms) WHERE llm_calls > 0;
CREATE INDEX executions_finished_spend ON executions (finished_at_ms) WHERE llm_calls > 0;

CREATE TABLE system_events_rebuilt (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id       TEXT    NOT NULL,
    text           TEXT    NOT NULL,
    queued_at_ms   INTEGER NOT NULL,
    state          TEXT    NOT NULL DEFAULT 'pending'
        CHECK (state = 'pending' OR state = 'consumed' OR state = 'dropped'),
    left_at_ms     INTEGER
) STRICT;

INSERT INTO system_events_rebuilt (id, agent_id, text, queued_at_ms, state, left_at_ms)
SELECT id, agent_id, text, queued_at_ms, state, left_at_ms FROM system_events ORDER BY id;

-- An id is never handed out twice: the counter goes on from where the old table's was,
-- even past ids whose rows are gone. The rename below carries it to the new name.
DELETE FROM sqlite_sequence WHERE name = 'system_events_rebuilt';
INSERT INTO sqlite_sequence (name, seq) SELECT 'system_events_rebuilt', seq FROM sqlite_sequence WHERE name = 'system_events';

DROP TABLE system_events;
ALTER TABLE system_events_rebuilt RENAME TO system_events;

CREATE INDEX system_events_pending ON system_events (agent_id, id) WHERE state = 'pending';
