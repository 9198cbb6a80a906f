//! Conjunctions and disjunctions of terms, and phrases, on image segments take their own paths (windowed
//! block-max conjunction with score-first filtering and dense or skipping intersections; term-at-a-time
//! MaxScore windows for disjunctions; bounded, lead-driven phrases). Long posting lists of every density, deletes, several segments and
//! then one merged segment: every answer — exact counts, and top-k with and without pruning — is checked
//! against the brute-force reference.

mod common;

use common::*;
use spirit::{Index, SearchOptions, ShardConfig};

fn word(i: u64) -> String {
    format!("w{i}")
}

/// Document `i`: a body of 3 to 62 Zipf-chosen words and, with `title`, a title of 1 to 3.
fn random_doc(i: usize, title: bool, next: &mut impl FnMut() -> u64) -> RefDoc {
    let len = 3 + next() % 60;
    let body: Vec<String> = (0..len).map(|_| word(zipf_term(next()))).collect();
    let title = if title { (0..1 + next() % 3).map(|_| word(zipf_term(next()))).collect() } else { vec![] };
    RefDoc { id: i.to_string(), title, body, tag: "t".into(), n: 0, live: true, seq: 0 }
}

fn check(index: &Index, r: &Reference, q: &str, ctx: &str) {
    let parsed = spirit::query::parse(q).unwrap();
    for k in [1, 10, 60] {
        let exact = index.search(q, &SearchOptions { limit: k, cache: false, ..Default::default() }).unwrap();
        let hits: Vec<(String, f32)> = exact.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        check_top_k(r, &parsed, exact.total, &hits, k, &format!("{ctx}: {q} k={k}"));
        let o = SearchOptions { limit: k, track_total: false, cache: false, ..Default::default() };
        let pruned = index.search(q, &o).unwrap();
        let hits: Vec<(String, f32)> = pruned.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        check_top_k(r, &parsed, None, &hits, k, &format!("{ctx} (pruned): {q} k={k}"));
        assert!(pruned.total <= exact.total, "{ctx}: {q}");
    }
}

#[test]
fn fast_paths_on_long_lists_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: 1500, ..Default::default() };
    let index = Index::open("c", dir.path(), cfg, Some(&mappings()), None).unwrap();
    let mut r = Reference::default();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || xorshift(&mut x);
    for i in 0..6000 {
        let d = random_doc(i, true, &mut next);
        index.add(d.json()).unwrap();
        r.add(d);
    }
    for i in (0..6000).step_by(11) {
        assert!(index.delete(&i.to_string()).unwrap());
        r.delete(&i.to_string());
    }
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    let queries = [
        "+body:w0 +body:w1",
        "+body:w0 +body:w2",
        "+body:w0 +body:w60",
        "+body:w1 +body:w150",
        "+body:w3 +body:w7 +body:w1",
        "+body:w20 +body:w21",
        "+body:w0 +body:w1 +body:w2 +body:w4",
        "+title:w0 +body:w1",
        "+body:w0 +body:w199",
        "body:w0 body:w1",
        "body:w0 body:w150",
        "body:w3 body:w7 body:w1 body:w40",
        "title:w0 body:w1",
        "body:w150 body:w199 body:w120",
        "body:w0 body:zzz",
        "body:w1 body:w2 body:w3 body:w4 body:w5 body:w6 body:w8 body:w9 body:w10",
        r#"body:"w0 w1""#,
        r#"body:"w1 w0 w2""#,
        r#"body:"w0 w0""#,
        r#"body:"w3 w150""#,
        r#"title:"w0 w1""#,
        // Boosts fold into the terms' weights: the same paths, scaled scores and bounds.
        "+body:w0^2 +body:w1",
        "+body:w0^0 +body:w60^3",
        "body:w0^0.5 body:w1^3",
        "body:w150^4 body:w0 body:w120^0",
        "(body:w3 body:w7)^2.5 body:w1",
        r#"body:"w0 w1"^2 body:w3"#,
        "+body:w1 title:w0^10",
    ];
    let segments = index.stats().shard.segments.values().sum::<usize>();
    assert!(segments >= 3, "several segments: {segments}");
    for q in queries {
        check(&index, &r, q, "segments");
    }
    assert_eq!(index.force_merge(1).unwrap(), 1);
    for q in queries {
        check(&index, &r, q, "merged");
    }
}

