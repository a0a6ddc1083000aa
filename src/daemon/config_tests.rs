use crate::core::retention::RunRetention;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::core::cron::CronSchedule;
use crate::core::schedule::Schedule;

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
    let kinds: Vec<&str> = demo.heartbeats.iter().map(|def| def.kind.as_str()).collect();
    assert_eq!(kinds, ["agent", "heartbeat", "heartbeat", "cron-main"]);
    assert_eq!(demo.store_path, Path::new("examples/demo.db"));
    assert_eq!(demo.run_retention, RunRetention::default(), "retention is on by default");
    let full = parse(include_str!("../../examples/full.toml"), Path::new("full.toml")).expect("full config");
    let kinds: Vec<&str> = full.heartbeats.iter().map(|def| def.kind.as_str()).collect();
    assert_eq!(kinds, ["agent", "heartbeat", "heartbeat", "cron", "cron-main", "cron"]);
    let spacebot = &full.heartbeats[2];
    // Spacebot's daily heartbeat with a one-hour window runs at the window's opening (ADR 0010).
    let daily = CronSchedule::parse("0 9 * * *", "Europe/Berlin").expect("valid");
    assert_eq!(spacebot.schedule, Schedule::cron(daily));
    assert_eq!(spacebot.target.to_string(), "webhook:ops");
    let window = spacebot.active_hours.as_ref().expect("window");
    assert_eq!(
        (window.start_text().as_str(), window.end_text().as_str(), window.zone_name()),
        ("09:00", "10:00", "Europe/Berlin")
    );
    assert_eq!(full.adapters.webhooks["ops"].attempts_max, 3);
    let tools =
        parse(include_str!("../../examples/tools.toml"), Path::new("examples/tools.toml")).expect("tools config");
    assert_eq!(tools.mcp["everything"].read_only.len(), 2);
    assert_eq!(tools.heartbeats[0].tools.required[0].to_string(), "everything/echo");
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
    assert_eq!(config.heartbeats[0].schedule, Schedule::Every(Duration::from_secs(1_800)));
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
        (format!("{LLM}[store]\nruns_kept_days = 1\n"), "store.runs_kept_days", "two days"),
        (format!("{LLM}[store]\nruns_kept_per_heartbeat = 0\n"), "store.runs_kept_per_heartbeat", "out of range"),
        (format!("{LLM}[store]\nurl = \"mysql://db/x\"\n"), "store.url", "not a PostgreSQL URL"),
        (format!("{LLM}[store]\nurl = \"postgres://me:hunter2@db:5432/x\"\n"), "store.url", "holds a password"),
        (format!("{LLM}[store]\nurl = \"postgres://db/x\"\npassword_env = \"PG PASS\"\n"), "store.password_env", "environment variable"),
        (format!("{LLM}[store]\npassword_env = \"PGPASSWORD\"\n"), "store.password_env", "without store.url"),
    ];
    for (text, field, problem) in cases {
        let error = refused(&text);
        assert_eq!(error.file, "/etc/systole/test.toml");
        assert_eq!(error.field, field, "for config:\n{text}\nerror: {error}");
        assert!(error.problem.contains(problem), "problem {:?} should mention {problem:?}", error.problem);
    }
}

