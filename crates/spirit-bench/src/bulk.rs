//! `spirit-bench bulk`: bulk indexing throughput (issue 7) — the bulk loader (`spirit::bulk`) on a line file
//! for every combination of analysis threads and shards asked for, timed end to end like the baselines'
//! `--mode bulk`: from opening the (compressed) file to a durable, fully merged index (`Engine::close`),
//! with the point where every document is searchable (`bulk_load` returned) reported too. Baseline results
//! (`tantivy-baseline`/`lucene-baseline --mode bulk` JSON) given with `--compare` go into the same table, and
//! the tokenizer alone is timed against plain splits of the same text.

use serde_json::{json, Value};
use spirit::formats::Format;
use spirit::{BulkOptions, Engine, EngineConfig, ShardConfig};
use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct BulkArgs {
    /// luceneutil line file (.gz allowed).
    #[arg(long)]
    docs: PathBuf,
    /// Only the first N documents.
    #[arg(long)]
    max_docs: Option<u64>,
    /// Analysis thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Shard counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    shards: Vec<usize>,
    #[arg(long, default_value = "1GB")]
    dram_budget: String,
    /// Arena of one fresh segment (default: the engine's, min(64 MiB, budget / 8)).
    #[arg(long)]
    fresh_segment_bytes: Option<String>,
    /// Arena of a fresh segment during the load (default: `spirit index`'s, min(256 MiB, budget / 4); 0: the
    /// real-time arena).
    #[arg(long)]
    bulk_segment_bytes: Option<String>,
    /// Upper bound on documents per segment (default: the engine's).
    #[arg(long)]
    max_docs_per_segment: Option<u32>,
    /// Commit segments to the persistent copy right after engraving (so the merger works during the load)
    /// instead of lazily when DRAM runs short.
    #[arg(long)]
    eager_commit: bool,
    /// Results to put in the table besides this run's: baselines' `--mode bulk` JSON, or the `--json` of an
    /// earlier `spirit-bench bulk` (its runs).
    #[arg(long, value_delimiter = ',')]
    compare: Vec<PathBuf>,
    /// Run nothing: only the table and goals of the `--compare` results (`bench/run.sh bulk` runs every
    /// engine in rounds, then reports them all, best of each).
    #[arg(long)]
    report_only: bool,
    /// Write all results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Skip the tokenizer-alone measurement (only the bulk loads).
    #[arg(long)]
    no_tokenizer: bool,
}

fn open_input(args: &BulkArgs) -> std::io::Result<Box<dyn Read>> {
    let f = std::fs::File::open(&args.docs)?;
    Ok(if args.docs.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(f)))
    } else {
        Box::new(BufReader::with_capacity(1 << 20, f))
    })
}

