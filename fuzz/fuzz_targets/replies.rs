//! Arbitrary replies and HEARTBEAT.md contents through the reply and file classifiers:
//! never a panic, a delivered text never starts or ends with the token, an
//! acknowledgement's note is never longer than allowed, and the dedup form is stable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use systole::core::heartbeat_file::is_effectively_empty;
use systole::core::reply::{classify, digest, normal_form, Reply, HEARTBEAT_TOKEN};

fuzz_target!(|data: &[u8]| {
    let Some((&limit, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let ack_max_chars = usize::from(limit);
    match classify(text, ack_max_chars) {
        Reply::Empty => assert!(text.trim().is_empty()),
        Reply::Ack { note } => assert!(note.chars().count() <= ack_max_chars),
        Reply::Alert { text: delivered } => {
            assert!(!delivered.trim().is_empty(), "{text:?}");
            assert!(!delivered.starts_with(HEARTBEAT_TOKEN) && !delivered.ends_with(HEARTBEAT_TOKEN), "{text:?}");
            assert_eq!(normal_form(&normal_form(&delivered)), normal_form(&delivered));
            assert_eq!(digest(&delivered), digest(&format!(" \n{delivered}\t ")), "whitespace at the edges does not count");
        }
    }
    let _ = is_effectively_empty(Some(text));
});
