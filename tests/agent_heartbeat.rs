//! The agent heartbeat (the `HEARTBEAT.md` one) on virtual time: the file and its empty-file
//! skip, the wake layer (coalescing, priorities, one run at a time), the user lane, the
//! flood guard, and main-mode cron jobs with their persisted system events. Scenario names
//! (H7, L1, ...) are the OpenClaw spec's test matrix.

mod common;

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use common::{agent_def, cron_main_def, start, Behaviour, Rig};
use systole::core::guard::SkipReason;
use systole::core::ids::{AgentId, HeartbeatKey, AGENT_HEARTBEAT_ID};
use systole::core::system_events::CRON_EVENT_PROMPT;
use systole::core::wake::WakeReason;
use systole::driver::events::EngineEvent;
use systole::ports::clock::Clock;
use systole::ports::store::{ExecutionStatus, Store};

fn ops() -> AgentId {
    AgentId::new("ops").expect("valid")
}

fn agent_key() -> HeartbeatKey {
    HeartbeatKey::agent_heartbeat(&ops())
}

/// Milliseconds after the rig's start.
fn at_ms(ms: i64) -> Timestamp {
    start().checked_add(SignedDuration::from_millis(ms)).expect("in range")
}

fn agent_starts(rig: &Rig) -> Vec<Timestamp> {
    rig.starts("ops", AGENT_HEARTBEAT_ID).into_iter().map(|(at, _)| at).collect()
}

fn agent_skips(rig: &Rig) -> Vec<(Timestamp, SkipReason)> {
    let wanted = agent_key();
    rig.events
        .matching(|e| matches!(e, EngineEvent::Skipped { key, .. } if *key == wanted))
        .into_iter()
        .filter_map(|(at, event)| match event {
            EngineEvent::Skipped { reason, .. } => Some((at, reason)),
            _ => None,
        })
        .collect()
}

async fn advance_ms(rig: &Rig, ms: u64) {
    rig.clock.sleep(Duration::from_millis(ms)).await;
}

fn events_prompt(lines: &[&str]) -> String {
    let listed: Vec<String> = lines.iter().map(|line| format!("- {line}")).collect();
    format!("{}\n\n{CRON_EVENT_PROMPT}", listed.join("\n"))
}