#[test]
fn unknown_keys_and_wrong_types_name_the_key_and_point_at_the_line() {
    let error = refused(&with_heartbeat("every = \"1m\"\ntarget = \"stdout\"\nintervl = 5"));
    assert_eq!(error.field, "agents[0].heartbeats[0].intervl (line 10, column 1)");
    assert!(error.problem.contains("unknown field `intervl`"), "{}", error.problem);
    let error = refused(&format!("{LLM}[engine]\nbreaker_failures = \"three\"\n"));
    assert!(error.field.starts_with("engine.breaker_failures (line 4"), "{}", error.field);
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
fn equal_targets_and_prompts_share_one_text_and_a_bad_target_is_refused_at_each_use() {
    let text = format!(
        "{LLM}[adapters.webhook.ops]\nurl = \"http://127.0.0.1:9/hook\"\n\
         [[agents]]\nid = \"a\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"1m\"\ntarget = \"webhook:ops\"\n\
         [[agents.heartbeats]]\nid = \"y\"\nprompt = \"q\"\nevery = \"1m\"\ntarget = \"stdout\"\n\
         [[agents.heartbeats]]\nid = \"z\"\nprompt = \"p\"\nevery = \"1m\"\ntarget = \"webhook:ops\"\n"
    );
    let config = parse_text(&text).expect("valid");
    let [x, y, z] = [0, 1, 2].map(|index| &config.heartbeats[index].target);
    assert!(arcstr::ArcStr::ptr_eq(x.text(), z.text()), "one parsed target for both");
    assert!(!arcstr::ArcStr::ptr_eq(x.text(), y.text()));
    assert_eq!(
        (x.to_string(), y.to_string(), z.to_string()),
        ("webhook:ops".into(), "stdout".into(), "webhook:ops".into())
    );
    let [x, y, z] = [0, 1, 2].map(|index| &config.heartbeats[index].prompt);
    assert!(Arc::ptr_eq(x, z), "one text for both prompts");
    assert_eq!((&**x, &**y, &**z), ("p", "q", "p"));
    // A target refused once is not remembered: its second use is refused, naming its field.
    let unknown = text.replace("target = \"webhook:ops\"", "target = \"webhook:nope\"");
    assert_eq!(refused(&unknown).field, "agents[0].heartbeats[0].target");
    let later = text
        .replacen("target = \"webhook:ops\"", "target = \"stdout\"", 1)
        .replace("webhook:ops\"\n", "webhook:nope\"\n");
    assert_eq!(refused(&later).field, "agents[0].heartbeats[2].target");
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

fn with_cron(fields: &str) -> String {
    format!("{LLM}[[agents]]\nid = \"main\"\ntimezone = \"Asia/Shanghai\"\n[[agents.cron]]\nid = \"job\"\n{fields}\n")
}

#[test]
fn cron_jobs_take_the_spec_shape() {
    let text = with_cron(
        "payload = { text = \"Daily status\" }\nschedule = { cron = \"0 9 * * MON-FRI\" }\ntarget = \"stdout\"\n\
         delivery = \"announce\"\nmode = \"isolated\"\ntimeout = \"3m\"\ncatch_up = \"all\"\noverlap = \"buffer_one\"\n\
         jitter = \"2m\"",
    );
    let config = parse_text(&text).expect("cron job");
    let job = &config.heartbeats[0];
    assert_eq!(job.kind, crate::core::heartbeat::JobKind::Cron);
    assert_eq!(&*job.prompt, "Daily status");
    assert_eq!(job.schedule.to_string(), "cron \"0 9 * * MON-FRI\" in Asia/Shanghai", "the agent's zone by default");
    assert_eq!(job.target.to_string(), "stdout");
    assert_eq!(job.timeout, Duration::from_secs(180));
    assert_eq!(job.policy.catch_up, crate::core::policy::CatchUp::All);
    assert_eq!(job.policy.overlap, crate::core::policy::Overlap::BufferOne);
    assert_eq!(job.policy.jitter_max, Duration::from_secs(120));
    assert!(!job.delete_after_run);
    // The spec's kind/expr form, an `at` that deletes itself by default, silence without a target.
    let text = with_cron("prompt = \"Remind\"\nschedule = { kind = \"at\", expr = \"2026-12-01T14:00:00+08:00\" }");
    let config = parse_text(&text).expect("at job");
    let job = &config.heartbeats[0];
    assert!(job.delete_after_run && job.target.is_silent());
    assert_eq!(job.schedule, Schedule::At("2026-12-01T06:00:00Z".parse().expect("valid")));
    // `enabled = false` leaves it out.
    let text = with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\nenabled = false");
    assert!(parse_text(&text).expect("disabled job").heartbeats.is_empty());
}

#[test]
fn heartbeats_take_cron_and_at_too() {
    let config =
        parse_text(&with_heartbeat("cron = \"*/30 * * * *\"\ntimezone = \"Europe/Berlin\"\ntarget = \"stdout\""))
            .expect("cron heartbeat");
    assert_eq!(config.heartbeats[0].schedule.to_string(), "cron \"*/30 * * * *\" in Europe/Berlin");
    let config = parse_text(&with_heartbeat("schedule = { at = \"2026-12-01T09:00:00\" }\ntarget = \"stdout\""))
        .expect("at heartbeat");
    assert_eq!(config.heartbeats[0].schedule, Schedule::At("2026-12-01T09:00:00Z".parse().expect("valid")));
}

#[test]
fn schedule_and_policy_refusals_name_the_field() {
    let cases: Vec<(String, &str, &str)> = vec![
        (with_cron("prompt = \"p\"\nschedule = { cron = \"61 * * * *\" }"), "agents[0].cron[0].schedule.cron", "not a cron"),
        (
            with_cron("prompt = \"p\"\nschedule = { cron = \"0 9 * * *\", timezone = \"+08:00\" }"),
            "agents[0].cron[0].schedule.timezone",
            "IANA",
        ),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\", at = \"2026-12-01T00:00:00Z\" }"), "agents[0].cron[0].schedule", "only one"),
        (with_cron("prompt = \"p\"\nschedule = { cron = \"0 0 30 2 *\" }"), "agents[0].cron[0].schedule", "no future occurrence"),
        (with_cron("prompt = \"p\""), "agents[0].cron[0].schedule", "missing"),
        (with_cron("schedule = { every = \"1h\" }"), "agents[0].cron[0].prompt", "missing"),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\nmode = \"main\""), "agents[0].cron[0].mode", "has none"),
        (
            format!("{LLM}[[agents]]\nid = \"a\"\n[[agents.cron]]\nid = \"main\"\nprompt = \"p\"\nschedule = {{ every = \"1h\" }}\n"),
            "agents[0].cron[0].id",
            "reserved",
        ),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\ndelivery = \"announce\""), "agents[0].cron[0].target", "needs a target"),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\ndelivery = \"loud\""), "agents[0].cron[0].delivery", "announce"),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\ncatch_up = \"some\""), "agents[0].cron[0].catch_up", "skip"),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\noverlap = \"queue\""), "agents[0].cron[0].overlap", "buffer_one"),
        (with_cron("prompt = \"p\"\nschedule = { every = \"1h\" }\njitter = \"2h\""), "agents[0].cron[0].jitter", "out of range"),
        (
            with_cron(
                "prompt = \"p\"\nschedule = { cron = \"0 3 * * *\" }\nactive_hours = { start = \"09:00\", end = \"17:00\" }",
            ),
            "agents[0].cron[0].schedule",
            "would never run",
        ),
        (
            with_heartbeat("cron = \"0 3 * * *\"\ntarget = \"stdout\"\nactive_hours = { start = \"09:00\", end = \"17:00\" }"),
            "agents[0].heartbeats[0].cron",
            "would never run",
        ),
        (with_heartbeat("every = \"1h\"\ntimezone = \"UTC\"\ntarget = \"stdout\""), "agents[0].heartbeats[0].timezone", "elapsed time"),
        (format!("{LLM}[engine]\nerror_backoff = []\n"), "engine.error_backoff", "from 1 to"),
        (format!("{LLM}[engine]\nerror_backoff = [\"30s\", \"soon\"]\n"), "engine.error_backoff[1]", "soon"),
        (format!("{LLM}[engine]\nbreaker_cooldown = [\"1h\", \"5s\"]\n"), "engine.breaker_cooldown[1]", "allowed from 60s"),
        (format!("{LLM}[engine]\nbreaker_cooldown = [\"1h\", \"30d\"]\n"), "engine.breaker_cooldown[1]", "out of range"),
        (format!("{LLM}[engine]\nalerts_target = \"webhook:nobody\"\n"), "engine.alerts_target", "no configured adapter"),
        (format!("{LLM}[adapters.discord-webhook.team]\nurl = \"https://discord.com/api/webhooks/1/x\"\n"), "adapters.discord-webhook.team.url", "is a secret"),
        (format!("{LLM}[adapters.slack-webhook.team]\n"), "adapters.slack-webhook.team.url_env", "is missing"),
        (format!("{LLM}[adapters.telegram]\ntoken_env = \"123:abc\"\n"), "adapters.telegram.token_env", "name of an environment variable"),
        (format!("{LLM}[adapters.slack]\nbase_url = \"slack.com\"\n"), "adapters.slack.base_url", "not an http"),
        (format!("{LLM}[adapters.webhook.ops]\nurl = \"http://127.0.0.1:1/hook\"\nsecret_env = \"whsec_abc=\"\n"), "adapters.webhook.ops.secret_env", "name of an environment variable"),
        (with_heartbeat("every = \"1h\"\ntarget = \"discord:123\""), "agents[0].heartbeats[0].target", "names no configured adapter"),
    ];
    for (text, field, problem) in cases {
        let error = refused(&text);
        assert_eq!(error.field, field, "{text}\n{error}");
        assert!(error.problem.contains(problem), "{field}: {:?} should mention {problem:?}", error.problem);
    }
    // A heartbeat and a cron job of one agent may not share an id.
    let text = format!(
        "{LLM}[[agents]]\nid = \"main\"\n[[agents.heartbeats]]\nid = \"x\"\nprompt = \"p\"\nevery = \"1h\"\ntarget = \"stdout\"\n\
         [[agents.cron]]\nid = \"x\"\nprompt = \"p\"\nschedule = {{ every = \"1h\" }}\n"
    );
    let error = refused(&text);
    assert_eq!(error.field, "agents[0].cron[0].id");
}

