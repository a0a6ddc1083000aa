use proptest::prelude::*;

use super::*;
use crate::core::ids::{AgentId, HeartbeatId};

fn key(n: u8) -> HeartbeatKey {
    HeartbeatKey { agent: AgentId::new("a").expect("id"), heartbeat: HeartbeatId::new(format!("h{n}")).expect("id") }
}

/// What a store's read for a fill brings from `rows` (heartbeat, digest, finish): the
/// latest finish of each reply at or after `from_ms`, newest first, at most `bound`.
fn read_fill(rows: &[(u8, String, i64)], from_ms: i64, bound: usize) -> Fill {
    let mut latest: HashMap<(u8, String), i64> = HashMap::new();
    for (heartbeat, digest, finished) in rows.iter().filter(|(_, _, finished)| *finished >= from_ms) {
        let entry = latest.entry((*heartbeat, digest.clone())).or_insert(*finished);
        *entry = (*entry).max(*finished);
    }
    let delivered =
        latest.into_iter().map(|((heartbeat, digest), finished)| (key(heartbeat), digest, finished)).collect();
    Fill::newest(from_ms, delivered, bound)
}

#[test]
fn a_cold_index_answers_nothing_and_a_filled_one_answers_from_its_floor() {
    let mut index = RecentDeliveries::new(8);
    index.record(&key(1), "d", 500, index.generation());
    assert_eq!(index.answer(&key(1), "d", 0), None, "cold: the store is read");
    let fill = read_fill(&[(2, "e".into(), 300)], 100, 8);
    assert!(index.fill(fill, index.generation()));
    assert_eq!(index.floor_ms(), Some(100));
    assert_eq!(index.answer(&key(1), "d", 100), Some(true), "recorded while cold, kept");
    assert_eq!(index.answer(&key(1), "d", 501), Some(false));
    assert_eq!(index.answer(&key(2), "e", 300), Some(true));
    assert_eq!(index.answer(&key(2), "x", 100), Some(false));
    assert_eq!(index.answer(&key(2), "e", 99), None, "before the floor: the store is read");
}

#[test]
fn beyond_its_bound_the_older_half_goes_and_the_floor_rises_past_it() {
    let mut index = RecentDeliveries::new(4);
    assert!(index.fill(Fill { from_ms: 0, ..Fill::default() }, index.generation()));
    for (n, finished) in [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)] {
        index.record(&key(n), "d", finished, index.generation());
    }
    assert_eq!(index.len(), 3, "the two oldest of five went");
    assert_eq!(index.floor_ms(), Some(21));
    assert_eq!(index.answer(&key(1), "d", 0), None);
    assert_eq!(index.answer(&key(3), "d", 21), Some(true));
    assert_eq!(index.answer(&key(1), "d", 21), Some(false), "it finished before 21");
}

#[test]
fn a_fill_that_stopped_at_its_bound_answers_only_after_the_oldest_it_brought() {
    let rows: Vec<(u8, String, i64)> = (0..6).map(|n| (n, "d".to_owned(), i64::from(n) * 10)).collect();
    let mut index = RecentDeliveries::new(3);
    assert!(index.fill(read_fill(&rows, 0, 3), index.generation()));
    assert_eq!(index.floor_ms(), Some(31));
    assert_eq!(index.answer(&key(2), "d", 30), None);
    assert_eq!(index.answer(&key(5), "d", 31), Some(true));
}

#[test]
fn a_fill_or_a_write_that_began_before_a_forget_vouches_for_nothing() {
    let mut index = RecentDeliveries::new(8);
    let before = index.generation();
    index.forget();
    assert!(!index.fill(read_fill(&[(1, "d".into(), 5)], 0, 8), before), "the stale fill is dropped");
    assert_eq!(index.answer(&key(1), "d", 0), None);
    assert!(index.fill(read_fill(&[], 0, 8), index.generation()));
    assert_eq!(index.answer(&key(1), "d", 0), Some(false));
    index.record(&key(1), "d", 7, before);
    assert_eq!(index.answer(&key(1), "d", 0), None, "a write older than the forget makes it cold");
    assert!(index.is_empty());
}

#[derive(Debug, Clone)]
enum Step {
    /// A delivery committed (heartbeat, digest, finish).
    Deliver(u8, u8, i64),
    /// A read of the deliveries from a time, made whole into the index.
    Fill(i64),
    /// Runs deleted (those finished before the time), the index forgetting.
    Prune(i64),
    /// A write that began, then runs were deleted, then it committed.
    WriteAcrossPrune(u8, u8, i64, i64),
    /// A fill read before runs were deleted, handed in after.
    FillAcrossPrune(i64, i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u8..4, 0u8..3, 0i64..100).prop_map(|(k, d, t)| Step::Deliver(k, d, t)),
        2 => (0i64..100).prop_map(Step::Fill),
        1 => (0i64..100).prop_map(Step::Prune),
        1 => (0u8..4, 0u8..3, 0i64..100, 0i64..100).prop_map(|(k, d, t, p)| Step::WriteAcrossPrune(k, d, t, p)),
        1 => (0i64..100, 0i64..100).prop_map(|(from, p)| Step::FillAcrossPrune(from, p)),
    ]
}

proptest! {
    /// Whatever the index answers is what the store's rows say.
    #[test]
    fn every_answer_is_the_stores(steps in prop::collection::vec(step(), 1..60), bound in 1usize..6) {
        let mut rows: Vec<(u8, String, i64)> = Vec::new();
        let mut index = RecentDeliveries::new(bound);
        for step in steps {
            match step {
                Step::Deliver(k, d, t) => {
                    let generation = index.generation();
                    rows.push((k, d.to_string(), t));
                    index.record(&key(k), &d.to_string(), t, generation);
                }
                Step::Fill(from) => {
                    let generation = index.generation();
                    index.fill(read_fill(&rows, from, index.entries_max()), generation);
                }
                Step::Prune(before) => {
                    rows.retain(|(_, _, finished)| *finished >= before);
                    index.forget();
                }
                Step::WriteAcrossPrune(k, d, t, before) => {
                    let generation = index.generation();
                    rows.retain(|(_, _, finished)| *finished >= before);
                    index.forget();
                    rows.push((k, d.to_string(), t));
                    index.record(&key(k), &d.to_string(), t, generation);
                }
                Step::FillAcrossPrune(from, before) => {
                    let generation = index.generation();
                    let fill = read_fill(&rows, from, index.entries_max());
                    rows.retain(|(_, _, finished)| *finished >= before);
                    index.forget();
                    prop_assert!(!index.fill(fill, generation));
                }
            }
            prop_assert!(index.len() <= index.entries_max());
            for (k, d, since) in (0..4u8).flat_map(|k| (0..3u8).flat_map(move |d| [0i64, 30, 60, 99].map(|s| (k, d, s)))) {
                if let Some(found) = index.answer(&key(k), &d.to_string(), since) {
                    let truth = rows.iter().any(|(rk, rd, finished)| *rk == k && *rd == d.to_string() && *finished >= since);
                    prop_assert_eq!(found, truth, "heartbeat {} digest {} since {}", k, d, since);
                }
            }
        }
    }
}
