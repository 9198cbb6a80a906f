//! `spirit-bench run`: spirit under the baselines' contract (`bench/baselines/README.md`), so the report can
//! put it next to Lucene and Tantivy: same documents, same queries, same JSON.
//!
//! * `--mode static`: index everything with one thread, seal and let the pipeline finish (flush + engrave:
//!   spirit's equivalent of a commit), warm up, time every query once (categories round-robin), then, untimed, hit
//!   counts and the top-k ids and scores.
//! * `--mode nrt` (windowed real time): index the first `--wrt-fraction`, warm up, then one thread adds the
//!   rest one by one while the main thread times queries round-robin until the ingest is done. spirit has no
//!   reopen: every query sees every acknowledged document. Every 32nd query is followed by an untimed check
//!   that a match-all count covers every document acknowledged before the query started (fewer is a
//!   violation; more than were acknowledged when it returned is fine: an `add` in flight has inserted its
//!   document before returning, and is counted apart).
//! * Ingest-to-visible latency (nrt): every background document carries a unique token in a `probe` field;
//!   for every 16th one the ingest thread, right after `add` returns, searches that token: the latency is from
//!   `add` returning to the search returning the document (a miss would be a violation of real time). Probing
//!   from the query thread instead would add the ingest thread's own stalls (the newest acknowledged document
//!   can be old) to a latency that is about visibility.
//! * Open time (static): after the queries, close the engine and time `Engine::open` on the same directory (the
//!   graceful restart; crash recovery is `spirit-bench durability --recovery-only`).

use crate::input::{load_docs, load_tasks, peak_rss, Category};
use serde_json::{json, Map, Value};
use spirit::gdt::SegState;
use spirit::{Engine, Index, SearchOptions, Sort};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    w: crate::input::Workload,
    /// Categories to run, in this order (default: all, in file order).
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    #[arg(long, value_parser = ["static", "nrt"])]
    mode: String,
    /// Accepted for the common contract; spirit never reopens (recorded as 0).
    #[arg(long, default_value_t = 0)]
    reopen_every: usize,
    #[arg(long, default_value_t = 0.8)]
    wrt_fraction: f64,
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Data directory (default: a temporary one, removed at the end).
    #[arg(long)]
    index_dir: Option<PathBuf>,
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    warmup_passes: usize,
    #[arg(long, default_value_t = 10.0)]
    warmup_seconds: f64,
    /// nrt: pace the ingest thread at this many docs/s (0 = unthrottled).
    #[arg(long, default_value_t = 0.0)]
    ingest_rate: f64,
}

pub(crate) fn opts(k: usize) -> SearchOptions {
    // Like the baselines: top-k by score, ids only (no stored-field loading), no exact total (Lucene's
    // TopScoreDocCollector and Tantivy's TopDocs do not count every match either; counts are taken untimed).
    // The result cache is off: the baselines run without one (SPIRIT's comparison turns Lucene's query cache
    // off too), and repeated rounds would otherwise time cache hits; `spirit-bench cache` measures it.
    SearchOptions {
        limit: k,
        sort: Sort::Score,
        fetch: false,
        track_total: false,
        cache: false,
        ..Default::default()
    }
}

fn warm_up(index: &Index, cats: &[Category], passes: usize, seconds: f64, k: usize) -> (usize, f64) {
    let t = Instant::now();
    let mut n = 0;
    while n < passes || t.elapsed().as_secs_f64() < seconds {
        for c in cats {
            for q in &c.queries {
                std::hint::black_box(index.search(q, &opts(k)).expect("query"));
            }
        }
        n += 1;
    }
    (n, t.elapsed().as_secs_f64())
}

/// Round-robin order: (category, query) pairs, categories interleaved.
fn round_robin(cats: &[Category]) -> Vec<(usize, usize)> {
    let longest = cats.iter().map(|c| c.queries.len()).max().unwrap_or(0);
    (0..longest)
        .flat_map(|j| {
            cats.iter().enumerate().filter(move |(_, c)| j < c.queries.len()).map(move |(i, _)| (i, j))
        })
        .collect()
}