fn with_agent(agent: &str) -> String {
    format!("{LLM}[defaults.heartbeat]\ntarget = \"stdout\"\nevery = \"20m\"\n[[agents]]\nid = \"ops\"\n{agent}\n")
}

#[test]
fn the_agent_heartbeat_comes_from_the_workspace_and_the_defaults() {
    use crate::core::heartbeat::JobKind;
    use crate::core::heartbeat_file::HEARTBEAT_PROMPT_DEFAULT;
    use crate::core::schedule::Schedule;

    // No workspace, no table: no agent heartbeat (an LLM bill nobody asked for).
    let config = parse_text(&with_agent("")).expect("valid");
    assert!(config.heartbeats.is_empty());
    // A workspace turns it on with the defaults and the spec's prompt.
    let config = parse_text(&with_agent("workspace = \"ops-space\"")).expect("valid");
    let def = &config.heartbeats[0];
    assert_eq!((def.kind, def.key.to_string()), (JobKind::Agent, "ops/main".to_owned()));
    assert_eq!(def.schedule, Schedule::Every(Duration::from_secs(20 * 60)));
    assert_eq!(&*def.prompt, HEARTBEAT_PROMPT_DEFAULT);
    assert!(config.workspaces[&def.key.agent].ends_with("ops-space"));
    // The agent's table wins field by field (spec H14).
    let config = parse_text(&with_agent(
        "[agents.heartbeat]\nevery = \"10m\"\nmodel = \"small\"\nack_max_chars = 50\nprompt = \"Check in.\"",
    ))
    .expect("valid");
    let def = &config.heartbeats[0];
    assert_eq!(def.schedule, Schedule::Every(Duration::from_secs(10 * 60)));
    assert_eq!(&*def.prompt, "Check in.");
    let settings = &config.agents[&def.key.agent].agent_heartbeat;
    assert_eq!((settings.model.as_deref(), settings.ack_max_chars), (Some("small"), 50));
    // enabled = false turns it off even with a workspace.
    let config = parse_text(&with_agent("workspace = \"w\"\n[agents.heartbeat]\nenabled = false")).expect("valid");
    assert!(config.heartbeats.is_empty());
    // A main-mode cron job goes to the agent heartbeat.
    let config = parse_text(&with_agent(
        "workspace = \"w\"\n[[agents.cron]]\nid = \"digest\"\nmode = \"main\"\npayload = { text = \"sum up\" }\n\
         schedule = { every = \"1h\" }",
    ))
    .expect("valid");
    assert_eq!(config.heartbeats[1].kind, JobKind::CronMain);
}

