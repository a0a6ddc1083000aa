//! What every case measures with: resident memory, CPU time, percentiles, and the one
//! line a case process prints for the table to read.

use std::collections::BTreeMap;
use std::time::Duration;

/// Resident memory now and at its peak, from `/proc/self/status`, in bytes.
pub fn resident_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Bytes the allocator has handed out and not taken back: the heap a case's structures
/// hold, without the freed pages resident memory still counts. jemalloc's
/// `stats.allocated` counts every thread's; glibc's `mallinfo2` (a build without the
/// `jemalloc` feature) the main arena only, where a start-up on the main thread builds
/// its maps.
pub fn heap_in_use_bytes() -> u64 {
    #[cfg(feature = "jemalloc")]
    {
        systole::adapters::heap_trim::jemalloc_counter(c"stats.allocated") as u64
    }
    #[cfg(not(feature = "jemalloc"))]
    {
        // SAFETY: `mallinfo2` only reads the allocator's counters; glibc 2.33 and later.
        let info = unsafe { libc::mallinfo2() };
        (info.uordblks + info.hblkhd) as u64
    }
}

/// CPU time this process has used (user + system), from `/proc/self/stat`.
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name may hold spaces; the fields after it are plain numbers.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_name.split_whitespace().map(|field| field.parse().unwrap_or(0)).collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 1000 / CLOCK_TICKS_PER_SEC)
}

/// `sysconf(_SC_CLK_TCK)` on Linux.
const CLOCK_TICKS_PER_SEC: u64 = 100;

/// The `p`-th percentile (0..=100) of `values`, nearest rank; 0 when empty.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// The lateness figures of a case: percentiles of `late` (milliseconds after each due time;
/// negative: early), how many of `expected` starts never came, and CPU seconds per start.
pub fn lateness_figures(mut late: Vec<f64>, expected: f64, cpu_secs: f64) -> Figures {
    let fired = late.len() as f64;
    Figures::from([
        ("p50_ms".to_owned(), percentile(&mut late, 50.0)),
        ("p99_ms".to_owned(), percentile(&mut late, 99.0)),
        ("max_ms".to_owned(), percentile(&mut late, 100.0)),
        ("early".to_owned(), late.iter().filter(|ms| **ms < 0.0).count() as f64),
        // How far before its time the earliest start came (0 when none did): a start a few
        // microseconds early is the wall clock slewed against the monotonic one timers use,
        // one by a second is a wrong slot.
        ("earliest_ms".to_owned(), late.iter().copied().fold(0.0, f64::min).abs()),
        ("lost".to_owned(), (expected - fired).max(0.0)),
        ("cpu_ms_per_run".to_owned(), cpu_secs * 1000.0 / fired.max(1.0)),
    ])
}

pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        len if !len.is_multiple_of(2) => sorted[len / 2],
        len => (sorted[len / 2 - 1] + sorted[len / 2]) / 2.0,
    }
}

/// What one case process found: named figures.
pub type Figures = BTreeMap<String, f64>;

/// The line a case process prints last, for the parent to read.
pub const RESULT_PREFIX: &str = "RESULT ";

pub fn print_result(figures: &Figures) {
    let json = serde_json::to_string(figures).unwrap_or_else(|_| "{}".to_owned());
    println!("{RESULT_PREFIX}{json}");
}

pub fn parse_result(stdout: &str) -> Option<Figures> {
    let line = stdout.lines().rev().find_map(|line| line.strip_prefix(RESULT_PREFIX))?;
    serde_json::from_str(line).ok()
}
