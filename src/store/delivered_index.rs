//! Duplicate checks a store answers from its index of recent deliveries
//! (`core::recent_deliveries`, ADR 0066), reading only what the index cannot say. The store
//! keeps it true: it records each delivery it commits, with the index's generation taken
//! before the write began, and makes it forget before and after it deletes runs.
//!
//! Only a store whose process writes every run of its heartbeats may keep one: SQLite (one
//! daemon a file) and the simulator's. A PostgreSQL node would miss what another node
//! delivered before its partition moved.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::recent_deliveries::{Fill, RecentDeliveries};
use crate::ports::store::{DedupQuery, RunRecord, StoreError};

#[derive(Debug)]
pub struct DeliveredIndex {
    recent: Mutex<RecentDeliveries>,
}

impl DeliveredIndex {
    /// A cold index of at most `entries_max` delivered replies: its first duplicate check
    /// fills it.
    #[must_use]
    pub fn new(entries_max: usize) -> Self {
        Self { recent: Mutex::new(RecentDeliveries::new(entries_max)) }
    }

    /// How many times the index forgot (a count that moves when runs go): a write of
    /// results takes it before it begins and hands it to [`Self::committed`].
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.lock().generation()
    }

    /// `runs`' results are committed, by a write that began at `generation`; each run the
    /// store wrote (`written`, in order: a result whose claimed row was gone writes nothing)
    /// with a digest delivered its reply. A write that `rewrote` a row no longer running
    /// may have replaced a delivered reply: the index forgets.
    pub fn committed(&self, runs: &[RunRecord], written: &[bool], rewrote: bool, generation: u64) {
        let mut recent = self.lock();
        if rewrote {
            recent.forget();
            return;
        }
        for (run, _) in runs.iter().zip(written).filter(|(_, written)| **written) {
            if let Some(digest) = &run.reply_digest {
                recent.record(&run.key, digest, run.finished_at.as_millisecond(), generation);
            }
        }
    }

    /// The store is about to delete runs, or has: the index vouches for nothing until it is
    /// filled again, and no write or fill begun before counts.
    pub fn forget(&self) {
        self.lock().forget();
    }

    /// Each query's answer: the index's where it can say, the store's `read` for the rest.
    /// A cold index is filled first by `read_fill(from_ms, entries_max)`, the deliveries
    /// since the earliest query's `since`; a fill that fails leaves it cold, and every
    /// check is read.
    ///
    /// # Errors
    /// When the index cannot answer every query and `read` fails.
    pub async fn delivered_since<Read, Answers, ReadFill, Filled>(
        &self,
        queries: &[DedupQuery],
        read: Read,
        read_fill: ReadFill,
    ) -> Result<Vec<bool>, StoreError>
    where
        Read: FnOnce(Vec<DedupQuery>) -> Answers,
        Answers: Future<Output = Result<Vec<bool>, StoreError>>,
        ReadFill: FnOnce(i64, usize) -> Filled,
        Filled: Future<Output = Result<Fill, StoreError>>,
    {
        let (mut answers, cold) = {
            let recent = self.lock();
            let cold = recent.floor_ms().is_none().then(|| (recent.generation(), recent.entries_max()));
            (answers_of(&recent, queries), cold)
        };
        let earliest = queries.iter().map(|query| query.since.as_millisecond()).min();
        if let (Some((generation, entries_max)), Some(from_ms)) = (cold, earliest) {
            if let Ok(fill) = read_fill(from_ms, entries_max).await {
                let mut recent = self.lock();
                if recent.fill(fill, generation) {
                    answers = answers_of(&recent, queries);
                }
            }
        }
        let unanswered: Vec<DedupQuery> = queries
            .iter()
            .zip(&answers)
            .filter(|(_, answer)| answer.is_none())
            .map(|(query, _)| query.clone())
            .collect();
        if unanswered.is_empty() {
            return Ok(answers.into_iter().map(|answer| answer.unwrap_or(false)).collect());
        }
        let asked = unanswered.len();
        let read_answers = read(unanswered).await?;
        if read_answers.len() != asked {
            return Err(StoreError::Backend(format!("{} answers to {asked} duplicate checks", read_answers.len())));
        }
        let mut read_answers = read_answers.into_iter();
        Ok(answers.into_iter().map(|answer| answer.or_else(|| read_answers.next()).unwrap_or(false)).collect())
    }

    fn lock(&self) -> MutexGuard<'_, RecentDeliveries> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn answers_of(recent: &RecentDeliveries, queries: &[DedupQuery]) -> Vec<Option<bool>> {
    queries.iter().map(|query| recent.answer(&query.key, &query.digest, query.since.as_millisecond())).collect()
}
