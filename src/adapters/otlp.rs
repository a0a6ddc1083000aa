//! Traces over OTLP/HTTP with the JSON encoding (`POST {endpoint}/v1/traces`), named by the
//! OpenTelemetry GenAI semantic conventions v1.41.0 (ADR 0022): a run is an
//! `invoke_agent {agent}` span, each completion a `chat {model}` child and each tool call
//! an `execute_tool {tool}` child. Runs hand their traces to a bounded queue and never
//! wait; one task posts them in batches, and drops (and counts) what it cannot keep up with.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::limits::{TELEMETRY_BATCH_TRACES_MAX, TELEMETRY_EXPORT_TIMEOUT_SECS, TELEMETRY_QUEUE_TRACES_MAX};
use crate::metrics::Metrics;
use crate::ports::http::{HttpClient, HttpRequest};
use crate::ports::store::{ExecutionStatus, ToolCallOutcome};
use crate::ports::telemetry::{hex, span_id, trace_id, RunTrace, Telemetry};

/// The version of the GenAI semantic conventions the spans follow (still in development).
pub const GEN_AI_CONVENTIONS_VERSION: &str = "1.41.0";

/// OTLP's span kinds.
const SPAN_KIND_INTERNAL: u8 = 1;
const SPAN_KIND_CLIENT: u8 = 3;
/// OTLP's status codes.
const STATUS_OK: u8 = 1;
const STATUS_ERROR: u8 = 2;

fn attribute(key: &str, value: Value) -> Value {
    let value = match value {
        Value::Number(number) if number.is_u64() || number.is_i64() => json!({ "intValue": number.to_string() }),
        Value::Bool(flag) => json!({ "boolValue": flag }),
        Value::String(text) => json!({ "stringValue": text }),
        other => json!({ "stringValue": other.to_string() }),
    };
    json!({ "key": key, "value": value })
}

fn nanos(at: Timestamp) -> String {
    at.as_nanosecond().max(0).to_string()
}

fn after(start: Timestamp, offset: Duration) -> Timestamp {
    start.checked_add(offset).unwrap_or(start)
}

fn status(error: Option<&str>) -> Value {
    match error {
        Some(message) => json!({ "code": STATUS_ERROR, "message": message }),
        None => json!({ "code": STATUS_OK }),
    }
}

/// A run's spans, the run's own first.
pub fn spans(trace: &RunTrace) -> Vec<Value> {
    let trace_bytes = trace_id(&trace.key, trace.slot);
    let trace_hex = hex(&trace_bytes);
    let root = hex(&span_id(&trace_bytes, 0));
    let agent = trace.key.agent.as_str();
    let failed = trace.status != ExecutionStatus::Succeeded;
    let run_error = failed.then(|| trace.error.clone().unwrap_or_else(|| trace.status.as_str().to_owned()));
    let mut attributes = vec![
        attribute("gen_ai.operation.name", json!("invoke_agent")),
        attribute("gen_ai.agent.name", json!(agent)),
        attribute("gen_ai.agent.id", json!(trace.key.to_string())),
        attribute("systole.slot", json!(trace.slot.to_string())),
        attribute("systole.status", json!(trace.status.as_str())),
    ];
    if failed {
        attributes.push(attribute("error.type", json!(trace.status.as_str())));
    }
    let mut spans = vec![json!({
        "traceId": trace_hex,
        "spanId": root,
        "name": format!("invoke_agent {agent}"),
        "kind": SPAN_KIND_INTERNAL,
        "startTimeUnixNano": nanos(trace.started_at),
        "endTimeUnixNano": nanos(after(trace.started_at, trace.duration)),
        "attributes": attributes,
        "status": status(run_error.as_deref()),
    })];
    let mut index = 0;
    for completion in &trace.completions {
        index += 1;
        let model = completion.model.as_deref().unwrap_or("default");
        let mut attributes = vec![
            attribute("gen_ai.operation.name", json!("chat")),
            attribute("gen_ai.provider.name", json!("openai")),
            attribute("gen_ai.request.model", json!(model)),
        ];
        if let Some(usage) = completion.usage {
            attributes.push(attribute("gen_ai.usage.input_tokens", json!(usage.input)));
            attributes.push(attribute("gen_ai.usage.output_tokens", json!(usage.output)));
            attributes.push(attribute("gen_ai.usage.cache_read.input_tokens", json!(usage.cached)));
        }
        if completion.error.is_some() {
            attributes.push(attribute("error.type", json!("llm_error")));
        }
        let start = after(trace.started_at, completion.offset);
        spans.push(json!({
            "traceId": trace_hex,
            "spanId": hex(&span_id(&trace_bytes, index)),
            "parentSpanId": root,
            "name": format!("chat {model}"),
            "kind": SPAN_KIND_CLIENT,
            "startTimeUnixNano": nanos(start),
            "endTimeUnixNano": nanos(after(start, completion.duration)),
            "attributes": attributes,
            "status": status(completion.error.as_deref()),
        }));
    }
    for call in &trace.tool_calls {
        index += 1;
        let failed = call.outcome != ToolCallOutcome::Ok;
        let mut attributes = vec![
            attribute("gen_ai.operation.name", json!("execute_tool")),
            attribute("gen_ai.tool.name", json!(call.tool)),
            attribute("systole.tool.outcome", json!(call.outcome.as_str())),
        ];
        if failed {
            attributes.push(attribute("error.type", json!(call.outcome.as_str())));
        }
        let start = after(trace.started_at, call.offset);
        spans.push(json!({
            "traceId": trace_hex,
            "spanId": hex(&span_id(&trace_bytes, index)),
            "parentSpanId": root,
            "name": format!("execute_tool {}", call.tool),
            "kind": SPAN_KIND_INTERNAL,
            "startTimeUnixNano": nanos(start),
            "endTimeUnixNano": nanos(after(start, call.duration)),
            "attributes": attributes,
            "status": status(failed.then_some(call.outcome.as_str())),
        }));
    }
    spans
}

