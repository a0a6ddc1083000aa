-- An agent's heartbeat pause (`pause_heartbeats`): one row per agent, replaced on each pause.
CREATE TABLE agent_pauses (
    agent_id      TEXT    NOT NULL PRIMARY KEY,
    until_ms      INTEGER NOT NULL,
    minutes       INTEGER NOT NULL CHECK (minutes > 0),
    set_at_ms     INTEGER NOT NULL
) STRICT;

-- Why a run's agent loop stopped: completed, pause_heartbeats, iteration-cap.
ALTER TABLE executions ADD COLUMN stop_reason TEXT;
