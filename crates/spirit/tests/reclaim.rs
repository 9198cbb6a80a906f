//! Compaction, retention and the reuse of persistent space (issue 3): compaction keeps every answer and
//! score, shortens chains, and its space comes back; retention drops the oldest segments by size and by age
//! and frees room when the persistent budget runs out; both survive a restart, crash-safe included.

mod common;

use common::*;
use spirit::query::Query;
use spirit::{CompactionPolicy, Durability, Index, RetentionPolicy, SearchOptions, ShardConfig};
use std::path::Path;

const WORDS: [&str; 8] = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"];

fn doc(i: usize) -> RefDoc {
    let w = |k: usize| WORDS[(i * 7 + k * 3 + i / 5) % 8].to_string();
    RefDoc {
        id: format!("d{}", i % 400),
        title: vec![w(1)],
        body: (0..1 + i % 9).map(w).collect(),
        tag: ["red", "green", "blue"][i % 3].into(),
        n: (i % 40) as i64,
        live: true,
        seq: 0,
    }
}

fn cfg(durability: Durability, factor: u32) -> ShardConfig {
    ShardConfig {
        dram_budget: 8 << 20,
        fresh_segment_bytes: Some(256 << 10),
        max_docs_per_segment: 40,
        durability,
        compaction: CompactionPolicy { factor, ..Default::default() },
        ..Default::default()
    }
}

fn queries() -> Vec<Query> {
    let mut q: Vec<Query> = WORDS.iter().map(|w| Query::Term { field: None, text: w.to_string() }).collect();
    q.push(Query::Phrase { field: Some("body".into()), text: "alpha delta".into(), slop: 0 });
    q.push(Query::Prefix { field: None, prefix: "e".into() });
    q.push(Query::Term { field: Some("tag".into()), text: "red".into() });
    q.push(Query::MatchAll);
    q
}

fn check_all(index: &Index, r: &Reference, ctx: &str) {
    for q in queries() {
        let res = index.search_query(&q, &SearchOptions { limit: 7, ..Default::default() }).unwrap();
        let hits: Vec<(String, f32)> = res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        check_top_k(r, &q, res.total, &hits, 7, ctx);
    }
}

fn load(index: &Index, r: &mut Reference, range: std::ops::Range<usize>) {
    for i in range {
        let d = doc(i);
        index.add(d.json()).unwrap();
        r.add(d);
        if i % 11 == 3 {
            let id = format!("d{}", (i * 13) % 400);
            assert_eq!(index.delete(&id).unwrap(), r.delete(&id));
        }
    }
}

fn open(dir: &Path, c: ShardConfig) -> Index {
    Index::open("r", dir, c, Some(&mappings()), None).unwrap()
}

/// An index (compaction factor 4) with 1200 adds of 400 ids (two thirds replace a live version) and some
/// deletes, every segment merged; its directory, reference and configuration.
fn loaded(durability: Durability) -> (tempfile::TempDir, Reference, ShardConfig, Index) {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Reference::default();
    let c = cfg(durability, 4);
    let index = open(dir.path(), c.clone());
    load(&index, &mut r, 0..1200);
    index.shard().commit_and_merge_all().unwrap();
    (dir, r, c, index)
}

#[test]
fn compaction_keeps_answers_shortens_the_index_and_reuses_space() {
    for durability in [Durability::Graceful, Durability::CrashSafe] {
        let (dir, mut r, c, index) = loaded(durability);
        index.shard().compact_now().unwrap();
        let st = index.stats().shard;
        assert!(st.compactions >= 5, "{durability:?}: {} compactions", st.compactions);
        let merged = st.segments[&spirit::gdt::SegState::Merged];
        assert!(merged < 1200 / 40 / 2, "{durability:?}: {merged} merged segments after compaction");
        check_all(&index, &r, &format!("{durability:?} after compaction"));
        assert!(index.shard().check().problems.is_empty(), "{:?}", index.shard().check().problems);

        // Space comes back: another round of the same size grows the heap far less than the first did.
        let head1 = index.stats().shard.persistent.head;
        load(&index, &mut r, 1200..2400);
        index.shard().compact_now().unwrap();
        // Crash-safe: released space waits for a checkpoint after its release; deletes trigger none, so
        // another compaction round (or the close) does it.
        let st = index.stats().shard;
        let grown = st.persistent.head - head1;
        assert!(
            grown < head1,
            "{durability:?}: the second round grew the heap by {grown}, the first to {head1}"
        );
        assert!(
            st.persistent.free + st.persistent.pending > 0,
            "{durability:?}: nothing was given back ({:?})",
            st.persistent
        );
        check_all(&index, &r, &format!("{durability:?} second round"));
        index.close().unwrap();
        drop(index);

        // After a restart the answers are the same and free space is known again.
        let index = open(dir.path(), c.clone());
        check_all(&index, &r, &format!("{durability:?} after reopen"));
        let st = index.stats().shard;
        assert!(st.persistent.free > 0, "{durability:?}: free space after reopen: {:?}", st.persistent);
        // The allocation head moves back to the last live extent (never past the file), not below it.
        assert!(st.persistent.head <= st.persistent.file_len, "{:?}", st.persistent);
        assert!(index.shard().check().problems.is_empty());
        index.close().unwrap();
    }
}

