//! Deterministic walks through the lifecycle stages, checking answers at each one.

mod common;

use common::*;
use spirit::gdt::SegState;
use spirit::query::Query;
use spirit::{CommitPolicy, CompactionPolicy, Durability, Index, SearchOptions, ShardConfig};

fn cfg() -> ShardConfig {
    ShardConfig {
        dram_budget: 8 << 20,
        persistent_budget: 1 << 30,
        fresh_segment_bytes: Some(256 << 10),
        max_docs_per_segment: 5,
        commit: CommitPolicy::Lazy,
        // Segment counts are checked exactly at each stage: no compaction when a slow run pauses between
        // them (`merged_segments_compact_once_ingestion_pauses` turns it on).
        compaction: CompactionPolicy { on_pause: false, ..Default::default() },
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

/// Frequencies of 255 and more — a fresh segment's posting word holds the frequency in a byte and escapes
/// larger ones — score and match phrases alike in the fresh segment, after flush and after merge.
#[test]
fn frequencies_past_a_byte_answer_alike_at_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open("t", dir.path(), cfg(), Some(&mappings()), None).unwrap();
    let mut r = Reference::default();
    for i in 0..12 {
        let mut d = doc(i);
        if i % 3 != 1 {
            // "alpha" 250 to 580 times, then the usual words (a phrase "alpha beta" where `i / 3` is odd).
            let mut body = vec!["alpha".to_string(); 250 + 30 * i];
            body.append(&mut d.body);
            d.body = body;
        }
        index.add(d.json()).unwrap();
        r.add(d);
    }
    check_all(&index, &r, "fresh");
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    check_all(&index, &r, "engraved");
    index.shard().commit_and_merge_all().unwrap();
    check_all(&index, &r, "merged");
    index.close().unwrap();
}

/// An index under lazy commit with `max_unmerged` and compaction off (merged segments stay one per image, so
/// counts are exact), 30 documents in six segments, the last one sealed; with its reference.
fn six_sealed_segments(
    dir: &std::path::Path,
    max: Option<usize>,
    durability: Durability,
) -> (Index, Reference) {
    let compaction = CompactionPolicy { factor: 0, ..Default::default() };
    sealed_index(dir, ShardConfig { max_unmerged: max, compaction, durability, ..cfg() }, 30)
}

/// An index of `docs` documents (`doc(0..docs)`), the last segment sealed; with its reference.
fn sealed_index(dir: &std::path::Path, c: ShardConfig, docs: usize) -> (Index, Reference) {
    let index = Index::open("t", dir, c, Some(&mappings()), None).unwrap();
    let mut r = Reference::default();
    for i in 0..docs {
        index.add(doc(i).json()).unwrap();
        r.add(doc(i));
    }
    index.shard().seal().unwrap();
    (index, r)
}

/// Lazy commit keeps at most `max_unmerged` engraved segments out of the merged segment (older ones are
/// committed and merged even though DRAM is plentiful); `None` keeps every one until DRAM runs short.
#[test]
fn lazy_commit_bounds_the_unmerged_segments() {
    let runs = [None, Some(0), Some(1), Some(3)].map(|m| (m, Durability::Graceful));
    // Crash-safe: the engraver checkpoints between engraving a segment and committing the ones over the
    // bound, and `wait_idle` must not return in between.
    for (max, durability) in runs.into_iter().chain([(Some(1), Durability::CrashSafe)]) {
        let dir = tempfile::tempdir().unwrap();
        let (index, r) = six_sealed_segments(dir.path(), max, durability);
        // Engraved: nothing sealed waits for the flusher or engraver, and no more than the bound is left
        // uncommitted; merges may still be running.
        index.wait_engraved().unwrap();
        let segs = index.stats().shard.segments;
        assert_eq!((segs[&SegState::Fresh], segs[&SegState::Flushed]), (0, 0), "{max:?}: {segs:?}");
        assert_eq!(segs.values().sum::<usize>(), 6, "{max:?}: {segs:?}");
        assert!(max.is_none_or(|m| segs[&SegState::Engraved] <= m), "{max:?}: {segs:?}");
        check_all(&index, &r, &format!("max_unmerged {max:?}, engraved"));
        index.shard().wait_idle().unwrap();
        let segs = index.stats().shard.segments;
        let (engraved, merged) = (segs[&SegState::Engraved], segs[&SegState::Merged]);
        assert_eq!(segs.values().sum::<usize>(), 6, "{max:?}: {segs:?}");
        match max {
            None => assert_eq!((engraved, merged), (6, 0), "{segs:?}"),
            // (Or all merged: a second or two after ingestion pauses the merger merges the rest, see below.)
            Some(m) => {
                assert!((engraved, merged) == (m, 6 - m) || (engraved, merged) == (0, 6), "{max:?}: {segs:?}")
            }
        }
        check_all(&index, &r, &format!("max_unmerged {max:?}"));
        index.close().unwrap();
    }
}

/// Once ingestion pauses (no document for a second or two), the engraved segments lazy commit keeps out of
/// the merged segment are committed and merged, so queries probe one dictionary; pure lazy commit (no bound)
/// keeps them engraved until DRAM runs short.
#[test]
fn engraved_segments_merge_once_ingestion_pauses() {
    for max in [Some(3), None] {
        let dir = tempfile::tempdir().unwrap();
        let (index, r) = six_sealed_segments(dir.path(), max, Durability::Graceful);
        index.shard().wait_idle().unwrap();
        let t = std::time::Instant::now();
        let segs = loop {
            let segs = index.stats().shard.segments;
            // Committed is the step between engraved and merged: wait past it too.
            let settled = segs[&SegState::Engraved] == 0 && segs[&SegState::Committed] == 0;
            if settled || t.elapsed().as_secs_f64() > 4.0 {
                break segs;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        match max {
            Some(_) => assert_eq!((segs[&SegState::Engraved], segs[&SegState::Merged]), (0, 6), "{segs:?}"),
            None => assert_eq!((segs[&SegState::Engraved], segs[&SegState::Merged]), (6, 0), "{segs:?}"),
        }
        check_all(&index, &r, &format!("max_unmerged {max:?}, ingestion paused"));
        index.close().unwrap();
    }
}

/// Once ingestion pauses, the newest merged segments are compacted into one (`CompactionPolicy::on_pause`),
/// on top of what the level policy left; with `on_pause` off they stay as the level policy left them.
#[test]
fn merged_segments_compact_once_ingestion_pauses() {
    for on_pause in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let compaction = CompactionPolicy { factor: 4, on_pause, ..Default::default() };
        let c = ShardConfig { max_unmerged: Some(0), compaction, ..cfg() };
        let (index, r) = sealed_index(dir.path(), c, 30);
        index.shard().wait_idle().unwrap();
        // Six segments of five documents, committed and merged at once (`max_unmerged: Some(0)`); the level
        // policy compacts the first four, leaving three merged segments.
        let merged = || index.stats().shard.segments[&SegState::Merged];
        let t = std::time::Instant::now();
        while merged() != 1 && t.elapsed().as_secs_f64() < 5.0 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let st = index.stats().shard;
        if on_pause {
            assert_eq!(merged(), 1, "{st:?}");
        } else {
            assert_eq!(merged(), 3, "{st:?}");
        }
        assert_eq!(st.segments.values().sum::<usize>(), merged(), "{st:?}");
        check_all(&index, &r, &format!("on_pause {on_pause}, ingestion paused"));
        assert!(index.shard().check().problems.is_empty(), "{:?}", index.shard().check().problems);
        index.close().unwrap();
        drop(index);
        // The compacted segment is what a reopen finds.
        let index = Index::open("t", dir.path(), cfg(), Some(&mappings()), None).unwrap();
        check_all(&index, &r, &format!("on_pause {on_pause}, reopened"));
    }
}

#[test]
fn volatile_mode_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = ShardConfig { durability: spirit::Durability::Volatile, ..cfg() };
    let index = Index::open("t", dir.path(), c.clone(), Some(&mappings()), None).unwrap();
    for i in 0..12 {
        index.add(doc(i).json()).unwrap();
    }
    assert_eq!(index.count("alpha").unwrap(), 12);
    index.close().unwrap();
    drop(index);
    let index = Index::open("t", dir.path(), c, Some(&mappings()), None).unwrap();
    assert_eq!(index.count("alpha").unwrap(), 0, "volatile: nothing survives a restart");
}

#[test]
fn graceful_reopen_keeps_deletes_schema_and_ids() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Reference::default();
    {
        let index = Index::open("t", dir.path(), cfg(), Some(&mappings()), None).unwrap();
        for i in 0..23 {
            index.add(doc(i).json()).unwrap();
            r.add(doc(i));
        }
        assert!(index.delete("d3").unwrap());
        r.delete("d3");
        let mut d = doc(5);
        d.title = vec!["omega".into()];
        index.add(d.json()).unwrap();
        r.add(d);
        index.close().unwrap();
    }
    let index = Index::open("t", dir.path(), cfg(), None, None).unwrap();
    check_all(&index, &r, "reopened");
    assert!(index.get("d3").unwrap().is_none());
    assert!(String::from_utf8(index.get("d5").unwrap().unwrap()).unwrap().contains("omega"));
    assert_eq!(
        index.schema().field(index.schema().field_id("tag").unwrap()).ty,
        spirit::schema::FieldType::Keyword
    );
    // Generated ids stay unique across sessions.
    let a = index.add(serde_json::json!({"body": "x"})).unwrap();
    let b = index.add(serde_json::json!({"body": "x"})).unwrap();
    assert_ne!(a.id, b.id);
    index.close().unwrap();
}

