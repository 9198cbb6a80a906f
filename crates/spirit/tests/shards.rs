//! Sharded indexes answer exactly like one shard: the same random operation sequence (adds, updates,
//! deletes, seals, merges, compactions, reopens) goes to a one-shard index and to indexes of 2 and 3 shards,
//! and every query kind, in every order (score with and without exact counts, offsets, newest first, by a
//! numeric field, count), must return the same ids with bit-identical scores and the same totals — and agree
//! with the brute-force reference. Statistics are index-wide and score ties across shards break by the
//! hidden sequence number, so nothing may depend on the shard count. Explanations (`Index::explain`) agree
//! with the searches: every top hit's is its score, bit for bit, and its parts add up.

mod common;

use common::gen::*;
use common::*;
use proptest::prelude::*;
use spirit::query::{Explanation, Query};
use spirit::{Durability, Index, IndexSettings, SearchOptions, ShardConfig, Sort};
use std::path::Path;

fn open(dir: &Path, shards: usize, durability: Durability) -> Index {
    let cfg = ShardConfig {
        dram_budget: shards * (8 << 20),
        persistent_budget: 1 << 30,
        fresh_segment_bytes: Some(shards * (256 << 10)),
        max_docs_per_segment: 5,
        durability,
        ..Default::default()
    };
    let settings = IndexSettings { number_of_shards: shards, ..Default::default() };
    Index::open("t", dir, cfg, Some(&mappings()), Some(settings)).unwrap()
}

type Answer = (Vec<(String, u32)>, Option<u64>);

fn answer(index: &Index, q: &Query, opts: &SearchOptions) -> Answer {
    let r = index.search_query(q, opts).unwrap();
    let hits = r.hits.iter().map(|h| (h.id.clone(), h.score.to_bits())).collect();
    (hits, r.total_exact.then_some(r.total))
}

fn option_sets(n_field: u16) -> Vec<SearchOptions> {
    let o = |limit, offset, sort, track_total| SearchOptions {
        limit,
        offset,
        sort,
        track_total,
        ..Default::default()
    };
    vec![
        o(5, 0, Sort::Score, true),
        o(5, 0, Sort::Score, false),
        o(3, 2, Sort::Score, true),
        o(5, 0, Sort::Newest, true),
        o(4, 1, Sort::Newest, false),
        o(5, 0, Sort::Field { field: n_field, descending: false }, true),
        o(5, 1, Sort::Field { field: n_field, descending: true }, true),
        o(0, 0, Sort::Score, true),
    ]
}

fn compare(one: &Index, many: &[Index], r: &Reference, q: &Query, ctx: &str) {
    let field = |i: &Index| i.schema().field_id("n").unwrap();
    for (j, opts) in option_sets(field(one)).into_iter().enumerate() {
        let want = answer(one, q, &opts);
        for m in many {
            let mut opts = opts.clone();
            if let Sort::Field { descending, .. } = opts.sort {
                opts.sort = Sort::Field { field: field(m), descending };
            }
            let got = answer(m, q, &opts);
            let what = format!("{ctx}: {} shards vs one, option set {j}, query {q:?}", m.shards().len());
            assert_eq!(got.0, want.0, "{what}");
            // Exact counts are equal; a pruned run may count exactly on one side (a shard too small to prune).
            if opts.track_total {
                assert!(got.1.is_some() && want.1.is_some(), "{what}: exact counts asked for");
            }
            if let (Some(a), Some(b)) = (got.1, want.1) {
                assert_eq!(a, b, "{what}: totals");
            }
        }
    }
    for i in std::iter::once(one).chain(many) {
        check_explanations(i, r, q, ctx);
    }
    // And the answer is right, not merely the same.
    for m in many {
        let res = m.search_query(q, &SearchOptions { limit: 5, ..Default::default() }).unwrap();
        let hits: Vec<(String, f32)> = res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        check_top_k(r, q, res.total, &hits, 5, &format!("{ctx} ({} shards)", m.shards().len()));
    }
}

