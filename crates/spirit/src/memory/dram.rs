//! The DRAM heap: one anonymous mapping of exactly the DRAM budget less the result cache's share (the shard
//! sizes it, `ShardConfig::dram_heap_bytes`), split into the short-term ring (fresh segment arenas) and the
//! long-term ring (flushed images awaiting commit).

use super::mapping::{atomic_u32s, Mapping};
use super::ring::Ring;
use parking_lot::{Condvar, Mutex};
use std::io;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which ring a block comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    /// Fresh segments' arenas; recycled after flush.
    ShortTerm,
    /// Flushed images; recycled after commit.
    LongTerm,
}

/// What a new block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Zeros.
    Zeroed,
    /// Whatever the ring's memory last held: for a caller that writes every byte it will read (an image
    /// written whole; a fresh segment, which zeroes what it uses as it uses it), which saves a pass over the
    /// block.
    Overwritten,
}

/// Usage of the DRAM heap, for `stats` and metrics.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct DramStats {
    pub budget: usize,
    pub short_term_capacity: usize,
    pub short_term_used: usize,
    pub long_term_capacity: usize,
    pub long_term_used: usize,
    /// The most bytes ever held by both rings at once since the heap was created.
    pub high_water: usize,
}

/// The DRAM heap. Shared by every segment of one shard.
pub struct DramHeap {
    map: Arc<Mapping>,
    short_cap: usize,
    rings: Mutex<[Ring; 2]>,
    freed: Condvar,
    high_water: AtomicUsize,
}

impl DramHeap {
    /// Maps `budget` bytes; `short_term` of them form the short-term ring, the rest the long-term ring.
    pub fn new(budget: usize, short_term: usize) -> io::Result<Arc<DramHeap>> {
        assert!(short_term < budget, "short-term ring must leave room for the long-term ring");
        let map = Arc::new(Mapping::anonymous(budget)?);
        let short_cap = short_term / 64 * 64;
        Ok(Arc::new(DramHeap {
            map,
            short_cap,
            rings: Mutex::new([Ring::new(short_cap), Ring::new(budget - short_cap)]),
            freed: Condvar::new(),
            high_water: AtomicUsize::new(0),
        }))
    }

    /// Has the kernel back the whole heap now, front to back (the short-term ring first), on a background
    /// thread at idle priority ([`Mapping::populate_in_background`]) — `ShardConfig::pretouch`. Contents are
    /// unchanged, so the rings are used meanwhile; the thread ends when done or when the heap is dropped.
    /// Returns the thread (tests wait for it); `None` if none could be started.
    pub fn pretouch_in_background(&self) -> Option<std::thread::JoinHandle<()>> {
        let len = self.map.len();
        Mapping::populate_in_background(&self.map, 0, len, move || Some(len))
    }

    fn idx(kind: RingKind) -> usize {
        match kind {
            RingKind::ShortTerm => 0,
            RingKind::LongTerm => 1,
        }
    }

    /// Capacity of one ring: the largest block it could ever hand out.
    pub fn capacity(&self, kind: RingKind) -> usize {
        self.rings.lock()[Self::idx(kind)].capacity()
    }

    /// Allocates a zero-filled block, or `None` when the ring has no room now.
    pub fn try_alloc(self: &Arc<Self>, kind: RingKind, len: usize) -> Option<DramBlock> {
        self.try_alloc_filled(kind, len, Fill::Zeroed)
    }

    /// Allocates a block filled as `fill` says, or `None` when the ring has no room now.
    pub fn try_alloc_filled(self: &Arc<Self>, kind: RingKind, len: usize, fill: Fill) -> Option<DramBlock> {
        let mut rings = self.rings.lock();
        let reached = rings[Self::idx(kind)].reached();
        let (off, rounded) = rings[Self::idx(kind)].alloc(len)?;
        let used = rings[0].used() + rings[1].used();
        drop(rings);
        self.high_water.fetch_max(used, Ordering::Relaxed);
        let base = if kind == RingKind::ShortTerm { 0 } else { self.short_cap };
        let reused = reached.saturating_sub(off).min(rounded);
        let mut block = DramBlock {
            heap: self.clone(),
            kind,
            offset: base + off,
            ring_offset: off,
            len: rounded,
            reused,
            front: 0,
        };
        if fill == Fill::Zeroed {
            // Only what earlier blocks held: the rest is zero still (see `DramBlock::reused`).
            block.zero_held(rounded);
        }
        Some(block)
    }

