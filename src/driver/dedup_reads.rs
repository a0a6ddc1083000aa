//! The duplicate checks of runs that finish together, asked in one store read: a statement
//! per delivering run made the check the one read per run of a dispatch (ADR 0027). No
//! timer and no task of its own: the first run to ask reads for itself; runs that ask
//! during a read wait, and when it ends the oldest of them reads for all that waited. Every
//! answer is the store's, read after its question was asked.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use crate::ports::store::{DedupQuery, StoreError};

#[derive(Default)]
pub struct DedupReads {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A read is going, or handed on: who asks now waits for the next one.
    reading: bool,
    /// Questions for the next read, oldest first.
    waiting: VecDeque<Waiting>,
}

struct Waiting {
    query: DedupQuery,
    /// Where its answer goes; `None` for the run that reads (it answers itself).
    reply: Option<oneshot::Sender<Reply>>,
}

enum Reply {
    Answer(Result<bool, StoreError>),
    /// The read before ended: read for everyone waiting now.
    YourTurn(Turn),
}

/// The right to read next. Handed on when dropped: after a read, and also when the run
/// holding it is dropped mid-read or never took it from its channel.
struct Turn {
    reads: Arc<DedupReads>,
    live: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.live {
            self.reads.pass_on();
        }
    }
}

impl DedupReads {
    /// What `read` (the store's [`delivered_since`]) answers for `query`, read together
    /// with the checks of the runs that ask meanwhile.
    ///
    /// [`delivered_since`]: crate::ports::store::Store::delivered_since
    pub async fn delivered_since<Read, Answers>(
        self: &Arc<Self>,
        query: DedupQuery,
        read: Read,
    ) -> Result<bool, StoreError>
    where
        Read: Fn(Vec<DedupQuery>) -> Answers,
        Answers: Future<Output = Result<Vec<bool>, StoreError>>,
    {
        let waiting = {
            let mut state = self.lock();
            if state.reading {
                let (reply, answer) = oneshot::channel();
                state.waiting.push_back(Waiting { query: query.clone(), reply: Some(reply) });
                Some(answer)
            } else {
                state.reading = true;
                state.waiting.push_back(Waiting { query: query.clone(), reply: None });
                None
            }
        };
        let turn = match waiting {
            None => Turn { reads: Arc::clone(self), live: true },
            Some(answer) => match answer.await {
                Ok(Reply::Answer(answer)) => return answer,
                Ok(Reply::YourTurn(turn)) => turn,
                // The run reading for this one was dropped (a shutdown) before it answered.
                Err(_) => return only_answer(read(vec![query]).await),
            },
        };
        self.read(read, turn).await
    }

    /// Reads for every question waiting, its own among them, and answers the others.
    async fn read<Read, Answers>(&self, read: Read, turn: Turn) -> Result<bool, StoreError>
    where
        Read: Fn(Vec<DedupQuery>) -> Answers,
        Answers: Future<Output = Result<Vec<bool>, StoreError>>,
    {
        let batch: Vec<Waiting> = self.lock().waiting.drain(..).collect();
        let asked = batch.len();
        let answers = read(batch.iter().map(|waiting| waiting.query.clone()).collect()).await;
        drop(turn);
        let mut own = Err(StoreError::Backend("the duplicate check was not among its read".to_owned()));
        for (index, waiting) in batch.into_iter().enumerate() {
            let answer = match &answers {
                Ok(found) if found.len() == asked => Ok(found[index]),
                Ok(found) => Err(StoreError::Backend(format!("{} answers to {asked} duplicate checks", found.len()))),
                Err(error) => Err(error.clone()),
            };
            match waiting.reply {
                // One that stopped waiting needs no answer.
                Some(reply) => drop(reply.send(Reply::Answer(answer))),
                None => own = answer,
            }
        }
        own
    }

