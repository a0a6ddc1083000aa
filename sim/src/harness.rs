//! Runs one seed: the real engine in a madsim node, restarted through the normal start-up
//! path after every crash; a safety phase with faults, then a healed liveness phase.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use systole::adapters::memory_workspace::MemoryWorkspace;
use systole::adapters::virtual_clock::VirtualClock;
use systole::core::usage::PriceTable;
use systole::driver::{self, EngineHandle, EngineOptions, Ports, TriggerOutcome};
use systole::ports::clock::Clock;
use systole::ports::store::{ExecutionStatus, Store};
use systole::store::memory::MemoryStore;

use crate::faults::{FaultKind, Injector};
use crate::options::{rng, SimOptions, Stream};
use crate::ports::llm::SimLlm;
use crate::ports::messenger::SimMessenger;
use crate::ports::store::SimStore;
use crate::ports::telemetry::SimTelemetry;
use crate::ports::tools::SimTools;
use crate::ports::TraceSink;
use crate::trace::{Entry, Event};
use crate::workload::Op;
use crate::world::{Life, RarePath, World};
use systole::core::tool_policy::ToolPattern;

/// What a seed produced.
pub struct Outcome {
    pub options: SimOptions,
    pub entries: Vec<Entry>,
    pub faults_fired: std::collections::BTreeMap<FaultKind, u64>,
    pub paths: std::collections::BTreeMap<RarePath, u64>,
}

/// Runs `seed` to the end on a fresh madsim runtime.
pub fn run_seed(seed: u64) -> Outcome {
    let options = SimOptions::from_seed(seed);
    let runtime = madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
    let (entries, faults_fired, paths) = runtime.block_on(simulate(options.clone()));
    Outcome { options, entries, faults_fired, paths }
}

/// Ops waiting for a live engine to apply them.
#[derive(Default)]
struct OpQueue {
    ops: Mutex<VecDeque<Op>>,
    ready: Notify,
}