    /// Allocates, waiting up to `timeout` for space to be freed. `None` on time-out.
    pub fn alloc_wait(
        self: &Arc<Self>,
        kind: RingKind,
        len: usize,
        timeout: Duration,
        fill: Fill,
    ) -> Option<DramBlock> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(b) = self.try_alloc_filled(kind, len, fill) {
                return Some(b);
            }
            let mut rings = self.rings.lock();
            if self.freed.wait_until(&mut rings, deadline).timed_out() {
                drop(rings);
                return self.try_alloc_filled(kind, len, fill);
            }
        }
    }

    pub fn stats(&self) -> DramStats {
        let rings = self.rings.lock();
        DramStats {
            budget: self.map.len(),
            short_term_capacity: rings[0].capacity(),
            short_term_used: rings[0].used(),
            long_term_capacity: rings[1].capacity(),
            long_term_used: rings[1].used(),
            high_water: self.high_water.load(Ordering::Relaxed),
        }
    }

    fn free(&self, kind: RingKind, ring_offset: usize) {
        self.rings.lock()[Self::idx(kind)].free(ring_offset);
        self.freed.notify_all();
    }
}

/// A block of the DRAM heap, owned uniquely; returned to its ring on drop.
pub struct DramBlock {
    heap: Arc<DramHeap>,
    kind: RingKind,
    offset: usize,
    ring_offset: usize,
    len: usize,
    /// Bytes from the block's start that may hold anything: what earlier blocks of its ring held. Past them
    /// lies memory no block ever held (`len`: none), which is zero still — the mapping is anonymous, only
    /// blocks write to it, and populating pages changes no byte — until this block's owner writes there:
    /// [`DramBlock::as_mut_slice`] sets this to `len`, and the one owner that writes through
    /// [`DramBlock::atomic_words`] (a fresh segment, crate-private) zeroes its tables first and then writes
    /// only words it has handed itself, once each (debug builds check that the words it skips are zero).
    /// The first-fit rings keep reusing low blocks, so after the first few arenas every block lies in pages
    /// the process has already faulted in.
    reused: usize,
    /// Bytes from the block's start that [`DramBlock::zero_front`] has backed already (the background
    /// prefault starts past them).
    front: usize,
}

impl DramBlock {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block as bytes, writable: this block is the unique owner of its range. Whatever the caller writes,
    /// no byte of the block counts as zero still after this (see `reused`).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.reused = self.len;
        // SAFETY: the range is inside the mapping and owned by this block alone (ring invariant); the
        // `&mut self` borrow rules out any other view of it for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.heap.map.as_ptr().add(self.offset), self.len) }
    }

    /// The block as bytes, read-only.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above; shared borrows only permit reads.
        unsafe { std::slice::from_raw_parts(self.heap.map.as_ptr().add(self.offset), self.len) }
    }

    /// The block as 32-bit atomic words, for structures with one writer and concurrent readers (the fresh
    /// segment). Callers must not mix this view with [`as_slice`](Self::as_slice).
    pub(crate) fn atomic_words(&self) -> &[AtomicU32] {
        // SAFETY: blocks are 64-byte aligned (ring alignment, mapping page aligned), in bounds, and the
        // caller promises atomic-only access while this view is used.
        unsafe { atomic_u32s(self.heap.map.as_ptr().add(self.offset), self.len) }
    }

    /// The 64-bit word at 32-bit word index `word` (which must be even), for the few fields that two 32-bit
    /// values must change together in (the fresh segment's (df, last doc) pairs). Those words are only ever
    /// accessed through this view.
    pub(crate) fn atomic_u64_at(&self, word: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(
            word.is_multiple_of(2) && word * 4 + 8 <= self.len,
            "misaligned or out-of-bounds 64-bit word"
        );
        // SAFETY: in bounds and 8-byte aligned (asserted; the block itself is 64-byte aligned); the caller
        // accesses these words only through this view.
        unsafe { super::mapping::atomic_u64(self.heap.map.as_ptr().add(self.offset + word * 4)) }
    }
}

