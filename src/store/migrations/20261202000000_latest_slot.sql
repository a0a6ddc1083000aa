-- Each heartbeat's latest slot in the log (claimed or skipped), kept in its own row by the
-- writes that log a slot and by the insert of a row whose key already has a log: a restart
-- arms every slot above it, and reading it per row from the log was a seek per heartbeat
-- (a quarter of SQLite's time in a restart of a million).
ALTER TABLE heartbeats ADD COLUMN latest_slot_ms INTEGER;
UPDATE heartbeats SET latest_slot_ms = (SELECT MAX(e.slot_ms) FROM executions e
    WHERE e.agent_id = heartbeats.agent_id AND e.heartbeat_id = heartbeats.heartbeat_id);
