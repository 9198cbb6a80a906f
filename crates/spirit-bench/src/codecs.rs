//! `spirit-bench codecs`: seed 004's codec study on our data. The documents' `body` field is analyzed as the
//! engine analyzes it, every term's doc ids become a list of gaps, and each codec of
//! `spirit::codec::family` encodes every list. Reported per codec: bytes per posting and bits per doc id over
//! all lists, decoding speed over all lists, and the query workloads (L, M, H, LL, MM, HH by default)
//! evaluated on decoded lists — each query decodes its terms' whole lists and counts the matches (a single
//! term: the list; an AND: a merge intersection). That isolates the codec: no skipping, no scoring, no
//! engine. Each measurement reads the encoded lists from two copies: the DRAM copy (anonymous memory) and
//! the persistent copy (written into a `spirit::memory::PersistentHeap` file, made durable, and read through
//! its mapping — on a machine without persistent memory that is the page cache).
//!
//! `--engine` measures the engine instead: for each [`DocCodec`] a spirit index of the documents with `body`
//! mapped to it (`postings_codec`), its size, and the workloads' top-10 BM25 QPS through `Index::search`
//! (skipping, block-max, scoring: the real query path), first on the segment images' DRAM copies right
//! after ingest, then after a close and reopen on the one compacted image read from the persistent heap.

use crate::input;
use serde_json::json;
use spirit::analysis::Analyzer;
use spirit::codec::family::{all_codecs, decode_list, GapCodec};
use spirit::codec::DocCodec;
use spirit::memory::{BarrierChoice, PersistentHeap};
use spirit::{Engine, EngineConfig, Index, SearchOptions};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct CodecArgs {
    /// luceneutil line file (.gz allowed).
    #[arg(long)]
    docs: PathBuf,
    /// Only the first N documents.
    #[arg(long)]
    max_docs: Option<usize>,
    /// luceneutil task file.
    #[arg(long)]
    tasks: PathBuf,
    /// First N distinct queries of each category.
    #[arg(long, default_value_t = 100)]
    queries_per_category: usize,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "LowTerm,MedTerm,HighTerm,AndLowLow,AndMedMed,AndHighHigh"
    )]
    categories: Vec<String>,
    /// Timed rounds (the best is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measure the engine per postings codec (index size, QPS from the DRAM and the persistent copy)
    /// instead of the codecs on decoded lists.
    #[arg(long)]
    engine: bool,
}

/// The encoded lists of one codec: one buffer, and per term (offset, postings).
struct Encoded {
    bytes: Vec<u8>,
    at: HashMap<String, (usize, usize)>,
}

fn best_of(rounds: usize, mut f: impl FnMut() -> u64) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut out = 0;
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        out = std::hint::black_box(f());
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

/// Doc ids of a term, decoded from `src` (gaps to ids).
fn doc_ids(codec: &dyn GapCodec, src: &[u8], n: usize, out: &mut Vec<u32>) {
    decode_list(codec, src, n, out).expect("decode");
    let mut prev: Option<u32> = None;
    for g in out.iter_mut() {
        let d = prev.map_or(*g, |p| p + *g + 1);
        *g = d;
        prev = Some(d);
    }
}

fn count_and(a: &[u32], b: &[u32]) -> u64 {
    let (mut i, mut j, mut n) = (0, 0, 0u64);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        n += (x == y) as u64;
        i += (x <= y) as usize;
        j += (y <= x) as usize;
    }
    n
}

