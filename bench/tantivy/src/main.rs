//! tantivy-baseline: the Tantivy side of the spirit benchmark baselines.
//!
//! Same command-line contract and JSON output as bench/lucene (see bench/baselines/README.md):
//!
//! ```text
//! tantivy-baseline --docs FILE [--max-docs N] --tasks FILE [--categories C1,C2,...]
//!     [--queries-per-category N] --mode static|nrt [--reopen-every K] [--wrt-fraction F]
//!     [--top-k 10] [--index-dir DIR] --out result.json
//! ```

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use flate2::read::MultiGzDecoder;
use serde_json::{json, Map, Value as Json};
use tantivy::collector::{Count, TopDocs};
use tantivy::indexer::NoMergePolicy;
use tantivy::query::{Query, QueryParser};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED};
use tantivy::tokenizer::{LowerCaser, SimpleTokenizer, TextAnalyzer};
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Score, TantivyDocument};

const ENGINE: &str = "tantivy";
const TOKENIZER: &str = "spirit_simple_lower";
/// Single indexing thread with a 1 GB budget (as required by the baseline contract).
const WRITER_THREADS: usize = 1;
const WRITER_BUDGET: usize = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Static,
    Nrt,
    /// Bulk indexing with `--threads` indexing threads, timed end to end (read, index, commit, merges).
    Bulk,
    /// Each category's queries in a loop for `--loop-seconds` (after one untimed pass) on the index a static run left in
    /// `--index-dir` (nothing indexed; `--docs` is not read): one JSON line per category on stdout, the same
    /// in `--out`. The Tantivy half of `bench/run.sh interleave`.
    Loop,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Static => "static",
            Mode::Nrt => "nrt",
            Mode::Bulk => "bulk",
            Mode::Loop => "loop",
        }
    }
}

#[derive(Parser, Debug)]
#[command(name = "tantivy-baseline", version, about = "Tantivy baseline for the spirit benchmarks")]
struct Args {
    /// luceneutil line file (title\tdate\tbody per line, optional header), plain or .gz
    #[arg(long)]
    docs: PathBuf,
    /// index at most this many documents (default: all)
    #[arg(long)]
    max_docs: Option<usize>,
    /// luceneutil task file (`Category: query # comment`); not used in bulk mode
    #[arg(long, required_unless_present = "threads")]
    tasks: Option<PathBuf>,
    /// bulk mode: indexing threads (Tantivy's writer threads; the 1 GB budget is shared)
    #[arg(long)]
    threads: Option<usize>,
    /// comma-separated categories, in this order (default: all, in file order)
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    /// first N distinct queries of each category
    #[arg(long, default_value_t = 100)]
    queries_per_category: usize,
    #[arg(long, value_enum)]
    mode: Mode,
    /// nrt mode: commit + reload the reader every K queries (0 = never)
    #[arg(long, default_value_t = 1)]
    reopen_every: usize,
    /// nrt mode: fraction of the documents indexed (and committed) before querying starts
    #[arg(long, default_value_t = 0.8)]
    wrt_fraction: f64,
    /// Hits per query (top-k by score); 0 in `--mode loop` counts every match instead.
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// nrt mode: pace the ingest thread at this many docs/s (0 = as fast as possible)
    #[arg(long, default_value_t = 0.0)]
    ingest_rate: f64,
    /// untimed warm-up: at least this many passes over the whole query set...
    #[arg(long, default_value_t = 1)]
    warmup_passes: usize,
    /// ...and at least this many seconds
    #[arg(long, default_value_t = 10.0)]
    warmup_seconds: f64,
    /// index directory (created; an old tantivy index in it is wiped; kept afterwards).
    /// Default: a temporary directory that is removed at the end.
    #[arg(long)]
    index_dir: Option<PathBuf>,
    /// loop mode: seconds per category (whole passes over its queries: at least one)
    #[arg(long, default_value_t = 2.0)]
    loop_seconds: f64,
    /// where to write the JSON result
    #[arg(long)]
    out: PathBuf,
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Doc {
    title: String,
    date: String,
    body: String,
}

#[derive(Clone, Copy)]
struct Fields {
    title: Field,
    date: Field,
    body: Field,
    id: Field,
}

struct Category {
    name: String,
    queries: Vec<String>,
}

// ---------------------------------------------------------------- input

/// A buffered reader over a line file, decompressing `.gz`.
fn open_lines(path: &Path) -> Result<BufReader<Box<dyn Read>>> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let raw: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(BufReader::with_capacity(1 << 20, raw))
}

