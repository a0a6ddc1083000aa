//! Arbitrary strings as durations: never a panic, and whatever parses formats back to
//! the same duration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use systole::core::duration::{format_duration, parse_duration};

fuzz_target!(|text: &str| {
    if let Ok(duration) = parse_duration(text) {
        assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
    }
});
