//! The merged segment (SPIRIT §4.7): one persistent dictionary for every merged image, whose entries head a
//! chain of that term's per-segment posting lists, newest first. Merging an engraved image *links* each of
//! its posting lists into the chain — one node and one pointer store per term — instead of rewriting
//! postings. The lists stay where the engrave put them.
//!
//! ```text
//! header (64 B):   table pointer (atomic) | region: first chunk (atomic)
//! region chunk:    next chunk u64 | length u64 | crc32 u32 | pad (32 B), then tables, nodes and keys
//! table:           capacity u64 | count u64 | slots[capacity] × 32 B: key ref | hash | chain head | check
//! key record:      len u32 | crc32 of the key u32 | bytes
//! chain node 32 B: seg_id u32 | df u32 | blob len u32 | max_tf u32 | blob offset u48 | next u48 |
//!                  crc32 u32 of the node's first 28 bytes and the term's hash
//! ```
//! Checksums make every corruption an error, never a wrong answer: a slot's check word covers its key ref and
//! hash (written once, before the slot is published), a key record carries its own crc, and a node's crc
//! includes the hash of its term, so a flipped chain head or `next` pointer that lands on another term's node
//! is detected too.
//! Readers never lock: a slot's key ref and a chain head are published with release stores after what they
//! point to is written; a resize writes a whole new table and publishes it with one pointer store. A reader
//! only trusts nodes of segments its GDT snapshot says are merged, so it ignores a segment being linked.
//!
//! Everything but the header lives in the dictionary's own *region*: a durable list of heap chunks, linked
//! before anything in them is published. So the dictionary's space is known without walking its chains
//! (open computes the heap's free space from it), and a superseded dictionary — compaction builds a new one
//! and swaps it in with a checkpoint — gives all of it back at once when its last reader is gone.
//! Chains run from the newest segment to the oldest, so segment ids strictly decrease along a chain: a
//! corrupt link can never make a loop.

use super::hot::{HotChain, HotChains, HotNode, Lookup, PinnedList};
use super::image::ImageView;
use super::SegmentError;
use crate::codec::PostingsCursor;
use crate::memory::{PersistentHeap, PersistentHeapError};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// Terms between the stages of a link's pipeline (slot prefetch, key record prefetch, probe).
const LINK_PIPELINE: u64 = 8;
/// Terms per batch of [`MergedSegment::link`] when its options ask for no progress reports.
const LINK_BATCH: u64 = 1 << 16;
const SLOT: u64 = 32;
/// Region chunk: header bytes and the smallest chunk.
const CHUNK_HEADER: u64 = 32;
const MIN_CHUNK: u64 = 256 << 10;
/// Bound on the chunk list walked at open (a corrupt list cannot loop forever).
const MAX_CHUNKS: usize = 1 << 20;
const NODE: u64 = 32;
const TABLE_HEADER: u64 = 16;
const INITIAL_CAP: u64 = 1 << 12;
const U48: u64 = (1 << 48) - 1;

fn slot_check(key_ref: u64, hash: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&key_ref.to_le_bytes());
    b[8..].copy_from_slice(&hash.to_le_bytes());
    crc32fast::hash(&b) as u64 | 1 << 40
}

fn node_crc(b: &[u8], h: u64) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&b[..28]);
    c.update(&h.to_le_bytes());
    c.finalize()
}

#[allow(clippy::too_many_arguments)]
fn encode_node(seg: u32, df: u32, blob_off: u64, blob_len: u32, max_tf: u32, next: u64, h: u64) -> [u8; 32] {
    debug_assert!(blob_off <= U48 && next <= U48);
    let mut b = [0u8; NODE as usize];
    b[0..4].copy_from_slice(&seg.to_le_bytes());
    b[4..8].copy_from_slice(&df.to_le_bytes());
    b[8..12].copy_from_slice(&blob_len.to_le_bytes());
    b[12..16].copy_from_slice(&max_tf.to_le_bytes());
    b[16..22].copy_from_slice(&blob_off.to_le_bytes()[..6]);
    b[22..28].copy_from_slice(&next.to_le_bytes()[..6]);
    let crc = node_crc(&b, h);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b
}

fn u48_at(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..6].copy_from_slice(&b[..6]);
    u64::from_le_bytes(w)
}

fn chunk_crc(next: u64, len: u64) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(b"MSCHUNK1");
    c.update(&next.to_le_bytes());
    c.update(&len.to_le_bytes());
    c.finalize()
}

/// The merged segment of one shard.
pub struct MergedSegment {
    heap: Arc<PersistentHeap>,
    header: u64,
    /// Bump cursor inside the newest region chunk: (next free byte, chunk end). (0, 0) = start a new chunk.
    region: Mutex<(u64, u64)>,
    /// Superseded by a new dictionary: the last reader's drop gives the header and region back to the heap.
    retired: AtomicBool,
    /// Unique in the process and increasing with each dictionary made or opened: names this dictionary's
    /// entries in the hot-chain cache.
    uid: u64,
    /// The shard's DRAM cache of hot chains ([`super::hot`]); off unless the shard attaches one.
    hot: Arc<HotChains>,
}

