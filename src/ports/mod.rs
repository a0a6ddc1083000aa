//! Ports: every source of time and IO the engine uses is one of these traits, with a real
//! implementation in `adapters`/`store` and a simulated one in `sim/`.
//!
//! Randomness is handed in as a seed (ChaCha), never drawn from the operating system.

pub mod clock;
pub mod fence;
pub mod http;
pub mod leases;
pub mod llm;
pub mod messenger;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod workspace;
