//! A run's transcript: what the model was sent and answered, tool calls and their results
//! included, kept in the run log (issue 27). Bounded per message and per run, with a note
//! where cut; every secret value the daemon read from the environment is blanked first,
//! so a key a tool echoed or a prompt quoted never reaches the store.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::core::text::{truncate_chars, without_nul};
use crate::limits::{TRANSCRIPT_CHARS_MAX, TRANSCRIPT_MESSAGE_CHARS_MAX};
use crate::ports::llm::{ChatResponse, Message, Role};

/// The secret values a transcript must never hold (API keys, bot tokens, webhook
/// secrets, database passwords, MCP servers' variables), as read at start-up.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// Shorter values would blank ordinary words.
const SECRET_CHARS_MIN: usize = 6;

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> =
            secrets.into_iter().filter(|secret| secret.chars().count() >= SECRET_CHARS_MIN).collect();
        // The longest first, so a secret that contains another is blanked whole.
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// `text` with every secret blanked; borrowed when it holds none (a copy per message
    /// of every run's transcript, most of them holding no secret).
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !self.secrets.iter().any(|secret| text.contains(secret.as_str())) {
            return Cow::Borrowed(text);
        }
        let blanked =
            self.secrets.iter().fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), "[redacted]"));
        Cow::Owned(blanked)
    }
}

/// One step of the conversation as the transcript keeps it.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Message(Message),
    /// A completion that failed (the error as the run log shows it).
    Failed(String),
}

/// The conversation of one run: the messages of its latest request (each request carries
/// the whole conversation so far) and what came back after it.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    steps: Vec<Step>,
}

impl Conversation {
    /// A request went out: it holds everything said so far.
    pub fn sent(&mut self, messages: &[Message]) {
        // Room for the answer that follows.
        let mut steps = Vec::with_capacity(messages.len() + 1);
        steps.extend(messages.iter().cloned().map(Step::Message));
        self.steps = steps;
    }

    pub fn answered(&mut self, response: &ChatResponse) {
        let message = Message {
            role: Role::Assistant,
            content: response.text.as_deref().unwrap_or_default().into(),
            tool_calls: response.tool_calls.clone(),
            tool_call_id: None,
        };
        self.steps.push(Step::Message(message));
    }

    pub fn failed(&mut self, error: String) {
        self.steps.push(Step::Failed(error));
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The transcript as stored: JSON, secrets blanked, each text cut at
    /// `TRANSCRIPT_MESSAGE_CHARS_MAX` and the whole at `TRANSCRIPT_CHARS_MAX`, saying so.
    pub fn render(&self, redactor: &Redactor) -> String {
        // Written into one buffer sized for the texts and their keys: a string per step,
        // each grown write by write, then joined, was a twentieth of a burst's CPU in
        // reallocations.
        const HEAD: &[u8] = b"{\"messages\":[";
        let texts: usize = self.steps.iter().map(Step::text_bytes).sum();
        let wanted = HEAD.len() + texts + STEP_KEYS_BYTES * self.steps.len() + 2;
        // No more than a bounded transcript takes, whatever a long conversation holds.
        let mut out = Vec::with_capacity(wanted.min(TRANSCRIPT_BUFFER_BYTES_MAX));
        out.extend_from_slice(HEAD);
        let mut used = 0usize;
        let mut left_out = 0usize;
        for step in &self.steps {
            if used >= TRANSCRIPT_CHARS_MAX {
                left_out += 1;
                continue;
            }
            let before = out.len();
            if before > HEAD.len() {
                out.push(b',');
            }
            let start = out.len();
            if write_step(&mut out, step, redactor).is_err() {
                out.truncate(before);
                continue;
            }
            used += chars_in(&out[start..]);
        }
        out.extend_from_slice(b"]}");
        // serde_json writes UTF-8 only; nothing else to fall back on.
        let mut transcript = String::from_utf8(out).unwrap_or_default();
        if left_out > 0 {
            let cut = format!(
                "{left_out} later message(s) left out: the transcript reached its {TRANSCRIPT_CHARS_MAX} characters"
            );
            // Where `json!` would write it: "cut" before "messages".
            transcript.insert_str(1, &format!("\"cut\":{},", Value::String(cut)));
        }
        transcript
    }
}

impl Step {
    /// The bytes of its texts: what its JSON holds besides keys and escapes.
    fn text_bytes(&self) -> usize {
        match self {
            Step::Failed(error) => error.len(),
            Step::Message(message) => {
                let calls: usize =
                    message.tool_calls.iter().map(|call| call.arguments.len() + call.id.len() + call.name.len()).sum();
                message.content.len() + calls + message.tool_call_id.as_ref().map_or(0, String::len)
            }
        }
    }
}

/// The most a transcript's buffer is sized for at first: the whole bound and one more
/// message past it, in characters of two bytes (it grows if escapes or wider characters
/// need more).
const TRANSCRIPT_BUFFER_BYTES_MAX: usize = 2 * (TRANSCRIPT_CHARS_MAX + TRANSCRIPT_MESSAGE_CHARS_MAX);

/// A step's keys, quotes and role, about (`{"content":"","role":"assistant"}` is 34).
const STEP_KEYS_BYTES: usize = 48;

/// The characters of UTF-8 `bytes`: those that do not continue a character.
fn chars_in(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&byte| (byte & 0xC0) != 0x80).count()
}