/// Each top hit's explanation is its score, bit for bit, with parts that add up; a live document the query
/// does not match has none; an unknown `_id` is not found.
fn check_explanations(index: &Index, r: &Reference, q: &Query, ctx: &str) {
    let what = format!("{ctx}: {} shards, query {q:?}", index.shards().len());
    let res = index.search_query(q, &SearchOptions { limit: 5, ..Default::default() }).unwrap();
    for h in &res.hits {
        let (found, e) = index.explain(q, &h.id).unwrap();
        assert!(found, "{what}: hit {} not found", h.id);
        let e = e.unwrap_or_else(|| panic!("{what}: hit {} has no explanation", h.id));
        assert_eq!(e.value.to_bits(), h.score.to_bits(), "{what}: hit {}: {e:#?}", h.id);
        check_parts(&e, &what);
    }
    // The hits by shard and doc id, planned once: the same explanations.
    let by_doc: Vec<(usize, u32)> = res.hits.iter().map(|h| (h.shard, h.doc)).collect();
    for (h, e) in res.hits.iter().zip(index.explain_hits(q, &by_doc).unwrap()) {
        assert_eq!(e.map(|e| e.value.to_bits()), Some(h.score.to_bits()), "{what}: hit {} by doc", h.id);
    }
    if let Some(d) = r.docs.iter().find(|d| d.live && r.eval(q, d).is_none()) {
        assert_eq!(index.explain(q, &d.id).unwrap(), (true, None), "{what}: {} does not match", d.id);
    }
    if let Some(d) = r.docs.iter().find(|d| !r.docs.iter().any(|x| x.live && x.id == d.id)) {
        assert_eq!(index.explain(q, &d.id).unwrap(), (false, None), "{what}: {} is deleted", d.id);
    }
    assert_eq!(index.explain(q, "no-such-id").unwrap(), (false, None), "{what}");
}

/// A combination's details make its value (up to float rounding: the evaluator sums in its own order).
fn check_parts(e: &Explanation, what: &str) {
    let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1e-2);
    let values: Vec<f32> = e.details.iter().map(|d| d.value).collect();
    let made = if e.description == "sum of:" || e.description.starts_with("sum of the") {
        Some(values.iter().sum())
    } else if e.description == "product of:" || e.description.starts_with("score, computed as idf * tf") {
        Some(values.iter().product())
    } else if e.description == "max of:" {
        Some(values.iter().copied().fold(0.0, f32::max))
    } else if let Some(rest) = e.description.strip_prefix("max plus ") {
        let tie: f32 = rest.split(' ').next().unwrap().parse().unwrap();
        let max = values.iter().copied().fold(0.0, f32::max);
        Some(max + tie * (values.iter().sum::<f32>() - max))
    } else {
        None
    };
    if let Some(made) = made {
        assert!(close(made, e.value), "{what}: {} made of {values:?} = {made}: {e:#?}", e.value);
    }
    e.details.iter().for_each(|d| check_parts(d, what));
}

