//! Partition leases and fencing, on the memory store and a real PostgreSQL (ADR 0017): terms grow with every
//! grant, expiry is the database's, and a node whose lease was taken over writes nothing
//! more, not even a write it had in flight when the takeover happened.

#![allow(clippy::disallowed_methods)] // leases expire by the real database server's clock

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use common::postgres_server::{self, POSTGRES_TEST_PASSWORD};
use common::{def, key, start};
use systole::adapters::system_clock::SystemClock;
use systole::core::ids::{AgentId, HeartbeatKey};
use systole::core::partition::{partition_of, PARTITIONS_COUNT};
use systole::core::pause::PauseRecord;
use systole::core::schedule::Schedule;
use systole::core::usage::RunUsage;
use systole::ports::leases::{Lease, Leases};
use systole::ports::store::{
    ClaimOutcome, DeliveryStatus, ExecutionStatus, NextSlot, RunRecord, SkipRecord, SlotClaim, Store, StoreError,
};
use systole::store::memory::MemoryStore;
use systole::store::postgres::PostgresStore;

const TTL: Duration = Duration::from_secs(30);

async fn postgres() -> PostgresStore {
    let url = postgres_server::fresh_database().await;
    PostgresStore::connect(&url, Some(POSTGRES_TEST_PASSWORD)).await.expect("connect")
}

/// A store with leases: what a cluster's nodes share.
trait LeaseStore: Store + Leases {}
impl<T: Store + Leases> LeaseStore for T {}

/// Runs `check` on the memory store (leases by the real clock, like a database's) and on
/// PostgreSQL: the simulator's nodes share the first, the daemons the second.
async fn with_each_store<F, Fut>(check: F)
where
    F: Fn(Arc<dyn LeaseStore>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    check(Arc::new(MemoryStore::with_lease_clock(Arc::new(SystemClock::new())))).await;
    check(Arc::new(postgres().await)).await;
}

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