/// Single terms and two-term phrases whose documents tie at the top (a handful of distinct bodies, so most
/// scores are equal): the k-th best is decided by recency, the newer document winning, and a pruned walk —
/// warm start, newest block first, blocks or documents at θ passed over only when older than the k-th best
/// — must find exactly the newest of the tied, across segments, deletes and after a merge.
#[test]
fn single_terms_and_phrases_with_tied_scores_keep_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: 1500, ..Default::default() };
    let index = Index::open("c", dir.path(), cfg, Some(&mappings()), None).unwrap();
    let mut r = Reference::default();
    let bodies: [&[&str]; 4] = [&["w1", "w2"], &["w1", "w1", "w3"], &["w1"], &["w2", "w3", "w4", "w1"]];
    for i in 0..5000usize {
        // Mostly one body, so the top scores of w1 and w2 are shared by thousands of documents.
        let body = bodies[if i % 7 == 0 { i / 7 % 4 } else { 0 }];
        let d = RefDoc {
            id: i.to_string(),
            title: vec![],
            body: body.iter().map(|w| w.to_string()).collect(),
            tag: "t".into(),
            n: 0,
            live: true,
            seq: 0,
        };
        index.add(d.json()).unwrap();
        r.add(d);
    }
    for i in (4000..5000).step_by(3) {
        assert!(index.delete(&i.to_string()).unwrap());
        r.delete(&i.to_string());
    }
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    // Two-term phrases tie as much (`"w1 w2"` occurs once in most documents) and walk their lead's blocks
    // newest first as single terms do.
    let queries = [
        "body:w1",
        "body:w2",
        "body:w3",
        "body:w4",
        r#"body:"w1 w2""#,
        r#"body:"w2 w3""#,
        r#"body:"w1 w3""#,
        r#"body:"w1 w1""#,
    ];
    // The reference check accepts any of the tied at the k-th score; the engine's own order is exact: the
    // pruned walk must return what evaluating every posting returns, ids and score bits.
    let same_as_unpruned = |q: &str, ctx: &str| {
        for k in [1, 3, 10, 60] {
            let o = |track_total| SearchOptions { limit: k, track_total, cache: false, ..Default::default() };
            let ids = |res: spirit::SearchResult| -> Vec<(String, u32)> {
                res.hits.into_iter().map(|h| (h.id, h.score.to_bits())).collect()
            };
            let (exact, pruned) = (index.search(q, &o(true)).unwrap(), index.search(q, &o(false)).unwrap());
            assert_eq!(ids(pruned), ids(exact), "{ctx}: {q} k={k}");
        }
    };
    for q in queries {
        check(&index, &r, q, "segments");
        same_as_unpruned(q, "segments");
    }
    assert_eq!(index.force_merge(1).unwrap(), 1);
    for q in queries {
        check(&index, &r, q, "merged");
        same_as_unpruned(q, "merged");
    }
}

