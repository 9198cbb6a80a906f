//! Stress: reader threads query while one writer adds documents and the pipeline flushes, engraves, commits
//! (eagerly and under DRAM pressure) and merges underneath them. Every answer must equal the reference index
//! over some prefix of the acknowledged documents that lies between what was acknowledged when the query
//! started and when it ended — nothing acknowledged is ever missing, nothing is seen half-written.

mod common;

use common::*;
use spirit::query::Query;
use spirit::{CommitPolicy, Index, SearchOptions, ShardConfig, Sort};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const WORDS: [&str; 8] = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"];

fn doc(i: usize) -> RefDoc {
    let mut x = (i as u64).wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let w = |r: u64| WORDS[((r % 8).min((r >> 8) % 8)) as usize].to_string();
    let title = (0..1 + next() % 3).map(|_| w(next())).collect();
    let body = (0..2 + next() % 40).map(|_| w(next())).collect();
    RefDoc { id: format!("d{i}"), title, body, tag: "red".into(), n: (i % 50) as i64, live: true, seq: 0 }
}

fn run(commit: CommitPolicy, n_docs: usize, readers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ShardConfig {
        dram_budget: 1 << 20,
        fresh_segment_bytes: Some(256 << 10),
        max_docs_per_segment: 37,
        commit,
        ..Default::default()
    };
    let index = Arc::new(Index::open("s", dir.path(), cfg, Some(&mappings()), None).unwrap());
    let docs: Arc<Vec<RefDoc>> = Arc::new((0..n_docs).map(doc).collect());
    let acked = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut handles = vec![];
    for r in 0..readers {
        let (index, docs, acked, done) = (index.clone(), docs.clone(), acked.clone(), done.clone());
        handles.push(std::thread::spawn(move || {
            let mut checked = 0;
            let mut k = r;
            while !done.load(Ordering::Acquire) || checked < 5 {
                k += 1;
                let q = match k % 4 {
                    0 => Query::Term { field: None, text: WORDS[k % 8].into() },
                    1 => Query::Phrase {
                        field: Some("body".into()),
                        text: format!("{} {}", WORDS[k % 3], WORDS[(k / 3) % 3]),
                        slop: (k % 3) as u32,
                    },
                    2 => spirit::query::parse(&format!("+{} -title:{}", WORDS[k % 5], WORDS[(k / 5) % 5]))
                        .unwrap(),
                    _ => Query::Term { field: Some("title".into()), text: WORDS[k % 8].into() },
                };
                let sort = if k % 2 == 0 { Sort::Score } else { Sort::Newest };
                let before = acked.load(Ordering::Acquire);
                let res =
                    index.search_query(&q, &SearchOptions { limit: 5, sort, ..Default::default() }).unwrap();
                let after = acked.load(Ordering::Acquire);
                // Find the prefix length m in [before, after + 1] the answer corresponds to.
                let mut ok = false;
                let mut last_err = String::new();
                for m in before..=(after + 1).min(docs.len()) {
                    let mut reference = Reference::default();
                    for d in &docs[..m] {
                        reference.add(d.clone());
                    }
                    let r = match sort {
                        Sort::Score => {
                            let hits: Vec<(String, f32)> =
                                res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
                            verify_top_k(&reference, &q, res.total, &hits, 5)
                        }
                        Sort::Newest => {
                            let ids: Vec<String> = res.hits.iter().map(|h| h.id.clone()).collect();
                            verify_newest(&reference, &q, res.total, &ids, 5)
                        }
                        Sort::Field { .. } => unreachable!("this test sorts by score and newest first"),
                    };
                    match r {
                        Ok(()) => {
                            ok = true;
                            break;
                        }
                        Err(e) => last_err = e,
                    }
                }
                assert!(
                    ok,
                    "reader {r}: answer for {q:?} ({sort:?}) matches no prefix in [{before}, {}]: {last_err}",
                    after + 1
                );
                checked += 1;
            }
            checked
        }));
    }
    for (i, d) in docs.iter().enumerate() {
        index.add(d.json()).unwrap();
        acked.store(i + 1, Ordering::Release);
        if i % 100 == 99 {
            // Let the readers see many intermediate states.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    let commits_during_ingest = index.stats().shard.commits;
    assert!(
        commits_during_ingest > 0,
        "DRAM pressure (or the eager policy) committed segments during ingest"
    );
    index.shard().commit_and_merge_all().unwrap();
    done.store(true, Ordering::Release);
    let mut total = 0;
    for h in handles {
        total += h.join().expect("reader panicked");
    }
    let st = index.stats();
    assert!(st.shard.flushes > 10 && st.shard.merges > 5, "the pipeline ran during the test: {st:?}");
    assert!(total >= readers * 5);
    eprintln!("{commit:?}: {total} answers checked; {:?}", st.shard.segments);
    index.close().unwrap();
}

#[test]
fn readers_during_eager_commits_and_merges() {
    run(CommitPolicy::Eager, 3000, 3);
}

#[test]
fn readers_during_lazy_commits_under_dram_pressure() {
    run(CommitPolicy::Lazy, 3000, 3);
}
