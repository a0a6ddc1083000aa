-- Reply handling (issue 6): what each run's reply was, and the digest of a delivered one,
-- so an identical reply within the dedup window is not delivered again; the execution log
-- is the dedup state, so it survives restarts.
ALTER TABLE executions ADD COLUMN reply TEXT CHECK (reply IN ('ok-empty', 'ok-token', 'sent', 'duplicate'));
ALTER TABLE executions ADD COLUMN reply_digest TEXT;
CREATE INDEX executions_reply_digest ON executions (agent_id, heartbeat_id, reply_digest)
    WHERE reply_digest IS NOT NULL;

-- Duplicate suppression per heartbeat, on unless turned off.
ALTER TABLE heartbeats ADD COLUMN dedup INTEGER NOT NULL DEFAULT 1 CHECK (dedup IN (0, 1));
