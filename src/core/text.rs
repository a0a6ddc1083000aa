//! Free text: cutting it to a length, and on its way to the store. PostgreSQL's `text` cannot hold a NUL character
//! (U+0000) while SQLite's can, so the two stores would disagree on one write. Text a
//! user gives (a prompt, a system event) is refused at the edge, naming the field; text
//! the store only keeps as a display copy (a reply's preview, an error a peer wrote) has
//! its NULs replaced, the same way before either store sees it.

use std::borrow::Cow;

use crate::limits::MODEL_NAME_CHARS_MAX;

/// What takes a NUL's place in a display copy.
pub const NUL_REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// Refuses text that holds a NUL character, saying where.
///
/// # Errors
/// The problem in words (the caller names the field): the first NUL's character position.
pub fn refuse_nul(text: &str) -> Result<(), String> {
    // Found as a byte (a NUL is one byte in UTF-8, and `find` searches bytes a word at a
    // time); characters are counted only for the error. Decoding every character made
    // this check nearly half of what a million-heartbeat seed spent on its own thread.
    match text.find('\0') {
        Some(byte) => Err(format!(
            "contains a NUL character (U+0000) at character {}; the store cannot keep it, remove it",
            text[..byte].chars().count() + 1
        )),
        None => Ok(()),
    }
}

/// `text` with every NUL replaced by [`NUL_REPLACEMENT`]; borrowed when there is none.
pub fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', &NUL_REPLACEMENT.to_string()))
    } else {
        Cow::Borrowed(text)
    }
}

/// [`without_nul`] of a text the caller owns: the same allocation when it has no NUL.
pub fn into_without_nul(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', &NUL_REPLACEMENT.to_string())
    } else {
        text
    }
}

/// [`truncate_chars`] of a text the caller owns: cut in place, not copied.
pub fn into_truncated_chars(mut text: String, max: usize) -> String {
    if let Some((end, _)) = text.char_indices().nth(max) {
        text.truncate(end);
    }
    text
}

/// The first `max` characters of `text` (never splitting a character).
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// What is wrong with `model` as a model's name, if anything: empty, too long, or holding
/// a control character.
pub fn model_name_problem(model: &str) -> Option<String> {
    if model.trim().is_empty() {
        return Some("is empty".to_owned());
    }
    if model.chars().count() > MODEL_NAME_CHARS_MAX {
        return Some(format!("is longer than {MODEL_NAME_CHARS_MAX} characters"));
    }
    if model.chars().any(char::is_control) {
        return Some("holds a control character".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }

    #[test]
    fn a_nul_is_refused_with_its_position() {
        assert_eq!(refuse_nul("plain text, ünïcode"), Ok(()));
        let problem = refuse_nul("ab\0c").expect_err("a NUL");
        assert!(problem.contains("at character 3"), "{problem}");
        // Counted in characters, not bytes: ü and ï take two bytes each.
        let problem = refuse_nul("ünï\0").expect_err("a NUL after wide characters");
        assert!(problem.contains("at character 4"), "{problem}");
        assert!(refuse_nul("\0").is_err_and(|problem| problem.contains("at character 1")));
    }

    #[test]
    fn a_model_name_is_checked_for_being_one() {
        assert_eq!(model_name_problem("gpt-4o-mini"), None);
        assert_eq!(model_name_problem(" ").as_deref(), Some("is empty"));
        assert!(model_name_problem("a\nb").is_some_and(|problem| problem.contains("control")));
        assert!(
            model_name_problem(&"m".repeat(MODEL_NAME_CHARS_MAX + 1)).is_some_and(|problem| problem.contains("longer"))
        );
    }

    #[test]
    fn display_copies_lose_only_the_nul() {
        assert!(matches!(without_nul("clean"), Cow::Borrowed("clean")));
        assert_eq!(without_nul("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert_eq!(into_without_nul("a\0b\0".to_owned()), "a\u{FFFD}b\u{FFFD}");
        let clean = String::from("clean");
        let at = clean.as_ptr();
        let kept = into_without_nul(clean);
        assert_eq!((kept.as_str(), kept.as_ptr()), ("clean", at), "a clean text keeps its allocation");
    }

    #[test]
    fn an_owned_text_is_cut_as_a_borrowed_one_is() {
        for (text, max) in [("héllo wörld", 4), ("héllo", 5), ("héllo", 9), ("", 0), ("ab", 0)] {
            assert_eq!(into_truncated_chars(text.to_owned(), max), truncate_chars(text, max), "{text:?} at {max}");
        }
    }
}
