//! Arbitrary bytes as a config file: never a panic; an error always names a field.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use systole::daemon::config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(error) = config::parse(text, Path::new("fuzz.toml")) {
        assert_eq!(error.file, "fuzz.toml");
        assert!(!error.field.is_empty() && !error.problem.is_empty());
    }
});
