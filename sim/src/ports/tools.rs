//! The simulated tool server behind the `ToolServers` port (the real one, MCP on real
//! tokio, cannot run in madsim). One server, `inbox`, as an operator would configure it:
//! `search` and `slow` marked read-only, `archive` a tool that may write and has an
//! external effect (the world counts each one), and `fresh`, which its list gains and
//! loses (`tools/list_changed`). Its faults, from a stream of their own: a slow call, a
//! hang (the call's own timeout must end it), the server dying mid-call and coming back
//! after a while, the list changing. `search` answers `[]` (nothing to do) half the time,
//! which a job's pre-check skips the model on. Every call is recorded with the timeout it was
//! given, so the checker can hold it to the run's budget.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use systole::core::tool_policy::ToolName;
use systole::ports::clock::{Clock, Mono};
use systole::ports::tools::{
    CallContext, Catalog, ServerState, ServerTool, ServerView, ToolAnswer, ToolCallError, ToolHints, ToolServers,
};

use crate::faults::FaultKind;
use crate::trace::Event;
use crate::world::{Life, World};

/// The one simulated server.
pub const SERVER: &str = "inbox";
/// Tools the operator marked read-only.
pub const READ_ONLY_TOOLS: [&str; 3] = ["search", "slow", "fresh"];
/// The tool with an external effect.
pub const WRITE_TOOL: &str = "archive";
/// The tool that sometimes finds nothing (`[]`), and how often: jobs check with it.
pub const QUIET_TOOL: &str = "search";
const QUIET_ANSWER_RATE: f64 = 0.5;
/// The longest a slow call takes.
const SLOW_SECS_MAX: u64 = 90;
/// How long a dead server stays down.
const DOWN_SECS_MIN: u64 = 5;
const DOWN_SECS_MAX: u64 = 120;

/// The server as the world holds it (shared by every life: it is another process).
#[derive(Debug)]
pub struct ToolWorld {
    rng: ChaCha8Rng,
    /// Down until this monotonic instant.
    down_until: Option<Mono>,
    /// Whether `fresh` is listed now.
    fresh: bool,
    restarts: u64,
}

impl ToolWorld {
    pub fn new(rng: ChaCha8Rng) -> Self {
        Self { rng, down_until: None, fresh: false, restarts: 0 }
    }
}

pub fn is_read_only(tool: &str) -> bool {
    READ_ONLY_TOOLS.contains(&tool)
}

fn listed(name: &str) -> ServerTool {
    ServerTool {
        name: ToolName::new(SERVER, name),
        description: format!("the simulated {name}"),
        input_schema: serde_json::json!({ "type": "object", "properties": {} }),
        hints: ToolHints::default(),
        read_only: is_read_only(name),
    }
}

pub struct SimTools {
    pub world: Arc<World>,
    pub life: Arc<Life>,
}

impl SimTools {
    fn tools(&self) -> std::sync::MutexGuard<'_, ToolWorld> {
        self.world.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `kind` fires on this call, from the tool stream (not the injector's, so a
    /// seed's other faults stay what they were), counted when it does.
    fn fires(&self, kind: FaultKind, tools: &mut ToolWorld) -> bool {
        let rate = self.world.options.fault_rates.per_call.get(&kind).copied().unwrap_or(0.0);
        let fired = rate > 0.0 && self.world.injector.is_active() && tools.rng.random_bool(rate);
        if fired {
            self.world.injector.count(kind);
        }
        fired
    }
}

#[async_trait]
impl ToolServers for SimTools {
    fn catalog(&self) -> Catalog {
        let now = self.world.clock.monotonic();
        let mut tools = self.tools();
        if tools.down_until.is_some_and(|until| now >= until) {
            tools.down_until = None;
            tools.restarts += 1;
        }
        let state = match tools.down_until {
            Some(_) => ServerState::Down { why: "the server died".to_owned(), retry_at: None },
            None => ServerState::Ready,
        };
        let mut names = vec!["search", WRITE_TOOL, "slow"];
        if tools.fresh {
            names.push("fresh");
        }
        let listed =
            if matches!(state, ServerState::Ready) { names.into_iter().map(listed).collect() } else { Vec::new() };
        let view =
            ServerView { name: SERVER.to_owned(), transport: "sim", state, tools: listed, restarts: tools.restarts };
        Catalog::from([(SERVER.to_owned(), view)])
    }

    async fn call(
        &self,
        tool: &ToolName,
        _arguments: serde_json::Value,
        timeout: Duration,
        context: &CallContext,
    ) -> Result<ToolAnswer, ToolCallError> {
        self.life.ensure_alive().await;
        self.world.record(Event::ToolCalled {
            life: self.life.number,
            key: context.key.clone(),
            slot: context.slot,
            tool: tool.to_string(),
            timeout,
        });
        let unavailable = |why: &str| ToolCallError::Unavailable { server: tool.server.clone(), why: why.to_owned() };
        let now = self.world.clock.monotonic();
        let (delay, dies, hangs) = {
            let mut tools = self.tools();
            if tools.down_until.is_some_and(|until| now < until) {
                return Err(unavailable("the server is down"));
            }
            if self.fires(FaultKind::ToolListChanged, &mut tools) {
                tools.fresh = !tools.fresh;
            }
            let hangs = self.fires(FaultKind::ToolHang, &mut tools);
            let dies = self.fires(FaultKind::ToolServerDies, &mut tools);
            let delay = if self.fires(FaultKind::ToolSlow, &mut tools) {
                Duration::from_secs(tools.rng.random_range(1..=SLOW_SECS_MAX))
            } else {
                Duration::from_millis(tools.rng.random_range(1..500))
            };
            (delay, dies, hangs)
        };
        if hangs {
            self.world.fault(FaultKind::ToolHang, format!("{tool} for {}", context.idempotency_key));
            self.world.clock.sleep(timeout).await;
            self.life.ensure_alive().await;
            return Err(ToolCallError::Timeout { tool: tool.clone(), timeout });
        }
        self.world.clock.sleep(delay.min(timeout)).await;
        self.life.ensure_alive().await;
        if dies {
            let down = Duration::from_secs(self.tools().rng.random_range(DOWN_SECS_MIN..=DOWN_SECS_MAX));
            self.world.fault(FaultKind::ToolServerDies, format!("{tool}: down for {}s", down.as_secs()));
            self.tools().down_until = Some(self.world.clock.monotonic() + down);
            return Err(unavailable("the connection ended during the call"));
        }
        if delay > timeout {
            return Err(ToolCallError::Timeout { tool: tool.clone(), timeout });
        }
        if tool.tool == WRITE_TOOL {
            let event = Event::ToolEffect {
                life: self.life.number,
                key: context.key.clone(),
                slot: context.slot,
                tool: tool.to_string(),
            };
            self.world.record(event);
        }
        // `search` finds nothing half the time: what a job's pre-check skips the model on.
        let quiet = tool.tool == QUIET_TOOL && self.tools().rng.random_bool(QUIET_ANSWER_RATE);
        let event = Event::ToolAnswered {
            life: self.life.number,
            key: context.key.clone(),
            slot: context.slot,
            tool: tool.to_string(),
            quiet,
        };
        self.world.record(event);
        let text = if quiet { "[]".to_owned() } else { format!("{tool} answered for {}", context.idempotency_key) };
        Ok(ToolAnswer { text, is_error: false })
    }
}