/// Source of [`MergedSegment::uid`].
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// How [`MergedSegment::link`] runs.
#[derive(Default)]
pub struct LinkOptions<'a> {
    /// Crash-safe: persist nodes and keys before publishing them, and the table after.
    pub durable: bool,
    /// Redo of a merge cut short by a crash: skip terms already linked, repair torn slots.
    pub redo: bool,
    /// First term (in the image's order) to link.
    pub from_term: u32,
    /// Terms per batch (0: 65,536); after each durable batch `progress` is called with the number of
    /// terms done.
    pub progress_every: u32,
    pub progress: Option<&'a mut dyn FnMut(u32) -> Result<(), MergeError>>,
}

enum Link {
    Skip,
    Existing { slot: u64, node: u64, h: u64 },
    New { key_at: u64, node: u64, h: u64 },
}

/// One node of a term's chain.
#[derive(Debug, Clone)]
pub struct ChainNode<'a> {
    pub seg_id: u32,
    pub df: u32,
    pub max_tf: u32,
    pub blob: &'a [u8],
    /// The list's head pinned in DRAM, when the selective cache holds the term (resolved through it).
    pub pinned: Option<Arc<PinnedList>>,
}

fn hash64(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key) | 1
}

impl MergedSegment {
    /// Creates an empty merged segment in the heap.
    pub fn create(heap: Arc<PersistentHeap>) -> Result<MergedSegment, PersistentHeapError> {
        let header = heap.alloc_copy(&[0u8; 64])?;
        heap.persist(header, 64)?;
        let ms = MergedSegment::attach(heap, header);
        let table = ms.new_table(INITIAL_CAP)?;
        ms.heap.atomic(header).store(table, Release);
        Ok(ms)
    }

    fn attach(heap: Arc<PersistentHeap>, header: u64) -> MergedSegment {
        MergedSegment {
            heap,
            header,
            region: Mutex::new((0, 0)),
            retired: AtomicBool::new(false),
            uid: NEXT_UID.fetch_add(1, Relaxed),
            hot: Arc::new(HotChains::new(0)),
        }
    }

    /// Reads hot chains through `hot` (the shard's cache, shared by its successive dictionaries).
    pub fn with_hot(mut self, hot: Arc<HotChains>) -> MergedSegment {
        self.hot = hot;
        self
    }

    /// This dictionary's process-unique id (see the field).
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// Allocates `len` bytes in the region. A new chunk is made durable and linked (durably) before any byte
    /// of it is handed out, so whatever a durable chain points to lies in a chunk open can find.
    fn alloc(&self, len: usize) -> Result<u64, PersistentHeapError> {
        let len = (len as u64).div_ceil(8) * 8;
        let mut r = self.region.lock();
        if r.0 + len > r.1 {
            // A full heap may have no MIN_CHUNK-sized hole left: then take just what is needed.
            let need = CHUNK_HEADER + len;
            let (c, size) = match self.heap.alloc(MIN_CHUNK.max(need) as usize) {
                Ok(c) => (c, MIN_CHUNK.max(need)),
                Err(_) => (self.heap.alloc(need as usize)?, need),
            };
            let next = self.heap.atomic(self.header + 8).load(Acquire);
            let mut h = [0u8; CHUNK_HEADER as usize];
            h[0..8].copy_from_slice(&next.to_le_bytes());
            h[8..16].copy_from_slice(&size.to_le_bytes());
            h[16..20].copy_from_slice(&chunk_crc(next, size).to_le_bytes());
            self.heap.write(c, &h);
            self.heap.persist(c, CHUNK_HEADER as usize)?;
            self.heap.atomic(self.header + 8).store(c, Release);
            self.heap.persist(self.header + 8, 8)?;
            *r = (c + CHUNK_HEADER, c + size);
        }
        let at = r.0;
        r.0 += len;
        Ok(at)
    }

    fn alloc_copy(&self, bytes: &[u8]) -> Result<u64, PersistentHeapError> {
        let at = self.alloc(bytes.len())?;
        self.heap.write(at, bytes);
        Ok(at)
    }

    /// The heap extents this dictionary owns: its header and every region chunk (checked: inside the heap,
    /// checksummed, a bounded list).
    pub fn extents(&self) -> Result<Vec<(u64, u64)>, SegmentError> {
        let mut out = vec![(self.header, 64)];
        let mut c = self.heap.atomic(self.header + 8).load(Acquire);
        while c != 0 {
            let bad = || self.corrupt("bad region chunk", c);
            let h = self.heap.try_slice(c, CHUNK_HEADER as usize).ok_or_else(bad)?;
            let next = u64::from_le_bytes(h[0..8].try_into().unwrap());
            let len = u64::from_le_bytes(h[8..16].try_into().unwrap());
            if u32::from_le_bytes(h[16..20].try_into().unwrap()) != chunk_crc(next, len)
                || self.heap.try_slice(c, len as usize).is_none()
                || out.len() > MAX_CHUNKS
            {
                return Err(bad());
            }
            out.push((c, len));
            c = next;
        }
        Ok(out)
    }

    /// Bytes of the region (for stats).
    pub fn region_bytes(&self) -> u64 {
        self.extents().map_or(0, |e| e.iter().map(|x| x.1).sum())
    }

