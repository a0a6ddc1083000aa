//! The simulated LLM: seeded replies (quiet or an alert) and the LLM faults: errors, rate
//! limits, hangs past the run's budget, malformed output, slowness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;

use serde_json::json;
use systole::core::usage::TokenUsage;
use systole::ports::clock::Clock;
use systole::ports::llm::{ChatRequest, ChatResponse, Llm, LlmError, Role, ToolCall};

use crate::faults::FaultKind;
use crate::trace::Event;
use crate::world::{Life, World};

const SLOW_SECS_MAX: u64 = 180;

pub struct SimLlm {
    pub world: Arc<World>,
    pub life: Arc<Life>,
    pub replies: AtomicU64,
}

impl SimLlm {
    pub fn new(world: Arc<World>, life: Arc<Life>) -> Self {
        Self { world, life, replies: AtomicU64::new(0) }
    }

    fn answer(&self, prompt: &str, answer: &str) {
        let event = Event::LlmCall { life: self.life.number, prompt: prompt.to_owned(), answer: answer.to_owned() };
        self.world.record(event);
    }

    /// One of `shapes`, drawn by the injector, recorded as the reply fault `kind`.
    fn shaped_reply(&self, kind: FaultKind, prompt: &str, shapes: &[&str]) -> ChatResponse {
        let text = shapes[self.world.injector.draw(0..shapes.len() as u64) as usize];
        self.world.fault(kind, format!("{prompt}: {text:?}"));
        self.answer(prompt, text);
        ChatResponse { text: Some(text.to_owned()), tool_calls: Vec::new(), usage: None }
    }
}

/// A prompt that ends in `[fails N]` fails its first N calls (an LLM error), whatever the
/// rates: the workload gives it to one-shots, so their retry path is common.
pub const FLAKY_MARKER: &str = "[fails ";

impl SimLlm {
    /// Every other call of a grid-finishing heartbeat, while faults are on.
    fn grid_call_fails(&self, prompt: &str) -> bool {
        if !self.world.injector.is_active() {
            return false;
        }
        let mut calls = self.world.flaky_calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = calls.entry(format!("grid {prompt}")).or_default();
        *count += 1;
        let fails = (*count).is_multiple_of(2);
        drop(calls);
        if fails {
            self.world.injector.count(FaultKind::LlmError);
        }
        fails
    }

    fn flaky_fails(&self, prompt: &str) -> bool {
        if !self.world.injector.is_active() {
            return false; // healed: no fault of any kind
        }
        let Some(rest) = prompt.rsplit_once(FLAKY_MARKER).map(|(_, rest)| rest) else { return false };
        let Some(limit) = rest.strip_suffix(']').and_then(|n| n.parse::<u32>().ok()) else { return false };
        let mut calls = self.world.flaky_calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let failed = calls.entry(prompt.to_owned()).or_default();
        if *failed >= limit {
            return false;
        }
        *failed += 1;
        self.world.injector.count(FaultKind::LlmError);
        true
    }
}

impl SimLlm {
    /// A call of the one-shot trigger scenario's one-shot: it takes its plan's time and
    /// answers quietly, but the plan's failing call (counted over the prompt's calls, across
    /// restarts) fails while faults are on, at once or after that time.
    async fn planned_call(
        &self,
        prompt: &str,
        plan: crate::one_shot_triggers::CallPlan,
    ) -> Result<ChatResponse, LlmError> {
        let ordinal = {
            let mut calls = self.world.flaky_calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let count = calls.entry(format!("planned {prompt}")).or_default();
            *count += 1;
            *count
        };
        let fails = ordinal == plan.failing_call && self.world.injector.is_active();
        if !(fails && plan.fails_early) {
            self.world.clock.sleep(Duration::from_secs(plan.secs)).await;
            self.life.ensure_alive().await;
        }
        // Asked again after the sleep: the world may have healed meanwhile.
        if fails && self.world.injector.is_active() {
            self.world.injector.count(FaultKind::LlmError);
            self.world.fault(FaultKind::LlmError, format!("{prompt}: HTTP 500 (call {ordinal})"));
            self.answer(prompt, "error 500 (planned)");
            return Err(LlmError::Status { status: 500, body: "injected".to_owned() });
        }
        self.answer(prompt, "quiet");
        Ok(ChatResponse::default())
    }
}

