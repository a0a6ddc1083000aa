//! Group commit of run results. Every run task hands its result to one writer task, which
//! writes all the results waiting at that moment in one store transaction, then hands each
//! run's completion to the driver and answers its task. A task waits, as before, until its
//! own result is durable; under load one commit (one fsync on SQLite) serves many runs.
//!
//! The writer, not the run tasks, tells the driver: so the driver hears of results in the
//! order the store committed them, and its breaker and backoff state follow the store's
//! (two runs of one heartbeat finishing together, under `allow_all`, must not leave the
//! driver believing the success came last when the store counted the failure last).

use std::sync::Arc;

use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};

use crate::core::breaker::BreakerStep;
use crate::core::ids::HeartbeatKey;
use crate::driver::events::{EngineEvent, EventSink};
use crate::driver::run::{FinishedRun, Withheld};
use crate::limits::STORE_BATCH_ROWS_MAX;
use crate::ports::clock::Clock;
use crate::ports::store::{RunRecord, Store};

/// What the driver hears of a run that started, in order.
#[allow(clippy::large_enum_variant, reason = "every run sends one of each; a box would be an allocation a run")]
pub enum RunNews {
    /// Its work is done (model, tools, delivery) and its result waits to be written: its
    /// place among `runs_in_flight_max` is free (ADR 0042). Always before its `Finished`.
    Writing { key: HeartbeatKey, slot: Timestamp },
    /// Its result was committed (or failed to be), in commit order.
    Finished(FinishedRun),
}

struct Request {
    record: RunRecord,
    withheld: Option<Withheld>,
    written: oneshot::Sender<()>,
}

/// The handle run tasks write their results through; cheap to clone.
#[derive(Clone)]
pub struct ResultWriter {
    requests: mpsc::UnboundedSender<Request>,
    /// The driver's queue, where a run says its work is done before its result is queued.
    news: mpsc::UnboundedSender<RunNews>,
}

/// What the writer needs besides the queue.
struct Writer {
    store: Arc<dyn Store>,
    breaker_failures_max: u32,
    events: Arc<dyn EventSink>,
    clock: Arc<dyn Clock>,
    completions: mpsc::UnboundedSender<RunNews>,
}

impl ResultWriter {
    /// Spawns the writer over `store`; finished runs go to `completions`, in commit order.
    /// It ends when the last handle is dropped.
    pub fn spawn(
        store: Arc<dyn Store>,
        breaker_failures_max: u32,
        events: Arc<dyn EventSink>,
        clock: Arc<dyn Clock>,
        completions: mpsc::UnboundedSender<RunNews>,
    ) -> Self {
        let (requests, receiver) = mpsc::unbounded_channel();
        let news = completions.clone();
        let writer = Writer { store, breaker_failures_max, events, clock, completions };
        tokio::spawn(writer.write_batches(receiver));
        Self { requests, news }
    }

    /// Writes one run's result and its breaker step, and returns once it is durable (or
    /// the write failed) and the driver has it.
    pub async fn finish(&self, record: RunRecord, withheld: Option<Withheld>) {
        // Sent before the request, on the channel its completion takes: heard before it.
        let _ = self.news.send(RunNews::Writing { key: record.key.clone(), slot: record.slot });
        let (written, answered) = oneshot::channel();
        if self.requests.send(Request { record, withheld, written }).is_ok() {
            // An error here means the writer is gone: the engine is stopping.
            let _ = answered.await;
        }
    }
}

impl Writer {
    async fn write_batches(self, mut receiver: mpsc::UnboundedReceiver<Request>) {
        while let Some(first) = receiver.recv().await {
            // Everything that queued while the last batch was being written goes in this one.
            let mut batch = Vec::with_capacity((receiver.len() + 1).min(STORE_BATCH_ROWS_MAX));
            batch.push(first);
            while batch.len() < STORE_BATCH_ROWS_MAX {
                match receiver.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            // The records go to the store by reference and on to the driver after it: not
            // copied (a record holds the run's transcript).
            let mut records = Vec::with_capacity(batch.len());
            let mut answers = Vec::with_capacity(batch.len());
            for Request { record, withheld, written } in batch {
                records.push(record);
                answers.push((withheld, written));
            }
            let mut steps: Vec<Option<BreakerStep>> = match self
                .store
                .finish_runs(&records, self.breaker_failures_max)
                .await
            {
                Ok(steps) => steps.into_iter().map(Some).collect(),
                Err(error) => {
                    let consequence =
                        "the run stays 'running' until the next start-up marks it interrupted; the breaker ignores it";
                    let event =
                        EngineEvent::StoreFailed { operation: "finish_runs", error: error.to_string(), consequence };
                    self.events.emit(self.clock.wall(), &event);
                    vec![None; records.len()]
                }
            };
            // One step per run is the store's contract; a short answer counts as not written.
            steps.resize(records.len(), None);
            for ((record, (withheld, written)), breaker) in records.into_iter().zip(answers).zip(steps) {
                let record = without_log_texts(record);
                let _ = self.completions.send(RunNews::Finished(FinishedRun { record, breaker, withheld }));
                let _ = written.send(());
            }
        }
    }
}

/// A written record as the driver reads it: without the texts only the run log keeps (the
/// transcript, the tool calls, the reply's digest, the consumed events). They are freed
/// here rather than on the driver's loop, the one serial part of a dispatch, where each
/// free waited for the allocator's lock of the run task that made it (performance.md).
fn without_log_texts(mut record: RunRecord) -> RunRecord {
    record.transcript = None;
    record.tool_use = None;
    record.reply_digest = None;
    record.consumes = Vec::new();
    record
}
