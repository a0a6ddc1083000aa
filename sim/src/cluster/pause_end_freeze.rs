//! A node stopped at the write that deletes a pause (its end, or an operator's resume),
//! while an operator stores a newer pause of the same agent (ADR 0005, amended). The newer
//! pause's command waits for the stopped node. Two moments:
//! - inside the write's transaction (cluster seed 31450167444): it commits when the node
//!   wakes, after the newer pause's write; an end must delete only the pause that ended,
//!   or the partition's next engine (the lease ran out during the freeze) loads no pause;
//! - just after the write committed, before the node sees its answer: here an operator
//!   resumes the agent before the first pause ends, and the resume's command reaches the
//!   engine after the newer pause's, though its write came first; it must not end the
//!   pause the store holds.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::ports::clock::{Clock, Mono};

use super::freezes::Moment;
use super::{CallKind, ClusterWorld, Fault, FaultKind, OperatorCall, NODES_COUNT, REPLY_WAIT_SECS_MAX, SKEW_SECS_MAX};

/// The share of seeds with this workload.
const PROBABILITY: f64 = 0.5;
/// The first pause's minutes: short, so its end falls within the faults.
const FIRST_PAUSE_MINUTES_MAX: u32 = 2;
/// The newer pause's minutes: long enough that a takeover comes within it.
const NEWER_PAUSE_MINUTES: std::ops::RangeInclusive<u32> = 3..=8;
/// How long past the first pause's end (as the asking node's clock set it) the freeze may
/// wait for the owner to write it: the owner's clock may be behind by the clocks' spread.
const END_WAIT_SECS: u64 = 2 * SKEW_SECS_MAX as u64 + 30;
/// When the resume comes: at least this long after the first pause, and this long before
/// its end.
const RESUME_AFTER_SECS_MIN: u64 = 10;
const RESUME_BEFORE_END_SECS: u64 = 10;
/// Time kept clear of the other faults on either side, and tries at a clear window.
const CLEAR_SECS: u64 = 30;
const WINDOW_TRIES: usize = 20;

/// What a seed's workload is made of.
#[derive(Debug, Clone, Copy)]
pub struct PauseEndFreeze {
    /// The first pause, asked of `node` about agent `agent` (an index).
    pub at: Duration,
    pub node: usize,
    pub agent: usize,
    pub minutes: u32,
    /// How long the owner stays frozen in the end's write: less than its lease, so the
    /// database keeps the transaction (its idle bound is the lease) while the lease
    /// itself, renewed a third of it before, most often runs out.
    pub length: Duration,
    /// When the newer pause is asked, after the freeze took hold, of which node, and for
    /// how long.
    pub into: Duration,
    pub again_node: usize,
    pub again_minutes: u32,
    /// Where the write stops its node: half in its transaction (the first pause's end),
    /// half after its commit (a resume's, asked this long after the first pause).
    pub moment: Moment,
    pub resume_after: Option<Duration>,
}

impl PauseEndFreeze {
    /// The whole workload's span, from the first pause to the thaw at the latest.
    fn span(&self) -> Duration {
        Duration::from_secs(u64::from(self.minutes) * 60 + END_WAIT_SECS) + self.length
    }
}

/// In half of the seeds: a window clear of every other fault (their stops and freezes
/// must not meet this one's), within the faults' phase. `faults` are in time order.
pub fn draw(
    rng: &mut ChaCha8Rng,
    faults: &[(Duration, usize, Fault)],
    agents: usize,
    lease: Duration,
    safety: Duration,
) -> Option<PauseEndFreeze> {
    if !rng.random_bool(PROBABILITY) {
        return None;
    }
    let minutes = rng.random_range(1..=FIRST_PAUSE_MINUTES_MAX);
    let length = lease.mul_f64(rng.random_range(0.7..0.95));
    let mut workload = PauseEndFreeze {
        at: Duration::ZERO,
        node: rng.random_range(0..NODES_COUNT),
        agent: rng.random_range(0..agents),
        minutes,
        length,
        into: length.mul_f64(rng.random_range(0.1..0.5)),
        again_node: rng.random_range(0..NODES_COUNT),
        again_minutes: rng.random_range(NEWER_PAUSE_MINUTES),
        moment: Moment::InTransaction,
        resume_after: None,
    };
    if rng.random_bool(0.5) {
        workload.moment = Moment::AfterCommit;
        let within = u64::from(minutes) * 60 - RESUME_BEFORE_END_SECS;
        workload.resume_after = Some(Duration::from_secs(rng.random_range(RESUME_AFTER_SECS_MIN..within)));
    }
    let clear = Duration::from_secs(CLEAR_SECS);
    let latest = safety.checked_sub(workload.span() + clear)?.as_secs();
    // The fault loop runs its faults one after another: one may start late, after the one
    // before it ends (seed 31450240854: a delayed kill met this workload's freeze). Each
    // fault's window runs from its time to its latest end.
    let mut latest_end = Duration::ZERO;
    let busy: Vec<(Duration, Duration)> = faults
        .iter()
        .map(|(at, _, fault)| {
            latest_end = latest_end.max(*at) + busy_for(fault);
            (*at, latest_end)
        })
        .collect();
    for _ in 0..WINDOW_TRIES {
        let at = Duration::from_secs(rng.random_range(60..latest.max(61)));
        let end = at + workload.span();
        if busy.iter().all(|(from, to)| end + clear <= *from || *to + clear <= at) {
            workload.at = at;
            return Some(workload);
        }
    }
    None
}

