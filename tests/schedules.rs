//! Schedule kinds and policies through the real driver on virtual time: cron and `at`
//! heartbeats, catch-up after downtime, overlap, error backoff and jitter.

mod common;

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use common::{cron_def, def, key, options, Behaviour, Rig};
use systole::core::breaker::DISABLED_BY_BREAKER;
use systole::core::heartbeat::{HeartbeatDef, Origin};
use systole::core::policy::{CatchUp, Overlap, RunPolicy};
use systole::core::retention::RunRetention;
use systole::core::schedule::Schedule;
use systole::driver::events::EngineEvent;
use systole::driver::EngineHandle;
use systole::ports::clock::Clock;
use systole::ports::store::{ExecutionStatus, NextSlot, Store};

fn ts(text: &str) -> Timestamp {
    text.parse().expect("test timestamp")
}

fn slots(starts: &[(Timestamp, Timestamp)]) -> Vec<Timestamp> {
    starts.iter().map(|(_, slot)| *slot).collect()
}

#[tokio::test(start_paused = true)]
async fn a_cron_runs_at_its_calendar_times_and_a_backward_jump_never_repeats_one() {
    // START is Monday 2026-01-05 12:00 UTC = 13:00 in Berlin.
    let rig = Rig::new();
    let engine = rig.start(&[cron_def("main", "quarter", "*/15 * * * *", "Europe/Berlin")]).await;
    rig.advance(31 * 60).await;
    let expected = vec![ts("2026-01-05T12:15:00Z"), ts("2026-01-05T12:30:00Z")];
    assert_eq!(slots(&rig.starts("main", "quarter")), expected);
    for (started, slot) in rig.starts("main", "quarter") {
        assert!(started >= slot && started.duration_since(slot) < SignedDuration::from_secs(1), "on time");
    }
    // The wall clock steps back 40 minutes: 12:31 reads 11:51. Calendar time waits for the
    // wall to pass the last slot; nothing between runs again.
    rig.clock.jump_wall(SignedDuration::from_mins(-40));
    rig.advance(50 * 60).await;
    assert_eq!(rig.starts("main", "quarter").len(), 2, "the wall reads 12:41: not yet 12:45");
    rig.advance(5 * 60).await;
    let all = slots(&rig.starts("main", "quarter"));
    assert_eq!(all[2..], [ts("2026-01-05T12:45:00Z")], "after the jump: {all:?}");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_at_job_runs_once_then_is_deleted_and_a_failed_one_retries_until_the_breaker() {
    let rig = Rig::new();
    let mut done = cron_def("main", "remind", "* * * * *", "UTC");
    done.schedule = Schedule::At(ts("2026-01-05T12:10:00Z"));
    done.delete_after_run = true;
    done.origin = Origin::Runtime;
    let mut failing = done.clone();
    failing.key = key("main", "broken");
    failing.prompt = "broken".into();
    rig.llm.set("broken", Behaviour::Fail);
    let mut from_config = done.clone();
    from_config.key = key("main", "configured");
    from_config.prompt = "configured".into();
    from_config.origin = Origin::Config;
    let engine = rig.start(&[from_config]).await;
    engine.upsert(done).await.expect("create");
    engine.upsert(failing).await.expect("create");
    rig.advance(9 * 60).await;
    assert!(rig.starts("main", "remind").is_empty(), "not before its time");
    rig.advance(2 * 60).await;
    assert_eq!(slots(&rig.starts("main", "remind")), vec![ts("2026-01-05T12:10:00Z")]);
    rig.advance(3_600).await;
    // A failed one-shot follows the error backoff (30 s, then 60 s) under new slots, until
    // the breaker trips at the third failure.
    let retries = vec![ts("2026-01-05T12:10:00Z"), ts("2026-01-05T12:10:30Z"), ts("2026-01-05T12:11:30Z")];
    assert_eq!(slots(&rig.starts("main", "broken")), retries);
    assert_eq!(rig.starts("main", "remind").len(), 1, "once only");
    let stored = rig.store.load_heartbeats().await.expect("load");
    assert!(stored.iter().all(|h| h.def.key != key("main", "remind")), "deleted after its successful run");
    let broken = stored.iter().find(|h| h.def.key == key("main", "broken")).expect("a failed one-shot is kept");
    assert_eq!((broken.state.enabled, broken.state.disabled_reason.as_deref()), (false, Some(DISABLED_BY_BREAKER)));
    assert_eq!(rig.store.executions(&key("main", "remind"), 10).await.expect("read").len(), 1, "its log stays");
    let configured = stored.iter().find(|h| h.def.key == key("main", "configured")).expect("config keeps it");
    assert!(!configured.state.enabled, "a config one-shot is disabled, not deleted: seeding would bring it back");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A new schedule arms from the clock, lifted above the slots the run log holds (ADR
/// 0051). While that read fails its timer is held, and a later read lifts it. Before, the
/// old timer's slot stood in as its floor: after the wall clock stepped back an hour, the
/// new schedule's slots above it ran an hour early, one every two minutes.
#[tokio::test(start_paused = true)]
async fn a_new_schedule_whose_lift_read_fails_is_held_until_a_later_read_lifts_it() {
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    let every_minute = HeartbeatDef { origin: Origin::Runtime, ..def("main", "tick", 60) };
    let engine = rig.start_on(late.clone(), &[], options()).await;
    engine.upsert(every_minute.clone()).await.expect("create");
    rig.advance(150).await;
    let before = slots(&rig.starts("main", "tick"));
    assert_eq!(before.len(), 2, "two slots ran: {before:?}");
    rig.clock.jump_wall(SignedDuration::from_hours(-1));
    late.fail_log_reads_after(0);
    engine.upsert(HeartbeatDef { origin: Origin::Runtime, ..def("main", "tick", 120) }).await.expect("a new schedule");
    rig.advance(600).await;
    assert_eq!(slots(&rig.starts("main", "tick")), before, "nothing runs while the lift is unread");
    let held = rig.events.matching(|e| matches!(e, EngineEvent::StoreFailed { operation: "latest_slots", .. }));
    assert!(!held.is_empty(), "the failed lift is reported");

    late.answer_log_reads();
    rig.advance(3_600).await;
    let after = slots(&rig.starts("main", "tick"));
    assert!(after.len() > before.len(), "the lifted timer runs once the wall clock passes the slots run: {after:?}");
    assert!(after.windows(2).all(|pair| pair[0] < pair[1]), "slots only move forward: {after:?}");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_at_job_that_then_succeeds_retires_and_a_restart_keeps_its_retry() {
    let rig = Rig::new();
    let mut once = cron_def("main", "once", "* * * * *", "UTC");
    once.schedule = Schedule::At(ts("2026-01-05T12:01:00Z"));
    once.delete_after_run = true;
    once.origin = Origin::Runtime;
    rig.llm.set("once", Behaviour::Fail);
    let engine = rig.start(&[]).await;
    engine.upsert(once).await.expect("create");
    rig.advance(61).await;
    assert_eq!(rig.starts("main", "once").len(), 1, "failed once");
    // A restart in the middle of the backoff keeps the retry it had armed.
    engine.shutdown(Duration::from_secs(1)).await;
    rig.llm.set("once", Behaviour::Reply("done".to_owned()));
    let engine = rig.start(&[]).await;
    rig.advance(120).await;
    let runs = slots(&rig.starts("main", "once"));
    assert_eq!(runs.len(), 2, "one retry after the restart: {runs:?}");
    assert!(runs[1] > runs[0]);
    let stored = rig.store.load_heartbeats().await.expect("load");
    assert!(stored.iter().all(|h| h.def.key != key("main", "once")), "its retry succeeded: deleted");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_enable_never_runs_an_at_job_again_after_it_succeeded() {
    let rig = Rig::new();
    let one_shot = |id: &str| {
        let mut def = cron_def("main", id, "* * * * *", "UTC");
        def.schedule = Schedule::At(ts("2026-01-05T12:01:00Z"));
        def.prompt = id.into();
        def
    };
    rig.llm.set("slow", Behaviour::Slow(Duration::from_secs(60), "done".to_owned()));
    rig.llm.set("flaky", Behaviour::Fail);
    let engine = rig.start(&[one_shot("slow"), one_shot("flaky")]).await;
    rig.advance(70).await;
    assert_eq!(rig.starts("main", "slow").len(), 1, "its run is going");
    // An operator enables it, enabled already, while its run goes: that run decides.
    engine.set_enabled(&key("main", "slow"), true).await.expect("enable");
    rig.llm.set("flaky", Behaviour::Reply("done".to_owned()));
    rig.advance(600).await;
    assert_eq!(rig.starts("main", "slow").len(), 1, "it succeeded: no retry");
    assert_eq!(rig.starts("main", "flaky").len(), 2, "failed, then its retry succeeded");
    // A restart forgets how their last runs ended; an enable of each, retired, runs nothing.
    engine.shutdown(Duration::from_secs(1)).await;
    let engine = rig.start(&[one_shot("slow"), one_shot("flaky")]).await;
    for id in ["slow", "flaky"] {
        engine.set_enabled(&key("main", id), true).await.expect("enable");
    }
    rig.advance(3_600).await;
    assert_eq!(rig.starts("main", "slow").len(), 1, "the run log says it succeeded");
    assert_eq!(rig.starts("main", "flaky").len(), 2, "its stored retry slot succeeded: not a retry to come");
    let stored = rig.store.load_heartbeats().await.expect("load");
    assert!(stored.iter().all(|h| !h.state.enabled), "both retired again");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A one-shot whose retry succeeded, then a later retry armed on a guess and its retirement's
/// write lost: enabled in the store, that retry's slot stored, no row of it in the log, and
/// its agent paused across the restart that comes next. A restart takes the stored slot,
/// past the instant, for a retry to come, and the pause skips it.
async fn one_shot_retired_unstored_then_paused(rig: &Rig) -> HeartbeatDef {
    let mut once = cron_def("main", "once", "* * * * *", "UTC");
    once.schedule = Schedule::At(ts("2026-01-05T12:01:00Z"));
    rig.llm.set("once", Behaviour::Fail);
    let engine = rig.start(std::slice::from_ref(&once)).await;
    rig.advance(61).await;
    rig.llm.set("once", Behaviour::Reply("done".to_owned()));
    rig.advance(600).await;
    assert_eq!(rig.starts("main", "once").len(), 2, "failed, then its retry succeeded");
    engine.pause(&once.key.agent, 30).await.expect("pause");
    engine.shutdown(Duration::from_secs(1)).await;
    assert!(rig.store.set_enabled(&once.key, true, None).await.expect("enable in the store"));
    let retry = NextSlot { at: ts("2026-01-05T12:05:00Z"), schedule: once.schedule.clone() };
    rig.store.set_next_slots(&[(once.key.clone(), retry)]).await.expect("its retry's slot");
    once
}

/// Its failed run and its retry's success, nothing after, and retired (disabled: the config
/// made it).
async fn assert_ran_twice_and_retired(rig: &Rig, once: &HeartbeatDef) {
    let runs = rig.starts("main", "once");
    assert_eq!(runs.len(), 2, "the run log says its retry succeeded: nothing runs after it: {runs:?}");
    let stored = rig.store.load_heartbeats().await.expect("load");
    let row = stored.iter().find(|h| h.def.key == once.key).expect("kept: made by the config");
    assert!(!row.state.enabled, "retired");
}

/// The pause's skip arms no other retry: the run log says the one-shot succeeded (seed
/// 1927873154205).
#[tokio::test(start_paused = true)]
async fn a_guards_skip_after_a_restart_never_retries_a_one_shot_whose_retry_succeeded() {
    let rig = Rig::new();
    let once = one_shot_retired_unstored_then_paused(&rig).await;
    let engine = rig.start(std::slice::from_ref(&once)).await;
    rig.advance(7_200).await;
    assert_ran_twice_and_retired(&rig, &once).await;
    engine.shutdown(Duration::from_secs(1)).await;
}

/// Nor when the log cannot be read at the skip: no retry on that guess, and the retirement
/// decides once the log answers.
#[tokio::test(start_paused = true)]
async fn a_guards_skip_with_the_log_unread_never_retries_a_one_shot_whose_retry_succeeded() {
    let rig = Rig::new();
    let once = one_shot_retired_unstored_then_paused(&rig).await;
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    late.fail_log_reads_after(0);
    let engine = rig.start_on(late.clone(), std::slice::from_ref(&once), options()).await;
    rig.advance(600).await;
    late.answer_log_reads();
    rig.advance(7_200).await;
    assert_ran_twice_and_retired(&rig, &once).await;
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A backfill of a one-shot's instant, asked for while its retry ran: the retry succeeds,
/// then the backfill's claim fails and the run log cannot be read to tell how the one-shot
/// ended. A retry armed on that guess ran it again once the log answered; it is left to
/// the retirement instead, which decides once the log says (seed 1927873154205's start).
#[tokio::test(start_paused = true)]
async fn a_failed_claim_with_the_log_unread_never_retries_a_one_shot_that_succeeded() {
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    let mut once = cron_def("main", "once", "* * * * *", "UTC");
    once.schedule = Schedule::At(ts("2026-01-05T12:01:00Z"));
    once.policy.overlap = Overlap::BufferOne;
    rig.llm.set("once", Behaviour::Fail);
    let engine = rig.start_on(late.clone(), std::slice::from_ref(&once), options()).await;
    rig.advance(61).await;
    rig.llm.set("once", Behaviour::Slow(Duration::from_secs(60), "done".to_owned()));
    rig.advance(30).await;
    assert_eq!(rig.starts("main", "once").len(), 2, "failed, then its retry started");
    engine.backfill(&once.key, vec![ts("2026-01-05T12:01:00Z")]).await.expect("backfilled");
    late.fail_claims(1);
    late.fail_log_reads_after(0);
    rig.advance(120).await;
    late.answer_log_reads();
    rig.advance(7_200).await;
    assert_ran_twice_and_retired(&rig, &once).await;
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_at_already_past_when_created_runs_at_once() {
    let rig = Rig::new();
    let engine = rig.start(&[]).await;
    let mut late = cron_def("main", "late", "* * * * *", "UTC");
    late.schedule = Schedule::At(ts("2026-01-05T09:00:00Z"));
    engine.upsert(late).await.expect("create");
    rig.advance(1).await;
    assert_eq!(slots(&rig.starts("main", "late")), vec![ts("2026-01-05T09:00:00Z")]);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn catch_up_after_downtime_follows_each_policy() {
    let rig = Rig::new();
    let with = |id: &str, catch_up| {
        let mut def = def("main", id, 3_600);
        def.policy = RunPolicy { catch_up, catch_up_window: Duration::from_secs(3 * 3_600), ..RunPolicy::default() };
        def
    };
    let defs = [with("skip", CatchUp::Skip), with("once", CatchUp::Once), with("all", CatchUp::All)];
    let engine = rig.start(&defs).await;
    rig.advance(3_601).await; // each ran its 13:00 slot
    engine.shutdown(Duration::from_secs(1)).await;
    // Down from 13:00 to 18:30: the 14:00 to 18:00 slots pass unrun.
    rig.advance(5 * 3_600 + 1_800).await;
    let engine = rig.start(&defs).await;
    rig.advance(10).await;
    let after = |id| slots(&rig.starts("main", id))[1..].to_vec();
    assert_eq!(after("skip"), Vec::<Timestamp>::new(), "skip runs nothing missed");
    assert_eq!(after("once"), vec![ts("2026-01-05T18:00:00Z")], "once runs the latest");
    let window: Vec<Timestamp> =
        ["16:00", "17:00", "18:00"].iter().map(|t| ts(&format!("2026-01-05T{t}:00Z"))).collect();
    assert_eq!(after("all"), window, "all runs each slot of the 3 h window, in order");
    rig.advance(3_600).await;
    assert_eq!(slots(&rig.starts("main", "skip"))[1..], [ts("2026-01-05T19:00:00Z")], "then on schedule");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn overlap_skip_buffer_one_and_allow_all() {
    let rig = Rig::new();
    let with = |id: &str, overlap| {
        let mut def = def("main", id, 10);
        def.policy = RunPolicy { overlap, ..RunPolicy::default() };
        def
    };
    for id in ["skip", "buffer", "allow"] {
        rig.llm.set(id, Behaviour::Slow(Duration::from_secs(25), "done".to_owned()));
    }
    let defs = [with("skip", Overlap::Skip), with("buffer", Overlap::BufferOne), with("allow", Overlap::AllowAll)];
    let engine = rig.start(&defs).await;
    rig.advance(41).await;
    let at = |secs: i64| start().checked_add(SignedDuration::from_secs(secs)).expect("in range");
    // Slots at 10, 20, 30, 40; each run takes 25 s.
    assert_eq!(slots(&rig.starts("main", "skip")), vec![at(10), at(40)], "20 and 30 skipped");
    let buffered = rig.starts("main", "buffer");
    assert_eq!(slots(&buffered), vec![at(10), at(20)], "20 held until 10's run ended; 30 skipped");
    assert_eq!(buffered[1].0, at(35), "the held slot starts when the run before it ends");
    assert_eq!(slots(&rig.starts("main", "allow")), vec![at(10), at(20), at(30), at(40)], "alongside");
    let overlaps = rig.events.matching(|e| {
        matches!(e, EngineEvent::Skipped { key, reason, .. } if key.heartbeat.as_str() == "buffer" && reason.as_str() == "overlap")
    });
    assert_eq!(overlaps.len(), 1, "only the slot beyond the one held");
    engine.shutdown(Duration::from_secs(60)).await;
}

fn start() -> Timestamp {
    common::start()
}

/// Under `allow-all`, two slots of one heartbeat can be claimed in one pass: here an
/// operator's trigger and a backfilled slot, both waiting for the places two slow runs
/// hold. Each run gets the heartbeat's definition; the second used to fail with "it is no
/// longer stored", the definition having gone to the first.
#[tokio::test(start_paused = true)]
async fn two_slots_of_one_heartbeat_claimed_together_both_run() {
    let rig = Rig::new();
    let mut both = def("main", "both", 3_600);
    both.policy = RunPolicy { overlap: Overlap::AllowAll, ..RunPolicy::default() };
    for blocker in ["b1", "b2"] {
        rig.llm.set(blocker, Behaviour::Slow(Duration::from_secs(25), "done".to_owned()));
    }
    let engine = rig
        .start_with(
            &[def("main", "b1", 10), def("main", "b2", 10), both.clone()],
            systole::driver::EngineOptions { runs_in_flight_max: 2, ..options() },
        )
        .await;
    rig.advance(15).await;
    // Both places are taken until 35: the trigger and the backfill wait for them together.
    let past = start().checked_add(SignedDuration::from_secs(1)).expect("in range");
    engine.trigger(&both.key).await.expect("triggered");
    engine.backfill(&both.key, vec![past]).await.expect("backfilled");
    assert!(rig.starts("main", "both").is_empty(), "no place yet");
    rig.advance(30).await;
    let started = rig.starts("main", "both");
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(started[0].0, started[1].0, "claimed in one pass");
    assert_eq!(rig.statuses("main", "both").await, [ExecutionStatus::Succeeded, ExecutionStatus::Succeeded]);
    engine.shutdown(Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_30_s_then_60_s_before_the_breaker_trips() {
    let rig = Rig::new();
    rig.llm.set("flaky", Behaviour::Fail);
    let engine = rig.start_with(&[def("main", "flaky", 10)], options()).await;
    rig.advance(200).await;
    let at = |secs: i64| start().checked_add(SignedDuration::from_secs(secs)).expect("in range");
    // Fails at 10 (no run before 40), fails at 40 (none before 100), fails at 100: tripped.
    assert_eq!(slots(&rig.starts("main", "flaky")), vec![at(10), at(40), at(100)]);
    let backoffs =
        rig.events.matching(|e| matches!(e, EngineEvent::Skipped { reason, .. } if reason.as_str() == "backoff"));
    assert_eq!(backoffs.len(), 2 + 5, "20 and 30, then 50 to 90");
    assert_eq!(rig.statuses("main", "flaky").await.iter().filter(|s| **s == ExecutionStatus::Failed).count(), 3);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn jitter_shifts_when_a_cron_runs_but_not_the_slot_it_stands_for() {
    let rig = Rig::new();
    let mut spread = cron_def("main", "spread", "0 * * * *", "UTC");
    spread.policy.jitter_max = Duration::from_secs(600);
    let offset = systole::core::policy::jitter_offset(&spread.key, spread.policy.jitter_max);
    let engine = rig.start(&[spread]).await;
    rig.advance(3_600 + 600).await;
    let starts = rig.starts("main", "spread");
    assert_eq!(slots(&starts), vec![ts("2026-01-05T13:00:00Z")]);
    let late = starts[0].0.duration_since(starts[0].1).unsigned_abs();
    assert!(late >= offset && late < offset + Duration::from_secs(1), "started {late:?} after, offset {offset:?}");
    assert!(!offset.is_zero(), "this id's offset is not zero, so the test shows something");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// Found by the simulator (seed 823): after a backward wall jump a heartbeat's slots run
/// ahead of the wall; a definition replaced by a process that then died before storing the
/// new next slot was armed from the wall clock at the next start-up, below slots it had run.
#[tokio::test(start_paused = true)]
async fn a_replaced_definition_never_runs_below_slots_already_run_after_a_restart() {
    let rig = Rig::new();
    let minutely = HeartbeatDef { origin: Origin::Runtime, ..def("main", "tick", 60) };
    let engine = rig.start(&[]).await;
    engine.upsert(minutely.clone()).await.expect("create");
    rig.advance(181).await;
    rig.clock.jump_wall(SignedDuration::from_secs(-3_600));
    engine.shutdown(Duration::from_secs(1)).await;
    let ran: Vec<Timestamp> = rig.starts("main", "tick").into_iter().map(|(_, slot)| slot).collect();
    assert_eq!(ran.len(), 3);
    // A tool replaced it (now every 5 min); the process died before it stored the next slot.
    let five_minutes = HeartbeatDef { schedule: Schedule::Every(Duration::from_secs(300)), ..minutely };
    rig.store.put_heartbeat(&five_minutes, rig.clock.wall()).await.expect("put");
    let engine = rig.start(&[]).await;
    rig.advance(3 * 300 + 1).await;
    let slots: Vec<Timestamp> = rig.starts("main", "tick").into_iter().map(|(_, slot)| slot).collect();
    assert!(slots.len() > 3, "it runs again: {slots:?}");
    assert!(slots.windows(2).all(|pair| pair[0] < pair[1]), "slots only move forward: {slots:?}");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A cron made to run more often runs at its new schedule's first slot: the slot the old
/// timer had armed, never decided, is no floor for it (ADR 0051). Before, an hourly cron
/// made one of every five minutes at 12:10 ran first at 13:00.
#[tokio::test(start_paused = true)]
async fn a_cron_made_to_run_more_often_runs_at_its_new_first_slot() {
    // START is 2026-01-05 12:00 UTC.
    let rig = Rig::new();
    let hourly = HeartbeatDef { origin: Origin::Runtime, ..cron_def("main", "tick", "0 * * * *", "UTC") };
    let engine = rig.start(&[]).await;
    engine.upsert(hourly.clone()).await.expect("create");
    rig.advance(10 * 60).await;
    assert!(rig.starts("main", "tick").is_empty(), "armed for 13:00");
    let often = cron_def("main", "tick", "*/5 * * * *", "UTC");
    engine.upsert(HeartbeatDef { origin: Origin::Runtime, ..often }).await.expect("replace");
    rig.advance(11 * 60).await;
    let expected = vec![ts("2026-01-05T12:15:00Z"), ts("2026-01-05T12:20:00Z")];
    assert_eq!(slots(&rig.starts("main", "tick")), expected, "every five minutes from the edit on");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A recurring job replaced by a one-shot whose instant comes before the slot the job's
/// timer had armed runs at that instant, as a start-up would arm it; the armed slot was
/// never decided (seed 1927871251589: it was found out of slots at once).
#[tokio::test(start_paused = true)]
async fn a_job_replaced_by_a_one_shot_before_its_next_slot_runs_at_the_instant() {
    let rig = Rig::new();
    let hourly = HeartbeatDef { origin: Origin::Runtime, ..def("main", "tick", 3_600) };
    let engine = rig.start(&[]).await;
    engine.upsert(hourly.clone()).await.expect("create");
    rig.advance(60).await;
    assert!(rig.starts("main", "tick").is_empty(), "its first slot is an hour away");
    let instant = rig.clock.wall().checked_add(SignedDuration::from_secs(600)).expect("in range");
    let once = HeartbeatDef { schedule: Schedule::At(instant), ..hourly };
    engine.upsert(once).await.expect("replace");
    rig.advance(601).await;
    assert_eq!(slots(&rig.starts("main", "tick")), vec![instant], "it ran at its instant, once");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A one-shot made for the very millisecond an operator's trigger of its job took runs
/// under the next free millisecond: the run log holds one row a slot, and its own claim
/// there would be lost to the trigger's row as if the trigger had decided it (ADR 0052;
/// seeds 1927871804321, 1927871874215).
#[tokio::test(start_paused = true)]
async fn a_one_shot_made_for_a_triggers_millisecond_runs_under_the_next_one() {
    let rig = Rig::new();
    let policy = RunPolicy { overlap: Overlap::AllowAll, ..RunPolicy::default() };
    let hourly = HeartbeatDef { origin: Origin::Runtime, policy, ..def("main", "tick", 3_600) };
    let engine = rig.start(&[]).await;
    engine.upsert(hourly.clone()).await.expect("create");
    rig.advance(60).await;
    let triggered = engine.trigger(&key("main", "tick")).await.expect("a trigger");
    let systole::driver::TriggerOutcome::Queued { slot } = triggered else { panic!("queued: {triggered:?}") };
    // In the same millisecond, the job becomes a one-shot for that instant.
    engine.upsert(HeartbeatDef { schedule: Schedule::At(slot), ..hourly }).await.expect("replace");
    rig.advance(5).await;
    let own = slot.checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slots(&rig.starts("main", "tick")), vec![slot, own], "the trigger's run, then the one-shot's own");
    let rows = rig.store.executions(&key("main", "tick"), 10).await.expect("the run log");
    let marks: Vec<(Timestamp, bool)> = rows.iter().map(|row| (row.slot, row.triggered)).rev().collect();
    assert_eq!(marks, vec![(slot, true), (own, false)], "two rows, the trigger's marked");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// An operator's trigger in the very millisecond of a slot its schedule has just decided
/// (its timer already on the next one) takes the next millisecond: the run log holds one
/// row a slot, and a start-up arms above the schedule's latest row, not a trigger's (seed
/// 1927872738237: the trigger's row took the place of a pause's skip there, and the next
/// process offered the slot again).
#[tokio::test(start_paused = true)]
async fn a_trigger_in_the_millisecond_of_a_decided_slot_takes_the_next_one() {
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "tick", 60)]).await;
    rig.advance(60).await;
    // Within the slot's millisecond, once the engine has taken it.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let decided = slots(&rig.starts("main", "tick"));
    assert_eq!(decided.len(), 1, "its first slot ran: {decided:?}");
    assert_eq!(rig.clock.wall().as_millisecond(), decided[0].as_millisecond(), "asked in that very millisecond");
    let triggered = engine.trigger(&key("main", "tick")).await.expect("a trigger");
    let systole::driver::TriggerOutcome::Queued { slot } = triggered else { panic!("queued: {triggered:?}") };
    let next = decided[0].checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slot, next, "the trigger keeps off the schedule's decided slot");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A runtime job with a jitter of minutes, triggered a minute in and replaced at once by a
/// one-shot for the trigger's very slot: armed at the next millisecond (ADR 0052), its own
/// run `offset` later. The engine, the trigger's slot and that offset.
async fn one_shot_made_for_a_jittered_trigger(rig: &Rig) -> (EngineHandle, Timestamp, Duration) {
    one_shot_made_for_a_jittered_trigger_on(rig, rig.store.clone()).await
}

/// The same on `store` (a wrapper of the rig's own).
async fn one_shot_made_for_a_jittered_trigger_on(
    rig: &Rig,
    store: Arc<dyn Store>,
) -> (EngineHandle, Timestamp, Duration) {
    let mut hourly = HeartbeatDef { origin: Origin::Runtime, ..def("main", "tick", 3_600) };
    hourly.policy.jitter_max = Duration::from_secs(600);
    let offset = systole::core::policy::jitter_offset(&hourly.key, hourly.policy.jitter_max);
    assert!(offset >= Duration::from_secs(10), "room for the enable before the own run: {offset:?}");
    let engine = rig.start_on(store, &[], options()).await;
    engine.upsert(hourly.clone()).await.expect("create");
    rig.advance(60).await;
    let triggered = engine.trigger(&key("main", "tick")).await.expect("a trigger");
    let systole::driver::TriggerOutcome::Queued { slot } = triggered else { panic!("queued: {triggered:?}") };
    engine.upsert(HeartbeatDef { schedule: Schedule::At(slot), ..hourly }).await.expect("replace");
    (engine, slot, offset)
}

/// An enable of that one-shot while its moved slot waits (its jitter delays it) re-arms
/// it at the moved slot, not at none: the armed slot is its floor, and the instant itself is
/// the trigger's (seed 1927872091756: the enable found no slot at or above the floor, and the
/// one-shot was retired unrun once the trigger's run ended).
#[tokio::test(start_paused = true)]
async fn an_enable_keeps_a_one_shot_on_the_millisecond_after_a_trigger() {
    let rig = Rig::new();
    let (engine, slot, offset) = one_shot_made_for_a_jittered_trigger(&rig).await;
    rig.advance(5).await;
    // Enabled already: the operator's enable re-arms it.
    engine.set_enabled(&key("main", "tick"), true).await.expect("enable");
    rig.advance(offset.as_secs() + 5).await;
    let own = slot.checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slots(&rig.starts("main", "tick")), vec![slot, own], "the trigger's run, then the one-shot's own");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// The same with a second trigger between the edit and the enable: the first trigger's run
/// has started and it is no longer this process's latest, yet its row still holds the
/// instant, so the enable's re-arm keeps the slot the edit moved to (seed 1927872182998).
#[tokio::test(start_paused = true)]
async fn an_enable_after_a_later_trigger_keeps_a_one_shot_off_the_first() {
    let rig = Rig::new();
    let (engine, slot, later, offset) = one_shot_with_a_second_trigger(&rig).await;
    enable_and_expect_both_triggers_then_the_own(&rig, engine, slot, later, offset).await;
}

/// The same with a prune of the run log before the enable that keeps each heartbeat's
/// latest row only: the first trigger's row is gone, and with it the log's word that the
/// instant is a trigger's. The armed slot, not fired yet, is still the own slot (seed
/// 1927872728561: the enable retired the one-shot unrun).
#[tokio::test(start_paused = true)]
async fn an_enable_after_a_prune_of_the_first_triggers_row_keeps_a_one_shot_off_it() {
    let rig = Rig::new();
    let (engine, slot, later, offset) = one_shot_with_a_second_trigger(&rig).await;
    // A prune as one whose cutoff has passed the first row would make (the simulator's
    // seed pruned a skipped trigger's row, which no readable window keeps).
    let latest_only = RunRetention { kept_days: systole::limits::RUNS_KEPT_DAYS_MIN, kept_per_heartbeat: 1 };
    let days_later = rig.clock.wall() + SignedDuration::from_hours(24 * i64::from(latest_only.kept_days + 1));
    rig.store.prune_runs(days_later, latest_only).await.expect("prune");
    let rows = rig.store.executions(&key("main", "tick"), 10).await.expect("the run log");
    let kept: Vec<Timestamp> = rows.iter().map(|row| row.slot).collect();
    assert_eq!(kept, vec![later], "the prune kept the latest row only");
    enable_and_expect_both_triggers_then_the_own(&rig, engine, slot, later, offset).await;
}

/// The enable's read of the run log fails: the log can move nothing, and the one-shot's
/// own slot, armed off the first trigger's millisecond and not fired, stands. The engine
/// retired it unrun, as if the read had found no slot at or above that floor.
#[tokio::test(start_paused = true)]
async fn an_enable_whose_read_of_the_run_log_fails_keeps_a_one_shot_on_its_armed_slot() {
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    let (engine, slot, later, offset) = one_shot_with_a_second_trigger_on(&rig, late.clone()).await;
    late.fail_log_reads_after(0);
    let failed_reads =
        || rig.events.matching(|event| matches!(event, EngineEvent::StoreFailed { operation: "executions", .. })).len();
    let failed_before = failed_reads();
    engine.set_enabled(&key("main", "tick"), true).await.expect("enable");
    assert!(failed_reads() > failed_before, "the enable's read of the run log failed, and was reported");
    // Its lift's read failed too: the timer waits for a later read, which answers.
    late.answer_log_reads();
    rig.advance(offset.as_secs() + 5).await;
    let own = slot.checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slots(&rig.starts("main", "tick")), vec![slot, later, own], "both triggers' runs, then the own");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// That one-shot with a second trigger two seconds after the edit, two seconds ago: the
/// engine, the first trigger's slot, the second's, and the own run's offset.
async fn one_shot_with_a_second_trigger(rig: &Rig) -> (EngineHandle, Timestamp, Timestamp, Duration) {
    one_shot_with_a_second_trigger_on(rig, rig.store.clone()).await
}

/// The same on `store` (a wrapper of the rig's own).
async fn one_shot_with_a_second_trigger_on(
    rig: &Rig,
    store: Arc<dyn Store>,
) -> (EngineHandle, Timestamp, Timestamp, Duration) {
    let (engine, slot, offset) = one_shot_made_for_a_jittered_trigger_on(rig, store).await;
    rig.advance(2).await;
    let second = engine.trigger(&key("main", "tick")).await.expect("a second trigger");
    let systole::driver::TriggerOutcome::Queued { slot: later } = second else { panic!("queued: {second:?}") };
    rig.advance(2).await;
    (engine, slot, later, offset)
}

/// An operator's enable (it is enabled already) re-arms the one-shot: both triggers' runs,
/// then its own on the millisecond after the first trigger's.
async fn enable_and_expect_both_triggers_then_the_own(
    rig: &Rig,
    engine: EngineHandle,
    slot: Timestamp,
    later: Timestamp,
    offset: Duration,
) {
    engine.set_enabled(&key("main", "tick"), true).await.expect("enable");
    rig.advance(offset.as_secs() + 5).await;
    let own = slot.checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slots(&rig.starts("main", "tick")), vec![slot, later, own], "both triggers' runs, then the own");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A restart after the edit stored the moved slot: the new process made no trigger, and an
/// enable before the moved slot's claim re-arms the one-shot with that stored slot for a
/// floor. Its own slot is still the moved one, and it runs.
#[tokio::test(start_paused = true)]
async fn an_enable_after_a_restart_keeps_a_one_shot_on_its_stored_moved_slot() {
    let rig = Rig::new();
    let (engine, slot, offset) = one_shot_made_for_a_jittered_trigger(&rig).await;
    rig.advance(2).await;
    engine.shutdown(Duration::from_secs(1)).await;
    let engine = rig.start(&[]).await;
    engine.set_enabled(&key("main", "tick"), true).await.expect("enable");
    rig.advance(offset.as_secs() + 5).await;
    let own = slot.checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slots(&rig.starts("main", "tick")), vec![slot, own], "the trigger's run, then the own");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// After a restart the new process made no trigger, and only the run log knows the
/// trigger's row: the one-shot's claim of its instant meets it, and the store says it is a
/// trigger's, so the own slot moves to the next millisecond and runs (ADR 0055).
#[tokio::test(start_paused = true)]
async fn a_one_shot_made_for_a_triggers_millisecond_after_a_restart_runs_under_the_next_one() {
    let rig = Rig::new();
    let hourly = HeartbeatDef { origin: Origin::Runtime, ..def("main", "tick", 3_600) };
    let engine = rig.start(&[]).await;
    engine.upsert(hourly.clone()).await.expect("create");
    rig.advance(60).await;
    let triggered = engine.trigger(&key("main", "tick")).await.expect("a trigger");
    let systole::driver::TriggerOutcome::Queued { slot } = triggered else { panic!("queued: {triggered:?}") };
    rig.advance(5).await;
    engine.shutdown(Duration::from_secs(1)).await;
    let engine = rig.start(&[]).await;
    engine.upsert(HeartbeatDef { schedule: Schedule::At(slot), ..hourly }).await.expect("replace");
    rig.advance(5).await;
    let own = slot.checked_add(SignedDuration::from_millis(1)).expect("in range");
    assert_eq!(slots(&rig.starts("main", "tick")), vec![slot, own], "the trigger's run, then the one-shot's own");
    let moved = rig.events.matching(|event| {
        matches!(event, EngineEvent::ClaimMetTrigger { slot: met, moved_to, .. } if *met == slot && *moved_to == own)
    });
    assert_eq!(moved.len(), 1, "the claim met the trigger's row once, and moved");
    let rows = rig.store.executions(&key("main", "tick"), 10).await.expect("the run log");
    let marks: Vec<(Timestamp, bool)> = rows.iter().map(|row| (row.slot, row.triggered)).rev().collect();
    assert_eq!(marks, vec![(slot, true), (own, false)], "two rows, the trigger's marked");
    engine.shutdown(Duration::from_secs(1)).await;
}
