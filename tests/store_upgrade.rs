//! Upgrading an older database: one made before schedule kinds keeps every row (as an
//! `every` heartbeat with the default policies and its runtime state); one made before
//! rows kept their latest logged slot has it filled from the log.

use std::path::Path;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use systole::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
use systole::core::policy::RunPolicy;
use systole::core::schedule::Schedule;
use systole::ports::store::Store;
use systole::store::sqlite::SqliteStore;

const BEFORE_SCHEDULE_KINDS: [&str; 2] =
    ["20261121000000_heartbeats_and_executions.sql", "20261122000000_pauses_and_stop_reasons.sql"];

#[tokio::test]
async fn a_database_from_before_schedule_kinds_keeps_its_heartbeats() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old_migrations = dir.path().join("old-migrations");
    std::fs::create_dir(&old_migrations).expect("dir");
    for name in BEFORE_SCHEDULE_KINDS {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/migrations").join(name);
        std::fs::copy(&source, old_migrations.join(name)).expect("copy an old migration");
    }
    let db = dir.path().join("old.db");
    let options = SqliteConnectOptions::new().filename(&db).create_if_missing(true);
    let pool = SqlitePoolOptions::new().connect_with(options).await.expect("open");
    Migrator::new(old_migrations.as_path()).await.expect("old migrations").run(&pool).await.expect("old schema");
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
    assert_eq!(heartbeat.def.prompt, "Check the inbox.");
    assert_eq!(
        (heartbeat.state.enabled, heartbeat.state.disabled_reason.as_deref(), heartbeat.state.consecutive_failures),
        (false, Some("circuit-breaker"), 3),
        "runtime state survives the rebuild"
    );
    assert_eq!(heartbeat.state.next_slot.map(|slot| slot.as_millisecond()), Some(1_767_225_600_000));
}

/// The first migration whose rows keep their latest logged slot (ADR 0031).
const LATEST_SLOT_MIGRATION: &str = "20261202000000_latest_slot.sql";

#[tokio::test]
async fn a_database_from_before_kept_latest_slots_has_them_from_its_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old_migrations = dir.path().join("old-migrations");
    std::fs::create_dir(&old_migrations).expect("dir");
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/migrations");
    for entry in std::fs::read_dir(&migrations).expect("migrations") {
        let name = entry.expect("entry").file_name();
        if name.to_string_lossy().as_ref() < LATEST_SLOT_MIGRATION {
            std::fs::copy(migrations.join(&name), old_migrations.join(&name)).expect("copy an old migration");
        }
    }
    let db = dir.path().join("old.db");
    let options = SqliteConnectOptions::new().filename(&db).create_if_missing(true);
    let pool = SqlitePoolOptions::new().connect_with(options).await.expect("open");
    Migrator::new(old_migrations.as_path()).await.expect("old migrations").run(&pool).await.expect("old schema");
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
