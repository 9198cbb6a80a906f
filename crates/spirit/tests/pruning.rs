//! Top-k pruning (block-max skipping, MaxScore, segment skipping) must return exactly the hits of exhaustive
//! evaluation. Long posting lists (several blocks of 128) and several segments make every pruning path run.

use proptest::prelude::*;
use spirit::{Disjunction, Index, SearchOptions, ShardConfig};

fn vocab(i: u64) -> String {
    format!("w{i}")
}

/// Zipf-ish term choice from a 64-bit state.
fn pick(x: u64) -> u64 {
    let r = (x >> 11) as f64 / (1u64 << 53) as f64;
    (r.powf(3.0) * 200.0) as u64
}

fn build(n: usize, seed: u64) -> (tempfile::TempDir, Index) {
    build_with(n, 1500, seed, |next| {
        let len = 3 + next() % 60;
        (0..len).map(|_| vocab(pick(next()))).collect::<Vec<_>>().join(" ")
    })
}

/// An index of `n` documents (ids `0..n`, segments of at most `max_docs`) whose bodies `body` makes from a
/// xorshift stream seeded with `seed`; sealed and flushed.
fn build_with(
    n: usize,
    max_docs: u32,
    seed: u64,
    mut body: impl FnMut(&mut dyn FnMut() -> u64) -> String,
) -> (tempfile::TempDir, Index) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: max_docs, ..Default::default() };
    let index = Index::open("p", dir.path(), cfg, None, None).unwrap();
    let mut next = xorshift(seed);
    for i in 0..n {
        let body = body(&mut next);
        index.add(serde_json::json!({"_id": i.to_string(), "body": body})).unwrap();
    }
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    (dir, index)
}

/// Returns (exact total, documents the pruned run visited, documents the pruned run with block-max WAND for
/// disjunctions visited).
fn compare(index: &Index, q: &str) -> (u64, u64, u64) {
    let k = 10;
    // No result cache: the pruned run must evaluate, not take the exact run's cached answer.
    let exact = index.search(q, &SearchOptions { limit: k, cache: false, ..Default::default() }).unwrap();
    let pruned = |disjunction| {
        let o =
            SearchOptions { limit: k, track_total: false, cache: false, disjunction, ..Default::default() };
        index.search(q, &o).unwrap()
    };
    let a: Vec<(String, f32)> = exact.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
    // Count-only (no hits): its own paths (an AND's intersections by bitmap or searches), the same total.
    let count = index.search(q, &SearchOptions { limit: 0, cache: false, ..Default::default() }).unwrap();
    assert_eq!(count.total, exact.total, "{q}: count-only");
    let mut totals = vec![];
    for alg in [Disjunction::MaxScore, Disjunction::BlockMaxWand] {
        let p = pruned(alg);
        let b: Vec<(String, f32)> = p.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        assert_eq!(a, b, "{q} ({alg:?})");
        assert!(p.total <= exact.total);
        totals.push(p.total);
    }
    (exact.total, totals[0], totals[1])
}

#[test]
fn pruned_top_k_equals_exhaustive() {
    let (_dir, index) = build(6000, 42);
    let st = index.stats();
    assert!(st.shard.segments.values().sum::<usize>() >= 4, "{st:?}");
    let (mut all, mut visited) = (0, 0);
    for t in [0, 1, 2, 5, 10, 30, 100] {
        let (a, b, _) = compare(&index, &vocab(t));
        all += a;
        visited += b;
    }
    assert!(visited < all, "pruning skipped matches of single-term queries: visited {visited} of {all}");
    let (mut or_all, mut or_maxscore, mut or_bmw) = (0, 0, 0);
    for (a, b) in [(0, 1), (0, 50), (3, 7), (1, 150), (20, 21)] {
        let (x, y, z) = compare(&index, &format!("{} {}", vocab(a), vocab(b)));
        (or_all, or_maxscore, or_bmw) = (or_all + x, or_maxscore + y, or_bmw + z);
        let _ = compare(&index, &format!("+{} +{}", vocab(a), vocab(b)));
        let _ = compare(&index, &format!("{} {} {}", vocab(a), vocab(b), vocab(a + b + 1)));
        let _ = compare(&index, &format!("+{} {} -{}", vocab(a), vocab(b), vocab(a + 2)));
        let _ = compare(&index, &format!("\"{} {}\" {}", vocab(a), vocab(b), vocab(b + 3)));
        // Boosted terms: the boost is in the weights the bounds come from.
        let _ = compare(&index, &format!("{}^3 {}", vocab(a), vocab(b)));
        let _ = compare(&index, &format!("+{}^0.5 +{}^2", vocab(a), vocab(b)));
        let _ = compare(&index, &format!("{} {}^0", vocab(a), vocab(b)));
    }
    assert!(or_maxscore < or_all && or_bmw < or_all, "both skip: {or_maxscore}, {or_bmw} of {or_all}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_disjunctions(terms in proptest::collection::vec(0u64..120, 1..6), must in any::<bool>()) {
        use std::sync::OnceLock;
        static INDEX: OnceLock<(tempfile::TempDir, Index)> = OnceLock::new();
        let (_, index) = INDEX.get_or_init(|| build(4000, 7));
        let mut q: Vec<String> = terms.iter().map(|&t| vocab(t)).collect();
        if must {
            q[0] = format!("+{}", q[0]);
        }
        let _ = compare(index, &q.join(" "));
    }

    /// Pure ANDs of 2 to 7 terms: the block-max conjunction's lead filter follows each other list's blocks
    /// for up to four of them and takes the window's bounds beyond.
    #[test]
    fn random_conjunctions(terms in proptest::collection::vec(0u64..40, 2..8)) {
        use std::sync::OnceLock;
        static INDEX: OnceLock<(tempfile::TempDir, Index)> = OnceLock::new();
        let (_, index) = INDEX.get_or_init(|| build(6000, 11));
        let q: Vec<String> = terms.iter().map(|&t| format!("+{}", vocab(t))).collect();
        let _ = compare(index, &q.join(" "));
    }
}

