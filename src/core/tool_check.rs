//! A job's zero-token pre-check (ADR 0021): one tool call made before the model is asked.
//! A quiet answer (nothing, or an empty or false value) ends the run without an LLM call,
//! so a quiet inbox costs nothing; any other answer goes to the model with the prompt, so
//! it need not call the tool again. Pure: the caller makes the call and hands in its text.

use crate::core::tool_policy::ToolName;

/// The most characters of the check's arguments accepted (they are stored with the job).
pub const CHECK_ARGUMENTS_CHARS_MAX: usize = 4_000;

/// Answers that mean "nothing to do", after trimming (case-insensitive): what a tool that
/// lists or counts things says when there is nothing.
const QUIET_ANSWERS: [&str; 7] = ["", "[]", "{}", "null", "false", "0", "\"\""];

/// The tool a job calls first, and the arguments it passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCheck {
    pub tool: ToolName,
    /// A JSON object.
    pub arguments: serde_json::Map<String, serde_json::Value>,
}

impl ToolCheck {
    /// Reads a check from its fields as users write them.
    ///
    /// # Errors
    /// `(field, problem)` for the field at fault.
    pub fn from_fields(tool: &str, arguments: Option<serde_json::Value>) -> Result<Self, (&'static str, String)> {
        let tool = ToolName::parse(tool).map_err(|problem| ("check_tool", problem))?;
        let arguments = match arguments {
            None => serde_json::Map::new(),
            Some(serde_json::Value::Object(map)) => map,
            Some(other) => {
                return Err(("check_arguments", format!("must be a table of arguments, not {}", kind_of(&other))))
            }
        };
        let check = Self { tool, arguments };
        let chars = check.arguments_text().chars().count();
        if chars > CHECK_ARGUMENTS_CHARS_MAX {
            return Err((
                "check_arguments",
                format!("{chars} characters as JSON; at most {CHECK_ARGUMENTS_CHARS_MAX}"),
            ));
        }
        Ok(check)
    }

    /// The arguments as JSON text (what the tool receives and the run log shows).
    pub fn arguments_text(&self) -> String {
        serde_json::Value::Object(self.arguments.clone()).to_string()
    }
}

fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a table",
    }
}

/// Whether a check's answer says there is nothing to do.
pub fn is_quiet(answer: &str) -> bool {
    let answer = answer.trim();
    QUIET_ANSWERS.iter().any(|quiet| answer.eq_ignore_ascii_case(quiet))
}

/// The prompt a run sends when its check found something: what the check answered, then
/// the job's prompt (which keeps its end: an agent heartbeat's system events close it).
pub fn prompt_with_answer(prompt: &str, check: &ToolCheck, answer: &str) -> String {
    format!(
        "Before this run, the tool {} was called with {} and answered:\n{}\n\n{prompt}",
        check.tool,
        check.arguments_text(),
        answer.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_empty_or_false_is_quiet_and_anything_else_is_not() {
        for quiet in ["", "  \n", "[]", " {} ", "null", "FALSE", "0", "\"\""] {
            assert!(is_quiet(quiet), "{quiet:?}");
        }
        for found in ["1", "[{\"subject\":\"hi\"}]", "true", "no new mail", "00", "0 new, 3 old", "[ ]x"] {
            assert!(!is_quiet(found), "{found:?}");
        }
    }

    #[test]
    fn fields_are_checked_and_named() {
        let check =
            ToolCheck::from_fields("inbox/unread", Some(serde_json::json!({"folder": "INBOX"}))).expect("valid");
        assert_eq!(check.tool, ToolName::new("inbox", "unread"));
        assert_eq!(check.arguments_text(), r#"{"folder":"INBOX"}"#);
        assert_eq!(ToolCheck::from_fields("inbox/unread", None).expect("valid").arguments_text(), "{}");
        let (field, problem) = ToolCheck::from_fields("inbox", None).expect_err("no tool");
        assert_eq!(field, "check_tool", "{problem}");
        let (field, problem) =
            ToolCheck::from_fields("inbox/unread", Some(serde_json::json!([1]))).expect_err("not a table");
        assert_eq!((field, problem.as_str()), ("check_arguments", "must be a table of arguments, not a list"));
        let long = serde_json::json!({ "q": "x".repeat(CHECK_ARGUMENTS_CHARS_MAX) });
        let (field, problem) = ToolCheck::from_fields("inbox/unread", Some(long)).expect_err("too long");
        assert_eq!(field, "check_arguments");
        assert!(problem.contains("at most 4000"), "{problem}");
    }

    #[test]
    fn a_found_answer_follows_the_prompt() {
        let check = ToolCheck::from_fields("inbox/unread", None).expect("valid");
        let prompt = prompt_with_answer("Report urgent mail.", &check, " [\"from boss\"]\n");
        assert_eq!(
            prompt,
            "Before this run, the tool inbox/unread was called with {} and answered:\n[\"from boss\"]\n\nReport urgent mail."
        );
    }
}