#[tokio::test(start_paused = true)]
async fn h7_an_empty_file_skips_without_a_call_and_h8_a_missing_one_lets_the_agent_decide() {
    let rig = Rig::new();
    rig.workspace.set_heartbeat_file(&ops(), Some("# Heartbeat\n- [ ]\n\n## Later\n* \n"));
    let engine = rig.start(&[agent_def("ops", 60)]).await;
    rig.advance(61).await;
    assert!(rig.llm.calls.lock().expect("lock").is_empty(), "an effectively empty file costs no LLM call");
    // A slot is a wake request too: decided 250 ms later, recorded under the slot itself.
    assert_eq!(agent_skips(&rig), [(at_ms(60_250), SkipReason::EmptyHeartbeatFile)]);
    let slot = rig.events.matching(|e| matches!(e, EngineEvent::Skipped { .. }));
    assert!(matches!(slot[..], [(_, EngineEvent::Skipped { slot, .. })] if slot == at_ms(60_000)));
    rig.workspace.set_heartbeat_file(&ops(), None);
    rig.advance(60).await;
    assert_eq!(rig.llm.calls_for("hb"), 1, "a missing file: the prompt alone, the agent decides");
    rig.workspace.set_heartbeat_file(&ops(), Some("- water the plants\n"));
    rig.llm.set("hb\n\nHEARTBEAT.md:\n- water the plants\n", Behaviour::Reply("Plants need water".into()));
    rig.advance(60).await;
    assert_eq!(rig.messenger.texts(), ["Plants need water"], "the file's content is in the prompt");
    let runs = rig.store.executions(&agent_key(), 10).await.expect("read");
    assert_eq!(runs.len(), 3, "every slot is decided and recorded, the skip included");
    assert_eq!(runs[2].skip_reason, Some(SkipReason::EmptyHeartbeatFile));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn requests_within_250_ms_coalesce_and_the_highest_reason_names_the_run() {
    let rig = Rig::new();
    let engine = rig.start(&[agent_def("ops", 3_600)]).await;
    assert!(engine.request_now(&ops(), WakeReason::Retry).await.expect("live"));
    advance_ms(&rig, 100).await;
    assert!(engine.request_now(&ops(), WakeReason::Manual).await.expect("live"));
    advance_ms(&rig, 100).await;
    assert!(engine.request_now(&ops(), WakeReason::Hook).await.expect("live"));
    advance_ms(&rig, 100).await;
    assert_eq!(agent_starts(&rig), [at_ms(250)], "one run, 250 ms after the first request");
    let decided = rig.events.matching(|e| matches!(e, EngineEvent::WakeDecided { .. }));
    assert!(matches!(decided[..], [(_, EngineEvent::WakeDecided { reason: WakeReason::Manual, .. })]));
    // An agent without an agent heartbeat has nothing to wake.
    let stranger = AgentId::new("stranger").expect("valid");
    assert!(!engine.request_now(&stranger, WakeReason::Manual).await.expect("live"));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn one_run_at_a_time_and_the_flood_guard_spaces_runs_whatever_wakes_them() {
    let rig = Rig::new();
    rig.llm.set("hb", Behaviour::Slow(Duration::from_secs(10), "HEARTBEAT_OK".into()));
    let engine = rig.start(&[agent_def("ops", 3_600)]).await;
    // A manual request every 5 s for two minutes.
    for _ in 0..24 {
        engine.request_now(&ops(), WakeReason::Manual).await.expect("live");
        rig.advance(5).await;
    }
    let starts = agent_starts(&rig);
    assert_eq!(starts, [at_ms(250), at_ms(30_250), at_ms(60_250), at_ms(90_250)], "30 s apart, never stacked");
    let flood_skips = agent_skips(&rig).into_iter().filter(|(_, r)| *r == SkipReason::FloodGuard).count();
    assert_eq!(flood_skips, 4, "one recorded skip per wait, not one per request");
    engine.shutdown(Duration::from_secs(20)).await;
}

#[tokio::test(start_paused = true)]
async fn a_busy_user_lane_skips_with_requests_in_flight_and_the_retry_is_not_lost() {
    let rig = Rig::new();
    let engine = Arc::new(rig.start(&[agent_def("ops", 3_600)]).await);
    let turn = engine.begin_user_turn(&ops()).await;
    engine.request_now(&ops(), WakeReason::Cron).await.expect("live");
    advance_ms(&rig, 3_500).await;
    assert!(agent_starts(&rig).is_empty(), "the user goes first");
    assert_eq!(agent_skips(&rig), [(at_ms(250), SkipReason::RequestsInFlight)], "recorded once, then retried");
    drop(turn);
    advance_ms(&rig, 1_000).await;
    assert_eq!(agent_starts(&rig), [at_ms(4_250)], "the 1 s retry after the lane came free");
    let decided = rig.events.matching(|e| matches!(e, EngineEvent::WakeDecided { .. }));
    let last_reason = decided.last().map(|(_, event)| event.clone());
    assert!(
        matches!(last_reason, Some(EngineEvent::WakeDecided { reason: WakeReason::Cron, .. })),
        "a cron wake that found the agent busy is still a cron wake"
    );
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn l5_a_user_turn_that_arrives_during_a_heartbeat_waits_for_it() {
    let rig = Rig::new();
    rig.llm.set("hb", Behaviour::Slow(Duration::from_secs(5), "HEARTBEAT_OK".into()));
    let engine = Arc::new(rig.start(&[agent_def("ops", 3_600)]).await);
    engine.request_now(&ops(), WakeReason::Manual).await.expect("live");
    advance_ms(&rig, 1_000).await;
    let user = tokio::spawn({
        let (engine, clock) = (Arc::clone(&engine), Arc::clone(&rig.clock));
        async move {
            let turn = engine.begin_user_turn(&ops()).await;
            let began = clock.wall();
            drop(turn);
            began
        }
    });
    let began = user.await.expect("user task");
    assert_eq!(began, at_ms(5_250), "asked at 1 s, the turn began when the heartbeat ended at 5.25 s");
    let finished = rig.events.matching(|e| matches!(e, EngineEvent::RunFinished { .. }));
    let turns = rig.events.matching(|e| matches!(e, EngineEvent::UserTurnStarted { .. }));
    assert_eq!((finished.len(), turns.len()), (1, 1));
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn l1_l2_main_mode_jobs_wake_the_heartbeat_which_processes_all_events_once() {
    let rig = Rig::new();
    let defs = [
        agent_def("ops", 3_600),
        cron_main_def("ops", "backup", 60, "check the backup"),
        cron_main_def("ops", "mail", 60, "sum up mail"),
        cron_main_def("ops", "news", 60, "read the news"),
    ];
    let prompt =
        events_prompt(&["[CRON:backup] check the backup", "[CRON:mail] sum up mail", "[CRON:news] read the news"]);
    // No token: a short relay followed by HEARTBEAT_OK is an acknowledgement by the spec's
    // rule (H2) and is not delivered.
    rig.llm.set(&prompt, Behaviour::Reply("Backup fine, 2 mails, no news.".into()));
    let engine = rig.start(&defs).await;
    advance_ms(&rig, 60_300).await;
    assert_eq!(agent_starts(&rig), [at_ms(60_250)], "three jobs, one wake, one run");
    assert_eq!(rig.llm.calls_for(&prompt), 1, "the cron-event prompt lists all three, in order");
    assert_eq!(rig.messenger.texts(), ["Backup fine, 2 mails, no news."], "the report goes to the heartbeat's target");
    assert!(rig.store.pending_system_events(&ops(), rig.clock.wall()).await.expect("read").is_empty(), "consumed");
    let job = rig.store.executions(&common::key("ops", "mail"), 1).await.expect("read");
    assert_eq!(job[0].status, ExecutionStatus::Succeeded);
    assert!(job[0].output_preview.as_deref().is_some_and(|p| p.contains("system event")));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_leaves_the_events_queued_for_the_next_one() {
    let rig = Rig::new();
    let prompt = events_prompt(&["[CRON:report] weekly report"]);
    rig.llm.set(&prompt, Behaviour::Fail);
    let engine = rig.start(&[agent_def("ops", 3_600), cron_main_def("ops", "report", 120, "weekly report")]).await;
    rig.advance(121).await;
    assert_eq!(rig.llm.calls_for(&prompt), 1);
    assert_eq!(rig.store.pending_system_events(&ops(), rig.clock.wall()).await.expect("read").len(), 1);
    // The job fires again: the same text is a consecutive duplicate, not queued twice.
    rig.llm.set(&prompt, Behaviour::Reply("Report sent. HEARTBEAT_OK".into()));
    rig.advance(120).await;
    assert_eq!(rig.llm.calls_for(&prompt), 2, "the next run lists the event once");
    assert!(rig.store.pending_system_events(&ops(), rig.clock.wall()).await.expect("read").is_empty());
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn l3_an_event_not_processed_within_an_hour_expires() {
    let rig = Rig::new();
    let engine = rig.start(&[agent_def("ops", 7_200), cron_main_def("ops", "ping", 7_200, "ping")]).await;
    let turn = engine.begin_user_turn(&ops()).await;
    // The job fires at 2 h; the user keeps the agent busy for 61 minutes after it.
    rig.advance(7_200 + 61 * 60).await;
    drop(turn);
    rig.advance(2).await;
    assert_eq!(rig.llm.calls_for("hb"), 1, "the event expired: the plain heartbeat prompt");
    assert_eq!(rig.llm.calls_for(&events_prompt(&["[CRON:ping] ping"])), 0);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn events_survive_a_crash_and_are_consumed_by_the_first_run_after_it() {
    let rig = Rig::new();
    let prompt = events_prompt(&["[CRON:digest] digest"]);
    rig.llm.set(&prompt, Behaviour::Slow(Duration::from_secs(100), "HEARTBEAT_OK".into()));
    let defs = [agent_def("ops", 3_600), cron_main_def("ops", "digest", 60, "digest")];
    let engine = rig.start(&defs).await;
    rig.advance(61).await;
    assert_eq!(rig.llm.calls_for(&prompt), 1);
    assert_eq!(engine.shutdown(Duration::ZERO).await, 1, "the run is cut off, as by a crash");
    assert_eq!(rig.store.pending_system_events(&ops(), rig.clock.wall()).await.expect("read").len(), 1);
    rig.llm.set(&prompt, Behaviour::Reply("Digest done. HEARTBEAT_OK".into()));
    let engine = rig.start(&defs).await;
    advance_ms(&rig, 300).await;
    assert_eq!(rig.llm.calls_for(&prompt), 2, "start-up wakes the heartbeat for the queued event");
    assert!(rig.store.pending_system_events(&ops(), rig.clock.wall()).await.expect("read").is_empty());
    let runs = rig.store.executions(&agent_key(), 10).await.expect("read");
    let statuses: Vec<ExecutionStatus> = runs.iter().map(|run| run.status).collect();
    assert_eq!(statuses, [ExecutionStatus::Succeeded, ExecutionStatus::Interrupted]);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn h9_h10_active_hours_hold_timed_runs_but_not_a_manual_wake() {
    let rig = Rig::new();
    let window = systole::core::active_hours::ActiveHours::new("08:00", "23:00", "UTC").expect("valid");
    let def = systole::core::heartbeat::HeartbeatDef { active_hours: Some(window), ..agent_def("ops", 3_600) };
    let engine = rig.start(&[def]).await;
    // 13:00 is inside 08:00-23:00 (H9).
    rig.advance(3_601).await;
    assert_eq!(agent_starts(&rig), [at_ms(3_600_250)]);
    // Until 03:00 the next day (15 h after the start): 23:00 ... 03:00 are outside (H10).
    rig.advance(14 * 3_600).await;
    let skips = agent_skips(&rig);
    assert_eq!(skips.len(), 5, "23:00, 00:00, 01:00, 02:00 and 03:00: {skips:?}");
    assert!(skips.iter().all(|(_, reason)| *reason == SkipReason::QuietHours));
    assert_eq!(agent_starts(&rig).len(), 10, "13:00 to 22:00");
    // Somebody asks at 03:00: an explicit wake goes through quiet hours.
    engine.request_now(&ops(), WakeReason::Manual).await.expect("live");
    advance_ms(&rig, 300).await;
    assert_eq!(agent_starts(&rig).len(), 11);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn l6_an_isolated_cron_job_and_the_agent_heartbeat_both_run_when_they_fire_together() {
    let rig = Rig::new();
    rig.llm.set("isolated", Behaviour::Slow(Duration::from_secs(5), "HEARTBEAT_OK".into()));
    let isolated = systole::core::heartbeat::HeartbeatDef {
        kind: systole::core::heartbeat::JobKind::Cron,
        ..common::def("ops", "isolated", 60)
    };
    let engine = rig.start(&[agent_def("ops", 60), isolated]).await;
    rig.advance(61).await;
    assert_eq!(rig.llm.calls_for("isolated"), 1);
    assert_eq!(agent_starts(&rig), [at_ms(60_250)], "the isolated job holds no lane of the agent's");
    engine.shutdown(Duration::from_secs(10)).await;
}

/// After a restart the wake's slot is placed above the agent heartbeat's latest recorded
/// one, read from the run log. While that read fails the wake waits: taken at once, its
/// slot would lie below the run before the restart (the wall clock stepped back an hour),
/// and its slots would not only move forward.
#[tokio::test(start_paused = true)]
async fn a_wake_whose_read_of_the_latest_slot_fails_waits_and_runs_above_it_later() {
    let rig = Rig::new();
    let engine = rig.start(&[agent_def("ops", 3_600)]).await;
    assert!(engine.request_now(&ops(), WakeReason::Manual).await.expect("live"));
    advance_ms(&rig, 300).await;
    let first = rig.starts("ops", AGENT_HEARTBEAT_ID);
    assert_eq!(first.len(), 1, "the run before the restart");
    engine.shutdown(Duration::from_secs(1)).await;

    rig.clock.jump_wall(SignedDuration::from_hours(-1));
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    late.fail_log_reads_after(0);
    let engine = rig.start_on(late.clone(), &[agent_def("ops", 3_600)], common::options()).await;
    assert!(engine.request_now(&ops(), WakeReason::Manual).await.expect("live"));
    advance_ms(&rig, 3_000).await;
    assert_eq!(rig.starts("ops", AGENT_HEARTBEAT_ID), first, "no run while the latest slot is unknown");
    let failed = rig.events.matching(|e| matches!(e, EngineEvent::StoreFailed { operation: "executions", .. }));
    assert!(!failed.is_empty(), "the failed read is reported");

    late.answer_log_reads();
    rig.advance(10).await;
    let starts = rig.starts("ops", AGENT_HEARTBEAT_ID);
    assert_eq!(starts.len(), 2, "the wake ran once the read answered: {starts:?}");
    assert!(starts[1].1 > first[0].1, "its slot {} lies above the earlier run's {}", starts[1].1, first[0].1);
    engine.shutdown(Duration::from_secs(1)).await;
}