/// An update whose old version lies in the segment sealed just before must not keep that segment's arena:
/// with a short-term ring of exactly two arenas, the writer sealing the next segment waits for that arena
/// (a regression: the writer held the old version's fresh descriptor across the seal and waited forever).
#[test]
fn updates_of_just_sealed_documents_do_not_hold_the_ring() {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    std::thread::spawn(move || {
        // Fresh arenas of a quarter of the budget: the short-term ring holds exactly two of them.
        let cfg = ShardConfig {
            fresh_segment_bytes: Some(2 << 20),
            max_docs_per_segment: 2,
            durability: Durability::Volatile,
            ..cfg()
        };
        assert_eq!(cfg.short_term_bytes(), 2 * cfg.fresh_bytes());
        let index = Index::open("t", &path, cfg, Some(&mappings()), None).unwrap();
        let mut r = Reference::default();
        for round in 0..40 {
            // a, b fill a segment; c seals it and starts the next, d fills that one; updating a (its old
            // version in the segment the flusher is working on) seals the full one.
            for i in [0, 1, 2, 3, 0] {
                let mut d = doc(4 * round + i);
                d.id = format!("r{round}-{i}");
                index.add(d.json()).unwrap();
                r.add(d);
            }
        }
        check_all(&index, &r, "after the updates");
        index.close().unwrap();
        tx.send(()).unwrap();
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the writer is stuck waiting for a fresh arena")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the writer thread failed (see above)")
        }
    }
}

