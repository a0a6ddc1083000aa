-- The global daily cap across agents (issue 27) sums every agent's spending since the
-- engine's day began: read by finish time alone, like the per-agent index beside it.
CREATE INDEX executions_finished_spend ON executions (finished_at_ms) WHERE llm_calls > 0;
