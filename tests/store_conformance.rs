//! One suite, three stores: the memory store, SQLite (a real file through sqlx) and
//! PostgreSQL (a throwaway server, see `common::postgres_server`) must agree on every rule
//! the engine relies on.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use common::postgres_server::{self, POSTGRES_TEST_PASSWORD};
use common::{cron_def, def, key, start};
use systole::core::active_hours::ActiveHours;
use systole::core::breaker::{BreakerStep, DISABLED_BY_BREAKER};
use systole::core::budget::DaySpend;
use systole::core::cron::CronSchedule;
use systole::core::delivery_target::DeliveryTarget;
use systole::core::guard::SkipReason;
use systole::core::heartbeat::{HeartbeatDef, JobKind, Origin};
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::pause::PauseRecord;
use systole::core::policy::{CatchUp, Overlap, RunPolicy};
use systole::core::reply::ReplyKind;
use systole::core::schedule::Schedule;
use systole::core::system_events::SystemEvent;
use systole::core::tool_policy::{JobTools, ToolName, ToolPattern};
use systole::core::usage::{RunUsage, TokenUsage};
use systole::limits::SQLITE_BUSY_TIMEOUT_MS;
use systole::ports::store::{
    ClaimOutcome, DedupQuery, DeliveryStatus, ExecutionStatus, NextSlot, Queued, RunRecord, SkipRecord, SlotClaim,
    StopReason, Store, StoreError,
};
use systole::store::memory::MemoryStore;
use systole::store::postgres::PostgresStore;
use systole::store::sqlite::SqliteStore;

fn at(secs: i64) -> Timestamp {
    start().checked_add(SignedDuration::from_secs(secs)).expect("in range")
}

/// A next slot of the test heartbeats' schedule (`def(.., 60)`: every minute).
fn every_minute(secs: i64) -> NextSlot {
    NextSlot { at: at(secs), schedule: Schedule::Every(Duration::from_secs(60)) }
}

fn claim(k: &HeartbeatKey, slot_secs: i64) -> SlotClaim {
    SlotClaim {
        key: k.clone(),
        slot: at(slot_secs),
        claimed_at: at(slot_secs),
        next_slot: every_minute(slot_secs + 60),
        triggered: false,
    }
}

fn finished(k: &HeartbeatKey, slot_secs: i64, succeeded: bool) -> RunRecord {
    RunRecord {
        key: k.clone(),
        slot: at(slot_secs),
        finished_at: at(slot_secs + 1),
        status: if succeeded { ExecutionStatus::Succeeded } else { ExecutionStatus::Failed },
        delivery: DeliveryStatus::NotNeeded,
        duration: Duration::from_millis(1_500),
        error: (!succeeded).then(|| "boom".to_owned()),
        output_preview: None,
        stop_reason: Some(StopReason::Completed),
        reply: None,
        reply_digest: None,
        consumes: Vec::new(),
        llm_calls: 0,
        usage: RunUsage::default(),
        provider_refused: false,
        transcript: None,
        tool_use: None,
    }
}

const BREAKER_MAX: u32 = 3;

/// Claims and fails `count` slots in a row, one batch each, like a driver would.
async fn fail_times(store: &dyn Store, k: &HeartbeatKey, first_slot_secs: i64, count: i64) -> Vec<BreakerStep> {
    let mut steps = Vec::new();
    for index in 0..count {
        let slot = first_slot_secs + 60 * index;
        store.claim_slots(&[claim(k, slot)]).await.expect("claim");
        steps.extend(store.finish_runs(&[finished(k, slot, false)], BREAKER_MAX).await.expect("finish"));
    }
    steps
}

#[tokio::test]
async fn a_run_that_fails_after_an_operators_disable_is_counted_but_leaves_the_breaker_shut_by_them() {
    with_each_store(|store| async move {
        let k = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        fail_times(&*store, &k, 60, 2).await;
        // The third failure's run was in flight when the operator's disable landed.
        store.claim_slots(&[claim(&k, 180)]).await.expect("claim");
        assert!(store.set_enabled(&k, false, Some("user")).await.expect("disable"));
        let steps = store.finish_runs(&[finished(&k, 180, false)], BREAKER_MAX).await.expect("finish");
        assert_eq!(steps, vec![BreakerStep { counted: true, ..BreakerStep::unchanged(3) }], "counted, not tripped");
        let row = store.load_heartbeats().await.expect("load").remove(0);
        assert!(!row.state.enabled);
        assert_eq!(row.state.disabled_reason.as_deref(), Some("user"), "the operator's reason stands");
        assert_eq!(row.state.breaker_opened_at, None, "no cooldown to end in a probe");
        assert!(!store.half_open_breaker(&k).await.expect("half-open"), "nothing for a probe to enable");
    })
    .await;
}

async fn with_each_store<F, Fut>(check: F)
where
    F: Fn(Box<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    check(Box::new(MemoryStore::new())).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteStore::open(&dir.path().join("conformance.db")).await.expect("open sqlite");
    check(Box::new(sqlite)).await;
    let url = postgres_server::fresh_database().await;
    let postgres = PostgresStore::connect(&url, Some(POSTGRES_TEST_PASSWORD)).await.expect("connect to postgres");
    check(Box::new(postgres)).await;
}

#[tokio::test]
async fn a_slot_is_claimed_once_within_and_across_batches() {
    with_each_store(|store| async move {
        let k = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        let outcomes = store.claim_slots(&[claim(&k, 60), claim(&k, 120), claim(&k, 60)]).await.expect("claim");
        assert_eq!(outcomes, vec![ClaimOutcome::Claimed, ClaimOutcome::Claimed, ClaimOutcome::AlreadyClaimed]);
        let again = store.claim_slots(&[claim(&k, 120), claim(&k, 180)]).await.expect("claim");
        assert_eq!(again, vec![ClaimOutcome::AlreadyClaimed, ClaimOutcome::Claimed]);
        let stored = store.load_heartbeats().await.expect("load");
        assert_eq!(stored[0].state.next_slot, Some(at(240)), "the claim stores the next slot");
    })
    .await;
}

/// The log tells an operator's trigger from the schedule's slot, through the run's end
/// and after a restart's recovery (ADR 0048: a one-shot's failed trigger is not its failure).
#[tokio::test]
async fn a_triggered_run_is_logged_as_one_from_its_claim_to_its_end() {
    with_each_store(|store| async move {
        let k = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        let trigger = SlotClaim { triggered: true, ..claim(&k, 90) };
        let outcomes = store.claim_slots(&[claim(&k, 60), trigger, claim(&k, 120)]).await.expect("claim");
        assert_eq!(outcomes, vec![ClaimOutcome::Claimed; 3]);
        store.finish_runs(&[finished(&k, 90, false)], BREAKER_MAX).await.expect("finish");
        store.recover_interrupted(at(200)).await.expect("recover");
        let runs = store.executions(&k, 10).await.expect("read the log");
        let marks: Vec<(Timestamp, bool)> = runs.iter().map(|run| (run.slot, run.triggered)).collect();
        assert_eq!(marks, vec![(at(120), false), (at(90), true), (at(60), false)], "newest first");
    })
    .await;
}

/// A claim that meets an operator's trigger's row says so, in a later batch and within
/// one; one that meets the schedule's row does not (ADR 0055: a one-shot's own slot there is
/// not decided).
#[tokio::test]
async fn a_claim_that_meets_a_triggers_row_says_so() {
    with_each_store(|store| async move {
        let k = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        let trigger = |secs| SlotClaim { triggered: true, ..claim(&k, secs) };
        let first = store.claim_slots(&[trigger(90), claim(&k, 60), trigger(150), claim(&k, 150)]).await;
        use ClaimOutcome::{AlreadyClaimed, AlreadyTriggered, Claimed};
        assert_eq!(first.expect("claims"), [Claimed, Claimed, Claimed, AlreadyTriggered], "within a batch");
        let again = store.claim_slots(&[claim(&k, 90), trigger(60), claim(&k, 60), trigger(90)]).await;
        assert_eq!(again.expect("claims"), [AlreadyTriggered, AlreadyClaimed, AlreadyClaimed, AlreadyTriggered]);
        let read = store.claim_and_read(&[claim(&k, 150)]).await.expect("claims");
        assert_eq!(read.outcomes, [AlreadyTriggered], "and with the definitions");
    })
    .await;
}