/// Updates and deletes leave no garbage behind compaction: a force merge purges every deleted document
/// (postings and stored records; the image holds about what an index of the live documents alone holds),
/// every answer and score stays the reference's (statistics count the purged documents as before), and a
/// merged segment that deletes alone push past `deletes_pct_allowed` is rewritten on a pause in ingestion.
/// The purged images survive a restart, crash-safe included.
#[test]
fn compaction_purges_deleted_documents_and_answers_do_not_change() {
    for durability in [Durability::Graceful, Durability::CrashSafe] {
        let ctx = |what: &str| format!("{durability:?}: {what}");
        let (dir, mut r, c, index) = loaded(durability);
        check_all(&index, &r, &ctx("before the force merge"));
        let before = index.stats().shard;
        assert_eq!(index.force_merge(1).unwrap(), 1);
        let st = index.stats().shard;
        assert!(st.deleted > 700, "{}", ctx(&format!("{} deleted", st.deleted)));
        assert_eq!(st.purged, st.deleted, "{}", ctx("every deleted document is purged"));
        check_all(&index, &r, &ctx("after the force merge"));
        assert!(index.shard().check().problems.is_empty(), "{:?}", index.shard().check().problems);
        // The live documents alone, compacted the same way.
        let live_dir = tempfile::tempdir().unwrap();
        let live = open(live_dir.path(), c.clone());
        for d in r.docs.iter().filter(|d| d.live) {
            live.add(d.json()).unwrap();
        }
        assert_eq!(live.force_merge(1).unwrap(), 1);
        let live_bytes = live.stats().shard.image_bytes_persistent;
        live.close().unwrap();
        println!(
            "{durability:?}: images {} bytes before the force merge, {} after; the live documents alone {live_bytes}",
            before.image_bytes_persistent, st.image_bytes_persistent
        );
        assert!(
            st.image_bytes_persistent < 2 * live_bytes,
            "{}",
            ctx(&format!("{} image bytes, {live_bytes} for the live documents", st.image_bytes_persistent))
        );

        // Deletes alone, past `deletes_pct_allowed` (20%) of the one merged segment: purged on a pause.
        let live_ids: Vec<String> = r.docs.iter().filter(|d| d.live).map(|d| d.id.clone()).collect();
        for id in live_ids.iter().step_by(3) {
            assert!(index.delete(id).unwrap());
            r.delete(id);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while index.stats().shard.purged < index.stats().shard.deleted {
            assert!(std::time::Instant::now() < deadline, "{}", ctx("no purge after the deletes"));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        check_all(&index, &r, &ctx("after the deletes were purged"));
        for id in live_ids.iter().take(30) {
            let d = r.docs.iter().rev().find(|d| &d.id == id).unwrap();
            assert_eq!(index.get(id).unwrap().is_some(), d.live, "{}", ctx(id));
        }
        index.close().unwrap();
        drop(index);

        let index = open(dir.path(), c.clone());
        let st = index.stats().shard;
        assert_eq!(st.purged, st.deleted, "{}", ctx("after reopening"));
        check_all(&index, &r, &ctx("after reopening"));
        assert!(index.shard().check().problems.is_empty());
        index.close().unwrap();
    }
}

#[test]
fn without_compaction_chains_grow_and_with_it_they_do_not() {
    let mut segs = vec![];
    for factor in [0, 4] {
        let dir = tempfile::tempdir().unwrap();
        let index = open(dir.path(), cfg(Durability::Graceful, factor));
        let mut r = Reference::default();
        load(&index, &mut r, 0..1000);
        index.shard().compact_now().unwrap();
        segs.push(index.stats().shard.segments[&spirit::gdt::SegState::Merged]);
        check_all(&index, &r, &format!("factor {factor}"));
        index.close().unwrap();
    }
    assert!(segs[0] >= 20, "{segs:?}");
    assert!(segs[1] * 3 <= segs[0], "compaction should cut merged segments well down: {segs:?}");
}

/// A body of 60 words drawn from a vocabulary of 5,000, so images do not compress to nothing.
fn text(i: usize) -> String {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..60)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("w{}", x % 5000)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Adds docs `x{from}..x{to}` in bulk batches (one durability barrier per batch).
fn ingest(index: &Index, range: std::ops::Range<usize>) {
    for chunk in range.collect::<Vec<_>>().chunks(250) {
        let docs = chunk
            .iter()
            .map(|&i| serde_json::json!({"_id": format!("x{i}"), "body": format!("lorem {}", text(i))}));
        for r in index.add_bulk(docs).unwrap() {
            r.unwrap();
        }
    }
}

#[test]
fn retention_by_size_drops_the_oldest_and_bounds_the_heap() {
    for durability in [Durability::Graceful, Durability::CrashSafe] {
        let dir = tempfile::tempdir().unwrap();
        let max = 4 << 20;
        let c = ShardConfig {
            persistent_budget: 64 << 20,
            retention: RetentionPolicy { max_bytes: Some(max), max_age_secs: None },
            max_docs_per_segment: 500,
            ..cfg(durability, 4)
        };
        let index = open(dir.path(), c.clone());
        let n = 20_000;
        let mut peak = 0;
        for round in 0..n / 2000 {
            ingest(&index, round * 2000..(round + 1) * 2000);
            // compact_now merges everything and applies retention synchronously: then the segment data
            // (images + dictionary) is back near the bound (the dictionary shrinks at its next rebuild).
            index.shard().compact_now().unwrap();
            let st = index.stats().shard;
            let data = st.image_bytes_persistent + st.merged_dictionary_bytes;
            assert!(
                data <= 2 * max,
                "{durability:?}: {data} bytes of segment data after round {round}, bound {max}"
            );
            peak = peak.max(st.persistent.used);
        }
        // The last round's segments may still be flushing and merging, and retention may drop one more: the
        // count and the dropped documents are read once the pipeline is idle (a drop between the two reads
        // makes `live + dropped` fall short of the documents added; a full test run failed that check once).
        index.wait_idle().unwrap();
        let st = index.stats().shard;
        assert!(st.dropped_segments > 0 && st.dropped_docs > 0, "{durability:?}: nothing dropped");
        let live = index.count("lorem").unwrap();
        assert_eq!(live + st.dropped_docs, n as u64, "{durability:?}: dropped + live = added");
        // The oldest went, the newest stayed.
        assert!(index.get("x0").unwrap().is_none());
        assert!(index.get(&format!("x{}", n - 1)).unwrap().is_some());
        assert!(index.shard().check().problems.is_empty(), "{:?}", index.shard().check().problems);
        eprintln!("{durability:?}: peak {peak} B used, {} docs dropped, {live} live", st.dropped_docs);
        index.close().unwrap();
        drop(index);
        // (Closing seals, merges and may apply retention once more.)
        let index = open(dir.path(), c);
        let after = index.count("lorem").unwrap();
        assert!(after > 0 && after <= live + 500, "{durability:?}: {after} live after reopen, {live} before");
        assert!(index.get(&format!("x{}", n - 1)).unwrap().is_some());
        assert!(index.shard().check().problems.is_empty());
        index.close().unwrap();
    }
}

#[test]
fn retention_by_age_drops_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    let c = ShardConfig {
        retention: RetentionPolicy { max_bytes: None, max_age_secs: Some(1) },
        ..cfg(Durability::CrashSafe, 0)
    };
    let index = open(dir.path(), c);
    for i in 0..200 {
        index.add(serde_json::json!({"_id": format!("old{i}"), "body": "old news"})).unwrap();
    }
    index.shard().commit_and_merge_all().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for i in 0..10 {
        index.add(serde_json::json!({"_id": format!("new{i}"), "body": "fresh news"})).unwrap();
    }
    index.shard().compact_now().unwrap();
    assert_eq!(index.count("old").unwrap(), 0, "segments older than a second are gone");
    assert_eq!(index.count("fresh").unwrap(), 10, "the fresh segment is not touched");
    assert_eq!(index.stats().shard.dropped_docs, 200);
    index.close().unwrap();
}

/// Out of persistent space with retention configured: the oldest segments make room and ingestion goes on
/// (without retention the same budget refuses writes: `crash.rs`). Graceful mode: in crash-safe mode the
/// space a drop frees is reusable only after a checkpoint, which an engrave blocked on a full heap cannot
/// always get (ARCHITECTURE.md, known gaps), so there retention relies on keeping a quarter of the budget
/// free ahead of time.
#[test]
#[ignore = "minutes in a debug build on 2 cores: cargo test -p spirit --test reclaim -- --ignored"]
fn out_of_space_with_retention_keeps_ingesting() {
    let dir = tempfile::tempdir().unwrap();
    let c = ShardConfig {
        persistent_budget: 24 << 20,
        retention: RetentionPolicy { max_bytes: Some(1 << 30), max_age_secs: None },
        max_docs_per_segment: 500,
        ..cfg(Durability::Graceful, 4)
    };
    let index = open(dir.path(), c.clone());
    let n = 40_000;
    ingest(&index, 0..n);
    index.shard().compact_now().unwrap();
    let st = index.stats().shard;
    eprintln!("{:?}, dropped {} docs", st.persistent, st.dropped_docs);
    assert!(st.dropped_docs > 0, "the budget should have forced retention");
    assert!(st.persistent.file_len <= 24 << 20);
    assert_eq!(index.count("lorem").unwrap() + st.dropped_docs, n as u64);
    assert!(index.get(&format!("x{}", n - 1)).unwrap().is_some());
    index.close().unwrap();
    drop(index);
    let index = open(dir.path(), c);
    assert!(index.get(&format!("x{}", n - 1)).unwrap().is_some());
}