pub fn run(a: CodecArgs) {
    if a.engine {
        return engine(a);
    }
    let docs = input::load_docs(&a.docs, a.max_docs).expect("docs");
    let cats = input::load_tasks(&a.tasks, Some(&a.categories), a.queries_per_category).expect("tasks");
    let analyzer = Analyzer::new(Default::default());
    // Posting lists of `body`, doc ids in order.
    let t = Instant::now();
    let mut lists: HashMap<String, Vec<u32>> = HashMap::new();
    for (i, d) in docs.iter().enumerate() {
        analyzer.analyze(&d.body, &mut |tok, _| {
            let l = lists.entry(tok.to_string()).or_default();
            if l.last() != Some(&(i as u32)) {
                l.push(i as u32);
            }
        });
    }
    let postings: usize = lists.values().map(Vec::len).sum();
    eprintln!(
        "{} docs, {} terms, {postings} postings ({:.1} s)",
        docs.len(),
        lists.len(),
        t.elapsed().as_secs_f64()
    );
    // Queries: each a list of terms (`+a +b` is an AND; a single term is a term query).
    let queries: Vec<(String, Vec<Vec<String>>)> = cats
        .iter()
        .map(|c| {
            let qs = c
                .queries
                .iter()
                .map(|q| analyzer.analyze_to_vec(&q.replace('+', " ")).into_iter().map(|t| t.0).collect())
                .collect();
            (c.name.clone(), qs)
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut out = vec![];
    println!(
        "| codec | bytes/posting | bits/doc id | encode M postings/s | copy | decode M postings/s | {} |",
        queries.iter().map(|(c, _)| format!("{c} QPS")).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|---:|---:|---:|---|---:|{}", queries.iter().map(|_| "---:|").collect::<String>());
    for (ci, codec) in all_codecs().iter().enumerate() {
        let codec = codec.as_ref();
        let t = Instant::now();
        let mut enc = Encoded { bytes: vec![], at: HashMap::new() };
        let mut gaps = vec![];
        for (term, ids) in &lists {
            gaps.clear();
            let mut prev: Option<u32> = None;
            gaps.extend(ids.iter().map(|&d| {
                let g = prev.map_or(d, |p| d - p - 1);
                prev = Some(d);
                g
            }));
            let off = enc.bytes.len();
            codec.encode(&gaps, &mut enc.bytes);
            enc.at.insert(term.clone(), (off, ids.len()));
        }
        let encode_rate = postings as f64 / t.elapsed().as_secs_f64() / 1e6;
        let bpp = enc.bytes.len() as f64 / postings as f64;
        // The persistent copy: the same bytes in a persistent heap, durable, read through its mapping.
        let heap = PersistentHeap::create(
            &dir.path().join(format!("codec-{ci}.heap")),
            enc.bytes.len() as u64 + (64 << 20),
            BarrierChoice::Auto,
        )
        .expect("persistent heap");
        let off = heap.alloc_copy(&enc.bytes).expect("alloc");
        heap.persist_all().expect("persist");
        let copies: [(&str, &[u8]); 2] =
            [("DRAM", &enc.bytes), ("persistent", heap.slice(off, enc.bytes.len()))];
        for (copy, bytes) in copies {
            let mut buf = vec![];
            let (secs, n) = best_of(a.rounds, || {
                let mut total = 0u64;
                for &(o, n) in enc.at.values() {
                    decode_list(codec, &bytes[o..], n, &mut buf).expect("decode");
                    total += buf.len() as u64;
                }
                total
            });
            assert_eq!(n as usize, postings, "{}: every posting decodes", codec.name());
            let decode_rate = postings as f64 / secs / 1e6;
            let mut qps = vec![];
            for (cat, qs) in &queries {
                let (mut x, mut y) = (vec![], vec![]);
                let (secs, _) = best_of(a.rounds, || {
                    let mut matches = 0u64;
                    for q in qs {
                        let at = |t: &String| enc.at.get(t).copied();
                        match q.as_slice() {
                            [t] => {
                                if let Some((o, n)) = at(t) {
                                    doc_ids(codec, &bytes[o..], n, &mut x);
                                    matches += x.len() as u64;
                                }
                            }
                            [t, u, ..] => {
                                if let (Some((o1, n1)), Some((o2, n2))) = (at(t), at(u)) {
                                    doc_ids(codec, &bytes[o1..], n1, &mut x);
                                    doc_ids(codec, &bytes[o2..], n2, &mut y);
                                    matches += count_and(&x, &y);
                                }
                            }
                            [] => {}
                        }
                    }
                    matches
                });
                qps.push((cat.clone(), qs.len() as f64 / secs));
            }
            println!(
                "| {} | {:.3} | {:.2} | {:.0} | {copy} | {:.0} | {} |",
                codec.name(),
                bpp,
                bpp * 8.0,
                encode_rate,
                decode_rate,
                qps.iter().map(|(_, q)| format!("{q:.0}")).collect::<Vec<_>>().join(" | ")
            );
            out.push(json!({
                "codec": codec.name(), "copy": copy, "bytes_per_posting": bpp, "bits_per_doc_id": bpp * 8.0,
                "encode_mpostings_per_s": encode_rate, "decode_mpostings_per_s": decode_rate,
                "qps": qps.iter().map(|(c, q)| (c.clone(), json!(q))).collect::<serde_json::Map<_, _>>(),
            }));
        }
    }
    if let Some(p) = a.json {
        let doc = json!({"docs": docs.len(), "terms": lists.len(), "postings": postings, "results": out});
        std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).expect("write json");
    }
}

/// Top-10 BM25 QPS of each category (one query thread, best of `rounds` passes after a warm-up pass).
fn time_queries(index: &Index, cats: &[input::Category], rounds: usize) -> Vec<(String, f64)> {
    let opts =
        SearchOptions { limit: 10, fetch: false, track_total: false, cache: false, ..Default::default() };
    cats.iter()
        .map(|c| {
            for q in &c.queries {
                std::hint::black_box(index.search(q, &opts).expect("query"));
            }
            let (secs, _) = best_of(rounds, || {
                for q in &c.queries {
                    std::hint::black_box(index.search(q, &opts).expect("query"));
                }
                0
            });
            (c.name.clone(), c.queries.len() as f64 / secs)
        })
        .collect()
}

/// The engine per postings codec (`--engine`).
fn engine(a: CodecArgs) {
    let docs = input::load_docs(&a.docs, a.max_docs).expect("docs");
    let cats = input::load_tasks(&a.tasks, Some(&a.categories), a.queries_per_category).expect("tasks");
    let raw: usize = docs.iter().map(|d| d.bytes()).sum();
    println!(
        "| codec | index MB after close | copy | {} |",
        cats.iter().map(|c| format!("{} QPS", c.name)).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|---:|---|{}", cats.iter().map(|_| "---:|").collect::<String>());
    let mut out = vec![];
    for codec in DocCodec::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = EngineConfig::default();
        let mappings = json!({"properties": {"body": {"type": "text", "postings_codec": codec.name()}}});
        let engine = Engine::open(dir.path(), cfg.clone()).expect("open");
        let index = engine.create_index("bench", Some(&mappings), None).expect("create");
        let t = Instant::now();
        for (ci, chunk) in docs.chunks(4096).enumerate() {
            let r =
                index.add_bulk(chunk.iter().enumerate().map(|(i, d)| d.json(ci * 4096 + i))).expect("add");
            assert!(r.iter().all(|x| x.is_ok()), "every document indexes");
        }
        index.wait_idle().expect("pipeline");
        let ingest = t.elapsed().as_secs_f64();
        index.set_default_fields(Some(vec!["body".into()])).expect("body field");
        let segments: usize = index.stats().shard.segments.values().sum();
        let dram = time_queries(&index, &cats, a.rounds);
        drop(index);
        engine.close().expect("close");
        drop(engine);
        let engine = Engine::open(dir.path(), cfg).expect("reopen");
        let index = engine.index("bench").expect("index");
        let bytes = index.stats().shard.persistent.used;
        let pers = time_queries(&index, &cats, a.rounds);
        drop(index);
        engine.close().expect("close");
        eprintln!("{}: ingest {ingest:.1} s", codec.name());
        let dram_copy = format!("DRAM copies ({segments} segments after ingest)");
        for (copy, qps) in [(dram_copy.as_str(), &dram), ("persistent (one compacted image)", &pers)] {
            println!(
                "| {} | {:.1} | {copy} | {} |",
                codec.name(),
                bytes as f64 / 1e6,
                qps.iter().map(|(_, q)| format!("{q:.0}")).collect::<Vec<_>>().join(" | ")
            );
            out.push(json!({
                "codec": codec.name(), "copy": copy, "index_bytes": bytes, "raw_bytes": raw,
                "qps": qps.iter().map(|(c, q)| (c.clone(), json!(q))).collect::<serde_json::Map<_, _>>(),
            }));
        }
    }
    if let Some(p) = a.json {
        let doc = json!({"docs": docs.len(), "engine": true, "results": out});
        std::fs::write(&p, serde_json::to_string_pretty(&doc).unwrap()).expect("write json");
    }
}
