//! On virtual time: what targets show of runs (`show_ok`, `show_alerts`, `use_indicator`,
//! and the `alerts-disabled` skip), the daily LLM budget per agent, and run events.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{def, key, options, start, Behaviour, Rig};
use systole::core::guard::SkipReason;
use systole::core::ids::AgentId;
use systole::core::visibility::{Visibility, VisibilityOverride, VisibilityRules};
use systole::driver::run_events::{Indicator, RunStatus};
use systole::driver::EngineOptions;
use systole::ports::store::Store;

fn with_visibility(show_ok: bool, show_alerts: bool, use_indicator: bool) -> EngineOptions {
    let rules = VisibilityRules {
        defaults: Visibility::default(),
        adapters: BTreeMap::new(),
        targets: BTreeMap::from([(
            "test:inbox".to_owned(),
            VisibilityOverride {
                show_ok: Some(show_ok),
                show_alerts: Some(show_alerts),
                use_indicator: Some(use_indicator),
            },
        )]),
    };
    EngineOptions { visibility: rules, ..options() }
}

#[tokio::test(start_paused = true)]
async fn show_ok_delivers_the_note_never_the_token() {
    let rig = Rig::new();
    rig.llm.set("calm", Behaviour::Reply("HEARTBEAT_OK".into()));
    rig.llm.set("noted", Behaviour::Reply("HEARTBEAT_OK\n3 tasks done".into()));
    let defs = [def("main", "calm", 60), def("main", "noted", 60)];
    let engine = rig.start_with(&defs, with_visibility(true, true, true)).await;
    rig.advance(61).await;
    let mut texts = rig.messenger.texts();
    texts.sort();
    assert_eq!(texts, ["3 tasks done", "OK"]);
    let last = engine.run_events().last(&AgentId::new("main").expect("id")).expect("an event");
    assert_eq!((last.status, last.indicator), (RunStatus::OkToken, Some(Indicator::Ok)));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn hidden_alerts_are_kept_and_reported_not_delivered() {
    let rig = Rig::new();
    rig.llm.set("disk", Behaviour::Reply("Disk at 95%".into()));
    let engine = rig.start_with(&[def("main", "disk", 60)], with_visibility(false, false, true)).await;
    let mut events = engine.run_events().subscribe();
    rig.advance(61).await;
    assert!(rig.messenger.texts().is_empty(), "show_alerts = false");
    let event = events.try_recv().expect("one run event");
    assert_eq!((event.status, event.reason.as_deref()), (RunStatus::Skipped, Some("alerts-hidden")));
    assert_eq!((event.preview.as_deref(), event.indicator), (Some("Disk at 95%"), Some(Indicator::Alert)));
    assert_eq!(event.slot, start().checked_add(jiff::SignedDuration::from_secs(60)).expect("in range"));
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_target_that_shows_nothing_costs_no_llm_call() {
    let rig = Rig::new();
    rig.llm.set("disk", Behaviour::Reply("Disk at 95%".into()));
    let engine = rig.start_with(&[def("main", "disk", 60)], with_visibility(false, false, false)).await;
    rig.advance(121).await;
    assert_eq!(rig.llm.calls_for("disk"), 0);
    let runs = rig.store.executions(&key("main", "disk"), 10).await.expect("read");
    let reasons: Vec<_> = runs.iter().map(|run| run.skip_reason).collect();
    assert_eq!(reasons, [Some(SkipReason::AlertsDisabled), Some(SkipReason::AlertsDisabled)]);
    let last = engine.run_events().last(&AgentId::new("main").expect("id")).expect("an event");
    assert_eq!(
        (last.status, last.reason.as_deref(), last.indicator),
        (RunStatus::Skipped, Some("alerts-disabled"), None)
    );
    engine.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_daily_budget_holds_across_heartbeats_and_a_restart_until_the_next_local_day() {
    let rig = Rig::new();
    // The agent's day is Shanghai's: the rig starts at 12:00 UTC, 20:00 there, so the next
    // local day begins four hours in.
    let mut budgeted = options();
    let mut settings = budgeted.agent_default.clone();
    settings.llm_calls_per_day = 5;
    settings.timezone = "Asia/Shanghai".to_owned();
    budgeted.agents.insert(AgentId::new("main").expect("id"), settings);
    let defs = [def("main", "a", 600), def("main", "b", 600), def("other", "c", 600)];
    let engine = rig.start_with(&defs, budgeted.clone()).await;
    rig.advance(3 * 600 + 1).await;
    // Runs at 10, 20 and 30 min: a and b make 4 calls by 20 min, 6 by 30 min (a run that
    // starts under the budget finishes); then nothing.
    assert_eq!(rig.llm.calls_for("a") + rig.llm.calls_for("b"), 6);
    assert_eq!(rig.llm.calls_for("c"), 3, "another agent has its own budget");
    engine.shutdown(Duration::from_secs(1)).await;
    // A restart reads the day's calls back from the store.
    let engine = rig.start_with(&defs, budgeted).await;
    rig.advance(600).await;
    assert_eq!(rig.llm.calls_for("a") + rig.llm.calls_for("b"), 6);
    let skipped = rig.store.executions(&key("main", "a"), 1).await.expect("read");
    assert_eq!(skipped[0].skip_reason, Some(SkipReason::Budget));
    // 16:00 UTC is midnight in Shanghai: the budget opens again.
    rig.advance(4 * 3_600).await;
    assert!(rig.llm.calls_for("a") + rig.llm.calls_for("b") > 6);
    engine.shutdown(Duration::from_secs(1)).await;
}
