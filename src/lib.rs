//! # systole
//!
//! A heartbeat and cron engine for AI agents. A heartbeat is a prompt that fires on a
//! schedule, runs the agent in a fresh context, and delivers what it has to say to a
//! messaging target, or stays silent when there is nothing to say.
//!
//! ## The contract
//!
//! Every source of time and IO is a port ([`ports`]): the clock, the LLM, the store and
//! the messenger, with randomness handed in as a seed. The decision logic ([`core`]) is
//! pure: it takes `now` and state and returns decisions, and reads no clock of its own.
//! The [`driver`] feeds the core and executes its decisions through the ports, so the
//! simulator in `sim/` runs this same code with simulated ports and replays any seed bit
//! for bit. Only the real adapters ([`adapters`]) may read the system clock; clippy's
//! `disallowed-methods` enforces it.

pub mod adapters;
pub mod agent;
#[cfg(not(madsim))]
pub mod api;
pub mod cluster;
pub mod core;
#[cfg(not(madsim))]
pub mod daemon;
pub mod delivery;
pub mod driver;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod ports;
pub mod store;
