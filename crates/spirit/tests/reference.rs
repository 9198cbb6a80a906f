//! Random documents and random operation sequences (adds, updates, deletes, seals, commits + merges, graceful
//! reopens) with queries of every kind between them, each answer checked against the brute-force reference.
//! Tiny segments make every lifecycle stage occur: fresh, flushed, engraved, committed (persistent copy),
//! merged and compacted.

mod common;

use common::gen::*;
use common::*;
use proptest::prelude::*;
use spirit::query::Query;
use spirit::{CommitPolicy, Index, SearchOptions, ShardConfig, Sort};
use std::path::Path;

fn config(commit: CommitPolicy) -> ShardConfig {
    ShardConfig {
        dram_budget: 8 << 20,
        persistent_budget: 1 << 30,
        fresh_segment_bytes: Some(256 << 10),
        max_docs_per_segment: 5,
        commit,
        ..Default::default()
    }
}

fn open(dir: &Path, commit: CommitPolicy) -> Index {
    Index::open("t", dir, config(commit), Some(&mappings()), None).unwrap()
}

fn check_query(index: &Index, r: &Reference, q: &Query, ctx: &str) {
    let k = 5;
    let res = index.search_query(q, &SearchOptions { limit: k, ..Default::default() }).unwrap();
    let hits: Vec<(String, f32)> = res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
    check_top_k(r, q, res.total, &hits, k, ctx);
    // Count-only: no hits, the exact count.
    let res = index.search_query(q, &SearchOptions { limit: 0, ..Default::default() }).unwrap();
    check_top_k(r, q, res.total, &[], 0, &format!("{ctx} (count)"));
    // Top-k without exact counts lets scorers prune (block-max, MaxScore): the hits must stay exact.
    let res =
        index.search_query(q, &SearchOptions { limit: k, track_total: false, ..Default::default() }).unwrap();
    let hits: Vec<(String, f32)> = res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
    check_top_k(r, q, None, &hits, k, &format!("{ctx} (pruned)"));
    let res =
        index.search_query(q, &SearchOptions { limit: k, sort: Sort::Newest, ..Default::default() }).unwrap();
    let ids: Vec<String> = res.hits.iter().map(|h| h.id.clone()).collect();
    check_newest(r, q, res.total, &ids, k, ctx);
}

fn run(ops: Vec<Op>, commit: CommitPolicy) {
    let dir = tempfile::tempdir().unwrap();
    let mut index = open(dir.path(), commit);
    let mut r = Reference::default();
    for (i, op) in ops.into_iter().enumerate() {
        let ctx = format!("op {i}");
        match op {
            Op::Add(d) => {
                let res = index.add(d.json()).unwrap();
                let existed = r.docs.iter().any(|o| o.id == d.id && o.live);
                assert_eq!(res.replaced, existed, "{ctx}: replaced flag");
                r.add(d.clone());
                // Visible to the very next read, with no refresh.
                let got = index.get(&d.id).unwrap().expect("just added");
                let v: serde_json::Value = serde_json::from_slice(&got).unwrap();
                assert_eq!(v["body"], d.json()["body"]);
                let q = Query::Term { field: Some("tag".into()), text: d.tag.clone() };
                check_query(&index, &r, &q, &ctx);
            }
            Op::Delete(id) => {
                let id = format!("d{id}");
                assert_eq!(index.delete(&id).unwrap(), r.delete(&id), "{ctx}: delete {id}");
                assert!(index.get(&id).unwrap().is_none());
            }
            Op::Query(q) => check_query(&index, &r, &q, &ctx),
            Op::Seal => {
                index.shard().seal().unwrap();
                index.shard().wait_idle().unwrap();
            }
            Op::CommitMerge => index.shard().commit_and_merge_all().unwrap(),
            Op::Compact => index.shard().compact_now().unwrap(),
            Op::ForceMerge(n) => {
                let left = index.force_merge(n).unwrap();
                assert!(left <= n, "{ctx}: force merge to {n} left {left} segments");
                let st = index.stats().shard;
                assert_eq!(st.segments.values().sum::<usize>(), left, "{ctx}: segments after force merge");
            }
            Op::Reopen => {
                index.close().unwrap();
                drop(index);
                index = open(dir.path(), commit);
            }
        }
    }
    // Final full check over a fixed query set at the end, after merging everything.
    index.shard().commit_and_merge_all().unwrap();
    for w in WORDS {
        check_query(&index, &r, &Query::Term { field: None, text: w.into() }, "final");
    }
    index.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn lazy_commit_matches_reference(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, CommitPolicy::Lazy);
    }

    #[test]
    fn eager_commit_matches_reference(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, CommitPolicy::Eager);
    }
}
