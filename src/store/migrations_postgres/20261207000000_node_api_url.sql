-- Any node answers any call (ADR 0024): each node announces where its API answers, and a
-- call for an agent another node owns is forwarded there. NULL for a node serving no API.
ALTER TABLE cluster_nodes ADD COLUMN api_url TEXT;
