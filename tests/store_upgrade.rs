//! Upgrading an older database: one made before schedule kinds keeps every row (as an
//! `every` heartbeat with the default policies and its runtime state); one made before
//! rows kept their latest logged slot has it filled from the log; one made before the
//! checks were written as comparisons keeps every row, rowid and id counter.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::SqlitePool;

use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::RunPolicy;
use systole::core::schedule::Schedule;
use systole::ports::store::Store;
use systole::store::sqlite::SqliteStore;

/// The first migration with schedule kinds.
const SCHEDULE_KINDS_MIGRATION: &str = "20261123000000_schedule_kinds.sql";

#[tokio::test]
async fn a_database_from_before_schedule_kinds_keeps_its_heartbeats() {
    let (_dir, db, pool) = database_before(SCHEDULE_KINDS_MIGRATION).await;
    sqlx::query(
        "INSERT INTO heartbeats (agent_id, heartbeat_id, prompt, interval_ms, delivery_target, timeout_ms, origin, \
         config_fingerprint, enabled, disabled_reason, consecutive_failures, next_slot_ms, created_at_ms, updated_at_ms) \
         VALUES ('main', 'inbox', 'Check the inbox.', 1800000, 'stdout', 120000, 'runtime', NULL, 0, \
         'circuit-breaker', 3, 1767225600000, 1, 2)",
    )
    .execute(&pool)
    .await
    .expect("an old row");
    pool.close().await;

    let store = SqliteStore::open(&db).await.expect("upgrade");
    let heartbeats = store.load_heartbeats().await.expect("load");
    assert_eq!(heartbeats.len(), 1);
    let heartbeat = &heartbeats[0];
    assert_eq!(heartbeat.def.schedule, Schedule::Every(Duration::from_secs(1_800)));
    assert_eq!(heartbeat.def.policy, RunPolicy::default());
    assert_eq!(&*heartbeat.def.prompt, "Check the inbox.");
    assert_eq!(
        (heartbeat.state.enabled, heartbeat.state.disabled_reason.as_deref(), heartbeat.state.consecutive_failures),
        (false, Some("circuit-breaker"), 3),
        "runtime state survives the rebuild"
    );
    assert_eq!(heartbeat.state.next_slot.map(|slot| slot.as_millisecond()), Some(1_767_225_600_000));
}

/// A new database in a temporary directory with every migration before `first_left_out`
/// applied, and a connection to it.
async fn database_before(first_left_out: &str) -> (tempfile::TempDir, PathBuf, SqlitePool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let old_migrations = dir.path().join("old-migrations");
    std::fs::create_dir(&old_migrations).expect("dir");
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/migrations");
    for entry in std::fs::read_dir(&migrations).expect("migrations") {
        let name = entry.expect("entry").file_name();
        if name.to_string_lossy().as_ref() < first_left_out {
            std::fs::copy(migrations.join(&name), old_migrations.join(&name)).expect("copy an old migration");
        }
    }
    let db = dir.path().join("old.db");
    let pool = SqlitePoolOptions::new().connect_with(options(&db)).await.expect("open");
    Migrator::new(old_migrations.as_path()).await.expect("old migrations").run(&pool).await.expect("old schema");
    (dir, db, pool)
}

fn options(db: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new().filename(db).create_if_missing(true)
}

/// The first migration whose rows keep their latest logged slot (ADR 0031).
const LATEST_SLOT_MIGRATION: &str = "20261202000000_latest_slot.sql";