/// A pass's claims come back with the definitions of the heartbeats they won, and only
/// theirs: not a lost claim's, not a deleted heartbeat's; one for a heartbeat with two
/// slots won (ADR 0037: SQLite reads them on its writer's thread, the others in a second
/// call).
#[tokio::test]
async fn claims_come_back_with_the_definitions_of_the_heartbeats_they_won() {
    with_each_store(|store| async move {
        let (a, b, c) =
            (def("main", "a", 60), cron_def("main", "b", "0 9 * * *", "Europe/Berlin"), def("ops", "c", 60));
        store.seed_config(&[a.clone(), b.clone(), c.clone()], at(0)).await.expect("seed");
        store.claim_slots(&[claim(&c.key, 60)]).await.expect("c's slot, claimed before");
        let gone = def("main", "gone", 60);
        store.put_heartbeat(&gone, at(0)).await.expect("put");
        assert!(store.delete_heartbeat(&gone.key).await.expect("delete"));
        let claims =
            [claim(&a.key, 60), claim(&a.key, 120), claim(&b.key, 60), claim(&c.key, 60), claim(&gone.key, 60)];
        let claimed = store.claim_and_read(&claims).await.expect("claims");
        use ClaimOutcome::{AlreadyClaimed, Claimed, Gone};
        assert_eq!(claimed.outcomes, [Claimed, Claimed, Claimed, AlreadyClaimed, Gone]);
        let definitions = claimed.definitions.expect("the definitions");
        assert_eq!(definitions.keys().collect::<Vec<_>>(), [&a.key, &b.key], "those won, each once");
        assert_eq!((&*definitions[&a.key], &*definitions[&b.key]), (&a, &b), "as stored");
        let stored = store.executions(&a.key, 10).await.expect("a's runs");
        assert_eq!(stored.len(), 2, "the claims were written");
        // Nothing won, nothing read.
        let again = store.claim_and_read(&claims[..1]).await.expect("claims");
        assert_eq!(again.outcomes, [AlreadyClaimed]);
        assert!(again.definitions.expect("nothing to read").is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_seed_in_any_order_stores_each_key_once_and_keeps_its_last_definition() {
    with_each_store(|store| async move {
        // Upserted in key order whatever the config's order; a key named twice keeps its last.
        let defs = [def("main", "c", 60), def("main", "a", 60), def("main", "c", 300), def("main", "b", 60)];
        let sorted = |keys: &[HeartbeatKey]| {
            let mut keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
            keys.sort();
            keys
        };
        let report = store.seed_config(&defs, at(0)).await.expect("seed");
        assert_eq!(sorted(&report.inserted), ["main/a", "main/b", "main/c"], "each key reported once");
        assert!(report.updated.is_empty() && report.unchanged.is_empty(), "{report:?}");
        let loaded = store.load_heartbeats().await.expect("load");
        let keys: Vec<String> = loaded.iter().map(|row| row.def.key.to_string()).collect();
        assert_eq!(keys, vec!["main/a", "main/b", "main/c"]);
        assert_eq!(loaded[2].def.schedule, Schedule::Every(Duration::from_secs(300)), "the last of main/c");
        // Again, into a store that holds them: the last of main/c is what it has.
        let report = store.seed_config(&defs, at(10)).await.expect("seed again");
        assert_eq!(sorted(&report.unchanged), ["main/a", "main/b", "main/c"], "each key reported once");
        assert!(report.updated.is_empty() && report.inserted.is_empty(), "{report:?}");
    })
    .await;
}

/// Every field of a definition, set to what no default has, comes back as seeded: first
/// as a new row, then through the replacing upsert of a changed one. Among more rows
/// than SQLite's seed writes a turn (5,000), so that turns follow one another.
#[tokio::test]
async fn a_seed_stores_every_field_of_a_definition_as_given_new_or_replaced() {
    with_each_store(|store| async move {
        let full = |prompt: &str| {
            let tools = JobTools {
                allow: Some(vec![ToolPattern::parse("files/*").expect("a pattern")]),
                write: vec![ToolPattern::parse("files/write").expect("a pattern")],
                required: vec![ToolName::new("files", "read")],
                ..JobTools::default()
            };
            HeartbeatDef {
                kind: JobKind::Cron,
                prompt: prompt.into(),
                policy: RunPolicy {
                    catch_up: CatchUp::All,
                    catch_up_window: Duration::from_secs(7_200),
                    overlap: Overlap::AllowAll,
                    jitter_max: Duration::from_secs(30),
                },
                delete_after_run: true,
                dedup: false,
                target: DeliveryTarget::parse("webhook:ops").expect("a target"),
                active_hours: Some(ActiveHours::new("22:00", "06:00", "Europe/Berlin").expect("a window")),
                timeout: Duration::from_secs(45),
                tools: tools.into(),
                model: Some("small-model".to_owned()),
                ..cron_def("main", "full", "*/5 * * * *", "Asia/Tokyo")
            }
        };
        let mut defs: Vec<HeartbeatDef> = (0..6_000).map(|n| def("bulk", &format!("n{n:04}"), 60)).collect();
        defs.push(full("first prompt, with a quote ' and a ✓"));
        store.seed_config(&defs, at(0)).await.expect("seed");
        let stored = |loaded: Vec<systole::core::heartbeat::Heartbeat>| {
            loaded.into_iter().map(|row| (row.def.key.clone(), row.def)).collect::<BTreeMap<_, _>>()
        };
        let loaded = stored(store.load_heartbeats().await.expect("load"));
        assert_eq!(loaded.len(), 6_001);
        assert!(defs.iter().all(|def| loaded.get(&def.key) == Some(def)), "each as seeded");
        let changed = full("second prompt");
        let last = defs.len() - 1;
        defs[last] = changed.clone();
        let report = store.seed_config(&defs, at(10)).await.expect("seed again");
        assert_eq!(report.updated, std::slice::from_ref(&changed.key));
        assert_eq!(report.unchanged.len(), 6_000);
        let loaded = stored(store.load_heartbeats().await.expect("load"));
        assert_eq!(loaded.get(&changed.key), Some(&changed), "replaced whole");
    })
    .await;
}

#[tokio::test]
async fn a_definition_is_stored_with_its_first_slot_and_an_unchanged_seed_keeps_the_slot_it_has() {
    with_each_store(|store| async move {
        let slots = || {
            let store = &store;
            async move {
                let stored = store.load_heartbeats().await.expect("load");
                stored.into_iter().map(|row| (row.def.key.to_string(), row.state.next_slot)).collect::<Vec<_>>()
            }
        };
        // A first start then arms without writing a slot per heartbeat (ADR 0028).
        let past_once = HeartbeatDef { schedule: Schedule::At(at(-600)), ..def("main", "once", 60) };
        let config = [def("main", "a", 60), cron_def("main", "c", "0 13 * * *", "UTC"), past_once];
        store.seed_config(&config, at(5)).await.expect("seed");
        let seeded = vec![
            ("main/a".to_owned(), Some(at(65))),
            ("main/c".to_owned(), Some(at(3_600))),
            ("main/once".to_owned(), Some(at(-600))),
        ];
        assert_eq!(slots().await, seeded, "each its schedule's first slot after the seed (a past one-shot's instant)");
        store.claim_slots(&[claim(&key("main", "a"), 65)]).await.expect("claim");
        store.seed_config(&config, at(70)).await.expect("seed again");
        assert_eq!(slots().await[0], ("main/a".to_owned(), Some(at(125))), "an unchanged definition keeps its slot");
        store.put_heartbeat(&def("main", "p", 600), at(10)).await.expect("put");
        assert_eq!(slots().await[3], ("main/p".to_owned(), Some(at(610))), "a put stores its first slot too");
    })
    .await;
}

#[tokio::test]
async fn a_next_slot_is_kept_only_under_the_schedule_that_gave_it() {
    with_each_store(|store| async move {
        let k = key("main", "a");
        let next_slot = || {
            let (store, k) = (&store, k.clone());
            async move {
                let stored = store.load_heartbeats().await.expect("load");
                stored.into_iter().find(|row| row.def.key == k).and_then(|row| row.state.next_slot)
            }
        };
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        assert_eq!(next_slot().await, Some(at(60)), "a seeded definition is stored with its first slot");
        store.set_next_slots(&[(k.clone(), every_minute(120))]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(120)), "its own schedule's slot is kept");
        // Replaced by a reload with another interval: a writer that missed the change
        // (a node frozen through it) writes the old schedule's slots.
        store.seed_config(&[def("main", "a", 300)], at(1)).await.expect("reload");
        assert_eq!(next_slot().await, Some(at(301)), "a replaced definition has its own schedule's first slot");
        assert_eq!(store.claim_slots(&[claim(&k, 180)]).await.expect("claim"), vec![ClaimOutcome::Claimed]);
        let skip = SkipRecord {
            key: k.clone(),
            slot: at(240),
            at: at(240),
            reason: SkipReason::QuietHours,
            next_slot: every_minute(300),
            triggered: false,
        };
        store.record_skips(&[skip]).await.expect("skip");
        store.set_next_slots(&[(k.clone(), every_minute(360))]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(301)), "no write under the old schedule is kept");
        let every_five = NextSlot { at: at(600), schedule: Schedule::Every(Duration::from_secs(300)) };
        store.set_next_slots(&[(k.clone(), every_five)]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(600)), "the new schedule's slot is kept");
        // A cron is its expression in its zone; a one-shot is its instant.
        let berlin = cron_def("main", "a", "*/5 * * * *", "Europe/Berlin");
        store.seed_config(std::slice::from_ref(&berlin), at(2)).await.expect("reload");
        assert_eq!(next_slot().await, Some(at(300)), "the first five minutes after 12:00:02 UTC in Berlin");
        let utc = cron_def("main", "a", "*/5 * * * *", "UTC").schedule;
        store.set_next_slots(&[(k.clone(), NextSlot { at: at(900), schedule: utc })]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(300)), "the same expression in another zone is another schedule");
        let own = NextSlot { at: at(1_200), schedule: berlin.schedule };
        store.set_next_slots(&[(k.clone(), own)]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(1_200)));
        let once = HeartbeatDef { schedule: Schedule::At(at(3_600)), ..def("main", "a", 60) };
        store.seed_config(&[once], at(3)).await.expect("reload");
        let other_instant = NextSlot { at: at(3_700), schedule: Schedule::At(at(3_660)) };
        store.set_next_slots(&[(k.clone(), other_instant)]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(3_600)), "another instant is another one-shot");
        let retry = NextSlot { at: at(3_700), schedule: Schedule::At(at(3_600)) };
        store.set_next_slots(&[(k.clone(), retry)]).await.expect("set");
        assert_eq!(next_slot().await, Some(at(3_700)), "a one-shot's retry slot is kept");
    })
    .await;
}

#[tokio::test]
async fn a_skip_never_overwrites_a_claim_and_is_never_claimed_after() {
    with_each_store(|store| async move {
        let k = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        store.claim_slots(&[claim(&k, 60)]).await.expect("claim");
        let skip = |slot: i64| SkipRecord {
            key: k.clone(),
            slot: at(slot),
            at: at(slot),
            reason: SkipReason::QuietHours,
            next_slot: every_minute(slot + 60),
            triggered: false,
        };
        store.record_skips(&[skip(60), skip(120)]).await.expect("skip");
        let runs = store.executions(&k, 10).await.expect("read");
        assert_eq!(
            runs.iter().map(|e| e.status).collect::<Vec<_>>(),
            vec![ExecutionStatus::Skipped, ExecutionStatus::Running]
        );
        assert_eq!(runs[0].skip_reason, Some(SkipReason::QuietHours));
        assert_eq!(store.claim_slots(&[claim(&k, 120)]).await.expect("claim"), vec![ClaimOutcome::AlreadyClaimed]);
    })
    .await;
}

#[tokio::test]
async fn finishing_runs_records_outcomes_and_trips_the_breaker() {
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        let steps = fail_times(store.as_ref(), &a, 60, 2).await;
        assert_eq!(
            steps.iter().map(|s| (s.consecutive_failures, s.tripped)).collect::<Vec<_>>(),
            vec![(1, false), (2, false)]
        );
        store.claim_slots(&[claim(&a, 180), claim(&b, 180)]).await.expect("claim");
        let steps =
            store.finish_runs(&[finished(&a, 180, false), finished(&b, 180, true)], BREAKER_MAX).await.expect("finish");
        let tripped =
            BreakerStep { consecutive_failures: 3, tripped: true, opened: true, closed: false, counted: true };
        assert_eq!(steps, vec![tripped, BreakerStep { counted: true, ..BreakerStep::unchanged(0) }]);
        let heartbeats = store.load_heartbeats().await.expect("load");
        assert_eq!((heartbeats[0].state.enabled, heartbeats[0].state.consecutive_failures), (false, 3));
        assert_eq!(heartbeats[0].state.disabled_reason.as_deref(), Some(DISABLED_BY_BREAKER));
        assert!(heartbeats[1].state.enabled);
        let run = &store.executions(&a, 1).await.expect("read")[0];
        assert_eq!(run.status, ExecutionStatus::Failed);
        assert_eq!(run.duration, Some(Duration::from_millis(1_500)));
        assert_eq!(run.error.as_deref(), Some("boom"));
        assert_eq!(run.finished_at, Some(at(181)));
        assert_eq!(run.stop_reason, Some(StopReason::Completed));
    })
    .await;
}

#[tokio::test]
async fn seeding_never_overwrites_runtime_state_unless_the_config_changed() {
    with_each_store(|store| async move {
        let a = key("main", "a");
        let report = store.seed_config(&[def("main", "a", 60), def("main", "gone", 60)], at(0)).await.expect("seed");
        assert_eq!(report.inserted.len(), 2);
        fail_times(store.as_ref(), &a, 60, 3).await;

        // Same definition: the breaker's disable stays; the dropped heartbeat is removed.
        let report = store.seed_config(&[def("main", "a", 60)], at(100)).await.expect("seed");
        assert_eq!((report.unchanged, report.removed), (vec![a.clone()], vec![key("main", "gone")]));
        let stored = store.load_heartbeats().await.expect("load");
        assert_eq!(stored.len(), 1);
        assert!(!stored[0].state.enabled, "config seeding must not re-enable what the breaker disabled");
        assert_eq!(stored[0].state.consecutive_failures, 3);
        assert_eq!(store.executions(&key("main", "gone"), 10).await.expect("read").len(), 0);

        // A changed definition is the user's new intent: applied and re-enabled.
        let report = store.seed_config(&[def("main", "a", 120)], at(200)).await.expect("seed");
        assert_eq!(report.updated, vec![a.clone()]);
        let stored = store.load_heartbeats().await.expect("load");
        assert_eq!((stored[0].state.enabled, stored[0].state.consecutive_failures), (true, 0));
        assert_eq!(stored[0].def.schedule, Schedule::Every(Duration::from_secs(120)));
        assert_eq!(store.executions(&a, 10).await.expect("read").len(), 3, "the audit log stays");
    })
    .await;
}