impl DramBlock {
    /// Has the kernel back this block's never-used pages ahead of its writer, up to `reach` bytes from the
    /// block's start as `reach` says when asked ([`Mapping::populate_in_background`]; `None` stops): the
    /// first touch of a page is a fault in which the kernel zeroes it — under a hypervisor, the host backs it
    /// too (~320 MB/s on the 2-core benchmark VM). A bulk load's arenas, hundreds of MiB filled at full
    /// speed, took 12% of a two-thread load's CPU samples in those faults, all inside the insert stage the
    /// workers take turns at; a real-time writer's first arenas took 7% of the add thread's samples ingesting
    /// the enwiki file (perf). Only the part of the block no earlier block held is populated, and no thread
    /// is started when there is none, so once the rings reuse their low blocks this costs nothing. Contents
    /// are unchanged, so the writer fills the block meanwhile; a block freed and handed out again meanwhile
    /// only finds its pages already there.
    pub fn prefault_in_background(&self, reach: impl Fn() -> Option<usize> + Send + 'static) {
        let from = self.reused.max(self.front);
        if from >= self.len {
            return;
        }
        // Not joined: the thread ends once `reach` says stop (the segment is gone), and the anonymous
        // mapping it may hold a step longer locks nothing.
        let _ =
            Mapping::populate_in_background(&self.heap.map, self.offset + from, self.len - from, move || {
                reach().map(|r| r.saturating_sub(from))
            });
    }

    /// Zeroes the block's first `len` bytes and has the kernel back their pages now — for a structure laid
    /// out at the block's front and then written at random (a fresh segment's tables). Memory no earlier
    /// block held is zero already and is only populated, a huge page at a time with the probe of
    /// [`Mapping::populate_probing`]: where huge pages prove slow, the rest of the block gets small pages.
    /// Zeroing with stores faulted in a cold 256 MiB bulk arena's 17 MiB of tables as huge pages the
    /// benchmark VM's hypervisor backed in 10–17 ms each: 0.2 s before a bulk load read its first block, and
    /// as much again inside the insert stage when its next arena was laid out (perf, enwiki, 2 threads).
    pub fn zero_front(&mut self, len: usize) {
        let len = len.min(self.len);
        let held = self.zero_held(len);
        if len > held {
            let mut huge = self.heap.map.huge();
            // Best effort: pages the kernel refuses to populate are faulted in on first touch, zero still.
            let _ = self.heap.map.populate_probing(
                self.offset + held,
                len - held,
                self.offset + self.len,
                &mut huge,
            );
        }
        debug_assert!(self.as_slice()[held..len].iter().all(|&b| b == 0), "memory no block held is zero");
        self.front = self.front.max(len);
    }

    /// Zeroes what earlier blocks held of the block's first `len` bytes (the rest is zero still); returns how
    /// many bytes that was.
    fn zero_held(&mut self, len: usize) -> usize {
        let held = self.reused.min(len);
        // SAFETY: the range is inside the mapping and owned by this block alone (ring invariant), and
        // `&mut self` rules out any other view of it; not through `as_mut_slice`, which would count the whole
        // block as written.
        unsafe { std::ptr::write_bytes(self.heap.map.as_ptr().add(self.offset), 0, held) };
        held
    }

    /// Bytes from the block's start that may hold anything (see `reused`): past them the block is zero
    /// still. The block's length when it lies wholly in reused memory, or once its owner wrote through
    /// [`as_mut_slice`](Self::as_mut_slice).
    pub fn reused_bytes(&self) -> usize {
        self.reused
    }
}

