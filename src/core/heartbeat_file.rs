//! Whether a `HEARTBEAT.md` has anything for the agent to do (OpenClaw spec 1.2): a file of
//! only blank lines, ATX headings and empty list items or checkboxes is effectively empty,
//! and a heartbeat driven by it skips without calling the LLM. A missing file is not
//! empty: the agent decides.
//!
//! Also the agent heartbeat's prompt: the spec's default (1.1) and the file's content.

use crate::limits::HEARTBEAT_FILE_BYTES_MAX;

/// The spec's default prompt of the agent heartbeat (1.1), verbatim.
pub const HEARTBEAT_PROMPT_DEFAULT: &str = "Read HEARTBEAT.md if it exists. Follow it strictly — do not infer or \
repeat tasks from prior conversations. If nothing needs attention, reply HEARTBEAT_OK.";

/// The prompt of an agent heartbeat run: the configured prompt, then the file's content
/// (a fresh context has no other way to read it), cut at `HEARTBEAT_FILE_BYTES_MAX`.
/// A missing file adds nothing: the prompt says "if it exists".
pub fn agent_prompt(prompt: &str, content: Option<&str>) -> String {
    let Some(content) = content else { return prompt.to_owned() };
    let mut end = content.len().min(HEARTBEAT_FILE_BYTES_MAX);
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < content.len() { "\n[HEARTBEAT.md cut here: it is longer than the prompt takes]" } else { "" };
    format!("{prompt}\n\nHEARTBEAT.md:\n{}{cut}", &content[..end])
}

/// `None` for a missing file.
pub fn is_effectively_empty(content: Option<&str>) -> bool {
    let Some(content) = content else { return false };
    content.split('\n').all(|line| {
        let line = line.trim();
        line.is_empty() || is_heading(line) || is_empty_list_item(line)
    })
}

/// `#`, `##`, ... followed by whitespace or the end of the line.
fn is_heading(line: &str) -> bool {
    let rest = line.trim_start_matches('#');
    rest.len() < line.len() && (rest.is_empty() || rest.starts_with(char::is_whitespace))
}

/// `-`, `*` or `+`, then optionally a checkbox `[ ]`, `[x]`, `[X]` or `[]`, and nothing else.
fn is_empty_list_item(line: &str) -> bool {
    let Some(rest) = line.strip_prefix(['-', '*', '+']) else { return false };
    let rest = rest.trim_start();
    if rest.is_empty() {
        return true;
    }
    let Some(inside) = rest.strip_prefix('[') else { return false };
    let Some((mark, after)) = inside.split_once(']') else { return false };
    let mark_ok = mark.is_empty()
        || (mark.chars().count() == 1 && mark.chars().all(|c| matches!(c, 'x' | 'X') || c.is_whitespace()));
    mark_ok && after.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_prompt_is_the_spec_s() {
        assert_eq!(
            HEARTBEAT_PROMPT_DEFAULT,
            "Read HEARTBEAT.md if it exists. Follow it strictly — do not infer or repeat tasks from prior conversations. If nothing needs attention, reply HEARTBEAT_OK."
        );
    }

    #[test]
    fn the_prompt_carries_the_file() {
        assert_eq!(agent_prompt("P", None), "P");
        assert_eq!(agent_prompt("P", Some("- water plants")), "P\n\nHEARTBEAT.md:\n- water plants");
        let long = "é".repeat(HEARTBEAT_FILE_BYTES_MAX);
        let prompt = agent_prompt("P", Some(&long));
        assert!(prompt.ends_with("takes]"));
        assert!(prompt.len() < long.len() + 100);
    }

    #[test]
    fn spec_h7_and_h8() {
        // H7: headings and an empty checkbox only.
        assert!(is_effectively_empty(Some("# Heartbeat\n- [ ]\n")));
        // H8: a missing file lets the agent decide.
        assert!(!is_effectively_empty(None));
    }

    #[test]
    fn what_counts_as_content() {
        assert!(is_effectively_empty(Some("")));
        assert!(is_effectively_empty(Some("\n  \n## Tasks\n* \n+ [x]\n- [X]\n-[]\n#\n")));
        assert!(!is_effectively_empty(Some("# Heartbeat\n- [ ] water the plants\n")));
        assert!(!is_effectively_empty(Some("#hashtag")), "not a heading without a space");
        assert!(!is_effectively_empty(Some("- [y]")));
        assert!(!is_effectively_empty(Some("Check the inbox.")));
        assert!(!is_effectively_empty(Some("-- ")));
    }
}
