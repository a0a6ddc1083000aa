//! Splits a message that is too long for a chat platform into parts that each fit: at a
//! paragraph break if one is near the end, else a line break, else a space, else between
//! two characters; a code fence open at a cut is closed at the end of the part and opened
//! again (with its language) at the start of the next, so every part renders on its own.
//! Nothing is dropped, unless the parts would exceed `parts_max`: then the last part says
//! how much was not sent. Lengths are counted in UTF-16 code units, which is never less
//! than the characters a platform counts, of the text as the platform's [`TextRules`]
//! will render it: a part is split first and rendered after, so it still fits and no
//! escape is cut in half.

use crate::core::chat_text::TextRules;

/// What closes a fence left open at a cut.
const FENCE_CLOSE: &str = "\n```";
/// A fence's opening line longer than this is reopened as a bare "```".
const FENCE_OPENING_CHARS_MAX: usize = 32;
/// The shortest limit that leaves room for a reopened fence and some text.
pub const MESSAGE_PART_CHARS_MIN: usize = 2 * FENCE_OPENING_CHARS_MAX + 16;

/// The length a platform measures, in UTF-16 code units.
pub fn platform_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// The parts of `text`, in order, each at most `limit` long once rendered by `rules`
/// (`limit` is raised to [`MESSAGE_PART_CHARS_MIN`]), at most `parts_max` of them. The
/// parts are not rendered yet.
pub fn split_message(text: &str, limit: usize, parts_max: usize, rules: TextRules) -> Vec<String> {
    let limit = limit.max(MESSAGE_PART_CHARS_MIN);
    let parts_max = parts_max.max(1);
    let mut parts = Vec::new();
    let mut rest = text;
    let mut open_fence: Option<String> = None;
    loop {
        let prefix = open_fence.as_ref().map(|fence| format!("{fence}\n")).unwrap_or_default();
        if rules.len(&prefix) + rules.len(rest) <= limit {
            parts.push(format!("{prefix}{rest}"));
            return parts;
        }
        if parts.len() + 1 == parts_max {
            parts.push(cut_short(&prefix, rest, limit, rules));
            return parts;
        }
        let budget = limit - rules.len(&prefix) - rules.len(FENCE_CLOSE);
        let (chunk, next) = cut(rest, budget, rules);
        let fence_after = fence_state(open_fence, chunk);
        let close = if fence_after.is_some() { FENCE_CLOSE } else { "" };
        parts.push(format!("{prefix}{chunk}{close}"));
        open_fence = fence_after;
        rest = next;
    }
}

/// The last part allowed: as much as fits, then a visible note of what was not sent.
fn cut_short(prefix: &str, rest: &str, limit: usize, rules: TextRules) -> String {
    let note_room = 64;
    let budget = limit.saturating_sub(rules.len(prefix) + note_room);
    let (chunk, dropped) = cut(rest, budget, rules);
    format!("{prefix}{chunk}\n\n[message cut: {} more characters were not sent]", dropped.chars().count())
}

/// Cuts `text` (longer than `budget`) at the best boundary within `budget`: the part
/// before the cut, and what follows the separator.
fn cut(text: &str, budget: usize, rules: TextRules) -> (&str, &str) {
    // The longest prefix within the budget, on a character boundary.
    let mut end = 0;
    let mut used = 0;
    for (index, character) in text.char_indices() {
        used += rules.units(character);
        if used > budget {
            break;
        }
        end = index + character.len_utf8();
    }
    let window = &text[..end];
    for separator in ["\n\n", "\n", " "] {
        if let Some(at) = window.rfind(separator).filter(|at| *at > 0) {
            return (&text[..at], &text[at + separator.len()..]);
        }
    }
    // One word longer than a message: cut inside it (never an empty part).
    let end = if end == 0 { text.chars().next().map_or(0, char::len_utf8) } else { end };
    (&text[..end], &text[end..])
}

