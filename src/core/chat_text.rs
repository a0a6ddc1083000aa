//! What a model's reply must become before a chat platform shows it, so that it can never
//! notify a channel, a group or a person unless the target allows mentions (issue 25):
//! - Slack reads `<!channel>`, `<!here>`, `<@U123>` as mentions; its documented escaping of
//!   `&`, `<` and `>` turns them into plain text.
//! - Telegram makes `@username` in plain text a mention that notifies that user; a word
//!   joiner (U+2060, invisible) after the `@` keeps the name and drops the mention. Plain
//!   text has no other markup to worry about: no `parse_mode` is ever sent.
//! - Discord switches mentions off in the request (`allowed_mentions`), not in the text.
//!
//! Parts are split before they are rendered, measured by what each character becomes
//! ([`TextRules::units`]), so a rendered part still fits its platform and no escape is
//! ever cut in half.

/// Invisible, and not part of a Telegram username: `@\u{2060}name` mentions nobody.
pub const MENTION_BREAK: char = '\u{2060}';

/// The longest `<...>` Slack control sequence kept as a mention when mentions are allowed.
const SLACK_SEQUENCE_CHARS_MAX: usize = 120;

/// How a platform reads the text of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextRules {
    /// Sent as written: Discord (mentions are off in its request), webhooks, stdout.
    AsWritten,
    /// Slack's `text`: `&`, `<`, `>` escaped; with `mentions`, its mention sequences
    /// (`<@U123>`, `<#C123>`, `<!here>`, ...) are kept.
    Slack { mentions: bool },
    /// Telegram's plain text: `@name` broken with [`MENTION_BREAK`] unless `mentions`.
    Telegram { mentions: bool },
}

impl TextRules {
    /// The most UTF-16 units `c` takes once rendered (what the platforms count).
    pub fn units(self, c: char) -> usize {
        match (self, c) {
            (TextRules::Slack { .. }, '&') => "&amp;".len(),
            (TextRules::Slack { .. }, '<' | '>') => "&lt;".len(),
            (TextRules::Telegram { mentions: false }, '@') => 1 + MENTION_BREAK.len_utf16(),
            _ => c.len_utf16(),
        }
    }

    /// The UTF-16 units of `text` once rendered, at most.
    pub fn len(self, text: &str) -> usize {
        text.chars().map(|c| self.units(c)).sum()
    }

    /// `part` as the platform must receive it.
    pub fn render(self, part: &str) -> String {
        match self {
            TextRules::AsWritten | TextRules::Telegram { mentions: true } => part.to_owned(),
            TextRules::Slack { mentions } => slack_escape(part, mentions),
            TextRules::Telegram { mentions: false } => break_telegram_mentions(part),
        }
    }
}

/// Slack's escaping; with `keep_mentions`, a `<@...>`, `<#...>` or `<!...>` sequence on one
/// line stays as it is (everything around it is still escaped).
fn slack_escape(text: &str, keep_mentions: bool) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if keep_mentions && c == '<' {
            if let Some(sequence) = slack_mention(rest) {
                out.push_str(sequence);
                rest = &rest[sequence.len()..];
                continue;
            }
        }
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            other => out.push(other),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The mention sequence `text` starts with, if any: `<` then `@`, `#` or `!`, then up to
/// `>` with no `<`, `&` or line break on the way.
fn slack_mention(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('<')?;
    if !inner.starts_with(['@', '#', '!']) {
        return None;
    }
    for (index, c) in inner.char_indices().take(SLACK_SEQUENCE_CHARS_MAX) {
        match c {
            '>' => return Some(&text[..index + 2]),
            '<' | '&' | '\n' => return None,
            _ => {}
        }
    }
    None
}

/// Whether `c` can follow `@` in a Telegram username.
fn telegram_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn break_telegram_mentions(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3 * text.matches('@').count());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '@' && chars.peek().is_some_and(|next| telegram_name_char(*next)) {
            out.push(MENTION_BREAK);
        }
    }
    out
}

/// Whether a rendered part could notify someone on its platform: a Slack control
/// sequence or a stray `&`, or a Telegram `@name`. The property tests and the simulator's
/// checker hold every part against it.
pub fn could_notify(rules: TextRules, rendered: &str) -> bool {
    match rules {
        TextRules::AsWritten | TextRules::Slack { mentions: true } | TextRules::Telegram { mentions: true } => false,
        TextRules::Slack { mentions: false } => {
            rendered.contains(['<', '>'])
                || rendered
                    .match_indices('&')
                    .any(|(at, _)| !["&amp;", "&lt;", "&gt;"].iter().any(|entity| rendered[at..].starts_with(entity)))
        }
        TextRules::Telegram { mentions: false } => {
            rendered.char_indices().any(|(at, c)| c == '@' && rendered[at + 1..].starts_with(telegram_name_char))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLACK: TextRules = TextRules::Slack { mentions: false };
    const TELEGRAM: TextRules = TextRules::Telegram { mentions: false };

    #[test]
    fn slack_control_sequences_become_plain_text() {
        let rendered = SLACK.render("<!channel> deploy <@U123|bob> & <https://x.io|site> a>b");
        assert_eq!(rendered, "&lt;!channel&gt; deploy &lt;@U123|bob&gt; &amp; &lt;https://x.io|site&gt; a&gt;b");
        assert!(!could_notify(SLACK, &rendered));
        assert!(could_notify(SLACK, "<!here>"));
    }

    #[test]
    fn slack_keeps_only_mention_sequences_when_mentions_are_allowed() {
        let rules = TextRules::Slack { mentions: true };
        let rendered = rules.render("<!here> ping <@U1> & <b>bold</b> <!unclosed");
        assert_eq!(rendered, "<!here> ping <@U1> &amp; &lt;b&gt;bold&lt;/b&gt; &lt;!unclosed");
    }

    #[test]
    fn telegram_names_stay_visible_and_notify_nobody() {
        let rendered = TELEGRAM.render("cc @alice and @bob_2, mail a@b.io, lone @ sign");
        assert_eq!(rendered.replace(MENTION_BREAK, ""), "cc @alice and @bob_2, mail a@b.io, lone @ sign");
        assert!(!could_notify(TELEGRAM, &rendered), "{rendered:?}");
        assert!(could_notify(TELEGRAM, "hi @alice"));
        assert_eq!(TextRules::Telegram { mentions: true }.render("@alice"), "@alice");
    }

    #[test]
    fn units_never_undercount_the_rendered_text() {
        let text = "&<>@a @ 😀 <!here>";
        for rules in [SLACK, TELEGRAM, TextRules::Slack { mentions: true }, TextRules::AsWritten] {
            let rendered = rules.render(text);
            assert!(rendered.encode_utf16().count() <= rules.len(text), "{rules:?}: {rendered:?}");
        }
    }
}
