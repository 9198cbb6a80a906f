//! Selective caching of the merged dictionary (seed 002; issue 4, Build 6) never changes an answer: an index
//! whose hot chains are cached in DRAM (with room for all, and with so little room that terms are evicted
//! and rejected) answers every query exactly as one without the cache — same documents, bit-identical
//! scores, same exact counts — while documents arrive, are deleted, segments merge (entries are refreshed
//! from the chains' new heads), compaction replaces the dictionary, and after a restart. A reader thread
//! queries the cached indexes while documents arrive (lookups and admissions race with background merges);
//! it pauses while the checks run, so their queries are the first after each merge (refreshing entries).

mod common;

use common::xorshift as next;
use spirit::{CompactionPolicy, Index, SearchOptions, ShardConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const QUERIES: &[&str] = &[
    "w1",
    "w0",
    "w17",
    "w2 w5",
    "w0 w1 w3",
    "+w1 +w3",
    "+w0 +w2 +w4",
    "\"w1 w2\"",
    "w1 -w2",
    "w1*",
    "w3 OR (+w0 +w1)",
];

fn doc(rng: &mut u64, id: u64) -> serde_json::Value {
    let len = 2 + (next(rng) % 12) as usize;
    let words: Vec<String> = (0..len)
        .map(|_| format!("w{}", (((next(rng) % 1000) as f64 / 1000.0).powi(3) * 30.0) as u32))
        .collect();
    serde_json::json!({"_id": id.to_string(), "body": words.join(" ")})
}

fn config(selective: usize) -> ShardConfig {
    ShardConfig {
        dram_budget: 8 << 20,
        max_docs_per_segment: 150,
        selective_cache_bytes: Some(selective),
        result_cache_bytes: Some(0),
        // Merges extend the chains of one dictionary (entries are refreshed); the test compacts by itself.
        compaction: CompactionPolicy { factor: 0, ..Default::default() },
        ..Default::default()
    }
}

type Answer = Vec<(String, u32)>;

/// Each query's hits (ids and score bits) and exact count, then its top 3 without an exact count: those
/// hits, and `None` for the count — a pruned count is a lower bound that depends on how tight the block
/// bounds are (pinned lists take theirs from a table made at a grid average length), so it is checked to
/// lie between the hits and the exact count instead.
fn answers(index: &Index) -> Vec<(Answer, Option<u64>)> {
    let mut out = vec![];
    for q in QUERIES {
        let mut exact = 0;
        for (limit, track_total) in [(10, true), (3, false)] {
            let o = SearchOptions { limit, track_total, cache: false, ..Default::default() };
            let r = index.search(q, &o).unwrap();
            let hits: Answer = r.hits.iter().map(|h| (h.id.clone(), h.score.to_bits())).collect();
            if track_total {
                assert!(r.total_exact, "{q}");
                exact = r.total;
                out.push((hits, Some(r.total)));
            } else {
                assert!(r.total >= hits.len() as u64 && r.total <= exact, "{q}: {} of {exact}", r.total);
                out.push((hits, None));
            }
        }
    }
    out
}

#[test]
fn cached_chains_answer_exactly_as_the_dictionary() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // No cache; room for every term; room for a handful (eviction and rejection).
    let sizes = [0, 1 << 20, 2 << 10];
    let open = |i: usize| Index::open("s", dirs[i].path(), config(sizes[i]), None, None).unwrap();
    let mut indexes: Vec<Arc<Index>> = (0..3).map(|i| Arc::new(open(i))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let turn = Arc::new(Mutex::new(()));
    let reader = {
        let (a, b, stop, turn) = (indexes[1].clone(), indexes[2].clone(), stop.clone(), turn.clone());
        std::thread::spawn(move || {
            let o = SearchOptions { limit: 5, track_total: false, cache: false, ..Default::default() };
            while !stop.load(Ordering::Relaxed) {
                let _g = turn.lock().unwrap();
                for q in QUERIES {
                    a.search(q, &o).unwrap();
                    b.search(q, &o).unwrap();
                }
                drop(_g);
                std::thread::yield_now();
            }
        })
    };
    let mut rng = 42u64;
    let mut id = 0u64;
    for round in 0..8 {
        let batch: Vec<serde_json::Value> = (0..400).map(|i| doc(&mut rng, id + i)).collect();
        for d in &batch {
            for ix in &indexes {
                ix.add(d.clone()).unwrap();
            }
        }
        id += 400;
        let _checks = turn.lock().unwrap();
        let victim = (next(&mut rng) % id).to_string();
        for ix in &indexes {
            ix.delete(&victim).unwrap();
            ix.seal().unwrap();
            ix.shard().commit_and_merge_all().unwrap();
            if round % 3 == 2 {
                ix.force_merge(2).unwrap();
            }
        }
        let want = answers(&indexes[0]);
        for ix in &indexes[1..] {
            assert_eq!(answers(ix), want, "round {round}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    let (roomy, tight) = (indexes[1].stats().shard.selective_cache, indexes[2].stats().shard.selective_cache);
    assert!(roomy.hits > 0 && roomy.refreshes > 0 && roomy.misses > 0, "{roomy:?}");
    assert!(roomy.entries >= 10 && roomy.used_bytes <= roomy.capacity_bytes, "{roomy:?}");
    // Hot lists' heads are pinned in DRAM too (and counted in the cache's bytes).
    assert!(roomy.pinned_list_bytes > 0 && roomy.pinned_list_bytes < roomy.used_bytes, "{roomy:?}");
    assert!(tight.evictions + tight.rejected > 0 && tight.used_bytes <= tight.capacity_bytes, "{tight:?}");
    assert_eq!(indexes[0].stats().shard.selective_cache.entries, 0);
    // The DRAM heap is mapped smaller by the cache's share: the budget covers both.
    let d = indexes[1].stats().shard.dram;
    assert!(d.short_term_capacity + d.long_term_capacity + roomy.capacity_bytes <= d.budget, "{d:?}");

    // After a restart (an empty cache over the reopened dictionary) and after a force merge.
    for ix in &indexes {
        ix.close().unwrap();
    }
    drop(indexes);
    indexes = (0..3).map(|i| Arc::new(open(i))).collect();
    let want = answers(&indexes[0]);
    for ix in &indexes[1..] {
        assert_eq!(answers(ix), want, "after reopening");
        assert_eq!(answers(ix), want, "after reopening (from the cache)");
    }
    for ix in &indexes {
        ix.force_merge(1).unwrap();
    }
    let want = answers(&indexes[0]);
    for ix in &indexes[1..] {
        assert_eq!(answers(ix), want, "after a force merge");
    }
    assert!(indexes[1].stats().shard.selective_cache.hits > 0);
}
