//! What an MCP server sends, as the engine needs it: a listed tool as a [`ServerTool`]
//! (with the operator's read-only marks applied), and a `tools/call` result as the text
//! the model reads. Read from the wire form (JSON), which the spec fixes, rather than
//! from the SDK's types, which change between its major versions.

use serde_json::Value;

use crate::core::text::truncate_chars;
use crate::core::tool_policy::{any_matches, check_tool_name, ToolName};
use crate::mcp::settings::ServerSettings;
use crate::ports::tools::{ServerTool, ToolAnswer, ToolHints};

/// A tool as `tools/list` gives it (`name`, `description`, `inputSchema`, `annotations`),
/// or why it is left out (a name the engine cannot offer a model).
///
/// # Errors
/// The problem in words, for the log.
pub fn listed_tool(server: &str, settings: &ServerSettings, tool: &Value) -> Result<ServerTool, String> {
    let name = tool["name"].as_str().ok_or("a tool without a name")?;
    check_tool_name(name)?;
    let name = ToolName::new(server, name);
    let annotations = &tool["annotations"];
    let hints = ToolHints {
        read_only: annotations["readOnlyHint"].as_bool(),
        destructive: annotations["destructiveHint"].as_bool(),
        idempotent: annotations["idempotentHint"].as_bool(),
        open_world: annotations["openWorldHint"].as_bool(),
    };
    // The operator's word decides; the server's hint only when the operator trusts it.
    let read_only =
        any_matches(&settings.read_only, &name) || (settings.trust_annotations && hints.read_only == Some(true));
    let mut input_schema = tool["inputSchema"].clone();
    if !input_schema.is_object() {
        input_schema = serde_json::json!({ "type": "object", "properties": {} });
    }
    let description = tool["description"].as_str().or(tool["title"].as_str()).unwrap_or_default();
    Ok(ServerTool {
        name,
        description: truncate_chars(description, TOOL_DESCRIPTION_CHARS_MAX),
        input_schema,
        hints,
        read_only,
    })
}

/// Characters of a tool's description offered to the model.
const TOOL_DESCRIPTION_CHARS_MAX: usize = 1_000;

/// A `tools/call` result for the model: text parts joined, every other part described
/// (never dropped silently), `structuredContent` when there is no text, cut at
/// `chars_max` with a note saying so; `isError` kept.
pub fn answer(result: &Value, chars_max: usize) -> ToolAnswer {
    let mut parts: Vec<String> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        parts.push(describe_block(block));
    }
    if parts.iter().all(|part| part.is_empty()) {
        if let Some(structured) = result.get("structuredContent").filter(|value| !value.is_null()) {
            parts = vec![structured.to_string()];
        }
    }
    let text = parts.join("\n");
    let text = if text.is_empty() { "(the tool returned no content)".to_owned() } else { text };
    let total = text.chars().count();
    let text = if total > chars_max {
        format!(
            "{}\n[cut: the result had {total} characters; only the first {chars_max} are shown]",
            truncate_chars(&text, chars_max)
        )
    } else {
        text
    };
    ToolAnswer { text, is_error: result["isError"].as_bool() == Some(true) }
}

fn describe_block(block: &Value) -> String {
    let size = |data: &Value| data.as_str().map_or(0, |data| data.len() * 3 / 4);
    let mime = |block: &Value| block["mimeType"].as_str().unwrap_or("unknown type").to_owned();
    match block["type"].as_str() {
        Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
        Some("image") => format!("[image: {}, about {} bytes, not shown]", mime(block), size(&block["data"])),
        Some("audio") => format!("[audio: {}, about {} bytes, not shown]", mime(block), size(&block["data"])),
        Some("resource") => {
            let resource = &block["resource"];
            let uri = resource["uri"].as_str().unwrap_or("?");
            match resource["text"].as_str() {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => {
                    format!("[resource {uri}: {}, about {} bytes, not shown]", mime(resource), size(&resource["blob"]))
                }
            }
        }
        Some("resource_link") => {
            let uri = block["uri"].as_str().unwrap_or("?");
            let name = block["name"].as_str().unwrap_or(uri);
            format!("[link to resource {name}: {uri}]")
        }
        other => format!("[content of type {} not shown]", other.unwrap_or("unknown")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::core::tool_policy::ToolPattern;
    use crate::mcp::settings::Transport;

    fn settings(read_only: &[&str], trust: bool) -> ServerSettings {
        ServerSettings {
            transport: Transport::Http { url: "http://127.0.0.1:1/mcp".to_owned(), headers: Default::default() },
            call_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
            read_only: read_only.iter().map(|p| ToolPattern::parse(&format!("inbox/{p}")).expect("valid")).collect(),
            trust_annotations: trust,
        }
    }

    #[test]
    fn read_only_is_the_operators_word_and_hints_count_only_when_trusted() {
        let tool = json!({ "name": "search", "description": "Search mail", "inputSchema": { "type": "object" },
                           "annotations": { "readOnlyHint": true } });
        assert!(!listed_tool("inbox", &settings(&[], false), &tool).expect("listed").read_only);
        assert!(listed_tool("inbox", &settings(&[], true), &tool).expect("listed").read_only);
        assert!(listed_tool("inbox", &settings(&["sea*"], false), &tool).expect("listed").read_only);
        let listed = listed_tool("inbox", &settings(&[], false), &tool).expect("listed");
        assert_eq!(listed.hints.read_only, Some(true), "the hint is kept for the operator to see");
        assert!(listed_tool("inbox", &settings(&[], false), &json!({ "name": "bad name" })).is_err());
    }

    #[test]
    fn results_keep_text_describe_the_rest_and_say_where_cut() {
        let result = json!({ "content": [
            { "type": "text", "text": "3 unread" },
            { "type": "image", "data": "aGVsbG8=", "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "mail://1", "text": "Hi" } },
            { "type": "resource_link", "uri": "mail://2", "name": "second" },
            { "type": "hologram" }
        ] });
        let answer = answer(&result, 1_000);
        assert!(!answer.is_error);
        for part in ["3 unread", "[image: image/png", "[resource mail://1]\nHi", "[link to resource second", "hologram"]
        {
            assert!(answer.text.contains(part), "{part} in {}", answer.text);
        }
        let long = json!({ "content": [{ "type": "text", "text": "x".repeat(50) }], "isError": true });
        let cut = super::answer(&long, 10);
        assert!(cut.is_error);
        assert!(cut.text.starts_with("xxxxxxxxxx\n[cut: the result had 50 characters"), "{}", cut.text);
        let structured = super::answer(&json!({ "content": [], "structuredContent": { "n": 3 } }), 100);
        assert_eq!(structured.text, r#"{"n":3}"#);
    }
}
