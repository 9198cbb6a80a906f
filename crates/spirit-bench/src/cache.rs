//! `spirit-bench cache`: what the result cache (SPIRIT §4.11) buys.
//!
//! Static: the whole corpus indexed and sealed; for every query of each category, the median over `rounds`
//! of an uncached run (`cache: false`), one miss (cache cleared first: full evaluation plus building the
//! entry), and the median of `rounds` hits. Live: the first 80% indexed, then the rest ingested by a second
//! thread while the query thread cycles through every query, an untimed run, then a cached and an uncached
//! run of each (which goes first alternates from pass to pass); a run counts as a hit when the cache's hit
//! counter moved.
//! Queries are top-10 BM25, ids only, no exact count (what `run` times), one query thread.

use crate::input::{self, Category};
use crate::percentile;
use serde::Serialize;
use spirit::{Engine, EngineConfig, Index, SearchOptions, Sort};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args)]
pub struct CacheArgs {
    #[command(flatten)]
    w: input::Workload,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "LowTerm,MedTerm,HighTerm,AndLowLow,AndMedMed,AndHighHigh,AndHighMed,OrHighHigh,OrHighMed,HighPhrase,MedPhrase,LowPhrase"
    )]
    categories: Vec<String>,
    /// Runs per query for the uncached and hit medians.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize, Default)]
struct StaticRow {
    queries: usize,
    uncached_median_us: f64,
    miss_median_us: f64,
    hit_median_us: f64,
    /// uncached median / hit median.
    hit_speedup: f64,
}

#[derive(Serialize, Default)]
struct LiveRow {
    runs: usize,
    hits: usize,
    uncached_median_us: f64,
    uncached_p99_us: f64,
    cached_median_us: f64,
    cached_p99_us: f64,
    hit_median_us: f64,
    hit_speedup: f64,
}

#[derive(Serialize)]
struct CacheReport {
    docs: usize,
    static_: BTreeMap<String, StaticRow>,
    live_docs_ingested: usize,
    live_seconds: f64,
    live: BTreeMap<String, LiveRow>,
    live_hit_rate: f64,
    cache_stats: spirit::query::CacheStats,
}

fn opts(cache: bool) -> SearchOptions {
    SearchOptions {
        limit: 10,
        sort: Sort::Score,
        fetch: false,
        track_total: false,
        cache,
        ..Default::default()
    }
}

