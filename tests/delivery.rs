//! Delivery through each platform's real protocol, against local fakes on 127.0.0.1: the
//! request each platform gets (method, path, headers, body), splitting at its limit, its
//! way of saying "wait" (429 with a retry-after) and "no" (a refusal, Slack's `ok: false`),
//! and signed webhooks checked by an independent implementation (Python's
//! `standardwebhooks`).

#![allow(clippy::disallowed_methods)] // real time: these tests talk to real sockets

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::Router;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use common::{key, start};
use systole::adapters::reqwest_http::ReqwestHttp;
use systole::adapters::system_clock::SystemClock;
use systole::core::delivery_target::DeliveryTarget;
use systole::delivery::platform::Platform;
use systole::delivery::sender::{ChatSender, Destination};
use systole::delivery::signing::WebhookSecret;
use systole::ports::messenger::{Delivery, DeliveryError, DeliveryKind};

/// One request as the fake platform saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    /// Path and query.
    uri: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// One canned answer: status, headers, body (the last one repeats).
type Answer = (u16, Vec<(&'static str, &'static str)>, &'static str);

#[derive(Clone)]
struct Fake {
    answers: Arc<Vec<Answer>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fake {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn record(
    State(fake): State<Fake>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let headers = headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.to_str().unwrap_or("").to_owned()))
        .collect();
    let index = {
        let mut seen = fake.seen.lock().expect("lock");
        seen.push(Seen { method, uri: uri.to_string(), headers, body: body.to_vec() });
        (seen.len() - 1).min(fake.answers.len() - 1)
    };
    let (status, extra, body) = fake.answers[index].clone();
    let mut response = (StatusCode::from_u16(status).expect("status"), body).into_response();
    for (name, value) in extra {
        response.headers_mut().insert(name, value.parse().expect("header"));
    }
    response
}

/// A fake platform answering with `answers`; its base URL.
async fn serve_fake(answers: Vec<Answer>) -> (Fake, String) {
    let fake = Fake { answers: Arc::new(answers), seen: Arc::default() };
    let app = Router::new().fallback(record).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (fake, format!("http://{address}"))
}

fn sender(target: &str, platform: Platform, attempts_max: u32) -> ChatSender {
    sender_with_mentions(target, platform, attempts_max, false)
}

fn sender_with_mentions(target: &str, platform: Platform, attempts_max: u32, allow_mentions: bool) -> ChatSender {
    let destination = Destination { platform, timeout: Duration::from_secs(5), attempts_max, allow_mentions };
    let destinations = BTreeMap::from([(target.to_owned(), destination)]);
    let http = Arc::new(ReqwestHttp::new());
    ChatSender::new(http, Arc::new(SystemClock::new()), ChaCha8Rng::seed_from_u64(7), destinations)
}

fn delivery(target: &str, text: &str) -> Delivery {
    Delivery {
        target: DeliveryTarget::parse(target).expect("valid"),
        text: text.to_owned(),
        heartbeat: key("main", "inbox"),
        scheduled_for: start(),
        idempotency_key: "main/inbox/1".to_owned(),
        kind: DeliveryKind::Reply,
        fence: systole::ports::fence::Fence::default(),
    }
}

/// Paragraphs of `size` characters, `count` of them.
fn paragraphs(count: usize, size: usize) -> String {
    (0..count).map(|n| format!("{n:03}{}", "x".repeat(size - 3))).collect::<Vec<_>>().join("\n\n")
}

const DISCORD_OK: Answer = (200, vec![], r#"{"id":"1"}"#);

#[tokio::test]
async fn discord_posts_each_part_in_order_as_the_bot_with_no_pings() {
    let (fake, base) = serve_fake(vec![DISCORD_OK]).await;
    let platform = Platform::Discord { base_url: base, token: "bot-token".to_owned() };
    let text = paragraphs(5, 900);
    sender("discord", platform, 3).send(&delivery("discord:123456789", &text)).await.expect("delivered");
    let seen = fake.seen();
    assert_eq!(seen.len(), 3, "4,508 characters in parts of at most 2,000 on paragraph breaks");
    let mut contents = Vec::new();
    let mut nonces = Vec::new();
    for request in &seen {
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.uri, "/api/v10/channels/123456789/messages");
        assert_eq!(request.headers["authorization"], "Bot bot-token");
        assert!(request.headers["idempotency-key"].starts_with("main/inbox/1/part-"), "{:?}", request.headers);
        assert_eq!(request.headers["content-type"], "application/json");
        let body = request.json();
        assert_eq!(body["allowed_mentions"]["parse"], serde_json::json!([]), "a model's @everyone pings nobody");
        assert_eq!(body["enforce_nonce"], true);
        let content = body["content"].as_str().expect("content").to_owned();
        assert!(content.chars().count() <= 2_000);
        contents.push(content);
        nonces.push(body["nonce"].as_str().expect("nonce").to_owned());
    }
    assert_eq!(contents.join("\n\n"), text, "in order, nothing lost");
    assert!(nonces.iter().all(|nonce| nonce.len() <= 25));
    nonces.dedup();
    assert_eq!(nonces.len(), 3, "one nonce per part");
}

#[tokio::test]
async fn discord_waits_out_a_429_and_retries_the_same_part() {
    let limited: Answer = (
        429,
        vec![("retry-after", "0.3")],
        r#"{"message":"You are being rate limited.","retry_after":0.3,"global":false}"#,
    );
    let (fake, base) = serve_fake(vec![limited, DISCORD_OK]).await;
    let platform = Platform::Discord { base_url: base, token: "t".to_owned() };
    let began = Instant::now();
    sender("discord", platform, 3).send(&delivery("discord:1", "hello")).await.expect("delivered");
    assert!(began.elapsed() >= Duration::from_millis(300), "waited what Discord asked: {:?}", began.elapsed());
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].json()["nonce"], seen[1].json()["nonce"], "a retry is the same message");
}