/// Whether a fence is open after `chunk`, given the one open before it: each line that
/// starts with three backticks opens a fence (keeping its language) or closes the open one.
fn fence_state(mut open: Option<String>, chunk: &str) -> Option<String> {
    for line in chunk.lines() {
        let line = line.trim_start();
        if !line.starts_with("```") {
            continue;
        }
        open = match open {
            Some(_) => None,
            None if line.trim_end().chars().count() <= FENCE_OPENING_CHARS_MAX => Some(line.trim_end().to_owned()),
            None => Some("```".to_owned()),
        };
    }
    open
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::core::chat_text::{could_notify, MENTION_BREAK};

    const PLAIN: TextRules = TextRules::AsWritten;

    fn without_whitespace(text: &str) -> String {
        text.chars().filter(|c| !c.is_whitespace()).collect()
    }

    #[test]
    fn a_short_message_is_one_part() {
        assert_eq!(split_message("hello", 2_000, 10, PLAIN), vec!["hello"]);
    }

    #[test]
    fn paragraphs_come_before_lines_and_lines_before_words() {
        let text = format!("{}\n\n{}\nthird line", "a".repeat(60), "b".repeat(20));
        let parts = split_message(&text, 90, 10, PLAIN);
        assert_eq!(parts, vec!["a".repeat(60), format!("{}\nthird line", "b".repeat(20))]);
        let words = "word ".repeat(40);
        let parts = split_message(words.trim_end(), 100, 10, PLAIN);
        assert!(
            parts.iter().all(|part| !part.starts_with(' ') && !part.ends_with(' ') && part.len() <= 100),
            "{parts:?}"
        );
    }

    #[test]
    fn a_fence_open_at_a_cut_is_closed_and_reopened_with_its_language() {
        let code: String = (0..30).map(|n| format!("let x{n} = {n};\n")).collect();
        let text = format!("Here is the fix:\n\n```rust\n{code}```\nDone.");
        let parts = split_message(&text, 200, 10, PLAIN);
        assert!(parts.len() > 2, "{parts:?}");
        for part in &parts {
            assert!(platform_len(part) <= 200, "{part:?}");
            let fences = part.lines().filter(|line| line.trim_start().starts_with("```")).count();
            assert_eq!(fences % 2, 0, "every part has its fences balanced: {part:?}");
        }
        assert!(parts[2].starts_with("```rust\n"), "{:?}", parts[2]);
    }

    #[test]
    fn a_word_longer_than_a_message_is_cut_inside_and_nothing_is_lost() {
        let text = "x".repeat(250);
        let parts = split_message(&text, 100, 10, PLAIN);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|part| platform_len(part) <= 100));
    }

    #[test]
    fn past_the_parts_limit_the_last_part_says_what_was_not_sent() {
        let text = "word ".repeat(1_000);
        let parts = split_message(&text, 100, 3, PLAIN);
        assert_eq!(parts.len(), 3);
        assert!(parts[2].contains("more characters were not sent"), "{:?}", parts[2]);
        assert!(platform_len(&parts[2]) <= 100);
    }

    #[test]
    fn emoji_count_as_two_units_as_on_the_platforms() {
        let text = "😀".repeat(60);
        let parts = split_message(&text, 100, 10, PLAIN);
        assert!(parts.iter().all(|part| platform_len(part) <= 100), "{parts:?}");
        assert_eq!(parts.concat(), text);
    }

    fn without_fence_lines(text: &str) -> String {
        text.lines().filter(|line| !line.trim_start().starts_with("```")).collect::<Vec<_>>().join("\n")
    }

    proptest! {
        /// Every part fits; no text is lost (the splitter adds only fence lines); and
        /// every part but the last has its fences balanced.
        #[test]
        fn parts_fit_keep_every_character_and_balance_fences(
            pieces in proptest::collection::vec(
                prop_oneof!["[a-z]{1,12}", Just(" ".to_owned()), Just("\n".to_owned()), Just("\n\n".to_owned()),
                    Just("\n```py\n".to_owned()), Just("\n```\n".to_owned()), Just("é😀".to_owned())],
                0..400),
            limit in 80usize..400,
        ) {
            let text: String = pieces.concat();
            let parts = split_message(&text, limit, usize::MAX, PLAIN);
            for part in &parts {
                prop_assert!(platform_len(part) <= limit, "{} > {limit}: {part:?}", platform_len(part));
            }
            for part in parts.iter().take(parts.len().saturating_sub(1)) {
                let fences = part.lines().filter(|line| line.trim_start().starts_with("```")).count();
                prop_assert_eq!(fences % 2, 0, "unbalanced: {:?}", part);
            }
            let joined = parts.iter().map(|part| without_fence_lines(part)).collect::<String>();
            prop_assert_eq!(without_whitespace(&joined), without_whitespace(&without_fence_lines(&text)));
        }

        /// Replies full of what Slack and Telegram read as mentions and markup: every
        /// rendered part fits its platform in UTF-16 units, notifies nobody, carries only
        /// whole escapes (so it reads back to what was written), and loses nothing.
        #[test]
        fn rendered_parts_fit_notify_nobody_and_read_back_whole(
            pieces in proptest::collection::vec(
                prop_oneof!["[a-z]{1,12}", "[a-z]{200,400}", Just(" ".to_owned()), Just("\n".to_owned()),
                    Just("<!channel>".to_owned()), Just("<!here>".to_owned()), Just("<@U024BE7LH>".to_owned()),
                    Just("&amp;".to_owned()), Just("&".to_owned()), Just("<".to_owned()), Just(">".to_owned()),
                    Just("@everyone".to_owned()), Just("@alice_b".to_owned()), Just("@".to_owned()),
                    Just("\n```rust\n".to_owned()), Just("\n```\n".to_owned()), Just("😀".to_owned()),
                    Just("é".to_owned())],
                0..300),
            limit in 80usize..400,
            slack in any::<bool>(),
        ) {
            let text: String = pieces.concat();
            let rules = if slack { TextRules::Slack { mentions: false } } else { TextRules::Telegram { mentions: false } };
            let parts = split_message(&text, limit, usize::MAX, rules);
            let mut read_back = String::new();
            for part in &parts {
                let rendered = rules.render(part);
                prop_assert!(rendered.encode_utf16().count() <= limit, "{} > {limit}: {rendered:?}", rendered.len());
                prop_assert!(!could_notify(rules, &rendered), "{rules:?} part could notify: {rendered:?}");
                let plain = if slack {
                    rendered.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
                } else {
                    rendered.clone()
                };
                read_back.push_str(&without_fence_lines(&plain.replace(MENTION_BREAK, "")));
            }
            prop_assert_eq!(without_whitespace(&read_back), without_whitespace(&without_fence_lines(&text)));
        }
    }
}
