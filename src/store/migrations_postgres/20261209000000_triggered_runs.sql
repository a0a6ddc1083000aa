-- Whether a run was an operator's trigger, written with its claim: how a one-shot's last
-- run ended is read from the log at a start-up, and a trigger's run, failed or not, says
-- nothing of it (ADR 0048). Rows logged before it read as the schedule's own.
ALTER TABLE executions ADD COLUMN triggered BIGINT NOT NULL DEFAULT 0 CHECK (triggered IN (0, 1));