#[test]
fn agent_heartbeat_refusals_name_the_field() {
    let cases = [
        ("[agents.heartbeat]\nevery = \"10s\"", "agents[0].heartbeat.every", "out of range"),
        ("[agents.heartbeat]\nack_max_chars = 999999", "agents[0].heartbeat.ack_max_chars", "out of range"),
        ("[agents.heartbeat]\nprompt = \" \"", "agents[0].heartbeat.prompt", "empty"),
        ("[agents.heartbeat]\ntarget = \"pager:x\"", "agents[0].heartbeat.target", "no configured adapter"),
        ("workspace = \"\"", "agents[0].workspace", "empty"),
        (
            "workspace = \"w\"\n[[agents.cron]]\nid = \"j\"\nmode = \"main\"\nprompt = \"p\"\ntarget = \"stdout\"\n\
             schedule = { every = \"1h\" }",
            "agents[0].cron[0].mode",
            "agent heartbeat's target",
        ),
    ];
    for (agent, field, problem) in cases {
        let text = with_agent(agent);
        let error = refused(&text);
        assert!(error.field.starts_with(field), "{text}\n{error}");
        assert!(error.problem.contains(problem), "{field}: {:?} should mention {problem:?}", error.problem);
    }
    let unknown = refused(&with_agent("[agents.heartbeat]\nsometimes = true"));
    assert!(unknown.problem.contains("unknown field `sometimes`"), "{unknown}");
    // Without a target anywhere, the agent heartbeat names the missing field.
    let error = refused(&format!("{LLM}[[agents]]\nid = \"ops\"\nworkspace = \"w\"\n"));
    assert_eq!(error.field, "agents[0].heartbeat.target");
}

