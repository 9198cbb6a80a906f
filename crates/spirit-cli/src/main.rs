//! `spirit`: the command-line tool. Index JSON-lines or luceneutil line files with a progress bar, search with
//! Lucene-style queries, show tier and segment statistics, verify a data directory, and run the demo on the
//! bundled sample.

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use spirit::formats::Format;
use spirit::{Durability, Engine, EngineConfig, Index, SearchOptions, ShardConfig, Sort};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "spirit",
    version,
    about = "spirit: a real-time, persistent, tiered full-text search engine"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct Open {
    /// Data directory.
    #[arg(long, short = 'd')]
    data: PathBuf,
    /// Index name inside the data directory.
    #[arg(long, short = 'i', default_value = "default")]
    index: String,
    /// Hard cap on DRAM used by the index heap (e.g. 64MB, 2GB).
    #[arg(long, default_value = "1GB")]
    dram_budget: String,
    /// Hard cap on the persistent heap file (e.g. 10GB).
    #[arg(long, default_value = "64GB")]
    persistent_budget: String,
    /// Durability mode: volatile, graceful (survives clean shutdowns) or crash-safe (survives kill -9 and
    /// power loss; every write is in the write-ahead log before it is acknowledged).
    #[arg(long, default_value = "graceful")]
    durability: Durability,
    /// Compact merged segments this many at a time (one contiguous posting list per term); 0 = off.
    #[arg(long, default_value_t = 4)]
    compaction_factor: u32,
    /// Retention: drop the oldest segments once the persistent heap holds more than this (e.g. 10GB).
    #[arg(long)]
    retention_size: Option<String>,
    /// Retention: drop segments whose newest document is older than this (e.g. 3600, 90m, 12h, 7d).
    #[arg(long)]
    retention_age: Option<String>,
    /// Shards of a new index (fixed at creation; default: one per core, at most 8). The budgets are split
    /// between them.
    #[arg(long)]
    shards: Option<usize>,
}

