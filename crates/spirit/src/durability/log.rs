//! An append-only log of checksummed records in the persistent heap: the one structure behind the tLog, the
//! eLog and the mLog (SPIRIT §4.9).
//!
//! ```text
//! chunk header (64 B): "SPIRITLG" | version u32 | kind u32 | first lsn u64 | chunk len u64 | crc u32 (of the
//!                      above) | pad | next chunk u64 (at +56, an atomic word set when the log moves on)
//! record:              payload len u32 | crc u32 (of the log's kind, len, lsn, synced, payload; version-2
//!                      chunks: without the kind) | lsn u64 | synced u64 |
//!                      payload | pad to 8 B
//! ```
//! Records carry consecutive sequence numbers (LSNs). A scan accepts a record only if its checksum holds
//! *and* its LSN is the next one expected, and follows a chunk's `next` only if that chunk's header is valid
//! and starts at the expected LSN. So a torn record ends the log, and stale bytes (a recycled chunk, a tail
//! left behind by a crash) can never be mistaken for records: their LSNs are from the past. After recovery
//! the log continues in a new chunk (made by its first append), so whatever follows the valid end is never
//! scanned again once that chunk is linked. Stale bytes of *another* log (space reused for a chunk) can carry
//! higher LSNs: the kind in each record's checksum keeps them from passing for this log's.
//!
//! A torn tail and a corrupted record look alike — both fail their checksum — but only the last unsynced
//! records can be torn. Each record carries `synced`, the LSN below which every record was already durable
//! when it was appended; if any valid record past the end says the failing record was durable, the failure
//! is corruption, and the scan reports it (with the offset) instead of silently dropping what follows.
//!
//! Appends take a short lock and copy into the mapped heap; [`Log::sync`] is the group commit: one thread
//! persists everything appended so far (its own records and everyone else's) while later appends go on,
//! and every caller whose records that covered returns without a barrier of its own.

use crate::memory::{PersistentHeap, PersistentHeapError};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"SPIRITLG";
/// Version 3 binds each record's checksum to its log's kind; version 2 chunks (no kind in the checksum)
/// are still read.
const LOG_VERSION: u32 = 3;
const LOG_VERSION_UNBOUND: u32 = 2;
const CHUNK_HEADER: u64 = 64;
const NEXT_AT: u64 = 56;
const RECORD_HEADER: u64 = 24;
/// Largest record payload (a document of at most the largest accepted size, plus its id).
pub const MAX_RECORD: usize = 1 << 30;

/// Where a log continues: the chunk, the heap offset of the next record and its LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPos {
    pub chunk: u64,
    pub off: u64,
    pub lsn: u64,
}

/// Errors of a log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Heap(#[from] PersistentHeapError),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("log record of {0} bytes is larger than the limit")]
    TooLarge(usize),
    #[error("corrupt log chunk header at offset {0}")]
    Corrupt(u64),
    #[error("log record {lsn} at offset {at} is damaged, but later records show it was durable")]
    Damaged { at: u64, lsn: u64 },
}

struct Chunk {
    off: u64,
    len: u64,
    first_lsn: u64,
}

struct State {
    /// Chunks from the oldest still needed to the current one.
    chain: VecDeque<Chunk>,
    pos: u64,
    next_lsn: u64,
    /// Appended ranges not yet persisted, in order.
    dirty: Vec<(u64, u64)>,
    /// The next append starts a new chunk: set by a reopen, so that the bytes past the scanned end are never
    /// written (nor, once the new chunk is linked, read) again. Lazily, so that an index on a full disk
    /// opens (for reads) without room for a chunk.
    fresh: bool,
}

/// One log.
pub struct Log {
    heap: Arc<PersistentHeap>,
    kind: u32,
    chunk_bytes: u64,
    st: Mutex<State>,
    sync_lock: Mutex<()>,
    /// Every record with an LSN below this is durable.
    durable: AtomicU64,
    /// Recycled chunks of the standard size.
    free: Mutex<Vec<u64>>,
    /// Barriers taken by `sync`, and the nanoseconds spent in them.
    syncs: AtomicU64,
    sync_nanos: AtomicU64,
}

