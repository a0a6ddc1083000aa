-- The PostgreSQL schema: the same tables and columns as SQLite's migrations reach, so the
-- SQL the two stores share reads and writes both alike. Flags and counts stay BIGINT (0/1)
-- as in SQLite; keys compare byte-wise (COLLATE "C") so every listing is ordered like the
-- memory store's and SQLite's.
CREATE TABLE heartbeats (
    agent_id             TEXT COLLATE "C" NOT NULL,
    heartbeat_id         TEXT COLLATE "C" NOT NULL,
    kind                 TEXT    NOT NULL CHECK (kind IN ('heartbeat', 'cron', 'cron-main', 'agent')),
    prompt               TEXT    NOT NULL,
    schedule_kind        TEXT    NOT NULL CHECK (schedule_kind IN ('every', 'cron', 'at')),
    every_ms             BIGINT CHECK (every_ms > 0),
    cron_expr            TEXT,
    cron_timezone        TEXT,
    at_ms                BIGINT,
    catch_up             TEXT    NOT NULL CHECK (catch_up IN ('skip', 'once', 'all')),
    catch_up_window_ms   BIGINT  NOT NULL CHECK (catch_up_window_ms > 0),
    overlap              TEXT    NOT NULL CHECK (overlap IN ('skip', 'buffer_one', 'allow_all')),
    jitter_max_ms        BIGINT  NOT NULL CHECK (jitter_max_ms >= 0),
    delete_after_run     BIGINT  NOT NULL CHECK (delete_after_run IN (0, 1)),
    delivery_target      TEXT    NOT NULL,
    active_start         TEXT,
    active_end           TEXT,
    active_timezone      TEXT,
    timeout_ms           BIGINT  NOT NULL CHECK (timeout_ms > 0),
    origin               TEXT    NOT NULL CHECK (origin IN ('config', 'runtime')),
    config_fingerprint   TEXT,
    enabled              BIGINT  NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    disabled_reason      TEXT,
    consecutive_failures BIGINT  NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    next_slot_ms         BIGINT,
    created_at_ms        BIGINT  NOT NULL,
    updated_at_ms        BIGINT  NOT NULL,
    dedup                BIGINT  NOT NULL DEFAULT 1 CHECK (dedup IN (0, 1)),
    breaker_opened_at_ms BIGINT,
    CHECK ((schedule_kind = 'every') = (every_ms IS NOT NULL)),
    CHECK ((schedule_kind = 'cron') = (cron_expr IS NOT NULL AND cron_timezone IS NOT NULL)),
    CHECK ((schedule_kind = 'at') = (at_ms IS NOT NULL)),
    PRIMARY KEY (agent_id, heartbeat_id)
);

-- The audit log: one row per decided slot. The unique key is the claim: a slot that has
-- a row is never run again, whichever node asks.
CREATE TABLE executions (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id        TEXT COLLATE "C" NOT NULL,
    heartbeat_id    TEXT COLLATE "C" NOT NULL,
    slot_ms         BIGINT  NOT NULL,
    started_at_ms   BIGINT  NOT NULL,
    finished_at_ms  BIGINT,
    status          TEXT    NOT NULL
        CHECK (status IN ('running', 'succeeded', 'failed', 'timed-out', 'skipped', 'interrupted')),
    skip_reason     TEXT,
    delivery        TEXT CHECK (delivery IN ('not-needed', 'delivered', 'failed')),
    duration_ms     BIGINT,
    error           TEXT,
    output_preview  TEXT,
    stop_reason     TEXT,
    reply           TEXT CHECK (reply IN ('ok-empty', 'ok-token', 'sent', 'duplicate')),
    reply_digest    TEXT,
    llm_calls       BIGINT  NOT NULL DEFAULT 0 CHECK (llm_calls >= 0),
    UNIQUE (agent_id, heartbeat_id, slot_ms)
);

CREATE INDEX executions_running ON executions (status) WHERE status = 'running';
CREATE INDEX executions_reply_digest ON executions (agent_id, heartbeat_id, reply_digest)
    WHERE reply_digest IS NOT NULL;
CREATE INDEX executions_agent_finished ON executions (agent_id, finished_at_ms) WHERE llm_calls > 0;

CREATE TABLE agent_pauses (
    agent_id      TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    until_ms      BIGINT NOT NULL,
    minutes       BIGINT NOT NULL CHECK (minutes > 0),
    set_at_ms     BIGINT NOT NULL
);

CREATE TABLE system_events (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id       TEXT COLLATE "C" NOT NULL,
    text           TEXT    NOT NULL,
    queued_at_ms   BIGINT  NOT NULL,
    state          TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'consumed', 'dropped')),
    left_at_ms     BIGINT
);

CREATE INDEX system_events_pending ON system_events (agent_id, id) WHERE state = 'pending';
