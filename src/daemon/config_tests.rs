use std::path::Path;
use std::time::Duration;

use super::*;

fn parse_text(text: &str) -> Result<Config, ConfigError> {
    parse(text, Path::new("/etc/systole/test.toml"))
}

fn refused(text: &str) -> ConfigError {
    match parse_text(text) {
        Ok(_) => panic!("config should have been refused:\n{text}"),
        Err(error) => error,
    }
}

const LLM: &str = "[llm]\nprovider = \"scripted\"\n";

fn with_heartbeat(fields: &str) -> String {
    format!("{LLM}[[agents]]\nid = \"main\"\n[[agents.heartbeats]]\nid = \"hb\"\nprompt = \"p\"\n{fields}\n")
}

#[test]
fn shipped_examples_load() {
    let demo = parse(include_str!("../../examples/demo.toml"), Path::new("examples/demo.toml")).expect("demo config");
    assert_eq!(demo.heartbeats.len(), 2);
    assert_eq!(demo.store_path, Path::new("examples/demo.db"));
    let full = parse(include_str!("../../examples/full.toml"), Path::new("full.toml")).expect("full config");
    assert_eq!(full.heartbeats.len(), 2);
    let spacebot = &full.heartbeats[1];
    assert_eq!(spacebot.interval, Duration::from_secs(86_400));
    assert_eq!(spacebot.target.to_string(), "webhook:ops");
    let window = spacebot.active_hours.as_ref().expect("window");
    assert_eq!(
        (window.start_text().as_str(), window.end_text().as_str(), window.zone_name()),
        ("09:00", "10:00", "Europe/Berlin")
    );
    assert_eq!(full.webhooks["ops"].attempts_max, 3);
}

#[test]
fn spacebot_block_works_unchanged() {
    let text = r#"
[llm]
provider = "scripted"
[adapters.webhook.some-endpoint]
url = "http://127.0.0.1:9/hook"
[[agents]]
id = "main"
default = true
[[agents.heartbeats]]
id = "check-inbox"
prompt = "Check the inbox for anything that needs attention."
interval_secs = 1800
delivery_target = "webhook:some-endpoint"
active_start_hour = 9
active_end_hour = 17
"#;
    let config = parse_text(text).expect("spacebot config");
    assert_eq!(config.heartbeats[0].interval, Duration::from_secs(1_800));
}

#[test]
fn every_refusal_names_the_file_and_field() {
    let cases: Vec<(String, &str, &str)> = vec![
        (with_heartbeat("every = \"30\"\ntarget = \"stdout\""), "agents[0].heartbeats[0].every", "without a unit"),
        (with_heartbeat("every = \"0s\"\ntarget = \"stdout\""), "agents[0].heartbeats[0].every", "out of range"),
        (with_heartbeat("target = \"stdout\""), "agents[0].heartbeats[0].every", "missing"),
        (with_heartbeat("every = \"1m\"\ninterval_secs = 60\ntarget = \"stdout\""), "agents[0].heartbeats[0].every", "not both"),
        (with_heartbeat("every = \"1m\"\ntarget = \"webhook:nope\""), "agents[0].heartbeats[0].target", "no configured adapter"),
        (with_heartbeat("every = \"1m\"\ntarget = \"discord\""), "agents[0].heartbeats[0].target", "adapter:target"),
        (
            with_heartbeat("every = \"1m\"\ntarget = \"stdout\"\nactive_hours = { start = \"9:00\", end = \"17:00\" }"),
            "agents[0].heartbeats[0].active_hours",
            "HH:MM",
        ),
        (
            with_heartbeat("every = \"1m\"\ntarget = \"stdout\"\nactive_hours = { start = \"09:00\", end = \"17:00\", timezone = \"+02:00\" }"),
            "agents[0].heartbeats[0].active_hours",
            "IANA",
        ),
        (with_heartbeat("every = \"1m\"\ntarget = \"stdout\"\nactive_start_hour = 9"), "agents[0].heartbeats[0].active_start_hour", "both"),
        (format!("{LLM}[[agents]]\nid = \"Main\"\n"), "agents[0].id", "lowercase"),
        (format!("{LLM}[[agents]]\nid = \"a\"\n[[agents]]\nid = \"a\"\n"), "agents[1].id", "earlier agent"),
        ("[llm]\nprovider = \"gpt\"\n".to_owned(), "llm.provider", "not a provider"),
        ("[llm]\nbase_url = \"ftp://x\"\nmodel = \"m\"\n".to_owned(), "llm.base_url", "http"),
        ("[llm]\nbase_url = \"http://x\"\n".to_owned(), "llm.model", "missing"),
        ("".to_owned(), "llm", "missing"),
        (format!("{LLM}[engine]\ntimezone = \"Nowhere/City\"\n"), "engine.timezone", "IANA"),
        (format!("{LLM}[engine]\nbreaker_failures = 0\n"), "engine.breaker_failures", "out of range"),
        (format!("{LLM}[adapters.webhook.ops]\nurl = \"http://x\"\nattempts = 0\n"), "adapters.webhook.ops.attempts", "out of range"),
        (format!("{LLM}[store]\npath = \"\"\n"), "store.path", "empty"),
    ];
    for (text, field, problem) in cases {
        let error = refused(&text);
        assert_eq!(error.file, "/etc/systole/test.toml");
        assert_eq!(error.field, field, "for config:\n{text}\nerror: {error}");
        assert!(error.problem.contains(problem), "problem {:?} should mention {problem:?}", error.problem);
    }
}

