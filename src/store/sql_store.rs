//! The SQL both relational stores run, written once: SQLite and PostgreSQL take the same
//! statements (`$n` parameters, `VALUES` lists named `column1..`, `UPDATE .. FROM`,
//! `ON CONFLICT`, `RETURNING`, window functions), so one text serves both and the
//! conformance suite holds them to one behaviour.
//!
//! A backend module invokes [`sql_store!`] after defining what differs:
//! - `write_tx(&self)`: a transaction that writes (SQLite: `BEGIN IMMEDIATE`);
//! - `seed_tx(&self)`: a seed's transaction (SQLite: a new file's first seed is written
//!   before the file switches to WAL, ADR 0061);
//! - `snapshot_tx(&self)`: a transaction whose reads share one snapshot;
//! - `fence(&self, tx, keys)`: refuses a write on heartbeats this node does not own
//!   (ADR 0017; SQLite owns everything);
//! - `owns(&self, agent)` and `owned_rows_sql(&self)`: what a partition's engine loads
//!   and recovers (everything, but for a partition's store);
//! - `serialize_on(tx, scope)`: makes writers of one scope take turns where the backend's
//!   write transaction does not already;
//! - `load_page_sql(columns, selected, owned)`: one page of heartbeats as one JSON array,
//!   its row count and where the next page resumes (two texts, `$1` and `$2`);
//! - `LOCK_READ_ROWS`: the suffix that locks rows read before they are rewritten;
//! - `push_listed(query, rows)`: a batched read's list, the source `v` of its rows
//!   (`sql_lists`, ADR 0036);
//! - `write_claims(&self, claims)` and `write_results(&self, runs, max)`: the dispatch
//!   path's two writes (PostgreSQL: the shared `claim_slots_by_statements` and
//!   `finish_runs_by_statements`; SQLite: its direct writer, ADR 0033);
//! - `write_claims_and_read(&self, claims)`: the claims and their definitions
//!   (PostgreSQL: one call after the other; SQLite: both on its writer's thread, ADR 0037).
//! - `write_seed_rows(&self, tx, defs, changed, at)`: a seed's changed rows, each with its
//!   fingerprint taken as it is written (PostgreSQL: the shared `seed_rows_by_statements`;
//!   SQLite: one prepared upsert stepped a row, `sqlite_seed`).
//! - `delivered_since_indexed(&self, queries)` and `runs_deleting(&self)`: duplicate checks
//!   and the runs they read going (SQLite: from its index of recent deliveries, which
//!   forgets; PostgreSQL: read each time, ADR 0066).
//! - `close_connections(&self)`: ends the process's connections at a stop (SQLite: after
//!   a checkpoint that leaves the whole database in its file).
//!
//! A generic function over `sqlx::Database` would need a dozen higher-ranked bounds on
//! every helper; a macro keeps the SQL readable and still written once.

/// A definition's upsert, up to its rows: the columns, each row's thirty values following
/// (`push_values` on sqlx, one row of `?n` on SQLite's direct seed).
pub(crate) const UPSERT_HEAD_SQL: &str = "INSERT INTO heartbeats (agent_id, heartbeat_id, kind, prompt, schedule_kind, \
     every_ms, cron_expr, cron_timezone, at_ms, catch_up, catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, \
     dedup, delivery_target, active_start, active_end, active_timezone, timeout_ms, origin, config_fingerprint, tools, \
     model, created_at_ms, updated_at_ms, enabled, disabled_reason, consecutive_failures, next_slot_ms) ";

/// A replaced definition: the new one, re-enabled with a clean breaker and its first slot;
/// a seed's fingerprint kept where the row has none of its own (a run-time edit's).
pub(crate) const UPSERT_CONFLICT_SQL: &str = " ON CONFLICT (agent_id, heartbeat_id) DO UPDATE SET kind = excluded.kind, \
     prompt = excluded.prompt, schedule_kind = excluded.schedule_kind, every_ms = excluded.every_ms, \
     cron_expr = excluded.cron_expr, cron_timezone = excluded.cron_timezone, at_ms = excluded.at_ms, \
     catch_up = excluded.catch_up, catch_up_window_ms = excluded.catch_up_window_ms, overlap = excluded.overlap, \
     jitter_max_ms = excluded.jitter_max_ms, delete_after_run = excluded.delete_after_run, dedup = excluded.dedup, \
     delivery_target = excluded.delivery_target, active_start = excluded.active_start, active_end = excluded.active_end, \
     active_timezone = excluded.active_timezone, timeout_ms = excluded.timeout_ms, origin = excluded.origin, \
     tools = excluded.tools, model = excluded.model, \
     config_fingerprint = COALESCE(excluded.config_fingerprint, heartbeats.config_fingerprint), \
     enabled = 1, disabled_reason = NULL, consecutive_failures = 0, next_slot_ms = excluded.next_slot_ms, \
     breaker_opened_at_ms = NULL, updated_at_ms = excluded.updated_at_ms";

