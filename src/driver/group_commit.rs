//! Group commit of run results. Every run task hands its result to one writer task, which
//! writes all the results waiting at that moment in one store transaction and answers each
//! task once that transaction has committed. A task waits, as before, until its own result
//! is durable; under load one commit (one fsync on SQLite) serves many runs instead of one.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::core::breaker::BreakerStep;
use crate::limits::STORE_BATCH_ROWS_MAX;
use crate::ports::store::{RunRecord, Store, StoreError};

struct Request {
    record: RunRecord,
    answer: oneshot::Sender<Result<BreakerStep, StoreError>>,
}

/// The handle run tasks write their results through; cheap to clone.
#[derive(Clone)]
pub struct ResultWriter {
    requests: mpsc::UnboundedSender<Request>,
}

impl ResultWriter {
    /// Spawns the writer over `store`; it ends when the last handle is dropped.
    pub fn spawn(store: Arc<dyn Store>, breaker_failures_max: u32) -> Self {
        let (requests, receiver) = mpsc::unbounded_channel();
        tokio::spawn(write_batches(store, breaker_failures_max, receiver));
        Self { requests }
    }

    /// Writes one run's result and its breaker step, returning once it is durable.
    ///
    /// # Errors
    /// When the store failed the transaction that held it (or the writer is gone, as the
    /// engine stops).
    pub async fn finish(&self, record: RunRecord) -> Result<BreakerStep, StoreError> {
        let (answer, answered) = oneshot::channel();
        let gone = || StoreError::Backend("the result writer has stopped".to_owned());
        self.requests.send(Request { record, answer }).map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
    }
}

async fn write_batches(
    store: Arc<dyn Store>,
    breaker_failures_max: u32,
    mut receiver: mpsc::UnboundedReceiver<Request>,
) {
    while let Some(first) = receiver.recv().await {
        // Everything that queued while the last batch was being written goes in this one.
        let mut batch = vec![first];
        while batch.len() < STORE_BATCH_ROWS_MAX {
            match receiver.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let (records, answers): (Vec<RunRecord>, Vec<_>) =
            batch.into_iter().map(|request| (request.record, request.answer)).unzip();
        match store.finish_runs(&records, breaker_failures_max).await {
            Ok(steps) => {
                for (answer, step) in answers.into_iter().zip(steps) {
                    let _ = answer.send(Ok(step));
                }
            }
            Err(error) => {
                for answer in answers {
                    let _ = answer.send(Err(error.clone()));
                }
            }
        }
    }
}