fn spirit_run(args: &BulkArgs, threads: usize, shards: usize) -> Result<Value, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let size = |s: &Option<String>| -> Result<Option<usize>, String> {
        Ok(s.as_deref().map(spirit::parse_size).transpose()?.map(|b| b as usize))
    };
    // As `spirit index` opens it: bulk arenas unless told otherwise.
    let mut shard = ShardConfig {
        dram_budget: spirit::parse_size(&args.dram_budget)? as usize,
        fresh_segment_bytes: size(&args.fresh_segment_bytes)?,
        max_docs_per_segment: args
            .max_docs_per_segment
            .unwrap_or(ShardConfig::default().max_docs_per_segment),
        ..Default::default()
    }
    .with_bulk_arenas();
    if let Some(b) = size(&args.bulk_segment_bytes)? {
        shard.bulk_segment_bytes = Some(b);
    }
    let cfg = EngineConfig { shard, default_shards: Some(shards) };
    // Each configuration's own peak, not the process's over the runs before it.
    crate::input::reset_peak_rss();
    let t0 = Instant::now();
    let engine = Engine::open(dir.path(), cfg)?;
    let index = engine.create_index("bulk", Some(&crate::input::baseline_mappings()), None)?;
    let mut input = open_input(args)?;
    let opts = BulkOptions {
        format: Format::Lines,
        threads,
        limit: args.max_docs.unwrap_or(u64::MAX),
        ..Default::default()
    };
    let p = spirit::bulk_load(&index, &mut input, &opts, &())?;
    let searchable = t0.elapsed().as_secs_f64();
    let stats = index.stats().shard;
    let (segments, heap) = (stats.segments, stats.persistent);
    drop(index);
    engine.close()?;
    let seconds = t0.elapsed().as_secs_f64();
    let index_bytes = dir_size(dir.path());
    let r = json!({
        "engine": "spirit", "mode": "bulk", "threads": threads, "shards": shards, "docs": p.docs,
        "bytes": p.bytes, "rejected": p.rejected, "seconds": seconds, "searchable_seconds": searchable,
        "docs_per_sec": p.docs as f64 / seconds, "mb_per_sec": p.bytes as f64 / 1e6 / seconds,
        "searchable_mb_per_sec": p.bytes as f64 / 1e6 / searchable, "segments_at_load_end": segments,
        "heap_at_load_end": {"used": heap.used, "free": heap.free, "pending": heap.pending, "head": heap.head,
            "merged_dictionary": stats.merged_dictionary_bytes, "merges": stats.merges,
            "compactions": stats.compactions, "flushes": stats.flushes},
        "index_bytes": index_bytes, "peak_rss_bytes": crate::input::peak_rss(),
    });
    eprintln!(
        "spirit bulk, {threads} threads, {shards} shards: {} docs ({:.1} MB) searchable after {searchable:.2} s, \
         closed after {seconds:.2} s = {:.1} MB/s",
        p.docs,
        p.bytes as f64 / 1e6,
        p.bytes as f64 / 1e6 / seconds
    );
    Ok(r)
}