macro_rules! sql_store {
    ($store:ident, $db:ty) => {
        /// The shared statements, expanded for this backend (see `store::sql_store`).
        mod shared_sql {
            use std::collections::{BTreeMap, BTreeSet, HashSet};

            use async_trait::async_trait;
            use jiff::Timestamp;
            use sqlx::{QueryBuilder, Row, Transaction};

            // The backend's hooks: write_tx, snapshot_tx, fence, serialize_on,
            // load_page_sql, LOCK_READ_ROWS, push_listed.
            use super::*;
            use crate::core::breaker::{BreakerStep, DISABLED_BY_BREAKER};
            use crate::store::breaker_batch::{self, BreakerUpdate, StoredBreaker};
            use crate::core::budget::DaySpend;
            use crate::core::heartbeat::{Heartbeat, HeartbeatDef, JobKind, Origin};
            use crate::core::hex::lower_hex;
            use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
            use crate::core::pause::PauseRecord;
            use crate::core::reply::ReplyKind;
            use crate::core::retention::RunRetention;
            use crate::store::config_keys::{self, ConfigKeys};
            use crate::store::seed_threads;
            use crate::store::slot_batch;
            use crate::store::sql_lists::{listed_keys, Listed};
            use crate::store::text_check;
            use crate::core::system_events::{self, SystemEvent};
            use crate::limits::STORE_BATCH_ROWS_MAX;
            use crate::ports::store::{
                AgentJobs, Armable, ClaimOutcome, ClaimedSlots, DedupQuery, Definitions, DeliveryStatus, Execution, ExecutionStatus, NextSlot, Queued, RunRecord, SeedReport,
                SkipRecord, SlotClaim, StopReason, Store, StoreError, INTERRUPTED_ERROR_TEXT,
            };
            use crate::store::sql_rows::{
                armable_from_row, corrupt, execution_from_row, heartbeat_from_row, key_from_parts, millis, schedule_columns, spend_from, stored_count,
                timestamp, each_heartbeat_row, whole_row_columns, SharedTexts, ARMING_COLUMNS, LATEST_SLOT_COLUMN, LOAD_PAGE_ROWS,
                LOGGED_LATEST_SLOT_OF_V,
            };

        // The batched reads (ADR 0036): each a function of its list, so its statement is
        // written once; the store's `push_listed` writes the list.

        /// A spending's sums: calls, tokens, cost.
        const SUMS: &str = "CAST(COALESCE(SUM(e.llm_calls), 0) AS BIGINT), \
            CAST(COALESCE(SUM(e.input_tokens + e.output_tokens), 0) AS BIGINT), \
            CAST(COALESCE(SUM(e.cost_micros), 0) AS BIGINT)";

        /// Each agent's count of jobs (of one agent, `$1`, with `one_agent`), and a row for
        /// each agent heartbeat: agent, count, 1 for an agent heartbeat's row. The counts
        /// come from the primary key alone and the agent heartbeats from their partial
        /// index, in one statement (one snapshot): a count that read each row's kind read
        /// the whole table (0.23 s at a million jobs in SQLite). `owned` filters the rows
        /// of a partition's engine.
        pub(crate) fn jobs_of_agents_read(one_agent: bool, owned: &str) -> String {
            // One agent's rows are the primary key's range; an `OR` around the filter
            // would have SQLite scan them all.
            let one = if one_agent { " AND agent_id = $1" } else { "" };
            format!(
                "SELECT agent_id, count(*), CAST(0 AS BIGINT) FROM heartbeats WHERE 1 = 1{one}{owned} \
                 GROUP BY agent_id \
                 UNION ALL \
                 SELECT agent_id, CAST(0 AS BIGINT), CAST(1 AS BIGINT) FROM heartbeats \
                 WHERE kind = '{}'{one}{owned}",
                JobKind::Agent.as_str()
            )
        }

        /// Each listed agent's spending since its listed day began (agent, since).
        pub(crate) fn each_day_spent_read<'a>(days: &[[Listed<'a>; 2]]) -> Result<QueryBuilder<'a, $db>, StoreError> {
            let mut select = QueryBuilder::new(format!("SELECT v.column1, v.column2, {SUMS} FROM "));
            push_listed(&mut select, days)?;
            select.push(
                " AS v JOIN executions e ON e.agent_id = v.column1 AND e.finished_at_ms >= v.column2 \
                 AND e.llm_calls > 0 GROUP BY v.column1, v.column2",
            );
            Ok(select)
        }

        /// The listed runs' share of their agents' days (agent, heartbeat, slot, since).
        pub(crate) fn each_day_runs_share_read<'a>(
            shares: &[[Listed<'a>; 4]],
        ) -> Result<QueryBuilder<'a, $db>, StoreError> {
            let mut select = QueryBuilder::new(format!("SELECT v.column1, v.column4, {SUMS} FROM "));
            push_listed(&mut select, shares)?;
            select.push(
                " AS v JOIN executions e ON e.agent_id = v.column1 AND e.heartbeat_id = v.column2 \
                 AND e.slot_ms = v.column3 WHERE e.llm_calls > 0 AND e.finished_at_ms >= v.column4 \
                 GROUP BY v.column1, v.column4",
            );
            Ok(select)
        }

        /// Each listed heartbeat's latest logged slot (agent, heartbeat).
        pub(crate) fn latest_slots_read<'a>(keys: &[[Listed<'a>; 2]]) -> Result<QueryBuilder<'a, $db>, StoreError> {
            let mut select = QueryBuilder::new(format!("SELECT v.column1, v.column2, {LOGGED_LATEST_SLOT_OF_V} FROM "));
            push_listed(&mut select, keys)?;
            select.push(" AS v");
            Ok(select)
        }

        /// The listed heartbeats' whole rows as one JSON value (agent, heartbeat), decoded as
        /// the start-up load decodes its pages.
        pub(crate) fn definitions_read<'a>(keys: &[[Listed<'a>; 2]]) -> Result<QueryBuilder<'a, $db>, StoreError> {
            let (columns, selected) = whole_row_columns("h.");
            let (head, tail) = json_rows_sql(&columns);
            let mut select = QueryBuilder::new(format!("{head}SELECT {selected} FROM "));
            push_listed(&mut select, keys)?;
            select.push(" AS v JOIN heartbeats h ON h.agent_id = v.column1 AND h.heartbeat_id = v.column2");
            select.push(tail);
            Ok(select)
        }

        /// The definitions in pages that [`definitions_read`] answered.
        pub(crate) fn definitions_of_pages(pages: &[String]) -> Result<Definitions, StoreError> {
            let mut definitions = BTreeMap::new();
            each_heartbeat_of_pages(pages, &mut |heartbeat| {
                definitions.insert(heartbeat.def.key.clone(), std::sync::Arc::new(heartbeat.def));
            })?;
            Ok(definitions)
        }

        /// Each whole row in pages that [`definitions_read`] answered, handed to `take`.
        fn each_heartbeat_of_pages(pages: &[String], take: &mut dyn FnMut(Heartbeat)) -> Result<(), StoreError> {
            let mut shared = SharedTexts::default();
            for page in pages {
                each_heartbeat_row(page, &mut |row| {
                    take(heartbeat_from_row(row, &mut shared)?);
                    Ok(())
                })?;
            }
            Ok(())
        }

        /// The positions of the listed replies delivered since their times (agent, heartbeat,
        /// digest, since, position): each once, by `EXISTS`, with no temporary table to make
        /// them distinct.
        pub(crate) fn delivered_since_read<'a>(
            queries: &[[Listed<'a>; 5]],
        ) -> Result<QueryBuilder<'a, $db>, StoreError> {
            let mut select = QueryBuilder::new("SELECT v.column5 FROM ");
            push_listed(&mut select, queries)?;
            select.push(
                " AS v WHERE EXISTS (SELECT 1 FROM executions e WHERE e.agent_id = v.column1 \
                 AND e.heartbeat_id = v.column2 AND e.reply_digest = v.column3 AND e.finished_at_ms >= v.column4)",
            );
            Ok(select)
        }

        /// The listed runs' share (agent, heartbeat, slot) of a spending since `since`, of
        /// `agent`'s alone if it is named.
        pub(crate) fn runs_share_read<'a>(
            runs: &[[Listed<'a>; 3]],
            since: i64,
            agent: Option<&'a str>,
        ) -> Result<QueryBuilder<'a, $db>, StoreError> {
            let mut select = QueryBuilder::new(format!("SELECT {SUMS} FROM executions e JOIN "));
            push_listed(&mut select, runs)?;
            select.push(
                " AS v ON e.agent_id = v.column1 AND e.heartbeat_id = v.column2 AND e.slot_ms = v.column3 \
                 WHERE e.llm_calls > 0 AND e.finished_at_ms >= ",
            );
            select.push_bind(since);
            if let Some(agent) = agent {
                select.push(" AND e.agent_id = ").push_bind(agent);
            }
            Ok(select)
        }

        impl $store {
            /// The duplicate checks `queries`, read from the run log: each query's position
            /// comes back once if it matches, one read a chunk.
            pub(crate) async fn read_delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
                let mut found = vec![false; queries.len()];
                for (chunk_index, chunk) in queries.chunks(STORE_BATCH_ROWS_MAX).enumerate() {
                    let first = chunk_index * STORE_BATCH_ROWS_MAX;
                    let listed: Vec<[Listed; 5]> = chunk
                        .iter()
                        .enumerate()
                        .map(|(index, query)| {
                            [
                                Listed::Text(query.key.agent.as_str()),
                                Listed::Text(query.key.heartbeat.as_str()),
                                Listed::Text(query.digest.as_str()),
                                Listed::Integer(query.since.as_millisecond()),
                                Listed::Integer(i64::try_from(first + index).unwrap_or(i64::MAX)),
                            ]
                        })
                        .collect();
                    let positions: Vec<i64> =
                        delivered_since_read(&listed)?.build_query_scalar().fetch_all(&self.pool).await?;
                    for position in positions {
                        if let Some(found) = usize::try_from(position).ok().and_then(|position| found.get_mut(position)) {
                            *found = true;
                        }
                    }
                }
                Ok(found)
            }

            /// Every heartbeat of this store (this node's), `selected` read as `columns`.
            // sqlx hands SQLite rows over one at a time between threads (~30 µs each here); a
            // page of rows as one JSON array is one value, so a million load in seconds.
            // A partition's store reads only its partition's rows. One snapshot for all
            // pages: the list is of one moment. A page names where the next resumes (its
            // backend's cursor, as two texts: PostgreSQL the last key, SQLite the last
            // rowid), so the database reads the next page while this one is parsed: each
            // took half of a restart, one after the other.
            // Each parsed page goes to `take` beside the next page's read, in the store's
            // order (SQLite: rowid).
            async fn load_selected(
                &self,
                columns: &str,
                selected: &str,
                take: &mut (dyn FnMut(Vec<Armable>) + Send),
            ) -> Result<(), StoreError> {
                let page_sql = load_page_sql(columns, selected, &self.owned_rows_sql());
                let mut tx = self.snapshot_tx().await?;
                let mut shared = SharedTexts::default();
                // Empty texts: before the first row.
                let mut cursor = (String::new(), String::new());
                let mut unparsed: Option<String> = None;
                loop {
                    let fetch = sqlx::query_as::<_, (String, i64, Option<String>, Option<String>)>(&page_sql)
                        .bind(&cursor.0)
                        .bind(&cursor.1)
                        .bind(i64::try_from(LOAD_PAGE_ROWS).unwrap_or(i64::MAX))
                        .fetch_one(&mut *tx);
                    // Polled first, the fetch hands its statement to the database's thread;
                    // the previous page is parsed here meanwhile.
                    let parse = async {
                        match unparsed.take() {
                            Some(page) => parse_page(&page, &mut shared).map(|armable| take(armable)),
                            None => Ok(()),
                        }
                    };
                    let (fetched, parsed) = tokio::join!(fetch, parse);
                    parsed?;
                    let (page, count, resume_first, resume_second) = fetched?;
                    unparsed = Some(page);
                    match (resume_first, resume_second) {
                        (Some(first), Some(second)) if usize::try_from(count).unwrap_or(0) >= LOAD_PAGE_ROWS => {
                            cursor = (first, second);
                        }
                        _ => break,
                    }
                }
                if let Some(page) = unparsed {
                    take(parse_page(&page, &mut shared)?);
                }
                tx.commit().await?;
                Ok(())
            }

            /// The stored rows of those of `keys` that are stored, whole, as pages of JSON
            /// ([`definitions_read`]): one read a batch of keys.
            async fn rows_of(&self, keys: &[HeartbeatKey]) -> Result<Vec<String>, StoreError> {
                let mut pages = Vec::new();
                for chunk in keys.chunks(STORE_BATCH_ROWS_MAX) {
                    let listed = listed_keys(chunk);
                    pages.push(definitions_read(&listed)?.build().fetch_one(&self.pool).await?.try_get::<String, _>(0)?);
                }
                Ok(pages)
            }

            /// At most `limit` whole rows `WHERE condition` (its `$1` and `$2` the two texts)
            /// in `order`, decoded, in key order.
            async fn whole_rows_page(
                &self,
                condition: &str,
                order: &str,
                texts: (&str, &str),
                limit: usize,
            ) -> Result<Vec<Heartbeat>, StoreError> {
                let (columns, selected) = whole_row_columns("");
                let (head, tail) = json_rows_sql(&columns);
                let owned = self.owned_rows_sql();
                let sql =
                    format!("{head}SELECT {selected} FROM heartbeats WHERE {condition}{owned} ORDER BY {order} LIMIT $3{tail}");
                let page: String = sqlx::query_scalar(&sql)
                    .bind(texts.0)
                    .bind(texts.1)
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_one(&self.pool)
                    .await?;
                let mut heartbeats = Vec::new();
                each_heartbeat_of_pages(&[page], &mut |heartbeat| heartbeats.push(heartbeat))?;
                Ok(sorted_by_key(heartbeats))
            }

            /// Every heartbeat, `selected` read as `columns`, in key order.
            async fn load_sorted(&self, columns: &str, selected: &str) -> Result<Vec<Heartbeat>, StoreError> {
                let mut heartbeats = Vec::new();
                self.load_selected(columns, selected, &mut |page| {
                    heartbeats.extend(page.into_iter().map(|armable| armable.heartbeat));
                })
                .await?;
                // The backend may page in its storage order (SQLite: rowid).
                Ok(sorted_by_key(heartbeats))
            }

            /// The columns of a load for arming, as read and as selected: what only a run
            /// reads stays in the store (the prompt but an agent heartbeat's, which its wakes
            /// build on; the driver reads a claimed slot's whole definition), and with
            /// `latest` each enabled heartbeat's latest slot comes along.
            fn arming_columns(latest: bool) -> (String, String) {
                let kept = format!("CASE WHEN kind = '{}' THEN prompt ELSE '' END AS prompt", JobKind::Agent.as_str());
                let mut columns: Vec<&str> = ARMING_COLUMNS.to_vec();
                let mut selected: Vec<&str> =
                    ARMING_COLUMNS.iter().map(|column| if *column == "prompt" { kept.as_str() } else { column }).collect();
                if latest {
                    columns.push("latest_slot_ms");
                    selected.push(LATEST_SLOT_COLUMN);
                }
                (columns.join(", "), selected.join(", "))
            }

            /// `Store::spent_since_each` in one snapshot: each agent's day from its own start,
            /// grouped by agent and day, less the share of the named runs of that agent.
            async fn read_spent_each(
                &self,
                days: &[(AgentId, Timestamp)],
                excluding: &[(HeartbeatKey, Timestamp)],
            ) -> Result<Vec<DaySpend>, StoreError> {
                // Each (agent, day) once: a pair named twice would count its runs twice.
                let asked: BTreeSet<(&str, i64)> =
                    days.iter().map(|(agent, since)| (agent.as_str(), since.as_millisecond())).collect();
                let asked: Vec<(&str, i64)> = asked.into_iter().collect();
                let mut spent: BTreeMap<(String, i64), DaySpend> = BTreeMap::new();
                let mut tx = self.snapshot_tx().await?;
                for chunk in asked.chunks(STORE_BATCH_ROWS_MAX) {
                    let listed: Vec<[Listed; 2]> =
                        chunk.iter().map(|(agent, since)| [Listed::Text(agent), Listed::Integer(*since)]).collect();
                    let rows: Vec<(String, i64, i64, i64, i64)> =
                        each_day_spent_read(&listed)?.build_query_as().fetch_all(&mut *tx).await?;
                    for (agent, since, calls, tokens, cost_micros) in rows {
                        spent.insert((agent, since), spend_from((calls, tokens, cost_micros)));
                    }
                }
                // The named runs, each beside every day asked of its agent (normally one).
                let shares: Vec<[Listed; 4]> = excluding
                    .iter()
                    .flat_map(|(key, slot)| {
                        asked.iter().filter(move |(agent, _)| *agent == key.agent.as_str()).map(move |(_, since)| {
                            [
                                Listed::Text(key.agent.as_str()),
                                Listed::Text(key.heartbeat.as_str()),
                                Listed::Integer(slot.as_millisecond()),
                                Listed::Integer(*since),
                            ]
                        })
                    })
                    .collect();
                for chunk in shares.chunks(STORE_BATCH_ROWS_MAX) {
                    let rows: Vec<(String, i64, i64, i64, i64)> =
                        each_day_runs_share_read(chunk)?.build_query_as().fetch_all(&mut *tx).await?;
                    for (agent, since, calls, tokens, cost_micros) in rows {
                        let share = spend_from((calls, tokens, cost_micros));
                        let total = spent.entry((agent, since)).or_default();
                        total.calls = total.calls.saturating_sub(share.calls);
                        total.tokens = total.tokens.saturating_sub(share.tokens);
                        total.cost_micros = total.cost_micros.saturating_sub(share.cost_micros);
                    }
                }
                tx.commit().await?;
                Ok(days
                    .iter()
                    .map(|(agent, since)| {
                        spent.get(&(agent.to_string(), since.as_millisecond())).copied().unwrap_or_default()
                    })
                    .collect())
            }

            /// `Store::claim_slots` as multi-row statements through sqlx (the backend's
            /// `write_claims` may take another way).
            #[allow(dead_code)] // SQLite claims by its direct writer
            pub(crate) async fn claim_slots_by_statements(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, claims.iter().map(|claim| &claim.key.agent)).await?;
                // Rows the INSERT really added; each can answer one claim, so a slot twice in one
                // batch is won once.
                let mut won: BTreeSet<(String, String, i64)> = BTreeSet::new();
                // Only the first claim of a slot goes into the statement: of two rows for one key
                // in one INSERT, PostgreSQL may write either (the join orders them), while the
                // answer below gives the slot to the first (and says whose row the second met).
                let mut offered: BTreeSet<(&str, &str, i64)> = BTreeSet::new();
                let firsts: Vec<&SlotClaim> = claims
                    .iter()
                    .filter(|claim| {
                        offered.insert((claim.key.agent.as_str(), claim.key.heartbeat.as_str(), claim.slot.as_millisecond()))
                    })
                    .collect();
                for chunk in firsts.chunks(STORE_BATCH_ROWS_MAX) {
                    // Only a heartbeat the store still has can claim: one deleted while its timer
                    // fired never runs again.
                    let mut insert = QueryBuilder::<$db>::new(
                        "INSERT INTO executions (agent_id, heartbeat_id, slot_ms, started_at_ms, status, triggered) \
                         SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6 FROM (",
                    );
                    insert.push_values(chunk, |mut row, claim| {
                        row.push_bind(claim.key.agent.as_str())
                            .push_bind(claim.key.heartbeat.as_str())
                            .push_bind(claim.slot.as_millisecond())
                            .push_bind(claim.claimed_at.as_millisecond())
                            .push_bind(ExecutionStatus::Running.as_str())
                            .push_bind(i64::from(claim.triggered));
                    });
                    insert.push(
                        ") AS v JOIN heartbeats h ON h.agent_id = v.column1 AND h.heartbeat_id = v.column2 WHERE true \
                         ON CONFLICT (agent_id, heartbeat_id, slot_ms) DO NOTHING RETURNING agent_id, heartbeat_id, slot_ms",
                    );
                    for row in insert.build().fetch_all(&mut *tx).await? {
                        won.insert((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
                    }
                }
                let mut outcomes = Vec::with_capacity(claims.len());
                for claim in claims {
                    let id = (claim.key.agent.to_string(), claim.key.heartbeat.to_string(), claim.slot.as_millisecond());
                    let outcome = if won.remove(&id) { ClaimOutcome::Claimed } else { lost_claim(&mut tx, claim).await? };
                    outcomes.push(outcome);
                }
                let scheduled = slot_batch::scheduled_won(claims, &outcomes);
                let next_slots: Vec<(&HeartbeatKey, &NextSlot)> =
                    scheduled.iter().map(|claim| (&claim.key, &claim.next_slot)).collect();
                update_next_slots(&mut tx, &next_slots).await?;
                raise_latest_slots(&mut tx, scheduled.iter().map(|claim| (&claim.key, claim.slot))).await?;
                tx.commit().await?;
                Ok(outcomes)
            }

            /// `Store::finish_runs` (its text checked) as multi-row statements through sqlx
            /// (the backend's `write_results` may take another way).
            #[allow(dead_code)] // SQLite writes results by its direct writer
            pub(crate) async fn finish_runs_by_statements(
                &self,
                runs: &[RunRecord],
                breaker_failures_max: u32,
            ) -> Result<Vec<BreakerStep>, StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, runs.iter().map(|run| &run.key.agent)).await?;
                for chunk in runs.chunks(STORE_BATCH_ROWS_MAX) {
                    let mut update = QueryBuilder::<$db>::new(
                        "UPDATE executions SET finished_at_ms = v.column4, status = v.column5, delivery = v.column6, \
                         duration_ms = v.column7, error = v.column8, output_preview = v.column9, stop_reason = v.column10, \
                         reply = v.column11, reply_digest = v.column12, llm_calls = v.column13, tool_use = v.column14, \
                         input_tokens = v.column15, cached_tokens = v.column16, output_tokens = v.column17, \
                         reasoning_tokens = v.column18, cost_micros = v.column19, unpriced_calls = v.column20, \
                         transcript = v.column21 FROM (",
                    );
                    update.push_values(chunk, |mut row, run| {
                        row.push_bind(run.key.agent.as_str())
                            .push_bind(run.key.heartbeat.as_str())
                            .push_bind(run.slot.as_millisecond())
                            .push_bind(run.finished_at.as_millisecond())
                            .push_bind(run.status.as_str())
                            .push_bind(run.delivery.as_str())
                            .push_bind(i64::try_from(run.duration.as_millis()).unwrap_or(i64::MAX))
                            .push_bind(run.error.as_deref())
                            .push_bind(run.output_preview.as_deref())
                            .push_bind(run.stop_reason.map(StopReason::as_str))
                            .push_bind(run.reply.map(ReplyKind::as_str))
                            .push_bind(run.reply_digest.as_deref())
                            .push_bind(i64::from(run.llm_calls))
                            .push_bind(run.tool_use.as_ref().and_then(|tool_use| serde_json::to_string(tool_use).ok()))
                            .push_bind(stored_count(run.usage.tokens.input))
                            .push_bind(stored_count(run.usage.tokens.cached))
                            .push_bind(stored_count(run.usage.tokens.output))
                            .push_bind(stored_count(run.usage.tokens.reasoning))
                            .push_bind(stored_count(run.usage.cost_micros))
                            .push_bind(i64::from(run.usage.unpriced_calls))
                            .push_bind(run.transcript.as_deref());
                    });
                    update.push(
                        ") AS v WHERE executions.agent_id = v.column1 AND executions.heartbeat_id = v.column2 \
                         AND executions.slot_ms = v.column3",
                    );
                    update.build().execute(&mut *tx).await?;
                }
                let (steps, latest) = breaker_steps(&mut tx, runs, breaker_failures_max).await?;
                for chunk in latest.chunks(STORE_BATCH_ROWS_MAX) {
                    let mut update = QueryBuilder::<$db>::new("UPDATE heartbeats SET consecutive_failures = v.column3, ");
                    update.push("enabled = CASE WHEN v.column4 = 1 THEN 0 ELSE enabled END, ");
                    update.push("disabled_reason = CASE WHEN v.column4 = 1 THEN ");
                    update.push_bind(DISABLED_BY_BREAKER);
                    update.push(" ELSE disabled_reason END, ");
                    update.push(
                        "breaker_opened_at_ms = CASE WHEN v.column6 = 1 THEN v.column5 ELSE breaker_opened_at_ms END FROM (",
                    );
                    update.push_values(chunk, |mut row, (key, step, opened_at)| {
                        row.push_bind(key.agent.as_str())
                            .push_bind(key.heartbeat.as_str())
                            .push_bind(i64::from(step.consecutive_failures))
                            .push_bind(i64::from(step.tripped))
                            .push_bind(opened_at.flatten().map(Timestamp::as_millisecond))
                            .push_bind(i64::from(opened_at.is_some()));
                    });
                    update.push(") AS v WHERE heartbeats.agent_id = v.column1 AND heartbeats.heartbeat_id = v.column2");
                    update.build().execute(&mut *tx).await?;
                }
                consume_system_events(&mut tx, runs).await?;
                tx.commit().await?;
                Ok(steps)
            }
        }

        #[async_trait]
        impl Store for $store {
            async fn load_heartbeats(&self) -> Result<Vec<Heartbeat>, StoreError> {
                let (columns, selected) = whole_row_columns("");
                self.load_sorted(&columns, &selected).await
            }

            async fn load_for_arming(&self) -> Result<Vec<Heartbeat>, StoreError> {
                let (columns, selected) = Self::arming_columns(false);
                self.load_sorted(&columns, &selected).await
            }

            async fn load_for_arming_in_pages(
                &self,
                arm: &mut (dyn FnMut(Vec<Armable>) + Send),
            ) -> Result<(), StoreError> {
                let (columns, selected) = Self::arming_columns(true);
                self.load_selected(&columns, &selected, arm).await
            }

            async fn seed_config(&self, defs: &[HeartbeatDef], at: Timestamp) -> Result<SeedReport, StoreError> {
                text_check::seed_defs(defs)?;
                let mut tx = self.seed_tx().await?;
                // Two processes seeding at once would both read the old rows; they take turns.
                serialize_on(&mut tx, "seed_config").await?;
                let existing: BTreeMap<(String, String), (String, Option<String>)> =
                    sqlx::query("SELECT agent_id, heartbeat_id, origin, config_fingerprint FROM heartbeats")
                        .fetch_all(&mut *tx)
                        .await?
                        .into_iter()
                        .map(|row| Ok(((row.try_get(0)?, row.try_get(1)?), (row.try_get(2)?, row.try_get(3)?))))
                        .collect::<Result<_, sqlx::Error>>()?;
                let mut report = SeedReport::default();
                // Each changed definition's place in `defs`, in key order: upserted in that
                // order, new rows are stored (SQLite: by rowid) in the order a start-up's load
                // needs, which then has nothing to sort.
                let first_seed = existing.is_empty().then(|| config_keys::distinct_in_key_order(defs)).flatten();
                let changed: Vec<usize> = match first_seed {
                    // A first seed inserts every definition: nothing is hashed or looked up
                    // before its rows are written (their fingerprints are taken as they are).
                    Some(order) => {
                        report.inserted = defs.iter().map(|def| def.key.clone()).collect();
                        order
                    }
                    None => {
                        let mut changed = Vec::new();
                        // Each key once, at its last place (one statement may not upsert a key twice).
                        let config = ConfigKeys::of(defs);
                        let kept: Vec<(usize, &HeartbeatDef)> = config.kept().collect();
                        // Hashed on every core; the digests' texts are made here, on this thread:
                        // made on the helper threads, a million of them stayed in those threads'
                        // heaps as resident memory (44 bytes a heartbeat after a start).
                        let digests = seed_threads::map_in_order(&kept, |(_, def)| def.fingerprint_digest());
                        for ((index, def), digest) in kept.into_iter().zip(digests) {
                            let stored = existing.get(&(def.key.agent.to_string(), def.key.heartbeat.to_string()));
                            match stored {
                                Some((_, stored)) if stored.as_deref() == Some(lower_hex(&digest).as_str()) => {
                                    report.unchanged.push(def.key.clone());
                                    continue;
                                }
                                Some(_) => report.updated.push(def.key.clone()),
                                None => report.inserted.push(def.key.clone()),
                            }
                            changed.push(index);
                        }
                        // The keys are distinct (each kept at its last place): an unstable sort
                        // gives the same order, faster. A changed row is hashed again as it is
                        // written: a re-seed changes few rows.
                        changed.sort_unstable_by(|a, b| defs[*a].key.cmp(&defs[*b].key));
                        changed
                    }
                };
                let written = changed.len();
                self.write_seed_rows(&mut tx, defs, &changed, at).await?;
                // Hashed, not sorted (a million keys took seconds to sort), and only when the
                // store has config rows that might have left the config.
                let config_rows = existing.values().any(|(origin, _)| origin == Origin::Config.as_str());
                let in_config: HashSet<(&str, &str)> = if config_rows {
                    defs.iter().map(|def| (def.key.agent.as_str(), def.key.heartbeat.as_str())).collect()
                } else {
                    HashSet::new()
                };
                for ((agent, heartbeat), (origin, _)) in &existing {
                    if origin == Origin::Config.as_str() && !in_config.contains(&(agent.as_str(), heartbeat.as_str())) {
                        sqlx::query("DELETE FROM heartbeats WHERE agent_id = $1 AND heartbeat_id = $2")
                            .bind(agent)
                            .bind(heartbeat)
                            .execute(&mut *tx)
                            .await?;
                        report.removed.push(key_from_parts(agent.clone(), heartbeat.clone())?);
                    }
                }
                tx.commit().await?;
                self.after_seed_wrote(written + report.removed.len()).await;
                Ok(report)
            }

            async fn put_heartbeat(&self, def: &HeartbeatDef, at: Timestamp) -> Result<(), StoreError> {
                text_check::defs([def])?;
                let mut tx = self.write_tx().await?;
                // An operator's or a model's change: a node that lost the agent must not
                // acknowledge one the agent's engine never hears of.
                self.fence(&mut tx, std::iter::once(&def.key.agent)).await?;
                let row = UpsertRow { def, origin: def.origin, fingerprint: None };
                upsert(&mut tx, &mut upsert_statement(std::iter::once(row), at)).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn consecutive_failures(&self, key: &HeartbeatKey) -> Result<Option<u32>, StoreError> {
                let row = sqlx::query("SELECT consecutive_failures FROM heartbeats WHERE agent_id = $1 AND heartbeat_id = $2")
                    .bind(key.agent.as_str())
                    .bind(key.heartbeat.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                let Some(row) = row else { return Ok(None) };
                let count: i64 = row.try_get(0)?;
                u32::try_from(count).map(Some).map_err(|_| corrupt("consecutive_failures", format!("{count} is out of range")))
            }

            async fn delete_heartbeat(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(&key.agent)).await?;
                let result = sqlx::query("DELETE FROM heartbeats WHERE agent_id = $1 AND heartbeat_id = $2")
                    .bind(key.agent.as_str())
                    .bind(key.heartbeat.as_str())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(result.rows_affected() > 0)
            }

            async fn set_enabled(&self, key: &HeartbeatKey, enabled: bool, reason: Option<&str>) -> Result<bool, StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(&key.agent)).await?;
                let result = sqlx::query(
                    "UPDATE heartbeats SET enabled = $1, disabled_reason = CASE WHEN $1 = 1 THEN NULL ELSE $2 END, \
                     consecutive_failures = CASE WHEN $1 = 1 THEN 0 ELSE consecutive_failures END, \
                     breaker_opened_at_ms = CASE WHEN $1 = 1 THEN NULL ELSE breaker_opened_at_ms END \
                     WHERE agent_id = $3 AND heartbeat_id = $4",
                )
                .bind(i64::from(enabled))
                .bind(reason)
                .bind(key.agent.as_str())
                .bind(key.heartbeat.as_str())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(result.rows_affected() > 0)
            }

            async fn disable_if_enabled(&self, key: &HeartbeatKey, reason: &str) -> Result<bool, StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(&key.agent)).await?;
                let result = sqlx::query(
                    "UPDATE heartbeats SET enabled = 0, disabled_reason = $1 \
                     WHERE agent_id = $2 AND heartbeat_id = $3 AND enabled = 1",
                )
                .bind(reason)
                .bind(key.agent.as_str())
                .bind(key.heartbeat.as_str())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(result.rows_affected() > 0)
            }

            async fn half_open_breaker(&self, key: &HeartbeatKey) -> Result<bool, StoreError> {
                // Fenced: a node that lost the partition must not half-open a breaker its
                // successor holds open (seed 31000030548).
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(&key.agent)).await?;
                let result = sqlx::query(
                    "UPDATE heartbeats SET enabled = 1, disabled_reason = NULL \
                     WHERE agent_id = $1 AND heartbeat_id = $2 AND enabled = 0 AND disabled_reason = $3",
                )
                .bind(key.agent.as_str())
                .bind(key.heartbeat.as_str())
                .bind(DISABLED_BY_BREAKER)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(result.rows_affected() > 0)
            }

            async fn set_next_slots(&self, slots: &[(HeartbeatKey, NextSlot)]) -> Result<(), StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, slots.iter().map(|(key, _)| &key.agent)).await?;
                let slots: Vec<(&HeartbeatKey, &NextSlot)> = slots.iter().map(|(key, next)| (key, next)).collect();
                update_next_slots(&mut tx, &slots).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn claim_slots(&self, claims: &[SlotClaim]) -> Result<Vec<ClaimOutcome>, StoreError> {
                self.write_claims(claims).await
            }

            async fn record_skips(&self, skips: &[SkipRecord]) -> Result<(), StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, skips.iter().map(|skip| &skip.key.agent)).await?;
                for chunk in skips.chunks(STORE_BATCH_ROWS_MAX) {
                    let mut insert = QueryBuilder::<$db>::new(
                        "INSERT INTO executions (agent_id, heartbeat_id, slot_ms, started_at_ms, finished_at_ms, status, skip_reason, triggered) ",
                    );
                    insert.push_values(chunk, |mut row, skip| {
                        row.push_bind(skip.key.agent.as_str())
                            .push_bind(skip.key.heartbeat.as_str())
                            .push_bind(skip.slot.as_millisecond())
                            .push_bind(skip.at.as_millisecond())
                            .push_bind(skip.at.as_millisecond())
                            .push_bind(ExecutionStatus::Skipped.as_str())
                            .push_bind(skip.reason.as_str())
                            .push_bind(i64::from(skip.triggered));
                    });
                    insert.push(" ON CONFLICT (agent_id, heartbeat_id, slot_ms) DO NOTHING");
                    insert.build().execute(&mut *tx).await?;
                }
                // An operator's trigger changes neither the next slot nor the latest (ADR 0049).
                let scheduled: Vec<&SkipRecord> = skips.iter().filter(|skip| !skip.triggered).collect();
                let next_slots: Vec<(&HeartbeatKey, &NextSlot)> =
                    scheduled.iter().map(|skip| (&skip.key, &skip.next_slot)).collect();
                update_next_slots(&mut tx, &next_slots).await?;
                raise_latest_slots(&mut tx, scheduled.iter().map(|skip| (&skip.key, skip.slot))).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn finish_runs(&self, runs: &[RunRecord], breaker_failures_max: u32) -> Result<Vec<BreakerStep>, StoreError> {
                text_check::runs(runs)?;
                self.write_results(runs, breaker_failures_max).await
            }

            async fn recover_interrupted(&self, at: Timestamp) -> Result<u64, StoreError> {
                let mut tx = self.write_tx().await?;
                // A partition's engine recovers its own partition's runs, and only while
                // its lease is current: the runs of a node it took over from.
                self.fence(&mut tx, std::iter::empty()).await?;
                let result = sqlx::query(&format!(
                    "UPDATE executions SET status = $1, finished_at_ms = $2, delivery = $3, error = $4 \
                     WHERE status = $5{}",
                    self.owned_rows_sql()
                ))
                .bind(ExecutionStatus::Interrupted.as_str())
                .bind(at.as_millisecond())
                .bind(DeliveryStatus::NotNeeded.as_str())
                .bind(INTERRUPTED_ERROR_TEXT)
                .bind(ExecutionStatus::Running.as_str())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(result.rows_affected())
            }

            async fn set_pause(&self, agent: &AgentId, pause: &PauseRecord) -> Result<(), StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(agent)).await?;
                sqlx::query(
                    "INSERT INTO agent_pauses (agent_id, until_ms, minutes, set_at_ms) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (agent_id) DO UPDATE SET until_ms = excluded.until_ms, minutes = excluded.minutes, \
                     set_at_ms = excluded.set_at_ms",
                )
                .bind(agent.as_str())
                .bind(pause.until.as_millisecond())
                .bind(i64::from(pause.minutes))
                .bind(pause.set_at.as_millisecond())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn clear_pause(&self, agent: &AgentId) -> Result<(), StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(agent)).await?;
                sqlx::query("DELETE FROM agent_pauses WHERE agent_id = $1").bind(agent.as_str()).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn end_pause(&self, agent: &AgentId, until: Timestamp) -> Result<(), StoreError> {
                let mut tx = self.write_tx().await?;
                self.fence(&mut tx, std::iter::once(agent)).await?;
                sqlx::query("DELETE FROM agent_pauses WHERE agent_id = $1 AND until_ms = $2")
                    .bind(agent.as_str())
                    .bind(until.as_millisecond())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn load_pauses(&self) -> Result<Vec<(AgentId, PauseRecord)>, StoreError> {
                let rows = sqlx::query("SELECT agent_id, until_ms, minutes, set_at_ms FROM agent_pauses ORDER BY agent_id")
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| {
                        let agent: String = row.try_get("agent_id")?;
                        let what = format!("pause of agent {agent}");
                        let agent = AgentId::new(agent).map_err(|e| corrupt(&what, e))?;
                        let minutes: i64 = row.try_get("minutes")?;
                        let record = PauseRecord {
                            until: timestamp(row.try_get("until_ms")?, &what)?,
                            minutes: u32::try_from(minutes).map_err(|_| corrupt(&what, "minutes out of range"))?,
                            set_at: timestamp(row.try_get("set_at_ms")?, &what)?,
                        };
                        Ok((agent, record))
                    })
                    .filter(|pause| pause.as_ref().map_or(true, |(agent, _)| self.owns(agent)))
                    .collect()
            }

            async fn prune_runs(&self, now: Timestamp, retention: RunRetention) -> Result<u64, StoreError> {
                // The rule of `core::retention::PruneCutoffs::prunes`, in SQL over each heartbeat's
                // rows ranked newest first (0 = newest), and ranked again among its triggers and
                // among the rest (the floor: the newest that is not a trigger); the conformance
                // suite holds them equal.
                let cutoffs = retention.cutoffs(now);
                // Checks answered from memory while runs are deleted could name a reply gone.
                self.runs_deleting();
                let mut tx = self.write_tx().await?;
                // A partition's engine prunes its own partition's rows (`owned_rows_sql`).
                let result = sqlx::query(&format!(
                    "DELETE FROM executions WHERE id IN (SELECT id FROM (SELECT id, status, finished_at_ms, triggered, \
                     ROW_NUMBER() OVER (PARTITION BY agent_id, heartbeat_id ORDER BY slot_ms DESC) - 1 AS rank, \
                     ROW_NUMBER() OVER (PARTITION BY agent_id, heartbeat_id, triggered ORDER BY slot_ms DESC) - 1 \
                     AS rank_of_kind FROM executions WHERE true{}) AS ranked WHERE rank > 0 \
                     AND NOT (triggered = 0 AND rank_of_kind = 0) AND status <> 'running' \
                     AND finished_at_ms IS NOT NULL \
                     AND (finished_at_ms < $1 OR (rank >= $2 AND (status = 'skipped' OR finished_at_ms < $3))))",
                    self.owned_rows_sql()
                ))
                .bind(cutoffs.aged_before.as_millisecond())
                .bind(i64::from(cutoffs.kept_per_heartbeat))
                .bind(cutoffs.protected_from.as_millisecond())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                self.runs_deleting();
                Ok(result.rows_affected())
            }

            async fn latest_slots(&self, keys: &[HeartbeatKey]) -> Result<BTreeMap<HeartbeatKey, Timestamp>, StoreError> {
                let mut latest = BTreeMap::new();
                if keys.len() > STORE_BATCH_ROWS_MAX {
                    // Many keys (a start-up reads them in its load's rows instead): one
                    // statement walks the stored heartbeats (this node's) and seeks each
                    // one's latest run, instead of a statement per thousand keys bound as
                    // values; only those with runs come back.
                    let wanted: BTreeSet<&HeartbeatKey> = keys.iter().collect();
                    let rows = sqlx::query(&format!(
                        "SELECT agent_id, heartbeat_id, latest_slot_ms FROM heartbeats WHERE latest_slot_ms IS NOT NULL{}",
                        self.owned_rows_sql()
                    ))
                    .fetch_all(&self.pool)
                    .await?;
                    for row in rows {
                        let key = key_from_parts(row.try_get(0)?, row.try_get(1)?)?;
                        if wanted.contains(&key) {
                            let slot = timestamp(row.try_get(2)?, &format!("latest slot of {key}"))?;
                            latest.insert(key, slot);
                        }
                    }
                    return Ok(latest);
                }
                for chunk in keys.chunks(STORE_BATCH_ROWS_MAX) {
                    let listed = listed_keys(chunk);
                    for row in latest_slots_read(&listed)?.build().fetch_all(&self.pool).await? {
                        let Some(slot_ms) = row.try_get::<Option<i64>, _>(2)? else { continue };
                        let key = key_from_parts(row.try_get(0)?, row.try_get(1)?)?;
                        let slot = timestamp(slot_ms, &format!("latest slot of {key}"))?;
                        latest.insert(key, slot);
                    }
                }
                Ok(latest)
            }

            async fn executions_page(
                &self,
                key: &HeartbeatKey,
                before: Option<Timestamp>,
                limit: usize,
            ) -> Result<Vec<Execution>, StoreError> {
                let rows = sqlx::query(
                    "SELECT agent_id, heartbeat_id, slot_ms, triggered, started_at_ms, finished_at_ms, status, skip_reason, delivery, \
                     duration_ms, error, output_preview, stop_reason, reply, tool_use, llm_calls, input_tokens, cached_tokens, \
                     output_tokens, reasoning_tokens, cost_micros, unpriced_calls FROM executions WHERE agent_id = $1 \
                     AND heartbeat_id = $2 AND slot_ms < $3 ORDER BY slot_ms DESC LIMIT $4",
                )
                .bind(key.agent.as_str())
                .bind(key.heartbeat.as_str())
                .bind(before.map_or(i64::MAX, |before| before.as_millisecond()))
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(execution_from_row).collect()
            }

            async fn recent_executions(
                &self,
                keys: &[HeartbeatKey],
                limit: usize,
            ) -> Result<BTreeMap<HeartbeatKey, Vec<Execution>>, StoreError> {
                let mut recent: BTreeMap<HeartbeatKey, Vec<Execution>> = BTreeMap::new();
                for chunk in keys.chunks(STORE_BATCH_ROWS_MAX) {
                    // Each listed heartbeat's rows numbered newest first; a window function
                    // both SQLite (3.25+) and PostgreSQL run.
                    let listed = listed_keys(chunk);
                    let mut select = QueryBuilder::<$db>::new(
                        "SELECT agent_id, heartbeat_id, slot_ms, triggered, started_at_ms, finished_at_ms, status, \
                         skip_reason, delivery, duration_ms, error, output_preview, stop_reason, reply, tool_use, llm_calls, \
                         input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost_micros, unpriced_calls \
                         FROM (SELECT e.*, ROW_NUMBER() OVER (PARTITION BY e.agent_id, e.heartbeat_id \
                         ORDER BY e.slot_ms DESC) AS newest FROM ",
                    );
                    push_listed(&mut select, &listed)?;
                    select.push(
                        " AS v JOIN executions e ON e.agent_id = v.column1 AND e.heartbeat_id = v.column2) ranked \
                         WHERE newest <= ",
                    );
                    select.push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
                    select.push(" ORDER BY agent_id, heartbeat_id, slot_ms DESC");
                    for row in &select.build().fetch_all(&self.pool).await? {
                        let execution = execution_from_row(row)?;
                        recent.entry(execution.key.clone()).or_default().push(execution);
                    }
                }
                Ok(recent)
            }

            async fn heartbeats_of_agent(
                &self,
                agent: &AgentId,
                after: Option<&HeartbeatId>,
                limit: usize,
            ) -> Result<Vec<Heartbeat>, StoreError> {
                // An empty text: before every id (an id is never empty).
                let after = after.map_or("", HeartbeatId::as_str);
                self.whole_rows_page("agent_id = $1 AND heartbeat_id > $2", "heartbeat_id", (agent.as_str(), after), limit)
                    .await
            }

            async fn heartbeats_page(
                &self,
                after: Option<&HeartbeatKey>,
                limit: usize,
            ) -> Result<Vec<Heartbeat>, StoreError> {
                // Keys compare byte-wise in both backends (PostgreSQL's are `COLLATE "C"`),
                // as they do here: a page's last key is where the next begins. Empty texts:
                // before every key (an id is never empty).
                let after = after.map_or(("", ""), |key| (key.agent.as_str(), key.heartbeat.as_str()));
                self.whole_rows_page("(agent_id, heartbeat_id) > ($1, $2)", "agent_id, heartbeat_id", after, limit).await
            }

            async fn jobs_of_agents(
                &self,
                only: Option<&AgentId>,
            ) -> Result<BTreeMap<AgentId, AgentJobs>, StoreError> {
                let sql = shared_sql::jobs_of_agents_read(only.is_some(), &self.owned_rows_sql());
                let mut query = sqlx::query_as::<_, (String, i64, i64)>(&sql);
                if let Some(agent) = only {
                    query = query.bind(agent.as_str());
                }
                let rows = query.fetch_all(&self.pool).await?;
                let mut jobs: BTreeMap<AgentId, AgentJobs> = BTreeMap::new();
                for (agent, count, agent_heartbeat) in rows {
                    let agent = AgentId::new(&agent).map_err(|e| corrupt(format!("heartbeats of agent {agent:?}"), e))?;
                    let counted = jobs.entry(agent).or_default();
                    counted.count += usize::try_from(count).unwrap_or(0);
                    counted.has_agent_heartbeat |= agent_heartbeat > 0;
                }
                Ok(jobs)
            }

            async fn definitions(
                &self,
                keys: &[HeartbeatKey],
            ) -> Result<Definitions, StoreError> {
                definitions_of_pages(&self.rows_of(keys).await?)
            }

            async fn heartbeats(&self, keys: &[HeartbeatKey]) -> Result<Vec<Heartbeat>, StoreError> {
                let mut heartbeats = Vec::with_capacity(keys.len());
                each_heartbeat_of_pages(&self.rows_of(keys).await?, &mut |heartbeat| heartbeats.push(heartbeat))?;
                Ok(heartbeats)
            }

            async fn claim_and_read(&self, claims: &[SlotClaim]) -> Result<ClaimedSlots, StoreError> {
                self.write_claims_and_read(claims).await
            }

            async fn delivered_since(&self, queries: &[DedupQuery]) -> Result<Vec<bool>, StoreError> {
                self.delivered_since_indexed(queries).await
            }

            async fn queue_system_event(&self, agent: &AgentId, text: &str, at: Timestamp) -> Result<Queued, StoreError> {
                text_check::event(text)?;
                let mut tx = self.write_tx().await?;
                // The duplicate check reads the newest event before inserting: one agent's queue
                // takes writers in turn.
                serialize_on(&mut tx, &format!("system_events/{agent}")).await?;
                let newest: Option<String> = sqlx::query_scalar(
                    "SELECT text FROM system_events WHERE agent_id = $1 AND state = 'pending' ORDER BY id DESC LIMIT 1",
                )
                .bind(agent.as_str())
                .fetch_optional(&mut *tx)
                .await?;
                if !system_events::admits(newest.as_deref(), text) {
                    return Ok(Queued::Duplicate);
                }
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO system_events (agent_id, text, queued_at_ms) VALUES ($1, $2, $3) RETURNING id",
                )
                .bind(agent.as_str())
                .bind(text)
                .bind(at.as_millisecond())
                .fetch_one(&mut *tx)
                .await?;
                let pending: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM system_events WHERE agent_id = $1 AND state = 'pending'")
                        .bind(agent.as_str())
                        .fetch_one(&mut *tx)
                        .await?;
                let dropped = system_events::overflow(usize::try_from(pending).unwrap_or(0));
                if dropped > 0 {
                    sqlx::query(
                        "UPDATE system_events SET state = 'dropped', left_at_ms = $1 WHERE id IN (SELECT id FROM system_events \
                         WHERE agent_id = $2 AND state = 'pending' ORDER BY id LIMIT $3)",
                    )
                    .bind(at.as_millisecond())
                    .bind(agent.as_str())
                    .bind(i64::try_from(dropped).unwrap_or(i64::MAX))
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                let id = u64::try_from(id).map_err(|_| corrupt("system event", format!("negative id {id}")))?;
                Ok(Queued::Added { id, dropped })
            }

            async fn spent_since(
                &self,
                agent: Option<&AgentId>,
                since: Timestamp,
                excluding: &[(HeartbeatKey, Timestamp)],
            ) -> Result<DaySpend, StoreError> {
                // One read transaction: the total and the excluded runs' share come from the same
                // snapshot, so a run recorded in between is either in both or in neither.
                let mut tx = self.snapshot_tx().await?;
                let mut select = QueryBuilder::<$db>::new(
                    "SELECT CAST(COALESCE(SUM(llm_calls), 0) AS BIGINT), \
                     CAST(COALESCE(SUM(input_tokens + output_tokens), 0) AS BIGINT), \
                     CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM executions WHERE llm_calls > 0 \
                     AND finished_at_ms >= ",
                );
                select.push_bind(since.as_millisecond());
                if let Some(agent) = agent {
                    select.push(" AND agent_id = ").push_bind(agent.as_str());
                }
                let total: (i64, i64, i64) = select.build_query_as().fetch_one(&mut *tx).await?;
                let mut spent = spend_from(total);
                for chunk in excluding.chunks(STORE_BATCH_ROWS_MAX) {
                    let listed: Vec<[Listed; 3]> = chunk
                        .iter()
                        .map(|(key, slot)| {
                            [
                                Listed::Text(key.agent.as_str()),
                                Listed::Text(key.heartbeat.as_str()),
                                Listed::Integer(slot.as_millisecond()),
                            ]
                        })
                        .collect();
                    let share: (i64, i64, i64) =
                        runs_share_read(&listed, since.as_millisecond(), agent.map(AgentId::as_str))?
                            .build_query_as()
                            .fetch_one(&mut *tx)
                            .await?;
                    let share = spend_from(share);
                    spent.calls = spent.calls.saturating_sub(share.calls);
                    spent.tokens = spent.tokens.saturating_sub(share.tokens);
                    spent.cost_micros = spent.cost_micros.saturating_sub(share.cost_micros);
                }
                tx.commit().await?;
                Ok(spent)
            }

            async fn spent_since_each(
                &self,
                days: &[(AgentId, Timestamp)],
                excluding: &[(HeartbeatKey, Timestamp)],
            ) -> Vec<Result<DaySpend, StoreError>> {
                match self.read_spent_each(days, excluding).await {
                    Ok(spent) => spent.into_iter().map(Ok).collect(),
                    Err(error) => vec![Err(error); days.len()],
                }
            }

            async fn transcript(&self, key: &HeartbeatKey, slot: Timestamp) -> Result<Option<String>, StoreError> {
                let found: Option<Option<String>> = sqlx::query_scalar(
                    "SELECT transcript FROM executions WHERE agent_id = $1 AND heartbeat_id = $2 AND slot_ms = $3",
                )
                .bind(key.agent.as_str())
                .bind(key.heartbeat.as_str())
                .bind(slot.as_millisecond())
                .fetch_optional(&self.pool)
                .await?;
                Ok(found.flatten())
            }

            async fn close(&self) -> Result<(), StoreError> {
                self.close_connections().await
            }

            async fn spent_by_job(
                &self,
                agent: Option<&AgentId>,
                since: Timestamp,
            ) -> Result<BTreeMap<HeartbeatKey, DaySpend>, StoreError> {
                const SUMS: &str = "SELECT agent_id, heartbeat_id, CAST(SUM(llm_calls) AS BIGINT), \
                     CAST(SUM(input_tokens + output_tokens) AS BIGINT), CAST(SUM(cost_micros) AS BIGINT) \
                     FROM executions WHERE finished_at_ms >= $1 AND llm_calls > 0";
                let rows: Vec<(String, String, i64, i64, i64)> = match agent {
                    Some(agent) => {
                        sqlx::query_as(&format!("{SUMS} AND agent_id = $2 GROUP BY agent_id, heartbeat_id"))
                            .bind(since.as_millisecond())
                            .bind(agent.as_str())
                            .fetch_all(&self.pool)
                            .await?
                    }
                    None => {
                        sqlx::query_as(&format!("{SUMS} GROUP BY agent_id, heartbeat_id"))
                            .bind(since.as_millisecond())
                            .fetch_all(&self.pool)
                            .await?
                    }
                };
                let mut jobs = BTreeMap::new();
                for (agent, heartbeat, calls, tokens, cost_micros) in rows {
                    jobs.insert(key_from_parts(agent, heartbeat)?, spend_from((calls, tokens, cost_micros)));
                }
                Ok(jobs)
            }

            async fn pending_system_events(&self, agent: &AgentId, now: Timestamp) -> Result<Vec<SystemEvent>, StoreError> {
                let rows: Vec<(i64, String, i64)> = sqlx::query_as(
                    "SELECT id, text, queued_at_ms FROM system_events WHERE agent_id = $1 AND state = 'pending' ORDER BY id",
                )
                .bind(agent.as_str())
                .fetch_all(&self.pool)
                .await?;
                let mut events = Vec::with_capacity(rows.len());
                for (id, text, queued_at_ms) in rows {
                    let what = format!("system event {id}");
                    let event = SystemEvent {
                        id: u64::try_from(id).map_err(|_| corrupt(&what, "negative id".to_owned()))?,
                        text,
                        queued_at: Timestamp::from_millisecond(queued_at_ms)
                            .map_err(|error| corrupt(&what, error.to_string()))?,
                    };
                    if system_events::is_live(&event, now) {
                        events.push(event);
                    }
                }
                Ok(events)
            }
        }

        /// Consumes the system events that succeeded runs listed, in the transaction that records
        /// the runs: an event leaves the queue exactly when a run that processed it is recorded.
        async fn consume_system_events(tx: &mut Transaction<'_, $db>, runs: &[RunRecord]) -> Result<(), StoreError> {
            for run in runs.iter().filter(|run| run.status == ExecutionStatus::Succeeded) {
                for id in &run.consumes {
                    sqlx::query(
                        "UPDATE system_events SET state = 'consumed', left_at_ms = $1 \
                         WHERE id = $2 AND agent_id = $3 AND state = 'pending'",
                    )
                    .bind(run.finished_at.as_millisecond())
                    .bind(i64::try_from(*id).unwrap_or(i64::MAX))
                    .bind(run.key.agent.as_str())
                    .execute(&mut **tx)
                    .await?;
                }
            }
            Ok(())
        }

        /// Reads the failure counts of the batch's heartbeats and steps the breaker through the
        /// batch's runs in order. Returns each run's step, and the update of each heartbeat.
        async fn breaker_steps(
            tx: &mut Transaction<'_, $db>,
            runs: &[RunRecord],
            breaker_failures_max: u32,
        ) -> Result<(Vec<BreakerStep>, Vec<BreakerUpdate>), StoreError> {
            let mut stored: BTreeMap<HeartbeatKey, StoredBreaker> = BTreeMap::new();
            // Rows are read (and on PostgreSQL locked) in key order, so two batches
            // never wait on each other's locks in a cycle; a statement per chunk of keys,
            // where one per heartbeat was a statement per run of a dispatch.
            let keys: Vec<&HeartbeatKey> = runs.iter().map(|run| &run.key).collect::<BTreeSet<_>>().into_iter().collect();
            for chunk in keys.chunks(STORE_BATCH_ROWS_MAX) {
                let mut select = QueryBuilder::<$db>::new(
                    "SELECT agent_id, heartbeat_id, consecutive_failures, enabled, disabled_reason FROM heartbeats \
                     WHERE (agent_id, heartbeat_id) IN (",
                );
                select.push_values(chunk, |mut row, key| {
                    row.push_bind(key.agent.as_str()).push_bind(key.heartbeat.as_str());
                });
                select.push(format!(") ORDER BY agent_id, heartbeat_id{LOCK_READ_ROWS}"));
                let rows: Vec<(String, String, i64, i64, Option<String>)> =
                    select.build_query_as().fetch_all(&mut **tx).await?;
                for (agent, heartbeat, count, enabled, disabled_reason) in rows {
                    // The batch's own key (shared text), found by the row's: a row the batch
                    // did not ask for cannot come back.
                    let Ok(index) = chunk.binary_search_by(|key| {
                        (key.agent.as_str(), key.heartbeat.as_str()).cmp(&(agent.as_str(), heartbeat.as_str()))
                    }) else {
                        continue;
                    };
                    let row = StoredBreaker {
                        consecutive_failures: u32::try_from(count).unwrap_or(u32::MAX),
                        enabled: enabled != 0,
                        disabled_reason,
                    };
                    stored.insert(chunk[index].clone(), row);
                }
            }
            Ok(breaker_batch::step_batch(runs, stored, breaker_failures_max))
        }

        /// The heartbeats of a page of a load.
        fn parse_page(page: &str, shared: &mut SharedTexts) -> Result<Vec<Armable>, StoreError> {
            let mut armables = Vec::with_capacity(LOAD_PAGE_ROWS);
            each_heartbeat_row(page, &mut |row| {
                armables.push(armable_from_row(row, shared)?);
                Ok(())
            })?;
            Ok(armables)
        }

        /// `heartbeats` in key order. The keys are sorted beside their positions (shared
        /// text, cheap to move) and the large values then swapped into place along the
        /// permutation's cycles: copied into a second vector, a million of them took a
        /// second of a restart, most of it faulting in the copy's fresh pages.
        fn sorted_by_key(mut heartbeats: Vec<Heartbeat>) -> Vec<Heartbeat> {
            if heartbeats.windows(2).all(|pair| pair[0].def.key <= pair[1].def.key) {
                return heartbeats;
            }
            let mut order: Vec<(HeartbeatKey, usize)> =
                heartbeats.iter().enumerate().map(|(index, heartbeat)| (heartbeat.def.key.clone(), index)).collect();
            // Stable, so runs already in order cost one pass: rows seeded in key order, then
            // the few made at run time after them.
            order.sort();
            // `from[place]`: where the value that belongs at `place` is now.
            let mut from: Vec<usize> = order.into_iter().map(|(_, index)| index).collect();
            for start in 0..from.len() {
                let mut place = start;
                // Each swap puts one value where it belongs; a placed one points at itself.
                while from[place] != start {
                    let source = from[place];
                    heartbeats.swap(place, source);
                    from[place] = place;
                    place = source;
                }
                from[place] = place;
            }
            heartbeats
        }

        /// Rows one multi-row upsert writes: 25 parameters each, under SQLite's 32,766.
        const UPSERT_ROWS_MAX: usize = 1_000;

        /// A seed's changed rows (`defs[index]`, in key order, each with its fingerprint) as
        /// multi-row upserts through sqlx (the backend's `write_seed_rows` may take another
        /// way): each statement built here while the database writes the one before.
        #[allow(dead_code)] // SQLite steps one prepared upsert a row (`sqlite_seed`)
        pub(crate) async fn seed_rows_by_statements(
            tx: &mut Transaction<'_, $db>,
            defs: &[HeartbeatDef],
            changed: &[usize],
            at: Timestamp,
        ) -> Result<(), StoreError> {
            let mut statements = changed.chunks(UPSERT_ROWS_MAX).map(|chunk| {
                let rows = chunk.iter().map(|index| UpsertRow {
                    def: &defs[*index],
                    origin: Origin::Config,
                    fingerprint: Some(defs[*index].fingerprint()),
                });
                upsert_statement(rows, at)
            });
            let mut next = statements.next();
            while let Some(mut statement) = next {
                let written = upsert(tx, &mut statement);
                // Polled first, the write hands its statement to the database's thread;
                // the next statement is built here meanwhile (it was a quarter of a seed).
                let following = async { statements.next() };
                let (written, following) = tokio::join!(written, following);
                written?;
                next = following;
            }
            Ok(())
        }

        /// A definition as an upsert stores it.
        struct UpsertRow<'d> {
            def: &'d HeartbeatDef,
            /// The row's origin (a seed stores every definition as config).
            origin: Origin,
            /// `None` keeps the stored config fingerprint.
            fingerprint: Option<String>,
        }

        /// The upsert statement of some definitions (at most [`UPSERT_ROWS_MAX`], each key
        /// once): built apart from its execution, so that a seed builds the next while the
        /// database writes this one. A replaced heartbeat is re-enabled with a clean breaker
        /// and no armed slot.
        fn upsert_statement<'d>(rows: impl Iterator<Item = UpsertRow<'d>>, at: Timestamp) -> UpsertStatement<'d> {
            let mut keys = Vec::new();
            let mut insert = QueryBuilder::<$db>::new(crate::store::sql_store::UPSERT_HEAD_SQL);
            insert.push_values(rows, |mut row, UpsertRow { def, origin, fingerprint }| {
                keys.push(&def.key);
                let window = def.active_hours.as_ref();
                let (every_ms, cron, at_ms) = schedule_columns(&def.schedule);
                row.push_bind(def.key.agent.as_str().to_owned())
                    .push_bind(def.key.heartbeat.as_str().to_owned())
                    .push_bind(def.kind.as_str())
                    .push_bind(def.prompt.to_string())
                    .push_bind(def.schedule.kind())
                    .push_bind(every_ms)
                    .push_bind(cron.map(|cron| cron.expression().to_owned()))
                    .push_bind(cron.map(|cron| cron.zone_name().to_owned()))
                    .push_bind(at_ms)
                    .push_bind(def.policy.catch_up.as_str())
                    .push_bind(millis(def.policy.catch_up_window))
                    .push_bind(def.policy.overlap.as_str())
                    .push_bind(millis(def.policy.jitter_max))
                    .push_bind(i64::from(def.delete_after_run))
                    .push_bind(i64::from(def.dedup))
                    .push_bind(def.target.to_string())
                    .push_bind(window.map(|window| window.start_text()))
                    .push_bind(window.map(|window| window.end_text()))
                    .push_bind(window.map(|window| window.zone_name().to_owned()))
                    .push_bind(millis(def.timeout))
                    .push_bind(origin.as_str())
                    .push_bind(fingerprint)
                    .push_bind(def.tools.to_json())
                    .push_bind(def.model.clone())
                    .push_bind(at.as_millisecond())
                    .push_bind(at.as_millisecond())
                    .push_unseparated(", 1, NULL, 0")
                    // Stored with its first slot: a first start then arms without a write (ADR 0028).
                    .push_bind(def.schedule.first_slot(at).map(|slot| slot.as_millisecond()));
            });
            insert.push(crate::store::sql_store::UPSERT_CONFLICT_SQL);
            UpsertStatement { insert, keys }
        }

        /// An upsert's statement and the keys it writes.
        struct UpsertStatement<'d> {
            insert: QueryBuilder<'d, $db>,
            keys: Vec<&'d HeartbeatKey>,
        }

        /// Runs an upsert's statement (none without rows).
        async fn upsert(tx: &mut Transaction<'_, $db>, statement: &mut UpsertStatement<'_>) -> Result<(), StoreError> {
            if statement.keys.is_empty() {
                return Ok(());
            }
            statement.insert.build().execute(&mut **tx).await?;
            // A key that had a row before (deleted, then stored again) still has its log: its
            // new row starts from the latest slot there (ADR 0031). A store with no log at all
            // (a first seed) has none to find, and saves a statement per chunk.
            let any_logged: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM executions)").fetch_one(&mut **tx).await?;
            if any_logged {
                let mut update = QueryBuilder::<$db>::new(
                    "UPDATE heartbeats SET latest_slot_ms = l.latest \
                     FROM (SELECT v.column1 AS agent_id, v.column2 AS heartbeat_id, ",
                );
                update.push(LOGGED_LATEST_SLOT_OF_V).push(" AS latest FROM (");
                update.push_values(&statement.keys, |mut row, key| {
                    row.push_bind(key.agent.as_str()).push_bind(key.heartbeat.as_str());
                });
                update.push(
                    ") AS v) AS l WHERE heartbeats.agent_id = l.agent_id AND heartbeats.heartbeat_id = l.heartbeat_id \
                     AND heartbeats.latest_slot_ms IS NULL AND l.latest IS NOT NULL",
                );
                update.build().execute(&mut **tx).await?;
            }
            Ok(())
        }

        /// Why a claim wrote no row: its heartbeat is gone, or the row it met is an
        /// operator's trigger's (ADR 0055) or another claim's.
        async fn lost_claim(tx: &mut Transaction<'_, $db>, claim: &SlotClaim) -> Result<ClaimOutcome, StoreError> {
            let row = sqlx::query(
                "SELECT (SELECT triggered FROM executions WHERE agent_id = $1 AND heartbeat_id = $2 AND slot_ms = $3) \
                 FROM heartbeats WHERE agent_id = $1 AND heartbeat_id = $2",
            )
            .bind(claim.key.agent.as_str())
            .bind(claim.key.heartbeat.as_str())
            .bind(claim.slot.as_millisecond())
            .fetch_optional(&mut **tx)
            .await?;
            let Some(row) = row else { return Ok(ClaimOutcome::Gone) };
            // No row met (NULL) cannot be: the row is the claim.
            let triggered: Option<i64> = row.try_get(0)?;
            Ok(if triggered.unwrap_or(0) != 0 { ClaimOutcome::AlreadyTriggered } else { ClaimOutcome::AlreadyClaimed })
        }

        /// Stores each heartbeat's next slot where the row still has the schedule that gave
        /// it (`NextSlot`): the kind, then the kind's own columns, as `upsert` writes them.
        async fn update_next_slots(
            tx: &mut Transaction<'_, $db>,
            slots: &[(&HeartbeatKey, &NextSlot)],
        ) -> Result<(), StoreError> {
            for chunk in slots.chunks(STORE_BATCH_ROWS_MAX) {
                let mut update = QueryBuilder::<$db>::new("UPDATE heartbeats SET next_slot_ms = v.column3 FROM (");
                update.push_values(chunk, |mut row, (key, next)| {
                    let (every_ms, cron, at_ms) = schedule_columns(&next.schedule);
                    row.push_bind(key.agent.as_str())
                        .push_bind(key.heartbeat.as_str())
                        .push_bind(next.at.as_millisecond())
                        .push_bind(next.schedule.kind())
                        .push_bind(every_ms)
                        .push_bind(cron.map(|cron| cron.expression()))
                        .push_bind(cron.map(|cron| cron.zone_name()))
                        .push_bind(at_ms);
                });
                update.push(
                    ") AS v WHERE heartbeats.agent_id = v.column1 AND heartbeats.heartbeat_id = v.column2 \
                     AND heartbeats.schedule_kind = v.column4 \
                     AND (v.column5 IS NULL OR heartbeats.every_ms = v.column5) \
                     AND (v.column6 IS NULL OR (heartbeats.cron_expr = v.column6 AND heartbeats.cron_timezone = v.column7)) \
                     AND (v.column8 IS NULL OR heartbeats.at_ms = v.column8)",
                );
                update.build().execute(&mut **tx).await?;
            }
            Ok(())
        }

        /// Raises each heartbeat row's latest logged slot to the slots this transaction
        /// logged for it (claimed or skipped; a skip that lost to a row already there logged
        /// that same slot), whatever the row's schedule now (ADR 0031). The callers leave out
        /// an operator's triggers, which lift no floor of the schedule (ADR 0049).
        async fn raise_latest_slots<'k>(
            tx: &mut Transaction<'_, $db>,
            logged: impl Iterator<Item = (&'k HeartbeatKey, Timestamp)>,
        ) -> Result<(), StoreError> {
            // One row per heartbeat, its highest slot: an UPDATE joined to two rows of one
            // key applies one of them, which one unsaid.
            let highest = slot_batch::highest_slots(logged);
            for chunk in highest.chunks(STORE_BATCH_ROWS_MAX) {
                let mut update = QueryBuilder::<$db>::new("UPDATE heartbeats SET latest_slot_ms = v.column3 FROM (");
                update.push_values(chunk, |mut row, (key, slot)| {
                    row.push_bind(key.agent.as_str()).push_bind(key.heartbeat.as_str()).push_bind(slot.as_millisecond());
                });
                update.push(
                    ") AS v WHERE heartbeats.agent_id = v.column1 AND heartbeats.heartbeat_id = v.column2 \
                     AND (heartbeats.latest_slot_ms IS NULL OR heartbeats.latest_slot_ms < v.column3)",
                );
                update.build().execute(&mut **tx).await?;
            }
            Ok(())
        }
        }
    };
}

pub(crate) use sql_store;
