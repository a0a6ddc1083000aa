//! The faults the simulator injects, how likely each is in a run (swarm testing: the seed
//! switches some off and makes others frequent), and how often each really fired.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Every fault the simulator can inject. Each one is counted when it fires, and
/// `run --stats` shows the counts, so a fault that never fires is visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// The wall clock starts off by a fixed offset.
    ClockSkew,
    ClockJumpForward,
    ClockJumpBackward,
    /// A store write fails and nothing is written.
    StoreError,
    /// The process dies just before a store write.
    CrashBeforeWrite,
    /// The process dies after a store write, before the engine sees it succeed.
    CrashAfterWrite,
    LlmError,
    LlmRateLimit,
    /// The LLM never answers; the run's budget must cut it off.
    LlmHang,
    LlmMalformed,
    LlmSlow,
    DeliveryFailure,
    DeliverySlow,
    /// The model calls `pause_heartbeats` with a valid number of minutes (some past the maximum).
    LlmToolPause,
    /// The model calls `pause_heartbeats` with arguments that are not a number.
    LlmToolPauseInvalid,
    /// The model calls the `heartbeat` tool: create (some too frequent), update or delete.
    LlmToolHeartbeat,
    /// The model asks for tools on every turn, never answering.
    LlmEndlessTools,
    /// The model answers `HEARTBEAT_OK` (bare, in markup, with a short or a long note).
    LlmTokenReply,
    /// The model repeats one alert text (in varying case and spacing) that dedup must hold back.
    LlmRepeatedAlert,
    /// The model writes a long reply (paragraphs and a code fence) that must be split.
    LlmLongReply,
    /// The platform answers 429 with a short retry-after, in its own shape.
    DeliveryRateLimited,
    /// The platform refuses the message (a 4xx, or Slack's `ok: false`).
    DeliveryRefused,
    /// The model writes what chat platforms read as mentions and markup (`<!channel>`,
    /// `@everyone`, `@name`, `<@U1>`, `&`, `<`, `>`), sometimes in a reply long enough to
    /// split, with unbroken tokens and characters outside the BMP at the cuts.
    LlmPingReply,
    /// The model calls tools of the tool server (some it was offered, some it was not,
    /// sometimes more than the run's cap in one turn).
    LlmToolUse,
    /// A tool call takes up to 90 s (the run's budget may end first).
    ToolSlow,
    /// A tool call never answers: its own timeout must end it.
    ToolHang,
    /// The tool server dies during a call and comes back after 5 s to 2 min.
    ToolServerDies,
    /// The tool server's list changes (`tools/list_changed`): a tool comes or goes.
    ToolListChanged,
    /// The model's provider refuses a request with 401, 402 or 403 (a bad key, a spend
    /// cap, no access): the breaker must open on the first one.
    LlmRefused,
    /// A store read the engine makes when slots are claimed (their prompts) fails: the
    /// claimed runs must fail with a result, not hang or run without a prompt.
    StoreReadError,
    /// A read of a heartbeat's run log fails (the engine reads it for a one-shot's re-arm,
    /// retry and retirement, and for a wake's slot): each such read says what the engine
    /// does without it, and the checker holds it to that.
    StoreLogReadError,
}

