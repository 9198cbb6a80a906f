//! Memory: the two heaps every segment lives in, allocated once, with hard caps.
//!
//! * [`DramHeap`] is one anonymous mapping of exactly `dram_budget` bytes, split into a *short-term ring*
//!   (fresh segments' arenas, recycled after flush) and a *long-term ring* (flushed images until they are
//!   committed). Allocation in segment order makes freeing a pointer bump (SPIRIT §4.4). Because the heap is
//!   one fixed mapping, exceeding the budget is impossible by construction: a full ring is back-pressure.
//! * [`PersistentHeap`] is one file of the data directory mapped `MAP_SHARED` into a virtual range reserved
//!   up front for the whole `persistent_budget`, so the file can grow by chunks without any address moving.
//!   Everything persistent refers to everything else by *offset* from the heap base, never by address.
//! * [`persist`](PersistentHeap::persist) is the single persistence barrier: cache-line write-back on a DAX
//!   mapping granted `MAP_SYNC`, `msync` on ordinary file systems, or a simulated persistence domain in crash
//!   tests (module `persist`).
//!
//! This is one of the two modules allowed to use `unsafe` (with `codec`). Everything above it works on the
//! safe views handed out here: unique writable blocks before publication, shared `&[u8]` after, and atomic
//! words for the few locations that change while readers look at them.

mod dram;
mod mapping;
mod persist;
mod persistent;
mod ring;
mod space;

pub use dram::{DramBlock, DramHeap, DramStats, Fill, RingKind};
pub(crate) use mapping::words_of;
pub use persist::{Barrier, FlushKind, SimDomain};
pub use persistent::{
    gather_into, BarrierChoice, Extent, HeapError as PersistentHeapError, PersistentHeap, PersistentStats,
    RecoveryRecord, WriteVia, FORMAT_VERSION, SUPERBLOCK_BYTES,
};

/// Nice value of background and batch threads: a shard's pipeline (flusher, engraver, merger) and the bulk
/// loader's workers.
pub const BACKGROUND_NICE: i32 = 19;

/// Lowers the calling thread's CPU priority, so background and batch work yields the cores to queries and
/// single adds when they compete — as RocksDB lowers its compaction threads — and runs at full speed when the
/// cores are idle. Back-pressure keeps the pipeline from falling behind for good: a full DRAM ring blocks
/// ingest, which frees a core.
///
/// Linux: the thread's nice value goes to [`BACKGROUND_NICE`] and its policy to `SCHED_IDLE`. At nice 19
/// alone a pipeline thread still has 1.5% of a busy core's weight, taken as whole time slices: measured on
/// the 2-core machine in the real-time benchmark, the query thread lost ~4.5 ms about four times a second to
/// the flusher and merger (samples of the query thread, perf), a few queries each run 3–6 ms slower. A
/// `SCHED_IDLE` thread weighs a fifth of that and is preempted at once by a waking normal thread. (Before
/// any of it, at nice 0, the p99 of cheap queries was ~4 ms.) Best effort: a failure (another OS, a sandbox)
/// leaves the priority as it was. Without a privilege a thread cannot come back from `SCHED_IDLE`: work that
/// must not wait for idle cores goes to a thread that never called this (the shard's urgent flusher runs the
/// flushes a writer waits for).
pub fn run_in_background() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid, setpriority and sched_setscheduler take plain integers and a pointer to a live local;
    // lowering one's own priority needs no privilege, and an error only leaves the priority unchanged.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE);
        let param = libc::sched_param { sched_priority: 0 };
        let _ = libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// Hints the CPU to bring the cache line holding `r` closer, so a later load of it does not stall. Used by the
/// fresh segment, whose inserts are bound by cache misses on the term table, term entries and posting blocks.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults (even on an invalid address), has no visible effect
    // on memory, and SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(r as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