/// Parses durations like `90`, `90s`, `15m`, `12h`, `7d` into seconds.
fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1),
        Some('m') => (&t[..t.len() - 1], 60),
        Some('h') => (&t[..t.len() - 1], 3600),
        Some('d') => (&t[..t.len() - 1], 86400),
        _ => (&t[..], 1),
    };
    num.trim()
        .parse::<u64>()
        .map(|n| n * mult)
        .map_err(|_| format!("invalid duration [{s}]; use e.g. 3600, 90m, 12h, 7d"))
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the `_source` of documents by `_id` (real-time get), one JSON line each; exits 1 if any is missing.
    Get {
        #[command(flatten)]
        open: Open,
        /// Document ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Index documents from JSON-lines or luceneutil line files (.gz allowed).
    Index {
        #[command(flatten)]
        open: Open,
        /// Input format (default: from the file name; `.lines[.gz]`/`.txt` are line files).
        #[arg(long)]
        format: Option<Format>,
        /// Stop after this many documents.
        #[arg(long)]
        limit: Option<u64>,
        /// Crash-safe mode: documents per group commit (one persistence barrier acknowledges them all).
        #[arg(long, default_value_t = 256)]
        sync_every: usize,
        /// Append the `_id` of every acknowledged (durable) document to this file, one per line.
        #[arg(long)]
        ack_log: Option<PathBuf>,
        /// Threads that parse and analyze documents (the bulk pipeline; default: one per core). Documents go
        /// in in input order whatever the count.
        #[arg(long)]
        threads: Option<usize>,
        /// Files to index.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Search with a Lucene-style query (`+a +b`, `a b`, `"a b"`, `-c`, `title:x`, `pre*`, `n:[1 TO 5]`).
    Search {
        #[command(flatten)]
        open: Open,
        /// Number of hits.
        #[arg(long, short = 'k', default_value_t = 10)]
        limit: usize,
        /// Result order.
        #[arg(long, default_value = "score", value_parser = ["score", "newest"])]
        sort: String,
        /// Print only the number of matching documents.
        #[arg(long)]
        count: bool,
        /// One JSON object per hit (`_id`, `_score`, `_source`).
        #[arg(long)]
        json: bool,
        query: String,
    },
    /// Documents, segments by state, and bytes per tier against the budgets.
    Stats {
        #[command(flatten)]
        open: Open,
        #[arg(long)]
        json: bool,
    },
    /// Merge the index down to at most N segments per shard (Elasticsearch's `_forcemerge`): queries on a
    /// static index get cheaper, deleted documents and replaced versions are purged; answers do not change.
    Forcemerge {
        #[command(flatten)]
        open: Open,
        /// Segments to keep per shard.
        #[arg(long, default_value_t = 1)]
        max_num_segments: usize,
    },
    /// Verify a data directory: open every index and check every segment checksum.
    Check {
        #[arg(long, short = 'd')]
        data: PathBuf,
    },
    /// Serve the Elasticsearch-compatible HTTP API (plus a search page at / and Prometheus metrics at
    /// /metrics) for every index in a data directory. SIGTERM or Ctrl-C stops it gracefully.
    Serve {
        #[arg(long, short = 'd')]
        data: PathBuf,
        #[arg(long, default_value_t = 9200)]
        port: u16,
        /// Address to listen on; the default accepts local connections only.
        #[arg(long, default_value = "127.0.0.1")]
        bind: String,
        /// Durability of indexes created through the API without a durability setting (existing indexes
        /// keep the mode they were created with).
        #[arg(long, default_value = "graceful")]
        durability: Durability,
        /// Require `Authorization: ApiKey <key>` on every request.
        #[arg(long, env = "SPIRIT_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// DRAM budget of each index.
        #[arg(long, default_value = "1GB")]
        dram_budget: String,
        /// Persistent budget of each index.
        #[arg(long, default_value = "64GB")]
        persistent_budget: String,
        /// Threads running searches (default: one per core).
        #[arg(long)]
        query_threads: Option<usize>,
        /// Shards of indexes created through the API without `number_of_shards` (default: one per core, at
        /// most 8).
        #[arg(long)]
        shards: Option<usize>,
        /// Largest accepted request body.
        #[arg(long, default_value = "100MB")]
        max_body: String,
        /// Touch each shard's whole DRAM heap in the background when it opens (`ShardConfig::pretouch`, as
        /// Elasticsearch's `AlwaysPreTouch`): no add or query then waits for a page's first touch, but every
        /// shard of every index holds its whole `--dram-budget` resident from the start.
        #[arg(long)]
        pretouch: bool,
    },
    /// The main job on the bundled sample: index 2,000 Wikipedia documents, run example queries, print stats.
    Demo {
        /// Keep the index here (default: a temporary directory that is removed afterwards).
        #[arg(long)]
        data: Option<PathBuf>,
    },
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Index { open, format, limit, sync_every, ack_log, threads, files } => {
            cmd_index(&open, format, limit, sync_every.max(1), ack_log.as_deref(), threads, &files)
        }
        Cmd::Get { open, ids } => cmd_get(&open, &ids),
        Cmd::Search { open, limit, sort, count, json, query } => {
            cmd_search(&open, limit, &sort, count, json, &query)
        }
        Cmd::Stats { open, json } => cmd_stats(&open, json),
        Cmd::Forcemerge { open, max_num_segments } => cmd_forcemerge(&open, max_num_segments),
        Cmd::Check { data } => cmd_check(&data),
        Cmd::Demo { data } => cmd_demo(data),
        Cmd::Serve {
            data,
            port,
            bind,
            durability,
            api_key,
            dram_budget,
            persistent_budget,
            query_threads,
            shards,
            max_body,
            pretouch,
        } => cmd_serve(ServeArgs {
            data,
            port,
            bind,
            durability,
            api_key,
            dram_budget,
            persistent_budget,
            query_threads,
            shards,
            max_body,
            pretouch,
        }),
    };
    if let Err(e) = r {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

type R<T> = Result<T, Box<dyn std::error::Error>>;

/// The engine configuration `o` asks for; `bulk`: with bulk arenas (`spirit index`: few, large segments).
fn engine_config(o: &Open, bulk: bool) -> R<EngineConfig> {
    let shard = ShardConfig {
        dram_budget: spirit::parse_size(&o.dram_budget)? as usize,
        persistent_budget: spirit::parse_size(&o.persistent_budget)?,
        durability: o.durability,
        compaction: spirit::CompactionPolicy { factor: o.compaction_factor, ..Default::default() },
        retention: spirit::RetentionPolicy {
            max_bytes: o.retention_size.as_deref().map(spirit::parse_size).transpose()?,
            max_age_secs: o.retention_age.as_deref().map(parse_duration).transpose()?,
        },
        ..Default::default()
    };
    let shard = if bulk { shard.with_bulk_arenas() } else { shard };
    shard.validate()?;
    Ok(EngineConfig { shard, default_shards: Some(o.shards.unwrap_or_else(spirit::default_shards)) })
}

fn open_index(o: &Open, create: bool) -> R<(Engine, Arc<Index>)> {
    // Creating means loading files (`spirit index`): bulk arenas.
    let engine = Engine::open(&o.data, engine_config(o, create)?)?;
    let index = match engine.index(&o.index) {
        Some(i) => i,
        None if create => engine.create_index(&o.index, None, None)?,
        None => {
            return Err(format!(
                "no index [{}] in {} (indexes: {:?})",
                o.index,
                o.data.display(),
                engine.index_names()
            )
            .into())
        }
    };
    Ok((engine, index))
}

fn reader(path: &Path) -> R<(Box<dyn BufRead>, u64)> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f.metadata()?.len();
    let counted = CountingReader { inner: f, count: PROGRESS.clone() };
    let r: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(counted)))
    } else {
        Box::new(BufReader::with_capacity(1 << 20, counted))
    };
    Ok((r, len))
}