/// A config heartbeat edited at run time (an operator's or a model's change) keeps the
/// edit through seeds of the config it was seeded from; a changed config replaces it.
#[tokio::test]
async fn a_run_time_edit_of_a_config_heartbeat_survives_seeds_of_the_same_config() {
    with_each_store(|store| async move {
        let seeded = def("main", "a", 60);
        store.seed_config(std::slice::from_ref(&seeded), at(0)).await.expect("seed");
        let edited = HeartbeatDef { prompt: "edited at run time".into(), ..seeded.clone() };
        store.put_heartbeat(&edited, at(10)).await.expect("edit");
        for second in [20, 30] {
            let report = store.seed_config(std::slice::from_ref(&seeded), at(second)).await.expect("seed again");
            assert_eq!(report.unchanged, vec![seeded.key.clone()], "the config did not change");
            let stored = store.load_heartbeats().await.expect("load");
            assert_eq!(&*stored[0].def.prompt, "edited at run time", "the edit stays");
        }
        // An edit back to the config's own text is still an edit: the same config stays unchanged.
        store.put_heartbeat(&seeded, at(40)).await.expect("edit back");
        let report = store.seed_config(std::slice::from_ref(&seeded), at(50)).await.expect("seed again");
        assert_eq!(report.unchanged, vec![seeded.key.clone()]);
        let changed = HeartbeatDef { prompt: "the config's new prompt".into(), ..seeded.clone() };
        let report = store.seed_config(std::slice::from_ref(&changed), at(60)).await.expect("seed a change");
        assert_eq!(report.updated, vec![seeded.key.clone()]);
        assert_eq!(store.load_heartbeats().await.expect("load")[0].def.prompt.to_string(), "the config's new prompt");
        let report = store.seed_config(&[changed], at(70)).await.expect("seed the change again");
        assert_eq!(report.unchanged, vec![seeded.key]);
    })
    .await;
}

#[tokio::test]
async fn every_schedule_kind_and_policy_round_trips() {
    with_each_store(|store| async move {
        let policy = RunPolicy {
            catch_up: CatchUp::All,
            catch_up_window: Duration::from_secs(7_200),
            overlap: Overlap::BufferOne,
            jitter_max: Duration::from_secs(90),
        };
        let cron = HeartbeatDef { policy, ..cron_def("main", "standup", "0 9 * * MON-FRI", "Asia/Shanghai") };
        let at_schedule = Schedule::At("2026-12-01T06:00:00Z".parse().expect("valid"));
        let once = HeartbeatDef {
            schedule: at_schedule,
            delete_after_run: true,
            target: DeliveryTarget::silent(),
            ..cron_def("main", "reminder", "* * * * *", "UTC")
        };
        let every = def("other", "inbox", 1_800);
        let defs = vec![cron.clone(), once.clone(), every.clone()];
        store.seed_config(&defs, at(0)).await.expect("seed");
        let mut stored: Vec<HeartbeatDef> =
            store.load_heartbeats().await.expect("load").into_iter().map(|h| h.def).collect();
        stored.sort_by(|a, b| a.key.cmp(&b.key));
        let mut expected = defs;
        expected.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(stored, expected);
        // Seeding the same definitions again changes nothing: their fingerprints are stable.
        let report = store.seed_config(&expected, at(10)).await.expect("seed");
        assert_eq!(report.unchanged.len(), 3);
    })
    .await;
}

#[tokio::test]
async fn delivered_digests_are_found_per_heartbeat_and_window() {
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        store.claim_slots(&[claim(&a, 60)]).await.expect("claim");
        let sent = RunRecord {
            delivery: DeliveryStatus::Delivered,
            reply: Some(ReplyKind::Sent),
            reply_digest: Some("d1".to_owned()),
            ..finished(&a, 60, true)
        };
        store.finish_runs(&[sent], BREAKER_MAX).await.expect("finish");
        let ask = |k: &HeartbeatKey, digest: &str, since| DedupQuery { key: k.clone(), digest: digest.into(), since };
        let queries = [ask(&a, "d1", at(61)), ask(&a, "d1", at(62)), ask(&a, "d2", at(0)), ask(&b, "d1", at(0))];
        let found = store.delivered_since(&[&queries[..], &queries[..1]].concat()).await.expect("read");
        // Finished at 61: inside; older than the window; another reply; another heartbeat;
        // the first asked twice.
        assert_eq!(found, vec![true, false, false, false, true]);
        // Times compare in whole milliseconds, as the SQL stores keep them: later in the
        // finish's millisecond is inside, the next millisecond is not (seed 1927873866253).
        let later_in_it = at(61).checked_add(jiff::SignedDuration::from_micros(500)).expect("a time");
        let next_one = at(61).checked_add(jiff::SignedDuration::from_millis(1)).expect("a time");
        let found = store.delivered_since(&[ask(&a, "d1", later_in_it), ask(&a, "d1", next_one)]).await.expect("read");
        assert_eq!(found, vec![true, false]);
        // More questions than one statement takes: each answer still in its question's place.
        let mut many: Vec<_> = (0..1_500).map(|i| ask(&b, "d1", at(i))).collect();
        many.insert(1_234, ask(&a, "d1", at(0)));
        let found = store.delivered_since(&many).await.expect("read");
        let positions: Vec<usize> = found.iter().enumerate().filter(|(_, found)| **found).map(|(at, _)| at).collect();
        assert_eq!(positions, vec![1_234]);
        let runs = store.executions(&a, 1).await.expect("read");
        assert_eq!(runs[0].reply, Some(ReplyKind::Sent));
    })
    .await;
}

#[tokio::test]
async fn system_events_queue_by_the_spec_and_leave_only_with_a_success() {
    with_each_store(|store| async move {
        let (ops, other) = (AgentId::new("ops").expect("id"), AgentId::new("other").expect("id"));
        let job = def("ops", "main", 60);
        store.seed_config(std::slice::from_ref(&job), at(0)).await.expect("seed");
        // Consecutive duplicates are not queued; the same text later, after another, is.
        let first = store.queue_system_event(&ops, "[CRON:a] x", at(0)).await.expect("queue");
        assert!(matches!(first, Queued::Added { dropped: 0, .. }));
        assert_eq!(store.queue_system_event(&ops, "[CRON:a] x", at(1)).await.expect("queue"), Queued::Duplicate);
        store.queue_system_event(&ops, "[CRON:b] y", at(2)).await.expect("queue");
        store.queue_system_event(&ops, "[CRON:a] x", at(3)).await.expect("queue");
        let texts = |events: Vec<SystemEvent>| events.into_iter().map(|event| event.text).collect::<Vec<_>>();
        let pending = store.pending_system_events(&ops, at(10)).await.expect("read");
        assert_eq!(texts(pending.clone()), ["[CRON:a] x", "[CRON:b] y", "[CRON:a] x"]);
        assert!(store.pending_system_events(&other, at(10)).await.expect("read").is_empty(), "per agent");
        // TTL: one hour after queueing, an event is no longer pending (L3).
        assert_eq!(store.pending_system_events(&ops, at(3_601)).await.expect("read").len(), 2);
        assert!(store.pending_system_events(&ops, at(3_603)).await.expect("read").is_empty());
        // A failed run consumes nothing; a successful one consumes exactly what it listed.
        let ids: Vec<u64> = pending.iter().map(|event| event.id).collect();
        store.claim_slots(&[claim(&job.key, 60), claim(&job.key, 120)]).await.expect("claim");
        let failed = RunRecord { consumes: ids.clone(), ..finished(&job.key, 60, false) };
        store.finish_runs(&[failed], BREAKER_MAX).await.expect("finish");
        assert_eq!(store.pending_system_events(&ops, at(200)).await.expect("read").len(), 3);
        let succeeded = RunRecord { consumes: ids[..2].to_vec(), ..finished(&job.key, 120, true) };
        store.finish_runs(&[succeeded], BREAKER_MAX).await.expect("finish");
        let left = store.pending_system_events(&ops, at(200)).await.expect("read");
        assert_eq!(left.iter().map(|event| event.id).collect::<Vec<_>>(), [ids[2]]);
        // Overflow (L4): 25 distinct events leave the newest 20, oldest dropped first.
        let mut dropped_total = 0;
        for index in 0..25 {
            if let Queued::Added { dropped, .. } =
                store.queue_system_event(&other, &format!("[CRON:c] {index}"), at(300)).await.expect("queue")
            {
                dropped_total += dropped;
            }
        }
        assert_eq!(dropped_total, 5);
        let kept = texts(store.pending_system_events(&other, at(301)).await.expect("read"));
        assert_eq!(kept.len(), 20);
        assert_eq!(kept.first().map(String::as_str), Some("[CRON:c] 5"));
        // Ids are never handed out twice, even after events left.
        let Queued::Added { id, .. } = store.queue_system_event(&ops, "[CRON:z] z", at(400)).await.expect("queue")
        else {
            panic!("a new text is queued")
        };
        assert!(ids.iter().all(|old| *old < id));
    })
    .await;
}

#[tokio::test]
async fn runtime_heartbeats_are_left_alone_by_seeding() {
    with_each_store(|store| async move {
        let mut runtime = def("main", "made-by-model", 60);
        runtime.origin = Origin::Runtime;
        store.put_heartbeat(&runtime, at(0)).await.expect("put");
        let report = store.seed_config(&[], at(10)).await.expect("seed");
        assert!(report.removed.is_empty());
        assert_eq!(store.load_heartbeats().await.expect("load").len(), 1);
        assert!(store.delete_heartbeat(&runtime.key).await.expect("delete"));
        assert!(!store.delete_heartbeat(&runtime.key).await.expect("delete"));
    })
    .await;
}

#[tokio::test]
async fn recovery_marks_unfinished_claims_interrupted() {
    with_each_store(|store| async move {
        let a = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        store.claim_slots(&[claim(&a, 60), claim(&a, 120)]).await.expect("claim");
        store.finish_runs(&[finished(&a, 60, true)], BREAKER_MAX).await.expect("finish");
        assert_eq!(store.recover_interrupted(at(500)).await.expect("recover"), 1);
        assert_eq!(store.recover_interrupted(at(600)).await.expect("recover"), 0);
        let runs = store.executions(&a, 10).await.expect("read");
        assert_eq!(runs[0].status, ExecutionStatus::Interrupted);
        assert_eq!(runs[0].finished_at, Some(at(500)));
        assert_eq!(runs[1].status, ExecutionStatus::Succeeded);
    })
    .await;
}