impl FaultKind {
    pub const ALL: [FaultKind; 31] = [
        FaultKind::ClockSkew,
        FaultKind::ClockJumpForward,
        FaultKind::ClockJumpBackward,
        FaultKind::StoreError,
        FaultKind::CrashBeforeWrite,
        FaultKind::CrashAfterWrite,
        FaultKind::LlmError,
        FaultKind::LlmRateLimit,
        FaultKind::LlmHang,
        FaultKind::LlmMalformed,
        FaultKind::LlmSlow,
        FaultKind::DeliveryFailure,
        FaultKind::DeliverySlow,
        FaultKind::LlmToolPause,
        FaultKind::LlmToolPauseInvalid,
        FaultKind::LlmToolHeartbeat,
        FaultKind::LlmEndlessTools,
        FaultKind::LlmTokenReply,
        FaultKind::LlmRepeatedAlert,
        FaultKind::LlmLongReply,
        FaultKind::DeliveryRateLimited,
        FaultKind::DeliveryRefused,
        FaultKind::LlmPingReply,
        FaultKind::LlmToolUse,
        FaultKind::ToolSlow,
        FaultKind::ToolHang,
        FaultKind::ToolServerDies,
        FaultKind::ToolListChanged,
        FaultKind::LlmRefused,
        FaultKind::StoreReadError,
        FaultKind::StoreLogReadError,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::ClockJumpForward => "clock-jump-forward",
            FaultKind::ClockJumpBackward => "clock-jump-backward",
            FaultKind::StoreError => "store-error",
            FaultKind::CrashBeforeWrite => "crash-before-write",
            FaultKind::CrashAfterWrite => "crash-after-write",
            FaultKind::LlmError => "llm-error",
            FaultKind::LlmRateLimit => "llm-rate-limit",
            FaultKind::LlmHang => "llm-hang",
            FaultKind::LlmMalformed => "llm-malformed",
            FaultKind::LlmSlow => "llm-slow",
            FaultKind::DeliveryFailure => "delivery-failure",
            FaultKind::DeliverySlow => "delivery-slow",
            FaultKind::LlmToolPause => "llm-tool-pause",
            FaultKind::LlmToolPauseInvalid => "llm-tool-pause-invalid",
            FaultKind::LlmToolHeartbeat => "llm-tool-heartbeat",
            FaultKind::LlmEndlessTools => "llm-endless-tools",
            FaultKind::LlmTokenReply => "llm-token-reply",
            FaultKind::LlmRepeatedAlert => "llm-repeated-alert",
            FaultKind::LlmLongReply => "llm-long-reply",
            FaultKind::DeliveryRateLimited => "delivery-rate-limited",
            FaultKind::DeliveryRefused => "delivery-refused",
            FaultKind::LlmPingReply => "llm-ping-reply",
            FaultKind::LlmToolUse => "llm-tool-use",
            FaultKind::ToolSlow => "tool-slow",
            FaultKind::ToolHang => "tool-hang",
            FaultKind::ToolServerDies => "tool-server-dies",
            FaultKind::ToolListChanged => "tool-list-changed",
            FaultKind::LlmRefused => "llm-refused",
            FaultKind::StoreReadError => "store-read-error",
            FaultKind::StoreLogReadError => "store-log-read-error",
        }
    }

    /// Faults rolled on each call of a port (the clock faults are scheduled instead).
    pub fn is_per_call(self) -> bool {
        !matches!(self, FaultKind::ClockSkew | FaultKind::ClockJumpForward | FaultKind::ClockJumpBackward)
    }

    /// Reply shapes (issue 6), drawn apart so the older faults' rates stay as they were.
    pub fn is_reply_shape(self) -> bool {
        matches!(self, FaultKind::LlmTokenReply | FaultKind::LlmRepeatedAlert)
    }

    /// Faults drawn from streams of their own (issues 25, 26 and 27), so that adding them left
    /// every other draw of a seed as it was.
    pub fn has_own_stream(self) -> bool {
        matches!(
            self,
            FaultKind::LlmPingReply
                | FaultKind::LlmToolUse
                | FaultKind::ToolSlow
                | FaultKind::ToolHang
                | FaultKind::ToolServerDies
                | FaultKind::ToolListChanged
                | FaultKind::LlmRefused
                | FaultKind::StoreLogReadError
        )
    }

    /// The platforms' answers and long replies (issue 14), drawn from a stream of their own.
    pub fn is_delivery_shape(self) -> bool {
        matches!(self, FaultKind::LlmLongReply | FaultKind::DeliveryRateLimited | FaultKind::DeliveryRefused)
    }
}

/// Per-call probability of each fault, derived from the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRates {
    pub per_call: BTreeMap<FaultKind, f64>,
}

const FAULT_ENABLED_PROBABILITY: f64 = 0.5;
const FAULT_RATE_MIN: f64 = 0.002;
const FAULT_RATE_MAX: f64 = 0.15;
/// Crashes are rarer than other faults: each one costs a restart.
const CRASH_RATE_MAX: f64 = 0.02;

impl FaultRates {
    /// Swarm: each fault is on with probability 1/2, and then fires at a rate drawn
    /// log-uniformly between the bounds, so some runs see it rarely and some constantly.
    pub fn swarm(rng: &mut ChaCha8Rng) -> Self {
        let mut per_call = BTreeMap::new();
        for kind in FaultKind::ALL
            .into_iter()
            .filter(|k| k.is_per_call() && !k.is_reply_shape() && !k.is_delivery_shape() && !k.has_own_stream())
        {
            let max = match kind {
                FaultKind::CrashBeforeWrite | FaultKind::CrashAfterWrite => CRASH_RATE_MAX,
                _ => FAULT_RATE_MAX,
            };
            let rate = if rng.random_bool(FAULT_ENABLED_PROBABILITY) {
                let exponent = rng.random_range(FAULT_RATE_MIN.ln()..max.ln());
                exponent.exp()
            } else {
                0.0
            };
            per_call.insert(kind, rate);
        }
        Self { per_call }
    }

    /// Rates of the reply shapes, from their own stream: frequent, since they are the
    /// model's ordinary answers rather than failures.
    /// Rates of the delivery shapes: each on in half the seeds, at up to 20 % of requests.
    pub fn add_delivery_shapes(&mut self, rng: &mut ChaCha8Rng) {
        for kind in FaultKind::ALL.into_iter().filter(|k| k.is_delivery_shape()) {
            let rate = if rng.random_bool(0.5) { rng.random_range(0.01..0.2) } else { 0.0 };
            self.per_call.insert(kind, rate);
        }
    }

