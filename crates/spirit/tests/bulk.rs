//! The bulk loader answers exactly like streaming `add` calls: the same input lines go to one index through
//! `bulk_load` (many threads, tiny blocks so lines straddle block ends) and to another one line at a time,
//! and every query kind must return the same documents with bit-identical scores, the same insertion order
//! (`seq`) and the same totals; the same lines must be rejected, with their line numbers. Inputs mix
//! updates (repeated `_id`s), generated ids, dynamically mapped fields and bad lines of every kind.

mod common;

use common::mappings;
use spirit::formats::Format;
use spirit::{
    bulk_load, AddResult, BulkObserver, BulkOptions, BulkProgress, Durability, Error, Index, IndexSettings,
    SearchOptions, ShardConfig, Sort,
};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

const MAX_DOC: usize = 4000;

fn open(dir: &Path, shards: usize, durability: Durability) -> Index {
    let cfg = ShardConfig {
        dram_budget: shards * (8 << 20),
        persistent_budget: 1 << 30,
        fresh_segment_bytes: Some(shards * (256 << 10)),
        max_docs_per_segment: 40,
        durability,
        ..Default::default()
    }
    // The loader's own layout (2 MiB fresh segments while it runs; at most 40 documents each all the same).
    .with_bulk_arenas();
    let settings =
        IndexSettings { number_of_shards: shards, max_document_bytes: MAX_DOC, ..Default::default() };
    Index::open("t", dir, cfg, Some(&mappings()), Some(settings)).unwrap()
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn words(&mut self, max: u64) -> String {
        let n = self.below(max + 1);
        (0..n).map(|_| format!("w{}", self.below(25))).collect::<Vec<_>>().join(" ")
    }
}