static PROGRESS: std::sync::LazyLock<Arc<std::sync::atomic::AtomicU64>> =
    std::sync::LazyLock::new(|| Arc::new(std::sync::atomic::AtomicU64::new(0)));

/// Counts compressed bytes read, for the progress bar.
struct CountingReader<T> {
    inner: T,
    count: Arc<std::sync::atomic::AtomicU64>,
}

impl<T: Read> Read for CountingReader<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What `spirit index` does with the bulk loader's reports: progress bar, ack log, rejected lines.
struct IndexObserver {
    name: String,
    /// Set by SIGINT/SIGTERM: stop reading input.
    stop: Arc<AtomicBool>,
    pb: ProgressBar,
    log: Option<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>,
    /// The first write error of the ack log (the load stops on it).
    log_error: std::sync::Mutex<Option<std::io::Error>>,
    rejected: AtomicU64,
}

impl spirit::BulkObserver for IndexObserver {
    fn acknowledged(&self, added: &[spirit::AddResult]) {
        let Some(log) = &self.log else { return };
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        let r = added.iter().try_for_each(|a| writeln!(log, "{}", a.id)).and_then(|_| log.flush());
        if let Err(e) = r {
            self.log_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
        }
    }

    fn rejected(&self, line: u64, e: &spirit::Error) {
        let n = self.rejected.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= 10 {
            self.pb.suspend(|| eprintln!("{}:{line}: skipped: {e}", self.name));
        } else if n == 11 {
            self.pb.suspend(|| eprintln!("{}: more rejected documents; not showing them", self.name));
        }
    }

    fn progress(&self, _: &spirit::BulkProgress) {
        self.pb.set_position(PROGRESS.load(Ordering::Relaxed));
    }

    fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.log_error.lock().map_or(true, |e| e.is_some())
    }
}