/// The body of one export: every span of `traces`, under one resource.
pub fn export_body(traces: &[RunTrace], service_name: &str) -> Value {
    let spans: Vec<Value> = traces.iter().flat_map(spans).collect();
    json!({ "resourceSpans": [{
        "resource": { "attributes": [
            attribute("service.name", json!(service_name)),
            attribute("service.version", json!(env!("CARGO_PKG_VERSION"))),
        ] },
        "scopeSpans": [{
            "scope": { "name": "systole", "version": env!("CARGO_PKG_VERSION") },
            "schemaUrl": format!("https://opentelemetry.io/schemas/{GEN_AI_CONVENTIONS_VERSION}"),
            "spans": spans,
        }],
    }] })
}

/// Where traces go and as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The receiver's base URL; traces go to `{endpoint}/v1/traces`.
    pub endpoint: String,
    pub service_name: String,
    /// Headers for a hosted receiver: header name to the environment variable its value
    /// comes from.
    pub headers: BTreeMap<String, String>,
}

impl OtlpSettings {
    /// Each header with its value read through `env`.
    ///
    /// # Errors
    /// The config field of the first header whose variable is not set, and the variable.
    pub fn header_values(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, (String, String)> {
        self.headers
            .iter()
            .map(|(header, variable)| match env(variable) {
                Some(value) => Ok((header.clone(), value)),
                None => Err((format!("telemetry.headers.{header}"), variable.clone())),
            })
            .collect()
    }
}

/// The exporter a daemon with `[telemetry]` runs.
pub struct OtlpExporter {
    queue: mpsc::Sender<RunTrace>,
    dropped: Arc<AtomicU64>,
    metrics: Arc<Metrics>,
}

impl OtlpExporter {
    /// Starts the task that posts traces (on the current tokio runtime), with `headers`
    /// (already read from the environment; never logged) on every request.
    /// Traces it loses are counted in `metrics` (`systole_traces_lost_total`).
    pub fn start(
        settings: OtlpSettings,
        headers: Vec<(String, String)>,
        http: Arc<dyn HttpClient>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (queue, mut traces) = mpsc::channel::<RunTrace>(TELEMETRY_QUEUE_TRACES_MAX);
        let dropped = Arc::new(AtomicU64::new(0));
        let url = format!("{}/v1/traces", settings.endpoint.trim_end_matches('/'));
        let lost = Arc::clone(&metrics);
        tokio::spawn(async move {
            while let Some(first) = traces.recv().await {
                let mut batch = vec![first];
                while batch.len() < TELEMETRY_BATCH_TRACES_MAX {
                    match traces.try_recv() {
                        Ok(trace) => batch.push(trace),
                        Err(_) => break,
                    }
                }
                let body = export_body(&batch, &settings.service_name);
                let timeout = Duration::from_secs(TELEMETRY_EXPORT_TIMEOUT_SECS);
                let request = headers
                    .iter()
                    .fold(HttpRequest::post_json(url.clone(), &body, timeout), |request, (name, value)| {
                        request.header(name, value.clone())
                    });
                let count = u64::try_from(batch.len()).unwrap_or(u64::MAX);
                match http.post(request).await {
                    Ok(response) if (200..300).contains(&response.status) => {}
                    Ok(response) => {
                        lost.traces_lost("export-failed", count);
                        tracing::warn!(
                            status = response.status,
                            traces = batch.len(),
                            "the OTLP receiver refused traces"
                        );
                    }
                    Err(error) => {
                        lost.traces_lost("export-failed", count);
                        tracing::warn!(%error, traces = batch.len(), "could not export traces over OTLP");
                    }
                }
            }
        });
        Self { queue, dropped, metrics }
    }

    /// Traces dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Telemetry for OtlpExporter {
    fn enabled(&self) -> bool {
        true
    }

