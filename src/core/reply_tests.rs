use proptest::prelude::*;

use super::*;

const ACK_MAX: usize = 300;

fn alert(text: &str) -> Reply {
    Reply::Alert { text: text.to_owned() }
}

fn ack(note: &str) -> Reply {
    Reply::Ack { note: note.to_owned() }
}

#[test]
fn spec_matrix_h1_to_h6() {
    // H1: the token alone is "ok", nothing delivered.
    assert_eq!(classify("HEARTBEAT_OK", ACK_MAX), ack(""));
    // H2: the token with a short note: still "ok"; the note is kept.
    assert_eq!(classify("HEARTBEAT_OK\nAll good, 3 tasks done", ACK_MAX), ack("All good, 3 tasks done"));
    // H3: meaningful content: delivered as is.
    assert_eq!(classify("Disk usage at 95%, action needed", ACK_MAX), alert("Disk usage at 95%, action needed"));
    // H4: the token with more than ack_max_chars: delivered, without the token.
    let report = "x".repeat(500);
    assert_eq!(classify(&format!("HEARTBEAT_OK\n{report}"), ACK_MAX), alert(&report));
    // H5 and H6: markup around the token.
    assert_eq!(classify("**HEARTBEAT_OK**", ACK_MAX), ack(""));
    assert_eq!(classify("<b>HEARTBEAT_OK</b>", ACK_MAX), ack(""));
}

#[test]
fn empty_and_edge_cases() {
    assert_eq!(classify("", ACK_MAX), Reply::Empty);
    assert_eq!(classify(" \n\t ", ACK_MAX), Reply::Empty);
    assert_eq!(classify("HEARTBEAT_OK HEARTBEAT_OK", ACK_MAX), ack(""), "peeled until stable");
    assert_eq!(classify("Done. HEARTBEAT_OK", ACK_MAX), ack("Done."), "from the end too");
    // As the spec's regexes do: `&nbsp;` becomes a space after the emphasis runs are
    // looked for at the very edges, so the closing backtick stays, as a short note.
    assert_eq!(classify("`HEARTBEAT_OK`&nbsp;", ACK_MAX), ack("`"));
    // The token inside a sentence is not an acknowledgement.
    assert_eq!(classify("I could not say HEARTBEAT_OK today", ACK_MAX), alert("I could not say HEARTBEAT_OK today"));
    // A short note exactly at the limit is an acknowledgement; one more character is not.
    assert_eq!(classify("HEARTBEAT_OK abc", 3), ack("abc"));
    assert_eq!(classify("HEARTBEAT_OK abcd", 3), alert("abcd"));
    // Unclosed markup is text.
    assert_eq!(classify("a < b", ACK_MAX), alert("a < b"));
}

#[test]
fn the_normal_form_ignores_case_and_whitespace() {
    assert_eq!(normal_form("Disk  FULL\n on /var "), "disk full on /var");
    assert_eq!(digest("Disk full"), digest("  disk   FULL "));
    assert_ne!(digest("Disk full"), digest("Disk fuller"));
    assert_eq!(digest("x").len(), 64);
    // SHA-256 of "disk full": stored digests must keep matching new replies.
    assert_eq!(digest(" Disk\tFULL\n"), "8c96d76f620269be0f4cbc27e6cb594426729e32474260ef82eb6fc24b2cba2f");
}

proptest! {
    /// The digest hashes the normal form's words as it finds them: the same bytes as the
    /// normal form itself, so a digest stored before still matches (Unicode case and
    /// whitespace included).
    #[test]
    fn the_digest_is_the_normal_forms_hash(text in "[ \t\nA-Za-zΣσςİ\u{2003}\u{85}0-9.]{0,40}") {
        let of_normal_form = crate::core::hex::lower_hex(&Sha256::digest(normal_form(&text).as_bytes()));
        prop_assert_eq!(digest(&text), of_normal_form);
    }
}

proptest! {
    /// Markup becomes spaces or leaves the ends, so stripping it never makes a token out
    /// of pieces: `classify` calls a reply without one an alert before stripping it.
    #[test]
    fn stripping_markup_makes_no_token_of_pieces(
        parts in proptest::collection::vec(prop_oneof![
            Just("HEARTBEAT".to_owned()), Just("_OK".to_owned()), Just("HEARTBEAT_".to_owned()), Just("OK".to_owned()),
            Just("<b>".to_owned()), Just("</b>".to_owned()), Just("<".to_owned()), Just(">".to_owned()),
            Just("&nbsp;".to_owned()), Just("&NBSP;".to_owned()), Just("**".to_owned()), Just("_".to_owned()),
            Just("`".to_owned()), Just(" ".to_owned()),
        ], 0..10),
    ) {
        let raw = parts.concat();
        prop_assume!(!raw.contains(HEARTBEAT_TOKEN));
        prop_assert!(!strip_markup(&raw).contains(HEARTBEAT_TOKEN), "{raw:?}");
        prop_assert_eq!(classify(&raw, ACK_MAX), if raw.trim().is_empty() { Reply::Empty } else { alert(raw.trim()) });
    }

    /// Whatever the model says, what would be delivered never starts or ends with the
    /// token, and an acknowledgement's note is short.
    #[test]
    fn a_delivered_text_never_carries_the_token_at_its_edges(
        parts in proptest::collection::vec(prop_oneof![
            Just("HEARTBEAT_OK".to_owned()), Just("**".to_owned()), Just("<b>".to_owned()), Just("</b>".to_owned()),
            Just(" ".to_owned()), Just("\n".to_owned()), Just("&nbsp;".to_owned()), Just("_".to_owned()),
            "[a-z<>]{0,6}",
        ], 0..12),
        ack_max in 0usize..20,
    ) {
        let raw = parts.concat();
        match classify(&raw, ack_max) {
            Reply::Empty => prop_assert!(raw.trim().is_empty()),
            Reply::Ack { note } => prop_assert!(note.chars().count() <= ack_max),
            Reply::Alert { text } => {
                prop_assert!(!text.starts_with(HEARTBEAT_TOKEN) && !text.ends_with(HEARTBEAT_TOKEN), "{raw:?} -> {text:?}");
                prop_assert!(!text.trim().is_empty());
            }
        }
    }
}