/// Shapes of the model's calls of the tool server's tools.
const TOOL_USE_VARIANTS: u64 = 4;
/// Calls past the run's cap a burst makes.
const TOOL_BURST_OVER_CAP: u32 = 3;

impl SimLlm {
    /// The model's calls of the tool server's tools (issue 26), from their own stream:
    /// one or two of those offered, a burst past the run's cap, or one it was not offered.
    fn tool_use(&self, prompt: &str, request: &ChatRequest) -> Option<Result<ChatResponse, LlmError>> {
        let offered: Vec<&str> =
            request.tools.iter().map(|tool| tool.name.as_str()).filter(|name| name.contains("__")).collect();
        let rate = self.world.options.fault_rates.per_call.get(&FaultKind::LlmToolUse).copied().unwrap_or(0.0);
        if offered.is_empty() || rate <= 0.0 || !self.world.injector.is_active() {
            return None;
        }
        let names: Vec<String> = {
            let mut rng = self.world.tool_use_rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !rng.random_bool(rate) {
                return None;
            }
            let variant = rng.random_range(0..TOOL_USE_VARIANTS);
            let mut pick = || offered[rng.random_range(0..offered.len())].to_owned();
            match variant {
                0 => vec![pick()],
                1 => vec![pick(), pick()],
                2 => (0..self.world.options.tool_calls_max + TOOL_BURST_OVER_CAP).map(|_| pick()).collect(),
                _ => {
                    vec![if offered.contains(&"inbox__archive") { "inbox__nope" } else { "inbox__archive" }.to_owned()]
                }
            }
        };
        self.world.injector.count(FaultKind::LlmToolUse);
        self.world.fault(FaultKind::LlmToolUse, format!("{prompt}: {names:?}"));
        self.answer(prompt, &format!("tools {names:?}"));
        let calls = names
            .into_iter()
            .enumerate()
            .map(|(index, name)| ToolCall { id: format!("tool-{index}"), name, arguments: "{}".to_owned() })
            .collect();
        Some(Ok(ChatResponse { text: None, tool_calls: calls, usage: None }))
    }
}

/// Tool calls whose id starts with this keep the model calling tools for the whole run.
const ENDLESS_ID: &str = "endless";
/// Model-made heartbeats are `model-0` to `model-3`, so creates, updates and deletes meet.
const MODEL_HEARTBEATS: u64 = 4;

impl SimLlm {
    fn call(&self, id: &str, name: &str, arguments: serde_json::Value) -> Result<ChatResponse, LlmError> {
        let call = ToolCall { id: id.to_owned(), name: name.to_owned(), arguments: arguments.to_string() };
        Ok(ChatResponse { text: None, tool_calls: vec![call], usage: None })
    }

    /// The model's first move in a run, when a tool behaviour fires.
    fn first_tool_call(&self, prompt: &str) -> Option<Result<ChatResponse, LlmError>> {
        let injector = &self.world.injector;
        if injector.roll(FaultKind::LlmEndlessTools) {
            self.world.fault(FaultKind::LlmEndlessTools, prompt);
            self.answer(prompt, "tool heartbeat list (endless)");
            return Some(self.call(ENDLESS_ID, "heartbeat", json!({ "action": "list" })));
        }
        if injector.roll(FaultKind::LlmToolPause) {
            let minutes = injector.draw(1..90);
            self.world.fault(FaultKind::LlmToolPause, format!("{prompt} for {minutes} min"));
            self.answer(prompt, &format!("tool pause_heartbeats {minutes}"));
            return Some(self.call("pause", "pause_heartbeats", json!({ "minutes": minutes })));
        }
        if injector.roll(FaultKind::LlmToolPauseInvalid) {
            self.world.fault(FaultKind::LlmToolPauseInvalid, prompt);
            self.answer(prompt, "tool pause_heartbeats \"soon\"");
            return Some(self.call("pause", "pause_heartbeats", json!({ "minutes": "soon" })));
        }
        if injector.roll(FaultKind::LlmToolHeartbeat) {
            let arguments = self.heartbeat_arguments(prompt);
            self.world.fault(FaultKind::LlmToolHeartbeat, arguments.to_string());
            self.answer(prompt, &format!("tool heartbeat {arguments}"));
            return Some(self.call("heartbeat", "heartbeat", arguments));
        }
        None
    }