/// A xorshift stream seeded with `seed`.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A body of `common`, and in half the documents `lead`: one lead posting in 60 is strong — a tf of 2 to 9,
/// raised by `boost`, in a short document — the others weak (tf 1 in a long document).
fn weak_lead_doc(next: &mut dyn FnMut() -> u64, boost: u64) -> String {
    let mut body = vec!["common".to_string()];
    if next().is_multiple_of(2) {
        let strong = next().is_multiple_of(60);
        let tf = if strong { 2 + next() % 8 + boost } else { 1 };
        body.extend((0..tf).map(|_| "lead".to_string()));
        let filler = if strong { next() % 6 } else { 20 + next() % 60 };
        body.extend((0..filler).map(|_| format!("f{}", next() % 50)));
    }
    body.join(" ")
}

/// A conjunction of a common, low-idf term with a term whose blocks are mostly weak (tf 1 in long documents)
/// and rarely strong: the block-max conjunction passes over runs of weak lead blocks on the lead's bound
/// and the others' whole-list bounds alone, and must still find every strong document after a run.
#[test]
fn runs_of_weak_lead_blocks_are_passed_over_exactly() {
    for seed in [3u64, 5, 9, 17] {
        let (_dir, index) = build_with(8000, 20_000, seed, |next| weak_lead_doc(next, 0));
        index.force_merge(1).unwrap();
        for q in ["+common +lead", "+lead +common", "+lead +common +f3"] {
            let (all, visited, _) = compare(&index, q);
            assert!(visited < all, "seed {seed}, {q}: nothing passed over ({visited} of {all})");
        }
    }
}

/// The same conjunctions over a fresh segment after the images: the images' hits set θ, and the fresh
/// segment's windows of weak lead postings are passed over on the lead's bound and the others' idfs alone,
/// or on their chunk bounds — while its strong documents, stronger than the images' (so some are in the
/// top 10), are all found: the pruned answers equal the exhaustive ones, and not every fresh match is
/// visited.
#[test]
fn weak_fresh_windows_are_passed_over_exactly() {
    for seed in [3u64, 5, 9, 17] {
        let (_dir, index) = build_with(8000, 20_000, seed, |next| weak_lead_doc(next, 0));
        index.force_merge(1).unwrap();
        let queries = ["+common +lead", "+lead +common", "+lead +common +f3"];
        let before: Vec<(u64, u64, u64)> = queries.iter().map(|q| compare(&index, q)).collect();
        let mut next = xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for i in 8000..9500 {
            index
                .add(serde_json::json!({"_id": i.to_string(), "body": weak_lead_doc(&mut next, 6)}))
                .unwrap();
        }
        let segs = index.stats().shard.segments;
        assert_eq!(segs.values().sum::<usize>(), 2, "seed {seed}: one image and the fresh segment: {segs:?}");
        for (q, (all0, visited0, _)) in queries.iter().zip(before) {
            let top =
                index.search(q, &SearchOptions { limit: 10, cache: false, ..Default::default() }).unwrap();
            let fresh_hits = top.hits.iter().filter(|h| h.id.parse::<u32>().unwrap() >= 8000).count();
            assert!(fresh_hits > 0, "seed {seed}, {q}: some of the top 10 are fresh documents");
            let (all, visited, _) = compare(&index, q);
            assert!(all > all0, "seed {seed}, {q}: the fresh documents match");
            assert!(visited - visited0 < all - all0, "seed {seed}, {q}: nothing fresh passed over");
        }
    }
}

/// Newest first without an exact count reads image segments backwards in windows and stops once k hits are
/// certain; the hits must be the newest k of the exhaustive run, for common and rare terms, conjunctions,
/// phrases and exclusions, with deletes, for several k.
#[test]
fn newest_first_stops_early_and_returns_the_newest_hits() {
    let (_dir, index) = build(6000, 7);
    for i in (0..6000).step_by(7) {
        index.delete(&i.to_string()).unwrap();
    }
    let queries = ["w0", "w1", "w3", "w40", "w150", "+w0 +w2", "+w5 +w9", "\"w0 w1\"", "w1 -w0", "w7 w60"];
    let (mut all, mut visited) = (0, 0);
    for q in queries {
        for k in [1, 10, 100, 700] {
            let o = |track_total| SearchOptions {
                limit: k,
                sort: spirit::Sort::Newest,
                track_total,
                cache: false,
                ..Default::default()
            };
            let exact = index.search(q, &o(true)).unwrap();
            let early = index.search(q, &o(false)).unwrap();
            let ids = |r: &spirit::SearchResult| r.hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&early), ids(&exact), "{q} k={k}");
            assert!(early.total <= exact.total);
            all += exact.total;
            visited += early.total;
        }
    }
    assert!(visited * 2 < all, "stopping early visits far fewer matches ({visited} of {all})");
}