#[test]
fn visibility_levels_and_the_budget_are_read_and_checked() {
    use crate::core::visibility::Visibility;

    let text = format!(
        "{LLM}[adapters.webhook.ops]\nurl = \"http://127.0.0.1:9/\"\n[visibility]\nshow_ok = true\n\
         [visibility.adapters.webhook]\nuse_indicator = false\n[visibility.targets.\"webhook:ops\"]\nshow_alerts = false\n\
         [[agents]]\nid = \"ops\"\nllm_calls_per_day = 50\n"
    );
    let config = parse_text(&text).expect("valid");
    let target = |text: &str| crate::core::delivery_target::DeliveryTarget::parse(text).expect("target");
    assert_eq!(
        config.visibility.resolve(&target("webhook:ops")),
        Visibility { show_ok: true, show_alerts: false, use_indicator: false }
    );
    assert_eq!(config.visibility.resolve(&target("stdout")), Visibility { show_ok: true, ..Visibility::default() });
    assert_eq!(config.agents[&AgentId::new("ops").expect("id")].llm_calls_per_day, 50);
    assert_eq!(config.agent_default.llm_calls_per_day, crate::limits::LLM_CALLS_PER_DAY_DEFAULT);

    let cases = [
        (format!("{LLM}[visibility.adapters.pager]\nshow_ok = true\n"), "visibility.adapters.pager", "not an adapter"),
        (
            format!("{LLM}[visibility.targets.\"webhook:nope\"]\nshow_ok = true\n"),
            "visibility.targets",
            "no configured adapter",
        ),
        (format!("{LLM}[[agents]]\nid = \"a\"\nllm_calls_per_day = 0\n"), "agents[0].llm_calls_per_day", "from 1"),
    ];
    for (text, field, problem) in cases {
        let error = refused(&text);
        assert!(error.field.starts_with(field), "{text}\n{error}");
        assert!(error.problem.contains(problem), "{field}: {:?} should mention {problem:?}", error.problem);
    }
}

#[test]
fn an_every_that_could_miss_its_window_is_refused_naming_the_field() {
    let config = with_heartbeat("target = \"stdout\"\nevery = \"12h\"\nactive_hours = { start = \"09:00\", end = \"10:00\", timezone = \"UTC\" }");
    let error = parse(&config, Path::new("c.toml")).expect_err("12h slots can miss a one-hour window");
    let message = error.to_string();
    assert!(
        message.contains("agents[0].heartbeats[0].every") && message.contains("could miss the window"),
        "{message}"
    );
    let spacebot =
        with_heartbeat("target = \"stdout\"\ninterval_secs = 172800\nactive_start_hour = 9\nactive_end_hour = 10");
    let message = parse(&spacebot, Path::new("c.toml")).expect_err("every two days").to_string();
    assert!(message.contains("heartbeats[0].interval_secs"), "{message}");
}

#[test]
fn chat_adapters_take_variable_names_and_their_targets_validate() {
    let text = format!(
        "[adapters.discord]\n[adapters.telegram]\ntoken_env = \"MY_TELEGRAM\"\nbase_url = \"http://127.0.0.1:9\"\n\
         [adapters.slack-webhook.team]\nurl_env = \"TEAM_HOOK\"\nattempts = 5\n\
         [adapters.webhook.ops]\nurl = \"http://127.0.0.1:9/hook\"\nsecret_env = \"OPS_SECRET\"\n\
         [engine]\nalerts_target = \"slack-webhook:team\"\n{}",
        with_heartbeat("every = \"1h\"\ntarget = \"discord:123456789\"")
    );
    let config = parse_text(&text).expect("valid");
    let adapters = &config.adapters;
    assert_eq!(adapters.bots["discord"].token_env, "DISCORD_BOT_TOKEN", "the default variable");
    assert_eq!(adapters.bots["discord"].base_url, "https://discord.com");
    assert_eq!(
        (adapters.bots["telegram"].token_env.as_str(), adapters.bots["telegram"].base_url.as_str()),
        ("MY_TELEGRAM", "http://127.0.0.1:9")
    );
    assert_eq!(adapters.urls["slack-webhook:team"].attempts_max, 5);
    assert_eq!(adapters.webhooks["ops"].secret_env.as_deref(), Some("OPS_SECRET"));
    assert_eq!(config.heartbeats[0].target.to_string(), "discord:123456789");
    assert!(config.agent_default.allowed_targets.contains("slack-webhook:team"));
    assert!(!config.agent_default.allowed_targets.iter().any(|target| target.starts_with("discord:")));
    // Building the sender reads the variables, and names the one that is missing.
    let env = |name: &str| {
        (name != "MY_TELEGRAM").then(|| if name == "OPS_SECRET" { "whsec_c2VjcmV0".to_owned() } else { "x".to_owned() })
    };
    let problem = crate::delivery::settings::destinations(adapters, env).expect_err("MY_TELEGRAM is unset");
    assert!(problem.contains("adapters.telegram.token_env") && problem.contains("MY_TELEGRAM"), "{problem}");
    let env = |name: &str| {
        Some(if name == "OPS_SECRET" { "not-a-secret".to_owned() } else { "https://hooks.example/x".to_owned() })
    };
    let problem = crate::delivery::settings::destinations(adapters, env).expect_err("a bad secret");
    assert!(
        problem.contains("OPS_SECRET") && problem.contains("whsec_") && !problem.contains("not-a-secret"),
        "{problem}"
    );
}