#[tokio::test]
async fn enabling_clears_the_breaker_and_disabling_keeps_the_reason() {
    with_each_store(|store| async move {
        let a = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        fail_times(store.as_ref(), &a, 60, 3).await;
        assert!(store.set_enabled(&a, true, None).await.expect("enable"));
        let state = store.load_heartbeats().await.expect("load")[0].state.clone();
        assert_eq!((state.enabled, state.consecutive_failures, state.disabled_reason), (true, 0, None));
        assert!(store.set_enabled(&a, false, Some("user")).await.expect("disable"));
        assert_eq!(store.load_heartbeats().await.expect("load")[0].state.disabled_reason.as_deref(), Some("user"));
        assert!(!store.set_enabled(&key("main", "nope"), true, None).await.expect("enable"));
    })
    .await;
}

#[tokio::test]
async fn a_retirement_disables_only_an_enabled_row_and_keeps_an_earlier_reason() {
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        let retired = || Some("no-more-slots".to_owned());

        assert!(store.disable_if_enabled(&a, "no-more-slots").await.expect("retire"));
        assert_eq!(enabled_and_reason(store.as_ref(), &a).await, (false, retired()));

        // An operator's disable, and the breaker's, stored first keep their reasons.
        assert!(store.set_enabled(&b, false, Some("user")).await.expect("disable"));
        assert!(!store.disable_if_enabled(&b, "no-more-slots").await.expect("retire"));
        assert_eq!(enabled_and_reason(store.as_ref(), &b).await, (false, Some("user".to_owned())));
        assert!(store.set_enabled(&b, true, None).await.expect("enable"));
        fail_times(store.as_ref(), &b, 60, 3).await;
        assert!(!store.disable_if_enabled(&b, "no-more-slots").await.expect("retire"));
        assert_eq!(enabled_and_reason(store.as_ref(), &b).await, (false, Some(DISABLED_BY_BREAKER.to_owned())));

        assert!(!store.disable_if_enabled(&key("main", "nope"), "no-more-slots").await.expect("missing"));
    })
    .await;
}

async fn enabled_and_reason(store: &dyn Store, k: &HeartbeatKey) -> (bool, Option<String>) {
    let loaded = store.load_heartbeats().await.expect("load");
    let state = loaded.into_iter().find(|stored| stored.def.key == *k).expect("stored").state;
    (state.enabled, state.disabled_reason.map(String::from))
}

#[tokio::test]
async fn a_half_open_breaker_keeps_its_count_and_only_opens_what_the_breaker_disabled() {
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        fail_times(store.as_ref(), &a, 60, 3).await;
        let state = store.load_heartbeats().await.expect("load")[0].state.clone();
        assert_eq!(state.breaker_opened_at, Some(at(181)), "opened when the tripping run finished");

        assert!(store.half_open_breaker(&a).await.expect("half-open"));
        let state = store.load_heartbeats().await.expect("load")[0].state.clone();
        assert_eq!((state.enabled, state.consecutive_failures, state.disabled_reason), (true, 3, None));
        assert!(!store.half_open_breaker(&a).await.expect("again"), "already enabled: nothing to open");

        // The probe fails: open again at once, at the probe's finish.
        store.claim_slots(&[claim(&a, 600)]).await.expect("claim");
        let steps = store.finish_runs(&[finished(&a, 600, false)], BREAKER_MAX).await.expect("finish");
        let reopened =
            BreakerStep { consecutive_failures: 4, tripped: true, opened: false, closed: false, counted: true };
        assert_eq!(steps, vec![reopened], "a failed probe trips again without opening anew");
        let state = store.load_heartbeats().await.expect("load")[0].state.clone();
        assert_eq!((state.enabled, state.breaker_opened_at), (false, Some(at(601))));

        // The next probe succeeds: closed, and nothing of the trip is left.
        assert!(store.half_open_breaker(&a).await.expect("half-open"));
        store.claim_slots(&[claim(&a, 900)]).await.expect("claim");
        let steps = store.finish_runs(&[finished(&a, 900, true)], BREAKER_MAX).await.expect("finish");
        assert_eq!(steps, vec![BreakerStep { closed: true, counted: true, ..BreakerStep::unchanged(0) }]);
        let state = store.load_heartbeats().await.expect("load")[0].state.clone();
        assert_eq!((state.enabled, state.consecutive_failures, state.breaker_opened_at), (true, 0, None));

        // A user's disable is not the breaker's to lift, nor is a heartbeat that is gone.
        assert!(store.set_enabled(&b, false, Some("user")).await.expect("disable"));
        assert!(!store.half_open_breaker(&b).await.expect("user-disabled"));
        assert!(!store.load_heartbeats().await.expect("load")[1].state.enabled);
        assert!(!store.half_open_breaker(&key("main", "nope")).await.expect("missing"));
    })
    .await;
}

#[tokio::test]
async fn batches_larger_than_one_statement_are_split() {
    with_each_store(|store| async move {
        let defs: Vec<_> = (0..5).map(|i| def("main", &format!("h{i}"), 60)).collect();
        store.seed_config(&defs, at(0)).await.expect("seed");
        let claims: Vec<_> = (0..2_500).map(|i| claim(&defs[i % 5].key, 60 * (i as i64 / 5 + 1))).collect();
        let outcomes = store.claim_slots(&claims).await.expect("claim");
        assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Claimed));
        let runs: Vec<_> =
            claims.iter().map(|c| finished(&c.key, c.slot.duration_since(start()).as_secs(), true)).collect();
        store.finish_runs(&runs, BREAKER_MAX).await.expect("finish");
        let latest = store.executions(&defs[0].key, 1_000).await.expect("read");
        assert_eq!(latest.len(), 500);
        assert!(latest.iter().all(|e| e.status == ExecutionStatus::Succeeded));
        assert_eq!(store.executions(&defs[0].key, 3).await.expect("read").len(), 3, "limit applies");
    })
    .await;
}

#[tokio::test]
async fn a_re_enable_during_a_run_is_not_undone_by_that_run() {
    with_each_store(|store| async move {
        let a = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        fail_times(store.as_ref(), &a, 60, 2).await;
        // A run is claimed with two failures behind it; the user clears the breaker meanwhile.
        store.claim_slots(&[claim(&a, 180)]).await.expect("claim");
        assert!(store.set_enabled(&a, true, None).await.expect("enable"));
        let steps = store.finish_runs(&[finished(&a, 180, false)], BREAKER_MAX).await.expect("finish");
        assert_eq!(steps, vec![BreakerStep { counted: true, ..BreakerStep::unchanged(1) }]);
        assert!(store.load_heartbeats().await.expect("load")[0].state.enabled);
    })
    .await;
}

#[tokio::test]
async fn breaker_steps_chain_within_one_batch() {
    with_each_store(|store| async move {
        let a = key("main", "a");
        store.seed_config(&[def("main", "a", 60)], at(0)).await.expect("seed");
        store.claim_slots(&[claim(&a, 60), claim(&a, 120), claim(&a, 180)]).await.expect("claim");
        let runs = [finished(&a, 60, false), finished(&a, 120, false), finished(&a, 180, false)];
        let steps = store.finish_runs(&runs, BREAKER_MAX).await.expect("finish");
        assert_eq!(
            steps.iter().map(|s| (s.consecutive_failures, s.tripped)).collect::<Vec<_>>(),
            vec![(1, false), (2, false), (3, true)]
        );
        let state = store.load_heartbeats().await.expect("load")[0].state.clone();
        assert_eq!((state.enabled, state.consecutive_failures), (false, 3));
    })
    .await;
}

/// The breaker's counts are read for a whole batch at once, a statement per chunk of
/// heartbeats: each heartbeat of a batch wider than a chunk still steps from its own count,
/// one deleted while it ran counts nothing, and one the breaker holds open stays open.
#[tokio::test]
async fn breaker_counts_are_read_for_every_heartbeat_of_a_batch_wider_than_a_statement() {
    with_each_store(|store| async move {
        let defs: Vec<_> =
            (0..1_200).map(|i| def(if i % 2 == 0 { "a" } else { "b" }, &format!("h{i:04}"), 60)).collect();
        store.seed_config(&defs, at(0)).await.expect("seed");
        // Failures behind each before the batch: none, one or two (by its number modulo
        // three); h0008 then trips.
        for round in 0..2 {
            let behind: Vec<_> = defs.iter().enumerate().filter(|(i, _)| i % 3 > round).map(|(_, d)| &d.key).collect();
            let slot = 60 * (round as i64 + 1);
            store.claim_slots(&behind.iter().map(|k| claim(k, slot)).collect::<Vec<_>>()).await.expect("claim");
            let runs: Vec<_> = behind.iter().map(|k| finished(k, slot, false)).collect();
            store.finish_runs(&runs, BREAKER_MAX).await.expect("finish");
        }
        assert!(fail_times(store.as_ref(), &defs[8].key, 600, 1).await[0].tripped, "h0008 had two failures");
        let gone = &defs[10].key;
        let claims: Vec<_> = defs.iter().map(|d| claim(&d.key, 1_200)).collect();
        store.claim_slots(&claims).await.expect("claim");
        assert!(store.delete_heartbeat(gone).await.expect("delete"));
        // One failing run each, the whole batch at once: the stored order is not the batch's.
        let runs: Vec<_> = defs.iter().rev().map(|d| finished(&d.key, 1_200, false)).collect();
        let steps = store.finish_runs(&runs, BREAKER_MAX).await.expect("finish");
        for (run, step) in runs.iter().zip(&steps) {
            let index: usize = run.key.heartbeat.as_str()[1..].parse().expect("numbered");
            let expected = match index {
                10 => BreakerStep::unchanged(0),
                8 => BreakerStep::unchanged(3),
                _ if index % 3 == 2 => {
                    BreakerStep { counted: true, tripped: true, opened: true, ..BreakerStep::unchanged(3) }
                }
                _ => BreakerStep { counted: true, ..BreakerStep::unchanged(index as u32 % 3 + 1) },
            };
            assert_eq!(*step, expected, "{}", run.key);
        }
        let stored = store.load_heartbeats().await.expect("load");
        assert_eq!(stored.len(), 1_199);
        let disabled = stored.iter().filter(|h| !h.state.enabled).count();
        assert_eq!(disabled, 400, "those at three failures, h0008 among them");
    })
    .await;
}
#[tokio::test]
async fn pauses_are_stored_replaced_and_cleared_per_agent() {
    with_each_store(|store| async move {
        let (a, b) = (key("a", "x").agent, key("b", "x").agent);
        let pause = |minutes: u32| PauseRecord { until: at(60 * i64::from(minutes)), minutes, set_at: at(0) };
        store.set_pause(&a, &pause(5)).await.expect("pause");
        store.set_pause(&b, &pause(7)).await.expect("pause");
        store.set_pause(&a, &pause(9)).await.expect("pause again");
        assert_eq!(store.load_pauses().await.expect("load"), vec![(a.clone(), pause(9)), (b.clone(), pause(7))]);
        store.clear_pause(&a).await.expect("clear");
        assert_eq!(store.load_pauses().await.expect("load"), vec![(b.clone(), pause(7))]);
        // An ended pause clears only itself: b's stored one ends later, and stays.
        store.end_pause(&b, pause(5).until).await.expect("end another");
        assert_eq!(store.load_pauses().await.expect("load"), vec![(b.clone(), pause(7))]);
        store.end_pause(&b, pause(7).until).await.expect("end it");
        assert_eq!(store.load_pauses().await.expect("load"), vec![]);
    })
    .await;
}