/// Single terms, conjunctions, disjunctions and phrases on the fresh segment (walked in place) alone and after images
/// (whose hits set θ before it is reached), with deletes in both: every answer checked against the reference.
#[test]
fn fresh_segment_paths_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: 3000, ..Default::default() };
    let index = Index::open("c", dir.path(), cfg, Some(&mappings()), None).unwrap();
    let mut r = Reference::default();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || xorshift(&mut x);
    let queries = [
        "body:w0",
        "body:w1",
        "body:w5",
        "body:w60",
        "body:w199",
        "title:w0",
        "title:w3",
        "body:zzz",
        "+body:w0 +body:w1",
        "+body:w1 +body:w60",
        "+body:w3 +body:w7 +body:w1",
        "+title:w0 +body:w1",
        "+body:w0 +body:zzz",
        "+body:w0 +body:w1 +body:w2 +body:w3 +body:w4 +body:w5 +body:w6 +body:w7 +body:w8",
        "body:w0 body:w1",
        "body:w3 body:w150",
        "title:w0 body:w1",
        "body:w0 body:zzz",
        "body:w199 body:w150 body:w120",
        "body:w1 body:w2 body:w3 body:w4 body:w5 body:w6 body:w7 body:w8",
        r#"body:"w0 w1""#,
        r#"body:"w1 w0 w2""#,
        r#"title:"w0 w1""#,
        r#"body:"w0 zzz""#,
        r#"body:"w0 w0""#,
        "+body:w0^2 +body:w1",
        "+body:w3^0 +body:w7 +body:w1^4",
        "body:w0^0.5 body:w1^3",
        "body:w199^5 body:w150 body:w120^0",
        r#"body:"w0 w1"^3 body:w1"#,
    ];
    for i in 0..5000 {
        let d = random_doc(i, true, &mut next);
        index.add(d.json()).unwrap();
        r.add(d);
        if i % 13 == 5 {
            // Distinct earlier ids (i/2 grows by 6 or 7), each live until now.
            let victim = (i / 2).to_string();
            assert!(index.delete(&victim).unwrap());
            r.delete(&victim);
        }
        if i == 1200 {
            // Only the fresh segment so far.
            let segs = index.stats().shard.segments;
            assert_eq!(segs.values().sum::<usize>(), 1, "{segs:?}");
            for q in queries {
                check(&index, &r, q, "fresh only");
            }
        }
    }
    let segs = index.stats().shard.segments;
    assert!(segs.values().sum::<usize>() >= 2, "an image and the fresh segment: {segs:?}");
    for q in queries {
        check(&index, &r, q, "images and fresh");
    }
}

/// The fresh segment's loops under other BM25 parameters (k1 = 0: every length term is 0; b = 1) answer as
/// the image paths do over the same documents once sealed: same ids, bit-identical scores.
#[test]
fn fresh_segment_paths_equal_the_image_paths_under_other_bm25() {
    for (k1, b) in [(0.0, 0.75), (2.0, 1.0)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: 5000, ..Default::default() };
        let settings = spirit::IndexSettings { bm25_k1: k1, bm25_b: b, ..Default::default() };
        let index = Index::open("c", dir.path(), cfg, Some(&mappings()), Some(settings)).unwrap();
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut next = || xorshift(&mut x);
        for i in 0..2000 {
            let d = random_doc(i, false, &mut next);
            index.add(d.json()).unwrap();
        }
        let queries = ["body:w0", "body:w7", "+body:w0 +body:w1", "body:w0 body:w9 body:w30"];
        let run = |index: &Index| -> Vec<Vec<(String, u32)>> {
            let mut out = vec![];
            for q in queries {
                for track_total in [false, true] {
                    let o = SearchOptions { limit: 10, track_total, cache: false, ..Default::default() };
                    let r = index.search(q, &o).unwrap();
                    assert_eq!(r.hits.len(), 10, "{q} k1 {k1} b {b}");
                    out.push(r.hits.iter().map(|h| (h.id.clone(), h.score.to_bits())).collect());
                }
            }
            out
        };
        let fresh = run(&index);
        assert_eq!(index.stats().shard.segments.values().sum::<usize>(), 1, "only the fresh segment");
        index.seal().unwrap();
        index.wait_idle().unwrap();
        assert_eq!(run(&index), fresh, "k1 {k1} b {b}");
    }
}

/// BM25 parameters outside Lucene's ranges (block-max bounds need a score that grows with the frequency and
/// falls with the length) are refused when an index is created, and the engine keeps nothing of it; the
/// ends of the ranges are accepted.
#[test]
fn bm25_parameters_outside_lucenes_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, ..Default::default() };
    let engine =
        spirit::Engine::open(dir.path(), spirit::EngineConfig { shard: cfg.clone(), default_shards: None })
            .unwrap();
    let with = |k1: f32, b: f32| Some(spirit::IndexSettings { bm25_k1: k1, bm25_b: b, ..Default::default() });
    for (k1, b) in
        [(-0.5, 0.75), (f32::INFINITY, 0.75), (f32::NAN, 0.75), (1.2, -0.1), (1.2, 1.5), (1.2, f32::NAN)]
    {
        let e = engine.create_index("bad", None, with(k1, b)).err().expect("refused");
        assert!(matches!(e, spirit::Error::InvalidArgument(_)), "k1 {k1} b {b}: {e}");
        assert!(
            e.to_string().contains(if k1 == 1.2 { "illegal b value" } else { "illegal k1 value" }),
            "{e}"
        );
        assert!(engine.index("bad").is_none());
        assert!(!dir.path().join("indexes").join("bad").exists(), "nothing kept of it");
        let alone = tempfile::tempdir().unwrap();
        assert!(Index::open("bad", alone.path(), cfg.clone(), None, with(k1, b)).is_err());
    }
    for (i, (k1, b)) in [(0.0, 0.0), (0.0, 1.0), (3.0, 1.0)].into_iter().enumerate() {
        engine.create_index(&format!("ok{i}"), None, with(k1, b)).unwrap();
    }
    engine.close().unwrap();
}

