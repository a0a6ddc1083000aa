//! Pure decision logic. Nothing in here reads a clock, sleeps, or does IO: every function
//! takes `now` and state as arguments and returns a decision.

pub mod active_hours;
pub mod backfill;
pub mod breaker;
pub mod budget;
pub mod chat_text;
pub mod cron;
pub mod cron_fields;
pub mod delivery_target;
pub mod duration;
pub mod flood;
pub mod guard;
pub mod heartbeat;
pub mod heartbeat_file;
pub mod ids;
pub mod message_split;
pub mod next_run;
pub mod partition;
pub mod pause;
pub mod policy;
pub mod reload_plan;
pub mod reply;
pub mod retention;
pub mod routing;
pub mod schedule;
pub mod schedule_fields;
pub mod shared_text;
pub mod slots;
pub mod system_events;
pub mod text;
pub mod timer_queue;
pub mod tool_check;
pub mod tool_policy;
pub mod usage;
pub mod visibility;
pub mod wake;