pub fn run(a: RunArgs) {
    let docs = load_docs(&a.w.docs, a.w.max_docs).expect("docs");
    let cats = load_tasks(&a.w.tasks, a.categories.as_deref(), a.w.queries_per_category).expect("tasks");
    let tmp = std::env::temp_dir().join(format!("spirit-bench-run-{}", std::process::id()));
    let dir = a.index_dir.clone().unwrap_or(tmp.clone());
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(&dir, a.w.engine_config()).expect("open");
    let index = engine.create_index("bench", Some(&crate::input::baseline_mappings()), None).expect("create");
    let mut out = Map::new();
    out.insert("engine".into(), json!("spirit"));
    out.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    out.insert(
        "runtime".into(),
        json!(format!(
            "rust, {:?} durability, {} DRAM budget, {} shard(s)",
            a.w.durability, a.w.dram_budget, a.w.shards
        )),
    );
    out.insert("mode".into(), json!(a.mode));
    out.insert("reopen_every".into(), json!(0));
    out.insert("docs".into(), json!(docs.len()));
    out.insert("top_k".into(), json!(a.top_k));
    let mut per_cat: Vec<Map<String, Value>> = cats
        .iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("queries".into(), json!(c.queries));
            m
        })
        .collect();

    if a.mode == "static" {
        let t0 = Instant::now();
        let cpu0 = crate::input::thread_cpu_seconds();
        for (i, d) in docs.iter().enumerate() {
            index.add(d.json(i)).expect("add");
        }
        let add_cpu = crate::input::thread_cpu_seconds() - cpu0;
        // spirit's equivalent of the baselines' commit: seal the fresh segment and let the pipeline flush and
        // engrave everything. Merges go on in the background, as the baselines' do after their commit; the
        // force merge below waits for them.
        index.seal().expect("seal");
        index.wait_engraved().expect("pipeline");
        let secs = t0.elapsed().as_secs_f64();
        out.insert(
            "ingest".into(),
            json!({"docs": docs.len(), "seconds": secs, "docs_per_sec": docs.len() as f64 / secs,
                   "add_thread_cpu_seconds": add_cpu}),
        );
        // Like the baselines' forceMerge(1): the static index is searched as one segment per shard.
        let before: usize = index.stats().shard.segments.values().sum();
        let tm = Instant::now();
        index.force_merge(1).expect("force merge");
        out.insert("merge_seconds".into(), json!(tm.elapsed().as_secs_f64()));
        out.insert("segments_before_merge".into(), json!(before));
        // Queries are timed on a settled index, as the baselines' are after their merge phase.
        index.wait_idle().expect("pipeline");
        index.set_default_fields(Some(vec!["body".into()])).expect("body");
        let (passes, wsecs) = warm_up(&index, &cats, a.warmup_passes, a.warmup_seconds, a.top_k);
        out.insert("warmup".into(), json!({"passes": passes, "seconds": wsecs}));
        let mut lat: Vec<Vec<f64>> = cats.iter().map(|c| vec![0.0; c.queries.len()]).collect();
        for (ci, qi) in round_robin(&cats) {
            let t = Instant::now();
            std::hint::black_box(index.search(&cats[ci].queries[qi], &opts(a.top_k)).expect("query"));
            lat[ci][qi] = t.elapsed().as_secs_f64() * 1e6;
        }
        for (ci, c) in cats.iter().enumerate() {
            let (mut counts, mut ids, mut scores) = (vec![], vec![], vec![]);
            for q in &c.queries {
                let r =
                    index.search(q, &SearchOptions { limit: a.top_k, ..Default::default() }).expect("query");
                counts.push(r.total);
                ids.push(r.hits.iter().map(|h| h.id.parse::<u64>().unwrap_or(u64::MAX)).collect::<Vec<_>>());
                scores.push(r.hits.iter().map(|h| h.score).collect::<Vec<_>>());
            }
            let m = &mut per_cat[ci];
            m.insert("latencies_us".into(), json!(lat[ci]));
            m.insert("hit_counts".into(), json!(counts));
            m.insert("top_ids".into(), json!(ids));
            m.insert("top_scores".into(), json!(scores));
        }
        let st = index.stats().shard;
        out.insert("index_bytes".into(), json!(st.image_bytes_persistent.max(st.image_bytes_dram)));
        out.insert("segments".into(), json!(st.segments.values().sum::<usize>()));
        // Restart: close, then time the open of the same directory and check one query answers as before.
        let (first, first_count) = (&cats[0].queries[0], index.count(&cats[0].queries[0]).expect("count"));
        drop(index);
        let t = Instant::now();
        engine.close().expect("close");
        drop(engine);
        let close_secs = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let engine = Engine::open(&dir, a.w.engine_config()).expect("reopen");
        let open_secs = t.elapsed().as_secs_f64();
        let index = engine.index("bench").expect("index after reopen");
        let again = index.count(first).expect("count after reopen");
        if again != first_count {
            eprintln!("spirit: after reopen `{first}` counts {again}, before {first_count}");
        }
        out.insert("close_seconds".into(), json!(close_secs));
        out.insert("open_seconds".into(), json!(open_secs));
        eprintln!("spirit static: close {close_secs:.3} s, open {:.1} ms", open_secs * 1e3);
        return finish(a, out, &cats, per_cat, index, engine, &tmp);
    } else {
        let initial = ((docs.len() as f64) * a.wrt_fraction) as usize;
        let t0 = Instant::now();
        for (i, d) in docs[..initial].iter().enumerate() {
            index.add(d.json(i)).expect("add");
        }
        index.wait_idle().expect("pipeline");
        let initial_seconds = t0.elapsed().as_secs_f64();
        index.set_default_fields(Some(vec!["body".into()])).expect("body");
        let (passes, wsecs) = warm_up(&index, &cats, a.warmup_passes, a.warmup_seconds, a.top_k);
        out.insert("warmup".into(), json!({"passes": passes, "seconds": wsecs}));
        let docs = Arc::new(docs);
        // The pipeline steps completed during the timed window (a sealed fresh segment is queried as such
        // until its flush, which runs at idle priority, ends; one still running at the end is not counted).
        let pipeline_before = index.stats().shard;
        let acked = Arc::new(AtomicUsize::new(initial));
        let done = Arc::new(AtomicBool::new(false));
        let ingest = {
            let (index, docs, acked, done) = (index.clone(), docs.clone(), acked.clone(), done.clone());
            let rate = a.ingest_rate;
            std::thread::spawn(move || {
                let (mut visible_us, mut probe_misses): (Vec<f64>, usize) = (Vec::new(), 0);
                let mut add_us = Vec::with_capacity(docs.len() - initial);
                let probe_opts = SearchOptions {
                    limit: 1,
                    fetch: false,
                    track_total: false,
                    cache: false,
                    ..Default::default()
                };
                let t = Instant::now();
                for i in initial..docs.len() {
                    if rate > 0.0 {
                        let due = Duration::from_secs_f64((i - initial) as f64 / rate);
                        if let Some(wait) = due.checked_sub(t.elapsed()) {
                            std::thread::sleep(wait);
                        }
                    }
                    let mut doc = docs[i].json(i);
                    doc["probe"] = json!(format!("p{i}"));
                    let ta = Instant::now();
                    index.add(doc).expect("add");
                    add_us.push(ta.elapsed().as_secs_f64() * 1e6);
                    acked.store(i + 1, Ordering::Release);
                    if (i - initial).is_multiple_of(16) {
                        // Ingest-to-visible: from `add` returning to a search returning the document.
                        let acked_at = Instant::now();
                        let r = index.search(&format!("probe:p{i}"), &probe_opts).expect("probe");
                        if r.hits.len() == 1 {
                            visible_us.push(acked_at.elapsed().as_secs_f64() * 1e6);
                        } else {
                            probe_misses += 1;
                        }
                    }
                }
                let secs = t.elapsed().as_secs_f64();
                done.store(true, Ordering::Release);
                (secs, visible_us, probe_misses, add_us)
            })
        };
        let order = round_robin(&cats);
        let mut lat: Vec<Vec<f64>> = cats.iter().map(|_| vec![]).collect();
        let (mut n, mut checks, mut violations, mut in_flight) = (0usize, 0usize, 0usize, 0usize);
        let mut seg_sum = [0usize; SegState::ALL.len()];
        while !done.load(Ordering::Acquire) {
            let (ci, qi) = order[n % order.len()];
            let q = &cats[ci].queries[qi % cats[ci].queries.len()];
            let t = Instant::now();
            std::hint::black_box(index.search(q, &opts(a.top_k)).expect("query"));
            lat[ci].push(t.elapsed().as_secs_f64() * 1e6);
            n += 1;
            if n % 32 == 0 {
                let before = acked.load(Ordering::Acquire);
                let seen = index.count("*:*").expect("count") as usize;
                let after = acked.load(Ordering::Acquire);
                checks += 1;
                if seen < before {
                    violations += 1;
                } else if seen > after {
                    in_flight += 1;
                }
                // What a real-time snapshot holds: segments per pipeline state, sampled.
                let segs = index.stats().shard.segments;
                for (i, s) in SegState::ALL.iter().enumerate() {
                    seg_sum[i] += segs.get(s).copied().unwrap_or(0);
                }
            }
        }
        let (add_secs, mut visible_us, probe_misses, mut add_us) = ingest.join().expect("ingest thread");
        let pipeline_after = index.stats().shard;
        let bg = docs.len() - initial;
        out.insert(
            "ingest".into(),
            json!({"docs": bg, "seconds": add_secs, "docs_per_sec": bg as f64 / add_secs}),
        );
        for (ci, l) in lat.into_iter().enumerate() {
            per_cat[ci].insert("latencies_us".into(), json!(l));
        }
        let st = index.stats().shard;
        out.insert("index_bytes".into(), json!(st.image_bytes_persistent.max(st.image_bytes_dram)));
        out.insert(
            "nrt".into(),
            json!({"initial_docs": initial, "initial_seconds": initial_seconds, "add_loop_seconds": add_secs,
                   "queries_run": n, "reopens": 0, "visibility_checks": checks, "visibility_violations": violations,
                   "visibility_in_flight": in_flight, "mean_segments_by_state": mean_segments(&seg_sum, checks),
                   "visible_docs_final": index.count("*:*").expect("count"), "wrt_fraction": a.wrt_fraction,
                   "ingest_rate": a.ingest_rate, "visibility": visibility(&mut visible_us, probe_misses),
                   "add_latency": latency_summary(&mut add_us),
                   "pipeline_in_window": {
                       "flushes": pipeline_after.flushes - pipeline_before.flushes,
                       "flush_millis": pipeline_after.flush_millis - pipeline_before.flush_millis,
                       "merges": pipeline_after.merges - pipeline_before.merges,
                       "merge_millis": pipeline_after.merge_millis - pipeline_before.merge_millis}}),
        );
        let vis = &out["nrt"]["visibility"];
        eprintln!(
            "spirit nrt: {n} queries during {bg} adds, {checks} visibility checks, {violations} violations ({in_flight} saw an add in flight); \
             ingest-to-visible p50 {:.1} µs p99 {:.1} µs over {} probes, {probe_misses} missed",
            vis["p50_us"].as_f64().unwrap_or(f64::NAN),
            vis["p99_us"].as_f64().unwrap_or(f64::NAN),
            vis["docs_measured"]
        );
    }
    finish(a, out, &cats, per_cat, index, engine, &tmp);
}