/// What a scan found: the valid records, the chunks they lie in (offset, length, first LSN), and where the
/// log ends.
pub struct Scan {
    pub records: Vec<Record>,
    pub chunks: Vec<(u64, u64, u64)>,
    pub end: LogPos,
}

/// A record read back by a scan.
#[derive(Debug, Clone)]
pub struct Record {
    pub lsn: u64,
    pub payload: Vec<u8>,
}

fn pad8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// A record's checksum: of its length, LSN, `synced` and payload, seeded with its log's kind (`None` in
/// version-2 chunks). With the kind in it, a stale record another log left in reused space — possibly of a
/// higher LSN — never passes for one of this log: not as the next record, and not as the later durable
/// record that makes a failing one "damaged" (which would refuse to open an intact index).
/// The payload is the concatenation of `parts` (appends hash a document where it is, without a copy).
fn record_crc(kind: Option<u32>, lsn: u64, synced: u64, parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    if let Some(k) = kind {
        h.update(&k.to_le_bytes());
    }
    let len: usize = parts.iter().map(|p| p.len()).sum();
    h.update(&(len as u32).to_le_bytes());
    h.update(&lsn.to_le_bytes());
    h.update(&synced.to_le_bytes());
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// The valid record at `pos` (ending at or before `limit`) of a chunk whose records' checksums are seeded
/// with `kind` (see [`record_crc`]): its LSN, `synced` and end offset.
fn record_at(heap: &PersistentHeap, kind: Option<u32>, pos: u64, limit: u64) -> Option<(u64, u64, u64)> {
    if pos + RECORD_HEADER > limit {
        return None;
    }
    let h = heap.slice(pos, RECORD_HEADER as usize);
    let plen = u32::from_le_bytes(h[0..4].try_into().unwrap()) as u64;
    let crc = u32::from_le_bytes(h[4..8].try_into().unwrap());
    let lsn = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let synced = u64::from_le_bytes(h[16..24].try_into().unwrap());
    let end = pos + RECORD_HEADER + pad8(plen);
    if end > limit || synced > lsn {
        return None;
    }
    (record_crc(kind, lsn, synced, &[heap.slice(pos + RECORD_HEADER, plen as usize)]) == crc)
        .then_some((lsn, synced, end))
}

impl Log {
    /// Starts a new, empty log whose first record gets `first_lsn`.
    pub fn create(
        heap: Arc<PersistentHeap>,
        kind: u32,
        chunk_bytes: usize,
        first_lsn: u64,
    ) -> Result<Log, LogError> {
        let log = Log {
            heap,
            kind,
            chunk_bytes: pad8(chunk_bytes.max(4096) as u64),
            st: Mutex::new(State {
                chain: VecDeque::new(),
                pos: 0,
                next_lsn: first_lsn,
                dirty: vec![],
                fresh: false,
            }),
            sync_lock: Mutex::new(()),
            durable: AtomicU64::new(first_lsn),
            free: Mutex::new(vec![]),
            syncs: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
        };
        {
            let mut st = log.st.lock();
            log.new_chunk(&mut st, 0)?;
        }
        Ok(log)
    }

    /// Scans the log from `from` and returns every valid record (see the module doc) and where the log ends.
    /// Read-only: safe on a heap that is merely being checked.
    pub fn scan(heap: &PersistentHeap, kind: u32, from: LogPos) -> Result<Scan, LogError> {
        let mut records = vec![];
        let mut chunks = vec![];
        let (mut chunk, mut lsn) = (from.chunk, from.lsn);
        let (mut len, first, mut seed) =
            Self::read_header(heap, kind, chunk).ok_or(LogError::Corrupt(chunk))?;
        chunks.push((chunk, len, first));
        let mut pos = from.off;
        if pos < chunk + CHUNK_HEADER || pos > chunk + len {
            return Err(LogError::Corrupt(chunk));
        }
        loop {
            // Records in this chunk.
            while let Some((rlsn, _, end)) = record_at(heap, seed, pos, chunk + len) {
                if rlsn != lsn {
                    break;
                }
                let payload = heap.slice(pos + RECORD_HEADER, (end - pos - RECORD_HEADER) as usize);
                let plen = u32::from_le_bytes(heap.slice(pos, 4).try_into().unwrap()) as usize;
                records.push(Record { lsn, payload: payload[..plen].to_vec() });
                lsn += 1;
                pos = end;
            }
            // Follow the chain only into a valid chunk that starts exactly here.
            let next = heap.atomic(chunk + NEXT_AT).load(Acquire);
            match (next != 0).then(|| Self::read_header(heap, kind, next)).flatten() {
                Some((nlen, nfirst, nseed)) if nfirst == lsn && next > 0 => {
                    chunk = next;
                    len = nlen;
                    seed = nseed;
                    chunks.push((chunk, len, nfirst));
                    pos = chunk + CHUNK_HEADER;
                }
                _ => {
                    // The end. Is it a torn tail, or a damaged record that a later record says was durable?
                    let mut at = pos;
                    while at + RECORD_HEADER <= chunk + len {
                        if let Some((rlsn, synced, _)) = record_at(heap, seed, at, chunk + len) {
                            if rlsn > lsn && synced > lsn {
                                return Err(LogError::Damaged { at: pos, lsn });
                            }
                        }
                        at += 8;
                    }
                    break;
                }
            }
        }
        Ok(Scan { records, chunks, end: LogPos { chunk, off: pos, lsn } })
    }

    /// Re-opens a log after [`scan`](Self::scan): appends continue after the scan's end, in a fresh chunk
    /// made by the first of them (so bytes after the valid end are never written, and once that chunk is
    /// linked never read, again; until then a scan from here meets them and ends the log there, as this
    /// reopen's scan did). Reopening allocates nothing: an index on a full disk opens. `chunks` are the scanned chunks; `free` the recycled
    /// chunks recorded at the last checkpoint (any that the chain now uses are dropped from it).
    pub fn reopen(
        heap: Arc<PersistentHeap>,
        kind: u32,
        chunk_bytes: usize,
        chunks: &[(u64, u64, u64)],
        end: LogPos,
        free: &[u64],
    ) -> Result<Log, LogError> {
        let chunk_bytes = pad8(chunk_bytes.max(4096) as u64);
        // Only chunks of today's standard size are reused (the size follows the budget, which may change).
        let free: Vec<u64> = free
            .iter()
            .copied()
            .filter(|f| chunks.iter().all(|c| c.0 != *f))
            .filter(|&f| {
                heap.try_slice(f + 24, 8)
                    .is_some_and(|b| u64::from_le_bytes(b.try_into().unwrap()) == chunk_bytes)
            })
            .collect();
        let log = Log {
            heap,
            kind,
            chunk_bytes,
            st: Mutex::new(State {
                chain: chunks.iter().map(|&(off, len, first_lsn)| Chunk { off, len, first_lsn }).collect(),
                pos: end.off,
                next_lsn: end.lsn,
                dirty: vec![],
                fresh: true,
            }),
            sync_lock: Mutex::new(()),
            durable: AtomicU64::new(end.lsn),
            free: Mutex::new(free),
            syncs: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
        };
        assert!(!chunks.is_empty(), "a scan finds at least the chunk it starts in");
        Ok(log)
    }

    /// A valid chunk header of this log's kind at `at`: the chunk's length, first LSN and record checksum
    /// seed (see [`record_crc`]).
    fn read_header(heap: &PersistentHeap, kind: u32, at: u64) -> Option<(u64, u64, Option<u32>)> {
        if !at.is_multiple_of(64) {
            return None;
        }
        let h = heap.try_slice(at, CHUNK_HEADER as usize)?;
        let crc = u32::from_le_bytes(h[40..44].try_into().unwrap());
        if &h[0..8] != MAGIC || crc32fast::hash(&h[..40]) != crc {
            return None;
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
        let k = u32::from_le_bytes(h[12..16].try_into().unwrap());
        let first = u64::from_le_bytes(h[16..24].try_into().unwrap());
        let len = u64::from_le_bytes(h[24..32].try_into().unwrap());
        let seed = match version {
            LOG_VERSION => Some(kind),
            LOG_VERSION_UNBOUND => None,
            _ => return None,
        };
        (k == kind && len >= CHUNK_HEADER && heap.try_slice(at, len as usize).is_some())
            .then_some((len, first, seed))
    }

    /// Moves the log to a new chunk big enough for a record of `need` bytes and links it from the current
    /// one. The new header is durable before the link, and the link before any record in the new chunk.
    fn new_chunk(&self, st: &mut State, need: u64) -> Result<(), LogError> {
        let len = self.chunk_bytes.max(pad8(CHUNK_HEADER + need));
        let recycled = if len == self.chunk_bytes { self.free.lock().pop() } else { None };
        let off = match recycled {
            Some(off) => off,
            None => self.heap.alloc(len as usize)?,
        };
        let mut h = [0u8; CHUNK_HEADER as usize];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.kind.to_le_bytes());
        h[16..24].copy_from_slice(&st.next_lsn.to_le_bytes());
        h[24..32].copy_from_slice(&len.to_le_bytes());
        let crc = crc32fast::hash(&h[..40]);
        h[40..44].copy_from_slice(&crc.to_le_bytes());
        self.heap.write(off, &h);
        self.heap.persist(off, CHUNK_HEADER as usize)?;
        if let Some(cur) = st.chain.back() {
            self.heap.atomic(cur.off + NEXT_AT).store(off, Release);
            self.heap.persist(cur.off + NEXT_AT, 8)?;
        }
        st.chain.push_back(Chunk { off, len, first_lsn: st.next_lsn });
        st.pos = off + CHUNK_HEADER;
        st.fresh = false;
        Ok(())
    }

    /// Appends one record; returns its LSN. Not durable until [`sync`](Self::sync) covers it.
    pub fn append(&self, payload: &[u8]) -> Result<u64, LogError> {
        self.append_parts(&[payload])
    }

    /// Appends one record whose payload is the concatenation of `parts` (saves a copy for documents).
    pub fn append_parts(&self, parts: &[&[u8]]) -> Result<u64, LogError> {
        let plen: usize = parts.iter().map(|p| p.len()).sum();
        if plen > MAX_RECORD {
            return Err(LogError::TooLarge(plen));
        }
        let need = RECORD_HEADER + pad8(plen as u64);
        let mut st = self.st.lock();
        let cur = st.chain.back().expect("a log always has a chunk");
        if st.fresh || st.pos + need > cur.off + cur.len {
            self.new_chunk(&mut st, need)?;
        }
        let lsn = st.next_lsn;
        // Everything below this LSN is durable now (read under the append lock: it only grows).
        let synced = self.durable.load(Acquire).min(lsn);
        // Seeded with this log's kind: appends only ever go to chunks this build made (a reopened log
        // continues in a new chunk, made by its first append), which are of the current version.
        let crc = record_crc(Some(self.kind), lsn, synced, parts);
        let mut head = [0u8; RECORD_HEADER as usize];
        head[0..4].copy_from_slice(&(plen as u32).to_le_bytes());
        head[4..8].copy_from_slice(&crc.to_le_bytes());
        head[8..16].copy_from_slice(&lsn.to_le_bytes());
        head[16..24].copy_from_slice(&synced.to_le_bytes());
        let start = st.pos;
        self.heap.write(start, &head);
        let mut at = start + RECORD_HEADER;
        for p in parts {
            self.heap.write(at, p);
            at += p.len() as u64;
        }
        let end = start + need;
        if end > at {
            self.heap.write(at, &[0u8; 8][..(end - at) as usize]);
        }
        match st.dirty.last_mut() {
            Some(r) if r.1 == start => r.1 = end,
            _ => st.dirty.push((start, end)),
        }
        st.pos = end;
        st.next_lsn = lsn + 1;
        Ok(lsn)
    }

    /// Group commit: returns once every record with an LSN up to `lsn` is durable.
    pub fn sync(&self, lsn: u64) -> Result<(), LogError> {
        if self.durable.load(Acquire) > lsn {
            return Ok(());
        }
        let _g = self.sync_lock.lock();
        if self.durable.load(Acquire) > lsn {
            return Ok(());
        }
        let (ranges, upto) = {
            let mut st = self.st.lock();
            (std::mem::take(&mut st.dirty), st.next_lsn)
        };
        let t0 = std::time::Instant::now();
        for (i, &(a, b)) in ranges.iter().enumerate() {
            if let Err(e) = self.heap.persist(a, (b - a) as usize) {
                // Not durable after all: the next sync tries these ranges again.
                self.st.lock().dirty.splice(0..0, ranges[i..].iter().copied());
                return Err(e.into());
            }
        }
        self.syncs.fetch_add(1, Relaxed);
        self.sync_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        self.durable.store(upto, Release);
        Ok(())
    }

    /// Barriers taken by [`sync`](Self::sync) so far, and the time spent in them.
    pub fn sync_stats(&self) -> (u64, std::time::Duration) {
        (self.syncs.load(Relaxed), std::time::Duration::from_nanos(self.sync_nanos.load(Relaxed)))
    }

    /// Makes everything appended so far durable.
    pub fn sync_all(&self) -> Result<u64, LogError> {
        let next = self.st.lock().next_lsn;
        if next > 0 {
            self.sync(next - 1)?;
        }
        Ok(next)
    }

    /// The LSN the next record will get.
    pub fn next_lsn(&self) -> u64 {
        self.st.lock().next_lsn
    }

    /// Where a scan must start to see every record from `lsn` on (for a checkpoint), and the chunks wholly
    /// before it, which the caller may [`recycle`](Self::recycle) once that checkpoint is durable.
    pub fn position_of(&self, lsn: u64) -> (LogPos, Vec<u64>) {
        let st = self.st.lock();
        let i = st.chain.iter().rposition(|c| c.first_lsn <= lsn).unwrap_or(0);
        let c = &st.chain[i];
        // Records are scanned forward from the chunk start; a scan from the chunk's first record simply
        // yields some records before `lsn`, which the reader skips by LSN.
        let pos = LogPos { chunk: c.off, off: c.off + CHUNK_HEADER, lsn: c.first_lsn };
        let before = st.chain.iter().take(i).filter(|c| c.len == self.chunk_bytes).map(|c| c.off).collect();
        (pos, before)
    }

    /// Returns chunks that a durable checkpoint no longer needs to the free list and forgets them.
    pub fn recycle(&self, chunks: &[u64]) {
        let mut st = self.st.lock();
        st.chain.retain(|c| !chunks.contains(&c.off));
        self.free.lock().extend_from_slice(chunks);
    }

    /// Recycled chunks (recorded in checkpoints).
    pub fn free_chunks(&self) -> Vec<u64> {
        self.free.lock().clone()
    }

    /// The heap extents this log owns: its chunks in use and its recycled chunks.
    pub fn extents(&self) -> Vec<(u64, u64)> {
        let st = self.st.lock();
        let mut v: Vec<(u64, u64)> = st.chain.iter().map(|c| (c.off, c.len)).collect();
        v.extend(self.free.lock().iter().map(|&f| (f, self.chunk_bytes)));
        v
    }

    /// Chunks in use and their bytes.
    pub fn chunk_stats(&self) -> (usize, u64) {
        let st = self.st.lock();
        (st.chain.len(), st.chain.iter().map(|c| c.len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{BarrierChoice, SimDomain};

    fn heap(dir: &std::path::Path, sim: Option<Arc<SimDomain>>) -> Arc<PersistentHeap> {
        let b = sim.map_or(BarrierChoice::Auto, BarrierChoice::Simulated);
        Arc::new(PersistentHeap::create(&dir.join("h"), 1 << 30, b).unwrap())
    }

    #[test]
    fn appends_scan_back_across_chunks_and_reopen_continues() {
        let dir = tempfile::tempdir().unwrap();
        let h = heap(dir.path(), None);
        let log = Log::create(h.clone(), 7, 4096, 100).unwrap();
        let start = log.position_of(100).0;
        let mut want = vec![];
        for i in 0..500u32 {
            let p = vec![i as u8; (i % 97) as usize];
            assert_eq!(log.append(&p).unwrap(), 100 + i as u64);
            want.push(p);
        }
        // A record bigger than a chunk gets a chunk of its own.
        want.push(vec![9u8; 10_000]);
        log.append(&want[500]).unwrap();
        log.sync_all().unwrap();
        assert!(log.chunk_stats().0 > 5);
        let Scan { records: recs, chunks, end } = Log::scan(&h, 7, start).unwrap();
        assert_eq!(recs.len(), want.len());
        for (r, w) in recs.iter().zip(&want) {
            assert_eq!(&r.payload, w);
        }
        assert_eq!(end.lsn, 601);
        // Another kind of log does not read these chunks.
        assert!(Log::scan(&h, 8, start).is_err());
        // Reopening allocates nothing (a full disk still opens); the first append starts the new chunk.
        let used = h.stats().used;
        let log2 = Log::reopen(h.clone(), 7, 4096, &chunks, end, &[]).unwrap();
        assert_eq!(h.stats().used, used);
        let (at_reopen, _) = log2.position_of(601);
        assert_eq!(Log::scan(&h, 7, at_reopen).unwrap().end.lsn, 601, "nothing after the end yet");
        assert_eq!(log2.append(b"more").unwrap(), 601);
        assert!(h.stats().used > used);
        log2.sync_all().unwrap();
        let recs = Log::scan(&h, 7, start).unwrap().records;
        assert_eq!(recs.len(), 502);
        assert_eq!(recs[501].payload, b"more");
        // A position taken before that append (in the old chunk) reads past the old end into the new chunk.
        let from_reopen = Log::scan(&h, 7, at_reopen).unwrap().records;
        assert_eq!(from_reopen.last().map(|r| (r.lsn, r.payload.as_slice())), Some((601, &b"more"[..])));
        // Recycling: chunks before a position go to the free list and are reused.
        let (pos, before) = log2.position_of(601);
        assert!(!before.is_empty());
        log2.recycle(&before);
        for _ in 0..200 {
            log2.append(&[1u8; 100]).unwrap();
        }
        log2.sync_all().unwrap();
        let Scan { records: recs, end, .. } = Log::scan(&h, 7, pos).unwrap();
        assert_eq!(recs.first().unwrap().lsn, 601);
        assert_eq!(end.lsn, 802);
    }

    #[test]
    fn only_synced_records_survive_a_simulated_crash_and_torn_records_end_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimDomain::new();
        let h = heap(dir.path(), Some(sim.clone()));
        let log = Log::create(h.clone(), 1, 4096, 0).unwrap();
        let start = log.position_of(0).0;
        let created = sim.barriers();
        let mut synced_at = vec![];
        for i in 0..120u32 {
            log.append(&i.to_le_bytes().repeat(1 + i as usize % 13)).unwrap();
            if i % 3 == 2 {
                log.sync(i as u64).unwrap();
                synced_at.push((sim.barriers(), i as u64 + 1));
            }
        }
        let total = sim.barriers();
        for n in created..=total {
            for tear in [None, Some(n as u64)] {
                let img = sim.image_after(n, tear);
                let p = dir.path().join(format!("img{n}"));
                std::fs::write(&p, &img).unwrap();
                let (h2, _) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
                let Scan { records: recs, end, .. } = Log::scan(&h2, 1, start).unwrap();
                let acked = synced_at.iter().filter(|(b, _)| *b <= n).map(|(_, l)| *l).max().unwrap_or(0);
                assert!(end.lsn >= acked, "barrier {n}: {} records survive, {acked} acknowledged", end.lsn);
                for (i, r) in recs.iter().enumerate() {
                    assert_eq!(r.lsn, i as u64);
                    assert_eq!(r.payload, (i as u32).to_le_bytes().repeat(1 + i % 13));
                }
                drop(h2);
                std::fs::remove_file(&p).unwrap();
            }
        }
    }

    #[test]
    fn a_damaged_durable_record_is_an_error_not_the_end_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let h = heap(dir.path(), None);
        let log = Log::create(h.clone(), 1, 1 << 16, 0).unwrap();
        let start = log.position_of(0).0;
        let mut offs = vec![];
        for i in 0..50u64 {
            offs.push(log.st.lock().pos);
            log.append(&i.to_le_bytes().repeat(4)).unwrap();
            log.sync(i).unwrap();
        }
        drop(log);
        // Damage record 20's payload: records 21.. were appended after it was durable.
        let p = dir.path().join("h");
        drop(h);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[offs[20] as usize + RECORD_HEADER as usize + 3] ^= 0x10;
        std::fs::write(&p, &bytes).unwrap();
        let (h2, _) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        match Log::scan(&h2, 1, start) {
            Err(LogError::Damaged { at, lsn }) => assert_eq!((at, lsn), (offs[20], 20)),
            Err(e) => panic!("unexpected error {e}"),
            Ok(s) => panic!("silently ended at {}", s.end.lsn),
        }
        drop(h2);
        // Damage the last record instead: nothing says it was durable, so it reads as a torn tail.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[offs[20] as usize + RECORD_HEADER as usize + 3] ^= 0x10;
        bytes[offs[49] as usize + RECORD_HEADER as usize + 3] ^= 0x10;
        std::fs::write(&p, &bytes).unwrap();
        let (h3, _) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        assert_eq!(Log::scan(&h3, 1, start).unwrap().end.lsn, 49);
    }

    /// Space one log leaves behind may become another log's chunk, whose tail past its records then holds
    /// the first log's stale records — of higher LSNs, saying they followed durable ones. They are not this
    /// log's (record checksums are bound to the kind): the scan ends at the last record, instead of calling
    /// it damaged and refusing to open the index. Version-2 chunks, whose checksums lack the kind, still read.
    #[test]
    fn another_logs_stale_records_never_pass_for_this_logs() {
        let dir = tempfile::tempdir().unwrap();
        let h = heap(dir.path(), None);
        let other = Log::create(h.clone(), 1, 1 << 16, 1000).unwrap();
        let mut stale = vec![];
        for i in 0..4u64 {
            let at = other.st.lock().pos;
            other.append(&i.to_le_bytes()).unwrap();
            stale.push(h.slice(at, (RECORD_HEADER + 8) as usize).to_vec());
        }
        other.sync_all().unwrap();
        let log = Log::create(h.clone(), 2, 1 << 16, 5).unwrap();
        let start = log.position_of(5).0;
        for i in 0..3u64 {
            log.append(&i.to_le_bytes()).unwrap();
        }
        log.sync_all().unwrap();
        // The other log's records (LSNs 1000.., each durable before the next) right past this log's end, and
        // some way further on.
        let end = log.st.lock().pos;
        for (k, r) in stale.iter().enumerate() {
            h.write(end + 64 + 512 * k as u64, r);
        }
        h.write(end, &stale[2]);
        let scan = Log::scan(&h, 2, start).unwrap();
        assert_eq!((scan.records.len(), scan.end.lsn, scan.end.off), (3, 8, end));
        // The same records read as the other log's own where they are.
        assert_eq!(Log::scan(&h, 1, other.position_of(1000).0).unwrap().records.len(), 4);

        // A version-2 chunk (kind-free checksums), as an older build wrote it, reads back.
        let off = h.alloc(4096).unwrap();
        let mut head = [0u8; CHUNK_HEADER as usize];
        head[0..8].copy_from_slice(MAGIC);
        head[8..12].copy_from_slice(&LOG_VERSION_UNBOUND.to_le_bytes());
        head[12..16].copy_from_slice(&3u32.to_le_bytes());
        head[16..24].copy_from_slice(&40u64.to_le_bytes());
        head[24..32].copy_from_slice(&4096u64.to_le_bytes());
        let crc = crc32fast::hash(&head[..40]);
        head[40..44].copy_from_slice(&crc.to_le_bytes());
        h.write(off, &head);
        let payload = 7u64.to_le_bytes();
        let mut rec = vec![0u8; RECORD_HEADER as usize];
        rec[0..4].copy_from_slice(&8u32.to_le_bytes());
        rec[4..8].copy_from_slice(&record_crc(None, 40, 40, &[&payload]).to_le_bytes());
        rec[8..16].copy_from_slice(&40u64.to_le_bytes());
        rec[16..24].copy_from_slice(&40u64.to_le_bytes());
        rec.extend_from_slice(&payload);
        h.write(off + CHUNK_HEADER, &rec);
        let v2 = Log::scan(&h, 3, LogPos { chunk: off, off: off + CHUNK_HEADER, lsn: 40 }).unwrap();
        assert_eq!((v2.records.len(), v2.records[0].payload.as_slice(), v2.end.lsn), (1, &payload[..], 41));
    }
}
