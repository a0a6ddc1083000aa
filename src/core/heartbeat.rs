//! A heartbeat's definition (what the user asked for) and its runtime state (what the
//! engine has done with it), kept apart so config seeding can tell the two from each other.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::core::active_hours::ActiveHours;
use crate::core::delivery_target::DeliveryTarget;
use crate::core::ids::HeartbeatKey;
use crate::core::policy::RunPolicy;
use crate::core::schedule::Schedule;
use crate::core::tool_policy::SharedJobTools;

/// Where a definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// Seeded from the config file; removed again when the config drops it.
    Config,
    /// Created at run time (tool, API); the config never touches it.
    Runtime,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Config => "config",
            Origin::Runtime => "runtime",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "config" => Some(Origin::Config),
            "runtime" => Some(Origin::Runtime),
            _ => None,
        }
    }
}

/// Which list a definition belongs to. Both run the same way (a fresh agent run); they
/// share one id space per agent, so a slot claim names exactly one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobKind {
    /// A named heartbeat (`[[agents.heartbeats]]`, the `heartbeat` tool).
    Heartbeat,
    /// A cron job (`[[agents.cron]]`, the `cron` tool), mode `isolated`.
    Cron,
    /// A cron job in mode `main`: its slot queues `[CRON:id] prompt` as a system event
    /// and wakes the agent heartbeat, which processes it in the agent's main context.
    CronMain,
    /// The agent heartbeat: one per agent, driven by `HEARTBEAT.md` and woken by requests.
    Agent,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Heartbeat => "heartbeat",
            JobKind::Cron => "cron",
            JobKind::CronMain => "cron-main",
            JobKind::Agent => "agent",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [JobKind::Heartbeat, JobKind::Cron, JobKind::CronMain, JobKind::Agent]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }

    /// The list it shows in (`systole heartbeat list` or `systole cron list`).
    pub fn listed_as(self) -> JobKind {
        match self {
            JobKind::Heartbeat | JobKind::Agent => JobKind::Heartbeat,
            JobKind::Cron | JobKind::CronMain => JobKind::Cron,
        }
    }
}

/// What a heartbeat or cron job is: prompt, schedule, policies, target, window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatDef {
    pub key: HeartbeatKey,
    pub kind: JobKind,
    /// Shared: a run's request and transcript take a count, and a seed into the memory
    /// store gives equal prompts one text.
    pub prompt: Arc<str>,
    pub schedule: Schedule,
    pub policy: RunPolicy,
    /// Deleted (instead of disabled) once its schedule has no more slots and the last ran.
    pub delete_after_run: bool,
    /// A reply identical to one delivered within `DEDUP_WINDOW_SECS` is not delivered again.
    pub dedup: bool,
    pub target: DeliveryTarget,
    pub active_hours: Option<ActiveHours>,
    /// Total budget of one run, LLM calls and delivery included.
    pub timeout: Duration,
    pub origin: Origin,
    /// The tools its runs may use, within its agent's list (ADR 0019).
    pub tools: SharedJobTools,
    /// The model its runs ask for (a cheaper one for routine checks, ADR 0020); `None`:
    /// the agent heartbeat's `model`, else the engine's.
    pub model: Option<String>,
}

impl HeartbeatDef {
    /// A stable digest of the definition, so config seeding can tell whether the config
    /// changed since the last seed. Built from a canonical, length-prefixed encoding, not
    /// from `Debug` output, so it is the same on every build.
    pub fn fingerprint(&self) -> String {
        crate::core::hex::lower_hex(&self.fingerprint_digest())
    }

    /// The fingerprint's 32 bytes, for a holder that keeps many: its hexadecimal text is
    /// a 64-byte allocation besides.
    pub fn fingerprint_digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(self.key.agent.as_str().as_bytes());
        field(self.key.heartbeat.as_str().as_bytes());
        field(self.kind.as_str().as_bytes());
        field(self.prompt.as_bytes());
        field(self.schedule.to_string().as_bytes());
        field(self.policy.catch_up.as_str().as_bytes());
        field(&self.policy.catch_up_window.as_millis().to_le_bytes());
        field(self.policy.overlap.as_str().as_bytes());
        field(&self.policy.jitter_max.as_millis().to_le_bytes());
        field(&[u8::from(self.delete_after_run)]);
        field(&[u8::from(self.dedup)]);
        field(self.target.to_string().as_bytes());
        match &self.active_hours {
            Some(window) => {
                field(window.start_text().as_bytes());
                field(window.end_text().as_bytes());
                field(window.zone_name().as_bytes());
            }
            None => field(b"always"),
        }
        field(&self.timeout.as_millis().to_le_bytes());
        // Only when set, so a definition without tools keeps the fingerprint it had before
        // tools existed (a new fingerprint would re-seed it: re-enabled, breaker cleared).
        if !self.tools.is_default() {
            field(self.tools.canonical().as_bytes());
        }
        // The same for the model: only when set.
        if let Some(model) = &self.model {
            field(b"model");
            field(model.as_bytes());
        }
        hasher.finalize().into()
    }
}

