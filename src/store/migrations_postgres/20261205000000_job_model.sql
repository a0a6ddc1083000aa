-- A model per heartbeat and cron job (issue 27, ADR 0020): a cheaper model for routine
-- checks. NULL: the agent heartbeat's `model`, else the engine's.
ALTER TABLE heartbeats ADD COLUMN model TEXT;