#[test]
fn unknown_keys_and_wrong_types_point_at_the_line() {
    let error = refused(&with_heartbeat("every = \"1m\"\ntarget = \"stdout\"\nintervl = 5"));
    assert_eq!(error.field, "line 10, column 1");
    assert!(error.problem.contains("unknown field `intervl`"), "{}", error.problem);
    let error = refused(&format!("{LLM}[engine]\nbreaker_failures = \"three\"\n"));
    assert!(error.field.starts_with("line 4"), "{}", error.field);
    let error = refused("[llm\n");
    assert!(error.field.starts_with("line 1"), "{}", error.field);
}

#[test]
fn heartbeat_ids_are_unique_per_agent_only() {
    let text = format!(
        "{LLM}[[agents]]\nid = \"a\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"1m\"\ntarget = \"stdout\"\n\
         [[agents]]\nid = \"b\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"1m\"\ntarget = \"stdout\"\n"
    );
    assert_eq!(parse_text(&text).expect("valid").heartbeats.len(), 2);
    let twice = format!(
        "{}[[agents.heartbeats]]\nid = \"hb\"\nprompt = \"q\"\nevery = \"1m\"\ntarget = \"stdout\"\n",
        with_heartbeat("every = \"1m\"\ntarget = \"stdout\"")
    );
    assert_eq!(refused(&twice).field, "agents[0].heartbeats[1].id");
}

#[test]
fn window_zone_falls_back_to_agent_then_engine() {
    let text = format!(
        "{LLM}[engine]\ntimezone = \"Asia/Shanghai\"\n[[agents]]\nid = \"a\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"1m\"\n\
         target = \"stdout\"\nactive_hours = {{ start = \"08:00\", end = \"23:00\" }}\n[[agents]]\nid = \"b\"\ntimezone = \"America/New_York\"\n\
         [[agents.heartbeats]]\nid = \"y\"\nprompt = \"p\"\nevery = \"1m\"\ntarget = \"stdout\"\nactive_start_hour = 9\nactive_end_hour = 17\n"
    );
    let config = parse_text(&text).expect("valid");
    let zones: Vec<_> =
        config.heartbeats.iter().map(|h| h.active_hours.as_ref().map(|w| w.zone_name().to_owned())).collect();
    assert_eq!(zones, vec![Some("Asia/Shanghai".to_owned()), Some("America/New_York".to_owned())]);
}