#[test]
fn a_postgres_url_without_a_password_names_where_the_password_comes_from() {
    let config = parse_text(&format!(
        "{LLM}[store]\nurl = \"postgres://systole@db:5432/jobs\"\npassword_env = \"JOBS_DB_PASSWORD\"\n"
    ))
    .expect("valid");
    let postgres = config.postgres.expect("postgres is configured");
    assert_eq!(postgres.url, "postgres://systole@db:5432/jobs");
    assert_eq!(postgres.password_env.as_deref(), Some("JOBS_DB_PASSWORD"));
    // An '@' in the path or query is not a password.
    let config =
        parse_text(&format!("{LLM}[store]\nurl = \"postgresql://db/jobs?application_name=a:b@c\"\n")).expect("valid");
    assert_eq!(config.postgres.expect("postgres").password_env, None);
    assert_eq!(parse_text(LLM).expect("valid").postgres, None);
}

#[test]
fn the_cluster_examples_are_two_nodes_of_one_database() {
    let a = parse(include_str!("../../examples/cluster/node-a.toml"), Path::new("examples/cluster/node-a.toml"))
        .expect("node-a config");
    let b = parse(include_str!("../../examples/cluster/node-b.toml"), Path::new("examples/cluster/node-b.toml"))
        .expect("node-b config");
    assert_eq!(a.postgres, b.postgres, "one database");
    assert_eq!(a.postgres.as_ref().and_then(|pg| pg.password_env.as_deref()), Some("SYSTOLE_DB_PASSWORD"));
    let (a_node, b_node) = (a.cluster.expect("a cluster node"), b.cluster.expect("a cluster node"));
    assert_ne!(a_node.node, b_node.node);
    assert_ne!(a.store_path, b.store_path, "each node its own lock file");
    assert_ne!(a.api.listen, b.api.listen);
    assert_eq!(a.heartbeats, b.heartbeats, "the same heartbeats");
}

#[test]
fn a_cluster_needs_postgres_a_node_id_and_a_sane_lease() {
    let pg = "[store]\nurl = \"postgres://systole@db/x\"\n";
    for (text, field, problem) in [
        (format!("{LLM}[cluster]\nnode_id = \"a\"\n"), "cluster", "needs store.url"),
        (format!("{LLM}{pg}[cluster]\n"), "cluster.node_id", "missing"),
        (format!("{LLM}{pg}[cluster]\nnode_id = \"Node A\"\n"), "cluster.node_id", "only lowercase"),
        (format!("{LLM}{pg}[cluster]\nnode_id = \"a\"\nlease_secs = 1\n"), "cluster.lease_secs", "out of range"),
        (
            format!("{LLM}{pg}[cluster]\nnode_id = \"a\"\nadvertise_url = \"10.0.0.5:7878\"\n"),
            "cluster.advertise_url",
            "not an http",
        ),
        (
            format!("{LLM}{pg}[cluster]\nnode_id = \"a\"\nadvertise_url = \"http://\"\n"),
            "cluster.advertise_url",
            "no host",
        ),
        (
            format!("{LLM}{pg}[cluster]\nnode_id = \"a\"\nadvertise_url = \"http://u:p@h:1/v1\"\n"),
            "cluster.advertise_url",
            "only a scheme",
        ),
    ] {
        let error = refused(&text);
        assert_eq!(error.field, field, "for config:\n{text}\nerror: {error}");
        assert!(error.problem.contains(problem), "problem {:?} should mention {problem:?}", error.problem);
    }
    let config = parse_text(&format!("{LLM}{pg}[cluster]\nnode_id = \"node-1\"\n")).expect("valid");
    let cluster = config.cluster.expect("a cluster node");
    assert_eq!((cluster.node.as_str(), cluster.lease.as_secs()), ("node-1", crate::cluster::LEASE_SECS_DEFAULT));
    assert_eq!(cluster.api_url, None, "by default the address the API is bound to, known at start-up");
    let text = format!("{LLM}{pg}[cluster]\nnode_id = \"node-1\"\nadvertise_url = \"https://n1.internal:7878/\"\n");
    let cluster = parse_text(&text).expect("valid").cluster.expect("a cluster node");
    assert_eq!(cluster.api_url.as_deref(), Some("https://n1.internal:7878"));
}

