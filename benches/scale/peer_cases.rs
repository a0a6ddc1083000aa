//! The same workloads on tokio-cron-scheduler, the crate a Rust user would otherwise pick:
//! jobs held in its in-memory store, fired by its own tick loop.
//!
//! Its cron has a seconds field but no sub-second offsets, so a spread of `spread` seconds
//! puts `jobs / spread` jobs on each whole second (systole's jitter spreads them by the
//! millisecond); its lateness is measured against each job's whole-second due time.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_cron_scheduler::{Job, JobScheduler};

use crate::measure::{cpu_time, lateness_figures, resident_bytes, Figures};

/// Registration: `count` jobs, one a minute each, added to a scheduler that then starts.
pub async fn register(count: usize) -> Figures {
    let (resident_before, _) = resident_bytes();
    let adding = Instant::now();
    let scheduler = JobScheduler::new().await.expect("the scheduler is created");
    for index in 0..count {
        let schedule = format!("{} * * * * *", index % 60);
        let job = Job::new_async(schedule.as_str(), |_, _| Box::pin(async {})).expect("a valid schedule");
        scheduler.add(job).await.expect("the job is added");
    }
    scheduler.start().await.expect("the scheduler starts");
    let total_secs = adding.elapsed().as_secs_f64();
    let (resident, peak) = resident_bytes();
    Figures::from([
        ("total_secs".to_owned(), total_secs),
        ("resident_mb".to_owned(), resident as f64 / 1e6),
        ("peak_mb".to_owned(), peak as f64 / 1e6),
        ("bytes_each".to_owned(), resident.saturating_sub(resident_before) as f64 / count as f64),
    ])
}

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis() as i64)
}

/// Lateness: `count` jobs every `spread_secs` seconds, job `i` at second `i % spread_secs`
/// of each period; the fires whose due times fall in `windows` whole periods.
pub async fn lateness(count: usize, spread_secs: u64, windows: u32) -> Figures {
    let fires: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    let scheduler = JobScheduler::new().await.expect("the scheduler is created");
    for index in 0..count {
        let offset = index as u64 % spread_secs;
        let schedule = format!("{offset}/{spread_secs} * * * * *");
        let fires = Arc::clone(&fires);
        let job = Job::new_async(schedule.as_str(), move |_, _| {
            fires.lock().expect("not poisoned").push((index, unix_ms()));
            Box::pin(async {})
        })
        .expect("a valid schedule");
        scheduler.add(job).await.expect("the job is added");
    }
    scheduler.start().await.expect("the scheduler starts");
    // Measure whole periods that begin after the scheduler is up.
    let period_ms = (spread_secs * 1000) as i64;
    let first = (unix_ms() / period_ms + 1) * period_ms;
    let last = first + period_ms * i64::from(windows);
    let cpu_before = cpu_time();
    let wait_ms = (last - unix_ms()).max(0) as u64 + 2_000;
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64();
    let fires = fires.lock().expect("not poisoned").clone();
    // Each fire belongs to the due time of its job nearest to it (it may come early).
    let mut late = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, at) in fires {
        let offset_ms = (index as i64 % spread_secs as i64) * 1000;
        let due = ((at - offset_ms) as f64 / period_ms as f64).round() as i64 * period_ms + offset_ms;
        if (first..last).contains(&due) && seen.insert((index, due)) {
            late.push((at - due) as f64);
        }
    }
    lateness_figures(late, count as f64 * f64::from(windows), cpu)
}