/// A seed of many heartbeats leaves an empty WAL: left full (500 MB after a million),
/// every start-up until the next write rebuilt the WAL's index from the whole file and read
/// each page through it, and that write copied it all into the database again. A small
/// seed leaves its pages to SQLite's own checkpoints.
#[tokio::test]
async fn sqlite_a_large_seed_leaves_an_empty_wal() {
    use systole::store::sqlite::SQLITE_SEED_ROWS_CHECKPOINT_MIN;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("seeded.db");
    let store = SqliteStore::open(&path).await.expect("open sqlite");
    let wal_bytes = || std::fs::metadata(dir.path().join("seeded.db-wal")).map_or(0, |wal| wal.len());
    let defs = |count: usize| -> Vec<HeartbeatDef> {
        (0..count).map(|index| def(&format!("agent-{}", index % 10), &format!("h{index:06}"), 60)).collect()
    };
    // The file's first write, before its WAL (ADR 0061).
    store.seed_config(&defs(10), at(0)).await.expect("a first seed");
    assert_eq!(wal_bytes(), 0, "a new file's first seed is written before its WAL");
    store.seed_config(&defs(20), at(0)).await.expect("a small seed");
    assert!(wal_bytes() > 0, "a small seed's pages wait in the WAL");
    let report = store.seed_config(&defs(SQLITE_SEED_ROWS_CHECKPOINT_MIN + 20), at(0)).await.expect("a large seed");
    assert_eq!(report.inserted.len(), SQLITE_SEED_ROWS_CHECKPOINT_MIN);
    assert_eq!(wal_bytes(), 0, "the large seed's pages are in the database, the WAL empty");
    let reopened = SqliteStore::open(&path).await.expect("open again");
    assert_eq!(reopened.load_heartbeats().await.expect("load").len(), SQLITE_SEED_ROWS_CHECKPOINT_MIN + 20);
}

/// The journal mode another connection finds the file at `path` in.
async fn journal_mode_of(path: &std::path::Path) -> String {
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect_with(&options).await.expect("a reader");
    sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut connection).await.expect("its journal mode")
}

/// A new file is written in its rollback journal until its first write, in WAL from then
/// on (ADR 0061): a first seed writes each page once and puts the file in WAL after it;
/// a first write of any other kind puts it there before; a file in WAL stays there. What
/// was written reads the same either way, through connections opened before the switch.
#[tokio::test]
async fn sqlite_a_new_file_is_in_wal_from_its_first_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let wal_bytes = |name: &str| std::fs::metadata(dir.path().join(format!("{name}-wal"))).map_or(0, |wal| wal.len());

    let seeded = dir.path().join("seeded.db");
    let store = SqliteStore::open(&seeded).await.expect("open sqlite");
    assert_eq!(journal_mode_of(&seeded).await, "delete", "nothing written yet");
    // Read before the switch: the store's readers open now.
    assert!(store.load_heartbeats().await.expect("load").is_empty());
    let defs = vec![def("a", "h1", 60), def("a", "h2", 60)];
    store.seed_config(&defs, at(0)).await.expect("a first seed");
    assert_eq!(journal_mode_of(&seeded).await, "wal", "in WAL after the first seed");
    assert_eq!(wal_bytes("seeded.db"), 0, "the seed's pages went to the database, not the WAL");
    store.put_heartbeat(&def("b", "h3", 60), at(0)).await.expect("a write after it");
    assert!(wal_bytes("seeded.db") > 0, "later writes go to the WAL");
    let keys: Vec<String> =
        store.load_heartbeats().await.expect("load").iter().map(|hb| hb.def.key.to_string()).collect();
    assert_eq!(keys, ["a/h1", "a/h2", "b/h3"]);

    let written = dir.path().join("written.db");
    let store = SqliteStore::open(&written).await.expect("open sqlite");
    store.put_heartbeat(&def("a", "h1", 60), at(0)).await.expect("a first write");
    assert_eq!(journal_mode_of(&written).await, "wal", "in WAL before a first write of any kind");
    assert!(wal_bytes("written.db") > 0, "that write went to the WAL");
    drop(store);
    let reopened = SqliteStore::open(&written).await.expect("open again");
    assert_eq!(journal_mode_of(&written).await, "wal", "a file in WAL stays there");
    assert_eq!(reopened.load_heartbeats().await.expect("load").len(), 1);
}

/// A new file's first write puts it in WAL (ADR 0061). Two stores that open one new file
/// (a daemon's and a CLI's) each switch at their first write, and when both ask at once
/// SQLite refuses one of them at once, calling no busy handler: each holds its read lock as
/// it asks for the exclusive one. The store asks again, as a write waits for the lock; before,
/// one of the two writes failed ("database is locked"), in 3 of 30 runs of the concurrent
/// writers below.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_stores_first_writes_on_a_new_file_both_land() {
    const FILES: usize = 30;
    for file in 0..FILES {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("new.db");
        let first = SqliteStore::open(&path).await.expect("open sqlite");
        let second = SqliteStore::open(&path).await.expect("open sqlite again");
        let (a, b) = (def("main", "a", 60), def("main", "b", 60));
        let (one, other) = tokio::join!(first.put_heartbeat(&a, at(0)), second.put_heartbeat(&b, at(0)));
        one.unwrap_or_else(|error| panic!("file {file}: the first store's write: {error}"));
        other.unwrap_or_else(|error| panic!("file {file}: the second store's write: {error}"));
        assert_eq!(journal_mode_of(&path).await, "wal");
        assert_eq!(first.load_heartbeats().await.expect("load").len(), 2);
    }
}

/// Writers of every kind at once, from two pools on one file (as the daemon and a CLI, or
/// the driver's concurrent runs, would): none may fail with "database is locked" at once.
/// A deferred transaction that reads and then writes cannot upgrade in WAL mode once
/// another writer committed, and fails without waiting; every writing transaction must
/// start as a writer. A write refused only after SQLite's whole busy timeout is a disk too
/// slow for this load (seen with a continuous `dd oflag=dsync` beside four copies of this
/// test): it is tried again, as a caller would, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_concurrent_writers_of_every_kind_never_fail_with_locked() {
    const WRITERS: i64 = 8;
    const ROUNDS: i64 = 25;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("concurrent.db");
    let first = std::sync::Arc::new(SqliteStore::open(&path).await.expect("open sqlite"));
    let second = std::sync::Arc::new(SqliteStore::open(&path).await.expect("open sqlite again"));
    let timed_out = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let store = if writer % 2 == 0 { first.clone() } else { second.clone() };
        let timed_out = timed_out.clone();
        tasks.push(tokio::spawn(async move {
            let agent = AgentId::new(format!("agent-{writer}")).expect("id");
            // Put, not seeded: seeding one writer's config would remove the others' jobs.
            let job = def(agent.as_str(), "job", 60);
            let store = &*store;
            let retried = &*timed_out;
            write(retried, || store.put_heartbeat(&job, at(0))).await?;
            for round in 0..ROUNDS {
                let slot = 60 * (2 * round + 1);
                let claims = [claim(&job.key, slot)];
                write(retried, || store.claim_slots(&claims)).await?;
                let text = format!("[CRON:x] {round}");
                write(retried, || store.queue_system_event(&agent, &text, at(slot))).await?;
                let pending = store.pending_system_events(&agent, at(slot)).await?;
                let consumes: Vec<u64> = pending.iter().map(|event| event.id).collect();
                let record = RunRecord { consumes, ..finished(&job.key, slot, round % 3 != 0) };
                write(retried, || store.finish_runs(std::slice::from_ref(&record), 1_000)).await?;
                let skip = SkipRecord {
                    key: job.key.clone(),
                    slot: at(slot + 60),
                    at: at(slot + 60),
                    reason: SkipReason::Overlap,
                    next_slot: every_minute(slot + 120),
                    triggered: false,
                };
                write(retried, || store.record_skips(std::slice::from_ref(&skip))).await?;
                let next = [(job.key.clone(), every_minute(slot + 120))];
                write(retried, || store.set_next_slots(&next)).await?;
                let pause = PauseRecord { until: at(slot + 600), minutes: 10, set_at: at(slot) };
                write(retried, || store.set_pause(&agent, &pause)).await?;
                write(retried, || store.clear_pause(&agent)).await?;
                let mut made = def(agent.as_str(), &format!("made-{round}"), 60);
                made.origin = Origin::Runtime;
                write(retried, || store.put_heartbeat(&made, at(slot))).await?;
                write(retried, || store.set_enabled(&made.key, round % 2 == 0, Some("operator"))).await?;
                write(retried, || store.delete_heartbeat(&made.key)).await?;
            }
            Ok::<_, StoreError>(())
        }));
    }
    for task in tasks {
        task.await.expect("writer task").expect("no write fails while others write");
    }
    let runs = first.executions(&key("agent-0", "job"), 1_000).await.expect("read");
    assert_eq!(runs.len() as i64, 2 * ROUNDS, "every run and skip of one writer is stored");
    let timed_out = timed_out.load(std::sync::atomic::Ordering::Relaxed);
    if timed_out > 0 {
        eprintln!("{timed_out} writes waited out the whole busy timeout and were tried again");
    }
}

/// Runs the write `op`, again (up to `TRIES_MAX` times in all) while it fails with
/// "database is locked" after waiting out SQLite's whole busy timeout (counted in
/// `timed_out`); a refusal sooner is an error.
#[allow(clippy::disallowed_methods)] // how long SQLite waited, on the real clock
async fn write<T, F, Fut>(timed_out: &std::sync::atomic::AtomicUsize, mut op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    const TRIES_MAX: usize = 5;
    let mut tries = 1;
    loop {
        let started = std::time::Instant::now();
        match op().await {
            Err(error)
                if tries < TRIES_MAX
                    && error.to_string().contains("database is locked")
                    && started.elapsed() >= Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS) =>
            {
                timed_out.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tries += 1;
            }
            answer => return answer,
        }
    }
}

#[tokio::test]
async fn a_claim_for_a_heartbeat_the_store_no_longer_has_is_refused() {
    with_each_store(|store| async move {
        let job = def("main", "gone", 60);
        store.put_heartbeat(&job, at(0)).await.expect("put");
        assert!(store.delete_heartbeat(&job.key).await.expect("delete"));
        let outcomes = store.claim_slots(&[claim(&job.key, 60)]).await.expect("claim");
        assert_eq!(outcomes, [ClaimOutcome::Gone]);
        assert!(store.executions(&job.key, 10).await.expect("read").is_empty(), "nothing was claimed");
        // Made again under the same id, it claims as any other.
        store.put_heartbeat(&job, at(100)).await.expect("put again");
        assert_eq!(store.claim_slots(&[claim(&job.key, 120)]).await.expect("claim"), [ClaimOutcome::Claimed]);
    })
    .await;
}

#[tokio::test]
async fn the_run_log_pages_newest_first_before_a_cursor() {
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        let claims: Vec<SlotClaim> = (1..=5).map(|n| claim(&a, 60 * n)).chain([claim(&b, 150)]).collect();
        store.claim_slots(&claims).await.expect("claim");
        let slots = |runs: Vec<systole::ports::store::Execution>| runs.iter().map(|run| run.slot).collect::<Vec<_>>();
        let first = store.executions_page(&a, None, 2).await.expect("page");
        assert_eq!(slots(first), vec![at(300), at(240)]);
        let second = store.executions_page(&a, Some(at(240)), 2).await.expect("page");
        assert_eq!(slots(second), vec![at(180), at(120)], "strictly before the cursor, other heartbeats left out");
        let last = store.executions_page(&a, Some(at(120)), 2).await.expect("page");
        assert_eq!(slots(last), vec![at(60)]);
        assert!(store.executions_page(&a, Some(at(60)), 2).await.expect("page").is_empty());
        assert!(store.executions_page(&a, Some(Timestamp::MIN), 2).await.expect("page").is_empty());
    })
    .await;
}