/// A step as the transcript writes it. The fields in the order `serde_json` writes a map
/// (its keys sorted), so the text is the one a `json!` value of the step gave: stored
/// transcripts keep one form. Written straight from the run's own texts, where building a
/// `Value` first (a map and a copy of every key and text) was a seventh of a burst's CPU.
#[derive(Serialize)]
struct StepText<'a> {
    content: Cow<'a, str>,
    role: Speaker,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallText<'a>>,
}

/// Who a step is from: a role of the conversation, or the error of a failed completion.
#[derive(Serialize)]
#[serde(untagged)]
enum Speaker {
    Said(Role),
    Failed(&'static str),
}

#[derive(Serialize)]
struct CallText<'a> {
    arguments: Cow<'a, str>,
    id: &'a str,
    name: &'a str,
}

/// The step as compact JSON, appended to `out`.
fn write_step(out: &mut Vec<u8>, step: &Step, redactor: &Redactor) -> serde_json::Result<()> {
    let text = |text| bounded(redactor.redact(text));
    let written = match step {
        Step::Failed(error) => StepText {
            content: text(error),
            role: Speaker::Failed("error"),
            tool_call_id: None,
            tool_calls: Vec::new(),
        },
        Step::Message(message) => StepText {
            content: text(&message.content),
            role: Speaker::Said(message.role),
            tool_call_id: message.tool_call_id.as_deref(),
            tool_calls: message
                .tool_calls
                .iter()
                .map(|call| CallText { arguments: text(&call.arguments), id: &call.id, name: &call.name })
                .collect(),
        },
    };
    // Cannot fail (every key is a string, and a `Vec` takes every write).
    serde_json::to_writer(out, &written)
}