impl Drop for DramBlock {
    fn drop(&mut self) {
        self.heap.free(self.kind, self.ring_offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn pretouch_backs_every_page_and_keeps_contents() {
        let heap = DramHeap::new(8 << 20, 2 << 20).unwrap();
        let mut a = heap.try_alloc(RingKind::ShortTerm, 1 << 20).unwrap();
        a.as_mut_slice()[12345] = 9;
        let page = super::super::mapping::page_size();
        let pages = heap.map.len() / page;
        assert!(heap.map.resident_pages() < pages, "only what was used is resident");
        if let Some(t) = heap.pretouch_in_background() {
            t.join().unwrap();
            // A kernel without MADV_POPULATE_WRITE refuses it: nothing to check there.
            if heap.map.populate_write(0, page) {
                assert_eq!(heap.map.resident_pages(), pages);
            }
        }
        assert_eq!(a.as_slice()[12345], 9);
        assert!(a.as_slice()[..12345].iter().all(|&x| x == 0));
    }

    /// A block knows how much of it earlier blocks held, so only memory never used before is prefaulted.
    #[test]
    fn blocks_know_their_reused_part() {
        let heap = DramHeap::new(8 << 20, 4 << 20).unwrap();
        let a = heap.try_alloc_filled(RingKind::ShortTerm, 1 << 20, Fill::Overwritten).unwrap();
        assert_eq!(a.reused_bytes(), 0, "the ring's first block is all new memory");
        let b = heap.try_alloc_filled(RingKind::ShortTerm, 1 << 20, Fill::Overwritten).unwrap();
        assert_eq!(b.reused_bytes(), 0);
        drop(a);
        let c = heap.try_alloc_filled(RingKind::ShortTerm, 1 << 20, Fill::Overwritten).unwrap();
        assert_eq!(c.reused_bytes(), c.len(), "the freed first block is reused whole");
        drop((b, c));
        let d = heap.try_alloc_filled(RingKind::ShortTerm, 3 << 20, Fill::Overwritten).unwrap();
        assert_eq!(d.reused_bytes(), 2 << 20, "two blocks' worth was held before, the rest never");
        // The long-term ring keeps its own account.
        let e = heap.try_alloc(RingKind::LongTerm, 1 << 20).unwrap();
        assert_eq!(e.reused_bytes(), 0);
        // Prefaulting a wholly reused block starts nothing, and a partly new one keeps its contents.
        drop(d);
        let f = heap.try_alloc_filled(RingKind::ShortTerm, 4 << 20, Fill::Overwritten).unwrap();
        assert_eq!(f.reused_bytes(), 3 << 20);
        // Written through the atomic view, as a fresh segment writes (a write through `as_mut_slice` would
        // count the whole block as reused).
        f.atomic_words()[(3 << 20) / 4 + 5].store(3, std::sync::atomic::Ordering::Relaxed);
        f.prefault_in_background(|| Some(usize::MAX));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(f.atomic_words()[(3 << 20) / 4 + 5].load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    /// Memory no block held is zero without being written, so zeroing skips it: a zeroed block, and the front
    /// `zero_front` zeroes, read as zeros wherever earlier blocks left junk and wherever they did not — and
    /// bytes the owner wrote through `as_mut_slice` count as held.
    #[test]
    fn zeroing_skips_only_memory_no_block_held() {
        let heap = DramHeap::new(16 << 20, 12 << 20).unwrap();
        let mut junk = heap.try_alloc_filled(RingKind::ShortTerm, 3 << 20, Fill::Overwritten).unwrap();
        junk.as_mut_slice().fill(0xa5);
        drop(junk);
        let mut front = heap.try_alloc_filled(RingKind::ShortTerm, 8 << 20, Fill::Overwritten).unwrap();
        assert_eq!(front.reused_bytes(), 3 << 20);
        front.zero_front(5 << 20);
        assert!(front.as_slice()[..5 << 20].iter().all(|&x| x == 0), "junk and new memory alike");
        // Past the front, only the reused part may hold anything; here it ended inside the front.
        assert!(front.as_slice()[5 << 20..].iter().all(|&x| x == 0));
        front.as_mut_slice()[(6 << 20) + 1] = 1;
        assert_eq!(front.reused_bytes(), front.len(), "written through the slice: all of it counts as held");
        front.zero_front(7 << 20);
        assert_eq!(front.as_slice()[(6 << 20) + 1], 0, "zeroed, though no earlier block held it");
        front.as_mut_slice()[(7 << 20) + 2] = 2;
        drop(front);
        let zeroed = heap.try_alloc(RingKind::ShortTerm, 10 << 20).unwrap();
        assert_eq!(zeroed.reused_bytes(), 8 << 20);
        assert!(zeroed.as_slice().iter().all(|&x| x == 0));
    }

    #[test]
    fn budget_is_a_hard_cap() {
        let heap = DramHeap::new(1 << 20, 1 << 18).unwrap();
        let a = heap.try_alloc(RingKind::LongTerm, 500_000).unwrap();
        assert!(heap.try_alloc(RingKind::LongTerm, 500_000).is_none());
        assert!(heap
            .alloc_wait(RingKind::LongTerm, 500_000, Duration::from_millis(10), Fill::Zeroed)
            .is_none());
        drop(a);
        let mut b = heap.try_alloc(RingKind::LongTerm, 500_000).unwrap();
        assert!(b.as_mut_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[0] = 7;
        assert_eq!(b.as_slice()[0], 7);
        let s = heap.stats();
        assert!(s.high_water <= s.budget);
        assert!(s.long_term_used >= 500_000);
    }
}