/// An add's `_id` lookup searches the images' id tables in lockstep groups of 8
/// (`segment::image::ID_LOCKSTEP`), newest first, with fresh segments in between: with more images than
/// one group (compaction off, five documents per segment), updates and deletes of documents in every
/// segment — the oldest, the newest, both sides of a group boundary, one updated twice — each replace
/// exactly the live version, merged or not.
#[test]
fn updates_find_their_id_among_many_images() {
    let dir = tempfile::tempdir().unwrap();
    let compaction = CompactionPolicy { factor: 0, on_pause: false, ..Default::default() };
    let (index, mut r) = sealed_index(dir.path(), ShardConfig { compaction, ..cfg() }, 100);
    index.shard().wait_idle().unwrap();
    let images = index
        .stats()
        .shard
        .segments
        .iter()
        .filter(|(s, _)| **s != SegState::Fresh)
        .map(|(_, n)| n)
        .sum::<usize>();
    assert!(images > 16, "{images} image segments");
    for (round, i) in [0, 4, 5, 39, 40, 44, 45, 57, 99, 40, 0].into_iter().enumerate() {
        let mut d = doc(500 + round);
        d.id = format!("d{i}");
        index.add(d.json()).unwrap();
        r.add(d);
        check_all(&index, &r, &format!("after update {round} of d{i}"));
    }
    for i in [1, 41, 98] {
        assert!(index.delete(&format!("d{i}")).unwrap());
        assert!(r.delete(&format!("d{i}")));
        assert!(index.get(&format!("d{i}")).unwrap().is_none());
    }
    check_all(&index, &r, "after the deletes");
    index.shard().commit_and_merge_all().unwrap();
    for (round, i) in [2, 40, 97].into_iter().enumerate() {
        let mut d = doc(600 + round);
        d.id = format!("d{i}");
        index.add(d.json()).unwrap();
        r.add(d);
    }
    check_all(&index, &r, "after updates of merged documents");
    index.close().unwrap();
}