fn dir_size(p: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            // Allocated bytes: the persistent heap file is sparse where nothing was written.
            Ok(m) => std::os::unix::fs::MetadataExt::blocks(&m) * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The tokenizer alone against plain splits of the same text (the `body` of every document, in memory).
fn tokenizer_run(args: &BulkArgs) -> Result<Value, Box<dyn std::error::Error>> {
    let docs = crate::input::load_docs(&args.docs, args.max_docs.map(|m| m as usize))?;
    let text: Vec<&str> = docs.iter().map(|d| d.body.as_str()).collect();
    let bytes: usize = text.iter().map(|t| t.len()).sum();
    let time = |f: &mut dyn FnMut(&str) -> usize| -> (f64, usize) {
        let mut best = f64::MAX;
        let mut tokens = 0;
        for _ in 0..3 {
            let t0 = Instant::now();
            tokens = text.iter().map(|t| std::hint::black_box(f(std::hint::black_box(t)))).sum();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        (bytes as f64 / 1e9 / best, tokens)
    };
    let mut buf = String::new();
    let (spirit_gbs, spirit_tokens) = time(&mut |t| {
        let mut n = 0;
        spirit::analysis::tokenize_with_buffer(t, &mut buf, &mut |tok| n += tok.len().min(1));
        n
    });
    let (ws_gbs, ws_tokens) = time(&mut |t| t.split_ascii_whitespace().count());
    let (alnum_gbs, alnum_tokens) =
        time(&mut |t| t.split(|c: char| !c.is_alphanumeric()).filter(|s| !s.is_empty()).count());
    let (lower_gbs, lower_tokens) = time(&mut |t| {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|s| !s.is_empty())
            .map(|s| s.to_lowercase().len().min(1))
            .sum()
    });
    assert_eq!(spirit_tokens, lower_tokens, "the tokenizer and the split+lowercase yield the same tokens");
    Ok(json!({
        "text_bytes": bytes,
        "spirit_tokenizer": {"gb_per_sec": spirit_gbs, "tokens": spirit_tokens},
        "split_ascii_whitespace": {"gb_per_sec": ws_gbs, "tokens": ws_tokens},
        "split_non_alphanumeric": {"gb_per_sec": alnum_gbs, "tokens": alnum_tokens},
        "split_non_alphanumeric_lowercase": {"gb_per_sec": lower_gbs, "tokens": lower_tokens},
    }))
}

pub fn run(args: BulkArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut rows = vec![];
    if !args.report_only {
        for &shards in &args.shards {
            for &threads in &args.threads {
                rows.push(spirit_run(&args, threads, shards)?);
            }
        }
    }
    let mut tok = Value::Null;
    for p in &args.compare {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let v = serde_json::from_str::<Value>(&text)?;
        // Each row says which file it came from (runs in rounds are told apart by their file names).
        let stem = p.file_stem().map_or(String::new(), |s| s.to_string_lossy().into_owned());
        let sourced = |mut r: Value| {
            if r.get("source").is_none() {
                r["source"] = json!(stem);
            }
            r
        };
        match v.get("runs").and_then(Value::as_array) {
            Some(runs) => {
                rows.extend(runs.iter().cloned().map(sourced));
                if tok.is_null() {
                    tok = v["tokenizer"].clone();
                }
            }
            None => rows.push(sourced(v)),
        }
    }
    if !args.no_tokenizer && !args.report_only {
        tok = tokenizer_run(&args)?;
    }
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    println!("| engine | threads | shards | docs | MB | searchable after s | durable + merged after s | MB/s | docs/s | index MB (allocated) | peak RSS MB | from |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.1} | {} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} | {} |",
            r["engine"].as_str().unwrap_or("?"),
            r["threads"],
            r.get("shards").map_or("–".to_string(), |s| s.to_string()),
            r["docs"],
            f(r, "bytes") / 1e6,
            r.get("searchable_seconds").and_then(Value::as_f64).map_or("–".into(), |s| format!("{s:.2}")),
            f(r, "seconds"),
            f(r, "mb_per_sec"),
            f(r, "docs_per_sec"),
            f(r, "index_bytes") / 1e6,
            f(r, "peak_rss_bytes") / 1e6,
            r["source"].as_str().unwrap_or("this run"),
        );
    }
    // Goals (issue 7): spirit's best multi-threaded rate against each baseline's best, all cores.
    let best = |engine: &str| {
        rows.iter().filter(|r| r["engine"] == engine).map(|r| f(r, "mb_per_sec")).fold(f64::NAN, f64::max)
    };
    let s = best("spirit");
    for (engine, goal) in [("tantivy", 2.0), ("lucene", 3.0)] {
        let b = best(engine);
        if b.is_finite() {
            println!(
                "\nspirit / {engine} bulk MB/s (best of each): **{:.2}** (goal ≥ {goal}) — {}",
                s / b,
                if s / b >= goal { "met" } else { "not met" }
            );
        }
    }
    if !tok.is_null() {
        println!(
        "\nTokenizer alone on the bodies ({:.1} MB in memory, best of 3): spirit {:.3} GB/s ({} tokens, = \
         split on non-alphanumeric + to_lowercase at {:.3} GB/s); split on non-alphanumeric {:.3} GB/s; \
         split_ascii_whitespace {:.3} GB/s.",
        f(&tok, "text_bytes") / 1e6,
        tok["spirit_tokenizer"]["gb_per_sec"].as_f64().unwrap_or(0.0),
        tok["spirit_tokenizer"]["tokens"],
        tok["split_non_alphanumeric_lowercase"]["gb_per_sec"].as_f64().unwrap_or(0.0),
        tok["split_non_alphanumeric"]["gb_per_sec"].as_f64().unwrap_or(0.0),
        tok["split_ascii_whitespace"]["gb_per_sec"].as_f64().unwrap_or(0.0),
    );
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&json!({"runs": rows, "tokenizer": tok}))?)?;
    }
    Ok(())
}
