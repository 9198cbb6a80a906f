//! `spirit-bench stalls`: how often the machine itself stops a thread for 100 µs or more, measured beside
//! the engines so a report can tell a tail latency the engine caused from one the machine did.
//!
//! Why it exists: on this project's VM the cheap workloads' p99 in windowed real-time runs moved from ~30 to
//! ~200 µs between two runs of the same binary an hour apart, for spirit and Lucene alike. Traced with
//! `perf record -a` on every interrupt, softirq, IPI, TLB-flush, page-fault and scheduler tracepoint, most
//! slow queries had *no* guest event inside them: the time is taken below the guest (the hypervisor). Two
//! loops measure it:
//!
//! - **clock**: reading the clock in a tight loop; a gap between two reads is time the thread did not run.
//! - **reads**: batches of 64 independent random byte reads over a buffer from the allocator (4 KiB pages
//!   where transparent huge pages are `madvise`-only, as on this VM), bigger
//!   than the caches and the TLB's reach, like a query's postings and dictionaries; a batch normally takes a
//!   couple of µs. Such batches stall far more often than the clock loop does (about 1,000 per second over
//!   200 MiB, against 10–46 for the clock loop, on the day this was written; ten times fewer with the buffer
//!   on transparent huge pages): the stalls come with memory accesses, so every engine's queries meet them.
//!
//! Neither loop allocates or makes system calls while it runs; the numbers are rates per second of loop time.

use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct StallsArgs {
    /// Seconds each loop runs.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Size of the random-read buffer in MiB.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// A label stored with the result (e.g. "before the real-time rounds").
    #[arg(long, default_value = "")]
    label: String,
    /// Write the result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// A stall: an interval (between two clock reads, or one batch of reads) of at least this many µs.
pub const STALL_US: f64 = 100.0;

/// What one loop saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub intervals: u64,
    pub stalls: u64,
    pub stalled_us: f64,
    pub max_us: f64,
}

impl Summary {
    fn new() -> Summary {
        Summary { intervals: 0, stalls: 0, stalled_us: 0.0, max_us: 0.0 }
    }

    /// Counts one interval of `us` µs.
    pub fn add(&mut self, us: f64) {
        self.intervals += 1;
        if us >= STALL_US {
            self.stalls += 1;
            self.stalled_us += us;
        }
        self.max_us = self.max_us.max(us);
    }

    fn per_second(&self, seconds: f64) -> f64 {
        self.stalls as f64 / seconds
    }

    /// The share of `seconds` spent in stalls.
    fn stalled_fraction(&self, seconds: f64) -> f64 {
        self.stalled_us * 1e-6 / seconds
    }

    fn json(&self, seconds: f64) -> serde_json::Value {
        json!({"intervals": self.intervals, "stalls": self.stalls,
               "stalls_per_second": self.per_second(seconds),
               "stalled_fraction": self.stalled_fraction(seconds), "max_us": self.max_us})
    }
}

/// Gaps between consecutive clock reads over `seconds`.
fn clock_loop(seconds: f64) -> Summary {
    let mut s = Summary::new();
    let t0 = Instant::now();
    let mut prev = t0;
    loop {
        let t = Instant::now();
        s.add((t - prev).as_secs_f64() * 1e6);
        prev = t;
        if (t - t0).as_secs_f64() >= seconds {
            return s;
        }
    }
}

/// Batches of 64 random reads over `buf` for `seconds`, and the median of the first 65,536 batches in µs.
fn read_loop(buf: &[u8], seconds: f64) -> (Summary, f64) {
    assert!(!buf.is_empty());
    let mut s = Summary::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut sum = 0u64;
    let mut sample = Vec::with_capacity(1 << 16);
    let t0 = Instant::now();
    loop {
        let a = Instant::now();
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sum = sum.wrapping_add(buf[(x % buf.len() as u64) as usize] as u64);
        }
        let b = Instant::now();
        let us = (b - a).as_secs_f64() * 1e6;
        s.add(us);
        if sample.len() < sample.capacity() {
            sample.push(us);
        }
        if (b - t0).as_secs_f64() >= seconds {
            std::hint::black_box(sum);
            sample.sort_by(f64::total_cmp);
            return (s, crate::percentile(&sample, 0.5));
        }
    }
}

pub fn run(a: &StallsArgs) -> Result<(), Box<dyn std::error::Error>> {
    if !a.seconds.is_finite() || a.seconds <= 0.0 || a.mib == 0 {
        return Err("--seconds and --mib must be positive".into());
    }
    // Every page written once, so the loop measures reads of resident memory, not first touches.
    let buf = vec![1u8; a.mib << 20];
    let clock = clock_loop(a.seconds);
    let (reads, median) = read_loop(&buf, a.seconds);
    eprintln!(
        "stalls >= {STALL_US} µs{}: clock loop {:.1}/s (max {:.0} µs); random reads over {} MiB {:.1}/s, {:.2}% of the time (batch median {median:.2} µs, max {:.0} µs)",
        if a.label.is_empty() { String::new() } else { format!(" ({})", a.label) },
        clock.per_second(a.seconds),
        clock.max_us,
        a.mib,
        reads.per_second(a.seconds),
        100.0 * reads.stalled_fraction(a.seconds),
        reads.max_us,
    );
    if let Some(p) = &a.json {
        let v = json!({"stall_meter": {
            "label": a.label, "seconds": a.seconds, "stall_us": STALL_US, "buffer_mib": a.mib,
            "clock": clock.json(a.seconds), "reads": reads.json(a.seconds), "read_batch_median_us": median}});
        std::fs::write(p, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_only_intervals_at_or_over_the_threshold() {
        let mut s = Summary::new();
        for us in [1.0, 99.9, 100.0, 250.0, 3.0] {
            s.add(us);
        }
        assert_eq!(s, Summary { intervals: 5, stalls: 2, stalled_us: 350.0, max_us: 250.0 });
        let j = s.json(0.5);
        assert_eq!(j["stalls_per_second"], 4.0);
        assert!((j["stalled_fraction"].as_f64().unwrap() - 350e-6 / 0.5).abs() < 1e-12);
    }

    #[test]
    fn loops_run_for_their_time_and_see_every_interval() {
        let c = clock_loop(0.02);
        assert!(c.intervals > 1000, "a clock read takes well under 20 µs: {c:?}");
        let buf = vec![1u8; 1 << 20];
        let (r, median) = read_loop(&buf, 0.02);
        assert!(r.intervals > 10 && median > 0.0 && r.max_us >= median, "{r:?} {median}");
        assert!(r.stalls <= r.intervals);
    }
}
