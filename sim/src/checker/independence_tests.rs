//! The checker judges with its own eyes: outside its tests, it names only the engine's
//! data (ids, definitions, events, enums, limits), never a function that decides. A bug
//! in a borrowed decision would be copied into the verdict instead of caught.

use std::path::{Path, PathBuf};

/// What the checker may name from the engine: types it reads and constants it compares
/// against. A path is allowed when it equals an entry or lies under one ending in `::`.
const ALLOWED: [&str; 21] = [
    "systole::core::ids::",
    "systole::core::heartbeat::HeartbeatDef",
    "systole::core::heartbeat::JobKind",
    "systole::core::guard::SkipReason",
    "systole::core::policy::CatchUp",
    "systole::core::policy::Overlap",
    "systole::core::schedule::Schedule",
    "systole::core::active_hours::ActiveHours",
    "systole::core::wake::WakeReason",
    "systole::core::system_events::CRON_EVENT_PROMPT",
    "systole::core::delivery_target::DeliveryTarget",
    "systole::core::visibility::Visibility",
    "systole::driver::events::EngineEvent",
    "systole::driver::run::ACK_SHOWN_TEXT",
    "systole::driver::run::DEFINITION_UNREADABLE",
    "systole::driver::run::DEFINITION_GONE",
    "systole::limits::",
    "systole::ports::messenger::DeliveryKind",
    "systole::ports::store::ExecutionStatus",
    "systole::ports::store::StopReason",
    "systole::ports::store::ToolUse",
];

/// Decision methods of the allowed types: calling one borrows the engine's answer.
const FORBIDDEN_CALLS: [&str; 16] = [
    ".next_after(",
    ".at_or_after(",
    ".passed(",
    ".interval(",
    ".first_slot(",
    ".latest(",
    ".contains(at",
    ".contains(entry",
    ".failed()",
    ".is_fixed_time(",
    ".shows_nothing(",
    ".is_silent(",
    ".resolve(",
    ".fingerprint(",
    ".is_within(",
    ".beyond(",
];

fn checker_sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the checker's folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs")
                && !path.file_name().is_some_and(|name| name.to_string_lossy().ends_with("tests.rs"))
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/checker"), &mut out);
    out
}

/// Every engine path a source names, with `use` groups (`a::{b, c}`) spelled out.
fn engine_paths(source: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("systole::") {
        rest = &rest[at..];
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
        let head = &rest[..end];
        if rest[end..].starts_with('{') {
            let close = rest.find('}').expect("a closed use group");
            for item in rest[end + 1..close].split(',').map(str::trim).filter(|item| !item.is_empty()) {
                paths.push(format!("{head}{item}"));
            }
            rest = &rest[close..];
        } else {
            paths.push(head.to_owned());
            rest = &rest[end..];
        }
    }
    paths
}

fn allowed(path: &str) -> bool {
    ALLOWED.iter().any(|entry| {
        if entry.ends_with("::") {
            path.starts_with(entry)
        } else {
            // The type itself, or one of its variants or associated items.
            path == *entry || path.strip_prefix(entry).is_some_and(|tail| tail.starts_with("::"))
        }
    })
}

#[test]
fn checker_imports_no_decision_code() {
    let sources = checker_sources();
    assert!(sources.len() >= 10, "found only {} checker files", sources.len());
    let mut named = 0;
    for path in sources {
        let source = std::fs::read_to_string(&path).expect("readable");
        for engine_path in engine_paths(&source) {
            named += 1;
            assert!(allowed(&engine_path), "{} names {engine_path}, which is not the engine's data", path.display());
        }
        for call in FORBIDDEN_CALLS {
            assert!(!source.contains(call), "{} calls the engine's decision `{call}`", path.display());
        }
    }
    assert!(named > 20, "only {named} engine paths found: is the scan broken?");
}

#[test]
fn the_scan_sees_groups_and_refuses_decisions() {
    let source = "use systole::core::policy::{backoff_delay, Overlap};\nlet x = systole::limits::CATCHUP_RUNS_MAX;";
    let paths = engine_paths(source);
    assert_eq!(
        paths,
        ["systole::core::policy::backoff_delay", "systole::core::policy::Overlap", "systole::limits::CATCHUP_RUNS_MAX"]
    );
    assert!(!allowed(&paths[0]));
    assert!(allowed(&paths[1]) && allowed(&paths[2]));
    assert!(!allowed("systole::core::budget::day_start"));
    assert!(!allowed("systole::core::schedule::Schedule_next"));
}