fn cmd_index(
    o: &Open,
    format: Option<Format>,
    limit: Option<u64>,
    sync_every: usize,
    ack_log: Option<&Path>,
    threads: Option<usize>,
    files: &[PathBuf],
) -> R<()> {
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let (engine, index) = open_index(o, true)?;
    let t0 = Instant::now();
    let (mut total, mut rejected, mut bytes) = (0u64, 0u64, 0u64);
    let limit = limit.unwrap_or(u64::MAX);
    let log = match ack_log {
        Some(p) => Some(std::sync::Mutex::new(std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ))),
        None => None,
    };
    let mut opts = spirit::BulkOptions { sync_every, ..Default::default() };
    if let Some(t) = threads {
        if t == 0 {
            return Err("--threads must be at least 1".into());
        }
        opts.threads = t;
    }
    let mut observer = IndexObserver {
        name: String::new(),
        stop: stop.clone(),
        pb: ProgressBar::hidden(),
        log,
        log_error: Default::default(),
        rejected: AtomicU64::new(0),
    };
    // One bulk load over all the files: bulk arenas carry on across file ends (each `bulk_load` would seal
    // its last one otherwise).
    let guard = index.bulk_guard();
    for path in files {
        if total >= limit {
            break;
        }
        let name = path.display().to_string();
        opts.format = format.unwrap_or_else(|| Format::guess(&name));
        opts.limit = limit - total;
        let (mut r, len) = reader(path)?;
        PROGRESS.store(0, Ordering::Relaxed);
        let pb = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            ProgressBar::new(len)
        } else {
            ProgressBar::hidden()
        };
        pb.set_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {per_sec} eta {eta}")
                .unwrap()
                .progress_chars("=> "),
        );
        pb.set_message(name.clone());
        observer.pb = pb;
        observer.name = name.clone();
        observer.rejected.store(0, Ordering::Relaxed);
        let res = spirit::bulk_load(&index, &mut r, &opts, &observer);
        observer.pb.finish_and_clear();
        let p = match res {
            Ok(p) => p,
            Err(e) => {
                // Close anyway (what is persisted stays usable) and say what the close did.
                drop(guard);
                drop(index);
                return Err(match engine.close() {
                    Ok(()) => format!("{name}: {e}"),
                    Err(c) => format!("{name}: {e}\nclosing the index: {c}"),
                }
                .into());
            }
        };
        if let Some(e) = observer.log_error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(format!("ack log: {e}").into());
        }
        total += p.docs;
        rejected += p.rejected;
        bytes += p.bytes;
        if stop.load(Ordering::Relaxed) {
            eprintln!("interrupted: closing the index gracefully");
            break;
        }
    }
    guard.finish()?;
    let secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    engine.close()?;
    eprintln!(
        "indexed {total} documents ({:.1} MB) in {secs:.2} s ({:.0} docs/s, {:.1} MB/s), {rejected} rejected; close took {:.2} s",
        bytes as f64 / 1e6,
        total as f64 / secs.max(1e-9),
        bytes as f64 / 1e6 / secs.max(1e-9),
        t1.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_hits(res: &spirit::SearchResult, json: bool, out: &mut impl Write) -> R<()> {
    for h in &res.hits {
        if json {
            let v = serde_json::json!({"_id": h.id, "_score": h.score, "_source": h.source_json()});
            writeln!(out, "{v}")?;
        } else {
            let src = h.source_json();
            let title = src.get("title").and_then(|t| t.as_str()).unwrap_or("");
            let body = src.get("body").or_else(|| src.get("text")).and_then(|t| t.as_str()).unwrap_or("");
            let snippet: String = body.chars().take(90).collect();
            writeln!(out, "{:>8.4}  {:<12} {}  {}", h.score, h.id, title, snippet.replace('\n', " "))?;
        }
    }
    Ok(())
}

fn cmd_search(o: &Open, limit: usize, sort: &str, count: bool, json: bool, query: &str) -> R<()> {
    let (engine, index) = open_index(o, false)?;
    let opts = SearchOptions {
        limit: if count { 0 } else { limit },
        sort: if sort == "newest" { Sort::Newest } else { Sort::Score },
        ..Default::default()
    };
    let res = index.search(query, &opts)?;
    let mut out = std::io::stdout().lock();
    if count {
        writeln!(out, "{}", res.total)?;
    } else {
        print_hits(&res, json, &mut out)?;
        if !json {
            eprintln!("{} hits, {} µs", res.total, res.took_micros);
        }
    }
    drop(out);
    engine.close()?;
    Ok(())
}

fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", units[u])
}

