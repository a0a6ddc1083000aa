//! The stores' one rule for free text: no NUL character (PostgreSQL's `text` cannot hold
//! one, SQLite's can). Every store checks it before it writes anything, so all three
//! refuse the same writes with the same error, naming the field, and a refused batch
//! writes none of its rows. Callers refuse such text at their edge or replace it
//! (`core::text`); reaching this check is a caller's bug, not a user's.

use crate::core::heartbeat::HeartbeatDef;
use crate::core::text::refuse_nul;
use crate::ports::store::{RunRecord, StoreError};

fn refused(field: &str, text: &str) -> Result<(), StoreError> {
    refuse_nul(text).map_err(|problem| StoreError::Refused { field: field.to_owned(), problem })
}

pub(crate) fn defs<'a>(defs: impl IntoIterator<Item = &'a HeartbeatDef>) -> Result<(), StoreError> {
    defs.into_iter().try_for_each(|def| refused("prompt", &def.prompt))
}

/// [`defs`] of a seed's whole config, on every core when it is large: a million prompts
/// took 65 ms on one thread, before a first seed's first row.
pub(crate) fn seed_defs(defs: &[HeartbeatDef]) -> Result<(), StoreError> {
    #[cfg(not(madsim))]
    return crate::store::seed_threads::check_each(defs, |def| refused("prompt", &def.prompt));
    #[cfg(madsim)]
    self::defs(defs)
}

pub(crate) fn runs(runs: &[RunRecord]) -> Result<(), StoreError> {
    for run in runs {
        refused("error", run.error.as_deref().unwrap_or_default())?;
        refused("output_preview", run.output_preview.as_deref().unwrap_or_default())?;
        refused("transcript", run.transcript.as_deref().unwrap_or_default())?;
    }
    Ok(())
}

pub(crate) fn event(text: &str) -> Result<(), StoreError> {
    refused("text", text)
}