fn run(ops: Vec<Op>, durability: Durability) {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let counts = [1, 2, 3];
    let mut idx: Vec<Index> = counts.iter().zip(&dirs).map(|(&n, d)| open(d.path(), n, durability)).collect();
    let mut r = Reference::default();
    for (i, op) in ops.into_iter().enumerate() {
        let ctx = format!("op {i}");
        match op {
            Op::Add(d) => {
                let replaced: Vec<bool> = idx.iter().map(|x| x.add(d.json()).unwrap().replaced).collect();
                assert!(replaced.iter().all(|&x| x == replaced[0]), "{ctx}: replaced flags {replaced:?}");
                r.add(d);
            }
            Op::Delete(id) => {
                let id = format!("d{id}");
                let want = r.delete(&id);
                for x in &idx {
                    assert_eq!(x.delete(&id).unwrap(), want, "{ctx}: delete {id}");
                    assert!(x.get(&id).unwrap().is_none());
                }
            }
            Op::Query(q) => compare(&idx[0], &idx[1..], &r, &q, &ctx),
            Op::Seal => idx.iter().for_each(|x| {
                x.seal().unwrap();
                x.wait_idle().unwrap();
            }),
            Op::CommitMerge => {
                idx.iter().flat_map(|x| x.shards()).for_each(|s| s.commit_and_merge_all().unwrap())
            }
            Op::Compact => idx.iter().flat_map(|x| x.shards()).for_each(|s| s.compact_now().unwrap()),
            Op::ForceMerge(n) => idx.iter().for_each(|x| {
                x.force_merge(n).unwrap();
            }),
            Op::Reopen => {
                for x in &idx {
                    x.close().unwrap();
                }
                idx.clear();
                idx = counts.iter().zip(&dirs).map(|(&n, d)| open(d.path(), n, durability)).collect();
            }
        }
    }
    for w in WORDS {
        compare(&idx[0], &idx[1..], &r, &Query::Term { field: None, text: w.into() }, "final");
    }
    compare(&idx[0], &idx[1..], &r, &Query::MatchAll, "final");
    let live = r.docs.iter().filter(|d| d.live).count() as u64;
    for x in &idx {
        let st = x.stats();
        assert_eq!(st.shard_docs.len(), x.shards().len());
        assert_eq!(st.shard_docs.iter().sum::<u64>(), st.shard.docs);
        assert_eq!(x.count("*:*").unwrap(), live);
        x.close().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn shards_answer_like_one_shard(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, Durability::Graceful);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Crash-safe sharded index: every shard logs its adds with their sequence numbers. A copy of the live
/// directory taken without a close (what a crash leaves: the unsealed documents exist only in the tLogs)
/// recovers to the same answers, and numbering goes on after the newest recovered document.
#[test]
fn sharded_crash_recovery_keeps_documents_and_order() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let docs: Vec<serde_json::Value> = (0..60)
        .map(|i| serde_json::json!({"_id": format!("d{i}"), "title": "same words", "body": "same words here", "tag": "red", "n": i % 7}))
        .collect();
    let before;
    {
        let index = open(dir.path(), 3, Durability::CrashSafe);
        for d in &docs {
            index.add(d.clone()).unwrap();
        }
        before = answer(
            &index,
            &Query::MatchAll,
            &SearchOptions { limit: 20, sort: Sort::Newest, ..Default::default() },
        );
        // Every document scores the same on this query: the order is the sequence order alone.
        let ties =
            answer(&index, &Query::Term { field: None, text: "same".into() }, &SearchOptions::default());
        let ids: Vec<&str> = ties.0.iter().map(|h| h.0.as_str()).collect();
        assert_eq!(ids, ["d59", "d58", "d57", "d56", "d55", "d54", "d53", "d52", "d51", "d50"]);
        assert!(index.stats().shard_docs.iter().all(|&n| n > 0), "every shard got documents");
        index.sync().unwrap();
        index.wait_idle().unwrap();
        copy_dir(dir.path(), crashed.path());
        index.close().unwrap();
    }
    let index = open(crashed.path(), 3, Durability::CrashSafe);
    assert!(index.stats().recovery.is_some());
    let after = answer(
        &index,
        &Query::MatchAll,
        &SearchOptions { limit: 20, sort: Sort::Newest, ..Default::default() },
    );
    assert_eq!(after, before);
    index.add(serde_json::json!({"_id": "new", "title": "t", "body": "b", "tag": "red", "n": 1})).unwrap();
    let newest = index
        .search_query(&Query::MatchAll, &SearchOptions { limit: 1, sort: Sort::Newest, ..Default::default() })
        .unwrap();
    assert_eq!(newest.hits[0].id, "new", "numbering resumes after the newest recovered document");
}

/// An open that fails part-way (here: shard 1's heap is locked by someone else) abandons the shards it had
/// opened without closing them, so their logs still hold everything for the next open: no acknowledged
/// document is lost to a half-finished recovery.
#[test]
fn a_failed_open_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    {
        let index = open(dir.path(), 2, Durability::CrashSafe);
        for i in 0..40 {
            index.add(serde_json::json!({"_id": format!("d{i}"), "body": "kept words"})).unwrap();
        }
        index.sync().unwrap();
        index.wait_idle().unwrap();
        copy_dir(dir.path(), crashed.path());
        index.close().unwrap();
    }
    let heap = std::fs::File::open(crashed.path().join("shard-1").join("heap.spirit")).unwrap();
    heap.lock().unwrap();
    let err = Index::open("t", crashed.path(), ShardConfig::default(), None, None)
        .err()
        .expect("shard 1 is locked");
    assert!(matches!(err, spirit::Error::Locked(_)), "{err}");
    heap.unlock().unwrap();
    drop(heap);
    let index = open(crashed.path(), 2, Durability::CrashSafe);
    assert_eq!(index.count("kept").unwrap(), 40);
    assert!(index.stats().recovery.is_some(), "the second open still recovers from the logs");
}

