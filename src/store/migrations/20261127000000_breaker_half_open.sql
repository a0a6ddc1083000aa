-- Half-open recovery of the circuit breaker (issue 13): when the breaker last opened, so
-- the cooldown before its probe survives a restart. NULL while it is closed.
ALTER TABLE heartbeats ADD COLUMN breaker_opened_at_ms INTEGER;