fn finished(k: &HeartbeatKey, slot_secs: i64) -> RunRecord {
    RunRecord {
        key: k.clone(),
        slot: at(slot_secs),
        finished_at: at(slot_secs + 1),
        status: ExecutionStatus::Succeeded,
        delivery: DeliveryStatus::NotNeeded,
        duration: Duration::from_secs(1),
        error: None,
        output_preview: None,
        stop_reason: None,
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

/// An agent id whose heartbeats fall in `partition`.
fn agent_in(partition: u32) -> String {
    (0..)
        .map(|index| format!("agent-{index}"))
        .find(|id| partition_of(&AgentId::new(id.clone()).expect("valid"), PARTITIONS_COUNT) == partition)
        .expect("some agent lands in every partition")
}

#[tokio::test]
async fn the_databases_partition_function_agrees_with_the_engines() {
    let store = postgres().await;
    for index in 0..300 {
        let id = format!("agent-{index}-{}", "x".repeat(index % 50));
        let agent = AgentId::new(id.clone()).expect("valid");
        for partitions in [1_u32, 7, PARTITIONS_COUNT] {
            let from_sql = store.partition_in_sql(&id, partitions).await.expect("query");
            assert_eq!(from_sql, partition_of(&agent, partitions), "{id} over {partitions}");
        }
    }
}

#[tokio::test]
async fn grants_raise_the_term_and_only_a_free_or_expired_lease_is_granted() {
    with_each_store(|store| async move {
        let live = store.announce("a", None, TTL).await.expect("announce");
        assert_eq!(live, BTreeSet::from(["a".to_owned()]));
        let table = store.lease_table().await.expect("table");
        assert_eq!(table.len(), usize::try_from(PARTITIONS_COUNT).expect("small"));
        assert!(table.iter().all(|lease| lease.owner.is_none() && lease.term == 0));

        let first = store.acquire("a", 3, TTL).await.expect("acquire").expect("free");
        assert_eq!(first, Lease { partition: 3, node: "a".to_owned(), term: 1 });
        assert_eq!(store.acquire("b", 3, TTL).await.expect("acquire"), None, "held and not expired");
        assert_eq!(store.acquire("a", 3, TTL).await.expect("acquire"), None, "not granted twice to its holder either");
        assert!(store.renew(&first, TTL).await.expect("renew"));
        store.release(&first).await.expect("release");
        assert!(!store.renew(&first, TTL).await.expect("renew"), "a released lease cannot be renewed");
        let second = store.acquire("b", 3, TTL).await.expect("acquire").expect("released");
        assert_eq!(second.term, 2, "every grant raises the term");
        let table = store.lease_table().await.expect("table");
        assert_eq!(table[3].owner.as_deref(), Some("b"));
        assert!(!table[3].expired);
        // The old holder's stale release changes nothing.
        store.release(&first).await.expect("release");
        assert_eq!(store.lease_table().await.expect("table")[3].owner.as_deref(), Some("b"));
    })
    .await;
}

#[tokio::test]
async fn the_lease_table_gives_each_owner_the_api_address_it_announced_last() {
    with_each_store(|store| async move {
        store.announce("a", Some("http://10.0.0.1:7878"), TTL).await.expect("announce");
        store.announce("b", None, TTL).await.expect("announce");
        store.acquire("a", 1, TTL).await.expect("acquire").expect("free");
        store.acquire("b", 2, TTL).await.expect("acquire").expect("free");
        let table = store.lease_table().await.expect("table");
        assert_eq!(table[1].owner_url.as_deref(), Some("http://10.0.0.1:7878"));
        assert_eq!(table[2].owner_url, None, "a node serving no API has no address");
        assert_eq!(table[3].owner_url, None, "a free partition has none");
        // A node restarted on another port announces the new address; one that left has none.
        store.announce("a", Some("http://10.0.0.1:9000"), TTL).await.expect("announce");
        assert_eq!(store.lease_table().await.expect("table")[1].owner_url.as_deref(), Some("http://10.0.0.1:9000"));
        store.leave("a").await.expect("leave");
        assert_eq!(store.lease_table().await.expect("table")[1].owner_url, None);
    })
    .await;
}

#[tokio::test]
async fn expiry_is_judged_by_the_database_clock_and_ends_renewal() {
    with_each_store(|store| async move {
        store.announce("a", None, TTL).await.expect("announce");
        let short = Duration::from_millis(300);
        let lease = store.acquire("a", 0, short).await.expect("acquire").expect("free");
        assert_eq!(store.acquire("b", 0, TTL).await.expect("acquire"), None);
        tokio::time::sleep(Duration::from_millis(450)).await;
        assert!(store.lease_table().await.expect("table")[0].expired);
        let taken = store.acquire("b", 0, TTL).await.expect("acquire").expect("expired");
        assert_eq!(taken.term, lease.term + 1);
        assert!(!store.renew(&lease, TTL).await.expect("renew"), "the old term is over");
        // Nodes expire the same way.
        store.announce("gone", None, short).await.expect("announce");
        tokio::time::sleep(Duration::from_millis(450)).await;
        let live = store.announce("b", None, TTL).await.expect("announce");
        assert_eq!(live, BTreeSet::from(["a".to_owned(), "b".to_owned()]));
        store.leave("a").await.expect("leave");
        assert_eq!(store.announce("b", None, TTL).await.expect("announce"), BTreeSet::from(["b".to_owned()]));
    })
    .await;
}

#[tokio::test]
async fn a_node_whose_lease_was_taken_over_writes_nothing() {
    with_each_store(|store| async move {
        store.announce("a", None, TTL).await.expect("announce");
        let agent = agent_in(5);
        let k = key(&agent, "hb");
        store.put_heartbeat(&def(&agent, "hb", 60), at(0)).await.expect("put");
        let lease_a = store.acquire("a", 5, Duration::from_millis(200)).await.expect("acquire").expect("free");
        let a = store.partition_store(&lease_a);
        assert_eq!(a.load_heartbeats().await.expect("load").len(), 1);
        assert_eq!(a.claim_slots(&[claim(&k, 60)]).await.expect("claim"), vec![ClaimOutcome::Claimed]);

        tokio::time::sleep(Duration::from_millis(300)).await;
        let lease_b = store.acquire("b", 5, TTL).await.expect("acquire").expect("expired");
        let b = store.partition_store(&lease_b);
        let fenced = StoreError::Fenced { partition: 5, term: lease_a.term };
        assert_eq!(a.claim_slots(&[claim(&k, 120)]).await, Err(fenced.clone()));
        assert_eq!(a.finish_runs(&[finished(&k, 60)], 3).await, Err(fenced.clone()));
        let skip = SkipRecord {
            key: k.clone(),
            slot: at(180),
            at: at(180),
            reason: systole::core::guard::SkipReason::Paused,
            next_slot: every_minute(240),
            triggered: false,
        };
        assert_eq!(a.record_skips(std::slice::from_ref(&skip)).await, Err(fenced.clone()));
        assert_eq!(a.set_next_slots(&[(k.clone(), every_minute(600))]).await, Err(fenced.clone()));
        // An operator's or a model's change made through the old owner: refused, or it would
        // be acknowledged and never heard of by the agent's new engine.
        let pause = PauseRecord { until: at(900), minutes: 10, set_at: at(300) };
        let agent_id = AgentId::new(agent.clone()).expect("valid");
        assert_eq!(a.set_pause(&agent_id, &pause).await, Err(fenced.clone()));
        assert_eq!(a.clear_pause(&agent_id).await, Err(fenced.clone()));
        assert_eq!(a.put_heartbeat(&def(&agent, "new", 60), at(300)).await, Err(fenced.clone()));
        assert_eq!(a.set_enabled(&k, false, Some("operator")).await, Err(fenced.clone()));
        // Nor may its engine half-open a breaker its successor holds open.
        assert_eq!(a.half_open_breaker(&k).await, Err(fenced.clone()));
        assert_eq!(a.delete_heartbeat(&k).await, Err(fenced.clone()));
        assert!(store.load_pauses().await.expect("pauses").is_empty(), "no pause of a's landed");
        assert_eq!(store.load_heartbeats().await.expect("load").len(), 1, "nor a job");
        assert_eq!(a.recover_interrupted(at(200)).await, Err(fenced));
        // The new owner's own changes go through.
        b.set_pause(&agent_id, &pause).await.expect("the owner pauses");

        // The new owner finds a's run in flight and marks it interrupted; a's result stays out.
        assert_eq!(b.recover_interrupted(at(200)).await.expect("recover"), 1);
        let log = store.executions(&k, 10).await.expect("log");
        assert_eq!(log.len(), 1, "nothing of a's after the takeover: {log:?}");
        assert_eq!(log[0].status, ExecutionStatus::Interrupted);
        assert_eq!(b.claim_slots(&[claim(&k, 120)]).await.expect("claim"), vec![ClaimOutcome::Claimed]);
    })
    .await;
}

#[tokio::test]
async fn a_partition_store_sees_and_writes_only_its_partition() {
    with_each_store(|store| async move {
        store.announce("a", None, TTL).await.expect("announce");
        let (mine, theirs) = (agent_in(1), agent_in(2));
        for agent in [&mine, &theirs] {
            store.put_heartbeat(&def(agent, "hb", 60), at(0)).await.expect("put");
            store.claim_slots(&[claim(&key(agent, "hb"), 60)]).await.expect("claim");
        }
        let lease = store.acquire("a", 1, TTL).await.expect("acquire").expect("free");
        let part = store.partition_store(&lease);
        let loaded: Vec<String> =
            part.load_heartbeats().await.expect("load").iter().map(|hb| hb.def.key.agent.to_string()).collect();
        assert_eq!(loaded, vec![mine.clone()]);
        assert_eq!(part.recover_interrupted(at(100)).await.expect("recover"), 1, "only its own partition's run");
        assert_eq!(store.executions(&key(&theirs, "hb"), 1).await.expect("log")[0].status, ExecutionStatus::Running);
        let refused = part.claim_slots(&[claim(&key(&theirs, "hb"), 120)]).await;
        assert_eq!(refused, Err(StoreError::Fenced { partition: 1, term: lease.term }));
    })
    .await;
}

#[tokio::test]
async fn no_fenced_write_lands_after_the_takeover_commits() {
    with_each_store(|store| async move {
        store.announce("a", None, TTL).await.expect("announce");
        let agent = agent_in(7);
        let k = key(&agent, "hb");
        store.put_heartbeat(&def(&agent, "hb", 60), at(0)).await.expect("put");
        let lease_a = store.acquire("a", 7, Duration::from_millis(400)).await.expect("acquire").expect("free");
        let a = store.partition_store(&lease_a);
        // Node a claims slot after slot, as fast as it can, until it is refused.
        let writer = tokio::spawn({
            let k = k.clone();
            async move {
                let mut won = 0_u64;
                // Bounded, so a broken fence fails the test instead of hanging it.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                for slot in 1.. {
                    if std::time::Instant::now() > deadline {
                        break;
                    }
                    match a.claim_slots(&[claim(&k, slot * 60)]).await {
                        Ok(outcomes) => {
                            assert_eq!(outcomes, vec![ClaimOutcome::Claimed]);
                            won += 1;
                        }
                        Err(StoreError::Fenced { .. }) => return won,
                        Err(other) => panic!("unexpected error {other}"),
                    }
                    // The memory store never waits: give the taker its turns.
                    tokio::task::yield_now().await;
                }
                won
            }
        });
        let lease_b = loop {
            if let Some(lease) = store.acquire("b", 7, TTL).await.expect("acquire") {
                break lease;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Every claim of a that ever succeeds is in the log already when the grant returns.
        let rows_at_takeover = store.executions(&k, usize::MAX).await.expect("log").len();
        let won = writer.await.expect("writer");
        assert!(won > 0, "the writer ran before the takeover");
        assert_eq!(
            u64::try_from(rows_at_takeover).expect("small"),
            won,
            "a claim of the old term landed after the grant"
        );
        assert_eq!(lease_b.term, lease_a.term + 1);
    })
    .await;
}