#[test]
fn shard_count_is_fixed_and_budgets_are_split() {
    let dir = tempfile::tempdir().unwrap();
    {
        let index = open(dir.path(), 2, Durability::Graceful);
        assert_eq!(index.shards().len(), 2);
        assert_eq!(index.stats().shard.dram.budget, 2 * (8 << 20));
        index.add(serde_json::json!({"_id": "a", "body": "x"})).unwrap();
        index.close().unwrap();
    }
    // Reopening with other settings keeps the shards the directory has.
    let index = open(dir.path(), 5, Durability::Graceful);
    assert_eq!(index.shards().len(), 2);
    assert_eq!(index.settings().number_of_shards, 2);
    assert!(
        index.schema().to_mappings()["properties"].get("_seq").is_none(),
        "the sequence column is hidden"
    );
    // Users cannot name it: a document's own `_seq` is kept in `_source` only, queries and sorts find nothing.
    index.add(serde_json::json!({"_id": "b", "body": "x", "_seq": "not a number"})).unwrap();
    assert_eq!(index.count("_seq:[0 TO 1000]").unwrap(), 0);
    assert_eq!(index.count("x").unwrap(), 2);
    assert!(index.field_sort("_seq", false).is_err());
    index.close().unwrap();
    drop(index);
    // A shard directory missing from the sequence is refused, not opened as a new index.
    std::fs::remove_dir_all(dir.path().join("shard-0")).unwrap();
    let err = Index::open("t", dir.path(), ShardConfig::default(), None, None).err().unwrap();
    assert!(err.to_string().contains("without gaps"), "{err}");
    let bad = tempfile::tempdir().unwrap();
    let settings = IndexSettings { number_of_shards: 0, ..Default::default() };
    let err = Index::open("t", bad.path(), ShardConfig::default(), None, Some(settings)).err().unwrap();
    assert!(err.to_string().contains("number_of_shards"), "{err}");
}