    /// Hands the next read to the oldest run still waiting, or ends the reading.
    fn pass_on(self: &Arc<Self>) {
        let mut state = self.lock();
        while let Some(reply) = state.waiting.front_mut().and_then(|waiting| waiting.reply.take()) {
            // Its question stays at the front, now the reader's own.
            match reply.send(Reply::YourTurn(Turn { reads: Arc::clone(self), live: true })) {
                Ok(()) => return,
                Err(unsent) => {
                    // It stopped waiting: the turn goes on to the next (not through this
                    // turn's drop, which would take the lock held here).
                    if let Reply::YourTurn(mut turn) = unsent {
                        turn.live = false;
                    }
                    state.waiting.pop_front();
                }
            }
        }
        state.reading = false;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn only_answer(answers: Result<Vec<bool>, StoreError>) -> Result<bool, StoreError> {
    match answers?.as_slice() {
        [found] => Ok(*found),
        other => Err(StoreError::Backend(format!("{} answers to one duplicate check", other.len()))),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // sleeps in the paused test runtime's virtual time
mod tests {
    use std::time::Duration;

    use jiff::Timestamp;

    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};

    fn ask(digest: &str) -> DedupQuery {
        let key = HeartbeatKey { agent: AgentId::new("a").expect("id"), heartbeat: HeartbeatId::new("h").expect("id") };
        DedupQuery { key, digest: digest.to_owned(), since: Timestamp::UNIX_EPOCH }
    }

    /// A store whose read takes 10 ms, has delivered the replies named `sent-*`, and
    /// remembers how many questions each read had.
    #[derive(Clone, Default)]
    struct SlowStore {
        reads: Arc<Mutex<Vec<usize>>>,
    }

    impl SlowStore {
        async fn read(self, queries: Vec<DedupQuery>) -> Result<Vec<bool>, StoreError> {
            self.reads.lock().expect("lock").push(queries.len());
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(queries.iter().map(|query| query.digest.starts_with("sent-")).collect())
        }

        fn reads(&self) -> Vec<usize> {
            self.reads.lock().expect("lock").clone()
        }
    }

    fn asking(reads: &Arc<DedupReads>, store: &SlowStore, digest: &str) -> tokio::task::JoinHandle<bool> {
        let (reads, store, query) = (Arc::clone(reads), store.clone(), ask(digest));
        tokio::spawn(async move {
            reads.delivered_since(query, |queries| store.clone().read(queries)).await.expect("the store answers")
        })
    }

    #[tokio::test(start_paused = true)]
    async fn runs_that_ask_during_a_read_share_the_next_one_and_get_their_own_answers() {
        let (reads, store) = (Arc::new(DedupReads::default()), SlowStore::default());
        let first = asking(&reads, &store, "sent-0");
        tokio::time::sleep(Duration::from_millis(1)).await;
        let digests = ["sent-1", "new-2", "sent-3", "new-4", "new-5"];
        let during: Vec<_> = digests.iter().map(|digest| asking(&reads, &store, digest)).collect();
        assert!(first.await.expect("task"));
        let mut answers = Vec::new();
        for asked in during {
            answers.push(asked.await.expect("task"));
        }
        assert_eq!(answers, vec![true, false, true, false, false]);
        assert_eq!(store.reads(), vec![1, 5], "the five that asked during the first read shared the second");
        assert!(asking(&reads, &store, "sent-6").await.expect("task"));
        assert_eq!(store.reads(), vec![1, 5, 1], "and reading ended with them");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_dropped_while_it_reads_for_others_leaves_none_waiting() {
        let (reads, store) = (Arc::new(DedupReads::default()), SlowStore::default());
        let first = asking(&reads, &store, "sent-0");
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = asking(&reads, &store, "sent-1");
        let (third, fourth) = (asking(&reads, &store, "new-2"), asking(&reads, &store, "sent-3"));
        assert!(first.await.expect("task"));
        // The second now reads for itself, the third and the fourth; it is dropped mid-read.
        tokio::time::sleep(Duration::from_millis(1)).await;
        second.abort();
        let fifth = asking(&reads, &store, "sent-4");
        let answers = (third.await.expect("task"), fourth.await.expect("task"), fifth.await.expect("task"));
        assert_eq!(answers, (false, true, true));
        let reads_made = store.reads();
        assert_eq!(reads_made[..2], [1, 3], "the second's read had three questions");
        assert_eq!(reads_made.len(), 5, "the third and fourth asked again alone, the fifth read alone");
        assert!(reads.lock().waiting.is_empty() && !reads.lock().reading);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_fails_each_question_it_had() {
        let reads = Arc::new(DedupReads::default());
        let failing = |queries: Vec<DedupQuery>| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err::<Vec<bool>, _>(StoreError::Backend(format!("down for {}", queries.len())))
        };
        let first = tokio::spawn({
            let reads = Arc::clone(&reads);
            async move { reads.delivered_since(ask("a"), failing).await }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let others: Vec<_> = (0..3)
            .map(|_| {
                let reads = Arc::clone(&reads);
                tokio::spawn(async move { reads.delivered_since(ask("b"), failing).await })
            })
            .collect();
        assert_eq!(first.await.expect("task"), Err(StoreError::Backend("down for 1".into())));
        for other in others {
            assert_eq!(other.await.expect("task"), Err(StoreError::Backend("down for 3".into())));
        }
    }
}
