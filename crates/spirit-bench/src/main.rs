//! `spirit-bench`: measured runs of spirit on real data (never timed assertions — numbers for reports).
//!
//! `nc` (non-concurrent, SPIRIT §5): build the index from a luceneutil line file with one thread, then time
//! the query workloads of a luceneutil task file (L = LowTerm, M = MedTerm, H = HighTerm, LL = AndLowLow,
//! MM = AndMedMed, HH = AndHighHigh, and any other category asked for), close gracefully and time the
//! reopen. Prints a markdown report and optionally writes JSON.

mod bulk;
mod cache;
mod codecs;
mod durability;
mod http_load;
mod input;
mod qloop;
mod report;
mod run;
mod stages;
mod stalls;

use clap::Parser;
use serde::Serialize;
use spirit::{Durability, Engine, SearchOptions, Sort};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "spirit-bench", about = "Benchmarks for spirit")]
enum Cli {
    /// Non-concurrent run: index, then time queries, then close and reopen.
    Nc(NcArgs),
    /// One run under the baselines' contract (static or windowed real time), JSON out.
    Run(run::RunArgs),
    /// Combine the JSON results of a comparison into a markdown report with SVG plots.
    Report(report::ReportArgs),
    /// Cost of crash safety: ingest and acknowledgement latency per durability mode, merge time, recovery.
    Durability(durability::DurabilityArgs),
    #[command(hide = true)]
    DurabilityChild(durability::ChildArgs),
    /// The result cache: latency of hits against misses and uncached runs per workload, on a static index
    /// and while the last 20% of the corpus is ingested.
    Cache(cache::CacheArgs),
    /// Load through the HTTP API on loopback: concurrent bulk writers and searchers, no error and no
    /// acknowledged document lost, latency percentiles.
    HttpLoad(http_load::HttpLoadArgs),
    /// The codec study (seed 004): bytes per posting, decoding speed and query workloads on decoded lists
    /// for raw, VByte, Stream VByte, SIMD bit-packing and PFor, from a DRAM and a persistent copy.
    Codecs(codecs::CodecArgs),
    /// Each category's queries in a loop on the index a static run left in `--index-dir` (the spirit half
    /// of `bench/run.sh interleave`).
    Loop(qloop::LoopArgs),
    /// Bulk indexing (issue 7): the bulk loader per thread and shard count, end to end, against the
    /// baselines' `--mode bulk` results; the tokenizer alone against plain splits.
    Bulk(bulk::BulkArgs),
    /// Indexing's per-document stages alone on one thread, in CPU seconds: analysis, fresh insertion, flush.
    Stages(stages::StagesArgs),
    /// The machine's own stalls (100 µs or more) while a thread reads the clock or random memory: what a
    /// report's tail latencies owe to the machine rather than to an engine.
    Stalls(stalls::StallsArgs),
}

#[derive(clap::Args)]
struct NcArgs {
    #[command(flatten)]
    w: input::Workload,
    /// Categories to time.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "LowTerm,MedTerm,HighTerm,AndLowLow,AndMedMed,AndHighHigh"
    )]
    categories: Vec<String>,
    /// Timed rounds over the query set (after one warm-up round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Result order: `score` (BM25) or `newest` (newest first, stopping once k hits are certain).
    #[arg(long, default_value = "score")]
    sort: String,
    /// Data directory (default: a temporary one, removed afterwards).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct CategoryResult {
    queries: usize,
    runs: usize,
    median_us: f64,
    p99_us: f64,
    mean_hits: f64,
}

