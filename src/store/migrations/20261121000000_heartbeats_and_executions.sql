-- Heartbeat definitions and their runtime state, one row per (agent, heartbeat).
CREATE TABLE heartbeats (
    agent_id             TEXT    NOT NULL,
    heartbeat_id         TEXT    NOT NULL,
    prompt               TEXT    NOT NULL,
    interval_ms          INTEGER NOT NULL CHECK (interval_ms > 0),
    delivery_target      TEXT    NOT NULL,
    active_start         TEXT,
    active_end           TEXT,
    active_timezone      TEXT,
    timeout_ms           INTEGER NOT NULL CHECK (timeout_ms > 0),
    origin               TEXT    NOT NULL CHECK (origin IN ('config', 'runtime')),
    -- Digest of the config definition last seeded; seeding with the same digest leaves
    -- runtime state (breaker, disable) alone.
    config_fingerprint   TEXT,
    enabled              INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    disabled_reason      TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    -- The slot the scheduler armed next, in Unix milliseconds; a restart resumes there.
    next_slot_ms         INTEGER,
    created_at_ms        INTEGER NOT NULL,
    updated_at_ms        INTEGER NOT NULL,
    PRIMARY KEY (agent_id, heartbeat_id)
) STRICT;

-- The audit log: one row per decided slot. The unique key is the claim: a slot that has
-- a row is never run again.
CREATE TABLE executions (
    id              INTEGER PRIMARY KEY,
    agent_id        TEXT    NOT NULL,
    heartbeat_id    TEXT    NOT NULL,
    slot_ms         INTEGER NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER,
    status          TEXT    NOT NULL
        CHECK (status IN ('running', 'succeeded', 'failed', 'timed-out', 'skipped', 'interrupted')),
    skip_reason     TEXT,
    delivery        TEXT CHECK (delivery IN ('not-needed', 'delivered', 'failed')),
    duration_ms     INTEGER,
    error           TEXT,
    output_preview  TEXT,
    UNIQUE (agent_id, heartbeat_id, slot_ms)
) STRICT;

CREATE INDEX executions_running ON executions (status) WHERE status = 'running';
