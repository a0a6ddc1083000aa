//! The engine on virtual time: the real driver, the memory store, test doubles for the
//! LLM and the messenger, and tokio's paused clock.

mod common;

use std::time::Duration;

use jiff::SignedDuration;

use common::{def, key, options, options_without_backoff, start, Behaviour, Rig};
use systole::core::active_hours::ActiveHours;
use systole::core::delivery_target::DeliveryTarget;
use systole::core::guard::SkipReason;
use systole::core::heartbeat::HeartbeatDef;
use systole::core::pause::PauseRecord;
use systole::driver::events::EngineEvent;
use systole::driver::EngineOptions;
use systole::limits::DRIVER_SLEEP_SECS_MAX;
use systole::ports::clock::Clock;
use systole::ports::messenger::DeliveryKind;
use systole::ports::store::{DeliveryStatus, ExecutionStatus, Store};

#[tokio::test(start_paused = true)]
async fn waits_one_interval_then_runs_on_cadence_and_delivers() {
    let rig = Rig::new();
    rig.llm.set("inbox", Behaviour::Reply("2 urgent mails".into()));
    // The same reply each minute: with dedup off, each one is delivered.
    let engine = rig.start(&[HeartbeatDef { dedup: false, ..def("main", "inbox", 60) }]).await;
    rig.advance(59).await;
    assert_eq!(rig.llm.calls_for("inbox"), 0, "no burst at start-up: the first run waits one interval");
    rig.advance(2).await;
    assert_eq!(rig.llm.calls_for("inbox"), 1);
    rig.advance(120).await;
    assert_eq!(rig.llm.calls_for("inbox"), 3);
    let deliveries = rig.messenger.deliveries.lock().expect("lock").clone();
    assert_eq!(deliveries.len(), 3);
    let first_slot = start().checked_add(SignedDuration::from_secs(60)).expect("in range");
    assert_eq!(deliveries[0].scheduled_for, first_slot);
    assert_eq!(deliveries[0].idempotency_key, format!("main/inbox/{}", first_slot.as_millisecond()));
    assert_ne!(deliveries[0].idempotency_key, deliveries[1].idempotency_key);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn empty_reply_delivers_nothing_and_counts_as_success() {
    let rig = Rig::new();
    rig.llm.set("quiet", Behaviour::Silent);
    let engine = rig.start(&[def("main", "quiet", 10)]).await;
    rig.advance(35).await;
    assert_eq!(rig.llm.calls_for("quiet"), 3);
    assert!(rig.messenger.texts().is_empty());
    let runs = rig.store.executions(&key("main", "quiet"), 10).await.expect("read");
    assert!(runs
        .iter()
        .all(|e| e.status == ExecutionStatus::Succeeded && e.delivery == Some(DeliveryStatus::NotNeeded)));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn breaker_disables_after_exactly_three_failures_and_survives_restart() {
    let rig = Rig::new();
    rig.llm.set("flaky", Behaviour::Fail);
    let engine = rig.start_with(&[def("main", "flaky", 10)], options_without_backoff()).await;
    rig.advance(100).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3, "the third failure trips the breaker; no fourth call");
    let tripped = rig.events.matching(|e| matches!(e, EngineEvent::BreakerTripped { .. }));
    assert_eq!(tripped.len(), 1);
    engine.shutdown(Duration::from_secs(1)).await;

    // A restart with the same config keeps it disabled.
    let engine = rig.start_with(&[def("main", "flaky", 10)], options_without_backoff()).await;
    rig.advance(100).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3);
    let stored = rig.store.load_heartbeats().await.expect("read");
    assert!(!stored[0].state.enabled);
    assert_eq!(stored[0].state.consecutive_failures, 3);

    // Re-enabling it clears the count and it runs again.
    rig.llm.set("flaky", Behaviour::Silent);
    engine.set_enabled(&key("main", "flaky"), true).await.expect("enable");
    rig.advance(11).await;
    assert_eq!(rig.llm.calls_for("flaky"), 4);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_probes_after_each_cooldown_announces_once_and_closes_on_success() {
    let rig = Rig::new();
    rig.llm.set("flaky", Behaviour::Fail);
    let options = || EngineOptions {
        breaker_cooldown: vec![Duration::from_secs(600), Duration::from_secs(1_800)],
        ..options_without_backoff()
    };
    let flaky = [def("main", "flaky", 60)];
    let engine = rig.start_with(&flaky, options()).await;
    rig.advance(185).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3, "failures at 60 s, 120 s and 180 s open the breaker");
    let announced = rig.messenger.deliveries.lock().expect("lock").clone();
    assert_eq!(announced.len(), 1, "the opening is announced: {announced:?}");
    assert_eq!(announced[0].kind, DeliveryKind::BreakerOpened);
    assert!(announced[0].text.contains("failed 3 times in a row"), "{}", announced[0].text);
    assert!(announced[0].text.contains("try once more at"), "{}", announced[0].text);
    let probe_at = |index: usize| match &rig.events.matching(|e| matches!(e, EngineEvent::BreakerTripped { .. }))[index]
    {
        (_, EngineEvent::BreakerTripped { probe_at: Some(at), .. }) => *at,
        other => panic!("expected a trip with a probe time, got {other:?}"),
    };
    let opened = rig.store.load_heartbeats().await.expect("read")[0].state.breaker_opened_at.expect("stored");
    assert_eq!(probe_at(0).duration_since(opened), SignedDuration::from_secs(600), "the first step of the ladder");

    // Open for its whole cooldown, then exactly one probe (which fails again).
    rig.advance(590).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3, "nothing runs while the breaker is open");
    rig.advance(70).await;
    assert_eq!(rig.llm.calls_for("flaky"), 4, "one probe on the first slot after the cooldown");
    assert_eq!(rig.events.matching(|e| matches!(e, EngineEvent::BreakerHalfOpen { .. })).len(), 1);
    let stored = rig.store.load_heartbeats().await.expect("read");
    assert_eq!(
        (stored[0].state.enabled, stored[0].state.consecutive_failures),
        (false, 4),
        "the failed probe opened it"
    );
    let opened = stored[0].state.breaker_opened_at.expect("stored");
    assert_eq!(probe_at(1).duration_since(opened), SignedDuration::from_secs(1_800), "the next step of the ladder");
    assert_eq!(rig.messenger.deliveries.lock().expect("lock").len(), 1, "a failed probe is not announced again");

    // A restart in the middle of the cooldown keeps what is left of it.
    engine.shutdown(Duration::from_secs(1)).await;
    rig.llm.set("flaky", Behaviour::Reply("inbox is back".into()));
    let engine = rig.start_with(&flaky, options()).await;
    let left = probe_at(1).duration_since(rig.clock.wall()).as_secs();
    rig.advance(u64::try_from(left - 5).expect("in the future")).await;
    assert_eq!(rig.llm.calls_for("flaky"), 4, "still open after the restart");
    rig.advance(70).await;
    assert_eq!(rig.llm.calls_for("flaky"), 5, "the probe after the second cooldown");
    let kinds: Vec<_> = rig.messenger.deliveries.lock().expect("lock").iter().map(|d| d.kind).collect();
    assert_eq!(kinds, vec![DeliveryKind::BreakerOpened, DeliveryKind::Reply, DeliveryKind::BreakerClosed]);
    let stored = rig.store.load_heartbeats().await.expect("read");
    assert_eq!((stored[0].state.enabled, stored[0].state.consecutive_failures), (true, 0), "closed");
    assert_eq!(stored[0].state.breaker_opened_at, None);
    rig.advance(60).await;
    assert_eq!(rig.llm.calls_for("flaky"), 6, "back on its schedule");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_half_open_breaker_shows_until_its_probe_and_a_restart_keeps_it_without_a_backoff() {
    let rig = Rig::new();
    rig.llm.set("flaky", Behaviour::Fail);
    // A backoff longer than the interval: a probe that waited for it would come a slot late.
    let options = || EngineOptions {
        breaker_cooldown: vec![Duration::from_secs(600)],
        error_backoff: vec![Duration::from_secs(150)],
        ..options_without_backoff()
    };
    let flaky = [def("main", "flaky", 60)];
    let half_open = |views: Vec<systole::driver::JobView>| views.iter().any(|view| view.breaker_half_open);
    let engine = rig.start_with(&flaky, options()).await;
    // Failures at 60 s, 120 s and 180 s trip it, whatever the backoff after each (at most 150 s).
    rig.advance(600).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3, "open after the third failure");
    assert!(!half_open(engine.inspect().await.expect("views")), "open, not half-open");
    let probe_at = match &rig.events.matching(|e| matches!(e, EngineEvent::BreakerTripped { .. }))[0] {
        (_, EngineEvent::BreakerTripped { probe_at: Some(at), .. }) => *at,
        other => panic!("expected a trip with a probe time, got {other:?}"),
    };
    let until_probe = probe_at.duration_since(rig.clock.wall()).as_secs();
    rig.advance(u64::try_from(until_probe + 1).expect("in the future")).await;
    assert_eq!(rig.events.matching(|e| matches!(e, EngineEvent::BreakerHalfOpen { .. })).len(), 1);
    assert_eq!(rig.llm.calls_for("flaky"), 3, "the probe waits for its slot");
    assert!(half_open(engine.inspect().await.expect("views")), "half-open until the probe runs");

    // Restarted half-open, it is still half-open, and its probe runs on its next slot: the
    // stored failure count's backoff (150 s) is not waited again.
    engine.shutdown(Duration::from_secs(1)).await;
    rig.llm.set("flaky", Behaviour::Silent);
    let engine = rig.start_with(&flaky, options()).await;
    assert!(half_open(engine.inspect().await.expect("views")), "still half-open after a restart");
    rig.advance(62).await;
    assert_eq!(rig.llm.calls_for("flaky"), 4, "the probe, on the first slot after the restart");
    assert!(!half_open(engine.inspect().await.expect("views")), "closed by the probe's success");
    let stored = rig.store.load_heartbeats().await.expect("read");
    assert_eq!((stored[0].state.enabled, stored[0].state.consecutive_failures), (true, 0), "closed");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_empty_cooldown_ladder_keeps_the_breaker_open_and_alerts_go_to_the_alerts_target() {
    let rig = Rig::new();
    rig.llm.set("flaky", Behaviour::Fail);
    let options = EngineOptions {
        breaker_cooldown: Vec::new(),
        alerts_target: Some(DeliveryTarget::parse("test:ops").expect("valid")),
        ..options_without_backoff()
    };
    let engine = rig.start_with(&[def("main", "flaky", 60)], options).await;
    rig.advance(7 * 24 * 3_600).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3, "no probe without a cooldown");
    let announced = rig.messenger.deliveries.lock().expect("lock").clone();
    assert_eq!(announced.len(), 1);
    assert_eq!(announced[0].target.to_string(), "test:ops");
    assert!(announced[0].text.contains("stays stopped until it is enabled"), "{}", announced[0].text);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn failure_count_survives_a_restart_in_the_middle() {
    let rig = Rig::new();
    rig.llm.set("flaky", Behaviour::Fail);
    let engine = rig.start_with(&[def("main", "flaky", 10)], options_without_backoff()).await;
    rig.advance(25).await;
    assert_eq!(rig.llm.calls_for("flaky"), 2);
    engine.shutdown(Duration::from_secs(1)).await;
    let engine = rig.start_with(&[def("main", "flaky", 10)], options_without_backoff()).await;
    rig.advance(100).await;
    assert_eq!(rig.llm.calls_for("flaky"), 3, "two before the restart plus one after trips it");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_run_is_not_overlapped_and_does_not_block_others() {
    let rig = Rig::new();
    rig.llm.set("slow", Behaviour::Slow(Duration::from_secs(25), "done".into()));
    rig.llm.set("fast", Behaviour::Reply("tick".into()));
    let engine = rig.start(&[def("main", "slow", 10), def("main", "fast", 10)]).await;
    rig.advance(41).await;
    assert_eq!(rig.llm.calls_for("fast"), 4, "the slow heartbeat never delays another");
    let overlaps = rig.events.matching(|e| matches!(e, EngineEvent::Skipped { reason: SkipReason::Overlap, .. }));
    assert!(overlaps.len() >= 2, "ticks during the slow run are skipped: {overlaps:?}");
    let statuses = rig.statuses("main", "slow").await;
    assert!(statuses.contains(&ExecutionStatus::Skipped));
    engine.shutdown(Duration::from_secs(60)).await;
}

/// What a stop waits for is the jobs with a run going, each once, as the views of every
/// job show them: a stop no longer builds a view of a million jobs to find them.
#[tokio::test(start_paused = true)]
async fn the_jobs_in_flight_are_those_the_views_show_running() {
    let rig = Rig::new();
    rig.llm.set("slow", Behaviour::Slow(Duration::from_secs(25), "done".into()));
    rig.llm.set("fast", Behaviour::Reply("tick".into()));
    // Runs of ops/slow go alongside each other: two of them at once from its second slot.
    let mut alongside = def("ops", "slow", 10);
    alongside.policy.overlap = systole::core::policy::Overlap::AllowAll;
    let defs = [alongside, def("main", "slow", 10), def("main", "fast", 10)];
    let engine = rig.start(&defs).await;
    assert!(engine.keys_in_flight().await.expect("keys").is_empty(), "nothing runs before the first slot");
    for (after, ops_runs) in [(11, 1), (10, 2)] {
        rig.advance(after).await;
        let views = engine.inspect().await.expect("views");
        let running: Vec<_> =
            views.iter().filter(|view| view.runs_in_flight > 0).map(|view| view.key.clone()).collect();
        assert_eq!(running, [key("main", "slow"), key("ops", "slow")]);
        let ops = views.iter().find(|view| view.key == key("ops", "slow")).expect("ops/slow");
        assert_eq!(ops.runs_in_flight, ops_runs);
        assert_eq!(engine.keys_in_flight().await.expect("keys"), running, "each job once, in key order");
    }
    engine.shutdown(Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_run_past_its_budget_times_out_and_counts_as_a_failure() {
    let rig = Rig::new();
    rig.llm.set("hang", Behaviour::Slow(Duration::from_secs(10_000), "too late".into()));
    let mut hang = def("main", "hang", 300);
    hang.timeout = Duration::from_secs(30);
    let engine = rig.start(&[hang]).await;
    rig.advance(340).await;
    let runs = rig.store.executions(&key("main", "hang"), 10).await.expect("read");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, ExecutionStatus::TimedOut);
    assert_eq!(runs[0].duration, Some(Duration::from_secs(30)));
    assert_eq!(rig.store.load_heartbeats().await.expect("read")[0].state.consecutive_failures, 1);
    assert!(rig.messenger.texts().is_empty());
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn ticks_outside_active_hours_are_skipped_with_the_reason() {
    let rig = Rig::new();
    // The clock starts at 12:00 UTC; this window is 22:00-06:00 UTC.
    let mut night = def("main", "night", 60);
    night.active_hours = Some(ActiveHours::new("22:00", "06:00", "UTC").expect("valid"));
    let engine = rig.start(&[night]).await;
    rig.advance(185).await;
    assert_eq!(rig.llm.calls_for("night"), 0);
    let runs = rig.store.executions(&key("main", "night"), 10).await.expect("read");
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|e| e.skip_reason == Some(SkipReason::QuietHours)));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn runtime_updates_leave_one_timer_and_delete_stops_it() {
    let rig = Rig::new();
    let engine = rig.start(&[]).await;
    for _ in 0..3 {
        engine.upsert(def("main", "dyn", 10)).await.expect("upsert");
    }
    rig.advance(31).await;
    assert_eq!(rig.llm.calls_for("dyn"), 3, "three updates, one timer (field notes, failure 11)");
    engine.delete(&key("main", "dyn")).await.expect("delete");
    rig.advance(100).await;
    assert_eq!(rig.llm.calls_for("dyn"), 3, "a deleted heartbeat never fires again");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn restart_resumes_at_the_stored_slot_without_an_extra_run() {
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "daily", 3_600)]).await;
    rig.advance(3_700).await;
    assert_eq!(rig.llm.calls_for("daily"), 1);
    engine.shutdown(Duration::from_secs(1)).await;
    // Restart half-way to the next slot: it must run at that slot, not at once, not an hour later.
    let engine = rig.start(&[def("main", "daily", 3_600)]).await;
    rig.advance(3_400).await;
    assert_eq!(rig.llm.calls_for("daily"), 1);
    rig.advance(200).await;
    assert_eq!(rig.llm.calls_for("daily"), 2);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_backward_clock_jump_never_reruns_a_slot() {
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "tick", 60)]).await;
    rig.advance(130).await;
    assert_eq!(rig.llm.calls_for("tick"), 2);
    rig.clock.jump_wall(SignedDuration::from_secs(-3_600));
    rig.advance(600).await;
    let runs = rig.store.executions(&key("main", "tick"), 100).await.expect("read");
    let mut slots: Vec<_> = runs.iter().map(|e| e.slot).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), runs.len(), "no slot is recorded twice");
    assert_eq!(rig.llm.calls_for("tick"), 12, "and the cadence goes on in elapsed time");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_forward_jump_runs_the_latest_missed_slot_once() {
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "tick", 60)]).await;
    rig.advance(61).await;
    rig.clock.jump_wall(SignedDuration::from_secs(3_600));
    // The driver re-reads the wall clock at least every DRIVER_SLEEP_SECS_MAX, which is
    // before the next slot's monotonic deadline (120 s).
    rig.advance(DRIVER_SLEEP_SECS_MAX + 1).await;
    assert_eq!(rig.llm.calls_for("tick"), 2, "one catch-up run, not sixty");
    let missed = rig.events.matching(|e| matches!(e, EngineEvent::CaughtUp { runs: 1, missed: 59, .. }));
    assert_eq!(missed.len(), 1);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_in_flight_runs_finish_within_grace() {
    let rig = Rig::new();
    rig.llm.set("slow", Behaviour::Slow(Duration::from_secs(5), "done".into()));
    let engine = rig.start(&[def("main", "slow", 10)]).await;
    rig.advance(11).await;
    assert_eq!(engine.shutdown(Duration::from_secs(30)).await, 0);
    assert_eq!(rig.statuses("main", "slow").await, vec![ExecutionStatus::Succeeded]);

    rig.llm.set("slow", Behaviour::Slow(Duration::from_secs(500), "done".into()));
    let engine = rig.start(&[def("main", "slow", 10)]).await;
    rig.advance(11).await;
    assert_eq!(engine.shutdown(Duration::from_secs(2)).await, 1, "a run past the grace period is abandoned");
    assert_eq!(rig.statuses("main", "slow").await.last(), Some(&ExecutionStatus::Running));
    // The next start-up records it as interrupted.
    let engine = rig.start(&[def("main", "slow", 10)]).await;
    assert_eq!(rig.statuses("main", "slow").await.last(), Some(&ExecutionStatus::Interrupted));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn re_enabling_after_a_backward_jump_does_not_walk_into_claimed_slots() {
    // Found by the simulator (seed 1789): after a backward jump, slot labels run ahead of
    // the wall clock; re-arming from the wall clock collided with every claimed slot.
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "tick", 60)]).await;
    // The first run's slot is start+60 s; then the wall clock steps back ten minutes.
    rig.advance(90).await;
    rig.clock.jump_wall(SignedDuration::from_secs(-600));
    // Runs go on each minute, labelled start+120 s ... start+1200 s, ten minutes ahead of the wall.
    rig.advance(1_170).await;
    let before = rig.llm.calls_for("tick");
    // Re-armed from the wall clock (start+660 s) its slots would be start+720 s, +780 s, ...: all claimed.
    engine.set_enabled(&key("main", "tick"), false).await.expect("disable");
    engine.set_enabled(&key("main", "tick"), true).await.expect("enable");
    rig.advance(301).await;
    assert_eq!(rig.llm.calls_for("tick"), before + 5, "runs every minute again after one interval");
    assert!(rig.events.matching(|e| matches!(e, EngineEvent::ClaimLost { .. })).is_empty());
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_claim_lifts_the_timer_past_the_stored_slots() {
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "tick", 60)]).await;
    rig.advance(90).await;
    rig.clock.jump_wall(SignedDuration::from_secs(-600));
    rig.advance(1_170).await;
    // Deleted and created again under the same id: its old claims are still in the log.
    engine.delete(&key("main", "tick")).await.expect("delete");
    engine.upsert(def("main", "tick", 60)).await.expect("create");
    let before = rig.llm.calls_for("tick");
    rig.advance(601).await;
    let lost = rig.events.matching(|e| matches!(e, EngineEvent::ClaimLost { .. })).len();
    assert!(lost <= 1, "at most one lost claim before the timer lifts past the old slots: {lost}");
    assert!(rig.llm.calls_for("tick") >= before + 8, "and it runs again");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_token_is_never_delivered_and_a_repeated_alert_waits_a_day() {
    let rig = Rig::new();
    for (prompt, reply) in [
        ("bare", "HEARTBEAT_OK"),
        ("bold", "**HEARTBEAT_OK**"),
        ("html", "<b>HEARTBEAT_OK</b>"),
        ("noted", "HEARTBEAT_OK\nAll good, 3 tasks done"),
    ] {
        rig.llm.set(prompt, Behaviour::Reply(reply.into()));
    }
    rig.llm.set("disk", Behaviour::Reply("Disk usage at 95%, action needed".into()));
    let mut undeduped = def("main", "loud", 3_600);
    undeduped.dedup = false;
    rig.llm.set("loud", Behaviour::Reply("Disk usage at 95%, action needed".into()));
    let defs = [
        def("main", "bare", 3_600),
        def("main", "bold", 3_600),
        def("main", "html", 3_600),
        def("main", "noted", 3_600),
        def("main", "disk", 3_600),
        undeduped,
    ];
    let engine = rig.start(&defs).await;
    rig.advance(3 * 3_600 + 1).await;
    let texts = rig.messenger.texts();
    assert!(texts.iter().all(|text| !text.contains("HEARTBEAT_OK")), "{texts:?}");
    let disk = |texts: &[String]| texts.iter().filter(|t| t.starts_with("Disk")).count();
    assert_eq!(disk(&texts), 1 + 3, "the deduplicated one once, the one with dedup off every hour");
    let runs = rig.store.executions(&key("main", "disk"), 10).await.expect("read");
    let replies: Vec<_> = runs.iter().rev().map(|run| run.reply.map(|r| r.as_str())).collect();
    assert_eq!(replies, vec![Some("sent"), Some("duplicate"), Some("duplicate")]);
    let noted = rig.store.executions(&key("main", "noted"), 1).await.expect("read");
    assert_eq!(noted[0].reply.map(|r| r.as_str()), Some("ok-token"));
    assert_eq!(noted[0].output_preview.as_deref(), Some("All good, 3 tasks done"), "the note stays in the log");

    // After 24 h the same alert is news again; a restart does not forget what was sent.
    engine.shutdown(Duration::from_secs(1)).await;
    let engine = rig.start(&defs).await;
    rig.advance(19 * 3_600).await;
    assert_eq!(disk(&rig.messenger.texts()) - 3, 1 + 19, "still once within the day, across a restart");
    // The 13:00 run is exactly 24 h after the first delivery, still inside; the 14:00 one is not.
    rig.advance(4 * 3_600).await;
    let delivered_disk =
        rig.messenger.deliveries.lock().expect("lock").iter().filter(|d| d.heartbeat == key("main", "disk")).count();
    assert_eq!(delivered_disk, 2, "delivered again once the first is more than 24 h old");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_run_log_of_a_quiet_heartbeat_is_pruned_to_its_count_on_a_timer() {
    let rig = Rig::new();
    // Quiet all day (22:00-06:00 UTC, the clock starts at 12:00): a skip every minute.
    let mut night = def("main", "night", 60);
    night.active_hours = Some(ActiveHours::new("22:00", "06:00", "UTC").expect("valid"));
    let retention = systole::core::retention::RunRetention { kept_days: 30, kept_per_heartbeat: 10 };
    let engine = rig.start_with(&[night], EngineOptions { run_retention: retention, ..options() }).await;
    let logged = || async { rig.store.executions(&key("main", "night"), 10_000).await.expect("read").len() };
    // The first prune comes five minutes after the start: four skips, all within the count.
    rig.advance(290).await;
    assert_eq!(logged().await, 4);
    assert!(rig.events.matching(|e| matches!(e, EngineEvent::RunsPruned { .. })).is_empty());
    // At 3,900 s, 65 skips were written; the hourly prune keeps the newest ten.
    rig.advance(3_620).await;
    let pruned = rig.events.matching(|e| matches!(e, EngineEvent::RunsPruned { .. }));
    assert_eq!(pruned.len(), 1, "one prune with something to delete: {pruned:?}");
    assert!(matches!(pruned[0].1, EngineEvent::RunsPruned { deleted } if deleted >= 54), "{pruned:?}");
    assert!(logged().await <= 11, "pruned to its count (plus a skip of the prune's own minute)");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// How many runs of these heartbeats the store has in `status`.
async fn count_status(rig: &Rig, names: &[&str], status: ExecutionStatus) -> usize {
    let mut count = 0;
    for name in names {
        count += rig.statuses("main", name).await.iter().filter(|run| **run == status).count();
    }
    count
}

#[tokio::test(start_paused = true)]
async fn a_full_engine_claims_only_what_it_can_start_and_a_stop_abandons_only_started_runs() {
    let rig = Rig::new();
    // Five heartbeats every 10 s whose model takes 25 s, at most two runs at once: the
    // engine is oversubscribed from the first slot on.
    let names = ["a", "b", "c", "d", "e"];
    for name in names {
        rig.llm.set(name, Behaviour::Slow(Duration::from_secs(25), "done".into()));
    }
    let defs: Vec<HeartbeatDef> = names.iter().map(|name| def("main", name, 10)).collect();
    let full = || EngineOptions { runs_in_flight_max: 2, ..options() };
    let engine = rig.start_with(&defs, full()).await;
    rig.advance(11).await;
    let started = rig.events.matching(|e| matches!(e, EngineEvent::RunStarted { .. }));
    assert_eq!(started.len(), 2, "only the runs that can start are claimed: {started:?}");
    assert_eq!(count_status(&rig, &names, ExecutionStatus::Running).await, 2);
    // The status counts the slots that wait for a place as waiting.
    let views = engine.client().inspect().await.expect("inspect");
    let waiting: usize = views.iter().map(|view| view.waiting).sum();
    assert_eq!(waiting, 3, "the three slots with no place wait: {views:?}");
    // Each heartbeat gets its turn in the order its slots came, by its catch-up policy
    // (the latest slot that passed while it waited), and never more than two at once.
    rig.advance(140).await;
    for name in names {
        let starts = rig.starts("main", name);
        assert!(!starts.is_empty(), "{name} waited its turn and ran");
        for (started_at, slot) in starts {
            assert!(started_at.duration_since(slot) < SignedDuration::from_secs(10), "{name} ran its latest slot");
        }
    }
    assert!(count_status(&rig, &names, ExecutionStatus::Running).await <= 2);
    // A stop abandons only runs that began; the slots that waited were never claimed.
    let running = count_status(&rig, &names, ExecutionStatus::Running).await;
    let abandoned = engine.shutdown(Duration::from_secs(1)).await;
    assert_eq!(abandoned, running);
    assert!(abandoned <= 2);
    let engine = rig.start_with(&defs, full()).await;
    assert_eq!(count_status(&rig, &names, ExecutionStatus::Interrupted).await, abandoned);
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_run_waiting_for_its_results_write_holds_no_place_and_such_runs_are_bounded() {
    // One place; each run works 5 s; each group commit of results answers 30 s late.
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    *late.results_delay.lock().expect("lock") = Some(Duration::from_secs(30));
    let names = ["a", "b", "c"];
    for name in names {
        rig.llm.set(name, Behaviour::Slow(Duration::from_secs(5), "done".into()));
    }
    let defs: Vec<HeartbeatDef> = names.iter().map(|name| def("main", name, 600)).collect();
    let one_place = EngineOptions { runs_in_flight_max: 1, ..options() };
    let engine = rig.start_on(late.clone(), &defs, one_place).await;
    rig.advance(700).await;
    let started_after = |name: &str| -> Vec<i64> {
        rig.starts("main", name).iter().map(|(at, _)| at.duration_since(start()).as_secs()).collect()
    };
    let mut first_starts: Vec<i64> = names.iter().map(|name| started_after(name)[0]).collect();
    first_starts.sort_unstable();
    // The first run's place frees when its work ends (605 s), though its result is
    // written only at 635 s; the third must wait for that write: one result at most may
    // wait per place (`RESULTS_WAITING_PER_PLACE_MAX`).
    assert_eq!(first_starts, [600, 605, 635], "started after the start, in seconds");
    let done = rig.events.matching(|e| matches!(e, EngineEvent::RunWorkDone { .. }));
    assert!(done.len() >= 3, "each run said its work was done: {done:?}");
    for name in names {
        assert_eq!(rig.statuses("main", name).await[0], ExecutionStatus::Succeeded, "{name} ran and was recorded");
    }
    engine.shutdown(Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_file_stops_the_config_heartbeats_it_lacks_and_keeps_those_made_at_run_time() {
    // A cluster node that missed a reload can run a heartbeat its own file never had
    // (its partition loaded it from the store); a later reload that drops it names no
    // change against that file, so the engine is told what the file holds instead.
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "kept", 60), def("main", "dropped", 60)]).await;
    let made = HeartbeatDef { origin: systole::core::heartbeat::Origin::Runtime, ..def("main", "made", 60) };
    engine.upsert(made).await.expect("created at run time");
    rig.advance(61).await;
    assert_eq!(rig.llm.calls_for("dropped"), 1, "it ran before the reload");
    // The reload's seed removes the row; the engine keeps only what the file has.
    rig.store.seed_config(&[def("main", "kept", 60)], rig.clock.wall()).await.expect("seed");
    let in_file = [key("main", "kept")].into_iter().collect();
    engine.keep_config_only(in_file).await.expect("applied");
    let mut running: Vec<String> =
        engine.inspect().await.expect("views").into_iter().map(|view| view.key.heartbeat.to_string()).collect();
    running.sort();
    assert_eq!(running, ["kept", "made"], "the dropped config heartbeat goes, the run-time one stays");
    rig.advance(300).await;
    assert_eq!(rig.llm.calls_for("dropped"), 1, "it never runs again");
    assert!(rig.llm.calls_for("made") >= 5, "the run-time heartbeat kept running");
    assert!(rig.llm.calls_for("kept") >= 5, "the file's heartbeat kept running");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// Options for the late-answer tests: one cooldown of ten minutes, no error backoff.
fn ten_minute_cooldown() -> EngineOptions {
    EngineOptions { breaker_cooldown: vec![Duration::from_secs(600)], ..options_without_backoff() }
}

/// After the run that tripped its breaker, the probe comes after the cooldown and closes it
/// (called 85 s after the start, ten seconds after the late write's answer).
async fn probe_comes_and_closes(rig: &Rig, prompt: &str) {
    rig.llm.set(prompt, Behaviour::Silent);
    rig.advance(500).await;
    assert_eq!(rig.llm.calls_for(prompt), 1, "nothing runs in the cooldown");
    // The cooldown runs from the write's answer (85 s - 10 s): half-open at 675 s, the
    // probe one interval later.
    rig.advance(155).await;
    assert_eq!(rig.llm.calls_for(prompt), 2, "the probe after the cooldown");
    let stored = rig.store.load_heartbeats().await.expect("read");
    let state = &stored.iter().find(|heartbeat| heartbeat.def.key.heartbeat.as_str() == prompt).expect("stored").state;
    assert_eq!((state.enabled, state.consecutive_failures), (true, 0), "the probe closed the breaker");
}

#[tokio::test(start_paused = true)]
async fn an_enable_answered_after_a_refused_run_tripped_the_breaker_still_ends_in_a_probe() {
    // The operator's enable is written (clearing the count), then a run that was going is
    // refused and trips the breaker, and the engine hears of the run before the enable:
    // the enable must not drop the cooldown the trip started and leave no probe.
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    rig.llm.set("flaky", Behaviour::SlowFail(Duration::from_secs(10), 401));
    let engine = rig.start_on(late.clone(), &[def("main", "flaky", 60)], ten_minute_cooldown()).await;
    rig.advance(65).await;
    assert_eq!(rig.llm.calls_for("flaky"), 1, "its first run is going");
    *late.delay.lock().expect("lock") = Some(Duration::from_secs(10));
    let flaky = key("main", "flaky");
    let (enabled, ()) = tokio::join!(engine.set_enabled(&flaky, true), rig.advance(20));
    assert!(enabled.expect("enable"));
    let stored = rig.store.load_heartbeats().await.expect("read");
    assert!(!stored[0].state.enabled, "the refusal after the enable's write opened the breaker");
    probe_comes_and_closes(&rig, "flaky").await;
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_made_again_while_a_run_of_its_predecessor_is_refused_still_ends_in_a_probe() {
    // Deleted while a run goes, made again under the same id: the run is refused after the
    // new row is written and trips its breaker, and the engine hears of the run while the
    // id has no entry (seed 1927871094531). The replace must start the cooldown itself.
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    rig.llm.set("twin", Behaviour::SlowFail(Duration::from_secs(10), 401));
    let engine = rig.start_on(late.clone(), &[], ten_minute_cooldown()).await;
    let made = HeartbeatDef { origin: systole::core::heartbeat::Origin::Runtime, ..def("main", "twin", 60) };
    engine.upsert(made.clone()).await.expect("made");
    rig.advance(65).await;
    assert_eq!(rig.llm.calls_for("twin"), 1, "its first run is going");
    assert!(engine.delete(&key("main", "twin")).await.expect("delete"));
    *late.delay.lock().expect("lock") = Some(Duration::from_secs(10));
    let (made_again, ()) = tokio::join!(engine.upsert(made), rig.advance(20));
    made_again.expect("made again");
    let stored = rig.store.load_heartbeats().await.expect("read");
    assert!(!stored[0].state.enabled, "the predecessor's refusal opened the new row's breaker");
    probe_comes_and_closes(&rig, "twin").await;
    engine.shutdown(Duration::from_secs(1)).await;
}

/// An operator's resume is written, and its answer is slow; a newer pause is written and
/// taken by the engine meanwhile. The resume's command, coming last, must not end the pause
/// the store holds: the engine would run the agent while a restart or the partition's next
/// owner would pause it (ADR 0005; the cluster simulation's freeze at a pause's end).
#[tokio::test(start_paused = true)]
async fn a_resume_answered_after_a_newer_pause_leaves_that_pause_in_force() {
    let rig = Rig::new();
    let late = common::late_answers::LateAnswers::new(rig.store.clone(), rig.clock.clone());
    let engine = rig.start_on(late.clone(), &[def("main", "inbox", 60)], options()).await;
    let agent = key("main", "inbox").agent;
    engine.pause(&agent, 2).await.expect("pause");
    *late.delay.lock().expect("lock") = Some(Duration::from_secs(10));
    let (resumed, newer) = tokio::join!(engine.resume(&agent), async {
        rig.advance(2).await;
        let newer = engine.pause(&agent, 10).await;
        rig.advance(20).await;
        newer
    });
    assert!(resumed.expect("resume"), "the first pause was stored when the resume read");
    let newer = newer.expect("the newer pause");
    let stored = rig.store.load_pauses().await.expect("read");
    assert_eq!(stored, vec![(agent, newer.record)], "the newer pause is what the store holds");
    rig.advance(300).await;
    assert_eq!(rig.llm.calls_for("inbox"), 0, "no run during the pause the store holds");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A cluster's reload reads the rows it changed, then each partition's engine adopts them.
/// An operator's disable that the engine took in between stays: the engine adopts the rows
/// as the store holds them when it takes them, not as the reload read them (ADR 0056).
#[tokio::test(start_paused = true)]
async fn an_adopted_row_read_before_a_disable_leaves_the_heartbeat_disabled() {
    let rig = Rig::new();
    rig.llm.set("inbox", Behaviour::Reply("2 urgent mails".into()));
    let engine = rig.start(&[def("main", "inbox", 60)]).await;
    let read_by_a_reload = rig.store.load_heartbeats().await.expect("read");
    assert!(read_by_a_reload.iter().all(|row| row.state.enabled), "read while enabled");
    engine.set_enabled(&key("main", "inbox"), false).await.expect("disable");
    engine.adopt_stored(read_by_a_reload, &[]).await.expect("adopt");
    rig.advance(150).await;
    assert!(rig.starts("main", "inbox").is_empty(), "a disabled heartbeat never runs");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// The same for a delete: the row the reload read is not adopted once the store has none
/// (adopted, the engine armed a job the store no longer held, and only the claim's miss in
/// the store kept it from running).
#[tokio::test(start_paused = true)]
async fn an_adopted_row_read_before_a_delete_does_not_bring_the_heartbeat_back() {
    let rig = Rig::new();
    rig.llm.set("inbox", Behaviour::Reply("2 urgent mails".into()));
    let engine = rig.start(&[def("main", "inbox", 60)]).await;
    let read_by_a_reload = rig.store.load_heartbeats().await.expect("read");
    assert!(engine.delete(&key("main", "inbox")).await.expect("delete"), "it was stored");
    engine.adopt_stored(read_by_a_reload, &[]).await.expect("adopt");
    let jobs = engine.inspect().await.expect("the engine's jobs");
    assert!(jobs.iter().all(|job| job.key != key("main", "inbox")), "the engine holds no such job: {jobs:?}");
    rig.advance(150).await;
    assert!(rig.starts("main", "inbox").is_empty(), "a deleted heartbeat never runs");
    engine.shutdown(Duration::from_secs(1)).await;
}

/// A pause that ends clears only itself from the store: an operator's newer pause, stored
/// before its command reaches the engine, stays for the next process or owner to find (seed
/// 31450167444: cleared, it was lost when another engine took the partition over).
#[tokio::test(start_paused = true)]
async fn a_pause_that_ends_leaves_a_newer_stored_pause() {
    let rig = Rig::new();
    let engine = rig.start(&[def("main", "inbox", 60)]).await;
    let agent = key("main", "inbox").agent;
    engine.pause(&agent, 1).await.expect("pause");
    // A newer pause, stored as an operator's call stores it, before its command reaches
    // the engine.
    let newer = PauseRecord {
        until: rig.clock.wall().checked_add(SignedDuration::from_mins(10)).expect("in range"),
        minutes: 10,
        set_at: rig.clock.wall(),
    };
    rig.store.set_pause(&agent, &newer).await.expect("store the newer pause");
    rig.advance(90).await;
    let stored = rig.store.load_pauses().await.expect("read");
    assert_eq!(stored, vec![(agent, newer)], "the newer pause stays stored");
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_look_at_some_jobs_sees_them_as_a_look_at_all_does_and_the_counts_split_by_agent() {
    let rig = Rig::new();
    let defs = [def("main", "a", 60), def("main", "b", 60), def("ops", "c", 60), def("ops", "d", 60)];
    let engine = rig.start(&defs).await;
    assert!(engine.set_enabled(&key("ops", "d"), false).await.expect("applied"), "disabled");
    rig.advance(61).await;
    let all = engine.inspect().await.expect("views");
    let wanted = [key("ops", "d"), key("main", "a"), key("main", "gone")];
    let some = engine.inspect_keys(wanted.to_vec()).await.expect("views");
    let expected: Vec<_> = [key("ops", "d"), key("main", "a")]
        .iter()
        .filter_map(|k| all.iter().find(|view| &view.key == k))
        .cloned()
        .collect();
    assert_eq!(some, expected, "the named jobs the engine runs, in the order named, as the whole look sees them");
    assert!(engine.inspect_keys(Vec::new()).await.expect("views").is_empty());
    let counts = engine.enabled_counts().await.expect("counts");
    let counted: Vec<(String, u64, u64)> =
        counts.iter().map(|(agent, counted)| (agent.to_string(), counted.enabled, counted.disabled)).collect();
    assert_eq!(counted, [("main".to_owned(), 2, 0), ("ops".to_owned(), 1, 1)]);
    engine.shutdown(Duration::from_secs(1)).await;
}
