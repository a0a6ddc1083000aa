//! Implementations of the [`Store`](crate::ports::store::Store) port.

#[cfg(not(madsim))]
mod breaker_batch;
mod config_keys;
pub mod delivered_index;
pub mod memory;
mod memory_leases;
mod memory_row;
#[cfg(not(madsim))]
pub mod postgres;
#[cfg(not(madsim))]
pub mod postgres_leases;
mod seed_threads;
#[cfg(not(madsim))]
mod slot_batch;
#[cfg(not(madsim))]
mod sql_lists;
#[cfg(not(madsim))]
mod sql_rows;
#[cfg(not(madsim))]
mod sql_store;
#[cfg(not(madsim))]
pub mod sqlite;
#[cfg(not(madsim))]
mod sqlite_busy;
#[cfg(not(madsim))]
mod sqlite_direct;
#[cfg(not(madsim))]
mod sqlite_dispatch_writer;
#[cfg(not(madsim))]
mod sqlite_journal;
#[cfg(not(madsim))]
mod sqlite_seed;
#[cfg(not(madsim))]
pub mod sqlite_statements;
#[cfg(not(madsim))]
mod sqlite_writes;
mod text_check;
