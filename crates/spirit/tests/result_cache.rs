//! The result cache (SPIRIT §4.11) never changes an answer: on the same pinned snapshot, a search through the
//! cache returns exactly (same documents, bit-identical scores, same sort values, same exact counts) what an
//! uncached evaluation returns — for every order (BM25, newest first, by a field), with documents arriving,
//! being deleted and updated, segments sealing, merging, compacting and being dropped by retention, and while
//! ingestion runs on another thread. The tests also check that the cache is really used (hits happen).

use proptest::prelude::*;
use spirit::query::{execute, execute_cached, parse, plan, SearchHits};
use spirit::{CompactionPolicy, Index, RetentionPolicy, SearchOptions, ShardConfig, Sort};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const QUERIES: &[&str] = &[
    "w1",
    "w0",
    "w2 w5",
    "w0 w1 w3",
    "+w1 +w3",
    "+w0 +w2 +w4",
    "\"w1 w2\"",
    "w1 -w2",
    "w1*",
    "n:[10 TO 40]",
    "*:*",
    "+w0 +n:[0 TO 50]",
    "w7 OR (+w0 +w1)",
];

/// A small Zipf-like vocabulary, so df and average length keep moving as documents arrive.
fn text(rng: &mut u64, len: usize) -> String {
    let mut words = vec![];
    for _ in 0..len {
        let r = next(rng) % 1000;
        // w0 is the most common; w29 rare.
        let w = ((r as f64 / 1000.0).powi(3) * 30.0) as u32;
        words.push(format!("w{w}"));
    }
    words.join(" ")
}

fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn doc(rng: &mut u64, id: u64) -> serde_json::Value {
    let len = 2 + (next(rng) % 12) as usize;
    if next(rng).is_multiple_of(5) {
        serde_json::json!({"_id": id.to_string(), "body": text(rng, len)})
    } else {
        serde_json::json!({"_id": id.to_string(), "body": text(rng, len), "n": (next(rng) % 60) as i64})
    }
}

fn mapping() -> serde_json::Value {
    serde_json::json!({"properties": {"body": {"type": "text"}, "n": {"type": "long"}}})
}

fn sort_of(index: &Index, i: u64) -> Sort {
    match i % 4 {
        0 | 1 => Sort::Score,
        2 => Sort::Newest,
        _ => index.field_sort("n", i % 8 == 3).unwrap(),
    }
}

/// Runs `q` through the cache and without it on one snapshot; panics on any difference.
fn compare(index: &Index, q: &str, opts: &SearchOptions) -> SearchHits {
    let snap = index.shard().pin();
    let node = plan(&parse(q).unwrap(), &index.schema(), &snap).unwrap();
    let cached = execute_cached(&snap, &node, opts, Some(index.shard().result_cache())).unwrap();
    let plain = execute(&snap, &node, opts).unwrap();
    let key = |h: &SearchHits| -> Vec<(u32, u32, Option<u64>)> {
        h.hits.iter().map(|d| (d.doc, d.score.to_bits(), d.sort_value.map(f64::to_bits))).collect()
    };
    assert_eq!(key(&cached), key(&plain), "query {q:?} {opts:?}");
    if opts.track_total {
        assert_eq!((cached.total, cached.total_exact), (plain.total, plain.total_exact), "count of {q:?}");
        assert!(cached.total_exact);
    }
    cached
}