/// JSON lines with every kind of content the loader must handle in order.
fn jsonl_input(seed: u64, n: usize) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    let mut out = Vec::new();
    for i in 0..n {
        let line: Vec<u8> = match r.below(40) {
            0 => b"{not json".to_vec(),
            1 => b"[1, 2]".to_vec(),
            2 => br#"{"_id": "", "body": "empty id"}"#.to_vec(),
            3 => format!(r#"{{"n": "not a number {i}", "body": "w1"}}"#).into_bytes(),
            4 => b"   ".to_vec(),
            5 => vec![b'{', 0xff, 0xfe, b'}'],
            6 => format!(r#"{{"body": "{}"}}"#, "w3 ".repeat(MAX_DOC / 3)).into_bytes(), // too large
            7 if r.below(4) == 0 => {
                // Much larger than a block and than the limit plus slack: skipped as it streams by.
                format!(r#"{{"body": "{}"}}"#, "w4 ".repeat(40_000)).into_bytes()
            }
            8 => format!(
                r#"{{"_id": "d{}", "extra": "dynamic w{} field", "n": {i}}}"#,
                r.below(60),
                r.below(5)
            )
            .into_bytes(),
            _ => {
                let id = match r.below(3) {
                    0 => String::new(),
                    _ => format!(r#""_id": "d{}", "#, r.below(60)),
                };
                format!(
                    r#"{{{id}"title": "{}", "body": "{}", "tag": "t{}", "n": {i}}}"#,
                    r.words(3),
                    r.words(12),
                    r.below(4)
                )
                .into_bytes()
            }
        };
        out.extend_from_slice(&line);
        out.extend_from_slice(if r.below(10) == 0 { b"\r\n" } else { b"\n" });
    }
    out
}

/// The streaming reference: one line at a time through `add`, as a client would. Returns the rejected lines.
fn stream(index: &Index, input: &[u8], format: Format) -> Vec<u64> {
    let mut rejected = vec![];
    for (i, raw) in input.split(|&b| b == b'\n').enumerate() {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let r = match format {
            Format::Jsonl => index.parse_json(line).and_then(|d| index.add(d)),
            Format::Lines => match std::str::from_utf8(line) {
                Err(e) => Err(Error::BadDocument(e.to_string())),
                Ok(s) => match spirit::formats::parse_lines_doc(s) {
                    Ok(None) => continue,
                    Ok(Some(d)) => index.add(d),
                    Err(e) => Err(e),
                },
            },
        };
        match r {
            Ok(_) => {}
            Err(e) if spirit::bulk::is_document_error(&e) => rejected.push(i as u64 + 1),
            Err(e) => panic!("line {}: {e}", i + 1),
        }
    }
    rejected
}

#[derive(Default)]
struct Recorder {
    rejected: Mutex<Vec<u64>>,
    acked: Mutex<Vec<String>>,
    progress: Mutex<Vec<BulkProgress>>,
    stop_after_blocks: Option<usize>,
    blocks: AtomicU64,
}

impl BulkObserver for Recorder {
    fn acknowledged(&self, added: &[AddResult]) {
        self.acked.lock().unwrap().extend(added.iter().map(|a| a.id.clone()));
    }
    fn rejected(&self, line: u64, _: &Error) {
        self.rejected.lock().unwrap().push(line);
    }
    fn progress(&self, p: &BulkProgress) {
        self.blocks.fetch_add(1, Relaxed);
        self.progress.lock().unwrap().push(*p);
    }
    fn should_stop(&self) -> bool {
        self.stop_after_blocks.is_some_and(|n| self.blocks.load(Relaxed) as usize >= n)
    }
}

/// Hits as (source, score bits, insertion order), and the total when counting is asked for (without it,
/// whether and how far a query counts depends on how documents fall into segments and shards).
type Answer = (Vec<(Vec<u8>, u32, u64)>, Option<u64>);

fn answer(index: &Index, q: &str, opts: &SearchOptions) -> Answer {
    let r = index.search(q, opts).unwrap();
    (
        r.hits.iter().map(|h| (h.source.clone(), h.score.to_bits(), h.seq)).collect(),
        opts.track_total.then_some(r.total),
    )
}

fn assert_same_answers(a: &Index, b: &Index, ctx: &str) {
    let n = a.schema().field_id("n").unwrap();
    let opts = [
        SearchOptions { limit: 10, ..Default::default() },
        SearchOptions { limit: 10, track_total: false, ..Default::default() },
        SearchOptions { limit: 7, sort: Sort::Newest, ..Default::default() },
        SearchOptions { limit: 5, sort: Sort::Field { field: n, descending: true }, ..Default::default() },
    ];
    let queries = [
        "w1",
        "w2 w7",
        "+w3 +w5",
        "\"w1 w2\"",
        "title:w4",
        "tag:t1",
        "n:[10 TO 200]",
        "extra:dynamic",
        "w1 -w2",
    ];
    for q in queries {
        for (j, o) in opts.iter().enumerate() {
            let (x, y) = (answer(a, q, o), answer(b, q, o));
            if x != y {
                let show = |a: &Answer| {
                    a.0.iter()
                        .map(|(s, sc, q)| {
                            format!("{} {} {q}", String::from_utf8_lossy(s), f32::from_bits(*sc))
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                panic!(
                    "{ctx}: query {q:?}, options #{j}:\n{}\n{:?}\n--- vs\n{}\n{:?}",
                    show(&x),
                    x.1,
                    show(&y),
                    y.1
                );
            }
        }
    }
    assert_eq!(
        a.stats().shard_docs.iter().sum::<u64>(),
        b.stats().shard_docs.iter().sum::<u64>(),
        "{ctx}: live documents"
    );
    for i in 0..60 {
        let id = format!("d{i}");
        assert_eq!(a.get(&id).unwrap(), b.get(&id).unwrap(), "{ctx}: get {id}");
    }
}

#[test]
fn bulk_load_answers_exactly_like_streaming_adds() {
    for (seed, shards, threads, block) in
        [(7, 1, 1, 1 << 20), (11, 1, 3, 64), (13, 2, 2, 700), (17, 2, 3, 97), (19, 1, 2, 4096)]
    {
        let ctx = format!("seed {seed}, {shards} shards, {threads} threads, {block}-byte blocks");
        let input = jsonl_input(seed, 400);
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let streamed = open(d1.path(), shards, Durability::Volatile);
        let expected_rejects = stream(&streamed, &input, Format::Jsonl);
        let bulk = open(d2.path(), shards, Durability::Volatile);
        let rec = Recorder::default();
        let opts = BulkOptions { format: Format::Jsonl, threads, block_bytes: block, ..Default::default() };
        let p = bulk_load(&bulk, &mut &input[..], &opts, &rec).unwrap();
        assert_eq!(*rec.rejected.lock().unwrap(), expected_rejects, "{ctx}: rejected lines");
        assert!(!expected_rejects.is_empty(), "{ctx}: the input has bad lines");
        assert_eq!(p.rejected as usize, expected_rejects.len(), "{ctx}");
        assert_eq!(p.bytes, input.len() as u64, "{ctx}: every byte consumed");
        assert_eq!(p.lines, 400, "{ctx}: every line counted");
        assert_eq!(rec.acked.lock().unwrap().len() as u64, p.docs, "{ctx}: every insert acknowledged");
        let progress = rec.progress.lock().unwrap();
        assert!(progress.windows(2).all(|w| w[0].lines < w[1].lines), "{ctx}: progress in order");
        assert_eq!(progress.last(), Some(&p), "{ctx}");
        assert_same_answers(&streamed, &bulk, &ctx);
        // And after the pipeline has turned everything into segments and merged them.
        for i in [&streamed, &bulk] {
            i.seal().unwrap();
            i.wait_idle().unwrap();
            i.force_merge(1).unwrap();
        }
        assert_same_answers(&streamed, &bulk, &format!("{ctx}, merged"));
    }
}

/// `jsonl_input` without `_id`s: every document's is generated, so a one-shard load inserts its blocks as
/// batches, term by term (`Index::insert_batch`).
fn generated_ids_input(seed: u64, n: usize) -> Vec<u8> {
    let input = String::from_utf8_lossy(&jsonl_input(seed, n)).into_owned();
    let mut out = String::new();
    for line in input.split_inclusive('\n') {
        match line.find(r#""_id": ""#) {
            Some(at) => {
                let end = at + 8 + line[at + 8..].find('"').unwrap() + 1;
                let end = end + line[end..].find(|c: char| c != ',' && c != ' ').unwrap_or(0);
                out.push_str(&line[..at]);
                out.push_str(&line[end..]);
            }
            None => out.push_str(line),
        }
    }
    // The bad UTF-8 line is lost to the lossy round trip; put one back.
    out.push_str("{\"body\": \"w1\"}\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&[b'{', 0xff, b'}', b'\n']);
    bytes
}

/// Blocks of generated-id documents go in as batches (one shard): the same answers as streaming `add` calls —
/// with bad lines among them; with segments that fill by their document limit (40) or, in bulk arenas, by
/// their bytes, so that a batch that might not fit seals the segment and goes one by one into the next; with
/// documents over the size limit of a real-time arena among them (the block goes in one by one, with the
/// `_id`s drawn for it); and in crash-safe mode after a restart.
#[test]
fn batched_blocks_answer_exactly_like_streaming_adds() {
    for (seed, threads, block, durability) in [
        (37, 2, 300, Durability::Volatile),
        (41, 3, 1200, Durability::Volatile),
        (43, 2, 4096, Durability::CrashSafe),
    ] {
        let ctx = format!("seed {seed}, {threads} threads, {block}-byte blocks, {durability:?}");
        let input = generated_ids_input(seed, 500);
        assert!(!String::from_utf8_lossy(&input).contains("_id"), "{ctx}: no _id left");
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let streamed = open(d1.path(), 1, Durability::Volatile);
        let expected_rejects = stream(&streamed, &input, Format::Jsonl);
        assert!(expected_rejects.len() > 10, "{ctx}: the input has bad lines");
        let bulk = open(d2.path(), 1, durability);
        let rec = Recorder::default();
        let opts = BulkOptions { format: Format::Jsonl, threads, block_bytes: block, ..Default::default() };
        let p = bulk_load(&bulk, &mut &input[..], &opts, &rec).unwrap();
        assert_eq!(*rec.rejected.lock().unwrap(), expected_rejects, "{ctx}: rejected lines");
        assert_eq!(rec.acked.lock().unwrap().len() as u64, p.docs, "{ctx}: every insert acknowledged");
        assert_same_answers(&streamed, &bulk, &ctx);
        let bulk = if durability == Durability::CrashSafe {
            bulk.close().unwrap();
            drop(bulk);
            open(d2.path(), 1, durability)
        } else {
            bulk
        };
        assert_same_answers(&streamed, &bulk, &format!("{ctx}, reopened"));
    }
    // Large arenas that fill by their bytes (the default document limit per segment).
    let cfg = arena_config();
    let mut r = Rng(47);
    let mut input = Vec::new();
    // ~3,000 distinct terms: more than a 256 KiB arena's term table takes (as in the test below).
    let big = (0..3000).map(|i| format!("t{i}")).collect::<Vec<_>>().join(" ");
    for i in 0..3000 {
        let body = if i % 1000 == 500 { big.clone() } else { r.words(60) };
        input.extend_from_slice(format!(r#"{{"body": "{body}", "n": {}}}"#, r.below(1000)).as_bytes());
        input.push(b'\n');
    }
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let streamed = Index::open("t", d1.path(), cfg.clone(), Some(&mappings()), None).unwrap();
    assert_eq!(stream(&streamed, &input, Format::Jsonl), [501, 1501, 2501]);
    let bulk = Index::open("t", d2.path(), cfg, Some(&mappings()), None).unwrap();
    let opts = BulkOptions { format: Format::Jsonl, threads: 2, block_bytes: 8192, ..Default::default() };
    let rec = Recorder::default();
    assert_eq!(bulk_load(&bulk, &mut &input[..], &opts, &rec).unwrap().docs, 2997);
    assert_eq!(*rec.rejected.lock().unwrap(), [501, 1501, 2501]);
    bulk.wait_idle().unwrap();
    assert!(bulk.stats().shard.flushes >= 2, "the load outgrew one bulk arena");
    assert_same_answers(&streamed, &bulk, "bulk arenas, batches");
}

#[test]
fn line_files_with_header_crlf_and_bad_lines() {
    let mut input = b"FIELDS_HEADER_INDICATOR###\ttitle\tdate\tbody\n".to_vec();
    for i in 0..300 {
        match i % 50 {
            10 => input.extend_from_slice(b"no tabs in this line\n"),
            20 => input.extend_from_slice(b"bad\t\xff\xfe\tutf8\n"),
            _ => input.extend_from_slice(
                format!("T{i}\t2015-05-2{}\tbody w{} w{}\r\n", i % 9, i % 7, i % 3).as_bytes(),
            ),
        }
    }
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let streamed = open(d1.path(), 1, Durability::Volatile);
    let expected_rejects = stream(&streamed, &input, Format::Lines);
    assert_eq!(expected_rejects.len(), 12);
    let bulk = open(d2.path(), 1, Durability::Volatile);
    let rec = Recorder::default();
    let opts = BulkOptions { format: Format::Lines, threads: 2, block_bytes: 333, ..Default::default() };
    let p = bulk_load(&bulk, &mut &input[..], &opts, &rec).unwrap();
    assert_eq!(p.docs, 288);
    assert_eq!(*rec.rejected.lock().unwrap(), expected_rejects);
    assert_eq!(bulk.count("body").unwrap(), 288);
    assert_same_answers(&streamed, &bulk, "line file");
}

#[test]
fn limit_and_stop_load_a_prefix_of_the_input() {
    let input = jsonl_input(23, 300);
    let d = tempfile::tempdir().unwrap();
    let full = open(d.path(), 1, Durability::Volatile);
    let all = bulk_load(&full, &mut &input[..], &BulkOptions { block_bytes: 200, ..Default::default() }, &())
        .unwrap();
    for limit in [0u64, 1, 17] {
        let d = tempfile::tempdir().unwrap();
        let index = open(d.path(), 2, Durability::Volatile);
        let rec = Recorder::default();
        let opts = BulkOptions { limit, threads: 2, block_bytes: 200, ..Default::default() };
        let p = bulk_load(&index, &mut &input[..], &opts, &rec).unwrap();
        assert_eq!(p.docs, limit);
        assert_eq!(rec.acked.lock().unwrap().len() as u64, limit);
    }
    // One shard and generated `_id`s (blocks analyzed and grouped together): a limit inside a block inserts
    // its first documents one by one, as streaming adds of the first `limit` lines would.
    let generated = generated_ids_input(47, 200);
    for limit in [1u64, 9, 40] {
        let lines: Vec<&[u8]> = generated.split_inclusive(|&b| b == b'\n').collect();
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let streamed = open(d1.path(), 1, Durability::Volatile);
        let mut taken = 0;
        for l in &lines {
            if taken == limit {
                break;
            }
            let blank = l.iter().all(u8::is_ascii_whitespace);
            if stream(&streamed, l, Format::Jsonl).is_empty() && !blank {
                taken += 1;
            }
        }
        assert_eq!(taken, limit);
        let index = open(d2.path(), 1, Durability::Volatile);
        let opts =
            BulkOptions { format: Format::Jsonl, limit, threads: 2, block_bytes: 1500, ..Default::default() };
        let p = bulk_load(&index, &mut &generated[..], &opts, &()).unwrap();
        assert_eq!(p.docs, limit);
        assert_same_answers(&streamed, &index, &format!("limit {limit}"));
    }
    // An observer that stops after two blocks: at most the blocks already read go in, never the whole input.
    let d = tempfile::tempdir().unwrap();
    let index = open(d.path(), 1, Durability::Volatile);
    let rec = Recorder { stop_after_blocks: Some(2), ..Default::default() };
    let opts = BulkOptions { threads: 2, block_bytes: 200, ..Default::default() };
    let p = bulk_load(&index, &mut &input[..], &opts, &rec).unwrap();
    assert!(p.docs > 0 && p.docs < all.docs, "stopped early: {} of {}", p.docs, all.docs);
    let lines = p.lines;
    assert!(lines < 300);
    // What went in is exactly the first documents of the input: the n values are all below the stop line.
    let res = index.search(&format!("n:[{lines} TO 100000]"), &SearchOptions::default()).unwrap();
    assert_eq!(res.total, 0, "nothing past the last line consumed");
}

#[test]
fn crash_safe_bulk_load_acknowledges_in_input_order() {
    let input = jsonl_input(29, 250);
    let d = tempfile::tempdir().unwrap();
    let index = open(d.path(), 2, Durability::CrashSafe);
    let rec = Recorder::default();
    let opts = BulkOptions { threads: 2, block_bytes: 500, sync_every: 7, ..Default::default() };
    let p = bulk_load(&index, &mut &input[..], &opts, &rec).unwrap();
    let acked = rec.acked.into_inner().unwrap();
    assert_eq!(acked.len() as u64, p.docs);
    // The explicit ids, acknowledged in input order (generated ones differ between indexes by their prefix).
    let explicit: Vec<String> = input
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter(|v| v.get("n").is_none_or(|n| n.is_i64()) && v.to_string().len() < MAX_DOC)
        .filter_map(|v| v.get("_id").and_then(|i| i.as_str()).filter(|i| !i.is_empty()).map(String::from))
        .collect();
    let acked_explicit: Vec<String> = acked.iter().filter(|i| i.starts_with('d')).cloned().collect();
    assert_eq!(acked_explicit, explicit);
    index.close().unwrap();
    drop(index);
    let index = open(d.path(), 2, Durability::CrashSafe);
    let streamed_dir = tempfile::tempdir().unwrap();
    let streamed = open(streamed_dir.path(), 2, Durability::Volatile);
    stream(&streamed, &input, Format::Jsonl);
    assert_same_answers(&streamed, &index, "crash-safe, reopened");
}

#[test]
fn a_panic_in_the_ordered_stage_fails_the_load_instead_of_hanging_it() {
    struct PanicsOnSecondBlock(AtomicU64);
    impl BulkObserver for PanicsOnSecondBlock {
        fn progress(&self, _: &BulkProgress) {
            if self.0.fetch_add(1, Relaxed) == 1 {
                panic!("observer bug");
            }
        }
    }
    let input = jsonl_input(31, 300);
    let d = tempfile::tempdir().unwrap();
    let index = open(d.path(), 1, Durability::Volatile);
    let opts = BulkOptions { threads: 3, block_bytes: 200, ..Default::default() };
    let e = bulk_load(&index, &mut &input[..], &opts, &PanicsOnSecondBlock(AtomicU64::new(0))).unwrap_err();
    assert!(e.to_string().contains("panicked"), "{e}");
    // The index stays usable: what went in before the failure is searchable, and a new load works.
    let before = index.count("w1").unwrap();
    bulk_load(&index, &mut &input[..], &opts, &()).unwrap();
    assert!(index.count("w1").unwrap() >= before);
}

/// 256 KiB real-time arenas, 2 MiB bulk arenas.
fn arena_config() -> ShardConfig {
    ShardConfig {
        dram_budget: 16 << 20,
        fresh_segment_bytes: Some(256 << 10),
        bulk_segment_bytes: Some(2 << 20),
        ..Default::default()
    }
}

/// A bulk load fills few, large fresh segments (`ShardConfig::bulk_segment_bytes`) where streaming adds of
/// the same documents fill many small ones, answers the same, and hands the shard back with a fresh segment
/// of the real-time size: the bulk-sized one it ended in is sealed, and later adds go to a small arena.
#[test]
fn bulk_loads_fill_large_segments_and_end_with_a_small_one() {
    let cfg = arena_config();
    assert_eq!((cfg.fresh_bytes(), cfg.bulk_fresh_bytes()), (256 << 10, 2 << 20));
    let mut r = Rng(23);
    let mut input = Vec::new();
    for i in 0..3000 {
        input.extend_from_slice(format!(r#"{{"_id": "d{i}", "body": "{}"}}"#, r.words(40)).as_bytes());
        input.push(b'\n');
    }
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let streamed = Index::open("t", d1.path(), cfg.clone(), Some(&mappings()), None).unwrap();
    assert!(stream(&streamed, &input, Format::Jsonl).is_empty());
    let bulk = Index::open("t", d2.path(), cfg.clone(), Some(&mappings()), None).unwrap();
    let opts = BulkOptions { format: Format::Jsonl, threads: 2, block_bytes: 4096, ..Default::default() };
    assert_eq!(bulk_load(&bulk, &mut &input[..], &opts, &()).unwrap().docs, 3000);
    for i in [&streamed, &bulk] {
        i.seal().unwrap();
        i.wait_idle().unwrap();
    }
    let (s, b) = (streamed.stats().shard, bulk.stats().shard);
    // Every bulk segment is bulk-sized (the shard's first, empty fresh segment gave way to one); the last
    // holds what was left.
    assert!(
        s.flushes >= 4 * b.flushes.saturating_sub(1),
        "streamed {} flushes, bulk {}",
        s.flushes,
        b.flushes
    );
    assert!(b.flushes >= 2, "the load outgrew one bulk arena: {} flushes", b.flushes);
    // Only the current fresh segment holds short-term memory, and it has the real-time size (a flushed
    // arena returns to the ring once the last snapshot holding it is dropped: wait for that).
    let short_term = || bulk.stats().shard.dram.short_term_used;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while short_term() != cfg.fresh_bytes() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(short_term(), cfg.fresh_bytes());
    bulk.add(serde_json::json!({"_id": "late", "body": "w1 late"})).unwrap();
    assert_eq!(short_term(), cfg.fresh_bytes());
    streamed.add(serde_json::json!({"_id": "late", "body": "w1 late"})).unwrap();
    assert_same_answers(&streamed, &bulk, "bulk arenas");
}

/// The document limit is the real-time arena's whatever arena is current: a document that would fit a bulk
/// arena but not a real-time one is rejected by a bulk load as by `add`, and a shard left with an empty bulk
/// arena (sealed right at the load's end) rejects it too instead of sealing forever.
#[test]
fn the_document_limit_does_not_depend_on_the_arena() {
    let cfg = arena_config();
    // ~3,000 distinct terms: more than a 256 KiB arena's term table takes, far less than a 2 MiB one's.
    let big = (0..3000).map(|i| format!("t{i}")).collect::<Vec<_>>().join(" ");
    let mut input = Vec::new();
    // Line 451 comes after a real-time arena would have filled; the load runs in a bulk arena from its first
    // line (the index's first fresh segment is empty when it begins, so a bulk one replaces it).
    for i in 0..600 {
        let body = if i == 450 { big.clone() } else { format!("w{} w{}", i % 7, i % 11) };
        input.extend_from_slice(format!(r#"{{"_id": "d{i}", "body": "{body}"}}"#).as_bytes());
        input.push(b'\n');
    }
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let streamed = Index::open("t", d1.path(), cfg.clone(), Some(&mappings()), None).unwrap();
    assert_eq!(stream(&streamed, &input, Format::Jsonl), vec![451], "too large for a real-time arena");
    let bulk = Index::open("t", d2.path(), cfg, Some(&mappings()), None).unwrap();

    /// Seals after the last block, so the load ends in an empty bulk arena.
    struct SealAtEnd<'a>(&'a Index, Recorder);
    impl BulkObserver for SealAtEnd<'_> {
        fn rejected(&self, line: u64, e: &Error) {
            self.1.rejected(line, e);
        }
        fn progress(&self, p: &BulkProgress) {
            if p.lines == 600 {
                self.0.seal().unwrap();
            }
        }
    }
    let obs = SealAtEnd(&bulk, Recorder::default());
    let opts = BulkOptions { format: Format::Jsonl, threads: 2, block_bytes: 1 << 20, ..Default::default() };
    assert_eq!(bulk_load(&bulk, &mut &input[..], &opts, &obs).unwrap().docs, 599);
    bulk.wait_idle().unwrap();
    assert_eq!(bulk.stats().shard.flushes, 1, "one bulk arena held the whole load");
    assert_eq!(*obs.1.rejected.lock().unwrap(), vec![451]);
    // The current fresh segment is an empty bulk arena; the limit is still the real-time one.
    let doc = serde_json::json!({"_id": "late-big", "body": big});
    assert!(matches!(bulk.add(doc.clone()), Err(Error::DocumentTooLarge { .. })));
    assert!(matches!(streamed.add(doc), Err(Error::DocumentTooLarge { .. })));
    for i in [&streamed, &bulk] {
        i.add(serde_json::json!({"_id": "late", "body": "w1 late"})).unwrap();
    }
    assert_same_answers(&streamed, &bulk, "document limit");
}