fn time(index: &Index, q: &str, cache: bool) -> f64 {
    let t = Instant::now();
    std::hint::black_box(index.search(q, &opts(cache)).expect("query"));
    t.elapsed().as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

fn static_runs(index: &Index, tasks: &[Category], rounds: usize) -> BTreeMap<String, StaticRow> {
    let cache = index.shard().result_cache();
    let mut out = BTreeMap::new();
    for c in tasks {
        let (mut un, mut miss, mut hit) = (vec![], vec![], vec![]);
        for q in &c.queries {
            // Warm the code and the pages first.
            time(index, q, false);
            un.push(median((0..rounds).map(|_| time(index, q, false)).collect()));
            cache.clear();
            miss.push(time(index, q, true));
            hit.push(median((0..rounds).map(|_| time(index, q, true)).collect()));
        }
        let (u, h) = (median(un), median(hit));
        out.insert(
            c.name.clone(),
            StaticRow {
                queries: c.queries.len(),
                uncached_median_us: u,
                miss_median_us: median(miss),
                hit_median_us: h,
                hit_speedup: u / h,
            },
        );
    }
    out
}

pub fn run(a: CacheArgs) {
    let lines = input::load_docs(&a.w.docs, a.w.max_docs).expect("docs");
    let tasks = input::load_tasks(&a.w.tasks, Some(&a.categories), a.w.queries_per_category).expect("tasks");
    let dir = std::env::temp_dir().join(format!("spirit-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = EngineConfig { shard: a.w.shard_config(), default_shards: None };

    // Static.
    let engine = Engine::open(dir.join("static"), cfg.clone()).expect("open");
    let index = engine.create_index("bench", None, None).expect("create");
    eprintln!("static: indexing {} docs...", lines.len());
    for (i, d) in lines.iter().enumerate() {
        index.add(d.json(i)).expect("add");
    }
    index.seal().expect("seal");
    index.wait_idle().expect("pipeline");
    index.set_default_fields(Some(vec!["body".into()])).expect("body field");
    let static_ = static_runs(&index, &tasks, a.rounds);
    drop(index);
    engine.close().expect("close");
    drop(engine);

    // Live: the last 20% arrives while queries run.
    let engine = Engine::open(dir.join("live"), cfg).expect("open");
    let index = engine.create_index("bench", None, None).expect("create");
    let split = lines.len() * 4 / 5;
    eprintln!("live: indexing {split} docs, then {} more during queries...", lines.len() - split);
    for (i, d) in lines[..split].iter().enumerate() {
        index.add(d.json(i)).expect("add");
    }
    index.wait_idle().expect("pipeline");
    index.set_default_fields(Some(vec!["body".into()])).expect("body field");
    let index = Arc::new(index);
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let live = std::thread::scope(|s| {
        let (ix, dn) = (index.clone(), done.clone());
        let rest = &lines[split..];
        s.spawn(move || {
            for (i, d) in rest.iter().enumerate() {
                ix.add(d.json(split + i)).expect("add");
            }
            dn.store(true, Ordering::Release);
        });
        let cache = index.shard().result_cache();
        // Per category: uncached, cached, and the cached runs that were hits (µs).
        type Runs = (Vec<f64>, Vec<f64>, Vec<f64>);
        let mut per: BTreeMap<String, Runs> = BTreeMap::new();
        // An untimed run first (the first run of a query pays for its postings coming into the CPU caches),
        // then the two timed ones, which alternate which goes first from pass to pass.
        let mut pass = 0usize;
        'outer: loop {
            for c in &tasks {
                for q in &c.queries {
                    if done.load(Ordering::Acquire) {
                        break 'outer;
                    }
                    let e = per.entry(c.name.clone()).or_default();
                    time(&index, q, false);
                    if pass % 2 == 1 {
                        e.0.push(time(&index, q, false));
                    }
                    let h0 = cache.stats().hits;
                    let t = time(&index, q, true);
                    e.1.push(t);
                    if cache.stats().hits > h0 {
                        e.2.push(t);
                    }
                    if pass.is_multiple_of(2) {
                        e.0.push(time(&index, q, false));
                    }
                }
            }
            pass += 1;
        }
        per
    });
    let live_seconds = t0.elapsed().as_secs_f64();
    let mut live_rows = BTreeMap::new();
    let (mut runs, mut hits) = (0, 0);
    for (name, (mut un, mut ca, hit)) in live {
        un.sort_by(f64::total_cmp);
        ca.sort_by(f64::total_cmp);
        runs += ca.len();
        hits += hit.len();
        let u = percentile(&un, 0.5);
        let h = if hit.is_empty() { f64::NAN } else { median(hit.clone()) };
        live_rows.insert(
            name,
            LiveRow {
                runs: ca.len(),
                hits: hit.len(),
                uncached_median_us: u,
                uncached_p99_us: percentile(&un, 0.99),
                cached_median_us: percentile(&ca, 0.5),
                cached_p99_us: percentile(&ca, 0.99),
                hit_median_us: h,
                hit_speedup: u / h,
            },
        );
    }
    let report = CacheReport {
        docs: lines.len(),
        static_,
        live_docs_ingested: lines.len() - split,
        live_seconds,
        live: live_rows,
        live_hit_rate: hits as f64 / runs.max(1) as f64,
        cache_stats: index.shard().result_cache().stats(),
    };
    drop(index);
    engine.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
    print(&report);
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).unwrap()).expect("write json");
    }
}

fn print(r: &CacheReport) {
    println!("Static index, {} docs: top-10 BM25, one query thread, medians per category\n", r.docs);
    println!(
        "| workload | queries | uncached µs | miss µs | hit µs | hit speedup |\n|---|---|---|---|---|---|"
    );
    for (c, x) in &r.static_ {
        println!(
            "| {c} | {} | {:.0} | {:.0} | {:.1} | {:.1}x |",
            x.queries, x.uncached_median_us, x.miss_median_us, x.hit_median_us, x.hit_speedup
        );
    }
    println!(
        "\nLive: {} docs ingested by a second thread in {:.1} s while queries ran; hit rate {:.0}%\n",
        r.live_docs_ingested,
        r.live_seconds,
        r.live_hit_rate * 100.0
    );
    println!(
        "| workload | runs | hits | uncached p50 / p99 µs | cached p50 / p99 µs | hit p50 µs | hit speedup |\n|---|---|---|---|---|---|---|"
    );
    for (c, x) in &r.live {
        println!(
            "| {c} | {} | {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} | {:.1}x |",
            x.runs,
            x.hits,
            x.uncached_median_us,
            x.uncached_p99_us,
            x.cached_median_us,
            x.cached_p99_us,
            x.hit_median_us,
            x.hit_speedup
        );
    }
    let s = &r.cache_stats;
    println!(
        "\ncache: {} entries, {:.1} of {:.1} MB, hits {}, misses {}, stale {}, evictions {}",
        s.entries,
        s.used_bytes as f64 / 1e6,
        s.capacity_bytes as f64 / 1e6,
        s.hits,
        s.misses,
        s.stale,
        s.evictions
    );
}