    fn heartbeat_arguments(&self, prompt: &str) -> serde_json::Value {
        let injector = &self.world.injector;
        // The running heartbeat's agent: its prompt names it first (an agent heartbeat's
        // cron-event prompt after an event's `[CRON:id]`), so the model's prompt names its
        // own agent and no two heartbeats share a prompt.
        let agent = prompt.split_once("heartbeat ").and_then(|(_, rest)| rest.split('/').next()).unwrap_or("agent-0");
        let id = format!("model-{}", injector.draw(0..MODEL_HEARTBEATS));
        let intervals: Vec<u64> =
            self.world.options.heartbeats.iter().filter_map(|h| h.schedule.interval()).map(|i| i.as_secs()).collect();
        let interval =
            intervals.get(injector.draw(0..intervals.len().max(1) as u64) as usize).copied().unwrap_or(3_600);
        match injector.draw(0..5) {
            0 => json!({ "action": "delete", "id": id }),
            4 => json!({ "action": "create", "id": id, "prompt": format!("heartbeat {agent}/{id}"),
                         "cron": "*/10 * * * *", "timezone": "Europe/Berlin", "delivery_target": "sim:inbox" }),
            1 => json!({ "action": "update", "id": id, "interval_secs": interval }),
            2 => json!({ "action": "create", "id": id, "prompt": format!("heartbeat {agent}/{id}"), "interval_secs": 5,
                         "delivery_target": "sim:inbox" }),
            _ => json!({ "action": "create", "id": id, "prompt": format!("heartbeat {agent}/{id}"),
                         "interval_secs": interval, "delivery_target": "sim:inbox" }),
        }
    }
}

#[async_trait]
impl Llm for SimLlm {
    /// The model's answer, with the usage a provider reports for it.
    async fn complete(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut response = self.answer_request(&request).await?;
        response.usage = Some(usage_of(&request, &response));
        Ok(response)
    }
}

/// Tokens as a provider would count them, from the request and the answer alone (no
/// draw, so adding them left every stream of a seed as it was): about four characters a
/// token, a fixed overhead per message, the earlier turns of a conversation served from
/// the prompt cache, and a fifth of the output spent reasoning.
fn usage_of(request: &ChatRequest, response: &ChatResponse) -> TokenUsage {
    const CHARS_PER_TOKEN: u64 = 4;
    const TOKENS_PER_MESSAGE: u64 = 8;
    let tokens = |text: &str| text.len() as u64 / CHARS_PER_TOKEN;
    let message_tokens = |message: &systole::ports::llm::Message| tokens(&message.content) + TOKENS_PER_MESSAGE;
    let input: u64 = request.messages.iter().map(message_tokens).sum();
    let last = request.messages.last().map_or(0, message_tokens);
    let cached = if request.messages.len() > 2 { input - last } else { 0 };
    let output = response.text.as_deref().map_or(1, tokens)
        + response.tool_calls.iter().map(|call| tokens(&call.arguments) + TOKENS_PER_MESSAGE).sum::<u64>();
    TokenUsage { input, cached, output, reasoning: output / 5 }
}

