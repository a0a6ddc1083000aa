//! Implementations of the [`Store`](crate::ports::store::Store) port.

pub mod memory;
#[cfg(not(madsim))]
pub mod sqlite;
