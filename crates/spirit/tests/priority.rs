//! Background priority stays in the background. The shard pipeline's threads run at `SCHED_IDLE`
//! (`memory::run_in_background`); the global rayon pool — which a bulk arena's flush splits its terms over,
//! and whose workers also run the shards of a multi-shard query — is made when an index opens, by the
//! opening thread. Made lazily by the flusher, its workers would inherit the flusher's idle priority and
//! every multi-shard query would run behind any other work on the machine. (A test binary of its own: nothing
//! else here may touch rayon before the index opens.)

#![cfg(target_os = "linux")]

use spirit::formats::Format;
use spirit::{bulk_load, BulkOptions, Index, ShardConfig};

#[test]
fn pipeline_threads_do_not_make_the_rayon_pool_idle() {
    let dir = tempfile::tempdir().unwrap();
    // Bulk arenas of 16 MiB (a quarter of the budget): each holds the whole load, whose 6,000 distinct terms
    // are above the count from which the flusher splits a segment's terms over the pool.
    let cfg = ShardConfig {
        dram_budget: 64 << 20,
        fresh_segment_bytes: Some(1 << 20),
        max_docs_per_segment: 10_000,
        ..Default::default()
    }
    .with_bulk_arenas();
    let index = Index::open("p", dir.path(), cfg, None, None).unwrap();
    // A bulk load, so the flusher seals bulk arenas and splits their terms over the pool.
    let mut input = Vec::new();
    for i in 0..6000 {
        input.extend_from_slice(
            format!("{{\"_id\": \"{i}\", \"body\": \"w{} w{} x{i}\"}}\n", i % 13, i % 7).as_bytes(),
        );
    }
    let opts = BulkOptions { format: Format::Jsonl, threads: 2, ..Default::default() };
    let p = bulk_load(&index, &mut &input[..], &opts, &()).unwrap();
    assert_eq!(p.docs, 6000);
    index.seal().unwrap();
    index.wait_idle().unwrap();
    assert!(index.stats().shard.flushes > 0, "the load flushed its arenas");
    // sched_getscheduler takes a pid (0: the calling thread) and touches no memory.
    let policies: Vec<i32> = rayon::broadcast(|_| unsafe { libc::sched_getscheduler(0) });
    assert!(!policies.is_empty());
    assert!(policies.iter().all(|&p| p != libc::SCHED_IDLE), "pool workers' policies: {policies:?}");
}