#[test]
fn a_prompt_with_a_nul_is_refused_naming_the_field() {
    let text = format!(
        "{LLM}[[agents]]\nid = \"main\"\n[[agents.heartbeats]]\nid = \"hb\"\nprompt = \"a\\u0000b\"\nevery = \"1h\"\n"
    );
    let error = refused(&text);
    assert_eq!(error.field, "agents[0].heartbeats[0].prompt");
    assert!(error.problem.contains("NUL"), "{}", error.problem);
}

#[test]
fn prices_and_the_money_caps_are_read_in_micros_and_checked() {
    let text = format!(
        "{LLM}[llm.prices.\"gpt-4o-mini\"]\ninput = 0.15\ncached_input = 0.075\noutput = 0.6\n\
         [llm.prices.local]\ninput = 0\noutput = 0\n\
         [[agents]]\nid = \"ops\"\ndaily_tokens_max = 50000\ndaily_cost_max = 1.25\n\
         [[agents.heartbeats]]\nid = \"h\"\nprompt = \"p\"\nevery = \"1h\"\ntarget = \"stdout\"\nmodel = \"gpt-4o-mini\"\n"
    );
    let config = parse_text(&text).expect("valid");
    assert_eq!(config.heartbeats[0].model.as_deref(), Some("gpt-4o-mini"));
    let mini = config.prices.models["gpt-4o-mini"];
    assert_eq!(
        (mini.input_micros_per_million, mini.cached_micros_per_million, mini.output_micros_per_million),
        (150_000, 75_000, 600_000)
    );
    assert_eq!(config.prices.models["local"].cached_micros_per_million, 0, "no cached price: the input price");
    let ops = &config.agents[&AgentId::new("ops").expect("id")];
    assert_eq!((ops.daily_tokens_max, ops.daily_cost_max_micros), (50_000, 1_250_000));
    assert_eq!(config.agent_default.daily_tokens_max, crate::limits::DAILY_TOKENS_MAX_DEFAULT);
    assert_eq!(config.agent_default.daily_cost_max_micros, crate::limits::DAILY_COST_MICROS_MAX_DEFAULT);
    // The global caps are on by default, in the engine's day.
    let global = &config.engine.global_caps;
    assert_eq!(
        (global.tokens, global.cost_micros, global.timezone.as_str()),
        (crate::limits::GLOBAL_DAILY_TOKENS_MAX_DEFAULT, crate::limits::GLOBAL_DAILY_COST_MICROS_MAX_DEFAULT, "UTC")
    );
    let text =
        format!("[engine]\ntimezone = \"Europe/Berlin\"\ndaily_tokens_max = 900000\ndaily_cost_max = 12.5\n{LLM}");
    let global = parse_text(&text).expect("valid").engine.global_caps;
    assert_eq!((global.tokens, global.cost_micros, global.timezone.as_str()), (900_000, 12_500_000, "Europe/Berlin"));

    let cases = [
        (format!("[engine]\ndaily_tokens_max = 0\n{LLM}"), "engine.daily_tokens_max", "from 1"),
        (format!("[engine]\ndaily_cost_max = 0.0\n{LLM}"), "engine.daily_cost_max", "would stop every run"),
        (format!("[engine]\ndaily_cost_max = -3.0\n{LLM}"), "engine.daily_cost_max", "out of range"),
        (format!("{LLM}[llm.prices.m]\ninput = -1.0\noutput = 1.0\n"), "llm.prices.\"m\".input", "out of range"),
        (format!("{LLM}[llm.prices.m]\ninput = 1.0\n"), "llm.prices.\"m\".output", "is missing"),
        (format!("{LLM}[llm.prices.m]\ninput = 1.0\noutput = 1e9\n"), "llm.prices.\"m\".output", "out of range"),
        (format!("{LLM}[llm.prices.m]\ninput = 1.0\noutput = 1.0\nwrite = 2.0\n"), "", "unknown field"),
        (
            format!("{LLM}[[agents]]\nid = \"a\"\ndaily_cost_max = 0\n"),
            "agents[0].daily_cost_max",
            "would stop every run",
        ),
        (format!("{LLM}[[agents]]\nid = \"a\"\ndaily_cost_max = nan\n"), "agents[0].daily_cost_max", "out of range"),
        (format!("{LLM}[[agents]]\nid = \"a\"\ndaily_tokens_max = 0\n"), "agents[0].daily_tokens_max", "from 1"),
        (
            format!("{LLM}[[agents]]\nid = \"a\"\n[[agents.heartbeats]]\nid = \"h\"\nprompt = \"p\"\nevery = \"1h\"\ntarget = \"stdout\"\nmodel = \" \"\n"),
            "agents[0].heartbeats[0].model",
            "is empty",
        ),
        (
            format!("{LLM}[[agents]]\nid = \"a\"\n[[agents.cron]]\nid = \"c\"\nprompt = \"p\"\nschedule = {{ cron = \"0 * * * *\" }}\ntarget = \"stdout\"\nmodel = \"a\\nb\"\n"),
            "agents[0].cron[0].model",
            "control character",
        ),
    ];
    for (text, field, problem) in cases {
        let error = refused(&text);
        assert!(error.field.starts_with(field), "{text}\n{error}");
        assert!(error.problem.contains(problem), "{field}: {:?} should mention {problem:?}", error.problem);
    }
}