#[tokio::test]
async fn a_database_from_before_kept_latest_slots_has_them_from_its_log() {
    let (_dir, db, pool) = database_before(LATEST_SLOT_MIGRATION).await;
    for heartbeat in ["logged", "quiet"] {
        sqlx::query(
            "INSERT INTO heartbeats (agent_id, heartbeat_id, kind, prompt, schedule_kind, every_ms, catch_up, \
             catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, delivery_target, timeout_ms, origin, \
             created_at_ms, updated_at_ms) VALUES ('main', $1, 'heartbeat', 'Check.', 'every', 60000, 'skip', 86400000, \
             'skip', 0, 0, 'stdout', 120000, 'runtime', 1, 1)",
        )
        .bind(heartbeat)
        .execute(&pool)
        .await
        .expect("an old row");
    }
    for slot_ms in [1_767_225_660_000_i64, 1_767_225_600_000] {
        sqlx::query(
            "INSERT INTO executions (agent_id, heartbeat_id, slot_ms, started_at_ms, status) \
             VALUES ('main', 'logged', $1, $1, 'succeeded')",
        )
        .bind(slot_ms)
        .execute(&pool)
        .await
        .expect("an old run");
    }
    pool.close().await;

    let store = SqliteStore::open(&db).await.expect("upgrade");
    let mut latest = Vec::new();
    store
        .load_for_arming_in_pages(&mut |page| {
            latest.extend(page.into_iter().map(|armable| {
                (armable.heartbeat.def.key.to_string(), armable.latest_slot.map(|slot| slot.as_millisecond()))
            }));
        })
        .await
        .expect("load in pages");
    latest.sort();
    assert_eq!(
        latest,
        vec![("main/logged".to_owned(), Some(1_767_225_660_000)), ("main/quiet".to_owned(), None)],
        "the latest of the log's slots, none without a log"
    );
    let key = HeartbeatKey {
        agent: AgentId::new("main").expect("an id"),
        heartbeat: HeartbeatId::new("logged").expect("an id"),
    };
    let read = store.latest_slots(std::slice::from_ref(&key)).await.expect("latest slots");
    assert_eq!(read.get(&key).map(|slot| slot.as_millisecond()), Some(1_767_225_660_000));
}

/// The first migration that writes the checks' lists as comparisons (ADR 0035).
const CHECKS_AS_COMPARISONS_MIGRATION: &str = "20261203000000_checks_as_comparisons.sql";

