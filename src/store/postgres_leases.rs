//! Partition leases on PostgreSQL (ADR 0017): grants, renewals and releases are single
//! conditional statements judged by the server's `now()`, so nodes with skewed clocks
//! agree on who holds what. They run on the lease loop's own connections, whose lock
//! waits are bounded (ADR 0018): a grant never waits long behind a frozen holder.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::core::partition::{LeaseView, PARTITIONS_COUNT};
use crate::ports::leases::{Lease, Leases};
use crate::ports::store::{Store, StoreError};
use crate::store::postgres::PostgresStore;

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn partition_column(partition: u32) -> i32 {
    i32::try_from(partition).unwrap_or(i32::MAX)
}

fn term_from(term: i64) -> Result<u64, StoreError> {
    u64::try_from(term).map_err(|_| StoreError::Corrupt {
        what: "partition_leases.term".to_owned(),
        problem: format!("negative term {term}"),
    })
}

impl PostgresStore {
    /// The partition the database computes for `agent` (`systole_partition`), which must
    /// agree with `core::partition::partition_of`: a partition's recovery runs in SQL.
    ///
    /// # Errors
    /// When the query fails.
    pub async fn partition_in_sql(&self, agent: &str, partitions: u32) -> Result<u32, StoreError> {
        let partition: i32 = sqlx::query_scalar("SELECT systole_partition($1, $2)")
            .bind(agent)
            .bind(i32::try_from(partitions).unwrap_or(i32::MAX))
            .fetch_one(&self.pool)
            .await?;
        u32::try_from(partition).map_err(|_| StoreError::Backend(format!("negative partition {partition}")))
    }
}

#[async_trait]
impl Leases for PostgresStore {
    async fn announce(&self, node: &str, api_url: Option<&str>, ttl: Duration) -> Result<BTreeSet<String>, StoreError> {
        let mut tx = self.lease_pool.begin().await?;
        sqlx::query(
            "INSERT INTO partition_leases (partition) SELECT generate_series(0, $1 - 1) ON CONFLICT DO NOTHING",
        )
        .bind(i32::try_from(PARTITIONS_COUNT).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO cluster_nodes (node_id, expires_at, joined_at, api_url) \
             VALUES ($1, now() + $2 * interval '1 millisecond', now(), $3) \
             ON CONFLICT (node_id) DO UPDATE SET expires_at = excluded.expires_at, api_url = excluded.api_url",
        )
        .bind(node)
        .bind(ttl_ms(ttl))
        .bind(api_url)
        .execute(&mut *tx)
        .await?;
        let live: Vec<String> =
            sqlx::query_scalar("SELECT node_id FROM cluster_nodes WHERE expires_at > now() ORDER BY node_id")
                .fetch_all(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(live.into_iter().collect())
    }

    async fn lease_table(&self) -> Result<Vec<LeaseView>, StoreError> {
        // The owner's address comes from its own announcement: a node forwards a call only
        // to an address the lease tables hold (ADR 0024).
        let rows: Vec<(i32, Option<String>, Option<String>, i64, bool)> = sqlx::query_as(
            "SELECT l.partition, l.owner, n.api_url, l.term, l.expires_at <= now() FROM partition_leases l \
             LEFT JOIN cluster_nodes n ON n.node_id = l.owner \
             WHERE l.partition < $1 ORDER BY l.partition",
        )
        .bind(i32::try_from(PARTITIONS_COUNT).unwrap_or(i32::MAX))
        .fetch_all(&self.lease_pool)
        .await?;
        rows.into_iter()
            .map(|(partition, owner, owner_url, term, expired)| {
                Ok(LeaseView {
                    partition: u32::try_from(partition).unwrap_or(u32::MAX),
                    owner,
                    owner_url,
                    term: term_from(term)?,
                    expired,
                })
            })
            .collect()
    }

    async fn acquire(&self, node: &str, partition: u32, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        // The UPDATE locks the row: it waits for the old term's fenced writes in flight
        // (they hold it FOR SHARE), and every later one reads the new term.
        let term: Option<i64> = sqlx::query_scalar(
            "UPDATE partition_leases SET owner = $1, term = term + 1, \
             expires_at = now() + $2 * interval '1 millisecond', granted_at = now() \
             WHERE partition = $3 AND (owner IS NULL OR expires_at <= now()) RETURNING term",
        )
        .bind(node)
        .bind(ttl_ms(ttl))
        .bind(partition_column(partition))
        .fetch_optional(&self.lease_pool)
        .await?;
        term.map(|term| Ok(Lease { partition, node: node.to_owned(), term: term_from(term)? })).transpose()
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE partition_leases SET expires_at = now() + $1 * interval '1 millisecond' \
             WHERE partition = $2 AND owner = $3 AND term = $4",
        )
        .bind(ttl_ms(ttl))
        .bind(partition_column(lease.partition))
        .bind(&lease.node)
        .bind(i64::try_from(lease.term).unwrap_or(i64::MAX))
        .execute(&self.lease_pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE partition_leases SET owner = NULL, expires_at = now() \
             WHERE partition = $1 AND owner = $2 AND term = $3",
        )
        .bind(partition_column(lease.partition))
        .bind(&lease.node)
        .bind(i64::try_from(lease.term).unwrap_or(i64::MAX))
        .execute(&self.lease_pool)
        .await?;
        Ok(())
    }

    async fn leave(&self, node: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM cluster_nodes WHERE node_id = $1").bind(node).execute(&self.lease_pool).await?;
        Ok(())
    }

    fn partition_store(&self, lease: &Lease) -> Arc<dyn Store> {
        Arc::new(PostgresStore {
            pool: self.pool.clone(),
            lease_pool: self.lease_pool.clone(),
            fence: Some(lease.clone()),
        })
    }
}
