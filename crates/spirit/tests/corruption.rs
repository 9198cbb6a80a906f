//! A flipped byte anywhere in a closed heap file must never panic the engine: opening reports an error naming
//! the file (superblock, manifest, segment headers, merged-segment table are checked), or queries answer or
//! return an error. (Detecting every flip — checksums verified on read — is the crash-safe issue's work.)

use spirit::{Index, SearchOptions, ShardConfig};

#[test]
fn flipped_bytes_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig { dram_budget: 8 << 20, max_docs_per_segment: 40, ..Default::default() };
    {
        let index = Index::open("c", dir.path(), cfg.clone(), None, None).unwrap();
        for i in 0..300 {
            let w = ["alpha", "beta", "gamma", "delta"][i % 4];
            index.add(serde_json::json!({"_id": i.to_string(), "body": format!("{w} and {w} again {i}"), "n": i})).unwrap();
        }
        index.delete("7").unwrap();
        index.close().unwrap();
    }
    let heap = dir.path().join("heap.spirit");
    let good = std::fs::read(&heap).unwrap();
    let end = good.len();
    let mut x = 0x2545F4914F6CDD1Du64;
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut bad = good.clone();
        let at = (x as usize) % end;
        bad[at] ^= 1 << ((x >> 60) % 8);
        std::fs::write(&heap, &bad).unwrap();
        match Index::open("c", dir.path(), cfg.clone(), None, None) {
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
            Ok(index) => {
                opened += 1;
                for q in
                    ["alpha", "+alpha +again", "\"gamma and\"", "n:[10 TO 20]", "al*", "*:*", "beta -delta"]
                {
                    let _ = index.search(q, &SearchOptions { limit: 5, ..Default::default() });
                    let _ = index
                        .search(q, &SearchOptions { limit: 5, track_total: false, ..Default::default() });
                }
                let _ = index.get("3");
                drop(index);
            }
        }
    }
    assert!(opened > 0 && refused > 0, "opened {opened}, refused {refused}");
}