impl Doc {
    /// One line (without its newline): `title\tdate\tbody`, missing fields empty.
    fn from_line(buf: &[u8]) -> Doc {
        let line = String::from_utf8_lossy(buf);
        let mut parts = line.splitn(3, '\t');
        let title = parts.next().unwrap_or("").to_string();
        let date = parts.next().unwrap_or("").to_string();
        let body = parts.next().unwrap_or("").to_string();
        Doc { title, date, body }
    }
}

fn load_docs(path: &Path, max_docs: Option<usize>) -> Result<Vec<Doc>> {
    let mut reader = open_lines(path)?;
    let mut buf = Vec::with_capacity(4096);
    let mut docs = Vec::new();
    let mut first = true;
    loop {
        if max_docs.is_some_and(|m| docs.len() >= m) {
            break;
        }
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if first {
            first = false;
            if buf.starts_with(b"FIELDS_HEADER_INDICATOR") {
                continue;
            }
        }
        docs.push(Doc::from_line(&buf));
    }
    Ok(docs)
}

fn load_tasks(path: &Path, wanted: Option<&[String]>, per_category: usize) -> Result<Vec<Category>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cats: Vec<Category> = Vec::new();
    let mut seen: Vec<HashSet<String>> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((cat, rest)) = line.split_once(':') else { continue };
        let cat = cat.trim();
        let query = rest.split('#').next().unwrap_or("").trim();
        if query.is_empty() {
            continue;
        }
        let idx = match cats.iter().position(|c| c.name == cat) {
            Some(i) => i,
            None => {
                cats.push(Category { name: cat.to_string(), queries: Vec::new() });
                seen.push(HashSet::new());
                cats.len() - 1
            }
        };
        if cats[idx].queries.len() < per_category && seen[idx].insert(query.to_string()) {
            cats[idx].queries.push(query.to_string());
        }
    }
    match wanted {
        None => Ok(cats),
        Some(names) => {
            let mut out = Vec::new();
            for name in names {
                let name = name.trim();
                if name.is_empty() {
                    continue;
                }
                let pos = cats
                    .iter()
                    .position(|c| c.name == name)
                    .ok_or_else(|| format!("category {name} not found in the task file"))?;
                out.push(Category { name: name.to_string(), queries: cats[pos].queries.clone() });
            }
            Ok(out)
        }
    }
}

/// Queries interleaved round-robin over the categories: (category, query index).
fn round_robin(cats: &[Category]) -> Vec<(usize, usize)> {
    let longest = cats.iter().map(|c| c.queries.len()).max().unwrap_or(0);
    let mut order = Vec::new();
    for i in 0..longest {
        for (c, cat) in cats.iter().enumerate() {
            if i < cat.queries.len() {
                order.push((c, i));
            }
        }
    }
    order
}

// ---------------------------------------------------------------- index

fn build_schema() -> (Schema, Fields) {
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(TOKENIZER)
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    let mut sb = Schema::builder();
    let title = sb
        .add_text_field("title", TextOptions::default().set_indexing_options(indexing.clone()).set_stored());
    let date = sb.add_text_field("date", STORED);
    let body = sb.add_text_field("body", TextOptions::default().set_indexing_options(indexing));
    let id = sb.add_u64_field("id", STORED);
    (sb.build(), Fields { title, date, body, id })
}

fn register_analyzer(index: &Index) {
    // maximal runs of char::is_alphanumeric, lowercased; no length limit, stop words or stemming
    let analyzer = TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser).build();
    index.tokenizers().register(TOKENIZER, analyzer);
}

fn make_doc(f: &Fields, id: u64, d: Doc) -> TantivyDocument {
    let mut doc = TantivyDocument::new();
    doc.add_text(f.title, &d.title);
    doc.add_text(f.date, &d.date);
    doc.add_text(f.body, &d.body);
    doc.add_u64(f.id, id);
    doc
}

/// Returns (directory, remove_at_end).
fn prepare_index_dir(opt: &Option<PathBuf>) -> Result<(PathBuf, bool)> {
    match opt {
        Some(dir) => {
            if dir.exists() {
                let mut entries = std::fs::read_dir(dir)?.peekable();
                if entries.peek().is_some() {
                    if dir.join("meta.json").exists() {
                        std::fs::remove_dir_all(dir)?;
                    } else {
                        return Err(format!(
                            "--index-dir {} is not empty and holds no tantivy index; refusing to wipe it",
                            dir.display()
                        )
                        .into());
                    }
                }
            }
            std::fs::create_dir_all(dir)?;
            Ok((dir.clone(), false))
        }
        None => {
            let dir = std::env::temp_dir().join(format!("tantivy-baseline-{}", std::process::id()));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            Ok((dir, true))
        }
    }
}