/// How long a fault of the fault loop may keep its node stopped, cut off or away, from
/// its time.
fn busy_for(fault: &Fault) -> Duration {
    let waits = Duration::from_secs(REPLY_WAIT_SECS_MAX);
    match *fault {
        Fault::Pause(length) | Fault::Cut(length) | Fault::Kill(length) | Fault::Leave(length) => length,
        Fault::PauseWithReply(length) | Fault::FreezeInTransaction(length) => waits + length,
    }
}

/// Runs the workload: the first pause, a freeze asked for at its end (or at a resume's),
/// the newer pause once the owner is stopped, the thaw. `first_op` numbers its calls after
/// the operator's.
pub async fn run(
    world: Arc<ClusterWorld>,
    handle: madsim::runtime::Handle,
    ids: Vec<madsim::task::NodeId>,
    origin: Mono,
    first_op: usize,
) {
    let Some(workload) = world.options.pause_end_freeze else { return };
    let Some(agent) = world.options.heartbeats.get(workload.agent).map(|def| def.key.agent.clone()) else { return };
    world.clock.sleep_until(origin + workload.at).await;
    let kind = CallKind::Pause;
    let (node, minutes) = (workload.node, workload.minutes);
    let first = OperatorCall { at: workload.at, node, agent: workload.agent, own: false, kind, minutes };
    world.ask(first_op, first).await;
    world.freezes.request_at_pause_end(&agent, workload.moment);
    // The resume's call waits for its node to wake, so it goes on its own.
    let resumer = workload.resume_after.map(|after| {
        let world = Arc::clone(&world);
        let resume = OperatorCall { kind: CallKind::Resume, minutes: 0, ..first };
        tokio::spawn(async move {
            world.clock.sleep_until(origin + workload.at + after).await;
            world.ask(first_op + 2, resume).await;
        })
    });
    let wait = Duration::from_secs(u64::from(workload.minutes) * 60 + END_WAIT_SECS);
    let frozen = tokio::select! {
        biased;
        node = world.freezes.holding_at_pause_end() => Some(node),
        () = world.clock.sleep_until(origin + workload.at + wait) => {
            if world.freezes.withdraw_at_pause_end() { None } else { Some(world.freezes.holding_at_pause_end().await) }
        }
    };
    let Some(name) = frozen else {
        if let Some(resumer) = resumer {
            let _ = resumer.await;
        }
        return;
    };
    let Some(index) = world.options.nodes.iter().position(|(node, _, _)| *node == name) else { return };
    let fault = match workload.moment {
        Moment::InTransaction => FaultKind::FrozenAtPauseEnd,
        Moment::AfterCommit => FaultKind::StoppedAfterPauseEnd,
    };
    world.fault(&name, fault, format!("{}s", workload.length.as_secs_f64()));
    let again = OperatorCall {
        at: workload.at,
        node: workload.again_node,
        agent: workload.agent,
        own: false,
        kind,
        minutes: workload.again_minutes,
    };
    // The newer pause is stored while the owner is stopped; its call waits for the owner.
    let asker = tokio::spawn({
        let world = Arc::clone(&world);
        async move {
            world.clock.sleep(workload.into).await;
            world.ask(first_op + 1, again).await;
        }
    });
    world.hold_frozen(&handle, ids[index], &name, workload.length).await;
    let _ = asker.await;
    if let Some(resumer) = resumer {
        let _ = resumer.await;
    }
}
