//! A full disk: the file system refuses to grow the heap file while the persistent budget still has room.
//! Writes get a clear error and the process does not panic. Crash-safe: nothing acknowledged is lost.
//! Graceful (durable at a clean close only): the close keeps what is persisted, so the index opens with a
//! prefix of the documents. Either way, after a restart with room, ingestion resumes.
//!
//! The full disk is the process's file-size limit (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored): growing a file
//! past it fails with `EFBIG`, the way `ENOSPC` fails it on a full file system — both reach the engine as
//! the file system refusing the heap's `ftruncate`/`posix_fallocate`. The limit is per process, so the
//! ingesting part runs in a child process (this test binary re-run with `SPIRIT_DISK_FULL_CHILD`).

use spirit::{Durability, Index, IndexSettings, ShardConfig};
use std::path::Path;
use std::process::Command;

const CHILD: &str = "SPIRIT_DISK_FULL_CHILD";
const TEST: &str = "a_full_disk_refuses_writes_and_keeps_acknowledged_data";
/// The file-size limit: a few growth steps of the heap file.
const LIMIT_BYTES: u64 = 24 << 20;

fn cfg(durability: Durability) -> ShardConfig {
    ShardConfig {
        dram_budget: 8 << 20,
        // Room in the budget: only the file system can refuse.
        persistent_budget: 1 << 30,
        max_docs_per_segment: 200,
        durability,
        ..Default::default()
    }
}

fn durability(mode: &str) -> Durability {
    match mode.split('/').next() {
        Some("crash-safe") => Durability::CrashSafe,
        Some("graceful") => Durability::Graceful,
        _ => panic!("unknown durability in {mode}"),
    }
}

/// `MODE/N`: the durability and the number of shards (each shard has its own heap file, each under the
/// limit).
fn open(dir: &Path, mode: &str) -> Index {
    let shards = mode.split('/').nth(1).map_or(1, |n| n.parse().unwrap());
    let settings = IndexSettings { number_of_shards: shards, ..Default::default() };
    Index::open("d", dir, cfg(durability(mode)), None, Some(settings)).unwrap()
}

