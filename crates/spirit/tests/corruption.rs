//! A flipped byte anywhere in a closed heap file is either harmless (it hit free space or slack) or detected:
//! opening reports an error naming the file and offset, or the query that reads the damaged bytes returns an
//! error. Never a panic, and never a wrong answer served silently: every answer that comes back equals the
//! answer from the undamaged file. Checksums cover the superblock's recovery records, the manifest, every
//! segment image (verified when a session first maps it), delete bitmaps, log chunks and records, and every
//! merged-segment slot, key and chain node.

use spirit::{Durability, Index, SearchOptions, ShardConfig};

const QUERIES: [&str; 8] =
    ["alpha", "+alpha +again", "\"gamma and\"", "n:[10 TO 20]", "al*", "*:*", "beta -delta", "body:zeta"];

type Answers = Vec<Result<Vec<(String, u32)>, String>>;

fn answers(index: &Index) -> Answers {
    let mut out = vec![];
    for q in QUERIES {
        for track_total in [true, false] {
            let r = index.search(q, &SearchOptions { limit: 5, track_total, ..Default::default() });
            out.push(
                r.map(|r| r.hits.iter().map(|h| (h.id.clone(), h.score.to_bits())).collect())
                    .map_err(|e| e.to_string()),
            );
        }
    }
    for id in ["3", "7", "150", "299"] {
        out.push(index.get(id).map(|g| vec![(format!("{g:?}"), 0)]).map_err(|e| e.to_string()));
    }
    out
}

fn flips(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    // A small persistent budget keeps the tLog chunks (dead space after a clean close) small.
    let cfg = ShardConfig {
        dram_budget: 8 << 20,
        persistent_budget: 8 << 20,
        max_docs_per_segment: 40,
        durability,
        ..Default::default()
    };
    let good_answers = {
        let index = Index::open("c", dir.path(), cfg.clone(), None, None).unwrap();
        for i in 0..1500 {
            let w = ["alpha", "beta", "gamma", "delta", "zeta"][i % 5];
            index.add(serde_json::json!({"_id": i.to_string(), "body": format!("{w} and {w} again {i}"), "n": i})).unwrap();
        }
        index.delete("7").unwrap();
        index.close().unwrap();
        drop(index);
        let index = Index::open("c", dir.path(), cfg.clone(), None, None).unwrap();
        let a = answers(&index);
        assert!(a.iter().all(|r| r.is_ok()));
        index.close().unwrap();
        a
    };
    let heap = dir.path().join("heap.spirit");
    let good = std::fs::read(&heap).unwrap();
    // Flip bytes in the used part of the file (the newest recovery-record slot of a clean close records its
    // end), not in the slack a growing file keeps ahead.
    let slot = |at: usize| {
        let u = |i: usize| u64::from_le_bytes(good[at + i..at + i + 8].try_into().unwrap());
        (u(0), u(16))
    };
    let used = slot(64).max(slot(128)).1 as usize;
    assert!(used > 4096 && used <= good.len());
    let mut x = 0x2545F4914F6CDD1Du64 ^ durability as u64;
    let (mut harmless, mut refused, mut query_errors) = (0, 0, 0);
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut bad = good.clone();
        let at = (x as usize) % used;
        bad[at] ^= 1 << ((x >> 60) % 8);
        std::fs::write(&heap, &bad).unwrap();
        match Index::open("c", dir.path(), cfg.clone(), None, None) {
            Err(e) => {
                refused += 1;
                let m = e.to_string();
                assert!(m.contains("heap.spirit"), "byte {at}: the error names the file: {m}");
            }
            Ok(index) => {
                let got = answers(&index);
                let mut errors = 0;
                for (g, w) in got.iter().zip(&good_answers) {
                    match g {
                        Ok(_) => assert_eq!(g, w, "byte {at} flipped: a wrong answer was served"),
                        Err(m) => {
                            errors += 1;
                            assert!(m.contains("heap.spirit") || m.contains("segment"), "byte {at}: {m}");
                        }
                    }
                }
                if errors > 0 {
                    query_errors += 1;
                } else {
                    harmless += 1;
                }
                drop(index);
            }
        }
        std::fs::write(&heap, &good).unwrap();
    }
    eprintln!(
        "{durability:?}: {refused} refused at open, {query_errors} detected by a query, {harmless} harmless"
    );
    assert!(refused + query_errors > 0, "some flips hit live data and are detected");
}

#[test]
fn flipped_bytes_are_detected_or_harmless_graceful() {
    flips(Durability::Graceful);
}

#[test]
fn flipped_bytes_are_detected_or_harmless_crash_safe() {
    flips(Durability::CrashSafe);
}