/// `_delete_by_query`'s two steps: the versions a query matched are deleted only while they are still live —
/// a version written in between survives and is a conflict, a document deleted in between is counted as
/// gone — with one and with three shards, and stopping at the first conflict when asked.
#[test]
fn deleting_matched_versions_spares_newer_ones() {
    for shards in [1, 3] {
        for stop in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let settings = spirit::IndexSettings { number_of_shards: shards, ..Default::default() };
            let c = ShardConfig { dram_budget: shards * (8 << 20), ..cfg() };
            let index = Index::open("t", dir.path(), c, None, Some(settings)).unwrap();
            for i in 0..30 {
                index.add(serde_json::json!({"_id": format!("d{i}"), "body": if i % 3 == 0 { "gone" } else { "kept" }})).unwrap();
                if i % 7 == 6 {
                    index.seal().unwrap();
                }
            }
            let q = spirit::query::parse("body:gone").unwrap();
            let versions = index.matching_versions(&q).unwrap();
            let mut ids: Vec<&str> = versions.iter().map(|v| v.2.as_str()).collect();
            ids.sort();
            let mut want: Vec<String> = (0..30).filter(|i| i % 3 == 0).map(|i| format!("d{i}")).collect();
            want.sort();
            assert_eq!(ids, want);
            // Between the two steps: d0 gets a new version, d3 is deleted.
            index.add(serde_json::json!({"_id": "d0", "body": "gone again"})).unwrap();
            assert!(index.delete("d3").unwrap());
            let done = index.delete_versions(&versions, stop).unwrap();
            assert_eq!(done.conflicts, ["d0"], "shards {shards}");
            if stop {
                assert!(done.deleted < 8, "stopped at the conflict: {done:?}");
            } else {
                assert_eq!((done.deleted, done.gone), (8, 1), "shards {shards}");
                let opts = SearchOptions { limit: 100, ..Default::default() };
                let left: Vec<String> =
                    index.search("body:gone", &opts).unwrap().hits.into_iter().map(|h| h.id).collect();
                assert_eq!(left, ["d0"], "the newer version survives");
                assert_eq!(index.search("body:kept", &opts).unwrap().total, 20);
            }
        }
    }
}

