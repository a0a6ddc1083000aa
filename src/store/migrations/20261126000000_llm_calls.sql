-- The daily LLM budget per agent (issue 6): each run records how many LLM calls it made,
-- so the calls of an agent's local day can be summed again after a restart.
ALTER TABLE executions ADD COLUMN llm_calls INTEGER NOT NULL DEFAULT 0 CHECK (llm_calls >= 0);
CREATE INDEX executions_agent_finished ON executions (agent_id, finished_at_ms) WHERE llm_calls > 0;
