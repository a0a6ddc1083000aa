//! Admission before the claim (ADR 0023): a slot is claimed only when its run can start,
//! so the runs working at once in one life never outnumber `runs_in_flight_max`, and every
//! `RunStarted` is a run that started. A run done working holds no place while its result
//! waits for its write, but those waiting are bounded too (ADR 0042). Judged from the
//! engine's own start, work-done and end events.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use systole::core::ids::HeartbeatKey;
use systole::limits::RESULTS_WAITING_PER_PLACE_MAX;

use super::{fail, Step, PASS_SLACK};

pub const RUN_ADMITTED: &str = "run-admitted";
pub const CLAIM_STARTS: &str = "claimed-slot-starts";

#[derive(Debug)]
pub struct AdmissionModel {
    max: usize,
    /// Runs started and not yet reported ended, by life, each with whether its work is
    /// done (its result waiting for its write).
    going: BTreeMap<u32, BTreeMap<(HeartbeatKey, Timestamp), bool>>,
    /// Starts that took the last free place: how often a seed ran its engine full.
    pub filled: u64,
    /// Starts that found every place's run still going, some only waiting for its result's
    /// write: the places those had freed (ADR 0042).
    pub freed_place_starts: u64,
    /// When the engine has been full since (no run could start), by the trace's clock.
    full_since: Option<Duration>,
    /// Every span it was full, earliest first.
    full_spans: Vec<(Duration, Duration)>,
    /// Slots the store says a life claimed, not yet started, with when: a claimed slot's
    /// run starts in the pass that claimed it (its definition read with the pass's
    /// claims, ADR 0026), or fails at once with a result; it never waits.
    claimed: BTreeMap<(u32, HeartbeatKey, Timestamp), Duration>,
}