fn print_stats(s: &spirit::IndexStats, out: &mut impl Write) -> R<()> {
    let sh = &s.shard;
    writeln!(
        out,
        "index {}: {} documents ({} deleted, {} of them purged), {} fields",
        s.name, sh.docs, sh.deleted, sh.purged, s.fields
    )?;
    let segs: Vec<String> = sh.segments.iter().map(|(k, v)| format!("{k:?}={v}").to_lowercase()).collect();
    writeln!(out, "  segments: {}", segs.join(" "))?;
    writeln!(
        out,
        "  durability: {:?}, persist barrier: {}{}",
        sh.durability,
        sh.persistent.barrier,
        if sh.tlog_chunks > 0 {
            format!(", tLog {} chunks ({})", sh.tlog_chunks, human(sh.tlog_bytes))
        } else {
            String::new()
        }
    )?;
    if let Some(r) = s.recovery {
        writeln!(
            out,
            "  recovered from a crash: open {:.1} ms, {} tLog records replayed in {:.1} ms",
            r.open_micros as f64 / 1e3,
            r.records,
            r.replay_micros as f64 / 1e3
        )?;
    }
    writeln!(
        out,
        "  DRAM: {} used of {} budget (short-term {} / {}, long-term {} / {}), high-water mark {} (this session) / {} (lifetime)",
        human((sh.dram.short_term_used + sh.dram.long_term_used) as u64),
        human(sh.dram.budget as u64),
        human(sh.dram.short_term_used as u64),
        human(sh.dram.short_term_capacity as u64),
        human(sh.dram.long_term_used as u64),
        human(sh.dram.long_term_capacity as u64),
        human(sh.dram.high_water as u64),
        human(sh.lifetime_dram_high_water as u64)
    )?;
    let c = &sh.result_cache;
    writeln!(
        out,
        "  result cache: {} entries, {} of {} (part of the DRAM budget); {} hits, {} misses, {} stale; hit rate {:.1}%",
        c.entries,
        human(c.used_bytes as u64),
        human(c.capacity_bytes as u64),
        c.hits,
        c.misses,
        c.stale,
        c.hit_rate * 100.0
    )?;
    let h = &sh.selective_cache;
    writeln!(
        out,
        "  selective cache (hot dictionary chains and lists): {} terms, {} of {} (part of the DRAM budget; {} of pinned lists); {} hits, {} refreshes, {} misses, {} passed by while held; hit rate {:.1}%",
        h.entries,
        human(h.used_bytes as u64),
        human(h.capacity_bytes as u64),
        human(h.pinned_list_bytes as u64),
        h.hits,
        h.refreshes,
        h.misses,
        h.contended,
        h.hit_rate * 100.0
    )?;
    writeln!(
        out,
        "  persistent heap: {} used of {} budget (file {}; {} free for reuse, {} waiting for a checkpoint)",
        human(sh.persistent.used),
        human(sh.persistent.budget),
        human(sh.persistent.file_len),
        human(sh.persistent.free),
        human(sh.persistent.pending)
    )?;
    writeln!(
        out,
        "  segment images: {} in DRAM copies, {} in persistent copies",
        human(sh.image_bytes_dram),
        human(sh.image_bytes_persistent)
    )?;
    writeln!(
        out,
        "  pipeline: {} flushes ({} urgent), {} engraves, {} commits, {} merges, {} compactions; merged dictionary {} terms ({})",
        sh.flushes,
        sh.urgent_flushes,
        sh.engraves,
        sh.commits,
        sh.merges,
        sh.compactions,
        sh.merged_terms,
        human(sh.merged_dictionary_bytes)
    )?;
    if sh.dropped_segments > 0 {
        writeln!(
            out,
            "  retention: {} segments ({} documents) dropped",
            sh.dropped_segments, sh.dropped_docs
        )?;
    }
    Ok(())
}

fn cmd_stats(o: &Open, json: bool) -> R<()> {
    let engine = Engine::open(&o.data, engine_config(o, false)?)?;
    let mut out = std::io::stdout().lock();
    for name in engine.index_names() {
        let s = engine.index(&name).unwrap().stats();
        if json {
            writeln!(out, "{}", serde_json::to_string(&s)?)?;
        } else {
            print_stats(&s, &mut out)?;
        }
    }
    drop(out);
    engine.close()?;
    Ok(())
}