    /// The rate of replies full of mentions and markup (issue 25), from a stream of its
    /// own: on in most seeds, since every platform must render them safely.
    pub fn add_ping_replies(&mut self, rng: &mut ChaCha8Rng) {
        let rate = if rng.random_bool(0.8) { rng.random_range(0.05..0.4) } else { 0.0 };
        self.per_call.insert(FaultKind::LlmPingReply, rate);
    }

    /// Rates of the tool faults and of the model's tool use (issue 26): the model uses
    /// tools in most seeds, the server misbehaves in half of them each way.
    pub fn add_tool_faults(&mut self, rng: &mut ChaCha8Rng) {
        let use_rate = if rng.random_bool(0.8) { rng.random_range(0.1..0.7) } else { 0.0 };
        self.per_call.insert(FaultKind::LlmToolUse, use_rate);
        for kind in [FaultKind::ToolSlow, FaultKind::ToolHang, FaultKind::ToolServerDies, FaultKind::ToolListChanged] {
            let rate = if rng.random_bool(0.5) { rng.random_range(0.01..0.2) } else { 0.0 };
            self.per_call.insert(kind, rate);
        }
    }

    /// The rate of the provider's refusals (issue 27): on in a third of the seeds, rare,
    /// since each one stops a heartbeat until its probe.
    pub fn add_refusals(&mut self, rng: &mut ChaCha8Rng) {
        let rate = if rng.random_bool(0.33) { rng.random_range(0.002..0.03) } else { 0.0 };
        self.per_call.insert(FaultKind::LlmRefused, rate);
    }

    /// The rate of failing prompt reads (issue 28): on in a third of the seeds, drawn from
    /// a stream of its own so the other rates stay as they were.
    pub fn add_store_reads(&mut self, rng: &mut ChaCha8Rng) {
        let rate = if rng.random_bool(0.33) { rng.random_range(0.01..0.1) } else { 0.0 };
        self.per_call.insert(FaultKind::StoreReadError, rate);
    }

    /// The rate of failing reads of the run log: on in 40 % of the seeds and often, since
    /// the engine reads the log on rare paths only; from a stream of its own.
    pub fn add_log_reads(&mut self, rng: &mut ChaCha8Rng) {
        let rate = if rng.random_bool(0.4) { rng.random_range(0.05..0.5) } else { 0.0 };
        self.per_call.insert(FaultKind::StoreLogReadError, rate);
    }

    pub fn add_reply_shapes(&mut self, rng: &mut ChaCha8Rng) {
        for kind in FaultKind::ALL.into_iter().filter(|k| k.is_reply_shape()) {
            let rate = if rng.random_bool(0.8) { rng.random_range(0.05..0.6) } else { 0.0 };
            self.per_call.insert(kind, rate);
        }
    }
}

/// Decides, call by call, whether a fault fires, and counts what fired.
#[derive(Debug)]
pub struct Injector {
    state: Mutex<InjectorState>,
}

#[derive(Debug)]
struct InjectorState {
    rng: ChaCha8Rng,
    rates: FaultRates,
    /// False in the liveness phase: the system has healed.
    active: bool,
    crashes_left: u32,
    fired: BTreeMap<FaultKind, u64>,
}

impl Injector {
    pub fn new(rng: ChaCha8Rng, rates: FaultRates, crashes_max: u32) -> Arc<Self> {
        let state = InjectorState { rng, rates, active: true, crashes_left: crashes_max, fired: BTreeMap::new() };
        Arc::new(Self { state: Mutex::new(state) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InjectorState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `kind` fires on this call. Crashes stop firing once the budget is spent.
    pub fn roll(&self, kind: FaultKind) -> bool {
        let mut state = self.lock();
        if !state.active {
            return false;
        }
        let rate = state.rates.per_call.get(&kind).copied().unwrap_or(0.0);
        if rate <= 0.0 {
            return false;
        }
        let is_crash = matches!(kind, FaultKind::CrashBeforeWrite | FaultKind::CrashAfterWrite);
        if is_crash && state.crashes_left == 0 {
            return false;
        }
        if !state.rng.random_bool(rate) {
            return false;
        }
        if is_crash {
            state.crashes_left -= 1;
        }
        *state.fired.entry(kind).or_default() += 1;
        true
    }

    /// Counts a fault the harness injected itself (clock faults).
    /// Whether faults are still being injected (the safety phase, before healing).
    pub fn is_active(&self) -> bool {
        self.lock().active
    }

    pub fn count(&self, kind: FaultKind) {
        *self.lock().fired.entry(kind).or_default() += 1;
    }

    /// A draw from the injector's stream, for fault parameters (how slow, how far).
    pub fn draw(&self, range: std::ops::Range<u64>) -> u64 {
        self.lock().rng.random_range(range)
    }

    /// Heals the system: no fault fires after this.
    pub fn heal(&self) {
        self.lock().active = false;
    }

    pub fn fired(&self) -> BTreeMap<FaultKind, u64> {
        self.lock().fired.clone()
    }
}
