//! `spirit-bench durability`: what crash safety costs (issue 3), all modes in one run on the same documents.
//!
//! For volatile, graceful and crash-safe: ingest rate with one acknowledged add at a time (`Index::add`, so in
//! crash-safe mode one group commit per document) and with bulk batches (`Index::add_bulk`, one barrier per
//! batch); acknowledgement latency p50/p99 of each; merge time (the merger's time per merged segment, which in
//! crash-safe mode includes persisting and logging every link). Then recovery after a real crash: a child
//! process ingests in crash-safe mode and is killed with SIGKILL; the parent times `Index::open`, which
//! replays the logs.

use crate::input;
use serde::Serialize;
use spirit::{Durability, Index, ShardConfig};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args)]
pub struct DurabilityArgs {
    /// luceneutil line file (.gz allowed).
    #[arg(long)]
    docs: PathBuf,
    /// Only the first N documents.
    #[arg(long)]
    max_docs: Option<usize>,
    #[arg(long, default_value = "1GB")]
    dram_budget: String,
    /// Documents per bulk batch.
    #[arg(long, default_value_t = 256)]
    bulk: usize,
    /// Crash-safe: seal a fresh segment once its tLog tail reaches this size (bounds recovery).
    #[arg(long, default_value = "8MB")]
    replay_bytes: String,
    /// Skip the single-add runs (one acknowledged add at a time).
    #[arg(long)]
    bulk_only: bool,
    /// Only the recovery measurement (for `bench/run.sh`: spirit's recovery next to the baselines' reopen).
    #[arg(long)]
    recovery_only: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Hidden: the child of the recovery measurement.
#[derive(clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    docs: PathBuf,
    #[arg(long)]
    max_docs: usize,
    #[arg(long)]
    data: PathBuf,
    #[arg(long)]
    dram_budget: String,
    #[arg(long)]
    replay_bytes: String,
}

#[derive(Serialize, Default)]
struct ModeResult {
    single_docs_per_sec: f64,
    single_ack_p50_us: f64,
    single_ack_p99_us: f64,
    bulk_docs_per_sec: f64,
    bulk_ack_p50_us: f64,
    bulk_ack_p99_us: f64,
    merges: u64,
    merge_seconds_total: f64,
    segments_sealed: u64,
    /// Bulk run: tLog barriers and the seconds spent in them (callers' group commits and checkpoints).
    bulk_tlog_syncs: u64,
    bulk_tlog_sync_seconds: f64,
    barrier: String,
}

#[derive(Serialize)]
struct Report {
    docs: usize,
    bulk_batch: usize,
    modes: Vec<(String, ModeResult)>,
    recovery_docs: usize,
    recovery_ms: f64,
    recovery_open_ms: f64,
    recovery_replay_ms: f64,
    recovery_replayed_records: u64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    crate::percentile(v, p)
}

fn config(mode: Durability, dram: &str, replay: &str) -> ShardConfig {
    ShardConfig {
        dram_budget: spirit::parse_size(dram).expect("dram budget") as usize,
        durability: mode,
        replay_bytes: spirit::parse_size(replay).expect("replay bytes") as usize,
        ..Default::default()
    }
}