#[tokio::test]
async fn the_recent_runs_of_the_listed_heartbeats_come_in_one_read_as_one_by_one() {
    with_each_store(|store| async move {
        let (a, b, quiet) = (key("main", "a"), key("ops", "b"), key("main", "quiet"));
        let defs = [def("main", "a", 60), def("ops", "b", 60), def("main", "quiet", 60)];
        store.seed_config(&defs, at(0)).await.expect("seed");
        let claims: Vec<SlotClaim> = (1..=5).map(|n| claim(&a, 60 * n)).chain([claim(&b, 150)]).collect();
        store.claim_slots(&claims).await.expect("claim");
        store.finish_runs(&[finished(&a, 300, false), finished(&b, 150, true)], BREAKER_MAX).await.expect("finish");
        let all = [a.clone(), b.clone(), quiet.clone()];
        let recent = store.recent_executions(&all, 3).await.expect("recent");
        assert_eq!(recent.keys().cloned().collect::<Vec<_>>(), vec![a.clone(), b.clone()], "{quiet} has no run");
        for k in [&a, &b] {
            assert_eq!(recent[k], store.executions(k, 3).await.expect("read"), "{k}: the same runs, newest first");
        }
        assert_eq!(recent[&a].len(), 3);
        let only_b = store.recent_executions(std::slice::from_ref(&b), 3).await.expect("recent");
        assert_eq!(only_b.keys().cloned().collect::<Vec<_>>(), vec![b.clone()], "only the listed heartbeat");
        assert!(store.recent_executions(&all, 0).await.expect("recent").is_empty());
        assert!(store.recent_executions(&[], 3).await.expect("recent").is_empty());
    })
    .await;
}

/// The reads of one agent's jobs, of a page of every job and of each agent's count give
/// what the whole load gives, in key order, a page's last key where the next begins.
#[tokio::test]
async fn an_agent_s_jobs_a_page_of_jobs_and_each_agent_s_count_agree_with_the_whole_load() {
    with_each_store(|store| async move {
        let mut defs: Vec<HeartbeatDef> = Vec::new();
        // Ids that sort differently as texts joined by '/' than as keys, and an agent heartbeat.
        // "-" is the lowest id there is: an agent's range begins at it.
        for (agent, job) in
            [("a", "x"), ("a-b", "y"), ("a", "z-1"), ("ops", "main"), ("ops", "a"), ("z", "q"), ("z", "-")]
        {
            let mut made = def(agent, job, 60);
            if job == "main" {
                made.kind = JobKind::Agent;
            }
            defs.push(made);
        }
        store.seed_config(&defs, at(0)).await.expect("seed");
        let whole = store.load_heartbeats().await.expect("load");
        let keys = |jobs: &[systole::core::heartbeat::Heartbeat]| -> Vec<HeartbeatKey> {
            jobs.iter().map(|job| job.def.key.clone()).collect()
        };
        assert_eq!(whole.len(), 7);
        let of = |agent: &str| AgentId::new(agent).expect("valid");
        let a_jobs = store.heartbeats_of_agent(&of("a"), None, usize::MAX).await.expect("an agent's jobs");
        assert_eq!(keys(&a_jobs), vec![key("a", "x"), key("a", "z-1")], "not those of a-b, which follow its own");
        let z_jobs = store.heartbeats_of_agent(&of("z"), None, usize::MAX).await.expect("an agent's jobs");
        assert_eq!(keys(&z_jobs), vec![key("z", "-"), key("z", "q")], "from the lowest id on");

        let ops = AgentId::new("ops").expect("valid");
        let mine = store.heartbeats_of_agent(&ops, None, usize::MAX).await.expect("an agent's jobs");
        assert_eq!(keys(&mine), vec![key("ops", "a"), key("ops", "main")], "its own, in key order");
        assert_eq!(mine, whole.iter().filter(|job| job.def.key.agent == ops).cloned().collect::<Vec<_>>());
        let first = store.heartbeats_of_agent(&ops, None, 1).await.expect("a page");
        assert_eq!(keys(&first), vec![key("ops", "a")], "a page of one");
        let a = systole::core::ids::HeartbeatId::new("a").expect("valid");
        let next = store.heartbeats_of_agent(&ops, Some(&a), 1).await.expect("a page");
        assert_eq!(keys(&next), vec![key("ops", "main")], "the page after its last id");
        let main = systole::core::ids::HeartbeatId::new("main").expect("valid");
        assert!(store.heartbeats_of_agent(&ops, Some(&main), 1).await.expect("a page").is_empty(), "none after");
        let nobody = AgentId::new("nobody").expect("valid");
        assert!(store.heartbeats_of_agent(&nobody, None, usize::MAX).await.expect("read").is_empty());

        for limit in [1, 2, 4, 6, 7] {
            let (mut walked, mut after) = (Vec::new(), None::<HeartbeatKey>);
            loop {
                let page = store.heartbeats_page(after.as_ref(), limit).await.expect("a page");
                assert!(page.len() <= limit, "at most {limit}");
                walked.extend(page.iter().cloned());
                if page.len() < limit {
                    break;
                }
                after = page.last().map(|job| job.def.key.clone());
            }
            assert_eq!(walked, whole, "pages of {limit} walk every job once, in key order");
        }

        let counts = store.jobs_of_agents(None).await.expect("counts");
        let counted: Vec<(String, usize, bool)> =
            counts.iter().map(|(agent, jobs)| (agent.to_string(), jobs.count, jobs.has_agent_heartbeat)).collect();
        let expected = [("a", 2, false), ("a-b", 1, false), ("ops", 2, true), ("z", 2, false)];
        let expected: Vec<(String, usize, bool)> =
            expected.iter().map(|(agent, count, main)| ((*agent).to_owned(), *count, *main)).collect();
        assert_eq!(counted, expected);
        let one = store.jobs_of_agents(Some(&ops)).await.expect("one agent's count");
        let one: Vec<(String, usize, bool)> =
            one.iter().map(|(agent, jobs)| (agent.to_string(), jobs.count, jobs.has_agent_heartbeat)).collect();
        assert_eq!(one, [("ops".to_owned(), 2, true)], "that agent's alone");
        let a_count = store.jobs_of_agents(Some(&of("a"))).await.expect("one agent's count");
        assert_eq!(a_count.get(&of("a")).map(|jobs| jobs.count), Some(2), "not a-b's besides");
        assert_eq!(a_count.len(), 1);
        assert!(store.jobs_of_agents(Some(&nobody)).await.expect("read").is_empty(), "an agent with no job");
    })
    .await;
}

/// More definitions than one thread of the memory store's first seed builds (it splits
/// a large config among the cores), given out of key order: each is stored as given, in
/// key order, and a second seed of the same config finds each unchanged by its fingerprint.
#[tokio::test]
async fn a_large_first_seed_stores_each_definition_and_a_second_finds_each_unchanged() {
    with_each_store(|store| async move {
        let count: usize = 120_000;
        let mut defs: Vec<HeartbeatDef> =
            (0..count as u64).rev().map(|index| def("main", &format!("h{index:06}"), 60 + index % 7)).collect();
        defs[3].prompt = "the first part's own prompt".into();
        defs[count - 3].prompt = "the last part's own prompt".into();
        let report = store.seed_config(&defs, at(0)).await.expect("seed");
        assert_eq!(report.inserted.len(), count);
        let loaded = store.load_heartbeats().await.expect("load");
        assert_eq!(loaded.len(), count);
        assert!(loaded.windows(2).all(|pair| pair[0].def.key < pair[1].def.key), "stored in key order");
        for (stored, given) in loaded.iter().zip(defs.iter().rev()) {
            assert_eq!(&stored.def, given, "{} is stored as given", given.key);
        }
        defs[count / 2].prompt = "changed".into();
        let again = store.seed_config(&defs, at(10)).await.expect("seed again");
        assert_eq!(again.updated, vec![defs[count / 2].key.clone()], "only the changed definition is updated");
        assert_eq!(again.unchanged.len(), count - 1);
        assert!(again.inserted.is_empty() && again.removed.is_empty());
    })
    .await;
}

