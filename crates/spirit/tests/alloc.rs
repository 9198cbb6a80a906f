//! Heap allocations per query (issue 4, Build 7): evaluating a query allocates nothing per segment, block or
//! posting on the fast paths (single terms, conjunctions, disjunctions and phrases of terms on image
//! segments): the same query allocates exactly as often over eight segments as over one, and only a small
//! constant for its setup and answer. Counted per thread by a counting global allocator (a one-shard index
//! evaluates on the calling thread; the pipeline's own threads are not counted).

mod common;

use common::{xorshift, zipf_term};
use spirit::{Index, SearchOptions, ShardConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;
thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}
// SAFETY: forwards every call to the system allocator unchanged; it only counts, in a thread-local cell
// without a destructor (so counting never allocates or recurses).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System` with layout `l` (every allocation goes through it).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `dealloc`; `n` is the caller's valid new size.
        unsafe { System.realloc(p, l, n) }
    }
}
#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

/// 12,000 documents of a Zipf-ish vocabulary (w0 in nearly all: a list of ~90 blocks), in segments of 1,500.
fn build() -> (tempfile::TempDir, Index) {
    let dir = tempfile::tempdir().unwrap();
    // Every segment stays a separate image (none merged or compacted early): the test needs many of them.
    let cfg = ShardConfig {
        dram_budget: 16 << 20,
        max_docs_per_segment: 1500,
        max_unmerged: None,
        ..Default::default()
    };
    let index = Index::open("a", dir.path(), cfg, None, None).unwrap();
    let mut x = 7u64;
    let mut next = || xorshift(&mut x);
    for i in 0..12_000 {
        let len = 3 + next() % 60;
        let body: Vec<String> = (0..len).map(|_| format!("w{}", zipf_term(next()))).collect();
        // "early" only in the first segment: conjunctions with it stop at once in the others.
        let extra = if i < 1000 { " early" } else { "" };
        index.add(serde_json::json!({"_id": i.to_string(), "body": body.join(" ") + extra})).unwrap();
    }
    index.seal().unwrap();
    index.wait_idle().unwrap();
    (dir, index)
}

const QUERIES: [&str; 9] =
    ["w0", "w40", "+w0 +w1", "+w1 +w7 +w30", "+w0 +early", "w0 w1", "w3 w9 w20", "\"w0 w1\"", "\"w2 w0 w5\""];

/// Allocations of each query (after two warm-up runs), with pruning (top-k only) and with exact counts.
fn count_each(index: &Index) -> Vec<(String, u64, usize)> {
    let mut out = vec![];
    for q in QUERIES {
        let node = spirit::query::parse(q).unwrap();
        for track_total in [false, true] {
            let opts =
                SearchOptions { limit: 10, track_total, cache: false, fetch: false, ..Default::default() };
            let mut hits = 0;
            for _ in 0..2 {
                hits = index.search_query(&node, &opts).unwrap().hits.len();
            }
            let before = allocs();
            let r = index.search_query(&node, &opts).unwrap();
            let n = allocs() - before;
            assert_eq!(r.hits.len(), hits);
            out.push((format!("{q} (exact count: {track_total})"), n, r.hits.len()));
        }
    }
    out
}

#[test]
fn fast_path_evaluation_allocates_nothing_per_segment() {
    let (_dir, index) = build();
    let segments: usize = index.stats().shard.segments.values().sum();
    assert!(segments >= 6, "{segments} segments");
    let many = count_each(&index);
    index.force_merge(1).unwrap();
    index.wait_idle().unwrap();
    assert_eq!(index.stats().shard.segments.values().sum::<usize>(), 1);
    let one = count_each(&index);
    for ((q, a, hits), (_, b, _)) in many.iter().zip(&one) {
        println!("{q}: {a} allocations over {segments} segments, {b} over one");
        assert!(*hits > 0, "{q}: the query must match");
        assert_eq!(a, b, "{q}: allocations depend on the segment count");
        // Setup and answer only: the plan, weights, term resolution and the hits (scales with the terms).
        assert!(*a <= 64, "{q}: {a} allocations");
    }
}

/// A query's buffers grow once: running ever larger queries and then a small one again, the small one
/// allocates no more than before (the pool kept its buffers; none leaked into per-query allocation).
#[test]
fn pooled_buffers_are_reused_across_queries() {
    let (_dir, index) = build();
    let opts =
        SearchOptions { limit: 10, track_total: false, cache: false, fetch: false, ..Default::default() };
    let small = spirit::query::parse("+w1 +w7").unwrap();
    index.search_query(&small, &opts).unwrap();
    let before = allocs();
    index.search_query(&small, &opts).unwrap();
    let first = allocs() - before;
    for q in ["w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11", "+w0 +w1 +w2 +w3", "\"w0 w1 w2\""] {
        index.search_query(&spirit::query::parse(q).unwrap(), &opts).unwrap();
    }
    let before = allocs();
    index.search_query(&small, &opts).unwrap();
    assert_eq!(allocs() - before, first);
}
