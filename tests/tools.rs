//! Tools of servers in a run, on virtual time, with native tools (the library's way to add
//! tools in Rust) behind the same port and policy as MCP servers: read-only tools by
//! default, a tool that may write only with the job's opt-in and never past a revoked
//! lease, the per-run cap, a hung tool cut off by the run's budget, and a job's pre-check.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use common::{def, key, options, Behaviour, Rig};
use systole::agent::tools::native::{NativeTool, NativeTools, ToolServerSet};
use systole::core::heartbeat::HeartbeatDef;
use systole::core::tool_check::ToolCheck;
use systole::core::tool_policy::{JobTools, ToolPattern};
use systole::driver::EngineOptions;
use systole::ports::clock::Clock;
use systole::ports::fence::Fence;
use systole::ports::store::{ExecutionStatus, StopReason, Store, ToolCallOutcome, ToolUse};
use systole::ports::tools::{CallContext, ToolAnswer};

struct Counted {
    name: &'static str,
    read_only: bool,
    hangs: bool,
    calls: AtomicU32,
}

impl Counted {
    fn new(name: &'static str, read_only: bool, hangs: bool) -> Arc<Self> {
        Arc::new(Self { name, read_only, hangs, calls: AtomicU32::new(0) })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl NativeTool for Counted {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        "a counted tool"
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({ "type": "object", "properties": {} })
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    async fn call(&self, _arguments: serde_json::Value, context: &CallContext) -> Result<ToolAnswer, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.hangs {
            std::future::pending::<()>().await;
        }
        Ok(ToolAnswer { text: format!("{} answered {}", self.name, context.idempotency_key), is_error: false })
    }
}

struct Tools {
    read: Arc<Counted>,
    write: Arc<Counted>,
    hang: Arc<Counted>,
}

/// A rig whose agents may use `notes/*`: `read` (read-only), `write` (may write), `hang`.
fn rig_with_tools() -> (Rig, Tools) {
    let mut rig = Rig::new();
    let tools = Tools {
        read: Counted::new("read", true, false),
        write: Counted::new("write", false, false),
        hang: Counted::new("hang", true, true),
    };
    let clock: Arc<dyn Clock> = rig.clock.clone();
    let notes = NativeTools::new("notes", clock)
        .and_then(|n| n.with(tools.read.clone()))
        .and_then(|n| n.with(tools.write.clone()))
        .and_then(|n| n.with(tools.hang.clone()))
        .expect("valid names");
    rig.tools = Arc::new(ToolServerSet::new(vec![Arc::new(notes)]));
    (rig, tools)
}

fn tool_options() -> EngineOptions {
    let mut options = options();
    options.agent_default.tools = vec![ToolPattern::parse("notes/*").expect("valid")];
    options
}

fn with_tools(def: HeartbeatDef, write: &[&str]) -> HeartbeatDef {
    let write = write.iter().map(|p| ToolPattern::parse(p).expect("valid")).collect();
    HeartbeatDef { tools: JobTools { write, ..JobTools::default() }.into(), ..def }
}

async fn tool_use(rig: &Rig, heartbeat: &str) -> ToolUse {
    let runs = rig.store.executions(&key("a", heartbeat), 1).await.expect("read");
    runs[0].tool_use.clone().expect("the run had tools")
}

fn outcomes(tools: &ToolUse) -> Vec<(String, ToolCallOutcome)> {
    tools.calls.iter().map(|call| (call.tool.clone(), call.outcome)).collect()
}

#[tokio::test(start_paused = true)]
async fn read_only_tools_by_default_and_a_writer_only_with_the_jobs_opt_in() {
    let (rig, tools) = rig_with_tools();
    rig.llm.set("reads", Behaviour::CallOnce("notes__read".to_owned(), "{}".to_owned()));
    rig.llm.set("writes", Behaviour::CallOnce("notes__write".to_owned(), "{}".to_owned()));
    rig.llm.set("opted", Behaviour::CallOnce("notes__write".to_owned(), "{}".to_owned()));
    let defs = [def("a", "reads", 60), def("a", "writes", 60), with_tools(def("a", "opted", 60), &["notes/write"])];
    let _engine = rig.start_with(&defs, tool_options()).await;
    rig.advance(61).await;

    let reads = tool_use(&rig, "reads").await;
    assert_eq!(reads.offered, ["notes/hang", "notes/read"], "read-only tools only");
    assert_eq!(outcomes(&reads), [("notes/read".to_owned(), ToolCallOutcome::Ok)]);
    assert_eq!(outcomes(&tool_use(&rig, "writes").await), [("notes__write".to_owned(), ToolCallOutcome::Refused)]);
    let opted = tool_use(&rig, "opted").await;
    assert!(opted.offered.contains(&"notes/write".to_owned()), "{:?}", opted.offered);
    assert_eq!(outcomes(&opted), [("notes/write".to_owned(), ToolCallOutcome::Ok)]);
    assert_eq!((tools.read.calls(), tools.write.calls()), (1, 1), "the refused call never reached the tool");
    assert!(rig.llm.tool_results().iter().any(|text| text.contains("there is no tool named \"notes__write\"")));
}

#[tokio::test(start_paused = true)]
async fn a_writer_is_fenced_once_the_lease_is_lost_and_the_cap_holds() {
    let (rig, tools) = rig_with_tools();
    rig.llm.set("opted", Behaviour::CallOnce("notes__write".to_owned(), "{}".to_owned()));
    rig.llm.set("greedy", Behaviour::CallForever("notes__read".to_owned(), "{}".to_owned()));
    let fence = Fence::lease(rig.clock.clone(), 3, 7, rig.clock.monotonic() + Duration::from_secs(3_600));
    fence.revoke();
    let mut options = tool_options();
    options.fence = fence;
    options.agent_default.tool_calls_max = 2;
    let defs = [with_tools(def("a", "opted", 60), &["notes/write"]), def("a", "greedy", 60)];
    let _engine = rig.start_with(&defs, options).await;
    rig.advance(61).await;

    assert_eq!(outcomes(&tool_use(&rig, "opted").await), [("notes/write".to_owned(), ToolCallOutcome::Fenced)]);
    assert_eq!(tools.write.calls(), 0, "nothing that may write goes out past the lease");
    let greedy = outcomes(&tool_use(&rig, "greedy").await);
    let ok = greedy.iter().filter(|(_, outcome)| *outcome == ToolCallOutcome::Ok).count();
    let capped = greedy.iter().filter(|(_, outcome)| *outcome == ToolCallOutcome::Cap).count();
    assert_eq!((ok, tools.read.calls()), (2, 2), "{greedy:?}");
    assert!(capped >= 1, "calls past the cap answer with an error: {greedy:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hung_tool_is_cut_off_before_the_runs_budget_ends() {
    let (rig, tools) = rig_with_tools();
    rig.llm.set("hangs", Behaviour::CallOnce("notes__hang".to_owned(), "{}".to_owned()));
    let hanging = HeartbeatDef { timeout: Duration::from_secs(10), ..def("a", "hangs", 60) };
    let _engine = rig.start_with(&[hanging], tool_options()).await;
    rig.advance(75).await;

    let run = &rig.store.executions(&key("a", "hangs"), 1).await.expect("read")[0];
    assert_eq!(run.status, systole::ports::store::ExecutionStatus::Succeeded, "{run:?}");
    let calls = &run.tool_use.as_ref().expect("tools").calls;
    assert_eq!(calls[0].outcome, ToolCallOutcome::Timeout);
    assert!((9_000..10_000).contains(&calls[0].duration_ms), "cut before the budget's end: {}", calls[0].duration_ms);
    assert_eq!(tools.hang.calls(), 1);
    assert_eq!(rig.llm.calls_for("hangs"), 2, "the model heard of the timeout and answered");
}

/// A read-only tool that answers what the test sets, or an error.
struct Answering {
    answer: std::sync::Mutex<Result<String, String>>,
    calls: AtomicU32,
}

#[async_trait]
impl NativeTool for Answering {
    fn name(&self) -> &str {
        "unread"
    }

    fn description(&self) -> &str {
        "unread mail"
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({ "type": "object", "properties": { "folder": { "type": "string" } } })
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, arguments: serde_json::Value, _context: &CallContext) -> Result<ToolAnswer, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert_eq!(arguments, serde_json::json!({ "folder": "INBOX" }), "the check's arguments reach the tool");
        match self.answer.lock().expect("lock").clone() {
            Ok(text) => Ok(ToolAnswer { text, is_error: false }),
            Err(text) => Ok(ToolAnswer { text, is_error: true }),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_quiet_check_skips_the_model_and_a_found_one_hands_it_the_answer() {
    let mut rig = Rig::new();
    let unread = Arc::new(Answering { answer: std::sync::Mutex::new(Ok(" [] ".to_owned())), calls: AtomicU32::new(0) });
    let clock: Arc<dyn Clock> = rig.clock.clone();
    let inbox = NativeTools::new("inbox", clock).and_then(|n| n.with(unread.clone())).expect("valid names");
    rig.tools = Arc::new(ToolServerSet::new(vec![Arc::new(inbox)]));
    let mut options = options();
    options.agent_default.tools = vec![ToolPattern::parse("inbox/*").expect("valid")];
    let check = ToolCheck::from_fields("inbox/unread", Some(serde_json::json!({ "folder": "INBOX" }))).expect("valid");
    let checked =
        HeartbeatDef { tools: JobTools { check: Some(check), ..JobTools::default() }.into(), ..def("a", "mail", 60) };
    let _engine = rig.start_with(&[checked], options).await;
    let llm_calls = || rig.llm.calls.lock().expect("lock").iter().filter(|(_, p)| p.ends_with("mail")).count();
    let latest = async || rig.store.executions(&key("a", "mail"), 1).await.expect("read")[0].clone();

    rig.advance(61).await;
    let quiet = latest().await;
    assert_eq!(
        (quiet.status, quiet.stop_reason),
        (ExecutionStatus::Succeeded, Some(StopReason::QuietCheck)),
        "{quiet:?}"
    );
    assert_eq!(quiet.reply, None, "no reply: the model was never asked");
    assert_eq!((quiet.llm_calls, llm_calls()), (0, 0), "a quiet inbox costs no LLM call");
    let calls = quiet.tool_use.as_ref().expect("the check is in the run log").calls.clone();
    assert_eq!((calls[0].tool.as_str(), calls[0].outcome), ("inbox/unread", ToolCallOutcome::Ok));
    assert_eq!(calls[0].arguments, r#"{"folder":"INBOX"}"#);

    *unread.answer.lock().expect("lock") = Ok("[\"the boss: call me\"]".to_owned());
    rig.llm.set("mail", Behaviour::Reply("unused: the prompt now carries the answer".to_owned()));
    rig.advance(60).await;
    let found = latest().await;
    assert_eq!((found.status, found.llm_calls), (ExecutionStatus::Succeeded, 1), "{found:?}");
    let prompts: Vec<String> = rig.llm.calls.lock().expect("lock").iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(prompts.len(), 1);
    assert!(prompts[0].ends_with("\n\nmail") && prompts[0].contains("the boss: call me"), "{}", prompts[0]);

    *unread.answer.lock().expect("lock") = Err("mailbox locked".to_owned());
    rig.advance(60).await;
    let failed = latest().await;
    assert_eq!((failed.status, failed.llm_calls, llm_calls()), (ExecutionStatus::Failed, 0, 1), "{failed:?}");
    let error = failed.error.unwrap_or_default();
    assert!(error.contains("the check inbox/unread failed") && error.contains("mailbox locked"), "{error}");
    assert_eq!(unread.calls.load(Ordering::SeqCst), 3, "one check per run");
}