#[tokio::test]
async fn many_heartbeats_seed_in_batches_and_their_latest_slots_come_at_once() {
    with_each_store(|store| async move {
        // More than ten multi-row statements' worth, and more than a page of SQLite's load.
        let count = 10_500;
        let mut defs: Vec<HeartbeatDef> = (0..count).map(|index| def("main", &format!("h{index}"), 60)).collect();
        defs[7].prompt = "Ünïcode, \"quotes\", \\ a backslash,\nand a new line ✓ [1, {\"json\": null}]".into();
        defs[14].model = Some("small-model".to_owned());
        defs[21].target = DeliveryTarget::parse("webhook:ops").expect("valid");
        defs[28].schedule = Schedule::cron(CronSchedule::parse("0 9 * * 1-5", "Europe/Berlin").expect("valid"));
        // What only a run reads, unlike the rest: a whole row keeps it, a row for arming may not.
        defs[35].kind = JobKind::Agent;
        defs[35].prompt = "Read HEARTBEAT.md and follow it.".into();
        defs[42].dedup = false;
        defs[42].timeout = Duration::from_secs(7);
        defs[42].tools = JobTools::from_json(r#"{"allow":["search/*"]}"#).expect("valid tools").into();
        let report = store.seed_config(&defs, at(0)).await.expect("seed");
        assert_eq!(report.inserted.len(), count);
        let loaded = store.load_heartbeats().await.expect("load");
        assert_eq!(loaded.len(), count);
        // Stored in the order h0, h1, ..., h10, ...; SQLite pages in that order (rowid).
        assert!(
            loaded.windows(2).all(|pair| pair[0].def.key < pair[1].def.key),
            "the load comes ordered by key, across pages"
        );
        let loaded: BTreeMap<HeartbeatKey, HeartbeatDef> =
            loaded.into_iter().map(|heartbeat| (heartbeat.def.key.clone(), heartbeat.def)).collect();
        for def in &defs {
            assert_eq!(loaded.get(&def.key), Some(def), "{} loads as it was stored", def.key);
        }
        let keys: Vec<HeartbeatKey> = defs.iter().map(|def| def.key.clone()).collect();
        store.claim_slots(&[claim(&keys[0], 60), claim(&keys[0], 120)]).await.expect("claim");
        let skip = SkipRecord {
            key: keys[count - 1].clone(),
            slot: at(300),
            at: at(300),
            reason: SkipReason::QuietHours,
            next_slot: every_minute(360),
            triggered: false,
        };
        store.record_skips(&[skip]).await.expect("skip");
        let latest = store.latest_slots(&keys).await.expect("latest slots");
        assert_eq!(latest.len(), 2, "only heartbeats with a logged slot have one: {latest:?}");
        assert_eq!(latest.get(&keys[0]), Some(&at(120)), "a claim counts, the latest of two");
        assert_eq!(latest.get(&keys[count - 1]), Some(&at(300)), "a skip counts");
        // Loaded to be armed, a heartbeat is what it is but for what only a run reads, which
        // a store may leave out: the prompt (an agent heartbeat's stays, its wakes build on
        // it), dedup, timeout, tools and model.
        let armed_part = |def: &HeartbeatDef| HeartbeatDef {
            prompt: if def.kind == JobKind::Agent { def.prompt.clone() } else { "".into() },
            dedup: false,
            timeout: Duration::ZERO,
            tools: Default::default(),
            model: None,
            ..def.clone()
        };
        let armable = store.load_for_arming().await.expect("load for arming");
        assert_eq!(armable.len(), count);
        for heartbeat in armable {
            let def = &loaded[&heartbeat.def.key];
            assert_eq!(armed_part(&heartbeat.def), armed_part(def), "{} loads to be armed as stored", def.key);
        }
        // A start-up's load, a page at a time (SQLite: two here), gives each heartbeat once
        // with its latest slot, and none for a disabled one, which nothing arms.
        store.set_enabled(&keys[count - 1], false, None).await.expect("disable");
        let mut paged: BTreeMap<HeartbeatKey, Option<Timestamp>> = BTreeMap::new();
        store
            .load_for_arming_in_pages(&mut |page| {
                for armable in page {
                    let again = paged.insert(armable.heartbeat.def.key.clone(), armable.latest_slot);
                    assert!(again.is_none(), "{} comes once", armable.heartbeat.def.key);
                }
            })
            .await
            .expect("load in pages");
        assert_eq!(paged.len(), count, "every heartbeat");
        assert_eq!(paged[&keys[0]], Some(at(120)), "the latest of its claims");
        assert_eq!(paged[&keys[1]], None, "no logged slot");
        assert_eq!(paged[&keys[count - 1]], None, "disabled: its skip's slot does not come");
        // Whole rows, their state too, for stored heartbeats only (a cluster's adoption,
        // ADR 0056).
        let asked_rows = [keys[0].clone(), key("main", "never-stored"), keys[count - 1].clone()];
        let rows = store.heartbeats(&asked_rows).await.expect("heartbeats");
        let enabled: BTreeMap<HeartbeatKey, bool> =
            rows.iter().map(|row| (row.def.key.clone(), row.state.enabled)).collect();
        assert_eq!(enabled, BTreeMap::from([(keys[0].clone(), true), (keys[count - 1].clone(), false)]));
        for row in &rows {
            assert_eq!(Some(&row.def), defs.iter().find(|def| def.key == row.def.key), "{} as stored", row.def.key);
        }
        store.set_enabled(&keys[count - 1], true, None).await.expect("enable");
        // Claimed slots' definitions come in one call per batch (over a batch's size here),
        // whole, for stored heartbeats only.
        let mut asked: Vec<HeartbeatKey> = keys.iter().step_by(7).cloned().collect();
        asked.push(key("main", "never-stored"));
        let definitions = store.definitions(&asked).await.expect("definitions");
        assert_eq!(definitions.len(), asked.len() - 1, "every stored one, not the missing one");
        for def in defs.iter().step_by(7) {
            assert_eq!(
                definitions.get(&def.key).map(|stored| &**stored),
                Some(def),
                "{}'s definition as stored",
                def.key
            );
        }
        // Seeding again with part of the config keeps that part and removes the rest.
        let report = store.seed_config(&defs[..1_000], at(1)).await.expect("seed again");
        assert_eq!((report.unchanged.len(), report.removed.len()), (1_000, count - 1_000));
        assert_eq!(store.load_heartbeats().await.expect("load").len(), 1_000);
    })
    .await;
}

/// The latest logged slot of each enabled heartbeat, as a start-up's paged load gives it.
async fn armed_latest_slots(store: &dyn Store) -> BTreeMap<HeartbeatKey, Option<Timestamp>> {
    let mut latest = BTreeMap::new();
    store
        .load_for_arming_in_pages(&mut |page| {
            latest.extend(page.into_iter().map(|armable| (armable.heartbeat.def.key, armable.latest_slot)));
        })
        .await
        .expect("load in pages");
    latest
}

#[tokio::test]
async fn the_latest_logged_slot_only_rises_and_outlives_a_schedule_change_and_a_deletion() {
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        assert_eq!(armed_latest_slots(&*store).await[&a], None, "nothing logged yet");
        // The schedule changes between the claim's decision and its write: the claim's next
        // slot is not kept, its slot is still logged.
        store.put_heartbeat(&def("main", "a", 90), at(100)).await.expect("a new schedule");
        store.claim_slots(&[claim(&a, 120), claim(&b, 60)]).await.expect("claim");
        // A slot logged below the latest (a backfill's skip) leaves it where it was.
        let skip = SkipRecord {
            key: a.clone(),
            slot: at(60),
            at: at(130),
            reason: SkipReason::QuietHours,
            next_slot: every_minute(180),
            triggered: false,
        };
        store.record_skips(&[skip]).await.expect("skip");
        let latest = armed_latest_slots(&*store).await;
        assert_eq!((latest[&a], latest[&b]), (Some(at(120)), Some(at(60))), "each one's latest");
        // Stored again after a deletion, a heartbeat has its log, and arms above it.
        assert!(store.delete_heartbeat(&a).await.expect("delete"));
        store.put_heartbeat(&def("main", "a", 60), at(200)).await.expect("stored again");
        // A seed that rewrites b's row (its schedule changed) keeps what b logged.
        store.seed_config(&[def("main", "a", 60), def("main", "b", 30)], at(200)).await.expect("seed again");
        let latest = armed_latest_slots(&*store).await;
        assert_eq!((latest[&a], latest[&b]), (Some(at(120)), Some(at(60))), "the log's latest, kept");
        let read = store.latest_slots(&[a.clone(), b.clone()]).await.expect("latest slots");
        assert_eq!((read.get(&a), read.get(&b)), (Some(&at(120)), Some(&at(60))), "the same, read by key");
        // Deleted, then seeded again: the seed's new row starts from the log as well.
        assert!(store.delete_heartbeat(&b).await.expect("delete"));
        let report =
            store.seed_config(&[def("main", "a", 60), def("main", "b", 30)], at(300)).await.expect("seeded again");
        assert_eq!(report.inserted, vec![b.clone()]);
        assert_eq!(armed_latest_slots(&*store).await[&b], Some(at(60)), "b's log, found by the seed");
    })
    .await;
}

/// An operator's trigger is a run or skip beside the schedule, not a slot of it: the floor
/// a heartbeat arms above leaves it out, read from the row, from the log by key, or for a
/// row stored again; its skip row is marked like its run's; and pruning keeps the newest
/// row that is not a trigger, so the floor stays what it was (ADR 0049).
#[tokio::test]
async fn an_operators_trigger_lifts_no_floor_and_pruning_keeps_the_floor_below_it() {
    use systole::core::retention::RunRetention;
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        let day = 24 * 3_600;
        let trigger = |k: &HeartbeatKey, slot: i64| SlotClaim { triggered: true, ..claim(k, slot) };
        store.claim_slots(&[claim(&a, -10 * day), trigger(&a, -9 * day), trigger(&b, -9 * day)]).await.expect("claim");
        let skipped_trigger = SkipRecord {
            key: a.clone(),
            slot: at(-8 * day),
            at: at(-8 * day),
            reason: SkipReason::Overlap,
            next_slot: every_minute(-8 * day + 60),
            triggered: true,
        };
        store.record_skips(&[skipped_trigger]).await.expect("skip");
        let finished_all = [finished(&a, -10 * day, true), finished(&a, -9 * day, false), finished(&b, -9 * day, true)];
        store.finish_runs(&finished_all, BREAKER_MAX).await.expect("finish");
        let marks: Vec<(Timestamp, bool)> =
            store.executions(&a, 10).await.expect("log").iter().map(|row| (row.slot, row.triggered)).collect();
        assert_eq!(marks, vec![(at(-8 * day), true), (at(-9 * day), true), (at(-10 * day), false)], "marked");
        let floor = |latest: BTreeMap<HeartbeatKey, Option<Timestamp>>| (latest[&a], latest[&b]);
        assert_eq!(floor(armed_latest_slots(&*store).await), (Some(at(-10 * day)), None), "armed above");
        let read = store.latest_slots(&[a.clone(), b.clone()]).await.expect("latest slots");
        assert_eq!((read.get(&a), read.get(&b)), (Some(&at(-10 * day)), None), "read by key");
        // Aged out, all but the newest row and the floor.
        let deleted =
            store.prune_runs(at(0), RunRetention { kept_days: 2, kept_per_heartbeat: 1 }).await.expect("prune");
        assert_eq!(deleted, 1, "the trigger's run between them");
        // Deleted and stored again, each finds its floor in the log.
        for k in [&a, &b] {
            assert!(store.delete_heartbeat(k).await.expect("delete"));
            store.put_heartbeat(&def("main", k.heartbeat.as_str(), 60), at(100)).await.expect("stored again");
        }
        assert_eq!(floor(armed_latest_slots(&*store).await), (Some(at(-10 * day)), None), "from the log");
    })
    .await;
}

#[tokio::test]
async fn pruning_keeps_the_newest_running_and_recent_runs_and_drops_the_rest() {
    use systole::core::retention::RunRetention;
    with_each_store(|store| async move {
        let (a, b) = (key("main", "a"), key("main", "b"));
        store.seed_config(&[def("main", "a", 60), def("main", "b", 60)], at(0)).await.expect("seed");
        let hour = 3_600;
        let run = |k: &HeartbeatKey, slot: i64, succeeded: bool| {
            let (store, k) = (&store, k.clone());
            async move {
                store.claim_slots(&[claim(&k, slot)]).await.expect("claim");
                store.finish_runs(&[finished(&k, slot, succeeded)], BREAKER_MAX).await.expect("finish");
            }
        };
        let skip = |slot: i64| SkipRecord {
            key: a.clone(),
            slot: at(slot),
            at: at(slot),
            reason: SkipReason::QuietHours,
            next_slot: every_minute(slot + 60),
            triggered: false,
        };
        store.claim_slots(&[claim(&a, -5 * 24 * hour)]).await.expect("a run that never finished");
        store.record_skips(&[skip(-3 * 24 * hour), skip(-3 * hour), skip(-2 * hour)]).await.expect("skips");
        run(&a, -50 * hour, false).await; // past the protection and beyond the count: goes
        run(&a, -4 * hour, true).await; // beyond the count but dedup and the budget read it: stays
        run(&a, -hour, true).await; // the newest: stays
        run(&b, -10 * 24 * hour, true).await; // old, but b's newest: stays
        let retention = RunRetention { kept_days: 2, kept_per_heartbeat: 2 };
        let deleted = store.prune_runs(at(0), retention).await.expect("prune");
        let slots = |executions: Vec<systole::ports::store::Execution>| -> Vec<Timestamp> {
            executions.into_iter().map(|execution| execution.slot).collect()
        };
        let kept_a = slots(store.executions(&a, 100).await.expect("log"));
        let expected = vec![at(-hour), at(-2 * hour), at(-4 * hour), at(-5 * 24 * hour)];
        assert_eq!(kept_a, expected, "newest, within the count, protected run, running");
        assert_eq!(slots(store.executions(&b, 100).await.expect("log")), vec![at(-10 * 24 * hour)]);
        assert_eq!(deleted, 3, "the old skip by age, the skip beyond the count, the unprotected run");
        assert_eq!(store.prune_runs(at(0), retention).await.expect("prune again"), 0, "nothing more goes");
        let latest = store.latest_slots(std::slice::from_ref(&a)).await.expect("latest");
        assert_eq!(latest.get(&a), Some(&at(-hour)), "pruning never lowers a heartbeat's latest slot");
    })
    .await;
}