fn run_mode(dir: &Path, mode: Durability, docs: &[input::Doc], a: &DurabilityArgs) -> ModeResult {
    let mut r = ModeResult::default();
    for bulk in [false, true] {
        if !bulk && a.bulk_only {
            continue;
        }
        let d = dir.join(format!("{mode:?}-{bulk}"));
        let _ = std::fs::remove_dir_all(&d);
        let index = Index::open("bench", &d, config(mode, &a.dram_budget, &a.replay_bytes), None, None)
            .expect("open");
        let mut lat = Vec::with_capacity(docs.len());
        let t0 = Instant::now();
        if bulk {
            for (b, chunk) in docs.chunks(a.bulk).enumerate() {
                let t = Instant::now();
                let res = index
                    .add_bulk(chunk.iter().enumerate().map(|(i, doc)| doc.json(b * a.bulk + i)))
                    .expect("bulk");
                assert!(res.iter().all(|x| x.is_ok()));
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
        } else {
            for (i, doc) in docs.iter().enumerate() {
                let t = Instant::now();
                index.add(doc.json(i)).expect("add");
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        index.shard().commit_and_merge_all().expect("merge");
        let c = index.shard().counters();
        let merges = c.merges.load(std::sync::atomic::Ordering::Relaxed);
        let merge_ns = c.merge_nanos.load(std::sync::atomic::Ordering::Relaxed);
        let rate = docs.len() as f64 / secs;
        let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
        if bulk {
            (r.bulk_docs_per_sec, r.bulk_ack_p50_us, r.bulk_ack_p99_us) = (rate, p50, p99);
            // Merge figures from the bulk run (every mode has one).
            r.merges = merges;
            r.merge_seconds_total = merge_ns as f64 / 1e9;
            r.segments_sealed = c.flushes.load(std::sync::atomic::Ordering::Relaxed);
            let st = index.stats().shard;
            r.bulk_tlog_syncs = st.tlog_syncs;
            r.bulk_tlog_sync_seconds = st.tlog_sync_nanos as f64 / 1e9;
        } else {
            (r.single_docs_per_sec, r.single_ack_p50_us, r.single_ack_p99_us) = (rate, p50, p99);
        }
        r.barrier = index.stats().shard.persistent.barrier.to_string();
        eprintln!(
            "{mode:?} {}: {rate:.0} docs/s, ack p50 {p50:.1} us p99 {p99:.1} us, {merges} merges {:.1} ms each",
            if bulk { "bulk" } else { "single" },
            merge_ns as f64 / 1e6 / merges.max(1) as f64
        );
        index.close().expect("close");
        drop(index);
        let _ = std::fs::remove_dir_all(&d);
    }
    r
}

/// Ingests in crash-safe mode, says "ready" on stdout after `max_docs` acknowledged docs, then keeps
/// ingesting the rest (so the kill lands while the pipeline is busy) and finally waits to be killed.
pub fn child(a: ChildArgs) {
    let docs = input::load_docs(&a.docs, None).expect("docs");
    let index = Index::open(
        "bench",
        &a.data,
        config(Durability::CrashSafe, &a.dram_budget, &a.replay_bytes),
        None,
        None,
    )
    .expect("open");
    let mut out = std::io::stdout();
    for (b, chunk) in docs.chunks(256).enumerate() {
        let res = index.add_bulk(chunk.iter().enumerate().map(|(i, d)| d.json(b * 256 + i))).expect("bulk");
        assert!(res.iter().all(|x| x.is_ok()));
        if (b + 1) * 256 >= a.max_docs && (b * 256) < a.max_docs {
            writeln!(out, "ready {}", index.stats().shard.tlog_next_lsn).unwrap();
            out.flush().unwrap();
        }
    }
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3600));
}

fn recovery(dir: &Path, a: &DurabilityArgs, n: usize) -> (f64, spirit::index::RecoveryStats) {
    let d = dir.join("recovery");
    let _ = std::fs::remove_dir_all(&d);
    let exe = std::env::current_exe().expect("own path");
    let mut child = std::process::Command::new(exe)
        .args(["durability-child", "--docs"])
        .arg(&a.docs)
        .args([
            "--max-docs",
            &n.to_string(),
            "--dram-budget",
            &a.dram_budget,
            "--replay-bytes",
            &a.replay_bytes,
            "--data",
        ])
        .arg(&d)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("child output");
    child.kill().expect("kill -9");
    let _ = child.wait();
    let t = Instant::now();
    let index =
        Index::open("bench", &d, config(Durability::CrashSafe, &a.dram_budget, &a.replay_bytes), None, None)
            .expect("recover");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let stats = index.stats();
    let r = stats.recovery.expect("a crash recovery happened");
    eprintln!(
        "recovery after kill -9 at ~{n} docs: {ms:.1} ms ({} docs visible; open {:.1} ms, {} tLog records replayed in {:.1} ms)",
        stats.shard.docs,
        r.open_micros as f64 / 1e3,
        r.records,
        r.replay_micros as f64 / 1e3
    );
    drop(index);
    let _ = std::fs::remove_dir_all(&d);
    (ms, r)
}

pub fn run(a: DurabilityArgs) {
    let docs = input::load_docs(&a.docs, a.max_docs).expect("docs");
    let dir = std::env::temp_dir().join(format!("spirit-bench-durability-{}", std::process::id()));
    let mut modes = vec![];
    for mode in [Durability::Volatile, Durability::Graceful, Durability::CrashSafe] {
        if !a.recovery_only {
            modes.push((format!("{mode:?}"), run_mode(&dir, mode, &docs, &a)));
        }
    }
    let (recovery_ms, rs) = recovery(&dir, &a, docs.len() * 9 / 10);
    let _ = std::fs::remove_dir_all(&dir);
    let rep = Report {
        docs: docs.len(),
        bulk_batch: a.bulk,
        modes,
        recovery_docs: docs.len() * 9 / 10,
        recovery_ms,
        recovery_open_ms: rs.open_micros as f64 / 1e3,
        recovery_replay_ms: rs.replay_micros as f64 / 1e3,
        recovery_replayed_records: rs.records,
    };
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_vec_pretty(&rep).unwrap()).expect("write json");
    }
    let recovered = format!(
        "Recovery after `kill -9` during a crash-safe ingest, at about {} docs: {:.1} ms to reopen (open {:.1} ms; \
         {} tLog records scanned, the un-engraved tail re-indexed in {:.1} ms).",
        rep.recovery_docs, rep.recovery_ms, rep.recovery_open_ms, rep.recovery_replayed_records, rep.recovery_replay_ms
    );
    if a.recovery_only {
        println!("{recovered}");
        return;
    }
    let v = |m: &str| rep.modes.iter().find(|(n, _)| n == m).map(|(_, r)| r).unwrap();
    let (vol, gr, cs) = (v("Volatile"), v("Graceful"), v("CrashSafe"));
    println!("## Durability: cost of crash safety ({} docs, bulk batches of {})\n", rep.docs, rep.bulk_batch);
    println!("| mode | single-add docs/s | ack p50 / p99 (µs) | bulk docs/s | batch ack p50 / p99 (µs) | segments | merge time total (s) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (n, r) in &rep.modes {
        println!(
            "| {n} | {:.0} | {:.1} / {:.1} | {:.0} | {:.0} / {:.0} | {} | {:.2} |",
            r.single_docs_per_sec,
            r.single_ack_p50_us,
            r.single_ack_p99_us,
            r.bulk_docs_per_sec,
            r.bulk_ack_p50_us,
            r.bulk_ack_p99_us,
            r.segments_sealed,
            r.merge_seconds_total
        );
    }
    println!(
        "\nCrash-safe / volatile ingest: single adds {:.2}x, bulk {:.2}x (goal: at least 0.80x); graceful / volatile \
         bulk {:.2}x; crash-safe total merge time {:.1}x volatile's (SPIRIT: 17x). Persist barrier: {}.",
        cs.single_docs_per_sec / vol.single_docs_per_sec,
        cs.bulk_docs_per_sec / vol.bulk_docs_per_sec,
        gr.bulk_docs_per_sec / vol.bulk_docs_per_sec,
        cs.merge_seconds_total / vol.merge_seconds_total.max(1e-9),
        cs.barrier
    );
    println!(
        "\nCrash-safe bulk run: {} tLog barriers, {:.2} s in them (the run took {:.2} s).",
        cs.bulk_tlog_syncs,
        cs.bulk_tlog_sync_seconds,
        rep.docs as f64 / cs.bulk_docs_per_sec.max(1e-9)
    );
    println!("\n{recovered}");
}
