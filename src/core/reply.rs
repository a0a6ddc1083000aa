//! What a heartbeat's reply means: nothing (empty), "all is well" (the `HEARTBEAT_OK`
//! token, maybe with a short note), or something to deliver. The token is stripped as in
//! the OpenClaw spec (1.3): markup off, the token peeled from both edges until stable,
//! whitespace collapsed; what is left is an acknowledgement if it is short enough.
//!
//! Also the normal form of a reply for duplicate suppression, and its digest.

use sha2::{Digest, Sha256};

/// The token a model answers when nothing needs attention.
pub const HEARTBEAT_TOKEN: &str = "HEARTBEAT_OK";

/// What a reply is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nothing, or only whitespace: silence (`ok-empty`).
    Empty,
    /// The token, with at most `ack_max_chars` of note around it: not delivered
    /// (`ok-token`). The note is kept for the run log.
    Ack { note: String },
    /// Something to deliver (`sent`), the token stripped from its edges if it was there.
    Alert { text: String },
}

/// What became of a run's reply, as the run log and events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReplyKind {
    /// Empty: silence.
    Empty,
    /// The `HEARTBEAT_OK` token (with a short note at most): not delivered.
    Token,
    /// Delivered (or its delivery was attempted).
    Sent,
    /// Identical to a reply delivered within the dedup window: not delivered again.
    Duplicate,
}

impl ReplyKind {
    pub const ALL: [ReplyKind; 4] = [ReplyKind::Empty, ReplyKind::Token, ReplyKind::Sent, ReplyKind::Duplicate];

    pub fn as_str(self) -> &'static str {
        match self {
            ReplyKind::Empty => "ok-empty",
            ReplyKind::Token => "ok-token",
            ReplyKind::Sent => "sent",
            ReplyKind::Duplicate => "duplicate",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// Classifies `raw` by the spec's rules.
pub fn classify(raw: &str, ack_max_chars: usize) -> Reply {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Reply::Empty;
    }
    // Markup only ever becomes spaces or leaves the ends, so a token that is not in the
    // reply is not in its stripped text either: an alert (most replies) is not stripped.
    if !trimmed.contains(HEARTBEAT_TOKEN) {
        return Reply::Alert { text: trimmed.to_owned() };
    }
    let mut text = strip_markup(trimmed).trim().to_owned();
    if !text.contains(HEARTBEAT_TOKEN) {
        return Reply::Alert { text: trimmed.to_owned() };
    }
    let mut stripped = false;
    loop {
        let next = text.trim();
        if let Some(rest) = next.strip_prefix(HEARTBEAT_TOKEN) {
            text = rest.trim_start().to_owned();
        } else if let Some(rest) = next.strip_suffix(HEARTBEAT_TOKEN) {
            text = rest.trim_end().to_owned();
        } else {
            break;
        }
        stripped = true;
    }
    let text = collapse_whitespace(&text);
    if stripped && text.chars().count() <= ack_max_chars {
        return Reply::Ack { note: text };
    }
    // Beyond the acknowledgement length (or the token only inside): meaningful content.
    Reply::Alert { text }
}

/// HTML tags (`<[^>]*>`) and `&nbsp;` become spaces; a leading and a trailing run of
/// markdown emphasis characters go.
fn strip_markup(text: &str) -> String {
    trim_emphasis(&replace_nbsp(&strip_tags(text)))
}

fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        let Some(length) = rest[start..].find('>') else { break };
        out.push_str(&rest[..start]);
        out.push(' ');
        rest = &rest[start + length + 1..];
    }
    out.push_str(rest);
    out
}

fn replace_nbsp(text: &str) -> String {
    const NBSP: &str = "&nbsp;";
    // ASCII lowercasing keeps every byte where it was, so indices carry over.
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    while let Some(found) = lower[from..].find(NBSP) {
        out.push_str(&text[from..from + found]);
        out.push(' ');
        from += found + NBSP.len();
    }
    out.push_str(&text[from..]);
    out
}

fn trim_emphasis(text: &str) -> String {
    let emphasis = |character: char| matches!(character, '*' | '`' | '~' | '_');
    text.trim_start_matches(emphasis).trim_end_matches(emphasis).to_owned()
}

fn collapse_whitespace(text: &str) -> String {
    let mut collapsed = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !collapsed.is_empty() {
            collapsed.push(' ');
        }
        collapsed.push_str(word);
    }
    collapsed
}

/// The form two replies are compared in for duplicate suppression: case and whitespace
/// do not count.
pub fn normal_form(text: &str) -> String {
    collapse_whitespace(&text.to_lowercase())
}

/// A digest of the normal form, stored with each delivery (hex SHA-256). The normal
/// form's words are hashed as they are found, not collapsed into a copy first (a copy
/// of every reply).
pub fn digest(text: &str) -> String {
    let mut hasher = Sha256::new();
    for (index, word) in text.to_lowercase().split_whitespace().enumerate() {
        if index > 0 {
            hasher.update(b" ");
        }
        hasher.update(word.as_bytes());
    }
    crate::core::hex::lower_hex(&hasher.finalize())
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