#[test]
fn a_jobs_check_reads_its_tool_and_arguments_and_refusals_name_the_field() {
    let tools = |job: &str| {
        format!(
            "{LLM}[mcp.servers.inbox]\nurl = \"http://127.0.0.1:9/mcp\"\nread_only = [\"unread\"]\n\
             [[agents]]\nid = \"main\"\ntools = [\"inbox/*\"]\n[[agents.heartbeats]]\nid = \"hb\"\nprompt = \"p\"\nevery = \"1h\"\ntarget = \"stdout\"\n{job}\n"
        )
    };
    let config =
        parse_text(&tools("check_tool = \"inbox/unread\"\ncheck_arguments = { folder = \"INBOX\", limit = 5 }"))
            .expect("a check");
    let check = config.heartbeats[0].tools.check.as_ref().expect("kept");
    assert_eq!(check.tool.to_string(), "inbox/unread");
    assert_eq!(check.arguments_text(), r#"{"folder":"INBOX","limit":5}"#);
    for (job, field, says) in [
        ("check_tool = \"calendar/list\"", "agents[0].heartbeats[0].check_tool", "agent's `tools` list"),
        ("check_tool = \"inbox\"", "agents[0].heartbeats[0].check_tool", "server/tool"),
        ("check_arguments = { folder = \"INBOX\" }", "agents[0].heartbeats[0].check_arguments", "needs `check_tool`"),
        ("check_tool = \"inbox/unread\"\ncheck_arguments = 5", "agents[0].heartbeats[0].check_arguments", "table"),
        (
            "tools = [\"inbox/search\"]\ncheck_tool = \"inbox/unread\"",
            "agents[0].heartbeats[0].check_tool",
            "job's `tools` list",
        ),
    ] {
        let error = refused(&tools(job)).to_string();
        assert!(error.contains(field) && error.contains(says), "{job}: {error}");
    }
}

#[test]
fn telemetry_is_off_by_default_and_its_refusals_name_the_field() {
    let plain = parse_text(&with_heartbeat("every = \"1h\"\ntarget = \"stdout\"")).expect("valid");
    assert_eq!(plain.telemetry, None, "no [telemetry]: no traces");
    let traced = parse_text(&format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n{}",
        with_heartbeat("every = \"1h\"\ntarget = \"stdout\"")
    ))
    .expect("valid");
    let settings = traced.telemetry.expect("on");
    assert_eq!((settings.endpoint.as_str(), settings.service_name.as_str()), ("http://127.0.0.1:4318", "systole"));
    assert!(settings.headers.is_empty());
    for (table, field, says) in [
        ("[telemetry]\nservice_name = \"x\"", "telemetry.otlp_endpoint", "is missing"),
        ("[telemetry]\notlp_endpoint = \"grpc://collector:4317\"", "telemetry.otlp_endpoint", "http://"),
        ("[telemetry]\notlp_endpoint = \"http://c:4318\"\nservice_name = \"\"", "telemetry.service_name", "between 1"),
        ("[telemetry]\notlp_endpoint = \"http://c:4318\"\nprotocol = \"grpc\"", "telemetry", "unknown field"),
        (
            "[telemetry]\notlp_endpoint = \"http://c:4318\"\nheaders = { \"x-key\" = \"the key itself\" }",
            "telemetry.headers.x-key",
            "name of an environment variable",
        ),
    ] {
        let error = refused(&format!("{table}\n{}", with_heartbeat("every = \"1h\"\ntarget = \"stdout\"")));
        assert!(error.to_string().contains(field) && error.to_string().contains(says), "{table}: {error}");
    }
}