/// The child: ingest under the file-size limit until writes stay refused, check the index still answers,
/// close, and print the acknowledged count and the error for the parent.
fn child(dir: &Path, mode: &str) {
    let limit = libc::rlimit { rlim_cur: LIMIT_BYTES, rlim_max: LIMIT_BYTES };
    // SAFETY: plain system calls on this process's own signal disposition and resource limits.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0, "setrlimit");
    }
    let index = open(dir, mode);
    let body = "lorem ipsum dolor sit amet consectetur adipiscing elit ".repeat(20);
    let (mut acked, mut refusals, mut last_err) = (0u64, 0, None);
    // A refusal can be transient (the pipeline may free room); five in a row, with time in between, end it.
    while refusals < 5 {
        match index.add(serde_json::json!({"_id": format!("x{acked}"), "body": format!("{body} n{acked}")})) {
            Ok(_) => {
                acked += 1;
                refusals = 0;
            }
            Err(e) => {
                refusals += 1;
                last_err = Some(e.to_string());
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        assert!(acked < 2_000_000, "the file-size limit never stopped the writes");
    }
    // Refused, but queries still see every acknowledged document.
    assert_eq!(index.count("lorem").unwrap(), acked);
    // Closing may fail too (the last segment cannot be written); it must not panic or lose what is durable.
    let closed = index.close().map_err(|e| e.to_string());
    drop(index);
    if durability(mode) == Durability::CrashSafe {
        // The disk is still full: the index opens all the same (recovery allocates nothing) and answers. A
        // write is acknowledged if the heap still has room inside the file (a recycled log chunk), else
        // refused with an error; either way nothing is half-written.
        let index = Index::open("d", dir, cfg(durability(mode)), None, None)
            .unwrap_or_else(|e| panic!("{mode}: reopening on the full disk: {e}"));
        assert_eq!(index.count("lorem").unwrap(), acked, "{mode}: on the full disk");
        let wrote = index.add(serde_json::json!({"_id": "full", "body": "zzfull"}));
        assert_eq!(index.count("zzfull").unwrap(), wrote.is_ok() as u64, "{mode}: {wrote:?}");
        // Writes until one is refused (the log's room runs out), then an update and a delete: acknowledged, or
        // refused with the old version still live (the update deletes the old version first and undoes that
        // when the tLog refuses the new one; a refused delete is undone too).
        let mut filled = 0u64;
        while filled < 200_000
            && index.add(serde_json::json!({"_id": format!("f{filled}"), "body": "zzfill"})).is_ok()
        {
            filled += 1;
        }
        assert_eq!(index.count("zzfill").unwrap(), filled, "{mode}");
        let updated = index.add(serde_json::json!({"_id": "x0", "body": "zzupdated"}));
        let x0 = String::from_utf8(index.get("x0").unwrap().expect("x0: one version or the other")).unwrap();
        assert_eq!(x0.contains("zzupdated"), updated.is_ok(), "{mode}: {updated:?}");
        assert_eq!(index.count("zzupdated").unwrap(), updated.is_ok() as u64, "{mode}: {updated:?}");
        let deleted = index.delete("x1");
        assert_eq!(index.get("x1").unwrap().is_some(), !matches!(deleted, Ok(true)), "{mode}: {deleted:?}");
        let gone = updated.is_ok() as u64 + matches!(deleted, Ok(true)) as u64;
        assert_eq!(index.count("lorem").unwrap(), acked - gone, "{mode}: {updated:?} {deleted:?}");
        println!("\nreopened on the full disk: {wrote:?}, update {updated:?}, delete {deleted:?}");
        println!("write_on_full_disk={}", wrote.is_ok());
        println!("gone_on_full_disk={gone}");
        println!("filled_on_full_disk={filled}");
        let _ = index.close();
    }
    // On lines of their own (the test harness prints the test's name without a newline).
    println!("\nacked={acked}");
    println!("error={}", last_err.unwrap());
    println!("close={closed:?}");
}

fn run(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
        .env(CHILD, format!("{mode}:{}", dir.path().display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{mode}: the child failed\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |k: &str| {
        stdout
            .lines()
            .find_map(|l| l.split_once(k).map(|(_, v)| v))
            .unwrap_or_else(|| panic!("{mode}: no {k} in\n{stdout}"))
    };
    let acked: u64 = field("acked=").parse().unwrap();
    if durability(mode) == Durability::CrashSafe {
        assert!(stdout.contains("reopened on the full disk"), "{mode}: {stdout}");
    }
    let full_acked = stdout.contains("write_on_full_disk=true");
    let err = field("error=");
    assert!(acked > 100, "{mode}: only {acked} documents before the file system refused");
    assert!(
        err.contains("File too large") || err.contains("flush") || err.contains("engrave"),
        "{mode}: {err}"
    );
    // With room again: everything acknowledged is there, and writes go on. In graceful mode what survives
    // is what the close made durable: at least everything before the refusal's segment.
    let index = open(dir.path(), mode);
    let found = index.count("lorem").unwrap();
    if durability(mode) == Durability::CrashSafe {
        let gone: u64 = field("gone_on_full_disk=").parse().unwrap();
        assert_eq!(found, acked - gone, "{mode}: every acknowledged document survives ({err})");
        let filled: u64 = field("filled_on_full_disk=").parse().unwrap();
        assert_eq!(index.count("zzfill").unwrap(), filled, "{mode}: the writes on the full disk");
        assert_eq!(index.count("zzfull").unwrap(), full_acked as u64, "{mode}: the write on the full disk");
        for i in (0..acked).step_by(97) {
            assert!(index.get(&format!("x{i}")).unwrap().is_some(), "{mode}: x{i}");
        }
    } else {
        // Graceful: durable at a clean close only. The close could not persist the last segments, so it
        // recorded the persisted prefix: an index that opens, with the first documents and none after them.
        let close = field("close=");
        assert!(close.contains("closed with the documents persisted before the failure"), "{mode}: {close}");
        assert!(found > 0 && found <= acked, "{mode}: {found} of {acked}");
        // Each shard keeps a prefix of its own documents; with one shard that is a prefix of all of them.
        let kept: Vec<u64> = (0..acked).filter(|i| index.get(&format!("x{i}")).unwrap().is_some()).collect();
        assert_eq!(kept.len() as u64, found, "{mode}: every document counted can be fetched, and only those");
        if !mode.contains('/') {
            assert_eq!(kept, (0..found).collect::<Vec<_>>(), "{mode}: a prefix");
        }
    }
    index.add(serde_json::json!({"_id": "after", "body": "lorem again"})).unwrap();
    assert_eq!(index.count("lorem").unwrap(), found + 1);
    // The close merges what the failure left unmerged (a link it cut short is finished, not repeated).
    index.close().unwrap();
    drop(index);
    let index = open(dir.path(), mode);
    assert_eq!(index.count("lorem").unwrap(), found + 1, "{mode}: after a clean close");
    let top = index.search("lorem", &spirit::SearchOptions { limit: 1000, ..Default::default() }).unwrap();
    let mut ids: Vec<&str> = top.hits.iter().map(|h| h.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), top.hits.len(), "{mode}: no document twice (a chain naming a segment twice would)");
    index.close().unwrap();
}

#[test]
fn a_full_disk_refuses_writes_and_keeps_acknowledged_data() {
    if let Ok(arg) = std::env::var(CHILD) {
        let (mode, dir) = arg.split_once(':').unwrap();
        return child(Path::new(dir), mode);
    }
    run("crash-safe");
    run("graceful");
    // Two shards close in parallel, each recording its own persisted prefix.
    run("graceful/2");
}