/// Mean number of segments per pipeline state over `samples` samples (state names as keys).
fn mean_segments(sum: &[usize], samples: usize) -> Value {
    let m: Map<String, Value> = SegState::ALL
        .iter()
        .zip(sum)
        .map(|(s, &n)| (format!("{s:?}").to_lowercase(), json!(n as f64 / samples.max(1) as f64)))
        .collect();
    Value::Object(m)
}

/// Percentiles of the probes' ingest-to-visible latencies, in the baselines' `nrt.visibility` shape.
/// A probe that misses its acknowledged document counts as not visible (a violation of real time).
fn visibility(us: &mut [f64], misses: usize) -> Value {
    let mut v = latency_summary(us);
    v["method"] = json!("probe");
    v["docs_measured"] = json!(us.len());
    v["not_visible_during_run"] = json!(misses);
    v
}

/// p50/p99/p99.9/max/mean of latencies in µs (nulls when there are none).
fn latency_summary(us: &mut [f64]) -> Value {
    us.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| if us.is_empty() { Value::Null } else { json!(crate::percentile(us, q)) };
    let mean = if us.is_empty() { Value::Null } else { json!(us.iter().sum::<f64>() / us.len() as f64) };
    json!({"p50_us": p(0.5), "p99_us": p(0.99), "p999_us": p(0.999), "max_us": us.last(), "mean_us": mean})
}

/// Writes the result file and closes the engine.
fn finish(
    a: RunArgs,
    mut out: Map<String, Value>,
    cats: &[Category],
    per_cat: Vec<Map<String, Value>>,
    index: Arc<Index>,
    engine: Engine,
    tmp: &std::path::Path,
) {
    out.insert("peak_rss_bytes".into(), json!(peak_rss()));
    let mut cm = Map::new();
    for (c, m) in cats.iter().zip(per_cat) {
        cm.insert(c.name.clone(), Value::Object(m));
    }
    out.insert("categories".into(), Value::Object(cm));
    std::fs::write(&a.out, serde_json::to_string(&Value::Object(out)).unwrap()).expect("write result");
    drop(index);
    engine.close().expect("close");
    if a.index_dir.is_none() {
        let _ = std::fs::remove_dir_all(tmp);
    }
}