fn cmd_forcemerge(o: &Open, max_segments: usize) -> R<()> {
    let (engine, index) = open_index(o, false)?;
    let before: usize = index.stats().shard.segments.values().sum();
    let t = std::time::Instant::now();
    let left = index.force_merge(max_segments)?;
    eprintln!("{}: {before} -> {left} segments in {:.1} s", o.index, t.elapsed().as_secs_f64());
    drop(index);
    engine.close()?;
    Ok(())
}

fn cmd_get(o: &Open, ids: &[String]) -> R<()> {
    let (engine, index) = open_index(o, false)?;
    let mut out = std::io::stdout().lock();
    let mut missing = 0;
    for id in ids {
        match index.get(id)? {
            Some(src) => writeln!(
                out,
                "{}",
                serde_json::json!({"_id": id, "_source": serde_json::from_slice::<serde_json::Value>(&src)?})
            )?,
            None => {
                missing += 1;
                eprintln!("not found: {id}");
            }
        }
    }
    drop(out);
    engine.close()?;
    if missing > 0 {
        return Err(format!("{missing} of {} documents not found", ids.len()).into());
    }
    Ok(())
}

struct ServeArgs {
    data: PathBuf,
    port: u16,
    bind: String,
    durability: Durability,
    api_key: Option<String>,
    dram_budget: String,
    persistent_budget: String,
    query_threads: Option<usize>,
    shards: Option<usize>,
    max_body: String,
    pretouch: bool,
}