impl AdmissionModel {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            going: BTreeMap::new(),
            filled: 0,
            freed_place_starts: 0,
            full_since: None,
            full_spans: Vec::new(),
            claimed: BTreeMap::new(),
        }
    }

    /// The store wrote a claim of `slot` for life `life`.
    pub fn claimed(&mut self, at: Duration, life: u32, key: &HeartbeatKey, slot: Timestamp) {
        self.claimed.insert((life, key.clone(), slot), at);
    }

    /// Every claim made before `at` has started by then: the pass that claimed it started
    /// its run in the same instant, so a claim that outlives it was left unrun.
    pub fn claims_started(&self, at: Duration) -> Step {
        match self.claimed.iter().find(|(_, claimed_at)| **claimed_at < at) {
            Some(((life, key, slot), claimed_at)) => fail(
                CLAIM_STARTS,
                format!("{key} slot {slot} was claimed in life {life} at {claimed_at:?} and had not started by {at:?}"),
            ),
            None => Ok(()),
        }
    }

    /// Runs of `life` working, and all of its runs not yet ended.
    fn counts(&self, life: u32) -> (usize, usize) {
        let Some(going) = self.going.get(&life) else { return (0, 0) };
        (going.values().filter(|writing| !**writing).count(), going.len())
    }

    /// Whether no run of `life` could start: every place is taken, or as many results
    /// wait for their write as may.
    fn full(&self, life: u32) -> bool {
        let (working, all) = self.counts(life);
        working >= self.max || all >= self.max * (1 + RESULTS_WAITING_PER_PLACE_MAX)
    }

    pub fn started(&mut self, at: Duration, life: u32, key: &HeartbeatKey, slot: Timestamp) -> Step {
        let (working, all) = self.counts(life);
        if self.full(life) {
            return fail(
                RUN_ADMITTED,
                format!(
                    "{key} slot {slot} started while {working} runs were working and {} results waited for their write; at most {} may work, and {} wait",
                    all - working,
                    self.max,
                    self.max * RESULTS_WAITING_PER_PLACE_MAX
                ),
            );
        }
        self.freed_place_starts += u64::from(all >= self.max);
        self.going.entry(life).or_default().insert((key.clone(), slot), false);
        self.claimed.remove(&(life, key.clone(), slot));
        if self.full(life) {
            self.filled += 1;
            self.full_since = Some(at);
        }
        Ok(())
    }

    /// The driver heard the run's work done: its place is free.
    pub fn work_done(&mut self, at: Duration, life: u32, key: &HeartbeatKey, slot: Timestamp) {
        let Some(writing) = self.going.get_mut(&life).and_then(|going| going.get_mut(&(key.clone(), slot))) else {
            return;
        };
        *writing = true;
        if !self.full(life) {
            self.not_full(at);
        }
    }

    /// The driver heard the run end (its result, or its task lost).
    pub fn ended(&mut self, at: Duration, life: u32, key: &HeartbeatKey, slot: Timestamp) {
        if let Some(going) = self.going.get_mut(&life) {
            if going.remove(&(key.clone(), slot)).is_some() && !self.full(life) {
                self.not_full(at);
            }
        }
    }

    /// A crash ends every run of that life.
    pub fn crashed(&mut self, at: Duration, life: u32) {
        self.going.remove(&life);
        // Crashed between the claim and the start: a restart marks its row interrupted.
        self.claimed.retain(|(claimed_life, _, _), _| *claimed_life != life);
        self.not_full(at);
    }

    fn not_full(&mut self, at: Duration) {
        if let Some(since) = self.full_since.take() {
            self.full_spans.push((since, at));
        }
    }

    /// Whether the engine was full at `at`, or became full in the pass deciding `at`: a
    /// slot due then may pass undecided, its heartbeat's catch-up policy deciding later
    /// what of the slots that passed runs. (Two slots due at one instant with one place
    /// left: the pass starts one, a few nanoseconds on, and the other waits; seed
    /// 1927870627425.)
    pub fn full_at(&self, at: Duration) -> bool {
        let pass_end = at + PASS_SLACK;
        self.full_since.is_some_and(|since| since <= pass_end)
            || self.spans_from(at).first().is_some_and(|(start, _)| *start <= pass_end)
    }

    /// How long within `from..to` the engine was full: due slots wait that long for a
    /// place (ADR 0023), so a heartbeat's cadence stretches by it.
    pub fn full_within(&self, from: Duration, to: Duration) -> Duration {
        let open = self.full_since.map(|since| (since, to));
        self.spans_from(from)
            .iter()
            .copied()
            .take_while(|(start, _)| *start <= to)
            .chain(open)
            .map(|(start, end)| end.min(to).saturating_sub(start.max(from)))
            .sum()
    }

    /// The spans that end at `at` or later. They were recorded one after another in the
    /// run's time, so they are sorted and apart: a search, where a walk of all of them made
    /// every check longer as a seed went on.
    fn spans_from(&self, at: Duration) -> &[(Duration, Duration)] {
        let first = self.full_spans.partition_point(|(_, end)| *end < at);
        self.full_spans.get(first..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use systole::core::ids::{AgentId, HeartbeatId};

    fn run(name: &str) -> (HeartbeatKey, Timestamp) {
        let key = HeartbeatKey {
            agent: AgentId::new("main").expect("an id"),
            heartbeat: HeartbeatId::new(name).expect("an id"),
        };
        (key, Timestamp::from_second(60).expect("in range"))
    }

    /// One place: a run frees it when its work is done, and one result at most may wait
    /// for its write beside the run that took the place (ADR 0042).
    #[test]
    fn a_place_frees_at_work_done_and_results_waiting_are_bounded() {
        let mut admission = AdmissionModel::new(1);
        let at = Duration::from_secs(1);
        let [(a, slot), (b, _), (c, _)] = [run("a"), run("b"), run("c")];
        admission.started(at, 1, &a, slot).expect("the first takes the place");
        let (invariant, _) = admission.started(at, 1, &b, slot).expect_err("the place is taken");
        assert_eq!(invariant, RUN_ADMITTED);
        admission.work_done(at, 1, &a, slot);
        admission.started(at, 1, &b, slot).expect("a's work is done: its place is free");
        assert_eq!(admission.freed_place_starts, 1);
        admission.work_done(at, 1, &b, slot);
        let (invariant, message) = admission.started(at, 1, &c, slot).expect_err("two results wait already");
        assert_eq!(invariant, RUN_ADMITTED);
        assert!(message.contains("2 results waited"), "{message}");
        admission.ended(at, 1, &a, slot);
        admission.started(at, 1, &c, slot).expect("a's result is written");
        // Another life's runs hold nothing in this one.
        admission.started(at, 2, &a, slot).expect("a new life has its own places");
    }
}