/// What the engine has done with a heartbeat; persisted so restarts keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatState {
    pub enabled: bool,
    /// Why it is disabled (`circuit-breaker`, `user`), when it is.
    pub disabled_reason: Option<Box<str>>,
    pub consecutive_failures: u32,
    /// The next slot the scheduler armed, if it has armed one.
    pub next_slot: Option<Timestamp>,
    /// When the breaker last opened (the tripping run's finish), while it is not closed:
    /// the cooldown before its probe counts from here.
    pub breaker_opened_at: Option<Timestamp>,
}

impl HeartbeatState {
    /// A definition just stored at `at`: enabled, no failures, and already its schedule's
    /// first slot after `at`, so that the engine arming it has nothing to write (a first
    /// start of a million rewrote the whole table for it; ADR 0028).
    pub fn stored_at(schedule: &Schedule, at: Timestamp) -> Self {
        Self {
            enabled: true,
            disabled_reason: None,
            consecutive_failures: 0,
            next_slot: schedule.first_slot(at),
            breaker_opened_at: None,
        }
    }
}

/// A stored heartbeat: definition and state together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub def: HeartbeatDef,
    pub state: HeartbeatState,
}

/// A plain heartbeat for unit tests: `agent`/`id` every `every_secs`, to stdout.
#[cfg(test)]
pub(crate) fn test_def(agent: &str, id: &str, every_secs: u64) -> HeartbeatDef {
    use crate::core::ids::{AgentId, HeartbeatId};
    HeartbeatDef {
        key: HeartbeatKey {
            agent: AgentId::new(agent).expect("valid"),
            heartbeat: HeartbeatId::new(id).expect("valid"),
        },
        kind: JobKind::Heartbeat,
        prompt: "Check the inbox.".into(),
        schedule: Schedule::Every(Duration::from_secs(every_secs)),
        policy: RunPolicy::default(),
        delete_after_run: false,
        dedup: true,
        target: DeliveryTarget::parse("stdout").expect("valid"),
        active_hours: None,
        timeout: Duration::from_secs(120),
        origin: Origin::Config,
        tools: SharedJobTools::default(),
        model: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> HeartbeatDef {
        test_def("main", "inbox", 1_800)
    }

    #[test]
    fn fingerprint_changes_with_every_field_that_matters() {
        let base = def();
        let mut changed = vec![base.clone(); 10];
        changed[9].model = Some("small-model".to_owned());
        let required = vec![crate::core::tool_policy::ToolName::new("inbox", "search")];
        changed[8].tools = crate::core::tool_policy::JobTools { required, ..Default::default() }.into();
        changed[0].prompt = format!("{}!", changed[0].prompt).into();
        changed[1].schedule = Schedule::Every(Duration::from_secs(1_801));
        changed[4].policy.catch_up = crate::core::policy::CatchUp::All;
        changed[5].policy.overlap = crate::core::policy::Overlap::AllowAll;
        changed[6].kind = JobKind::Cron;
        changed[7].delete_after_run = true;
        changed[2].target = DeliveryTarget::parse("webhook:ops").expect("valid");
        changed[3].active_hours = Some(ActiveHours::new("09:00", "17:00", "UTC").expect("valid"));
        for other in &changed {
            assert_ne!(base.fingerprint(), other.fingerprint());
        }
        assert_eq!(base.fingerprint(), def().fingerprint());
        assert_eq!(base.fingerprint().len(), 64);
    }

    #[test]
    fn a_fingerprint_is_the_one_earlier_builds_stored() {
        // A seed compares it with the stored one: another value would replace every config
        // heartbeat of an upgraded daemon (re-enabled, breaker cleared, slots started over).
        assert_eq!(def().fingerprint(), "0c02fb3f142b6f8fd25cce9bfbf9239ee67b786a5f4f99b4b6da094f1eac5666");
    }
}