fn cmd_serve(a: ServeArgs) -> R<()> {
    // Indexes created before durability was stored with them open graceful (never volatile, which would
    // discard their heap); new ones get `--durability`.
    let shard = ShardConfig {
        dram_budget: spirit::parse_size(&a.dram_budget)? as usize,
        persistent_budget: spirit::parse_size(&a.persistent_budget)?,
        durability: Durability::Graceful,
        pretouch: a.pretouch,
        ..Default::default()
    };
    shard.validate()?;
    let default_shards = Some(a.shards.unwrap_or_else(spirit::default_shards));
    let engine = Arc::new(Engine::open(&a.data, EngineConfig { shard, default_shards })?);
    let mut cfg = spirit_server::ServerConfig {
        default_durability: a.durability,
        api_key: a.api_key.filter(|k| !k.is_empty()),
        ..Default::default()
    };
    if let Some(t) = a.query_threads {
        cfg.query_threads = t.max(1);
    }
    cfg.limits.max_body_bytes = spirit::parse_size(&a.max_body)? as usize;
    let state = spirit_server::ServerState::new(engine.clone(), cfg.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((a.bind.as_str(), a.port))
            .await
            .map_err(|e| format!("cannot listen on {}:{}: {e}", a.bind, a.port))?;
        let addr = listener.local_addr()?;
        println!(
            "spirit: serving {} index(es) from {} on http://{addr} (new indexes: {:?}{})",
            engine.index_names().len(),
            a.data.display(),
            a.durability,
            if cfg.api_key.is_some() { ", API key required" } else { "" }
        );
        std::io::stdout().flush()?;
        spirit_server::serve(state, listener, spirit_server::shutdown_signal()).await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    drop(rt);
    println!("spirit: shutting down, closing indexes");
    engine.close()?;
    println!("spirit: closed");
    Ok(())
}

fn cmd_check(data: &Path) -> R<()> {
    // Opening verifies the superblock, the manifest, every image checksum and (after a crash) the logs it
    // recovers from; the check then walks every structure.
    let engine = Engine::open(data, EngineConfig::default())?;
    let mut problems = 0;
    for name in engine.index_names() {
        let index = engine.index(&name).unwrap();
        let (mut segments, mut terms) = (0, 0);
        let n = index.shards().len();
        for (i, shard) in index.shards().iter().enumerate() {
            let r = shard.check();
            let at = if n > 1 { format!(" shard {i}") } else { String::new() };
            for p in &r.problems {
                println!("index {name}{at}: {p}");
            }
            problems += r.problems.len();
            segments += r.segments;
            terms += r.merged_terms_checked;
        }
        let rec = index.stats().recovery.map_or(String::new(), |r| {
            format!("; recovered from a crash ({} tLog records replayed)", r.records)
        });
        let shards = if n > 1 { format!(" in {n} shards") } else { String::new() };
        println!("index {name}: {segments} segments{shards}, {terms} merged-dictionary entries checked{rec}");
    }
    engine.close()?;
    if problems > 0 {
        return Err(format!("{problems} problems found").into());
    }
    println!("ok");
    Ok(())
}

const SAMPLE: &[u8] = include_bytes!("../data/sample.lines.gz");

fn cmd_demo(data: Option<PathBuf>) -> R<()> {
    let tmp;
    let dir = match data {
        Some(d) => d,
        None => {
            tmp = std::env::temp_dir().join(format!("spirit-demo-{}", std::process::id()));
            tmp.clone()
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = EngineConfig {
        shard: ShardConfig { dram_budget: 64 << 20, ..Default::default() },
        default_shards: Some(spirit::default_shards()),
    };
    println!("spirit demo: indexing the bundled sample (2,000 Wikipedia chunks) into {}", dir.display());
    let engine = Engine::open(&dir, cfg.clone())?;
    let index = engine.create_index("wiki", None, None)?;
    let mut r = BufReader::new(flate2::read::GzDecoder::new(SAMPLE));
    let t0 = Instant::now();
    /// Real time: the first documents are searchable as soon as they are inserted.
    struct FirstVisible<'a>(&'a Index, std::sync::Mutex<Option<u64>>);
    impl spirit::BulkObserver for FirstVisible<'_> {
        fn acknowledged(&self, _: &[spirit::AddResult]) {
            let mut first = self.1.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(self.0.count("anarchism").unwrap_or(0));
            }
        }
    }
    let observer = FirstVisible(&index, Default::default());
    let opts = spirit::BulkOptions { format: Format::Lines, ..Default::default() };
    let n = spirit::bulk_load(&index, &mut r, &opts, &observer)?.docs;
    let first_visible = observer.1.into_inner().unwrap_or_else(|e| e.into_inner());
    let secs = t0.elapsed().as_secs_f64();
    println!("indexed {n} documents in {:.3} s ({:.0} docs/s)", secs, n as f64 / secs);
    println!(
        "first documents visible to the very next query: {} hit(s) for 'anarchism'",
        first_visible.unwrap_or(0)
    );
    let mut out = std::io::stdout().lock();
    for q in [
        "anarchism",
        "+political +philosophy",
        "\"free software\"",
        "title:autism",
        "philosoph*",
        "apollo -moon",
    ] {
        let res = index.search(q, &SearchOptions { limit: 3, ..Default::default() })?;
        writeln!(out, "\nquery {q:?}: {} hits in {} µs", res.total, res.took_micros)?;
        print_hits(&res, false, &mut out)?;
    }
    let res = index.search("war", &SearchOptions { limit: 3, sort: Sort::Newest, ..Default::default() })?;
    writeln!(out, "\nquery \"war\", newest first: {} hits", res.total)?;
    print_hits(&res, false, &mut out)?;
    writeln!(out)?;
    print_stats(&index.stats(), &mut out)?;
    drop(out);
    drop(index);
    let t1 = Instant::now();
    engine.close()?;
    drop(engine);
    let close = t1.elapsed();
    let t2 = Instant::now();
    let engine = Engine::open(&dir, cfg)?;
    let reopen = t2.elapsed();
    let index = engine.index("wiki").ok_or("index missing after reopen")?;
    let after = index.count("anarchism")?;
    println!(
        "\ngraceful close {:.1} ms; reopen {:.1} ms (maps the heap, no re-indexing); 'anarchism' still has {after} hits",
        close.as_secs_f64() * 1e3,
        reopen.as_secs_f64() * 1e3
    );
    print_stats(&index.stats(), &mut std::io::stdout().lock())?;
    drop(index);
    engine.close()?;
    drop(engine);
    if std::env::temp_dir().join(format!("spirit-demo-{}", std::process::id())) == dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