/// Optimistic concurrency: a document's sequence number (`get_versioned`) names its live version through
/// flushes, merges and a graceful reopen; a conditional write or delete naming it goes in, one naming another
/// version (or a missing document) is a conflict that writes nothing; `Absent` creates only.
#[test]
fn conditional_writes_replace_only_the_version_named() {
    use spirit::{Error, Precondition};
    let conflict = |r: spirit::Result<spirit::AddResult>| match r {
        Err(Error::VersionConflict(m)) => m,
        other => panic!("expected a version conflict, got {other:?}"),
    };
    for shards in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let settings = spirit::IndexSettings { number_of_shards: shards, ..Default::default() };
        let c = ShardConfig { dram_budget: shards * (8 << 20), ..cfg() };
        let mut seqs = std::collections::HashMap::new();
        {
            let index = Index::open("t", dir.path(), c.clone(), None, Some(settings)).unwrap();
            for i in 0..20 {
                let id = format!("d{i}");
                let r = index
                    .add_with_id_if(Some(id.clone()), serde_json::json!({"n": i}), Precondition::Absent)
                    .unwrap();
                seqs.insert(id, r.doc as u64);
            }
            let m = conflict(index.add_with_id_if(
                Some("d1".into()),
                serde_json::json!({"n": 0}),
                Precondition::Absent,
            ));
            assert!(m.contains("document already exists"), "{m}");
            // Sealed, flushed and merged: the sequence numbers stay.
            index.seal().unwrap();
            index.wait_idle().unwrap();
            for (id, &seq) in &seqs {
                let live = index.get_versioned(id).unwrap().unwrap();
                assert_eq!((live.seq_no, live.version), (seq, 1), "{id}, shards {shards}");
            }
            // The version read is replaced; a stale one, another one or a missing document is a conflict.
            let s2 = seqs["d2"];
            let r = index
                .add_with_id_if(Some("d2".into()), serde_json::json!({"n": 102}), Precondition::SeqNo(s2))
                .unwrap();
            assert!(r.replaced && r.doc as u64 != s2);
            assert_eq!(r.version, 2, "a rewrite is the next version");
            let m = conflict(index.add_with_id_if(
                Some("d2".into()),
                serde_json::json!({"n": 0}),
                Precondition::SeqNo(s2),
            ));
            assert!(
                m.contains(&format!("required seqNo [{s2}]"))
                    && m.contains(&format!("current document has seqNo [{}]", r.doc)),
                "{m}"
            );
            seqs.insert("d2".into(), r.doc as u64);
            let m = conflict(index.add_with_id_if(
                Some("nope".into()),
                serde_json::json!({"n": 0}),
                Precondition::SeqNo(0),
            ));
            assert!(m.contains("no document was found"), "{m}");
            assert!(index.get("nope").unwrap().is_none(), "a failed condition writes nothing");
            // Conditional deletes.
            let s3 = seqs["d3"];
            let seq_no = Precondition::SeqNo;
            assert!(matches!(
                index.delete_if_deferred("d3", seq_no(s3 + 1_000)),
                Err(Error::VersionConflict(_))
            ));
            assert!(index.get("d3").unwrap().is_some());
            assert_eq!(index.delete_if_deferred("d3", seq_no(s3)).unwrap().0, Some(1), "the deleted version");
            assert!(index.get("d3").unwrap().is_none());
            assert!(matches!(index.delete_if_deferred("d3", seq_no(s3)), Err(Error::VersionConflict(_))));
            seqs.remove("d3");
            // External versions: written only above the live one (or at it, with gte), and kept as given.
            let ext = |version, gte| Precondition::Version { version, gte };
            let put = |id: &str, n: u64, cond| {
                index.add_with_id_if(Some(id.into()), serde_json::json!({"n": n}), cond)
            };
            assert_eq!(put("d5", 205, ext(10, false)).unwrap().version, 10);
            let m = conflict(put("d5", 0, ext(10, false)));
            assert!(m.contains("current version [10] is higher or equal to the one provided [10]"), "{m}");
            let m = conflict(put("d5", 0, ext(9, true)));
            assert!(m.contains("current version [10] is higher than the one provided [9]"), "{m}");
            let r = put("d5", 305, ext(10, true)).unwrap();
            assert_eq!(r.version, 10);
            assert_eq!(
                put("d5", 405, Precondition::None).unwrap().version,
                11,
                "internal after external counts on"
            );
            assert_eq!(
                put("e1", 1, ext(7, false)).unwrap().version,
                7,
                "a new _id takes any external version"
            );
            // Versions are exact up to 2^53; above is refused, not rounded.
            assert_eq!(put("e2", 1, ext(1 << 53, false)).unwrap().version, 1 << 53);
            assert_eq!(index.get_versioned("e2").unwrap().unwrap().version, 1 << 53);
            assert!(matches!(put("e3", 1, ext((1 << 53) + 1, false)), Err(Error::InvalidArgument(_))));
            assert!(index.get("e3").unwrap().is_none());
            assert!(matches!(index.delete_if_deferred("e1", ext(7, false)), Err(Error::VersionConflict(_))));
            assert_eq!(index.delete_if_deferred("e1", ext(8, false)).unwrap().0, Some(7));
            assert_eq!(index.delete_if_deferred("e1", ext(9, false)).unwrap().0, None, "nothing to delete");
            seqs.insert("d5".into(), index.get_versioned("d5").unwrap().unwrap().seq_no);
            index.close().unwrap();
        }
        let index = Index::open("t", dir.path(), c, None, None).unwrap();
        for (id, &seq) in &seqs {
            let live = index.get_versioned(id).unwrap().unwrap();
            let version = match id.as_str() {
                "d2" => 2,
                "d5" => 11,
                _ => 1,
            };
            assert_eq!((live.seq_no, live.version), (seq, version), "{id} after reopen, shards {shards}");
        }
        assert!(String::from_utf8(index.get("d2").unwrap().unwrap()).unwrap().contains("102"));
        let s4 = seqs["d4"];
        let r = index
            .add_with_id_if(Some("d4".into()), serde_json::json!({"n": 104}), Precondition::SeqNo(s4))
            .unwrap();
        assert_eq!(r.version, 2);
        // Merged: versions stay.
        index.force_merge(1).unwrap();
        assert_eq!(index.get_versioned("d5").unwrap().unwrap().version, 11);
        assert_eq!(index.get_versioned("d4").unwrap().unwrap().version, 2);
        index.close().unwrap();
    }
}