/// One text of the transcript: no NUL (PostgreSQL cannot keep it), cut with a note.
fn bounded(text: Cow<'_, str>) -> Cow<'_, str> {
    let text = match without_nul(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(replaced) => Cow::Owned(replaced),
    };
    // No more characters than bytes: a short text needs no count.
    if text.len() <= TRANSCRIPT_MESSAGE_CHARS_MAX {
        return text;
    }
    let length = text.chars().count();
    if length <= TRANSCRIPT_MESSAGE_CHARS_MAX {
        return text;
    }
    let cut = length - TRANSCRIPT_MESSAGE_CHARS_MAX;
    Cow::Owned(format!("{} [... {cut} characters cut]", truncate_chars(&text, TRANSCRIPT_MESSAGE_CHARS_MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_blanked_the_longest_first_and_short_values_left_alone() {
        let redactor =
            Redactor::new(["sk-live-abcdef".to_owned(), "sk-live-abcdef-extra".to_owned(), "abc".to_owned()]);
        assert_eq!(
            redactor.redact("key sk-live-abcdef-extra and sk-live-abcdef, abc"),
            "key [redacted] and [redacted], abc"
        );
    }

    #[test]
    fn the_transcript_keeps_the_last_request_and_the_answers_bounded_with_notes() {
        let mut conversation = Conversation::default();
        conversation.sent(&[Message::system("be brief"), Message::user("check the inbox token=sk-secret-1")]);
        conversation.answered(&ChatResponse {
            text: Some("x".repeat(TRANSCRIPT_MESSAGE_CHARS_MAX + 5)),
            ..ChatResponse::default()
        });
        conversation.failed("LLM endpoint answered HTTP 500: boom".to_owned());
        let text = conversation.render(&Redactor::new(["sk-secret-1".to_owned()]));
        let value: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(text, value.to_string(), "written as serde_json writes a value: stored transcripts keep one form");
        let messages = value["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[1]["content"], "check the inbox token=[redacted]");
        assert!(messages[2]["content"].as_str().expect("text").ends_with("[... 5 characters cut]"));
        assert_eq!(messages[3]["role"], "error");
        assert!(value.get("cut").is_none());
        // Tool calls and a tool's answer, written as a `Value` of them would be.
        let mut tools = Conversation::default();
        let asked = Message {
            role: Role::Assistant,
            content: "".into(),
            tool_calls: vec![crate::ports::llm::ToolCall {
                id: "call-1".to_owned(),
                name: "inbox/search".to_owned(),
                arguments: "{\"q\":\"sk-secret-1 \u{0}\"}".to_owned(),
            }],
            tool_call_id: None,
        };
        let answer = Message { tool_call_id: Some("call-1".to_owned()), ..Message::user("3 new") };
        tools.sent(&[asked, Message { role: Role::Tool, ..answer }]);
        let text = tools.render(&Redactor::new(["sk-secret-1".to_owned()]));
        let value: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(text, value.to_string(), "keys in serde_json's order");
        let call = &value["messages"][0]["tool_calls"][0];
        assert_eq!(call["id"], "call-1");
        assert_eq!(call["name"], "inbox/search");
        assert_eq!(call["arguments"], format!("{{\"q\":\"[redacted] {}\"}}", crate::core::text::NUL_REPLACEMENT));
        assert!(value["messages"][0].get("tool_call_id").is_none());
        assert_eq!(value["messages"][1]["tool_call_id"], "call-1");
        assert_eq!(value["messages"][1]["role"], "tool");
        assert!(value["messages"][1].get("tool_calls").is_none(), "no empty list of calls");
        // A conversation past the whole bound says how many messages it left out.
        let mut long = Conversation::default();
        let big = Message::user("y".repeat(TRANSCRIPT_MESSAGE_CHARS_MAX));
        long.sent(&vec![big; TRANSCRIPT_CHARS_MAX / TRANSCRIPT_MESSAGE_CHARS_MAX + 3]);
        let text = long.render(&Redactor::default());
        let value: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(text, value.to_string());
        assert!(value["cut"].as_str().is_some_and(|note| note.contains("later message(s) left out")), "{value}");
        assert!(value.to_string().chars().count() < TRANSCRIPT_CHARS_MAX + 2 * TRANSCRIPT_MESSAGE_CHARS_MAX);
        // The bound counts characters, not bytes: seven messages of two-byte characters
        // are within it in characters and past it in bytes.
        let mut wide = Conversation::default();
        let accented = Message::user("é".repeat(TRANSCRIPT_MESSAGE_CHARS_MAX));
        wide.sent(&vec![accented; 7]);
        let value: Value = serde_json::from_str(&wide.render(&Redactor::default())).expect("JSON");
        assert!(value.get("cut").is_none(), "{}", value["cut"]);
        assert_eq!(value["messages"].as_array().map(Vec::len), Some(7));
    }
}