    /// Superseded (by compaction): when the last snapshot holding this dictionary is dropped, its header
    /// and region go back to the heap.
    pub fn retire(&self) {
        self.retired.store(true, Release);
    }

    /// Makes the header and every region chunk durable (a new crash-safe shard; a dictionary built without
    /// per-batch barriers, before a checkpoint publishes it).
    pub fn persist_all(&self) -> Result<(), PersistentHeapError> {
        for (off, len) in self.extents().map_err(|e| std::io::Error::other(e.0))? {
            self.heap.persist(off, len as usize)?;
        }
        Ok(())
    }

    /// Re-attaches to a merged segment whose header is at `header`, checking that the header and the whole
    /// table lie inside the heap (so probing can never leave it).
    pub fn open(heap: Arc<PersistentHeap>, header: u64) -> Result<MergedSegment, SegmentError> {
        let bad = || SegmentError("merged segment: bad table header".into());
        if !header.is_multiple_of(8) || heap.try_slice(header, 64).is_none() {
            return Err(bad());
        }
        let ms = MergedSegment::attach(heap, header);
        ms.extents()?;
        let t = ms.heap.atomic(header).load(Acquire);
        let cap =
            ms.heap.try_slice(t, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).ok_or_else(bad)?;
        let bytes = cap.checked_mul(SLOT).and_then(|b| b.checked_add(TABLE_HEADER)).ok_or_else(bad)?;
        if t == 0
            || !t.is_multiple_of(8)
            || cap == 0
            || !cap.is_power_of_two()
            || ms.heap.try_slice(t, bytes as usize).is_none()
        {
            return Err(bad());
        }
        Ok(ms)
    }

    pub fn header_offset(&self) -> u64 {
        self.header
    }

    fn new_table(&self, cap: u64) -> Result<u64, PersistentHeapError> {
        let bytes = (TABLE_HEADER + cap * SLOT) as usize;
        let t = self.alloc(bytes)?;
        // Fresh heap space is zero, but write it anyway: the table must start empty whatever was there.
        // Zeroed in place: a buffer of zeros to copy from was as large as the table (128 MiB for an enwiki
        // bulk load's last one), memory first touched for that alone.
        self.heap.write_with(t, bytes, |out| {
            out.fill(0);
            out[..8].copy_from_slice(&cap.to_le_bytes());
        });
        Ok(t)
    }

    fn table(&self) -> (u64, u64) {
        let t = self.heap.atomic(self.header).load(Acquire);
        if t == 0 {
            return (0, 0);
        }
        (t, u64::from_le_bytes(self.heap.slice(t, 8).try_into().unwrap()))
    }

    /// Number of distinct terms.
    pub fn term_count(&self) -> u64 {
        let (t, _) = self.table();
        self.heap.atomic(t + 8).load(Relaxed)
    }

    fn slot(t: u64, i: u64) -> u64 {
        t + TABLE_HEADER + i * SLOT
    }

    fn corrupt(&self, what: &str, at: u64) -> SegmentError {
        SegmentError(format!("{}: merged segment: {what} at offset {at}", self.heap.path().display()))
    }

