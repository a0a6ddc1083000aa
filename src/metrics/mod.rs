//! Counters and histograms of what the engine did, rendered in the Prometheus text format
//! (version 0.0.4) for `GET /metrics`. Fed by decorators around the ports ([`metered`]),
//! so the engine itself knows nothing of them.

pub mod metered;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use crate::core::usage::{format_micros, RunUsage};

/// Upper bounds, in seconds, of the buckets of every duration histogram: from a fast
/// local model (50 ms) to a run that uses its whole default budget (120 s).
const DURATION_BUCKETS_SECS: [f64; 12] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

#[derive(Debug, Clone, Default)]
struct Histogram {
    /// Observations at or below each bound of `DURATION_BUCKETS_SECS`, not cumulated.
    buckets: [u64; DURATION_BUCKETS_SECS.len()],
    count: u64,
    sum_secs: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(index) = DURATION_BUCKETS_SECS.iter().position(|bound| seconds <= *bound) {
            self.buckets[index] += 1;
        }
        self.count += 1;
        self.sum_secs += seconds;
    }

    fn render(&self, out: &mut String, name: &str) {
        let mut cumulative = 0;
        for (bound, count) in DURATION_BUCKETS_SECS.iter().zip(self.buckets) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum_secs);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Counts {
    runs: BTreeMap<(String, String, String), u64>,
    skips: BTreeMap<String, u64>,
    run_duration: Histogram,
    llm_calls: u64,
    llm_request_duration: Histogram,
    deliveries: BTreeMap<(String, String), u64>,
    breaker_trips: u64,
    breaker_probes: u64,
    breaker_closes: u64,
    schedule_lag: Histogram,
    tool_calls: BTreeMap<(String, String, String), u64>,
    tool_call_duration: Histogram,
    tokens: BTreeMap<(String, &'static str), u64>,
    cost_micros: BTreeMap<String, u64>,
    /// Traces the OTLP exporter could not send, by why.
    traces_lost: BTreeMap<&'static str, u64>,
}

/// The registry. Cheap to update from any task.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
}

