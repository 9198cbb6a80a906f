//! Deterministic walks through the lifecycle stages, checking answers at each one.

mod common;

use common::*;
use spirit::gdt::SegState;
use spirit::query::Query;
use spirit::{CommitPolicy, Index, SearchOptions, ShardConfig};

fn cfg() -> ShardConfig {
    ShardConfig {
        dram_budget: 8 << 20,
        persistent_budget: 1 << 30,
        fresh_segment_bytes: Some(256 << 10),
        max_docs_per_segment: 5,
        commit: CommitPolicy::Lazy,
        ..Default::default()
    }
}

fn doc(i: usize) -> RefDoc {
    let w = ["alpha", "beta", "gamma"];
    RefDoc {
        id: format!("d{i}"),
        title: vec![w[i % 3].into()],
        body: vec![w[(i / 3) % 3].into(), "alpha".into(), w[i % 2].into()],
        tag: "red".into(),
        n: i as i64,
        live: true,
        seq: 0,
    }
}

fn check_all(index: &Index, r: &Reference, ctx: &str) {
    for q in [
        "alpha",
        "beta",
        "gamma",
        "title:alpha",
        "\"alpha beta\"",
        "+alpha -beta",
        "n:[3 TO 9]",
        "al*",
        "*:*",
    ] {
        let q = spirit::query::parse(q).unwrap();
        let res = index.search_query(&q, &SearchOptions { limit: 5, ..Default::default() }).unwrap();
        let hits: Vec<(String, f32)> = res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        check_top_k(r, &q, res.total, &hits, 5, ctx);
    }
}

#[test]
fn every_stage_answers_like_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open("t", dir.path(), cfg(), Some(&mappings()), None).unwrap();
    let mut r = Reference::default();
    for i in 0..12 {
        index.add(doc(i).json()).unwrap();
        r.add(doc(i));
        check_all(&index, &r, &format!("after add {i}"));
    }
    let st = index.stats();
    assert!(st.shard.segments[&SegState::Fresh] >= 1);
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    let st = index.stats();
    assert_eq!(st.shard.segments[&SegState::Fresh], 0, "{st:?}");
    assert!(st.shard.segments[&SegState::Engraved] >= 1, "{st:?}");
    check_all(&index, &r, "engraved");
    index.shard().commit_and_merge_all().unwrap();
    let st = index.stats();
    assert_eq!(st.shard.segments[&SegState::Merged], 3, "{st:?}");
    check_all(&index, &r, "merged");
    let _ = Query::MatchAll;
    index.close().unwrap();
}