    /// The key stored at `key_ref`, checked against its crc.
    fn key_at(&self, key_ref: u64) -> Result<&[u8], SegmentError> {
        let bad = || self.corrupt("corrupt key record", key_ref);
        let head = self.heap.try_slice(key_ref, 8).ok_or_else(bad)?;
        let len = u32::from_le_bytes(head[..4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(head[4..8].try_into().unwrap());
        let key = self.heap.try_slice(key_ref + 8, len).ok_or_else(bad)?;
        if crc32fast::hash(key) != crc {
            return Err(bad());
        }
        Ok(key)
    }

    fn key_record(key: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
        out.extend_from_slice(key);
    }

    /// Finds the slot of `key` in table `t`, or the empty slot where it would go; every slot passed is
    /// checked. (A table is never more than half full, so an empty slot ends every probe; the probe count is
    /// bounded anyway, so a corrupt, full table cannot loop forever.)
    fn probe(&self, t: u64, cap: u64, key: &[u8], h: u64) -> Result<(u64, bool), SegmentError> {
        let mut i = h & (cap - 1);
        for _ in 0..cap {
            let s = Self::slot(t, i);
            let key_ref = self.heap.atomic(s).load(Acquire);
            if key_ref == 0 {
                return Ok((s, false));
            }
            let sh = self.heap.atomic(s + 8).load(Relaxed);
            if self.heap.atomic(s + 24).load(Relaxed) != slot_check(key_ref, sh) {
                return Err(self.corrupt("slot checksum mismatch", s));
            }
            if sh == h && self.key_at(key_ref)? == key {
                return Ok((s, true));
            }
            i = (i + 1) & (cap - 1);
        }
        Ok((Self::slot(t, h & (cap - 1)), false))
    }

    /// Links every posting list of an engraved image (at heap offset `image_off`) into the chains.
    /// Single-threaded (the merger). See [`LinkOptions`] for crash-safe linking.
    pub fn link(
        &self,
        image_off: u64,
        view: &ImageView<'_>,
        opts: &mut LinkOptions<'_>,
    ) -> Result<(), MergeError> {
        let n = view.n_terms() as u64;
        let seg = view.seg_id();
        let (mut t, mut cap) = self.table();
        let mut count = self.heap.atomic(t + 8).load(Relaxed);
        if opts.redo {
            // A torn table may count a slot it does not hold (or the reverse), and a slot's key reference may
            // be durable while its hash word is not: count again and rewrite every hash from its key.
            count = 0;
            for i in 0..cap {
                let s = Self::slot(t, i);
                let key_ref = self.heap.atomic(s).load(Relaxed);
                if key_ref == 0 {
                    continue;
                }
                count += 1;
                let h = hash64(self.key_at(key_ref)?);
                self.heap.atomic(s + 8).store(h, Relaxed);
                self.heap.atomic(s + 24).store(slot_check(key_ref, h), Relaxed);
            }
            self.heap.atomic(t + 8).store(count, Relaxed);
            if opts.durable {
                self.heap.persist(t, (TABLE_HEADER + cap * SLOT) as usize)?;
            }
        }
        // Into an empty dictionary every term of the image is new: the table is sized for all of them at once.
        // Doubling as they arrived wrote every smaller table on the way (about as many bytes again as the
        // last one, kept in the region until the dictionary is superseded) and re-inserted the slots each time.
        if count == 0 && !opts.redo {
            let want = ((n - (opts.from_term as u64).min(n)) * 2).next_power_of_two();
            if want > cap {
                (t, cap) = self.grow_to(t, cap, want, opts.durable)?;
            }
        }
        // Without progress to report, terms go in batches of LINK_BATCH: a batch allocates its nodes and key
        // records at once and pipelines its probes, where a term at a time did neither.
        let batch = if opts.progress_every == 0 { LINK_BATCH } else { opts.progress_every as u64 };
        let mut i = opts.from_term as u64;
        while i < n {
            let end = n.min(i + batch);
            // Pass 1: nodes and key records, written and made durable before anything points to them.
            let nodes = self.alloc(((end - i) * NODE) as usize)?;
            let mut plan = Vec::with_capacity((end - i) as usize);
            let mut keys = Vec::new();
            // Software-pipelined: term j's table slot is prefetched 2·D terms ahead and, once there, the key
            // record it points to D terms ahead, so the probes' cache misses overlap (a bulk load's last link
            // ran alone on one core, bound by them).
            const D: u64 = LINK_PIPELINE;
            let mut ahead = [None; 2 * LINK_PIPELINE as usize];
            let slot_of = |j: u64, ahead: &mut [Option<u64>]| {
                if let Ok(key) = view.key_at(j as usize) {
                    let h = hash64(key);
                    ahead[(j % (2 * D)) as usize] = Some(h);
                    crate::memory::prefetch(self.heap.atomic(Self::slot(t, h & (cap - 1))));
                }
            };
            for j in i..end.min(i + 2 * D) {
                slot_of(j, &mut ahead);
            }
            for j in i..end {
                // Term j's hash out of the ring before term j + 2·D takes its place.
                let ahead_h = ahead[(j % (2 * D)) as usize].take();
                if j + 2 * D < end {
                    slot_of(j + 2 * D, &mut ahead);
                }
                if let Some(h) = ahead[((j + D) % (2 * D)) as usize].filter(|_| j + D < end) {
                    let key_ref = self.heap.atomic(Self::slot(t, h & (cap - 1))).load(Relaxed);
                    if let Some(r) = self.heap.try_slice(key_ref, 1) {
                        crate::memory::prefetch(&r[0]);
                    }
                }
                let key = view.key_at(j as usize)?;
                let info = view.term_at(j as usize)?;
                let h = ahead_h.unwrap_or_else(|| hash64(key));
                let (s, found) =
                    if opts.redo { self.probe_key(t, cap, key) } else { self.probe(t, cap, key, h)? };
                let head = if found { self.heap.atomic(s + 16).load(Relaxed) } else { 0 };
                if opts.redo && found && head != 0 && self.node_seg(head) == Some(seg) {
                    plan.push(Link::Skip);
                    continue;
                }
                let node = nodes + (j - i) * NODE;
                let b = encode_node(
                    seg,
                    info.df,
                    image_off + info.blob_offset,
                    info.blob.len() as u32,
                    info.max_tf,
                    head,
                    h,
                );
                self.heap.write(node, &b);
                if found {
                    plan.push(Link::Existing { slot: s, node, h });
                } else {
                    plan.push(Link::New { key_at: keys.len() as u64, node, h });
                    Self::key_record(key, &mut keys);
                }
            }
            let keys_off = if keys.is_empty() { 0 } else { self.alloc_copy(&keys)? };
            if opts.durable {
                self.heap.persist(nodes, ((end - i) * NODE) as usize)?;
                self.heap.persist(keys_off, keys.len())?;
            }
            // Pass 2: publish. Each chain head and each slot's key reference is one 8-byte store.
            let mut dirty = vec![];
            let table_at_plan = t;
            for (j, l) in (i..end).zip(plan) {
                match l {
                    Link::Skip => {}
                    Link::Existing { slot, node, h } => {
                        let slot = if t == table_at_plan {
                            slot
                        } else {
                            self.probe(t, cap, view.key_at(j as usize)?, h)?.0
                        };
                        self.heap.atomic(slot + 16).store(node, Release);
                        dirty.push((slot, slot + SLOT));
                    }
                    Link::New { key_at, node, h } => {
                        if (count + 1) * 2 > cap {
                            (t, cap) = self.grow(t, cap, opts.durable)?;
                        }
                        let (s, _) = self.probe(t, cap, view.key_at(j as usize)?, h)?;
                        let key_ref = keys_off + key_at;
                        self.heap.atomic(s + 8).store(h, Relaxed);
                        self.heap.atomic(s + 16).store(node, Relaxed);
                        self.heap.atomic(s + 24).store(slot_check(key_ref, h), Relaxed);
                        self.heap.atomic(s).store(key_ref, Release);
                        count += 1;
                        self.heap.atomic(t + 8).store(count, Relaxed);
                        dirty.push((s, s + SLOT));
                    }
                }
            }
            if opts.durable {
                dirty.push((t, t + TABLE_HEADER));
                self.heap.persist_ranges(&mut dirty)?;
            }
            if let Some(p) = opts.progress.as_mut() {
                p(end as u32)?;
            }
            i = end;
        }
        Ok(())
    }

    /// The segment id of the chain node at `node`, if it lies inside the heap.
    fn node_seg(&self, node: u64) -> Option<u32> {
        self.heap.try_slice(node, 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    }

    /// Like `probe`, but matches on the key alone and ignores the stored hash (redo after a torn write may
    /// find a slot whose key reference is durable but whose hash word is not).
    fn probe_key(&self, t: u64, cap: u64, key: &[u8]) -> (u64, bool) {
        let h = hash64(key);
        let mut i = h & (cap - 1);
        for _ in 0..cap {
            let s = Self::slot(t, i);
            let key_ref = self.heap.atomic(s).load(Acquire);
            if key_ref == 0 {
                return (s, false);
            }
            if self.key_at(key_ref).is_ok_and(|k| k == key) {
                return (s, true);
            }
            i = (i + 1) & (cap - 1);
        }
        (Self::slot(t, h & (cap - 1)), false)
    }

    fn grow(&self, t: u64, cap: u64, durable: bool) -> Result<(u64, u64), MergeError> {
        self.grow_to(t, cap, cap * 2, durable)
    }

    /// Moves every slot of table `t` (capacity `cap`) into a new table of capacity `ncap` (a larger power of
    /// two) and publishes it; the new table and its capacity.
    fn grow_to(&self, t: u64, cap: u64, ncap: u64, durable: bool) -> Result<(u64, u64), MergeError> {
        assert!(ncap > cap && ncap.is_power_of_two(), "a table grows to a larger power of two");
        let nt = self.new_table(ncap)?;
        let mut count = 0;
        for i in 0..cap {
            let s = Self::slot(t, i);
            let key_ref = self.heap.atomic(s).load(Relaxed);
            if key_ref == 0 {
                continue;
            }
            let h = self.heap.atomic(s + 8).load(Relaxed);
            let mut j = h & (ncap - 1);
            while self.heap.atomic(Self::slot(nt, j)).load(Relaxed) != 0 {
                j = (j + 1) & (ncap - 1);
            }
            let ns = Self::slot(nt, j);
            self.heap.atomic(ns + 8).store(h, Relaxed);
            self.heap.atomic(ns + 16).store(self.heap.atomic(s + 16).load(Relaxed), Relaxed);
            self.heap.atomic(ns + 24).store(self.heap.atomic(s + 24).load(Relaxed), Relaxed);
            self.heap.atomic(ns).store(key_ref, Relaxed);
            count += 1;
        }
        self.heap.atomic(nt + 8).store(count, Relaxed);
        if durable {
            // The whole new table is durable before the one pointer store that publishes it.
            self.heap.persist(nt, (TABLE_HEADER + ncap * SLOT) as usize)?;
        }
        self.heap.atomic(self.header).store(nt, Release);
        if durable {
            self.heap.persist(self.header, 8)?;
        }
        Ok((nt, ncap))
    }

    /// The chain of `key`, newest segment first.
    pub fn chain(&self, key: &[u8]) -> Chain<'_> {
        self.chain_hashed(key, hash64(key))
    }

    /// Calls `f` with every node of `key`'s chain whose segment id is at most `upto` (a snapshot's
    /// `merged_upto`: every segment up to it is fully linked), newest first — from the hot-chain cache when it
    /// holds the term for `upto`, else walking the chain (only its nodes newer than a cached entry, when there
    /// is one) and offering the result to the cache. Same nodes either way; a corrupt node is an error.
    pub fn resolve<'s>(
        &'s self,
        key: &[u8],
        upto: u32,
        f: &mut dyn FnMut(ChainNode<'s>),
    ) -> Result<(), SegmentError> {
        let h = hash64(key);
        let cached = match self.hot.get(self.uid, key, h) {
            Lookup::Hit(e) => Some(e),
            Lookup::Miss => None,
        };
        let emit = |e: &HotChain, f: &mut dyn FnMut(ChainNode<'s>)| -> Result<(), SegmentError> {
            for n in e.nodes.iter().filter(|n| n.seg_id <= upto) {
                let blob = self
                    .heap
                    .try_slice(n.blob_off, n.blob_len as usize)
                    .ok_or_else(|| self.corrupt("cached chain node points outside the heap", n.blob_off))?;
                let pinned = n.pinned.clone();
                f(ChainNode { seg_id: n.seg_id, df: n.df, max_tf: n.max_tf, blob, pinned });
            }
            Ok(())
        };
        if let Some(e) = cached.as_ref().filter(|e| e.upto >= upto) {
            self.hot.record(true, false);
            return emit(e, f);
        }
        // Walk the chain: all of it, or down to the cached entry's nodes.
        let below = cached.as_ref().map(|e| e.upto);
        let (mut nodes, mut cacheable) = (Vec::new(), self.hot.enabled());
        // The new nodes' posting blobs, for pinning if the cache takes the chain.
        let mut blobs = Vec::new();
        for node in self.chain_hashed(key, h) {
            let node = node?;
            if below.is_some_and(|b| node.seg_id <= b) {
                break;
            }
            if node.seg_id > upto {
                continue; // being linked, or newer than the snapshot
            }
            if cacheable {
                // Chain blobs are slices of the heap mapping, so this always finds their place.
                match self.heap.offset_of(node.blob) {
                    Some(blob_off) => {
                        nodes.push(HotNode {
                            seg_id: node.seg_id,
                            df: node.df,
                            max_tf: node.max_tf,
                            blob_len: node.blob.len() as u32,
                            blob_off,
                            pinned: None,
                        });
                        blobs.push(node.blob);
                    }
                    None => cacheable = false,
                }
            }
            f(node);
        }
        if let Some(e) = &cached {
            emit(e, f)?;
            nodes.extend_from_slice(&e.nodes);
        }
        self.hot.record(cached.is_some(), cached.is_some());
        if cacheable {
            // The new nodes' lists are copied only once the cache would take the chain with them.
            let mut chain = HotChain { key: key.into(), upto, dict: self.uid, nodes: nodes.into() };
            let plans: Vec<Option<(usize, u32)>> = blobs.iter().map(|b| self.pin_plan(b)).collect();
            let pins: usize = plans.iter().flatten().map(|&(len, n)| PinnedList::charge(len, n)).sum();
            if self.hot.would_admit(h, self.uid, chain.weight(), chain.bytes() + pins) {
                for ((node, blob), plan) in chain.nodes.iter_mut().zip(&blobs).zip(plans) {
                    node.pinned = plan.map(|(len, n)| Arc::new(PinnedList::new(&blob[..len], n)));
                }
                self.hot.admit(h, chain);
            }
        }
        Ok(())
    }

    /// How much of a list's head the selective cache pins, and its block count: the skip table, with the
    /// blocks when they fit the cache's limit for one list (`None` for an unreadable header: the cursor
    /// reports it).
    fn pin_plan(&self, blob: &[u8]) -> Option<(usize, u32)> {
        let head = PostingsCursor::head(blob).ok()?;
        let len =
            if head.blocks_end <= self.hot.pin_blocks_limit() { head.blocks_end } else { head.skip_end };
        Some((len, head.n_blocks))
    }

    fn chain_hashed(&self, key: &[u8], h: u64) -> Chain<'_> {
        let (t, cap) = self.table();
        match self.probe(t, cap, key, h) {
            Ok((s, found)) => {
                let node = if found { self.heap.atomic(s + 16).load(Acquire) } else { 0 };
                Chain { ms: self, node, h, err: None, prev_seg: u32::MAX }
            }
            Err(e) => Chain { ms: self, node: 0, h, err: Some(e), prev_seg: u32::MAX },
        }
    }

    /// Every key in the merged dictionary (for `check` and prefix expansion fallbacks).
    pub fn for_each_key(&self, f: &mut dyn FnMut(&[u8])) {
        let (t, cap) = self.table();
        for i in 0..cap {
            let key_ref = self.heap.atomic(Self::slot(t, i)).load(Acquire);
            if let Some(Ok(k)) = (key_ref != 0).then(|| self.key_at(key_ref)) {
                f(k);
            }
        }
    }
}

impl Drop for MergedSegment {
    fn drop(&mut self) {
        if self.retired.load(Acquire) {
            if let Ok(extents) = self.extents() {
                for (off, len) in extents {
                    self.heap.release(off, len);
                }
            }
        }
    }
}

/// Iterator over a chain.
pub struct Chain<'a> {
    ms: &'a MergedSegment,
    node: u64,
    /// The hash of the chain's term: every node's crc covers it.
    h: u64,
    /// A corrupt slot met while looking the term up.
    err: Option<SegmentError>,
    /// Segment id of the node before (ids strictly decrease along a chain).
    prev_seg: u32,
}

