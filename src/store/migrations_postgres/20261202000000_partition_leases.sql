-- Several nodes on one database (ADR 0017): a lease per partition of the heartbeats, and
-- the nodes alive. Expiry is judged by this server's clock (now()), never a node's.
CREATE TABLE partition_leases (
    partition   INTEGER PRIMARY KEY CHECK (partition >= 0),
    -- NULL once released (or before the first grant).
    owner       TEXT COLLATE "C",
    -- Grows by one with every grant: the fencing token every write of the owner carries.
    term        BIGINT      NOT NULL DEFAULT 0 CHECK (term >= 0),
    expires_at  TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    granted_at  TIMESTAMPTZ
);

CREATE TABLE cluster_nodes (
    node_id     TEXT COLLATE "C" PRIMARY KEY,
    expires_at  TIMESTAMPTZ NOT NULL,
    joined_at   TIMESTAMPTZ NOT NULL
);

-- The partition of an agent, as `core::partition::partition_of` computes it: the first
-- four bytes of the SHA-256 of its id, big-endian, modulo the partition count.
CREATE FUNCTION systole_partition(agent TEXT, partitions INTEGER) RETURNS INTEGER
    LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (('x' || substr(encode(sha256(convert_to(agent, 'UTF8')), 'hex'), 1, 8))::bit(32)::bigint
                  % partitions)::integer $$;