fn opts(index: &Index, i: u64) -> SearchOptions {
    SearchOptions {
        limit: [1, 3, 10, 20][(i / 4 % 4) as usize],
        offset: (i / 16 % 3) as usize,
        sort: sort_of(index, i),
        track_total: (i / 48).is_multiple_of(2),
        fetch: false,
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add,
    Delete(u64),
    Update(u64),
    Seal,
    Merge,
    Compact,
    Search(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Add),
        1 => any::<u64>().prop_map(Op::Delete),
        1 => any::<u64>().prop_map(Op::Update),
        1 => Just(Op::Seal),
        1 => Just(Op::Merge),
        1 => Just(Op::Compact),
        6 => (0..QUERIES.len(), any::<u64>()).prop_map(|(q, o)| Op::Search(q, o)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn cached_answers_equal_uncached_ones(ops in prop::collection::vec(op(), 1..160), seed in 1u64..u64::MAX) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ShardConfig {
            dram_budget: 8 << 20,
            max_docs_per_segment: 6,
            result_cache_min_work: 0,
            compaction: CompactionPolicy { factor: 2, ..Default::default() },
            ..Default::default()
        };
        let index = Index::open("c", dir.path(), cfg, Some(&mapping()), None).unwrap();
        let (mut rng, mut next_id) = (seed, 0u64);
        for op in ops {
            match op {
                Op::Add => {
                    index.add(doc(&mut rng, next_id)).unwrap();
                    next_id += 1;
                }
                Op::Delete(i) if next_id > 0 => {
                    index.delete(&(i % next_id).to_string()).unwrap();
                }
                Op::Update(i) if next_id > 0 => {
                    index.add(doc(&mut rng, i % next_id)).unwrap();
                }
                Op::Seal => index.shard().seal().unwrap(),
                Op::Merge => index.shard().commit_and_merge_all().unwrap(),
                Op::Compact => index.shard().compact_now().unwrap(),
                Op::Search(q, o) => {
                    // Twice: the second run is the one most likely to hit.
                    compare(&index, QUERIES[q], &opts(&index, o));
                    compare(&index, QUERIES[q], &opts(&index, o));
                }
                _ => {}
            }
        }
    }
}

/// Ingestion (adds, updates, deletes, seals) on one thread while another compares cached and uncached answers
/// of a repeating query mix; `retention` makes the oldest segments disappear under the queries as well.
///
/// A snapshot pins segments, but the fresh segment's watermark and the delete bits are live, so two
/// evaluations of one snapshot can see different documents. The writer therefore takes `gate` for each
/// operation and the reader holds it for one comparison: ingestion interleaves with the queries operation by
/// operation, and the pipeline (seal, flush, engrave, commit, merge, compaction, retention) runs truly
/// concurrently with them.
fn concurrent(retention: RetentionPolicy) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig {
        dram_budget: 16 << 20,
        max_docs_per_segment: 200,
        result_cache_min_work: 0,
        compaction: CompactionPolicy { factor: 3, ..Default::default() },
        retention,
        ..Default::default()
    };
    let index = Arc::new(Index::open("c", dir.path(), cfg, Some(&mapping()), None).unwrap());
    let mut rng = 7u64;
    for i in 0..1500 {
        index.add(doc(&mut rng, i)).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(Mutex::new(()));
    let writer = {
        let (index, done, gate) = (index.clone(), done.clone(), gate.clone());
        std::thread::spawn(move || {
            let mut rng = 99u64;
            for i in 1500..6000u64 {
                let _g = gate.lock().unwrap();
                index.add(doc(&mut rng, i)).unwrap();
                match next(&mut rng) % 20 {
                    0 => {
                        index.delete(&(next(&mut rng) % i).to_string()).unwrap();
                    }
                    1 => {
                        let id = next(&mut rng) % i;
                        index.add(doc(&mut rng, id)).unwrap();
                    }
                    _ => {}
                }
                drop(_g);
                if i % 700 == 0 {
                    index.shard().compact_now().unwrap();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut runs = 0u64;
    let mut i = 0u64;
    while !done.load(Ordering::Acquire) || runs < 400 {
        let q = QUERIES[(i % QUERIES.len() as u64) as usize];
        let _g = gate.lock().unwrap();
        compare(&index, q, &opts(&index, i / 3));
        runs += 1;
        i += 1;
    }
    writer.join().unwrap();
    // Quiet index (compacted, so no background compaction changes the layout between repeats): repeats
    // must hit.
    index.shard().seal().unwrap();
    index.shard().compact_now().unwrap();
    for i in 0..QUERIES.len() as u64 * 2 {
        compare(&index, QUERIES[(i % QUERIES.len() as u64) as usize], &opts(&index, 0));
    }
    let before = index.shard().result_cache().stats();
    for i in 0..QUERIES.len() as u64 {
        compare(&index, QUERIES[i as usize], &opts(&index, 0));
    }
    let after = index.shard().result_cache().stats();
    assert_eq!(
        after.hits - before.hits,
        QUERIES.len() as u64,
        "every repeat on a quiet index hits: {after:?}"
    );
    assert!(after.hits > 50, "the cache answered during ingestion too: {after:?}");
    assert!(after.used_bytes <= after.capacity_bytes && after.entries > 0);
    let st = index.stats().shard;
    assert!(st.lifetime_dram_high_water <= st.dram.budget, "{st:?}");
    println!("{runs} comparisons, cache {after:?}");
}

#[test]
fn cached_answers_equal_uncached_ones_while_ingestion_runs() {
    concurrent(RetentionPolicy::default());
}

#[test]
fn cached_answers_equal_uncached_ones_while_retention_drops_segments() {
    concurrent(RetentionPolicy { max_age_secs: None, max_bytes: Some(400 << 10) });
}

#[test]
fn request_can_bypass_the_cache_and_the_cache_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(
        "c",
        dir.path(),
        ShardConfig { dram_budget: 8 << 20, result_cache_min_work: 0, ..Default::default() },
        None,
        None,
    )
    .unwrap();
    let mut rng = 3u64;
    for i in 0..300 {
        index.add(doc(&mut rng, i)).unwrap();
    }
    index.shard().seal().unwrap();
    index.shard().commit_and_merge_all().unwrap();
    let o = SearchOptions { cache: false, ..Default::default() };
    let a = index.search("w1 w2", &o).unwrap();
    let s = index.shard().result_cache().stats();
    assert_eq!((s.hits, s.misses, s.entries), (0, 0, 0), "cache: false neither reads nor fills");
    let b = index.search("w1 w2", &SearchOptions::default()).unwrap();
    let c = index.search("w1 w2", &SearchOptions::default()).unwrap();
    let s = index.shard().result_cache().stats();
    assert_eq!((s.hits, s.misses, s.entries), (1, 1, 1));
    assert!(s.hit_rate > 0.49 && s.hit_rate < 0.51);
    let ids = |r: &spirit::SearchResult| r.hits.iter().map(|h| (h.id.clone(), h.score)).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(ids(&b), ids(&c));
    assert_eq!((a.total, b.total, c.total), (a.total, a.total, a.total));
    // Newest first without a count stops early, and still leaves an entry that the repeat hits.
    let o = SearchOptions { sort: Sort::Newest, track_total: false, ..Default::default() };
    let first = index.search("w0", &o).unwrap();
    let again = index.search("w0", &o).unwrap();
    let s = index.shard().result_cache().stats();
    assert_eq!((s.hits, s.misses), (2, 2), "{s:?}");
    assert_eq!(ids(&first), ids(&again));

    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 8 << 20, result_cache_bytes: Some(0), ..Default::default() };
    let index = Index::open("c", dir.path(), cfg, Some(&mapping()), None).unwrap();
    index.add(doc(&mut rng, 0)).unwrap();
    index.search("w0", &SearchOptions::default()).unwrap();
    assert_eq!(index.shard().result_cache().stats().misses, 0);
    let st = index.stats().shard;
    assert_eq!(st.dram.budget, 8 << 20);

    // Cheap queries (fewer postings than result_cache_min_work) bypass the cache.
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 8 << 20, result_cache_min_work: 1000, ..Default::default() };
    let index = Index::open("c", dir.path(), cfg, Some(&mapping()), None).unwrap();
    for i in 0..300 {
        index.add(doc(&mut rng, i)).unwrap();
    }
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    index.search("w29", &SearchOptions::default()).unwrap();
    assert_eq!(index.shard().result_cache().stats().misses, 0, "a rare term is not worth an entry");
    index.search("*:*", &SearchOptions::default()).unwrap();
    index.search("w0 w1 w2 w3 w4 w5 w6 w7 w8 w9", &SearchOptions::default()).unwrap();
    assert_eq!(index.shard().result_cache().stats().misses, 0, "300 docs are under the threshold");
    let big = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 ".repeat(8);
    index.search(&big, &SearchOptions::default()).unwrap();
    assert_eq!(index.shard().result_cache().stats().misses, 1, "a query touching many postings is cached");
    let cfg = ShardConfig { dram_budget: 8 << 20, result_cache_bytes: Some(4 << 20), ..Default::default() };
    assert!(cfg.validate().is_err(), "the cache cannot take most of the budget");
}

/// Long multi-block lists and several segments: a pruned (track_total=false) search must not leave an entry
/// whose count a later exact search trusts; a compaction inside an entry's coverage (same statistics,
/// different clause order in the scorers) must not make the cached scores differ from a fresh evaluation; a
/// query on a snapshot pinned before a compaction and a delete must not use an entry made after them.
#[test]
fn pruned_counts_compaction_and_older_snapshots_never_leak_through_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig {
        dram_budget: 16 << 20,
        max_docs_per_segment: 1000,
        result_cache_min_work: 0,
        compaction: CompactionPolicy { factor: 0, ..Default::default() },
        ..Default::default()
    };
    let index = Index::open("c", dir.path(), cfg, Some(&mapping()), None).unwrap();
    let mut rng = 11u64;
    for i in 0..6000 {
        let len = 20 + (next(&mut rng) % 40) as usize;
        let body = text(&mut rng, len);
        index.add(serde_json::json!({"_id": i.to_string(), "body": body, "n": (i % 60) as i64})).unwrap();
    }
    index.shard().seal().unwrap();
    index.shard().commit_and_merge_all().unwrap();
    index.close().unwrap();
    drop(index);
    // Reopened with compaction on: nothing compacts until `compact_now` below.
    let cfg = ShardConfig {
        dram_budget: 16 << 20,
        max_docs_per_segment: 1000,
        result_cache_min_work: 0,
        compaction: CompactionPolicy { factor: 2, ..Default::default() },
        ..Default::default()
    };
    let index = Index::open("c", dir.path(), cfg, None, None).unwrap();
    let segments = |i: &Index| i.stats().shard.segments.values().sum::<usize>();
    let before_compaction = segments(&index);
    assert!(before_compaction >= 6, "{before_compaction}");
    let qs = ["w0", "w0 w1 w3", "w2 w5", "+w0 +w1", "w1 -w0", "\"w0 w1\""];
    for q in qs {
        for limit in [1, 10] {
            let pruned = SearchOptions { limit, track_total: false, fetch: false, ..Default::default() };
            let exact = SearchOptions { limit, track_total: true, fetch: false, ..Default::default() };
            compare(&index, q, &pruned);
            compare(&index, q, &exact); // asserts the exact count equals the uncached one
        }
    }
    // Older snapshot: pinned before a compaction and a delete.
    let old = index.shard().pin();
    let node_old = plan(&parse("w0").unwrap(), &index.schema(), &old).unwrap();
    let o = SearchOptions { limit: 10, track_total: false, fetch: false, ..Default::default() };
    let before = execute(&old, &node_old, &o).unwrap();
    index.shard().compact_now().unwrap();
    assert!(segments(&index) < before_compaction, "compaction ran inside the coverage");
    let best = before.hits[0].doc;
    let id = {
        let r = index
            .search("w0", &SearchOptions { limit: 1, track_total: false, cache: false, ..Default::default() })
            .unwrap();
        assert_eq!(r.hits[0].doc, best);
        r.hits[0].id.clone()
    };
    // Compaction inside the coverage: cached and fresh answers still agree bit for bit.
    for q in qs {
        compare(
            &index,
            q,
            &SearchOptions { limit: 10, track_total: false, fetch: false, ..Default::default() },
        );
        compare(
            &index,
            q,
            &SearchOptions { limit: 10, track_total: false, fetch: false, ..Default::default() },
        );
    }
    index.delete(&id).unwrap();
    index.shard().result_cache().clear();
    compare(&index, "w0", &o); // an entry made after the delete
    let via_cache = execute_cached(&old, &node_old, &o, Some(index.shard().result_cache())).unwrap();
    let plain = execute(&old, &node_old, &o).unwrap();
    let docs = |h: &SearchHits| h.hits.iter().map(|d| (d.doc, d.score.to_bits())).collect::<Vec<_>>();
    assert_eq!(docs(&via_cache), docs(&plain), "a query on the older snapshot");
}

/// A single term on an index taking documents is answered uncached once its entry's statistics moved
/// (re-scoring the entry's candidates costs what block-max costs to answer the term afresh), and nothing
/// replaces the entry then; once every document is sealed the entry serves again. Answers equal the
/// uncached ones throughout.
#[test]
fn single_terms_on_a_live_index_skip_rescoring() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, result_cache_min_work: 0, ..Default::default() };
    let index = Index::open("c", dir.path(), cfg, Some(&mapping()), None).unwrap();
    let mut rng = 5u64;
    for i in 0..500 {
        index.add(doc(&mut rng, i)).unwrap();
    }
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    let o = SearchOptions { limit: 10, fetch: false, ..Default::default() };
    let stats = || index.shard().result_cache().stats();
    // Sealed and quiet: a miss stores the entry, the repeat hits it (for the term and for an AND).
    for q in ["w1", "+w0 +w1"] {
        compare(&index, q, &o);
        let before = stats();
        compare(&index, q, &o);
        assert_eq!(stats().hits, before.hits + 1, "{q}: a repeat on a quiet index hits");
    }
    // New documents in the fresh segment move the statistics: the term is answered uncached (stale, no
    // hit, no new entry); the AND still re-scores its entry and hits.
    for i in 500..520 {
        index.add(doc(&mut rng, i)).unwrap();
    }
    let before = stats();
    compare(&index, "w1", &o);
    let after = stats();
    assert_eq!((after.hits, after.stale, after.entries), (before.hits, before.stale + 1, before.entries));
    compare(&index, "+w0 +w1", &o);
    assert_eq!(stats().hits, after.hits + 1, "a conjunction re-scores its entry");
    // Every document sealed: the term's entry is re-scored (or replaced) and serves again.
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    compare(&index, "w1", &o);
    let before = stats();
    compare(&index, "w1", &o);
    assert_eq!(stats().hits, before.hits + 1, "the term hits once the index is sealed");
}