async fn simulate(
    options: SimOptions,
) -> (Vec<Entry>, std::collections::BTreeMap<FaultKind, u64>, std::collections::BTreeMap<RarePath, u64>) {
    let clock = Arc::new(VirtualClock::new(options.start));
    let injector = Injector::new(rng(options.seed, Stream::Faults), options.fault_rates.clone(), options.crashes_max);
    let world = Arc::new(World {
        clock: Arc::clone(&clock),
        injector,
        durable: Arc::new(MemoryStore::new()),
        recorder: Default::default(),
        crashed: Notify::new(),
        lives: Default::default(),
        llm_rng: Mutex::new(rng(options.seed, Stream::Llm)),
        ping_rng: Mutex::new(rng(options.seed, Stream::MentionReplies)),
        tools: Mutex::new(crate::ports::tools::ToolWorld::new(rng(options.seed, Stream::ToolServer))),
        tool_use_rng: Mutex::new(rng(options.seed, Stream::ToolUse)),
        refusal_rng: Mutex::new(rng(options.seed, Stream::Refusals)),
        log_read_rng: Mutex::new(rng(options.seed, Stream::LogReadFailures)),
        workspace: Arc::new(MemoryWorkspace::default()),
        flaky_calls: Mutex::default(),
        planted_store_faults: Mutex::new(options.planted_store_faults.clone()),
        config: Mutex::new(options.heartbeats.clone()),
        paths: Mutex::default(),
        options,
    });
    for (agent, file) in &world.options.files {
        world.workspace.set_heartbeat_file(agent, file.as_deref());
        world.record(Event::WorkspaceChanged { agent: agent.clone(), content: file.clone() });
    }
    if !world.options.clock_skew.is_zero() {
        clock.jump_wall(world.options.clock_skew);
        world.injector.count(FaultKind::ClockSkew);
        world.fault(FaultKind::ClockSkew, world.options.clock_skew.to_string());
    }
    let queue = Arc::new(OpQueue::default());
    let handle = madsim::runtime::Handle::current();
    let node = handle
        .create_node()
        .name("engine")
        .init({
            let (world, queue) = (Arc::clone(&world), Arc::clone(&queue));
            move || incarnation(Arc::clone(&world), Arc::clone(&queue))
        })
        .build();
    tokio::spawn(jump_clock(Arc::clone(&world)));
    tokio::spawn(issue_ops(Arc::clone(&world), Arc::clone(&queue)));

    let safety_end = clock.monotonic() + world.options.safety;
    supervise(&world, &handle, node.id(), safety_end).await;
    world.injector.heal();
    world.record(Event::Healed);
    let end = clock.monotonic() + world.options.liveness;
    supervise(&world, &handle, node.id(), end).await;

    handle.kill(node.id());
    let heartbeats = world.durable.load_heartbeats().await.unwrap_or_default();
    world.record(Event::End { heartbeats: heartbeats.into_iter().map(|h| (h.def.key, h.state.enabled)).collect() });
    let paths = std::mem::take(&mut *world.paths.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    (world.recorder.take(), world.injector.fired(), paths)
}

/// Until `until`: whenever the engine dies, kill its node, wait a downtime, restart it.
async fn supervise(
    world: &World,
    handle: &madsim::runtime::Handle,
    node: madsim::task::NodeId,
    until: systole::ports::clock::Mono,
) {
    loop {
        tokio::select! {
            biased;
            () = world.crashed.notified() => {
                handle.kill(node);
                let downtime = Duration::from_secs(world.injector.draw(1..world.options.downtime_max.as_secs().max(2)));
                let restart_at = (world.clock.monotonic() + downtime).min(until);
                world.clock.sleep_until(restart_at).await;
                world.record(Event::Restart { life: world.lives.load(Ordering::SeqCst) + 1 });
                if world.cooldown_running() {
                    world.took(RarePath::CooldownAcrossRestart);
                }
                if world.probe_pending() {
                    world.took(RarePath::ProbeAcrossRestart);
                }
                handle.restart(node);
            }
            () = world.clock.sleep_until(until) => return,
        }
    }
}

async fn jump_clock(world: Arc<World>) {
    let origin = world.clock.monotonic();
    for jump in world.options.clock_jumps.clone() {
        world.clock.sleep_until(origin + jump.after).await;
        let kind = if jump.by.is_negative() { FaultKind::ClockJumpBackward } else { FaultKind::ClockJumpForward };
        world.clock.jump_wall(jump.by);
        if world.cooldown_running() {
            world.took(RarePath::CooldownAcrossClockJump);
        }
        world.injector.count(kind);
        world.fault(kind, jump.by.to_string());
    }
}

async fn issue_ops(world: Arc<World>, queue: Arc<OpQueue>) {
    let origin = world.clock.monotonic();
    for scheduled in world.options.ops.clone() {
        world.clock.sleep_until(origin + scheduled.after).await;
        queue.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(scheduled.op);
        queue.ready.notify_one();
    }
}

/// One life of the engine process, from start-up until it is killed.
async fn incarnation(world: Arc<World>, queue: Arc<OpQueue>) {
    let life = Life::new(world.lives.fetch_add(1, Ordering::SeqCst) + 1);
    let ports = Ports {
        clock: world.clock.clone(),
        llm: Arc::new(SimLlm::new(Arc::clone(&world), Arc::clone(&life))),
        messenger: Arc::new(SimMessenger::new(Arc::clone(&world), Arc::clone(&life))),
        store: Arc::new(SimStore::new(Arc::clone(&world), Arc::clone(&life))),
        events: Arc::new(TraceSink::new(Arc::clone(&world), Arc::clone(&life))),
        workspace: world.workspace.clone(),
        tools: Arc::new(SimTools { world: Arc::clone(&world), life: Arc::clone(&life) }),
        telemetry: Arc::new(SimTelemetry { world: Arc::clone(&world), life: Arc::clone(&life) }),
    };
    let mut options = EngineOptions {
        breaker_failures_max: world.options.breaker_failures_max,
        error_backoff: world.options.error_backoff.clone(),
        breaker_cooldown: world.options.breaker_cooldown.clone(),
        alerts_target: world.options.alerts_target.clone(),
        run_retention: world.options.run_retention,
        runs_in_flight_max: world.options.runs_in_flight_max,
        prices: PriceTable {
            default_model: Some(crate::options::SIM_MODEL.to_owned()),
            models: std::collections::BTreeMap::from([(
                crate::options::SIM_MODEL.to_owned(),
                crate::options::SIM_PRICE,
            )]),
        },
        ..EngineOptions::default()
    };
    options.agent_default.daily_tokens_max = world.options.daily_tokens_max;
    options.agent_default.daily_cost_max_micros = world.options.daily_cost_max_micros;
    options.agent_default.allowed_targets = BTreeSet::from(["sim:inbox".to_owned()]);
    options.agent_default.llm_calls_per_day = world.options.llm_calls_per_day;
    options.agent_default.tools =
        world.options.agent_tools.iter().filter_map(|text| ToolPattern::parse(text).ok()).collect();
    options.agent_default.tool_calls_max = world.options.tool_calls_max;
    world.options.budget_zone.clone_into(&mut options.agent_default.timezone);
    options.global_caps = systole::core::budget::GlobalCaps {
        tokens: world.options.global_tokens_max,
        cost_micros: world.options.global_cost_max_micros,
        timezone: world.options.global_zone.to_owned(),
    };
    options.visibility.defaults = world.options.visibility;
    let config = world.config.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let engine = match driver::boot(ports, &config, options).await {
        Ok((engine, _)) => engine,
        Err(error) => {
            // A daemon whose start-up fails exits; its supervisor starts it again.
            world.record(Event::StartFailed { life: life.number, error: error.to_string() });
            life.crash(&world).await;
        }
    };
    record_started(&world, &life).await;
    apply_ops(&world, &life, &queue, &engine).await;
}

async fn record_started(world: &World, life: &Life) {
    let heartbeats = world.durable.load_heartbeats().await.unwrap_or_default();
    let mut running_rows = 0;
    for def in world.options.all_defs() {
        let executions = world.durable.executions(&def.key, usize::MAX).await.unwrap_or_default();
        running_rows += executions.iter().filter(|e| e.status == ExecutionStatus::Running).count();
    }
    let heartbeats = heartbeats.into_iter().map(|h| (h.def.key, h.state.enabled)).collect();
    world.record(Event::Started { life: life.number, running_rows, heartbeats });
}

async fn apply_ops(world: &World, life: &Life, queue: &OpQueue, engine: &EngineHandle) -> ! {
    loop {
        let next = queue.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
        let Some(op) = next else {
            queue.ready.notified().await;
            continue;
        };
        let op = resolved(world, op).await;
        let result = match &op {
            // (An edit into a one-shot at a trigger's slot is a `Create` by now: `resolved`.)
            Op::Create(def) | Op::OneShotAtLatestTrigger(def) => engine.upsert((**def).clone()).await.map(|()| true),
            Op::Delete(key) => engine.delete(key).await,
            Op::Disable(key) => {
                if own_slot_held_behind_trigger(world, key).await {
                    world.took(RarePath::DisableOfOwnSlotHeldBehindTrigger);
                }
                engine.set_enabled(key, false).await
            }
            Op::Enable(key) => {
                if one_shot_held_behind_run(world, key).await {
                    world.took(RarePath::EnableOfHeldOneShot);
                }
                if one_shot_failure_under_skip(world, key).await {
                    world.took(RarePath::EnableOverSkippedFailure);
                }
                if trigger_held_before_own_run(world, engine, key).await {
                    world.took(RarePath::EnableOverHeldTrigger);
                }
                if retired_one_shot_unrun(world, key).await {
                    world.took(RarePath::EnableOfRetiredOneShotUnrun);
                }
                match one_shot_off_trigger(world, key).await {
                    Some(OffTrigger::Latest) => world.took(RarePath::EnableOfOneShotOffTrigger),
                    Some(OffTrigger::Earlier) => {
                        world.took(RarePath::EnableOfOneShotOffTrigger);
                        world.took(RarePath::EnableOfOneShotOffEarlierTrigger);
                    }
                    None => {}
                }
                engine.set_enabled(key, true).await
            }
            Op::SetFile(agent, content) => {
                world.workspace.set_heartbeat_file(agent, content.as_deref());
                world.record(Event::WorkspaceChanged { agent: agent.clone(), content: content.clone() });
                Ok(true)
            }
            Op::Wake(agent, reason) => engine.request_now(agent, *reason).await,
            Op::Trigger(key) => {
                if one_shot_run_going(world, key).await {
                    world.took(RarePath::TriggerBesideOneShotRun);
                }
                engine.trigger(key).await.map(|outcome| matches!(outcome, TriggerOutcome::Queued { .. }))
            }
            Op::Pause(agent, minutes) => engine.pause(agent, *minutes).await.map(|_| true),
            Op::Resume(agent) => engine.resume(agent).await,
            Op::Kill => {
                if one_shot_with_only_triggers(world).await {
                    world.took(RarePath::KillWithOnlyTriggersOfOneShot);
                }
                if one_shot_retry_below_trigger_success(world).await {
                    world.took(RarePath::KillDuringRetryBelowTriggerSuccess);
                }
                life.crash(world).await
            }
            Op::Backfill(key, span) => backfill(world, engine, key, *span).await,
            Op::LogUnreadable(key) => {
                let fault = crate::one_shot_triggers::PlantedStoreFault::LogRead(key.clone());
                world.planted_store_faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(fault);
                Ok(true)
            }
            Op::Reload(defs) => {
                // The file changes first; a crash before the reload is applied still
                // restarts on the new file.
                *world.config.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = defs.clone();
                if one_shot_below_armed_slot(world, defs).await {
                    world.took(RarePath::OneShotBelowArmedSlot);
                }
                engine.reload_heartbeats(defs).await.map(|_| true)
            }
            Op::UserTurn(agent, hold) => {
                // Held by a task of this life: a crash ends the conversation with the process.
                let (lanes, agent, hold, clock) = (engine.lanes(), agent.clone(), *hold, Arc::clone(&world.clock));
                tokio::spawn(async move {
                    let turn = lanes.begin_user_turn(&agent).await;
                    clock.sleep(hold).await;
                    drop(turn);
                });
                Ok(true)
            }
        };
        life.ensure_alive().await;
        match result {
            Ok(applied) => world.record(Event::OpAcked { life: life.number, op, applied }),
            Err(error) => world.record(Event::OpFailed { life: life.number, op, error: error.to_string() }),
        }
    }
}

/// `op` as it is applied: an edit into a one-shot at the latest trigger's slot is the
/// `Create` of that one-shot, its instant read from the run log now (the instant it came
/// with when the log has no trigger of it: the trigger's claim failed, say).
async fn resolved(world: &World, op: Op) -> Op {
    let Op::OneShotAtLatestTrigger(mut def) = op else { return op };
    let executions = world.durable.executions(&def.key, usize::MAX).await.unwrap_or_default();
    if let Some(slot) = executions.iter().filter(|execution| execution.triggered).map(|execution| execution.slot).max()
    {
        def.schedule = systole::core::schedule::Schedule::At(slot);
    }
    Op::Create(def)
}

/// Whether `key` is a stored one-shot, enabled, whose instant has come by the wall clock
/// while a run of its id is going and no slot at or after the instant is in the run log:
/// its slot is held behind that run (the held one-shot enable scenario), or waits for a place.
async fn one_shot_held_behind_run(world: &World, key: &systole::core::ids::HeartbeatKey) -> bool {
    use systole::core::schedule::Schedule;
    let stored = world.durable.load_heartbeats().await.unwrap_or_default();
    let Some(job) = stored.iter().find(|job| &job.def.key == key) else { return false };
    let Schedule::At(instant) = job.def.schedule else { return false };
    if !job.state.enabled || instant > world.clock.now().wall {
        return false;
    }
    let executions = world.durable.executions(key, usize::MAX).await.unwrap_or_default();
    executions.iter().any(|execution| execution.status == ExecutionStatus::Running)
        && !executions.iter().any(|execution| execution.slot >= instant)
}

/// Whether a stored one-shot, enabled, has rows at or after its instant and all of them an
/// operator's triggers (the one-shot trigger scenario's kill before the jittered own run).
async fn one_shot_with_only_triggers(world: &World) -> bool {
    for job in world.durable.load_heartbeats().await.unwrap_or_default() {
        if !job.state.enabled || !matches!(job.def.schedule, systole::core::schedule::Schedule::At(_)) {
            continue;
        }
        let Some((_, _, rows)) = one_shot_rows(world, &job.def.key).await else { continue };
        if !rows.is_empty() && rows.iter().all(|row| row.triggered) {
            return true;
        }
    }
    false
}

/// Whether a stored one-shot, enabled, has a run of its own going (its retry) and, at or
/// after its instant, a failed run of its own below an operator's successful trigger.
async fn one_shot_retry_below_trigger_success(world: &World) -> bool {
    for job in world.durable.load_heartbeats().await.unwrap_or_default() {
        if !job.state.enabled || !matches!(job.def.schedule, systole::core::schedule::Schedule::At(_)) {
            continue;
        }
        let Some((_, _, rows)) = one_shot_rows(world, &job.def.key).await else { continue };
        let own = |status: ExecutionStatus| rows.iter().filter(move |row| !row.triggered && row.status == status);
        let trigger_success = rows.iter().filter(|row| row.triggered && row.status == ExecutionStatus::Succeeded);
        let Some(success) = trigger_success.map(|row| row.slot).max() else { continue };
        let failed_below = own(ExecutionStatus::Failed).any(|row| row.slot < success);
        let retry_going = own(ExecutionStatus::Running).any(|row| row.slot > success);
        if failed_below && retry_going {
            return true;
        }
    }
    false
}

/// The stored one-shot `key`, enabled or not, its instant (to the millisecond) and its run
/// log's rows at or after it; `None` for anything else.
async fn one_shot_rows(
    world: &World,
    key: &systole::core::ids::HeartbeatKey,
) -> Option<(systole::core::heartbeat::Heartbeat, jiff::Timestamp, Vec<systole::ports::store::Execution>)> {
    use systole::core::schedule::Schedule;
    let stored = world.durable.load_heartbeats().await.unwrap_or_default();
    let job = stored.into_iter().find(|job| &job.def.key == key)?;
    let Schedule::At(instant) = job.def.schedule else { return None };
    let executions = world.durable.executions(key, usize::MAX).await.unwrap_or_default();
    let rows = executions.into_iter().filter(|execution| execution.slot >= instant).collect();
    Some((job, systole::core::slots::truncate_to_millis(instant), rows))
}

/// Whether `key` is a stored one-shot, enabled, whose instant an operator's trigger's row
/// holds, with nothing of its own logged at or after it (the one-shot at a trigger's
/// millisecond scenario), and whether a later trigger of it is logged; `None` if not.
async fn one_shot_off_trigger(world: &World, key: &systole::core::ids::HeartbeatKey) -> Option<OffTrigger> {
    let (job, instant, rows) = one_shot_rows(world, key).await?;
    let off_trigger = job.state.enabled
        && rows.iter().any(|execution| execution.triggered && execution.slot == instant)
        && rows.iter().all(|execution| execution.triggered);
    let later_trigger = rows.iter().any(|execution| execution.slot > instant);
    off_trigger.then_some(if later_trigger { OffTrigger::Earlier } else { OffTrigger::Latest })
}

/// Which trigger holds a one-shot's instant, for [`one_shot_off_trigger`].
enum OffTrigger {
    /// The latest trigger of it logged.
    Latest,
    /// One with a later trigger of it logged after it.
    Earlier,
}

/// Whether `key` is a stored one-shot the engine retired (disabled as out of slots) whose
/// run log holds nothing of its own at or after its instant, only operator's triggers (the
/// retired one-shot revived scenario).
async fn retired_one_shot_unrun(world: &World, key: &systole::core::ids::HeartbeatKey) -> bool {
    let Some((job, _, rows)) = one_shot_rows(world, key).await else { return false };
    let retired =
        !job.state.enabled && job.state.disabled_reason.as_deref() == Some(systole::driver::engine::NO_MORE_SLOTS);
    retired && rows.iter().all(|execution| execution.triggered)
}

/// Whether `key` is a stored one-shot, enabled, with a run of it at or after its instant
/// going (the one-shot trigger scenario).
async fn one_shot_run_going(world: &World, key: &systole::core::ids::HeartbeatKey) -> bool {
    let Some((job, _, rows)) = one_shot_rows(world, key).await else { return false };
    job.state.enabled && rows.iter().any(|execution| execution.status == ExecutionStatus::Running)
}

/// Whether `key` is a stored one-shot, enabled, whose jittered own run is due, with only an
/// operator's trigger of it going and nothing of its own logged (the one-shot trigger
/// scenario's disable while held, ADR 0050).
async fn own_slot_held_behind_trigger(world: &World, key: &systole::core::ids::HeartbeatKey) -> bool {
    let Some((_, own_due)) = one_shot_own_due(world, key).await else { return false };
    let Some((job, _, rows)) = one_shot_rows(world, key).await else { return false };
    job.state.enabled
        && own_due <= world.clock.now().wall
        && rows.iter().any(|row| row.triggered && row.status == ExecutionStatus::Running)
        && rows.iter().all(|row| row.triggered)
}

/// Whether `key` is a stored one-shot, enabled, whose jittered own run is not due yet, with
/// a run of it going and a slot held behind that run, and only operator's triggers in its
/// log at or after its instant: what is held is a trigger (the enable over a held trigger).
async fn trigger_held_before_own_run(
    world: &World,
    engine: &EngineHandle,
    key: &systole::core::ids::HeartbeatKey,
) -> bool {
    let Some((instant, own_due)) = one_shot_own_due(world, key).await else { return false };
    let now = world.clock.now().wall;
    if !(instant..own_due).contains(&now) {
        return false;
    }
    let Some((job, _, rows)) = one_shot_rows(world, key).await else { return false };
    if !job.state.enabled || rows.is_empty() || !rows.iter().all(|row| row.triggered) {
        return false;
    }
    let views = engine.inspect().await.unwrap_or_default();
    views.iter().any(|view| &view.key == key && view.runs_in_flight > 0 && view.waiting > 0)
}

/// The instant of the stored one-shot `key` and when its own run is due, its jitter added;
/// `None` for anything else.
async fn one_shot_own_due(
    world: &World,
    key: &systole::core::ids::HeartbeatKey,
) -> Option<(jiff::Timestamp, jiff::Timestamp)> {
    let stored = world.durable.load_heartbeats().await.unwrap_or_default();
    let job = stored.iter().find(|job| &job.def.key == key)?;
    let systole::core::schedule::Schedule::At(instant) = job.def.schedule else { return None };
    let jitter = systole::core::policy::jitter_offset(key, job.def.policy.jitter_max);
    Some((instant, instant.checked_add(jitter).ok()?))
}

/// Whether `key` is a stored one-shot whose latest run at or after its instant failed, and
/// a skip is logged at a later slot (the one-shot trigger scenario's disable and enable).
async fn one_shot_failure_under_skip(world: &World, key: &systole::core::ids::HeartbeatKey) -> bool {
    let Some((_, _, rows)) = one_shot_rows(world, key).await else { return false };
    let ran = rows.iter().filter(|execution| execution.status != ExecutionStatus::Skipped);
    let Some(last) = ran.max_by_key(|execution| execution.slot) else { return false };
    matches!(last.status, ExecutionStatus::Failed | ExecutionStatus::TimedOut)
        && rows.iter().any(|execution| execution.status == ExecutionStatus::Skipped && execution.slot > last.slot)
}

/// Whether `defs` make a stored recurring job, enabled and armed, a one-shot whose instant
/// comes before its armed slot (the one-shot takeover scenario).
async fn one_shot_below_armed_slot(world: &World, defs: &[systole::core::heartbeat::HeartbeatDef]) -> bool {
    use systole::core::schedule::Schedule;
    let stored = world.durable.load_heartbeats().await.unwrap_or_default();
    defs.iter().any(|def| {
        let Schedule::At(instant) = def.schedule else { return false };
        stored.iter().any(|job| {
            job.def.key == def.key
                && job.state.enabled
                && !matches!(job.def.schedule, Schedule::At(_))
                && job.state.next_slot.is_some_and(|armed| armed > instant)
        })
    })
}

/// An operator's backfill: the slots of the last `span` by the wall clock, as the API
/// computes them. A window it cannot serve (an `every` schedule, too many slots) is
/// refused before the engine hears of it, like the API's 422.
async fn backfill(
    world: &World,
    engine: &EngineHandle,
    key: &systole::core::ids::HeartbeatKey,
    span: Duration,
) -> Result<bool, systole::driver::EngineError> {
    let heartbeats = world.durable.load_heartbeats().await.unwrap_or_default();
    let Some(job) = heartbeats.into_iter().find(|job| job.def.key == *key) else { return Ok(false) };
    let now = world.clock.wall();
    let from = now.checked_sub(jiff::SignedDuration::try_from(span).unwrap_or_default()).unwrap_or(now);
    match systole::core::backfill::window_slots(&job.def.schedule, from, now, now) {
        Ok(slots) => {
            let armed = job.state.enabled && job.state.next_slot.is_some();
            let accepted =
                engine.backfill(key, slots).await.map(|outcome| matches!(outcome, TriggerOutcome::Backfilling { .. }));
            if armed && matches!(accepted, Ok(true)) {
                world.took(RarePath::BackfillBesideArmedSlot);
            }
            accepted
        }
        Err(_) => Ok(false),
    }
}