#[tokio::test]
async fn a_refusal_is_not_retried_and_a_long_retry_after_is_not_waited_out() {
    let (fake, base) = serve_fake(vec![(403, vec![], r#"{"message":"Missing Access","code":50001}"#)]).await;
    let platform = Platform::Discord { base_url: base, token: "t".to_owned() };
    let result = sender("discord", platform, 3).send(&delivery("discord:1", "hello")).await;
    match result {
        Err(DeliveryError::Failed { attempts: 1, last_error, .. }) => {
            assert!(last_error.contains("Missing Access"), "{last_error}")
        }
        other => panic!("expected a refusal after one attempt, got {other:?}"),
    }
    assert_eq!(fake.seen().len(), 1);

    let (fake, base) = fake_with_long_wait().await;
    let platform = Platform::Discord { base_url: base, token: "t".to_owned() };
    let began = Instant::now();
    let result = sender("discord", platform, 3).send(&delivery("discord:1", "hello")).await;
    assert!(began.elapsed() < Duration::from_secs(5), "gave up at once: {:?}", began.elapsed());
    assert!(
        matches!(&result, Err(DeliveryError::Failed { last_error, .. }) if last_error.contains("asked to wait 600 s")),
        "{result:?}"
    );
    assert_eq!(fake.seen().len(), 1);
}

async fn fake_with_long_wait() -> (Fake, String) {
    serve_fake(vec![(429, vec![("retry-after", "600")], r#"{"retry_after":600}"#)]).await
}

#[tokio::test]
async fn a_split_message_failing_half_way_says_so_and_never_repeats_a_part() {
    let (fake, base) = serve_fake(vec![
        DISCORD_OK,
        (502, vec![], "bad gateway"),
        DISCORD_OK,
        (400, vec![], r#"{"message":"Cannot send an empty message"}"#),
    ])
    .await;
    let platform = Platform::Discord { base_url: base, token: "t".to_owned() };
    let result = sender("discord", platform, 3).send(&delivery("discord:1", &paragraphs(3, 1_500))).await;
    match result {
        Err(DeliveryError::Failed { last_error, .. }) => {
            assert!(last_error.contains("(2 of 3 parts delivered)"), "{last_error}")
        }
        other => panic!("expected a failure on the third part, got {other:?}"),
    }
    let contents: Vec<String> =
        fake.seen().iter().map(|seen| seen.json()["content"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(contents.len(), 4, "part 1 once, part 2 twice (a 502, then delivered), part 3 refused once");
    assert!(
        contents[0].starts_with("000")
            && contents[1].starts_with("001")
            && contents[2].starts_with("001")
            && contents[3].starts_with("002")
    );
}

#[tokio::test]
async fn a_discord_webhook_posts_with_wait_and_its_url() {
    let (fake, base) = serve_fake(vec![DISCORD_OK]).await;
    let platform = Platform::DiscordWebhook { url: format!("{base}/api/webhooks/42/secret-token") };
    sender("discord-webhook:team", platform, 3).send(&delivery("discord-webhook:team", "hi")).await.expect("delivered");
    let seen = fake.seen();
    assert_eq!(seen[0].uri, "/api/webhooks/42/secret-token?wait=true");
    assert_eq!(seen[0].json()["content"], "hi");
    assert!(!seen[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn slack_ok_false_is_a_failed_delivery_and_long_messages_split_at_4000() {
    let (fake, base) = serve_fake(vec![(200, vec![], r#"{"ok":false,"error":"channel_not_found"}"#)]).await;
    let platform = Platform::Slack { base_url: format!("{base}/api"), token: "xoxb-1".to_owned() };
    let result = sender("slack", platform, 3).send(&delivery("slack:C0123", "hello")).await;
    assert!(
        matches!(&result, Err(DeliveryError::Failed { attempts: 1, last_error, .. }) if last_error.contains("channel_not_found")),
        "{result:?}"
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 1, "a refusal in a 200 is not retried");
    assert_eq!(seen[0].uri, "/api/chat.postMessage");
    assert_eq!(seen[0].headers["authorization"], "Bearer xoxb-1");
    assert_eq!(
        seen[0].json(),
        serde_json::json!({ "channel": "C0123", "text": "hello", "parse": "none", "link_names": false })
    );

    let limited: Answer = (429, vec![("retry-after", "1")], "");
    let (fake, base) = serve_fake(vec![limited, (200, vec![], r#"{"ok":true}"#)]).await;
    let platform = Platform::Slack { base_url: format!("{base}/api"), token: "xoxb-1".to_owned() };
    let text = paragraphs(3, 3_000);
    sender("slack", platform, 3).send(&delivery("slack:C0123", &text)).await.expect("delivered");
    let texts: Vec<String> =
        fake.seen().iter().map(|seen| seen.json()["text"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(texts.len(), 4, "a 429, then three parts");
    assert!(texts.iter().all(|text| text.chars().count() <= 4_000));
    assert_eq!(texts[1..].join("\n\n"), text);
}

#[tokio::test]
async fn a_slack_incoming_webhook_gets_the_text() {
    let (fake, base) = serve_fake(vec![(200, vec![], "ok")]).await;
    let platform = Platform::SlackWebhook { url: format!("{base}/services/T/B/X") };
    sender("slack-webhook:team", platform, 3).send(&delivery("slack-webhook:team", "hi")).await.expect("delivered");
    let seen = fake.seen();
    assert_eq!((seen[0].method.clone(), seen[0].uri.as_str()), (Method::POST, "/services/T/B/X"));
    assert_eq!(seen[0].json(), serde_json::json!({ "text": "hi", "parse": "none", "link_names": false }));
}

#[tokio::test]
async fn telegram_honours_retry_after_and_its_refusals_never_show_the_token() {
    let limited: Answer = (
        429,
        vec![],
        r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 1","parameters":{"retry_after":1}}"#,
    );
    let (fake, base) = serve_fake(vec![limited, (200, vec![], r#"{"ok":true,"result":{"message_id":5}}"#)]).await;
    let platform = Platform::Telegram { base_url: base, token: "123:SECRET".to_owned() };
    let began = Instant::now();
    sender("telegram", platform, 3).send(&delivery("telegram:-1001234", "hello")).await.expect("delivered");
    assert!(began.elapsed() >= Duration::from_secs(1), "waited parameters.retry_after");
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].uri, "/bot123:SECRET/sendMessage");
    assert_eq!(seen[1].json(), serde_json::json!({ "chat_id": "-1001234", "text": "hello" }));

    let (fake, base) =
        serve_fake(vec![(400, vec![], r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#)])
            .await;
    let platform = Platform::Telegram { base_url: base, token: "123:SECRET".to_owned() };
    let error = sender("telegram", platform, 3).send(&delivery("telegram:1", "hello")).await.expect_err("refused");
    assert!(error.to_string().contains("chat not found"), "{error}");
    assert_eq!(fake.seen().len(), 1);
    // Unreachable: the error keeps its cause but not the URL, which holds the token.
    let platform = Platform::Telegram { base_url: "http://127.0.0.1:1".to_owned(), token: "123:SECRET".to_owned() };
    let error = sender("telegram", platform, 1).send(&delivery("telegram:1", "hello")).await.expect_err("unreachable");
    assert!(!error.to_string().contains("SECRET"), "{error}");
    assert!(error.to_string().to_lowercase().contains("connection refused"), "{error}");
}

#[tokio::test]
async fn telegram_splits_at_4096_units() {
    let (fake, base) = serve_fake(vec![(200, vec![], r#"{"ok":true}"#)]).await;
    let platform = Platform::Telegram { base_url: base, token: "t".to_owned() };
    let text = "word ".repeat(2_000);
    sender("telegram", platform, 3).send(&delivery("telegram:1", text.trim_end())).await.expect("delivered");
    let texts: Vec<String> =
        fake.seen().iter().map(|seen| seen.json()["text"].as_str().unwrap_or("").to_owned()).collect();
    assert_eq!(texts.len(), 3);
    assert!(texts.iter().all(|text| text.encode_utf16().count() <= 4_096));
    assert_eq!(texts.join(" "), text.trim_end());
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Python's `standardwebhooks` verifies `seen` (with the body replaced by `body` if given).
fn verified_by_python(seen: &Seen, body: Option<&[u8]>) -> bool {
    let script = "import json, sys\n\
        from standardwebhooks.webhooks import Webhook\n\
        request = json.load(sys.stdin)\n\
        try:\n    Webhook(request['secret']).verify(request['body'], request['headers'])\nexcept Exception as error:\n    print(error)\n    sys.exit(1)\n";
    let headers: BTreeMap<&str, &str> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .into_iter()
        .map(|name| (name, seen.headers.get(name).map_or("", String::as_str)))
        .collect();
    let body = String::from_utf8(body.unwrap_or(&seen.body).to_vec()).expect("utf-8");
    let input = serde_json::json!({ "secret": SECRET, "body": body, "headers": headers }).to_string();
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/install-test-deps.sh installs standardwebhooks)");
    use std::io::Write;
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    child.wait().expect("python3 finishes").success()
}

#[tokio::test]
async fn signed_webhooks_verify_with_the_standard_webhooks_library() {
    let (fake, base) = serve_fake(vec![(204, vec![], "")]).await;
    let secret = WebhookSecret::parse(SECRET).expect("valid");
    let platform = Platform::Webhook { url: format!("{base}/hook"), secret: Some(secret) };
    sender("webhook:ops", platform, 3).send(&delivery("webhook:ops", "disk almost full")).await.expect("delivered");
    let seen = &fake.seen()[0];
    assert_eq!(seen.headers["webhook-id"], "main/inbox/1", "the run's idempotency key");
    assert_eq!(seen.headers["idempotency-key"], "main/inbox/1", "the existing header stays");
    assert!(seen.headers["webhook-signature"].starts_with("v1,"));
    let timestamp: i64 = seen.headers["webhook-timestamp"].parse().expect("seconds");
    assert!((timestamp - jiff::Timestamp::now().as_second()).abs() < 60);
    assert_eq!(seen.json()["text"], "disk almost full");
    assert!(verified_by_python(seen, None), "the official library accepts the signature");
    assert!(!verified_by_python(seen, Some(br#"{"text":"tampered"}"#)), "and rejects a changed body");
}

#[tokio::test]
async fn a_plain_webhook_retries_transient_failures_with_the_same_key_and_stops_at_its_limit() {
    let (fake, base) = serve_fake(vec![(503, vec![], ""), (500, vec![], ""), (204, vec![], "")]).await;
    let platform = Platform::Webhook { url: format!("{base}/hook"), secret: None };
    sender("webhook:ops", platform.clone(), 3).send(&delivery("webhook:ops", "hi")).await.expect("delivered");
    let keys: Vec<String> = fake.seen().iter().map(|seen| seen.headers["idempotency-key"].clone()).collect();
    assert_eq!(keys, vec!["main/inbox/1"; 3], "one key for every attempt");
    assert!(fake.seen().iter().all(|seen| !seen.headers.contains_key("webhook-signature")), "no secret, no signature");

    let (fake, base) = serve_fake(vec![(500, vec![], "")]).await;
    let platform = Platform::Webhook { url: format!("{base}/hook"), secret: None };
    let result = sender("webhook:ops", platform, 2).send(&delivery("webhook:ops", "hi")).await;
    assert!(matches!(result, Err(DeliveryError::Failed { attempts: 2, .. })), "{result:?}");
    assert_eq!(fake.seen().len(), 2, "bounded: never more than the limit");
}

#[tokio::test]
async fn deliver_test_says_what_the_platform_answered_and_names_a_missing_token() {
    let (fake, base) = serve_fake(vec![(200, vec![], r#"{"ok":true,"result":{"message_id":7}}"#)]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("systole.toml");
    std::fs::write(
        &config,
        format!("[llm]\nprovider = \"scripted\"\n\n[adapters.telegram]\ntoken_env = \"TEST_TELEGRAM_TOKEN\"\nbase_url = \"{base}\"\n"),
    )
    .expect("write config");
    let run = move |token: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_systole"));
        command.args(["deliver", "test", "telegram:42", "hello from systole", "--config"]).arg(&config);
        command.env_remove("TEST_TELEGRAM_TOKEN");
        if let Some(token) = token {
            command.env("TEST_TELEGRAM_TOKEN", token);
        }
        command.output().expect("systole runs")
    };
    let output = tokio::task::spawn_blocking(move || (run(Some("123:abc")), run(None))).await.expect("join");
    let (ok, missing) = output;
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(stdout.contains("HTTP 200") && stdout.contains("message_id"), "{stdout}");
    assert_eq!(fake.seen()[0].uri, "/bot123:abc/sendMessage");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(stderr.contains("TEST_TELEGRAM_TOKEN") && stderr.contains("adapters.telegram.token_env"), "{stderr}");
}

/// A platform reached at a fake's base URL.
type PlatformAt = fn(String) -> Platform;

/// What a model can write to notify people, on one line.
const PINGS: &str = "<!channel> @everyone @alice <@U123|bob> & done";

/// Every platform's request names systole (Discord in its required bot form), and by
/// default a reply notifies nobody: Slack text escaped as Slack documents, Telegram
/// `@names` broken by a word joiner, Discord with mentions off (issue 25).
#[tokio::test]
async fn every_request_names_systole_and_by_default_a_reply_notifies_nobody() {
    let ok_json = (200, vec![], r#"{"ok":true,"id":"1"}"#);
    let version = env!("CARGO_PKG_VERSION");
    let systole_agent = format!("systole/{version} (+{})", env!("CARGO_PKG_REPOSITORY"));
    let cases: [(&str, PlatformAt); 6] = [
        ("discord", |base| Platform::Discord { base_url: base, token: "t".to_owned() }),
        ("discord-webhook:team", |base| Platform::DiscordWebhook { url: format!("{base}/hook") }),
        ("slack", |base| Platform::Slack { base_url: base, token: "t".to_owned() }),
        ("slack-webhook:team", |base| Platform::SlackWebhook { url: format!("{base}/hook") }),
        ("telegram", |base| Platform::Telegram { base_url: base, token: "t".to_owned() }),
        ("webhook:ops", |base| Platform::Webhook { url: format!("{base}/hook"), secret: None }),
    ];
    for (target, platform) in cases {
        for allow_mentions in [false, true] {
            let (fake, base) = serve_fake(vec![ok_json.clone()]).await;
            let adapter = target.split(':').next().expect("adapter");
            let address = if target.contains(':') { target.to_owned() } else { format!("{target}:C1") };
            sender_with_mentions(target, platform(base), 1, allow_mentions)
                .send(&delivery(&address, PINGS))
                .await
                .expect("delivered");
            let request = &fake.seen()[0];
            let body = request.json();
            let text = body["text"].as_str().or(body["content"].as_str()).expect("the text").to_owned();
            let expected_agent = if adapter == "discord" {
                format!("DiscordBot ({}, {version})", env!("CARGO_PKG_REPOSITORY"))
            } else {
                systole_agent.clone()
            };
            assert_eq!(request.headers["user-agent"], expected_agent, "{target}");
            match (adapter, allow_mentions) {
                ("discord" | "discord-webhook", false) => {
                    assert_eq!(body["allowed_mentions"], serde_json::json!({ "parse": [] }), "{target}");
                    assert_eq!(text, PINGS);
                }
                ("discord" | "discord-webhook", true) => {
                    assert_eq!(body["allowed_mentions"]["parse"], serde_json::json!(["users", "roles", "everyone"]));
                }
                ("slack" | "slack-webhook", mentions) => {
                    assert_eq!((body["parse"].as_str(), body["link_names"].as_bool()), (Some("none"), Some(false)));
                    let expected = if mentions {
                        "<!channel> @everyone @alice <@U123|bob> &amp; done"
                    } else {
                        "&lt;!channel&gt; @everyone @alice &lt;@U123|bob&gt; &amp; done"
                    };
                    assert_eq!(text, expected, "{target} with mentions {mentions}");
                }
                ("telegram", false) => {
                    assert_eq!(text, "<!channel> @\u{2060}everyone @\u{2060}alice <@\u{2060}U123|bob> & done");
                    assert!(body.get("parse_mode").is_none(), "plain text: nothing formats");
                }
                ("telegram", true) | ("webhook", _) => assert_eq!(text, PINGS, "{target}"),
                _ => unreachable!("{target}"),
            }
        }
    }
}