impl Metrics {
    fn with<T>(&self, update: impl FnOnce(&mut Counts) -> T) -> T {
        update(&mut self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    pub fn run_finished(&self, agent: &str, heartbeat: &str, status: &str, duration: Duration) {
        self.with(|counts| {
            *counts.runs.entry((agent.to_owned(), heartbeat.to_owned(), status.to_owned())).or_default() += 1;
            counts.run_duration.observe(duration.as_secs_f64());
        });
    }

    /// `count` traces the OTLP exporter lost: `queue-full` (it could not keep up) or
    /// `export-failed` (the receiver refused them or did not answer).
    pub fn traces_lost(&self, reason: &'static str, count: u64) {
        self.with(|counts| *counts.traces_lost.entry(reason).or_default() += count);
    }

    pub fn skipped(&self, reason: &str) {
        self.with(|counts| *counts.skips.entry(reason.to_owned()).or_default() += 1);
    }

    pub fn llm_request(&self, duration: Duration) {
        self.with(|counts| {
            counts.llm_calls += 1;
            counts.llm_request_duration.observe(duration.as_secs_f64());
        });
    }

    pub fn delivery(&self, adapter: &str, outcome: &str) {
        self.with(|counts| *counts.deliveries.entry((adapter.to_owned(), outcome.to_owned())).or_default() += 1);
    }

    pub fn breaker_tripped(&self) {
        self.with(|counts| counts.breaker_trips += 1);
    }

    pub fn breaker_probed(&self) {
        self.with(|counts| counts.breaker_probes += 1);
    }

    pub fn breaker_closed(&self) {
        self.with(|counts| counts.breaker_closes += 1);
    }

    /// One call of a server's tool that went out, with how it ended.
    pub fn tool_call(&self, server: &str, tool: &str, outcome: &str, duration: Duration) {
        self.with(|counts| {
            *counts.tool_calls.entry((server.to_owned(), tool.to_owned(), outcome.to_owned())).or_default() += 1;
            counts.tool_call_duration.observe(duration.as_secs_f64());
        });
    }

    /// What a finished run's completions reported, silent and failed runs included.
    pub fn run_usage(&self, agent: &str, usage: &RunUsage) {
        self.with(|counts| {
            for (kind, tokens) in usage.tokens.kinds() {
                *counts.tokens.entry((agent.to_owned(), kind)).or_default() += tokens;
            }
            *counts.cost_micros.entry(agent.to_owned()).or_default() += usage.cost_micros;
        });
    }

    /// How late a run started: its start minus its slot (negative lateness counts as 0).
    pub fn schedule_lag(&self, lag: Duration) {
        self.with(|counts| counts.schedule_lag.observe(lag.as_secs_f64()));
    }

    /// The text exposition; `heartbeats` is the count of jobs per state at this instant.
    pub fn render(&self, heartbeats: &BTreeMap<&'static str, u64>) -> String {
        let counts = self.with(|counts| Counts {
            runs: counts.runs.clone(),
            skips: counts.skips.clone(),
            run_duration: counts.run_duration.clone(),
            llm_calls: counts.llm_calls,
            llm_request_duration: counts.llm_request_duration.clone(),
            deliveries: counts.deliveries.clone(),
            breaker_trips: counts.breaker_trips,
            breaker_probes: counts.breaker_probes,
            breaker_closes: counts.breaker_closes,
            schedule_lag: counts.schedule_lag.clone(),
            tool_calls: counts.tool_calls.clone(),
            tool_call_duration: counts.tool_call_duration.clone(),
            tokens: counts.tokens.clone(),
            cost_micros: counts.cost_micros.clone(),
            traces_lost: counts.traces_lost.clone(),
        });
        let mut out = String::new();
        header(&mut out, "systole_runs_total", "counter", "Runs finished, by agent, heartbeat and status.");
        for ((agent, heartbeat, status), value) in &counts.runs {
            let labels = format!(
                "agent=\"{}\",heartbeat=\"{}\",status=\"{}\"",
                escape(agent),
                escape(heartbeat),
                escape(status)
            );
            let _ = writeln!(out, "systole_runs_total{{{labels}}} {value}");
        }
        header(&mut out, "systole_skips_total", "counter", "Slots skipped, by reason.");
        for (reason, value) in &counts.skips {
            let _ = writeln!(out, "systole_skips_total{{reason=\"{}\"}} {value}", escape(reason));
        }
        header(&mut out, "systole_run_duration_seconds", "histogram", "How long runs took, LLM and delivery included.");
        counts.run_duration.render(&mut out, "systole_run_duration_seconds");
        header(&mut out, "systole_llm_calls_total", "counter", "Requests made to the LLM endpoint.");
        let _ = writeln!(out, "systole_llm_calls_total {}", counts.llm_calls);
        let help = "Tokens the LLM reported, by agent and kind (input includes cached; output includes reasoning).";
        header(&mut out, "systole_llm_tokens_total", "counter", help);
        for ((agent, kind), value) in &counts.tokens {
            let _ = writeln!(out, "systole_llm_tokens_total{{agent=\"{}\",kind=\"{kind}\"}} {value}", escape(agent));
        }
        let help = "What the LLM calls cost by the [llm.prices] table, by agent, in its currency.";
        header(&mut out, "systole_llm_cost_total", "counter", help);
        for (agent, micros) in &counts.cost_micros {
            let _ = writeln!(out, "systole_llm_cost_total{{agent=\"{}\"}} {}", escape(agent), format_micros(*micros));
        }
        header(&mut out, "systole_llm_request_duration_seconds", "histogram", "How long one LLM request took.");
        counts.llm_request_duration.render(&mut out, "systole_llm_request_duration_seconds");
        header(&mut out, "systole_deliveries_total", "counter", "Deliveries, by adapter and outcome.");
        for ((adapter, outcome), value) in &counts.deliveries {
            let _ = writeln!(
                out,
                "systole_deliveries_total{{adapter=\"{}\",outcome=\"{}\"}} {value}",
                escape(adapter),
                escape(outcome)
            );
        }
        header(&mut out, "systole_breaker_trips_total", "counter", "Times a circuit breaker disabled a heartbeat.");
        let _ = writeln!(out, "systole_breaker_trips_total {}", counts.breaker_trips);
        let help = "Times an open breaker's cooldown ended and its heartbeat was enabled for one probe run.";
        header(&mut out, "systole_breaker_probes_total", "counter", help);
        let _ = writeln!(out, "systole_breaker_probes_total {}", counts.breaker_probes);
        let help = "Times a probe run succeeded and closed a breaker (a recovery).";
        header(&mut out, "systole_breaker_recoveries_total", "counter", help);
        let _ = writeln!(out, "systole_breaker_recoveries_total {}", counts.breaker_closes);
        header(&mut out, "systole_schedule_lag_seconds", "histogram", "A run's start minus its slot.");
        counts.schedule_lag.render(&mut out, "systole_schedule_lag_seconds");
        header(
            &mut out,
            "systole_tool_calls_total",
            "counter",
            "Calls of servers' tools, by server, tool and outcome.",
        );
        for ((server, tool, outcome), value) in &counts.tool_calls {
            let labels =
                format!("server=\"{}\",tool=\"{}\",outcome=\"{}\"", escape(server), escape(tool), escape(outcome));
            let _ = writeln!(out, "systole_tool_calls_total{{{labels}}} {value}");
        }
        header(
            &mut out,
            "systole_tool_call_duration_seconds",
            "histogram",
            "How long one call of a server's tool took.",
        );
        counts.tool_call_duration.render(&mut out, "systole_tool_call_duration_seconds");
        let help = "Run traces the OTLP exporter lost, by reason (queue-full, export-failed).";
        header(&mut out, "systole_traces_lost_total", "counter", help);
        for reason in ["queue-full", "export-failed"] {
            let value = counts.traces_lost.get(reason).copied().unwrap_or(0);
            let _ = writeln!(out, "systole_traces_lost_total{{reason=\"{reason}\"}} {value}");
        }
        header(&mut out, "systole_heartbeats", "gauge", "Heartbeats and cron jobs, by state.");
        for (state, value) in heartbeats {
            let _ = writeln!(out, "systole_heartbeats{{state=\"{state}\"}} {value}");
        }
        out
    }
}

/// The tool servers' part of the exposition, read from their catalog at scrape time:
/// restarts per server and whether each is ready.
pub fn render_tool_servers(catalog: &crate::ports::tools::Catalog) -> String {
    let mut out = String::new();
    header(
        &mut out,
        "systole_mcp_restarts_total",
        "counter",
        "Times a tool server was connected again after it went down.",
    );
    for (name, server) in catalog {
        let _ = writeln!(out, "systole_mcp_restarts_total{{server=\"{}\"}} {}", escape(name), server.restarts);
    }
    header(&mut out, "systole_mcp_server_ready", "gauge", "1 when a tool server is connected with its tools listed.");
    for (name, server) in catalog {
        let ready = u8::from(server.state == crate::ports::tools::ServerState::Ready);
        let _ = writeln!(out, "systole_mcp_server_ready{{server=\"{}\"}} {ready}", escape(name));
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_the_count() {
        let metrics = Metrics::default();
        for millis in [10, 300, 300, 400_000] {
            metrics.schedule_lag(Duration::from_millis(millis));
        }
        let text = metrics.render(&BTreeMap::new());
        assert!(text.contains("systole_schedule_lag_seconds_bucket{le=\"0.05\"} 1\n"), "{text}");
        assert!(text.contains("systole_schedule_lag_seconds_bucket{le=\"0.5\"} 3\n"), "{text}");
        assert!(text.contains("systole_schedule_lag_seconds_bucket{le=\"300\"} 3\n"), "{text}");
        assert!(text.contains("systole_schedule_lag_seconds_bucket{le=\"+Inf\"} 4\n"), "{text}");
        assert!(text.contains("systole_schedule_lag_seconds_count 4\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::default();
        metrics.delivery("web\"hook", "fail\\ed\nnow");
        let text = metrics.render(&BTreeMap::new());
        assert!(text.contains(r#"systole_deliveries_total{adapter="web\"hook",outcome="fail\\ed\nnow"} 1"#), "{text}");
    }
}