#[derive(Serialize)]
struct NcReport {
    docs: usize,
    raw_bytes: u64,
    ingest_seconds: f64,
    ingest_docs_per_sec: f64,
    close_seconds: f64,
    reopen_ms: f64,
    image_bytes_dram: u64,
    image_bytes_persistent: u64,
    persistent_heap_bytes: u64,
    dram_high_water: usize,
    dram_budget: usize,
    segments: usize,
    categories: BTreeMap<String, CategoryResult>,
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn nc(a: NcArgs) {
    let lines = input::load_docs(&a.w.docs, a.w.max_docs).expect("docs");
    let raw_bytes: u64 = lines.iter().map(|d| d.bytes() as u64).sum();
    let tmp = std::env::temp_dir().join(format!("spirit-bench-{}", std::process::id()));
    let dir = a.data.clone().unwrap_or(tmp.clone());
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = a.w.engine_config();
    let engine = Engine::open(&dir, cfg.clone()).expect("open");
    let index = engine.create_index("bench", None, None).expect("create");
    eprintln!("indexing {} docs ({:.1} MB)...", lines.len(), raw_bytes as f64 / 1e6);
    let t0 = Instant::now();
    for (i, d) in lines.iter().enumerate() {
        index.add(d.json(i)).expect("add");
    }
    let ingest = t0.elapsed().as_secs_f64();
    // Queries are timed on a quiet index: let the flusher and engraver finish what ingest started.
    index.wait_idle().expect("pipeline");
    index.set_default_fields(Some(vec!["body".into()])).expect("body field");
    let st = index.stats();
    eprintln!("ingest {:.1} s ({:.0} docs/s)", ingest, lines.len() as f64 / ingest);

    let tasks = input::load_tasks(&a.w.tasks, Some(&a.categories), a.w.queries_per_category).expect("tasks");
    let mut categories = BTreeMap::new();
    for input::Category { name: cat, queries: qs } in &tasks {
        // Like luceneutil: top-10 doc ids and scores, no stored-field loading; no result cache (the rounds
        // repeat every query; `spirit-bench cache` measures the cache).
        let sort = match a.sort.as_str() {
            "score" => Sort::Score,
            "newest" => Sort::Newest,
            other => panic!("--sort must be score or newest, not {other}"),
        };
        let opts = SearchOptions {
            limit: 10,
            sort,
            fetch: false,
            track_total: false,
            cache: false,
            ..Default::default()
        };
        let mut hits = 0u64;
        for q in qs {
            hits += index.count(q).expect("query");
        }
        let mut lat = vec![];
        for _ in 0..a.rounds {
            for q in qs {
                let t = Instant::now();
                let r = index.search(q, &opts).expect("query");
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                std::hint::black_box(r);
            }
        }
        lat.sort_by(|x, y| x.total_cmp(y));
        categories.insert(
            cat.clone(),
            CategoryResult {
                queries: qs.len(),
                runs: lat.len(),
                median_us: percentile(&lat, 0.5),
                p99_us: percentile(&lat, 0.99),
                mean_hits: hits as f64 / qs.len() as f64,
            },
        );
    }
    drop(index);
    let t1 = Instant::now();
    engine.close().expect("close");
    drop(engine);
    let close = t1.elapsed().as_secs_f64();
    let mut reopen_ms = f64::NAN;
    let mut pers = 0;
    if a.w.durability != Durability::Volatile {
        let t2 = Instant::now();
        let engine = Engine::open(&dir, cfg).expect("reopen");
        reopen_ms = t2.elapsed().as_secs_f64() * 1e3;
        pers = engine.index("bench").expect("index").stats().shard.persistent.used;
        engine.close().expect("close");
    }
    let report = NcReport {
        docs: lines.len(),
        raw_bytes,
        ingest_seconds: ingest,
        ingest_docs_per_sec: lines.len() as f64 / ingest,
        close_seconds: close,
        reopen_ms,
        image_bytes_dram: st.shard.image_bytes_dram,
        image_bytes_persistent: st.shard.image_bytes_persistent,
        persistent_heap_bytes: pers,
        dram_high_water: st.shard.dram.high_water,
        dram_budget: st.shard.dram.budget,
        segments: st.shard.segments.values().sum(),
        categories,
    };
    print_report(&report);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).unwrap()).expect("write json");
    }
    if a.data.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

fn print_report(r: &NcReport) {
    println!("| metric | value |\n|---|---|");
    println!("| documents | {} ({} raw) |", r.docs, mb(r.raw_bytes));
    println!("| single-thread ingest | {:.0} docs/s ({:.1} s) |", r.ingest_docs_per_sec, r.ingest_seconds);
    println!(
        "| segment images after ingest: DRAM copies / persistent copies | {} / {} |",
        mb(r.image_bytes_dram),
        mb(r.image_bytes_persistent)
    );
    println!(
        "| persistent heap after close (images + merged dictionary) | {} ({:.2}x raw) |",
        mb(r.persistent_heap_bytes),
        r.persistent_heap_bytes as f64 / r.raw_bytes as f64
    );
    println!(
        "| DRAM heap high-water mark / budget | {} / {} |",
        mb(r.dram_high_water as u64),
        mb(r.dram_budget as u64)
    );
    println!("| segments | {} |", r.segments);
    println!("| graceful close / reopen | {:.2} s / {:.1} ms |", r.close_seconds, r.reopen_ms);
    println!();
    println!("| workload | queries × runs | median µs | p99 µs | mean hits |\n|---|---|---|---|---|");
    for (c, x) in &r.categories {
        println!(
            "| {c} | {} × {} | {:.0} | {:.0} | {:.0} |",
            x.queries,
            x.runs / x.queries.max(1),
            x.median_us,
            x.p99_us,
            x.mean_hits
        );
    }
}

fn main() {
    match Cli::parse() {
        Cli::Nc(a) => nc(a),
        Cli::Run(a) => run::run(a),
        Cli::Report(a) => report::report(a),
        Cli::Durability(a) => durability::run(a),
        Cli::DurabilityChild(a) => durability::child(a),
        Cli::HttpLoad(a) => http_load::run(a),
        Cli::Cache(a) => cache::run(a),
        Cli::Codecs(a) => codecs::run(a),
        Cli::Loop(a) => qloop::run(a),
        Cli::Bulk(a) => {
            if let Err(e) = bulk::run(a) {
                eprintln!("spirit-bench bulk: {e}");
                std::process::exit(1);
            }
        }
        Cli::Stages(a) => {
            if let Err(e) = stages::run(&a) {
                eprintln!("spirit-bench stages: {e}");
                std::process::exit(1);
            }
        }
        Cli::Stalls(a) => {
            if let Err(e) = stalls::run(&a) {
                eprintln!("spirit-bench stalls: {e}");
                std::process::exit(1);
            }
        }
    }
}