/// Read-modify-write increments with `SeqNo` conditions from several threads lose none: each write that
/// goes in replaced exactly the version its thread read, so the counter ends at the number of successes.
#[test]
fn compare_and_set_increments_lose_no_update() {
    use spirit::{Error, Precondition};
    let dir = tempfile::tempdir().unwrap();
    let index = std::sync::Arc::new(Index::open("t", dir.path(), cfg(), None, None).unwrap());
    index.add(serde_json::json!({"_id": "c", "n": 0})).unwrap();
    let (threads, each) = (4, 40);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let index = index.clone();
            std::thread::spawn(move || {
                let mut conflicts = 0;
                for _ in 0..each {
                    loop {
                        let live = index.get_versioned("c").unwrap().unwrap();
                        let n = serde_json::from_slice::<serde_json::Value>(&live.source).unwrap()["n"]
                            .as_u64()
                            .unwrap();
                        assert_eq!(live.version, n + 1, "every write of the counter is one version");
                        match index.add_with_id_if(
                            Some("c".into()),
                            serde_json::json!({"n": n + 1}),
                            Precondition::SeqNo(live.seq_no),
                        ) {
                            Ok(r) => {
                                assert_eq!(r.version, n + 2);
                                break;
                            }
                            Err(Error::VersionConflict(_)) => conflicts += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let conflicts: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let src = index.get("c").unwrap().unwrap();
    let n = serde_json::from_slice::<serde_json::Value>(&src).unwrap()["n"].as_u64().unwrap();
    assert_eq!(n, (threads * each) as u64, "every increment counted ({conflicts} conflicts retried)");
    assert_eq!(index.get_versioned("c").unwrap().unwrap().version, n + 1);
    assert_eq!(
        index.search("n:[0 TO 1000]", &SearchOptions::default()).unwrap().total,
        1,
        "one live version"
    );
}

/// Aliases live with the engine: they survive a reopen, never share a name with an index, leave with a
/// deleted index, and drop an index whose directory went away behind the engine's back.
#[test]
fn aliases_persist_and_follow_their_indices() {
    use spirit::{AliasAction, Engine, EngineConfig, Error};
    let dir = tempfile::tempdir().unwrap();
    let config = || EngineConfig { shard: cfg(), default_shards: None };
    let add = |index: &str, alias: &str| AliasAction::Add {
        index: index.into(),
        alias: alias.into(),
        is_write_index: None,
        filter: None,
    };
    let named = |e: &Engine, alias: &str| -> Vec<String> {
        e.aliases().get(alias).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    };
    {
        let e = Engine::open(dir.path(), config()).unwrap();
        for name in ["a", "b", "c"] {
            e.create_index(name, None, None).unwrap();
        }
        e.update_aliases(&[add("a", "x"), add("b", "x"), add("c", "y")]).unwrap();
        assert!(matches!(e.create_index("x", None, None), Err(Error::InvalidArgument(_))));
        assert!(matches!(e.update_aliases(&[add("a", "z"), add("nope", "z")]), Err(Error::NotFound(_))));
        assert!(e.aliases().get("z").is_none(), "all or nothing");
        e.delete_index("c").unwrap();
        assert!(e.aliases().get("y").is_none(), "the alias of a deleted index alone is gone");
        e.close().unwrap();
    }
    let e = Engine::open(dir.path(), config()).unwrap();
    assert_eq!(named(&e, "x"), ["a", "b"]);
    e.close().unwrap();
    drop(e);
    std::fs::remove_dir_all(dir.path().join("indexes").join("a")).unwrap();
    let e = Engine::open(dir.path(), config()).unwrap();
    assert_eq!(named(&e, "x"), ["b"], "an index gone behind the engine's back leaves its aliases");
}

/// A real-time get never misses a document that is being replaced: the writer inserts the new version
/// (often into a fresh segment the reader's snapshot predates, the arenas here being small) and only then
/// deletes the old one, so a lookup that finds the old one deleted looks again.
#[test]
fn gets_never_miss_a_document_being_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let index = std::sync::Arc::new(Index::open("t", dir.path(), cfg(), None, None).unwrap());
    replace_while_reading(&index, 2, |index, gets| {
        assert!(index.get("x").unwrap().is_some(), "a get missed the live document after {gets} gets");
    });
    index.close().unwrap();
}

/// Replaces document `x` 3,000 times (5-document segments) while `readers` threads run `read(index, i)`
/// for i = 0, 1, ... until the writer is done; every reader must have read at least once.
fn replace_while_reading(
    index: &std::sync::Arc<Index>,
    readers: usize,
    read: impl Fn(&Index, u64) + Send + Copy + 'static,
) {
    let pad = "lorem ipsum dolor sit amet ".repeat(40);
    index.add(serde_json::json!({"_id": "x", "n": 0, "body": pad})).unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..readers)
        .map(|_| {
            let (index, done) = (index.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    read(&index, i);
                    i += 1;
                }
                i
            })
        })
        .collect();
    for n in 1..3000 {
        index.add(serde_json::json!({"_id": "x", "n": n, "body": pad})).unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// An update whose new version is refused (too large for any segment) leaves the old version live: the
/// update deletes the old version first (stamped, see `segment::deletes`) and undoes that when the add fails.
#[test]
fn a_refused_update_keeps_the_old_version() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open("t", dir.path(), cfg(), None, None).unwrap();
    index.add(serde_json::json!({"_id": "x", "n": 1, "body": "kept words"})).unwrap();
    index.add(serde_json::json!({"_id": "y", "n": 2, "body": "other words"})).unwrap();
    let huge = "word ".repeat(200_000);
    let err = index.add(serde_json::json!({"_id": "x", "n": 3, "body": huge})).unwrap_err();
    assert!(matches!(err, spirit::Error::DocumentTooLarge { .. }), "{err}");
    let got = String::from_utf8(index.get("x").unwrap().expect("the old version is live")).unwrap();
    assert!(got.contains("kept"), "{got}");
    assert_eq!(index.count("body:kept").unwrap(), 1);
    assert_eq!(index.count("body:words").unwrap(), 2);
    // And it is replaced normally afterwards.
    index.add(serde_json::json!({"_id": "x", "n": 4, "body": "new words"})).unwrap();
    assert_eq!(index.count("body:kept").unwrap(), 0);
    assert_eq!(index.count("body:words").unwrap(), 2);
    index.close().unwrap();
}

/// A search running while a document is replaced finds exactly one version of it: never neither (the new
/// version past the snapshot's watermark, the old one's bit set while the query runs), never both (the new
/// version within it, the old one's bit not yet set when the query passes it). Deletes are stamped with the
/// replacing doc id and read against the snapshot (`segment::deletes`); without the stamps a search thread
/// here found no hit in hundreds of searches out of ~250,000. Each reader runs a scored term query (the top
/// hits, with their total), a count, and a query matching every version's own number field.
#[test]
fn searches_see_exactly_one_version_of_a_document_being_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let index = std::sync::Arc::new(Index::open("t", dir.path(), cfg(), None, None).unwrap());
    // Documents that stay, so segments hold more than the one being replaced.
    for i in 0..7 {
        index.add(serde_json::json!({"_id": format!("other{i}"), "n": -1, "body": "other words"})).unwrap();
    }
    // One reader: the pipeline runs at idle priority, and two busy readers on two cores starve it (the
    // writer then waits for free arenas).
    replace_while_reading(&index, 1, |index, searches| {
        let opts = SearchOptions::default();
        let (what, total, hits) = match searches % 3 {
            0 => {
                let res = index.search("body:lorem", &opts).unwrap();
                ("body:lorem", res.total, res.hits.len() as u64)
            }
            1 => ("count body:ipsum", index.count("body:ipsum").unwrap(), 1),
            _ => {
                let res = index.search("n:[0 TO 100000]", &opts).unwrap();
                ("n:[0 TO 100000]", res.total, res.hits.len() as u64)
            }
        };
        assert!(
            total == 1 && hits == 1,
            "{what} found {total} versions ({hits} hits) after {searches} searches"
        );
    });
    assert_eq!(index.count("body:lorem").unwrap(), 1);
    index.close().unwrap();
}

/// Deleting an index discards it without writing it out first: with documents in sealed and fresh
/// segments (and a crash-safe log), its directory is gone, a new index of its name starts empty, and a
/// reopened engine does not bring it back.
#[test]
fn deleting_an_index_discards_it() {
    use spirit::{Engine, EngineConfig};
    let dir = tempfile::tempdir().unwrap();
    let config = || EngineConfig { shard: cfg(), default_shards: None };
    {
        let e = Engine::open(dir.path(), config()).unwrap();
        let opts = spirit::IndexOptions {
            durability: Some(Durability::CrashSafe),
            shards: Some(3),
            ..Default::default()
        };
        let i = e.create_index_with("d", None, None, &opts).unwrap();
        for n in 0..40 {
            i.add(serde_json::json!({"_id": n.to_string(), "body": "gone soon"})).unwrap();
            if n == 20 {
                i.seal().unwrap();
            }
        }
        drop(i);
        e.delete_index("d").unwrap();
        assert!(!dir.path().join("indexes").join("d").exists());
        let i = e.create_index("d", None, None).unwrap();
        assert_eq!(i.count("gone").unwrap(), 0);
        drop(i);
        e.delete_index("d").unwrap();
        e.close().unwrap();
    }
    let e = Engine::open(dir.path(), config()).unwrap();
    assert!(e.index("d").is_none());
    e.close().unwrap();
}