impl<'a> Iterator for Chain<'a> {
    /// A node, or the error that a node is corrupt or points outside the heap (then the chain ends).
    type Item = Result<ChainNode<'a>, SegmentError>;
    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.err.take() {
            return Some(Err(e));
        }
        if self.node == 0 {
            return None;
        }
        let at = self.node;
        self.node = 0;
        let corrupt = |what: &str| Some(Err(self.ms.corrupt(what, at)));
        let Some(b) = self.ms.heap.try_slice(at, NODE as usize) else {
            return corrupt("chain node outside the heap");
        };
        if node_crc(b, self.h) != u32::from_le_bytes(b[28..32].try_into().unwrap()) {
            return corrupt("chain node checksum mismatch");
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let Some(blob) = self.ms.heap.try_slice(u48_at(&b[16..22]), u32_at(8) as usize) else {
            return corrupt("chain node points outside the heap");
        };
        let n = ChainNode { seg_id: u32_at(0), df: u32_at(4), max_tf: u32_at(12), blob, pinned: None };
        // Chains only ever point to older segments: anything else is corruption (and could be a loop).
        if n.seg_id >= self.prev_seg {
            return corrupt("chain node out of segment order");
        }
        self.prev_seg = n.seg_id;
        self.node = u48_at(&b[22..28]);
        Some(Ok(n))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Heap(#[from] PersistentHeapError),
    #[error("{}", .0.0)]
    Segment(SegmentError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Log(String),
}

impl From<SegmentError> for MergeError {
    fn from(e: SegmentError) -> Self {
        MergeError::Segment(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{BarrierChoice, DramHeap, RingKind};
    use crate::schema::{analyze_document, Schema};
    use crate::segment::hot::HotChains;
    use crate::segment::{FreshSegment, ImageBuilder};
    use serde_json::json;

    /// An image of `n` documents, each with a word of its own (`w` and its doc id) and a word all share.
    fn image(seg_id: u32, base_doc: u32, n: u32) -> Vec<u8> {
        let schema = Schema::from_mappings(&json!({"properties": {"body": {"type": "text"}}})).unwrap();
        let heap = DramHeap::new(48 << 20, 40 << 20).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 32 << 20).unwrap(), n.max(1000));
        for i in 0..n {
            let d = json!({"body": format!("shared w{}", base_doc + i)});
            fresh.insert(&analyze_document(&schema, format!("d{}", base_doc + i), &d).unwrap()).unwrap();
        }
        ImageBuilder::from_fresh(&fresh, seg_id, base_doc, &crate::codec::FieldCodecs::default()).unwrap()
    }

    /// A 64 MiB persistent heap in `dir`.
    fn heap_in(dir: &tempfile::TempDir) -> Arc<PersistentHeap> {
        Arc::new(PersistentHeap::create(&dir.path().join("heap"), 64 << 20, BarrierChoice::Auto).unwrap())
    }

    /// The segment ids along every chain of `keys`; each walk must be free of errors.
    fn chains(ms: &MergedSegment, keys: &[Vec<u8>]) -> Vec<Vec<u32>> {
        keys.iter().map(|k| ms.chain(k).map(|n| n.unwrap().seg_id).collect()).collect()
    }

    /// `resolve` through the hot-chain cache gives exactly the chain walk's nodes up to a snapshot's
    /// `merged_upto`: from a fresh entry, from an entry older than the snapshot (the chain's new head nodes
    /// spliced in front), and for an older snapshot than the entry; a new dictionary's entries replace the
    /// old one's.
    #[test]
    fn resolve_through_the_cache_equals_the_chain_walk() {
        let dir = tempfile::tempdir().unwrap();
        let heap = heap_in(&dir);
        let hot = Arc::new(HotChains::new(1 << 20));
        let ms = MergedSegment::create(heap.clone()).unwrap().with_hot(hot.clone());
        let imgs = [image(1, 0, 20), image(2, 20, 30), image(3, 50, 10)];
        let views: Vec<ImageView> = imgs.iter().map(|i| ImageView::parse(i).unwrap()).collect();
        let mut keys: Vec<Vec<u8>> = vec![];
        for v in &views {
            keys.extend((0..v.n_terms()).map(|i| v.key_at(i).unwrap().to_vec()));
        }
        keys.sort();
        keys.dedup();
        let walk = |ms: &MergedSegment, k: &[u8], upto: u32| -> Vec<(u32, u32, usize)> {
            let nodes = ms.chain(k).map(|n| n.unwrap()).filter(|n| n.seg_id <= upto);
            nodes.map(|n| (n.seg_id, n.df, heap.offset_of(n.blob).unwrap() as usize)).collect()
        };
        let resolved = |ms: &MergedSegment, k: &[u8], upto: u32| -> Vec<(u32, u32, usize)> {
            let mut out = vec![];
            ms.resolve(k, upto, &mut |n| {
                out.push((n.seg_id, n.df, heap.offset_of(n.blob).unwrap() as usize))
            })
            .unwrap();
            out
        };
        for (i, img) in imgs.iter().enumerate() {
            let off = heap.alloc_copy(img).unwrap();
            ms.link(off, &views[i], &mut LinkOptions::default()).unwrap();
            let upto = i as u32 + 1;
            for k in &keys {
                // Twice: a miss or refresh, then a hit; and for every older snapshot.
                for u in [upto, upto, 1, upto - 1, upto] {
                    assert_eq!(
                        resolved(&ms, k, u),
                        walk(&ms, k, u),
                        "{:?} at {u}",
                        String::from_utf8_lossy(k)
                    );
                }
            }
        }
        let st = hot.stats();
        assert!(st.hits > 0 && st.refreshes > 0 && st.misses > 0, "{st:?}");
        assert_eq!(st.entries, keys.len());
        // A newer dictionary (compaction's) takes over the cache.
        let ms2 = MergedSegment::create(heap.clone()).unwrap().with_hot(hot.clone());
        let off = heap.alloc_copy(&imgs[0]).unwrap();
        ms2.link(off, &views[0], &mut LinkOptions::default()).unwrap();
        assert!(ms2.uid() > ms.uid());
        for k in &keys {
            assert_eq!(resolved(&ms2, k, 1), walk(&ms2, k, 1));
            assert_eq!(resolved(&ms, k, 3), walk(&ms, k, 3), "the old dictionary still answers");
        }
    }

    /// Into an empty dictionary, an image's terms get a table sized for all of them at once (no table of
    /// every smaller size left behind in the region); a later image's new terms still grow it by doubling.
    /// Every chain is whole after both.
    #[test]
    fn the_first_link_sizes_the_table_once_and_later_ones_double_it() {
        let dir = tempfile::tempdir().unwrap();
        let heap = heap_in(&dir);
        let ms = MergedSegment::create(heap.clone()).unwrap();
        let before = ms.region_bytes();
        let (one, two) = (image(1, 0, 20_000), image(2, 20_000, 20_000));
        let (v1, v2) = (ImageView::parse(&one).unwrap(), ImageView::parse(&two).unwrap());
        let n1 = v1.n_terms() as u64;
        assert!(n1 > 4 * INITIAL_CAP, "the image needs several doublings of the first table");
        ms.link(heap.alloc_copy(&one).unwrap(), &v1, &mut LinkOptions::default()).unwrap();
        let cap = (2 * n1).next_power_of_two();
        assert_eq!(ms.table().1, cap);
        assert_eq!(ms.term_count(), n1);
        // The region holds the first table, the final one, the nodes and the key records — no table between.
        let keys: u64 = (0..n1 as usize).map(|i| 8 + v1.key_at(i).unwrap().len() as u64).sum();
        let grown = ms.region_bytes() - before;
        let want = TABLE_HEADER + cap * SLOT + n1 * NODE + keys;
        assert!(grown <= want + 2 * MIN_CHUNK, "region grew by {grown} bytes for {want} of content");

        ms.link(heap.alloc_copy(&two).unwrap(), &v2, &mut LinkOptions::default()).unwrap();
        let n2 = v2.n_terms() as u64;
        let total = n1 + n2 - 1; // "shared" is in both
        assert_eq!(ms.term_count(), total);
        assert_eq!(ms.table().1, (2 * total).next_power_of_two(), "doubled as the new terms came");
        for (v, seg) in [(&v1, 1), (&v2, 2)] {
            let keys: Vec<Vec<u8>> = (0..v.n_terms()).map(|i| v.key_at(i).unwrap().to_vec()).collect();
            for (key, chain) in keys.iter().zip(chains(&ms, &keys)) {
                let want = if key.ends_with(b"shared") { vec![2, 1] } else { vec![seg] };
                assert_eq!(chain, want, "chain of {:?}", String::from_utf8_lossy(key));
            }
        }
    }

    /// A link cut short after some chain heads were published (out of space, a failed log write) must be
    /// finished by a redo: the redo skips the terms already linked, so no chain names a segment twice.
    #[test]
    fn a_link_cut_short_is_finished_by_a_redo() {
        let dir = tempfile::tempdir().unwrap();
        let heap = heap_in(&dir);
        let ms = MergedSegment::create(heap.clone()).unwrap();
        let (one, two) = (image(1, 0, 20), image(2, 20, 20));
        let (off1, off2) = (heap.alloc_copy(&one).unwrap(), heap.alloc_copy(&two).unwrap());
        let (v1, v2) = (ImageView::parse(&one).unwrap(), ImageView::parse(&two).unwrap());
        ms.link(off1, &v1, &mut LinkOptions::default()).unwrap();

        // Segment 2: the first batch of terms is published, then the link fails.
        let mut calls = 0;
        let mut fail_after_first = |_| {
            calls += 1;
            Err(MergeError::Log("simulated failure".into()))
        };
        let mut opts = LinkOptions {
            durable: true,
            progress_every: 4,
            progress: Some(&mut fail_after_first),
            ..Default::default()
        };
        assert!(ms.link(off2, &v2, &mut opts).is_err());
        assert_eq!(calls, 1);
        let keys: Vec<Vec<u8>> = (0..v2.n_terms()).map(|i| v2.key_at(i).unwrap().to_vec()).collect();
        let linked = chains(&ms, &keys).iter().filter(|c| c.first() == Some(&2)).count();
        assert_eq!(linked, 4, "one batch was published");

        // The redo links the rest, each term exactly once, newest first.
        ms.link(off2, &v2, &mut LinkOptions { durable: true, redo: true, ..Default::default() }).unwrap();
        for (key, chain) in keys.iter().zip(chains(&ms, &keys)) {
            let in_one = (0..v1.n_terms()).any(|i| v1.key_at(i).unwrap() == &key[..]);
            let want = if in_one { vec![2, 1] } else { vec![2] };
            assert_eq!(chain, want, "chain of {:?}", String::from_utf8_lossy(key));
        }
    }
}