#[tokio::test]
async fn the_day_s_spending_leaves_out_the_runs_named_in_flight_and_reads_back_per_job() {
    with_each_store(|store| async move {
        let (one, two, other) = (key("a", "one"), key("a", "two"), key("b", "other"));
        let defs = [def("a", "one", 60), def("a", "two", 60), def("b", "other", 60)];
        store.seed_config(&defs, start()).await.expect("seed");
        store.claim_slots(&[claim(&one, 0), claim(&two, 0), claim(&other, 0)]).await.expect("claim");
        let usage = |input, output, cost_micros| RunUsage {
            tokens: TokenUsage { input, cached: input / 2, output, reasoning: output / 4 },
            cost_micros,
            unpriced_calls: 1,
        };
        let runs = [
            RunRecord { llm_calls: 3, usage: usage(1_000, 200, 4_500), ..finished(&one, 0, true) },
            // A failed run spent too: it counts like any other.
            RunRecord { llm_calls: 4, usage: usage(2_000, 40, 9_000), ..finished(&two, 0, false) },
            // Another agent's run: only the global count (no agent named) has it.
            RunRecord { llm_calls: 1, usage: usage(500, 10, 1_000), ..finished(&other, 0, true) },
        ];
        store.finish_runs(&runs, BREAKER_MAX).await.expect("finish");
        let agent = AgentId::new("a").expect("valid");
        let all = DaySpend { calls: 7, tokens: 3_240, cost_micros: 13_500 };
        assert_eq!(store.spent_since(Some(&agent), start(), &[]).await.expect("count"), all);
        let in_flight = [(two.clone(), at(0))];
        let without_two = DaySpend { calls: 3, tokens: 1_200, cost_micros: 4_500 };
        assert_eq!(store.spent_since(Some(&agent), start(), &in_flight).await.expect("count"), without_two);
        // A run named but not recorded changes nothing.
        let unknown = [(one.clone(), at(60))];
        assert_eq!(store.spent_since(Some(&agent), start(), &unknown).await.expect("count"), all);
        let everyone = DaySpend { calls: 8, tokens: 3_750, cost_micros: 14_500 };
        assert_eq!(store.spent_since(None, start(), &[]).await.expect("global"), everyone);
        let everyone_but_two = DaySpend { calls: 4, tokens: 1_710, cost_micros: 5_500 };
        assert_eq!(store.spent_since(None, start(), &in_flight).await.expect("global"), everyone_but_two);
        assert_eq!(store.spent_since(None, at(2), &[]).await.expect("global later"), DaySpend::default());
        // Several agents' days in one call, each as its own `spent_since` with its own runs
        // of the named ones: an agent without runs, a later day, and a day asked twice
        // (counted once each).
        let b = AgentId::new("b").expect("valid");
        let idle = AgentId::new("idle").expect("valid");
        let days = [
            (agent.clone(), start()),
            (b.clone(), start()),
            (idle, start()),
            (agent.clone(), at(2)),
            (agent.clone(), start()),
        ];
        let answers = store.spent_since_each(&days, &in_flight).await;
        let answers: Vec<DaySpend> = answers.into_iter().map(|answer| answer.expect("each day")).collect();
        let b_day = DaySpend { calls: 1, tokens: 510, cost_micros: 1_000 };
        assert_eq!(answers, [without_two, b_day, DaySpend::default(), DaySpend::default(), without_two]);
        let by_job = store.spent_by_job(Some(&agent), start()).await.expect("by job");
        assert_eq!(by_job.get(&one), Some(&without_two));
        assert_eq!(by_job.get(&two), Some(&DaySpend { calls: 4, tokens: 2_040, cost_micros: 9_000 }));
        assert!(by_job.keys().all(|key| key.agent == agent), "only the agent asked: {by_job:?}");
        // Every agent's jobs at once: the agent's as above, and the others' beside them.
        let every_job = store.spent_by_job(None, start()).await.expect("every job");
        assert_eq!(every_job.get(&one), Some(&without_two));
        assert_eq!(every_job.get(&other), Some(&DaySpend { calls: 1, tokens: 510, cost_micros: 1_000 }));
        assert_eq!(every_job.len(), 3, "{every_job:?}");
        assert!(store.spent_by_job(None, at(2)).await.expect("later").is_empty());
        // The run log keeps every kind of token.
        let logged = store.executions(&one, 1).await.expect("log");
        assert_eq!(logged[0].usage, usage(1_000, 200, 4_500));
        assert_eq!(logged[0].llm_calls, 3);
        assert_eq!(store.spent_since(Some(&agent), at(2), &[]).await.expect("later"), DaySpend::default());
    })
    .await;
}

#[tokio::test]
async fn a_provider_s_refusal_opens_the_breaker_on_the_first_failure() {
    with_each_store(|store| async move {
        let k = key("a", "refused");
        store.seed_config(&[def("a", "refused", 60)], start()).await.expect("seed");
        store.claim_slots(&[claim(&k, 0)]).await.expect("claim");
        let refused = RunRecord { provider_refused: true, ..finished(&k, 0, false) };
        let steps = store.finish_runs(&[refused], BREAKER_MAX).await.expect("finish");
        assert!(steps[0].tripped && steps[0].opened, "{:?}", steps[0]);
        assert_eq!(steps[0].consecutive_failures, BREAKER_MAX);
        let stored = store.load_heartbeats().await.expect("load");
        assert!(!stored[0].state.enabled);
        assert_eq!(stored[0].state.disabled_reason.as_deref(), Some(DISABLED_BY_BREAKER));
        // An ordinary failure counts one.
        let other = key("a", "ordinary");
        store.seed_config(&[def("a", "refused", 60), def("a", "ordinary", 60)], start()).await.expect("seed");
        store.claim_slots(&[claim(&other, 0)]).await.expect("claim");
        let steps = store.finish_runs(&[finished(&other, 0, false)], BREAKER_MAX).await.expect("finish");
        assert!(!steps[0].tripped);
        assert_eq!(steps[0].consecutive_failures, 1);
    })
    .await;
}

#[tokio::test]
async fn a_run_finishing_with_the_breaker_open_does_not_move_it() {
    with_each_store(|store| async move {
        let k = key("a", "side-by-side");
        store.seed_config(&[def("a", "side-by-side", 60)], start()).await.expect("seed");
        // Two runs side by side (allow_all); the first failure trips the breaker.
        fail_times(&*store, &k, 0, 2).await;
        store.claim_slots(&[claim(&k, 120), claim(&k, 180)]).await.expect("claim");
        let tripped = store.finish_runs(&[finished(&k, 120, false)], BREAKER_MAX).await.expect("finish");
        assert!(tripped[0].tripped && tripped[0].counted);
        // The run beside it succeeds after the trip: the breaker stays open at 3.
        let late = store.finish_runs(&[finished(&k, 180, true)], BREAKER_MAX).await.expect("finish");
        assert_eq!(late, vec![BreakerStep::unchanged(3)]);
        let stored = store.load_heartbeats().await.expect("load").into_iter().find(|h| h.def.key == k).expect("stored");
        assert!(!stored.state.enabled);
        assert_eq!(stored.state.disabled_reason.as_deref(), Some(DISABLED_BY_BREAKER));
        assert_eq!(stored.state.consecutive_failures, 3);
        assert!(stored.state.breaker_opened_at.is_some(), "the cooldown still counts from the trip");
        // Within one batch too: a success after the trip in the same write does not close it.
        let k2 = key("a", "one-batch");
        store.put_heartbeat(&def("a", "one-batch", 60), start()).await.expect("put");
        fail_times(&*store, &k2, 0, 2).await;
        store.claim_slots(&[claim(&k2, 120), claim(&k2, 180)]).await.expect("claim");
        let steps = store
            .finish_runs(&[finished(&k2, 120, false), finished(&k2, 180, true)], BREAKER_MAX)
            .await
            .expect("finish");
        assert!(steps[0].tripped);
        assert_eq!(steps[1], BreakerStep::unchanged(3));
        assert_eq!(store.consecutive_failures(&k2).await.expect("count"), Some(3));
    })
    .await;
}

/// Text PostgreSQL cannot keep (a NUL) is refused by every store alike, naming the field,
/// with nothing of the write stored; every other character a Rust string can hold
/// (controls, the last code points of each plane, right-to-left marks) round-trips.
#[tokio::test]
async fn text_a_store_cannot_keep_is_refused_alike_and_any_other_text_round_trips() {
    with_each_store(|store| async move {
        let odd: String = (1u32..0x20)
            .chain([0x7F, 0x200F, 0xFEFF, 0xFFFD, 0xFFFF, 0x1F600, 0x10FFFF])
            .filter_map(char::from_u32)
            .collect();
        let job = HeartbeatDef { prompt: format!("check {odd}").into(), ..def("main", "odd", 60) };
        let refused = HeartbeatDef { prompt: "before\0after".into(), ..def("main", "nul", 60) };
        let problem = store.seed_config(&[job.clone(), refused.clone()], at(0)).await.expect_err("a NUL prompt");
        assert!(problem.to_string().contains("prompt") && problem.to_string().contains("NUL"), "{problem}");
        assert!(store.load_heartbeats().await.expect("load").is_empty(), "a refused batch stores none of its rows");
        assert!(store.put_heartbeat(&refused, at(0)).await.is_err());
        store.seed_config(std::slice::from_ref(&job), at(0)).await.expect("seed");
        assert_eq!(store.load_heartbeats().await.expect("load")[0].def.prompt, job.prompt, "faithfully stored");

        store.claim_slots(&[claim(&job.key, 60)]).await.expect("claim");
        let nul_run = RunRecord { output_preview: Some("a\0b".to_owned()), ..finished(&job.key, 60, true) };
        let problem = store.finish_runs(&[nul_run], BREAKER_MAX).await.expect_err("a NUL preview");
        assert!(problem.to_string().contains("output_preview"), "{problem}");
        let run =
            RunRecord { output_preview: Some(odd.clone()), error: Some(odd.clone()), ..finished(&job.key, 60, true) };
        store.finish_runs(&[run], BREAKER_MAX).await.expect("finish");
        let logged = &store.executions(&job.key, 1).await.expect("read")[0];
        assert_eq!(logged.status, ExecutionStatus::Succeeded, "the refused result left the claim to this one");
        assert_eq!(
            (logged.output_preview.as_deref(), logged.error.as_deref()),
            (Some(odd.as_str()), Some(odd.as_str()))
        );

        let agent = AgentId::new("main").expect("id");
        let problem = store.queue_system_event(&agent, "x\0", at(1)).await.expect_err("a NUL event");
        assert!(problem.to_string().contains("text"), "{problem}");
        store.queue_system_event(&agent, &odd, at(1)).await.expect("queue");
        let pending = store.pending_system_events(&agent, at(2)).await.expect("read");
        assert_eq!(pending.iter().map(|event| event.text.as_str()).collect::<Vec<_>>(), [odd.as_str()]);
    })
    .await;
}