/// An index whose fresh segment holds tens of thousands of documents (one 64 MiB arena), so its common terms
/// have many sealed chunks.
fn large_fresh_index() -> (tempfile::TempDir, Index) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig {
        dram_budget: 256 << 20,
        fresh_segment_bytes: Some(64 << 20),
        max_docs_per_segment: 50_000,
        ..Default::default()
    };
    let index = Index::open("c", dir.path(), cfg, Some(&mappings()), None).unwrap();
    (dir, index)
}

/// A fresh segment large enough for single terms' warm start (the regions of the best impact bounds
/// evaluated first, then passed over by the newest-first walk) and for chunks passed over: with deletes among
/// them, and with the top-k filled or not by the time a region is reached, every answer equals the
/// reference's, and pruning visits fewer postings than there are matches.
#[test]
fn fresh_single_terms_with_warm_start_match_the_reference() {
    let (_dir, index) = large_fresh_index();
    let mut r = Reference::default();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || xorshift(&mut x);
    for i in 0..9000 {
        let d = random_doc(i, false, &mut next);
        index.add(d.json()).unwrap();
        r.add(d);
        if i % 17 == 3 {
            let victim = (i / 3).to_string();
            if r.docs.iter().any(|d| d.id == victim && d.live) {
                assert!(index.delete(&victim).unwrap());
                r.delete(&victim);
            }
        }
    }
    assert_eq!(index.stats().shard.segments.values().sum::<usize>(), 1, "only the fresh segment");
    let (mut all, mut visited) = (0, 0);
    for t in [0, 1, 2, 4, 9, 25, 80] {
        let q = format!("body:{}", word(t));
        check(&index, &r, &q, "fresh, warm start");
        let exact =
            index.search(&q, &SearchOptions { limit: 10, cache: false, ..Default::default() }).unwrap();
        let o = SearchOptions { limit: 10, track_total: false, cache: false, ..Default::default() };
        all += exact.total;
        visited += index.search(&q, &o).unwrap().total;
    }
    assert!(visited < all, "pruning passed over no region: visited {visited} of {all}");
    // Disjunctions there: MaxScore, block-max over a sole essential list.
    for q in [
        "body:w0 body:w1",
        "body:w0 body:w30",
        "body:w2 body:w9",
        "body:w1 body:w3 body:w40",
        "body:w0 body:w500",
    ] {
        check(&index, &r, q, "fresh, disjunction");
    }
    // Phrases there: each posting's positions found from the sum of its block's frequencies before it.
    for q in
        [r#"body:"w0 w1""#, r#"body:"w1 w0""#, r#"body:"w0 w0""#, r#"body:"w2 w0 w1""#, r#"body:"w9 w3""#]
    {
        check(&index, &r, q, "fresh, phrase");
    }
}

/// Ties everywhere: every document has the term once in a body of the same length, so every posting scores
/// the same and the top-k is the k newest. The fresh term's regions all bound at θ; the walk may pass over
/// only those older than the k-th best, whatever the warm start (on the oldest regions, the first of equal
/// bounds) and the open tail block left in the top-k.
#[test]
fn fresh_single_terms_that_all_tie_keep_the_newest() {
    let (_dir, index) = large_fresh_index();
    let mut r = Reference::default();
    for i in 0..7000 {
        // The same length and the same frequency of `w0` in every body; `w1` in every third.
        let other = if i % 3 == 0 { "w1" } else { "w2" };
        let body: Vec<String> =
            ["w0", other].into_iter().chain(std::iter::repeat_n("w9", 8)).map(String::from).collect();
        let d = RefDoc { id: i.to_string(), title: vec![], body, tag: "t".into(), n: 0, live: true, seq: 0 };
        index.add(d.json()).unwrap();
        r.add(d);
        if i % 101 == 7 {
            let victim = (i - 5).to_string();
            assert!(index.delete(&victim).unwrap());
            r.delete(&victim);
        }
    }
    assert_eq!(index.stats().shard.segments.values().sum::<usize>(), 1, "only the fresh segment");
    for q in ["body:w0", "body:w1", "body:w9", r#"body:"w0 w1""#, r#"body:"w9 w9 w9""#] {
        check(&index, &r, q, "fresh, all tied");
        let parsed = spirit::query::parse(q).unwrap();
        for k in [1, 10, 60, 200, 700] {
            let run = |track_total: bool| -> Vec<(String, u32)> {
                let o = SearchOptions { limit: k, track_total, cache: false, ..Default::default() };
                index.search(q, &o).unwrap().hits.iter().map(|h| (h.id.clone(), h.score.to_bits())).collect()
            };
            let pruned = run(false);
            assert_eq!(pruned, run(true), "{q} k={k}: pruned and exhaustive differ");
            // All tied: the k newest matches.
            let mut m = r.matches(&parsed);
            m.sort_by_key(|x| std::cmp::Reverse(x.1));
            let mut want: Vec<String> = m.into_iter().take(k).map(|x| x.2).collect();
            let mut got: Vec<String> = pruned.into_iter().map(|h| h.0).collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{q} k={k}: not the newest");
        }
    }
}

/// Phrases of two common words are answered from their biwords on images that hold them (the pair's own
/// posting list, `segment::biword`) and from positions on the fresh segment: across the fresh segment
/// alone, images with deletes, a compaction and a reopen, every answer — phrases alone, in booleans, with
/// a boost, three-word phrases, common words next to other words — is the reference's.
#[test]
fn common_word_phrases_match_the_reference_from_biwords() {
    const WORDS: [&str; 8] = ["the", "in", "by", "of", "was", "his", "a", "it"];
    fn random_doc(i: usize, next: &mut impl FnMut() -> u64) -> RefDoc {
        let word = |x: u64| {
            let t = zipf_term(x);
            WORDS.get(t as usize).map_or_else(|| format!("w{t}"), |w| w.to_string())
        };
        let body: Vec<String> = (0..3 + next() % 60).map(|_| word(next())).collect();
        let title = (0..1 + next() % 3).map(|_| word(next())).collect();
        RefDoc { id: i.to_string(), title, body, tag: "t".into(), n: 0, live: true, seq: 0 }
    }
    let queries = [
        r#"body:"in by""#,
        r#"body:"the the""#,
        r#"body:"of a""#,
        r#"body:"was his""#,
        r#"title:"the in""#,
        r#"body:"it w9""#,
        r#"body:"the in by""#,
        r#"body:"in by"^3 body:w5"#,
        r#"+body:"the of" +body:w3"#,
        r#"+body:"a the" -body:w2"#,
        r#"body:"in by" title:"the the""#,
    ];
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: 1500, ..Default::default() };
    let mut r = Reference::default();
    {
        let index = Index::open("c", dir.path(), cfg.clone(), Some(&mappings()), None).unwrap();
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut next = || xorshift(&mut x);
        for i in 0..5000 {
            let d = random_doc(i, &mut next);
            index.add(d.json()).unwrap();
            r.add(d);
            if i == 1200 {
                for q in queries {
                    check(&index, &r, q, "fresh segment");
                }
            }
        }
        for i in (0..5000).step_by(7) {
            assert!(index.delete(&i.to_string()).unwrap());
            r.delete(&i.to_string());
        }
        for q in queries {
            check(&index, &r, q, "images and the fresh segment");
        }
        index.shard().seal().unwrap();
        index.shard().wait_idle().unwrap();
        for q in queries {
            check(&index, &r, q, "images");
        }
        assert_eq!(index.force_merge(1).unwrap(), 1);
        for q in queries {
            check(&index, &r, q, "compacted");
        }
        index.close().unwrap();
    }
    let index = Index::open("c", dir.path(), cfg, Some(&mappings()), None).unwrap();
    for q in queries {
        check(&index, &r, q, "reopened");
    }
}