impl SimLlm {
    async fn answer_request(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.life.ensure_alive().await;
        let prompt =
            request.messages.iter().find(|m| m.role == Role::User).map(|m| m.content.to_string()).unwrap_or_default();
        let endless = request.messages.iter().any(|m| m.tool_calls.iter().any(|c| c.id.starts_with(ENDLESS_ID)));
        if endless {
            self.answer(&prompt, "tool heartbeat list (endless)");
            return self.call(ENDLESS_ID, "heartbeat", json!({ "action": "list" }));
        }
        let first_turn = !request.messages.iter().any(|m| m.role == Role::Tool);
        if let Some(plan) = crate::one_shot_triggers::CallPlan::of(&prompt) {
            return self.planned_call(&prompt, plan).await;
        }
        let refused = prompt.ends_with(crate::scenarios::SLOW_REFUSED_MARKER);
        if refused || prompt.ends_with(crate::scenarios::SLOW_FAILING_MARKER) {
            self.world.clock.sleep(Duration::from_secs(crate::scenarios::SLOW_REPEAT_RUN_SECS)).await;
            self.life.ensure_alive().await;
            if self.world.injector.is_active() {
                let (kind, status) = if refused { (FaultKind::LlmRefused, 401) } else { (FaultKind::LlmError, 500) };
                self.world.fault(kind, format!("{prompt}: HTTP {status}"));
                self.answer(&prompt, &format!("error {status} (slow)"));
                return Err(LlmError::Status { status, body: "injected".to_owned() });
            }
            let text = crate::scenarios::SLOW_REPEAT_REPLY;
            self.answer(&prompt, text);
            return Ok(ChatResponse { text: Some(text.to_owned()), tool_calls: Vec::new(), usage: None });
        }
        if prompt.ends_with(crate::scenarios::SLOW_REPEAT_MARKER) {
            // Outlasts its interval and says the same each time (not a fault: also healed).
            self.world.clock.sleep(Duration::from_secs(crate::scenarios::SLOW_REPEAT_RUN_SECS)).await;
            self.life.ensure_alive().await;
            let text = crate::scenarios::SLOW_REPEAT_REPLY;
            self.answer(&prompt, text);
            return Ok(ChatResponse { text: Some(text.to_owned()), tool_calls: Vec::new(), usage: None });
        }
        let chorus = prompt.ends_with(crate::scenarios::GRID_CHORUS_MARKER);
        if (prompt.ends_with(crate::scenarios::GRID_FINISH_MARKER) || chorus) && first_turn {
            // Answers at the next grid instant, so this `allow_all` heartbeat's runs in
            // flight end together and their results meet in one group commit; while faults
            // are on, every other call fails, so the order the store counts them in decides
            // the breaker's count.
            let grid = crate::scenarios::GRID_FINISH_SECS * 1_000;
            let elapsed = u64::try_from(self.world.clock.monotonic().since_origin().as_millis()).unwrap_or(0);
            self.world.clock.sleep(Duration::from_millis(grid - elapsed % grid)).await;
            self.life.ensure_alive().await;
            if chorus {
                // The same alert each time, delivered once a day.
                let text = crate::scenarios::GRID_CHORUS_REPLY;
                self.answer(&prompt, text);
                return Ok(ChatResponse { text: Some(text.to_owned()), tool_calls: Vec::new(), usage: None });
            }
            if self.grid_call_fails(&prompt) {
                self.world.fault(FaultKind::LlmError, &prompt);
                self.answer(&prompt, "error 500 (grid)");
                return Err(LlmError::Status { status: 500, body: "injected".to_owned() });
            }
        }
        let injector = &self.world.injector;
        if injector.roll(FaultKind::LlmHang) {
            self.world.fault(FaultKind::LlmHang, &prompt);
            self.answer(&prompt, "hang");
            std::future::pending::<()>().await;
        }
        if let Some(status) = self.world.refusal() {
            self.world.fault(FaultKind::LlmRefused, format!("{prompt}: HTTP {status}"));
            self.answer(&prompt, &format!("refused {status}"));
            return Err(LlmError::Status { status, body: "injected: invalid key, spend cap or no access".to_owned() });
        }
        if self.flaky_fails(&prompt) || injector.roll(FaultKind::LlmError) {
            self.world.fault(FaultKind::LlmError, &prompt);
            self.answer(&prompt, "error 500");
            return Err(LlmError::Status { status: 500, body: "injected".to_owned() });
        }
        if injector.roll(FaultKind::LlmRateLimit) {
            self.world.fault(FaultKind::LlmRateLimit, &prompt);
            self.answer(&prompt, "rate limit");
            return Err(LlmError::RateLimited { retry_after_secs: Some(30) });
        }
        if injector.roll(FaultKind::LlmMalformed) {
            self.world.fault(FaultKind::LlmMalformed, &prompt);
            self.answer(&prompt, "malformed");
            return Err(LlmError::Malformed("injected: not a chat completion".to_owned()));
        }
        if first_turn {
            if let Some(response) = self.tool_use(&prompt, request) {
                return response;
            }
            if let Some(response) = self.first_tool_call(&prompt) {
                return response;
            }
        }
        if injector.roll(FaultKind::LlmSlow) {
            let secs = injector.draw(1..SLOW_SECS_MAX);
            self.world.fault(FaultKind::LlmSlow, format!("{prompt} for {secs}s"));
            self.world.clock.sleep(Duration::from_secs(secs)).await;
            self.life.ensure_alive().await;
        }
        let alert = {
            let mut rng = self.world.llm_rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            rng.random_bool(self.world.options.alert_probability)
        };
        if !alert {
            if injector.roll(FaultKind::LlmTokenReply) {
                let shapes = [
                    "HEARTBEAT_OK",
                    "**HEARTBEAT_OK**",
                    "<b>HEARTBEAT_OK</b>",
                    "HEARTBEAT_OK\nAll good, 3 tasks done.",
                ];
                return Ok(self.shaped_reply(FaultKind::LlmTokenReply, &prompt, &shapes));
            }
            self.answer(&prompt, "quiet");
            return Ok(ChatResponse::default());
        }
        if injector.roll(FaultKind::LlmRepeatedAlert) {
            // The same alert, in varying case and spacing: one delivery a day, not one a run.
            let shapes = [
                "Disk usage at 95%, action needed",
                "disk usage at 95%,  action NEEDED",
                " Disk usage at 95%, action needed\n",
            ];
            return Ok(self.shaped_reply(FaultKind::LlmRepeatedAlert, &prompt, &shapes));
        }
        let number = self.replies.fetch_add(1, Ordering::Relaxed) + 1;
        // Now and then a long report after the token: delivered, without the token.
        let text = if let Some(variant) = self.world.ping_reply(PING_VARIANTS) {
            self.world.fault(FaultKind::LlmPingReply, format!("{prompt}: variant {variant}"));
            ping_report(number, &prompt, variant)
        } else if number.is_multiple_of(7) {
            format!("HEARTBEAT_OK\nalert {number} from {prompt}: {}", "details ".repeat(50))
        } else if injector.roll(FaultKind::LlmLongReply) {
            self.world.fault(FaultKind::LlmLongReply, &prompt);
            long_report(number, &prompt)
        } else {
            format!("alert {number} from {prompt}")
        };
        self.answer(&prompt, &text);
        Ok(ChatResponse { text: Some(text), tool_calls: Vec::new(), usage: None })
    }
}

