//! `spirit-bench loop`: each category's queries in a loop for a few seconds on an index that a static run
//! left in its `--index-dir` after one untimed pass, nothing else (no indexing): the spirit half of
//! `bench/run.sh interleave`, which alternates it with `tantivy-baseline --mode loop` on one core so that
//! both engines are timed under the same machine conditions. On this shared machine the speed drifts by tens
//! of percent within minutes, and a comparison that runs one engine's whole static run after the other's
//! measures the drift as much as the engines.
//!
//! With `--fresh-docs FILE` it times the fresh segment instead: the first `--fresh-max` documents of the
//! line file go into one fresh segment (an arena made large enough to hold them all, never flushed), and the
//! queries run on it alone — the write-optimized postings every real-time query reads for the newest
//! documents, measured apart from the images and from concurrent ingestion. With `--fresh-base N` the first
//! N documents go into one merged segment before them: a windowed real-time run's index (200,000 merged,
//! the newest tens of thousands fresh) without its concurrent writer, so what the writer costs the queries
//! can be told apart from what the fresh postings do.

use crate::input::load_tasks;
use serde_json::json;
use spirit::{Engine, EngineConfig};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct LoopArgs {
    /// The data directory of a `spirit-bench run --mode static --index-dir DIR` run (index `bench`).
    #[arg(long, required_unless_present = "fresh_docs", conflicts_with = "fresh_docs")]
    index_dir: Option<PathBuf>,
    /// Instead of an index directory: a luceneutil line file whose first `--fresh-max` documents are
    /// indexed into one fresh segment, which the queries then run on alone.
    #[arg(long)]
    fresh_docs: Option<PathBuf>,
    /// Documents of `--fresh-docs` in the fresh segment.
    #[arg(long, default_value_t = 50_000)]
    fresh_max: usize,
    /// With `--fresh-docs`: the first N documents of the file go into one merged segment first (indexed,
    /// then force-merged), and the fresh segment takes the `--fresh-max` after them — a windowed real-time
    /// run's index (the initial documents merged, the newest fresh) without the concurrent ingestion.
    #[arg(long, default_value_t = 0)]
    fresh_base: usize,
    /// luceneutil task file.
    #[arg(long)]
    tasks: PathBuf,
    /// Categories to loop over, one after the other (default: all, in file order).
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    /// First N distinct queries of each category.
    #[arg(long, default_value_t = 100)]
    queries_per_category: usize,
    /// Seconds per category (whole passes over its queries: at least one).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Hits per query (top-k by score); 0 counts every match instead (`Index::count`).
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Newest first instead of by score (top-k without an exact count: stops once k hits are certain).
    #[arg(long)]
    newest: bool,
    /// Count every match exactly as well (`track_total`: no pruning that skips matches uncounted).
    #[arg(long)]
    track_total: bool,
    /// Pruning of ORs of terms: `maxscore` (the default) or `bmw` (block-max WAND).
    #[arg(long, default_value = "maxscore", value_parser = ["maxscore", "bmw"])]
    disjunction: String,
}

/// Prints one JSON line per category: `{"engine", "category", "queries", "mean_us", "geomean_us",
/// "per_query_us"}` — the mean latency of all queries timed, the geometric mean over the category's queries
/// of each one's mean latency (issue 4's measure), and each query's mean (in the task file's order).
pub fn run(a: LoopArgs) {
    let cats = load_tasks(&a.tasks, a.categories.as_deref(), a.queries_per_category).expect("tasks");
    let tmp = std::env::temp_dir().join(format!("spirit-bench-fresh-{}", std::process::id()));
    let (engine, index) = match (&a.index_dir, &a.fresh_docs) {
        (Some(dir), _) => {
            let engine = Engine::open(dir, EngineConfig::default()).expect("open the index directory");
            let index = engine
                .index("bench")
                .expect("no index `bench` in --index-dir (run a static run there first)");
            (engine, index)
        }
        (None, Some(docs)) => {
            let docs = crate::input::load_docs(docs, Some(a.fresh_base + a.fresh_max)).expect("docs");
            let fresh = docs.len().saturating_sub(a.fresh_base);
            // An arena of ~4 KiB per document holds them all (postings, positions, columns); the rings and
            // caches around it fit a budget of 8 arenas.
            let arena = (fresh.max(1024) * 4096).next_power_of_two();
            let shard = spirit::ShardConfig {
                dram_budget: 8 * arena,
                fresh_segment_bytes: Some(arena),
                // At least the default: the base documents go through segments of this size on their way.
                max_docs_per_segment: (fresh as u32 + 1)
                    .max(spirit::ShardConfig::default().max_docs_per_segment),
                ..Default::default()
            };
            let _ = std::fs::remove_dir_all(&tmp);
            let engine = Engine::open(&tmp, EngineConfig { shard, default_shards: Some(1) }).expect("open");
            let index =
                engine.create_index("bench", Some(&crate::input::baseline_mappings()), None).expect("create");
            let base = a.fresh_base.min(docs.len());
            for (i, d) in docs[..base].iter().enumerate() {
                index.add(d.json(i)).expect("add");
            }
            if base > 0 {
                index.force_merge(1).expect("force-merge the base documents");
            }
            for (i, d) in docs.iter().enumerate().skip(base) {
                index.add(d.json(i)).expect("add");
            }
            let segs = index.stats().shard.segments;
            // `--fresh-max 0` leaves the merged segment alone: the same documents' all-merged baseline.
            let want = (base > 0) as usize + (docs.len() > base) as usize;
            assert!(want > 0, "--fresh-docs gave no documents");
            assert_eq!(segs.values().sum::<usize>(), want, "the base merged, the rest fresh: {segs:?}");
            (engine, index)
        }
        (None, None) => unreachable!("clap requires one"),
    };
    index.set_default_fields(Some(vec!["body".into()])).expect("body");
    let mut opts = crate::run::opts(a.top_k);
    opts.track_total = a.track_total;
    if a.newest {
        opts.sort = spirit::Sort::Newest;
    }
    if a.disjunction == "bmw" {
        opts.disjunction = spirit::Disjunction::BlockMaxWand;
    }
    for c in &cats {
        // One untimed pass first: the category's postings paged in.
        for q in &c.queries {
            std::hint::black_box(index.search(q, &opts).expect("search"));
        }
        // Per query, its time summed over the passes.
        let (t0, mut passes, mut per_query) = (Instant::now(), 0u64, vec![0.0f64; c.queries.len()]);
        while passes == 0 || t0.elapsed().as_secs_f64() < a.seconds {
            for (q, sum) in c.queries.iter().zip(&mut per_query) {
                let t = Instant::now();
                std::hint::black_box(index.search(q, &opts).expect("search"));
                *sum += t.elapsed().as_secs_f64();
            }
            passes += 1;
        }
        let (mean_us, geomean_us) = crate::input::loop_means(&per_query, passes);
        let each = crate::input::per_query_means(&per_query, passes);
        let line = json!({"engine": "spirit", "category": c.name, "queries": passes * c.queries.len() as u64,
                          "mean_us": mean_us, "geomean_us": geomean_us, "per_query_us": each});
        println!("{line}");
    }
    drop(index);
    engine.close().expect("close");
    let _ = std::fs::remove_dir_all(&tmp);
}