/// An index's stats are its shards' summed field by field: every count and byte figure is the shards' total
/// (none left out, none counted twice), the epoch and the next log sequence number the highest, the hit rates
/// recomputed from the summed counts, and the durability the shards'.
#[test]
fn index_stats_sum_every_shard_field_once() {
    let dir = tempfile::tempdir().unwrap();
    // A selective cache too small for every term, so it rejects some: the counters checked below are not 0.
    let cfg = ShardConfig {
        dram_budget: 2 * (8 << 20),
        persistent_budget: 1 << 30,
        selective_cache_bytes: Some(2 * 1500),
        durability: Durability::CrashSafe,
        ..Default::default()
    };
    let settings = IndexSettings { number_of_shards: 2, ..Default::default() };
    let index = Index::open("t", dir.path(), cfg, Some(&mappings()), Some(settings)).unwrap();
    for i in 0..400 {
        let body = format!("alpha w{} w{} x{}", i % 7, i % 13, i % 40);
        index.add(serde_json::json!({"_id": format!("d{i}"), "body": body})).unwrap();
    }
    for i in 3..13 {
        index.delete(&format!("d{i}")).unwrap();
    }
    index.seal().unwrap();
    for sh in index.shards() {
        sh.commit_and_merge_all().unwrap();
    }
    let opts = SearchOptions { limit: 5, ..Default::default() };
    for round in 0..2 {
        for t in 0..40 {
            index.search(&format!("alpha x{t} w{}", (t + round) % 13), &opts).unwrap();
        }
    }
    let per: Vec<spirit::shard::ShardStats> = index.shards().iter().map(|s| s.stats()).collect();
    let parts: Vec<serde_json::Value> = per.iter().map(|s| serde_json::to_value(s).unwrap()).collect();
    let total = serde_json::to_value(spirit::shard::ShardStats::sum(&per)).unwrap();
    fn check(path: &str, total: &serde_json::Value, parts: &[&serde_json::Value], leaves: &mut usize) {
        use serde_json::Value;
        match total {
            Value::Object(m) => {
                for (k, v) in m {
                    let sub: Vec<&Value> = parts.iter().map(|p| &p[k.as_str()]).collect();
                    check(&format!("{path}.{k}"), v, &sub, leaves);
                }
            }
            Value::Number(n) => {
                *leaves += 1;
                // A map key one shard lacks (no segment in that state there) counts as 0.
                let xs: Vec<f64> =
                    parts.iter().map(|p| if p.is_null() { 0.0 } else { p.as_f64().expect(path) }).collect();
                let key = path.rsplit('.').next().unwrap();
                let want = match key {
                    "epoch" | "tlog_next_lsn" => xs.iter().copied().fold(f64::MIN, f64::max),
                    // Recomputed from the summed counts (checked apart below).
                    "hit_rate" => return,
                    _ => xs.iter().sum(),
                };
                assert_eq!(n.as_f64().unwrap(), want, "{path}: shards {xs:?}");
            }
            other => assert!(parts.iter().all(|p| *p == other), "{path}: {other} against {parts:?}"),
        }
    }
    let mut leaves = 0;
    check("stats", &total, &parts.iter().collect::<Vec<_>>(), &mut leaves);
    assert!(leaves > 40, "the walk reached the counters ({leaves})");
    assert_eq!(total["docs"].as_u64().unwrap(), 390);
    // Counters the walk would catch counted twice or left out: not 0 in every shard.
    for p in &parts {
        for (group, key) in
            [("selective_cache", "hits"), ("selective_cache", "misses"), ("selective_cache", "rejected")]
        {
            assert!(p[group][key].as_u64().unwrap() > 0, "{group}.{key}: {p}");
        }
        for key in ["flushes", "merges", "docs", "deleted", "tlog_syncs"] {
            assert!(p[key].as_u64().unwrap() > 0, "{key}: {p}");
        }
    }
    // Hit rates from the summed counts: the result cache's hits over hits, misses and stale entries; the
    // selective cache's hits and refreshes over those and misses.
    let n = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap();
    let rate = |hits: f64, asked: f64| if asked == 0.0 { 0.0 } else { hits / asked };
    let c = &total["result_cache"];
    assert_eq!(n(c, "hit_rate"), rate(n(c, "hits"), n(c, "hits") + n(c, "misses") + n(c, "stale")));
    let h = &total["selective_cache"];
    let found = n(h, "hits") + n(h, "refreshes");
    assert_eq!(n(h, "hit_rate"), rate(found, found + n(h, "misses")));
    index.close().unwrap();
}