/// A report long enough to be split on every platform: paragraphs of words, and a code
/// block longer than a Discord message, so a fence is closed and opened again at a cut.
fn long_report(number: u64, prompt: &str) -> String {
    let paragraph =
        |n: usize| format!("Finding {n} of report {number}: {}", "the disk is filling up again ".repeat(8 + n % 5));
    let code: String = (0..120).map(|line| format!("log line {line} of report {number}: write failed\n")).collect();
    let mut parts: Vec<String> = (0..6).map(paragraph).collect();
    parts.insert(3, format!("```text\n{code}```"));
    format!("alert {number} from {prompt}\n\n{}", parts.join("\n\n"))
}

/// Shapes of [`ping_report`].
const PING_VARIANTS: u64 = 4;

/// What chat platforms read as mentions and markup: short, or long enough to split with
/// the mentions, escapes, unbroken tokens and characters outside the BMP near the cuts.
fn ping_report(number: u64, prompt: &str, variant: u64) -> String {
    let pings = "<!channel> <!here> @everyone @here @alice_b <@U024BE7LH> <#C1|ops> & a<b>c &amp; &lt;";
    match variant {
        0 => format!("alert {number} from {prompt}: {pings}"),
        // One unbroken token of escapes and emoji, longer than any platform's message.
        1 => format!("alert {number} from {prompt}\n{}", "&<😀>@a".repeat(900)),
        // Paragraphs of mentions, each near a Discord part, in and out of a code block.
        2 => {
            let paragraph = format!("{pings} {}", "😀".repeat(400));
            let code = format!("```text\n{}\n```", format!("{pings}\n").repeat(60));
            format!("alert {number} from {prompt}\n\n{paragraph}\n\n{code}\n\n{paragraph}")
        }
        // Characters outside the BMP at every position a cut could fall on.
        _ => format!("alert {number} from {prompt} {}", "𝄞a<".repeat(3_000)),
    }
}
