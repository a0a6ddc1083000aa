//! Real implementations of the ports. Only these may read the system clock or the network.

pub mod heap_trim;
pub mod memory_workspace;
pub mod scripted_llm;
pub mod stdout;
pub mod system_clock;
pub mod virtual_clock;

#[cfg(not(madsim))]
pub mod dir_workspace;
#[cfg(not(madsim))]
pub mod http_error;
#[cfg(not(madsim))]
pub mod openai;
#[cfg(not(madsim))]
pub mod otlp;
#[cfg(not(madsim))]
pub mod reqwest_http;
