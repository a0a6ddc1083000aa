-- The agent heartbeat and main-mode cron (issue 6). Two new kinds of definition: `agent`
-- (the HEARTBEAT.md heartbeat, one per agent) and `cron-main` (a cron job that queues a
-- system event for it instead of running the agent itself). SQLite cannot change a CHECK,
-- so the table is rebuilt with every row and its runtime state.
CREATE TABLE heartbeats_rebuilt (
    agent_id             TEXT    NOT NULL,
    heartbeat_id         TEXT    NOT NULL,
    kind                 TEXT    NOT NULL CHECK (kind IN ('heartbeat', 'cron', 'cron-main', 'agent')),
    prompt               TEXT    NOT NULL,
    schedule_kind        TEXT    NOT NULL CHECK (schedule_kind IN ('every', 'cron', 'at')),
    every_ms             INTEGER CHECK (every_ms > 0),
    cron_expr            TEXT,
    cron_timezone        TEXT,
    at_ms                INTEGER,
    catch_up             TEXT    NOT NULL CHECK (catch_up IN ('skip', 'once', 'all')),
    catch_up_window_ms   INTEGER NOT NULL CHECK (catch_up_window_ms > 0),
    overlap              TEXT    NOT NULL CHECK (overlap IN ('skip', 'buffer_one', 'allow_all')),
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
    CHECK ((schedule_kind = 'every') = (every_ms IS NOT NULL)),
    CHECK ((schedule_kind = 'cron') = (cron_expr IS NOT NULL AND cron_timezone IS NOT NULL)),
    CHECK ((schedule_kind = 'at') = (at_ms IS NOT NULL)),
    PRIMARY KEY (agent_id, heartbeat_id)
) STRICT;

INSERT INTO heartbeats_rebuilt SELECT
    agent_id, heartbeat_id, kind, prompt, schedule_kind, every_ms, cron_expr, cron_timezone, at_ms, catch_up,
    catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, delivery_target, active_start, active_end,
    active_timezone, timeout_ms, origin, config_fingerprint, enabled, disabled_reason, consecutive_failures,
    next_slot_ms, created_at_ms, updated_at_ms, dedup
FROM heartbeats;

DROP TABLE heartbeats;
ALTER TABLE heartbeats_rebuilt RENAME TO heartbeats;

-- The agent's system-events queue, persisted so a crash loses nothing. Rows stay after
-- they leave the queue (consumed by a successful run, or dropped as the oldest beyond the
-- cap), for the record; AUTOINCREMENT so an id is never handed out twice.
CREATE TABLE system_events (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id       TEXT    NOT NULL,
    text           TEXT    NOT NULL,
    queued_at_ms   INTEGER NOT NULL,
    state          TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'consumed', 'dropped')),
    left_at_ms     INTEGER
) STRICT;
CREATE INDEX system_events_pending ON system_events (agent_id, id) WHERE state = 'pending';