    fn export(&self, trace: RunTrace) {
        if self.queue.try_send(trace).is_err() {
            self.metrics.traces_lost("queue-full", 1);
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "the trace exporter cannot keep up; traces are dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{AgentId, HeartbeatId, HeartbeatKey};
    use crate::core::usage::TokenUsage;
    use crate::ports::http::{HttpError, HttpResponse};
    use crate::ports::telemetry::{CompletionSpan, ToolSpan};

    /// A receiver that refuses every export.
    struct Refusing;

    #[async_trait::async_trait]
    impl HttpClient for Refusing {
        async fn post(&self, _request: HttpRequest) -> Result<HttpResponse, HttpError> {
            Ok(HttpResponse { status: 503, headers: Vec::new(), body: Vec::new() })
        }
    }

    fn bare_trace() -> RunTrace {
        let started_at = Timestamp::from_second(1_800_000_000).expect("valid");
        RunTrace {
            key: HeartbeatKey {
                agent: AgentId::new("ops").expect("valid"),
                heartbeat: HeartbeatId::new("inbox").expect("valid"),
            },
            slot: started_at,
            started_at,
            duration: Duration::from_secs(1),
            status: ExecutionStatus::Succeeded,
            error: None,
            completions: Vec::new(),
            tool_calls: Vec::new(),
        }
    }

    #[tokio::test]
    async fn traces_it_cannot_queue_or_send_are_counted_as_lost() {
        let metrics = Arc::new(Metrics::default());
        let settings =
            OtlpSettings { endpoint: "http://127.0.0.1:9".into(), service_name: "t".into(), headers: BTreeMap::new() };
        // On a current-thread runtime the sending task runs only when this test yields, so
        // the queue fills first: what does not fit is lost as `queue-full`.
        let exporter = OtlpExporter::start(settings, Vec::new(), Arc::new(Refusing), Arc::clone(&metrics));
        let overflow = 3;
        for _ in 0..TELEMETRY_QUEUE_TRACES_MAX + overflow {
            exporter.export(bare_trace());
        }
        assert_eq!(exporter.dropped(), overflow as u64);
        // The receiver refuses every batch: each queued trace is lost as `export-failed`.
        let queued = TELEMETRY_QUEUE_TRACES_MAX as u64;
        let failed = format!("systole_traces_lost_total{{reason=\"export-failed\"}} {queued}");
        for _ in 0..100_000 {
            if metrics.render(&BTreeMap::new()).contains(&failed) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let text = metrics.render(&BTreeMap::new());
        assert!(text.contains(&failed), "{text}");
        assert!(text.contains(&format!("systole_traces_lost_total{{reason=\"queue-full\"}} {overflow}")), "{text}");
    }

    #[test]
    fn a_run_is_one_span_with_a_child_per_completion_and_tool_call() {
        let key = HeartbeatKey {
            agent: AgentId::new("ops").expect("valid"),
            heartbeat: HeartbeatId::new("inbox").expect("valid"),
        };
        let started_at = Timestamp::from_second(1_800_000_000).expect("valid");
        let trace = RunTrace {
            key: key.clone(),
            slot: started_at,
            started_at,
            duration: Duration::from_secs(3),
            status: ExecutionStatus::Succeeded,
            error: None,
            completions: vec![CompletionSpan {
                offset: Duration::from_millis(10),
                duration: Duration::from_millis(900),
                model: Some("gpt-4o-mini".into()),
                usage: Some(TokenUsage { input: 120, cached: 20, output: 7, reasoning: 0 }),
                error: None,
            }],
            tool_calls: vec![ToolSpan {
                offset: Duration::from_secs(1),
                duration: Duration::from_millis(40),
                tool: "inbox/search".into(),
                outcome: ToolCallOutcome::Timeout,
            }],
        };
        let spans = spans(&trace);
        let names: Vec<&str> = spans.iter().filter_map(|span| span["name"].as_str()).collect();
        assert_eq!(names, ["invoke_agent ops", "chat gpt-4o-mini", "execute_tool inbox/search"]);
        let root = &spans[0]["spanId"];
        assert!(spans[0].get("parentSpanId").is_none());
        assert!(spans[1..].iter().all(|span| span["parentSpanId"] == *root && span["traceId"] == spans[0]["traceId"]));
        assert_eq!(spans[0]["traceId"], hex(&trace_id(&key, started_at)));
        let attributes = |span: &Value| -> Vec<(String, Value)> {
            span["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| (a["key"].as_str().unwrap_or("").to_owned(), a["value"].clone()))
                .collect()
        };
        let chat = attributes(&spans[1]);
        assert!(chat.contains(&("gen_ai.usage.input_tokens".into(), json!({ "intValue": "120" }))), "{chat:?}");
        assert!(chat.contains(&("gen_ai.request.model".into(), json!({ "stringValue": "gpt-4o-mini" }))));
        assert_eq!(spans[1]["startTimeUnixNano"], "1800000000010000000");
        assert_eq!(spans[1]["endTimeUnixNano"], "1800000000910000000");
        assert_eq!(spans[2]["status"]["code"], STATUS_ERROR, "a timed-out call is an error");
        let body = export_body(std::slice::from_ref(&trace), "systole");
        assert_eq!(body["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array().map(Vec::len), Some(3));
    }
}
