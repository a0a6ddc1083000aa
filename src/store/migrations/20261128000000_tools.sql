-- Tools (issue 26, ADR 0019): a job's tool fields (JSON; NULL when it says nothing about
-- tools), and what each run did with tools (JSON: the tools offered and every call; NULL
-- when it had none).
ALTER TABLE heartbeats ADD COLUMN tools TEXT;
ALTER TABLE executions ADD COLUMN tool_use TEXT;
