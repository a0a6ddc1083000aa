-- What runs cost (issue 27, ADR 0020): each finished run keeps the tokens its completions
-- reported and their cost in micros of the price table's currency, so an agent's day can
-- be summed against its caps again after a restart or a clock jump. Its transcript (JSON:
-- what the model was sent and answered, bounded, secrets blanked) goes with its row.
ALTER TABLE executions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0);
ALTER TABLE executions ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0);
ALTER TABLE executions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0);
ALTER TABLE executions ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0 CHECK (reasoning_tokens >= 0);
ALTER TABLE executions ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0 CHECK (cost_micros >= 0);
ALTER TABLE executions ADD COLUMN unpriced_calls INTEGER NOT NULL DEFAULT 0 CHECK (unpriced_calls >= 0);
ALTER TABLE executions ADD COLUMN transcript TEXT;