/// The columns of `table`, in their order.
async fn columns_of(pool: &SqlitePool, table: &str) -> Vec<String> {
    sqlx::query_scalar(&format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"))
        .fetch_all(pool)
        .await
        .expect("columns")
}

/// Every row of `table` with its rowid, each as one JSON array of `columns`, in rowid order.
async fn rows_of(pool: &SqlitePool, table: &str, columns: &[String]) -> Vec<String> {
    let select = format!("SELECT json_array(rowid, {}) FROM {table} ORDER BY rowid", columns.join(", "));
    sqlx::query_scalar(&select).fetch_all(pool).await.expect("rows")
}

#[tokio::test]
async fn rewriting_the_checks_keeps_every_row_its_rowid_and_the_event_counter() {
    let (_dir, db, pool) = database_before(CHECKS_AS_COMPARISONS_MIGRATION).await;
    // Rowids out of key order, a cron row with a window and tools, a disabled one.
    let heartbeats = [
        "(7, 'main', 'b-inbox', 'heartbeat', 'Check.', 'every', 60000, NULL, NULL, NULL, 'skip', 86400000, 'skip', 0, 0, \
          'stdout', NULL, NULL, NULL, 120000, 'runtime', NULL, 1, NULL, 0, 1767225600000, 1, 2, 1, NULL, NULL, NULL, NULL)",
        "(3, 'main', 'a-digest', 'cron', 'Sum up.', 'cron', NULL, '0 9 * * *', 'Europe/Paris', NULL, 'all', 3600000, \
          'buffer_one', 5000, 1, 'webhook:ops', '08:00', '18:00', 'Europe/Paris', 60000, 'config', 'abc', 0, \
          'circuit-breaker', 3, NULL, 1, 2, 0, 1767225000000, '{\"allow\":[\"x\"]}', 'small', 1767225500000)",
    ];
    for row in heartbeats {
        sqlx::query(&format!(
            "INSERT INTO heartbeats (rowid, agent_id, heartbeat_id, kind, prompt, schedule_kind, every_ms, cron_expr, \
             cron_timezone, at_ms, catch_up, catch_up_window_ms, overlap, jitter_max_ms, delete_after_run, \
             delivery_target, active_start, active_end, active_timezone, timeout_ms, origin, config_fingerprint, \
             enabled, disabled_reason, consecutive_failures, next_slot_ms, created_at_ms, updated_at_ms, dedup, \
             breaker_opened_at_ms, tools, model, latest_slot_ms) VALUES {row}"
        ))
        .execute(&pool)
        .await
        .expect("an old heartbeat");
    }
    sqlx::query(
        "INSERT INTO executions (id, agent_id, heartbeat_id, slot_ms, started_at_ms, finished_at_ms, status, delivery, \
         duration_ms, error, output_preview, stop_reason, reply, reply_digest, llm_calls, tool_use, input_tokens, \
         cached_tokens, output_tokens, reasoning_tokens, cost_micros, unpriced_calls, transcript) VALUES \
         (11, 'main', 'b-inbox', 1767225600000, 1767225600001, 1767225600900, 'succeeded', 'delivered', 899, NULL, \
          'All quiet.', 'answered', 'sent', 'd1', 2, '{\"calls\":1}', 100, 10, 20, 5, 1234, 0, '{\"messages\":[]}'), \
         (12, 'main', 'a-digest', 1767225000000, 1767225000001, NULL, 'running', NULL, NULL, NULL, NULL, NULL, NULL, \
          NULL, 0, NULL, 0, 0, 0, 0, 0, 0, NULL)",
    )
    .execute(&pool)
    .await
    .expect("old runs");
    for text in ["first", "second", "third"] {
        sqlx::query("INSERT INTO system_events (agent_id, text, queued_at_ms) VALUES ('main', $1, 1)")
            .bind(text)
            .execute(&pool)
            .await
            .expect("an event");
    }
    // The newest event is gone; its id must still never come back.
    sqlx::query("DELETE FROM system_events WHERE text = 'third'").execute(&pool).await.expect("deleted");
    let tables = ["heartbeats", "executions", "system_events"];
    let mut before = Vec::new();
    for table in tables {
        let columns = columns_of(&pool, table).await;
        let rows = rows_of(&pool, table, &columns).await;
        before.push((columns, rows));
    }
    pool.close().await;

    let store = SqliteStore::open(&db).await.expect("upgrade");
    let pool = SqlitePoolOptions::new().connect_with(options(&db)).await.expect("open again");
    // The columns each table had: a later migration may add one (ADR 0048's `triggered`).
    for (table, (columns, rows)) in tables.into_iter().zip(before) {
        assert_eq!(rows_of(&pool, table, &columns).await, rows, "{table}: every row, every column, its rowid");
    }
    let triggered: Vec<i64> =
        sqlx::query_scalar("SELECT triggered FROM executions ORDER BY rowid").fetch_all(&pool).await.expect("the mark");
    assert_eq!(triggered, vec![0, 0], "runs logged before ADR 0048 read as the schedule's own");
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .expect("indexes");
    assert_eq!(
        indexes,
        [
            "executions_agent_finished",
            "executions_finished_spend",
            "executions_reply_digest",
            "executions_running",
            "heartbeats_agent_heartbeats",
            "system_events_pending"
        ]
    );
    let agent = AgentId::new("main").expect("an id");
    let queued = store.queue_system_event(&agent, "fourth", jiff::Timestamp::UNIX_EPOCH).await.expect("queued");
    let ids: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM system_events ORDER BY id").fetch_all(&pool).await.expect("ids");
    assert_eq!(ids, [1, 2, 4], "the next id goes on past the deleted third ({queued:?})");
    // The checks still refuse what they refused.
    for bad in [
        "UPDATE executions SET status = 'lost' WHERE id = 11",
        "UPDATE executions SET delivery = 'maybe' WHERE id = 11",
        "UPDATE executions SET reply = 'loud' WHERE id = 11",
        "UPDATE heartbeats SET kind = 'job' WHERE heartbeat_id = 'b-inbox'",
        "UPDATE heartbeats SET overlap = 'queue' WHERE heartbeat_id = 'b-inbox'",
        "UPDATE heartbeats SET catch_up = 'some' WHERE heartbeat_id = 'b-inbox'",
        "UPDATE system_events SET state = 'lost' WHERE id = 1",
    ] {
        let refused = sqlx::query(bad).execute(&pool).await.expect_err(bad);
        assert!(refused.to_string().contains("CHECK constraint failed"), "{bad}: {refused}");
    }
}
