//! Background priority stays in the background. The shard pipeline's threads run at `SCHED_IDLE`
//! (`memory::run_in_background`); the global rayon pool — which a bulk arena's flush splits its terms over,
//! and whose workers also run the shards of a multi-shard query — is made when an index opens, by the
//! opening thread. Made lazily by the flusher, its workers would inherit the flusher's idle priority and
//! every multi-shard query would run behind any other work on the machine. (A test binary of its own: nothing
//! else here may touch rayon before the index opens.)

#![cfg(target_os = "linux")]

use spirit::formats::Format;
use spirit::{bulk_load, BulkOptions, Index, ShardConfig};

/// The tests of this binary run one at a time: they run in one process, and one reads the policies of every
/// thread with a pipeline thread's name, the other's (just spawned, not yet at `SCHED_IDLE`) included.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the binary's tests apart (a failed one does not stop the other).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn pipeline_threads_do_not_make_the_rayon_pool_idle() {
    let _serial = serial();
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

/// The policy of each of this process's threads named `name` (as `/proc` shows names: 15 bytes at most).
fn policies_of(name: &str) -> Vec<i32> {
    let mut out = vec![];
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let tid: i32 = task.file_name().unwrap().to_str().unwrap().parse().unwrap();
            // sched_getscheduler takes a thread id and touches no memory.
            out.push(unsafe { libc::sched_getscheduler(tid) });
        }
    }
    out
}

/// Seals `rounds` fresh segments of 200 documents each, waiting for the pipeline after each, and returns
/// (flushes, urgent flushes); every document is then found.
fn seal_rounds(index: &Index, rounds: usize) -> (u64, u64) {
    for r in 0..rounds {
        for i in 0..200 {
            index.add(serde_json::json!({"body": format!("round{r} doc{i} shared")})).unwrap();
        }
        index.seal().unwrap();
        index.wait_idle().unwrap();
    }
    assert_eq!(index.count("shared").unwrap(), 200 * rounds as u64);
    let s = index.stats().shard;
    (s.flushes, s.urgent_flushes)
}

/// A flush the writer will wait for runs at normal priority: the flusher stays at `SCHED_IDLE` and hands it
/// to the urgent flusher, which never lowered its priority. A flush is urgent when the short-term ring has room
/// for fewer than two more arenas: always with a ring of two arenas (the sealed one and the writer's next),
/// never with a ring of four when each flush is awaited before the next seal.
#[test]
fn flushes_the_writer_waits_for_run_at_normal_priority() {
    let _serial = serial();
    for (arena, urgent) in [(16 << 20, true), (1 << 20, false)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg =
            ShardConfig { dram_budget: 64 << 20, fresh_segment_bytes: Some(arena), ..Default::default() };
        assert_eq!(cfg.short_term_bytes() / arena, if urgent { 2 } else { 4 });
        let index = Index::open("u", dir.path(), cfg, None, None).unwrap();
        let (flushes, urgent_flushes) = seal_rounds(&index, 3);
        assert!(flushes >= 3, "{flushes} flushes");
        assert_eq!(urgent_flushes, if urgent { flushes } else { 0 }, "arena {arena}: {flushes} flushes");
        let (flusher, helper) = (policies_of("spirit-flusher"), policies_of("spirit-flusher-"));
        assert!(!flusher.is_empty() && flusher.iter().all(|&p| p == libc::SCHED_IDLE), "{flusher:?}");
        assert!(!helper.is_empty() && helper.iter().all(|&p| p == libc::SCHED_OTHER), "{helper:?}");
    }
}