fn dir_size(path: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(path) {
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                total += dir_size(&e.path());
            } else if e.file_name() != ".tantivy-writer.lock" && e.file_name() != ".tantivy-meta.lock" {
                total += md.len();
            }
        }
    }
    total
}

fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("VmHWM:") {
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            return kb * 1024;
        }
    }
    0
}

fn micros(t: Instant) -> f64 {
    micros_of(t.elapsed())
}

fn micros_of(d: Duration) -> f64 {
    let ns = d.as_nanos() as f64;
    (ns / 1000.0 * 1000.0).round() / 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------- main

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("tantivy-baseline: error: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    if args.top_k == 0 && args.mode != Mode::Loop {
        return Err("--top-k must be > 0 (0 counts the matches, in --mode loop only)".into());
    }
    if args.ingest_rate.is_nan() || args.ingest_rate < 0.0 {
        return Err("--ingest-rate must be >= 0".into());
    }
    if args.warmup_seconds.is_nan() || args.warmup_seconds < 0.0 {
        return Err("--warmup-seconds must be >= 0".into());
    }
    if !(args.wrt_fraction >= 0.0 && args.wrt_fraction < 1.0) {
        return Err("--wrt-fraction must be in [0, 1)".into());
    }
    if args.mode == Mode::Bulk {
        return run_bulk(&args);
    }
    let tasks = args.tasks.as_ref().ok_or("--tasks is required")?;
    let cats = load_tasks(tasks, args.categories.as_deref(), args.queries_per_category)?;
    if cats.iter().all(|c| c.queries.is_empty()) {
        return Err("no queries selected".into());
    }
    if args.mode == Mode::Loop {
        return run_loop(&args, &cats);
    }
    let t_load = Instant::now();
    let docs = load_docs(&args.docs, args.max_docs)?;
    let n_docs = docs.len();
    eprintln!(
        "[tantivy] loaded {} docs in {:.1}s, {} categories",
        n_docs,
        t_load.elapsed().as_secs_f64(),
        cats.len()
    );

    let (dir, remove_dir) = prepare_index_dir(&args.index_dir)?;
    let (schema, fields) = build_schema();
    let index = Index::create_in_dir(&dir, schema)?;
    register_analyzer(&index);

    let parser = QueryParser::for_index(&index, vec![fields.body]); // OR by default
    let mut parsed: Vec<Vec<Box<dyn Query>>> = Vec::new();
    for c in &cats {
        let mut v = Vec::new();
        for q in &c.queries {
            v.push(parser.parse_query(q).map_err(|e| format!("cannot parse {q:?}: {e}"))?);
        }
        parsed.push(v);
    }
    let order = round_robin(&cats);

    let mut out = Map::new();
    out.insert("engine".into(), json!(ENGINE));
    // "tantivy v0.27.0, index_format v7" -> "0.27.0"
    let full = tantivy::version_string();
    let short = full.split_once(" v").map(|(_, r)| r.split(',').next().unwrap_or(r)).unwrap_or(full);
    out.insert("version".into(), json!(short));
    out.insert("runtime".into(), json!(tantivy::version_string()));
    out.insert("mode".into(), json!(args.mode.as_str()));
    out.insert("reopen_every".into(), json!(if args.mode == Mode::Nrt { args.reopen_every } else { 0 }));
    out.insert("docs".into(), json!(n_docs));
    out.insert("top_k".into(), json!(args.top_k));

    let mut cat_json = Map::new();
    match args.mode {
        Mode::Static => {
            run_static(&args, &index, &fields, docs, &cats, &parsed, &order, &dir, &mut out, &mut cat_json)?
        }
        Mode::Bulk | Mode::Loop => unreachable!("handled above"),
        Mode::Nrt => {
            run_nrt(&args, &index, &fields, docs, &cats, &parsed, &order, &dir, &mut out, &mut cat_json)?
        }
    }
    out.insert("peak_rss_bytes".into(), json!(peak_rss_bytes()));
    out.insert("categories".into(), Json::Object(cat_json));

    let text = serde_json::to_string_pretty(&Json::Object(out.clone()))?;
    let mut f = File::create(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    summary(&out);
    drop(index);
    if remove_dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// Bulk indexing with all cores, timed end to end: the main thread reads and decompresses the file and
/// makes the documents; Tantivy's `threads` indexing threads tokenize and index them, each into its own
/// segment; then commit and wait for the merges.
fn run_bulk(args: &Args) -> Result<()> {
    let threads = args.threads.unwrap_or(1).max(1);
    let dir = tempfile_dir()?;
    let (schema, fields) = build_schema();
    let t0 = Instant::now();
    let index = Index::create_in_dir(&dir, schema)?;
    register_analyzer(&index);
    let mut writer: IndexWriter<TantivyDocument> = index.writer_with_num_threads(threads, WRITER_BUDGET)?;
    let mut reader = open_lines(&args.docs)?;
    let (mut buf, mut docs, mut bytes, mut first) = (Vec::with_capacity(4096), 0u64, 0u64, true);
    loop {
        if args.max_docs.is_some_and(|m| docs >= m as u64) {
            break;
        }
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if std::mem::take(&mut first) && buf.starts_with(b"FIELDS_HEADER_INDICATOR") {
            continue;
        }
        writer.add_document(make_doc(&fields, docs, Doc::from_line(&buf)))?;
        docs += 1;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    let seconds = t0.elapsed().as_secs_f64();
    let out = json!({
        "engine": ENGINE, "version": tantivy::version_string(), "mode": "bulk", "threads": threads,
        "docs": docs, "bytes": bytes, "seconds": seconds, "docs_per_sec": docs as f64 / seconds,
        "mb_per_sec": bytes as f64 / 1e6 / seconds, "segments": index.searchable_segment_ids()?.len(),
        "index_bytes": dir_size(&dir), "peak_rss_bytes": peak_rss_bytes(),
    });
    let mut f = File::create(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    f.write_all(serde_json::to_string_pretty(&out)?.as_bytes())?;
    f.write_all(b"\n")?;
    eprintln!(
        "[tantivy] bulk, {threads} threads: {docs} docs ({:.1} MB) in {seconds:.2} s = {:.1} MB/s, {:.0} docs/s",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / seconds,
        docs as f64 / seconds
    );
    drop(index);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A fresh temporary directory for an index.
fn tempfile_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let dir = std::env::temp_dir().join(format!("tantivy-bulk-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn new_writer(index: &Index) -> Result<IndexWriter<TantivyDocument>> {
    Ok(index.writer_with_num_threads(WRITER_THREADS, WRITER_BUDGET)?)
}

fn open_reader(index: &Index) -> Result<IndexReader> {
    Ok(index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?)
}

#[allow(clippy::too_many_arguments)]
/// Loop mode: the index a static run left in `--index-dir`, each category's queries timed in a loop.
fn run_loop(args: &Args, cats: &[Category]) -> Result<()> {
    let dir =
        args.index_dir.as_ref().ok_or("--mode loop needs --index-dir (where a static run left its index)")?;
    let index = Index::open_in_dir(dir)?;
    register_analyzer(&index);
    let body = index.schema().get_field("body")?;
    let parser = QueryParser::for_index(&index, vec![body]); // OR by default, as in the static run
    let reader = open_reader(&index)?;
    let searcher = reader.searcher();
    let collector = TopDocs::with_limit(args.top_k.max(1)).order_by_score();
    // `--top-k 0`: count every match (tantivy's `Count` collector), as spirit-bench's loop does with 0.
    let search = |q: &dyn tantivy::query::Query| -> Result<usize> {
        Ok(if args.top_k == 0 { searcher.search(q, &Count)? } else { searcher.search(q, &collector)?.len() })
    };
    let mut per_cat = Map::new();
    for c in cats {
        let qs = c
            .queries
            .iter()
            .map(|q| parser.parse_query(q).map_err(|e| format!("cannot parse {q:?}: {e}")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        // One untimed pass first: the category's postings paged in.
        for q in &qs {
            std::hint::black_box(search(q.as_ref())?);
        }
        // Per query, its time summed over the passes.
        let (t0, mut passes, mut per_query) = (Instant::now(), 0u64, vec![0.0f64; qs.len()]);
        while passes == 0 || t0.elapsed().as_secs_f64() < args.loop_seconds {
            for (q, sum) in qs.iter().zip(&mut per_query) {
                let t = Instant::now();
                std::hint::black_box(search(q.as_ref())?);
                *sum += t.elapsed().as_secs_f64();
            }
            passes += 1;
        }
        // Mean latency of every query timed; geometric mean over the queries of each one's mean.
        let each: Vec<f64> = per_query.iter().map(|s| s * 1e6 / passes as f64).collect();
        let n = each.len().max(1) as f64;
        let mean_us = each.iter().sum::<f64>() / n;
        let geomean_us = (each.iter().map(|x| x.max(1e-3).ln()).sum::<f64>() / n).exp();
        let queries = passes * qs.len() as u64;
        let per_query_us: Vec<f64> = each.iter().map(|x| (x * 10.0).round() / 10.0).collect();
        let line = json!({"engine": ENGINE, "category": c.name, "queries": queries, "mean_us": mean_us,
                          "geomean_us": geomean_us, "per_query_us": per_query_us});
        println!("{line}");
        per_cat.insert(c.name.clone(), line);
    }
    let out = json!({"engine": ENGINE, "mode": "loop", "categories": per_cat});
    std::fs::write(&args.out, serde_json::to_string(&out)?)?;
    Ok(())
}

fn run_static(
    args: &Args,
    index: &Index,
    fields: &Fields,
    docs: Vec<Doc>,
    cats: &[Category],
    parsed: &[Vec<Box<dyn Query>>],
    order: &[(usize, usize)],
    dir: &Path,
    out: &mut Map<String, Json>,
    cat_json: &mut Map<String, Json>,
) -> Result<()> {
    let n_docs = docs.len();
    let mut writer = new_writer(index)?;
    let t0 = Instant::now();
    for (i, d) in docs.into_iter().enumerate() {
        writer.add_document(make_doc(fields, i as u64, d))?;
    }
    writer.commit()?;
    let index_secs = t0.elapsed().as_secs_f64();

    // merge everything into one segment and wait
    let tm = Instant::now();
    writer.wait_merging_threads()?; // lets any background merge finish
    let segments_before = index.searchable_segment_ids()?.len();
    if segments_before > 1 {
        let mut merger = new_writer(index)?;
        merger.set_merge_policy(Box::new(NoMergePolicy));
        let ids = index.searchable_segment_ids()?;
        merger.merge(&ids).wait()?;
        merger.garbage_collect_files().wait()?;
        merger.wait_merging_threads()?;
    }
    let merge_secs = tm.elapsed().as_secs_f64();
    let segments_after = index.searchable_segment_ids()?.len();
    let index_bytes = dir_size(dir);

    out.insert(
        "ingest".into(),
        json!({"docs": n_docs, "seconds": index_secs, "docs_per_sec": n_docs as f64 / index_secs}),
    );
    out.insert("merge_seconds".into(), json!(merge_secs));
    out.insert("segments_before_merge".into(), json!(segments_before));
    out.insert("segments".into(), json!(segments_after));
    out.insert("index_bytes".into(), json!(index_bytes));

    let reader = open_reader(index)?;
    let searcher = reader.searcher();
    let collector = TopDocs::with_limit(args.top_k).order_by_score();

    // warm-up: every query once (--warmup-passes), untimed
    warm_up(args, &searcher, parsed, order, out)?;
    // timed
    let mut lat: Vec<Vec<f64>> = cats.iter().map(|_| Vec::new()).collect();
    let mut tops: Vec<Vec<Vec<(Score, DocAddress)>>> =
        cats.iter().map(|c| vec![Vec::new(); c.queries.len()]).collect();
    for &(c, i) in order {
        let t = Instant::now();
        let top = searcher.search(parsed[c][i].as_ref(), &collector)?;
        let us = micros(t);
        lat[c].push(us);
        tops[c][i] = top;
    }
    // untimed: hit counts and the ids of the top hits
    let first = order[0]; // re-run after the restart below
    let mut first_count = 0;
    for (c, cat) in cats.iter().enumerate() {
        let mut counts = Vec::new();
        let mut ids = Vec::new();
        let mut scores = Vec::new();
        for (i, q) in parsed[c].iter().enumerate() {
            let count = searcher.search(q.as_ref(), &Count)?;
            if (c, i) == first {
                first_count = count;
            }
            counts.push(count);
            let mut qi = Vec::new();
            let mut qs = Vec::new();
            for (score, addr) in &tops[c][i] {
                let doc: TantivyDocument = searcher.doc(*addr)?;
                qi.push(doc.get_first(fields.id).and_then(|v| v.as_u64()).unwrap_or(u64::MAX));
                qs.push(((*score as f64) * 1e4).round() / 1e4);
            }
            ids.push(qi);
            scores.push(qs);
        }
        cat_json.insert(
            cat.name.clone(),
            json!({
                "latencies_us": lat[c],
                "hit_counts": counts,
                "queries": cat.queries,
                "top_ids": ids,
                "top_scores": scores,
            }),
        );
    }

    // Restart (= recovery after a crash: the last commit): with the writers gone and the reader
    // dropped, time opening the index from its directory until a searcher is ready; then, untimed,
    // check that the first query counts as many hits as before.
    drop(searcher);
    drop(reader);
    let t_open = Instant::now();
    let reopened = Index::open_in_dir(dir)?;
    register_analyzer(&reopened);
    let reader = open_reader(&reopened)?;
    let searcher = reader.searcher();
    let open_secs = t_open.elapsed().as_secs_f64();
    let again = searcher.search(parsed[first.0][first.1].as_ref(), &Count)?;
    if again != first_count {
        eprintln!(
            "[tantivy] after reopen `{}` counts {again} hits, before {first_count}",
            cats[first.0].queries[first.1]
        );
    }
    out.insert("open_seconds".into(), json!(open_secs));
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_nrt(
    args: &Args,
    index: &Index,
    fields: &Fields,
    mut docs: Vec<Doc>,
    cats: &[Category],
    parsed: &[Vec<Box<dyn Query>>],
    order: &[(usize, usize)],
    dir: &Path,
    out: &mut Map<String, Json>,
    cat_json: &mut Map<String, Json>,
) -> Result<()> {
    let n_docs = docs.len();
    let n_init = ((n_docs as f64) * args.wrt_fraction).floor() as usize;
    let rest = docs.split_off(n_init);
    let n_rest = rest.len();
    if n_rest == 0 {
        return Err("nrt mode needs documents left to ingest after the initial fraction".into());
    }

    // initial load (committed)
    let mut writer = new_writer(index)?;
    let t0 = Instant::now();
    for (i, d) in docs.into_iter().enumerate() {
        writer.add_document(make_doc(fields, i as u64, d))?;
    }
    writer.commit()?;
    let init_secs = t0.elapsed().as_secs_f64();
    eprintln!("[tantivy] initial load: {n_init} docs in {init_secs:.2}s");

    let reader = open_reader(index)?;
    let mut searcher = reader.searcher();
    let collector = TopDocs::with_limit(args.top_k).order_by_score();
    // warm-up on the initial snapshot: every query once (--warmup-passes), untimed
    warm_up(args, &searcher, parsed, order, out)?;

    let writer = Arc::new(RwLock::new(writer));
    let done = Arc::new(AtomicBool::new(false));
    // ingest-to-visible: acked[j] = 1 + ns from `origin` to add_document of background doc j
    // returning (0 = not returned yet)
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..n_rest).map(|_| AtomicU64::new(0)).collect());
    let origin = Instant::now();
    let handle = {
        let writer = Arc::clone(&writer);
        let done = Arc::clone(&done);
        let acked = Arc::clone(&acked);
        let fields = *fields;
        let rate = args.ingest_rate;
        // Adds the remaining docs one by one, then commits them: add_document only queues a doc
        // for tantivy's indexing worker, so the ingest is finished when that commit returns.
        std::thread::Builder::new().name("ingest".into()).spawn(move || -> Result<(f64, f64, f64)> {
            let t = Instant::now();
            let res = (|| -> Result<(f64, f64, f64)> {
                for (j, d) in rest.into_iter().enumerate() {
                    if rate > 0.0 {
                        let due = std::time::Duration::from_secs_f64(j as f64 / rate);
                        let now = t.elapsed();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                    }
                    let doc = make_doc(&fields, (n_init + j) as u64, d);
                    let w = writer.read().map_err(|_| "writer lock poisoned")?;
                    w.add_document(doc)?;
                    // stored before the read lock is released, so before any commit that includes the doc
                    acked[j].store(origin.elapsed().as_nanos() as u64 + 1, Ordering::Release);
                    drop(w);
                }
                let add_loop = t.elapsed().as_secs_f64();
                let tc = Instant::now();
                writer.write().map_err(|_| "writer lock poisoned")?.commit()?;
                Ok((add_loop, tc.elapsed().as_secs_f64(), t.elapsed().as_secs_f64()))
            })();
            done.store(true, Ordering::Release);
            res
        })?
    };

    let k = args.reopen_every;
    let mut lat: Vec<Vec<f64>> = cats.iter().map(|_| Vec::new()).collect();
    let mut qn: usize = 0;
    let mut reopens: u64 = 0;
    let mut reopen_us_total = 0.0;
    let mut reopen_us_max: f64 = 0.0;
    let mut reopen_us: Vec<f64> = Vec::new();
    // One thread adds the docs in order and nothing is deleted, so a searcher sees a prefix of the
    // background docs: the first `visible_bg` of them. visible_ns[j] = ingest-to-visible latency of doc j.
    let mut visible_bg = 0usize;
    let mut visible_ns: Vec<u64> = Vec::with_capacity(n_rest);
    while !done.load(Ordering::Acquire) {
        let (c, i) = order[qn % order.len()];
        let t = Instant::now();
        let mut bookkeeping = Duration::ZERO;
        if k > 0 && qn.is_multiple_of(k) {
            let tr = Instant::now();
            writer.write().map_err(|_| "writer lock poisoned")?.commit()?;
            reader.reload()?;
            searcher = reader.searcher();
            let t_done = Instant::now();
            // ingest-to-visible (excluded from the reopen and query latencies): this reopen made docs
            // [visible_bg, now_visible) visible at t_done (latency 0 if a doc's ack is missing or later)
            let now_visible = (searcher.num_docs() as usize).saturating_sub(n_init).min(n_rest);
            let done_at = t_done.duration_since(origin).as_nanos() as u64;
            for a in acked.iter().take(now_visible).skip(visible_bg) {
                let ack = a.load(Ordering::Acquire);
                visible_ns.push(if ack == 0 || ack - 1 > done_at { 0 } else { done_at - (ack - 1) });
            }
            visible_bg = visible_bg.max(now_visible);
            bookkeeping = t_done.elapsed();
            let r = micros_of(t_done - tr);
            reopens += 1;
            reopen_us_total += r;
            reopen_us_max = reopen_us_max.max(r);
            reopen_us.push(r);
        }
        let top = searcher.search(parsed[c][i].as_ref(), &collector)?;
        let us = micros_of(t.elapsed().saturating_sub(bookkeeping));
        std::hint::black_box(top);
        lat[c].push(us);
        qn += 1;
    }
    let visible_at_end = searcher.num_docs();
    let (add_loop_secs, final_commit_secs, ingest_secs) =
        handle.join().map_err(|_| "ingest thread panicked")??;
    reader.reload()?;
    let total_visible = reader.searcher().num_docs();
    let writer = Arc::try_unwrap(writer)
        .map_err(|_| "writer still shared")?
        .into_inner()
        .map_err(|_| "writer lock poisoned")?;
    writer.wait_merging_threads()?;
    let index_bytes = dir_size(dir);

    out.insert(
        "ingest".into(),
        json!({"docs": n_rest, "seconds": ingest_secs, "docs_per_sec": n_rest as f64 / ingest_secs}),
    );
    out.insert("index_bytes".into(), json!(index_bytes));
    out.insert(
        "nrt".into(),
        json!({
            "wrt_fraction": args.wrt_fraction,
            "ingest_rate": args.ingest_rate,
            "initial_docs": n_init,
            "initial_seconds": init_secs,
            "add_loop_seconds": add_loop_secs,
            "final_commit_seconds": final_commit_secs,
            "queries_run": qn,
            "reopens": reopens,
            "reopen_us_total": reopen_us_total,
            "reopen_us_mean": if reopens > 0 { reopen_us_total / reopens as f64 } else { 0.0 },
            "reopen_us_max": reopen_us_max,
            "visible_docs_at_last_query": visible_at_end,
            "visible_docs_final": total_visible,
            "segments_final": index.searchable_segment_ids()?.len(),
            // not counting the reload after the loop: background docs no reopen during the run made visible
            "visibility": visibility_json(&mut visible_ns, n_rest - visible_bg),
            "reopen_us": reopen_us,
        }),
    );
    for (c, cat) in cats.iter().enumerate() {
        cat_json.insert(cat.name.clone(), json!({"latencies_us": lat[c], "queries": cat.queries}));
    }
    Ok(())
}

/// Ingest-to-visible summary in µs: percentile p = sorted[round((n-1)*p)] (as in spirit-bench);
/// nulls when no doc was measured.
fn visibility_json(ns: &mut [u64], not_visible: usize) -> Json {
    ns.sort_unstable();
    let us = |v: u64| v as f64 / 1000.0;
    let p = |q: f64| {
        if ns.is_empty() {
            Json::Null
        } else {
            json!(us(ns[((ns.len() - 1) as f64 * q).round() as usize]))
        }
    };
    let mean = if ns.is_empty() { Json::Null } else { json!(us(ns.iter().sum()) / ns.len() as f64) };
    json!({
        "method": "reopen",
        "docs_measured": ns.len(),
        "not_visible_during_run": not_visible,
        "p50_us": p(0.5),
        "p99_us": p(0.99),
        "p999_us": p(0.999),
        "max_us": ns.last().map(|&v| us(v)),
        "mean_us": mean,
    })
}

/// Untimed passes over the whole query set: at least --warmup-passes and --warmup-seconds.
fn warm_up(
    args: &Args,
    searcher: &tantivy::Searcher,
    parsed: &[Vec<Box<dyn Query>>],
    order: &[(usize, usize)],
    out: &mut Map<String, Json>,
) -> Result<()> {
    let collector = TopDocs::with_limit(args.top_k).order_by_score();
    let t0 = Instant::now();
    let mut passes = 0usize;
    while passes < args.warmup_passes || t0.elapsed().as_secs_f64() < args.warmup_seconds {
        for &(c, i) in order {
            std::hint::black_box(searcher.search(parsed[c][i].as_ref(), &collector)?);
        }
        passes += 1;
    }
    out.insert("warmup".into(), json!({"passes": passes, "seconds": t0.elapsed().as_secs_f64()}));
    Ok(())
}

fn summary(out: &Map<String, Json>) {
    let g = |k: &str| out.get(k).cloned().unwrap_or(Json::Null);
    let ingest = g("ingest");
    eprintln!(
        "[{}] {} mode={} K={} docs={} ingest: {} docs in {:.2}s = {:.0} docs/s, index {:.1} MB, peak RSS {:.0} MB",
        g("engine").as_str().unwrap_or(""),
        g("version").as_str().unwrap_or(""),
        g("mode").as_str().unwrap_or(""),
        g("reopen_every"),
        g("docs"),
        ingest["docs"],
        ingest["seconds"].as_f64().unwrap_or(0.0),
        ingest["docs_per_sec"].as_f64().unwrap_or(0.0),
        g("index_bytes").as_f64().unwrap_or(0.0) / 1e6,
        g("peak_rss_bytes").as_f64().unwrap_or(0.0) / 1e6,
    );
    if let Some(n) = out.get("nrt") {
        eprintln!(
            "  nrt: {} queries, {} reopens (mean {:.0} us, max {:.0} us), visible at last query {}",
            n["queries_run"],
            n["reopens"],
            n["reopen_us_mean"].as_f64().unwrap_or(0.0),
            n["reopen_us_max"].as_f64().unwrap_or(0.0),
            n["visible_docs_at_last_query"]
        );
        let v = &n["visibility"];
        let f = |x: &Json| x.as_f64().map_or("-".to_string(), |us| format!("{us:.0}"));
        eprintln!(
            "  ingest-to-visible: {} docs timed, {} not visible during run; p50 {} us, p99 {} us, p99.9 {} us, \
             max {} us, mean {} us",
            v["docs_measured"],
            v["not_visible_during_run"],
            f(&v["p50_us"]),
            f(&v["p99_us"]),
            f(&v["p999_us"]),
            f(&v["max_us"]),
            f(&v["mean_us"])
        );
    }
    if let Some(s) = out.get("open_seconds").and_then(|s| s.as_f64()) {
        eprintln!("  open after restart: {:.1} ms", s * 1e3);
    }
    eprintln!(
        "  {:<12} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "category", "n", "mean_us", "p50_us", "p90_us", "p99_us"
    );
    if let Some(Json::Object(cats)) = out.get("categories") {
        for (name, v) in cats {
            let mut l: Vec<f64> = v["latencies_us"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default();
            l.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let mean = if l.is_empty() { 0.0 } else { l.iter().sum::<f64>() / l.len() as f64 };
            eprintln!(
                "  {:<12} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                name,
                l.len(),
                mean,
                percentile(&l, 50.0),
                percentile(&l, 90.0),
                percentile(&l, 99.0)
            );
        }
    }
}
