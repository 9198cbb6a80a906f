//! The persistent heap: one file, mapped shared into a reserved address range, grown by whole chunks.
//!
//! Layout: a 4 KiB superblock (magic, format version, and two slots for the recovery record pointing at the
//! manifest) followed by allocations handed out from free space (module `space`: extents that compaction,
//! retention and checkpoints gave back) or, when none fits, by a bump allocator at the head. Space is fallocated when the file grows,
//! so a full disk is an error at growth time, never a `SIGBUS` on a later store. The file is locked with
//! `flock` so two processes can never map the same heap.
//!
//! The recovery record is written alternately into two 64-byte slots, each with a sequence number and a
//! checksum: a torn write damages only the slot being written, and open takes the valid slot with the highest
//! sequence. In crash-safe mode the record also bounds the allocator: `heap_end` is a durable *reservation*
//! the head never passes without first persisting a larger one, so after a crash the allocator resumes above
//! every byte that anything durable may point to.

use super::mapping::{atomic_u64, page_size, Mapping};
use super::persist::{flush_range, Barrier, FlushKind, SimDomain};
use super::space::{round, Space};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes reserved at the start of the heap for the superblock.
pub const SUPERBLOCK_BYTES: usize = 4096;
const MAGIC: &[u8; 8] = b"SPIRITPH";
/// Version of the persistent format. Bump on any incompatible change of any persistent structure.
pub const FORMAT_VERSION: u32 = 4;
/// Offsets of the two recovery-record slots.
const SLOTS: [usize; 2] = [64, 128];
const SLOT_BYTES: usize = 64;
const ALIGN: u64 = 64;
const MIN_CHUNK: usize = 1 << 20;
const MAX_CHUNK: usize = 256 << 20;
/// How far past the head fresh file space is faulted in ahead of its writers (see [`PersistentHeap::alloc`]).
const PREFAULT_AHEAD: usize = 32 << 20;
/// Largest `pwrite` of [`PersistentHeap::write_gathered`]. The page cache backs a write with folios up to
/// its size, and a 2 MiB folio is a huge page: under the benchmark VM's hypervisor one whose memory the
/// guest freed seconds before costs ~10 ms to back (see `mapping::HUGE_STEP_SLOW`). 512 MiB written
/// into a fallocated file after 20 s idle: 5.3 s in 2 or 4 MiB writes, 0.09 s in 1 MiB ones (0.13 s in
/// 256 KiB); a bulk load's 63 image writes took 1.04 s of system time (strace).
const WRITE_CHUNK: usize = 1 << 20;
/// Smallest step of a durable allocation reservation (crash-safe mode).
const RESERVE_STEP: u64 = 4 << 20;

/// What the superblock says about the last session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryRecord {
    /// `true` if the heap was closed cleanly (graceful shutdown).
    pub clean: bool,
    /// End of the allocated heap (clean close) or of the durable allocation reservation (crash-safe).
    pub heap_end: u64,
    pub manifest_off: u64,
    pub manifest_len: u64,
    pub manifest_crc: u32,
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PersistentStats {
    pub budget: u64,
    /// Bytes in use: allocated and not given back (including the superblock).
    pub used: u64,
    /// Bytes given back and reusable, and bytes given back that wait for a durable checkpoint.
    pub free: u64,
    pub pending: u64,
    /// Number of free extents (fragmentation).
    pub free_extents: usize,
    /// End of the highest allocation (the file holds at least this much).
    pub head: u64,
    /// Current file length.
    pub file_len: u64,
    /// The persistence barrier in use: `msync`, `dax (...)` or `simulated`.
    pub barrier: &'static str,
}

/// The persistent heap of one shard.
pub struct PersistentHeap {
    path: PathBuf,
    file: File,
    map: Arc<Mapping>,
    mapped: AtomicUsize,
    /// Where the background faulting-in of fresh file space has been asked to reach (see `prefault_ahead`).
    prefaulted: AtomicUsize,
    /// Its threads, stopped and joined when the heap is dropped: a live mapping of the file holds the file's
    /// `flock`, which the next open of the heap must find released.
    prefaults: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Set when the owner begins to close ([`PersistentHeap::begin_close`]) or the heap is dropped: the
    /// prefault threads stop at their next step, none starts, and persistence barriers release the pages
    /// they write back ([`Mapping::sync_released`]).
    closing: Arc<std::sync::atomic::AtomicBool>,
    head: Mutex<u64>,
    budget: u64,
    barrier: Barrier,
    /// The last recovery record written (its sequence number picks the next slot).
    record: Mutex<(u64, RecoveryRecord)>,
    /// Crash-safe mode: allocations beyond the record's `heap_end` first persist a larger reservation.
    reserving: std::sync::atomic::AtomicBool,
    /// Free space below the head.
    space: Mutex<Space>,
}

/// Bytes to write, as consecutive slices handed one by one to the callback it is given
/// ([`PersistentHeap::write_gathered`]).
pub type Pieces<'a> = dyn Fn(&mut dyn FnMut(&[u8])) + 'a;

/// How the bytes of an allocation will be written ([`PersistentHeap::alloc_via`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVia {
    /// Stores through the mapping ([`PersistentHeap::write`], atomics, in-place builders).
    Mapping,
    /// [`PersistentHeap::write_gathered`] (the file, `pwrite`, under `msync` persistence).
    File,
}

/// Copies `pieces` back to back into `out`, which they must fill exactly.
pub fn gather_into(out: &mut [u8], pieces: &Pieces) {
    let mut at = 0;
    pieces(&mut |b| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    });
    assert_eq!(at, out.len(), "the pieces fill the range");
}

/// How a heap should make ranges durable.
#[derive(Clone, Default)]
pub enum BarrierChoice {
    /// `MAP_SYNC` + cache-line flushes where the file system is DAX, `msync` elsewhere.
    #[default]
    Auto,
    /// The simulated persistence domain (crash tests).
    Simulated(Arc<SimDomain>),
}

impl std::fmt::Debug for BarrierChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BarrierChoice::Auto => write!(f, "auto"),
            BarrierChoice::Simulated(_) => write!(f, "simulated"),
        }
    }
}

/// Errors specific to opening a heap file; the caller wraps them with the path.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a spirit heap file (bad magic)")]
    BadMagic,
    #[error("heap format version {found} is not supported (this build reads version {FORMAT_VERSION})")]
    Version { found: u32 },
    #[error("superblock checksum mismatch in both recovery-record slots (offsets 64 and 128)")]
    SuperblockChecksum,
    #[error("file is truncated: {len} bytes, but the superblock records data up to byte {needed}")]
    Truncated { len: u64, needed: u64 },
    #[error("the data directory is in use by another process")]
    Locked,
    #[error("persistent budget of {budget} bytes exhausted (need {need} more bytes)")]
    Budget { budget: u64, need: u64 },
}

impl PersistentHeap {
    /// Creates a new heap file (fails if it exists).
    pub fn create(path: &Path, budget: u64, barrier: BarrierChoice) -> Result<PersistentHeap, HeapError> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        lock(&file)?;
        file.set_len(SUPERBLOCK_BYTES as u64)?;
        // SAFETY: posix_fallocate on our own open descriptor; no memory is involved.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, SUPERBLOCK_BYTES as libc::off_t) };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            return Err(HeapError::Io(io::Error::from_raw_os_error(rc)));
        }
        // Mapping the first page decides the barrier (MAP_SYNC is granted for all of the file or none).
        let heap = Self::map(path, file, budget, SUPERBLOCK_BYTES, barrier)?;
        if let Barrier::Sim(d) = &heap.barrier {
            d.record_resize(SUPERBLOCK_BYTES as u64);
        }
        *heap.head.lock() = SUPERBLOCK_BYTES as u64;
        let mut sb = [0u8; 12];
        sb[..8].copy_from_slice(MAGIC);
        sb[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        heap.write(0, &sb);
        heap.persist(0, 12)?;
        heap.write_record(&RecoveryRecord {
            clean: false,
            heap_end: SUPERBLOCK_BYTES as u64,
            manifest_off: 0,
            manifest_len: 0,
            manifest_crc: 0,
        })?;
        Ok(heap)
    }

    /// Opens an existing heap file and returns it with its recovery record. The allocation head is placed
    /// after the recorded `heap_end`.
    pub fn open(
        path: &Path,
        budget: u64,
        barrier: BarrierChoice,
    ) -> Result<(PersistentHeap, RecoveryRecord), HeapError> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        lock(&file)?;
        let len = file.metadata()?.len();
        if len < SUPERBLOCK_BYTES as u64 {
            return Err(HeapError::Truncated { len, needed: SUPERBLOCK_BYTES as u64 });
        }
        let heap = Self::map(path, file, budget, len as usize, barrier)?;
        let sb = heap.slice(0, SUPERBLOCK_BYTES);
        if &sb[..8] != MAGIC {
            return Err(HeapError::BadMagic);
        }
        let version = u32::from_le_bytes(sb[8..12].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(HeapError::Version { found: version });
        }
        let slot = |at: usize| -> Option<(u64, RecoveryRecord)> {
            let b = &sb[at..at + SLOT_BYTES];
            let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
            let crc = u32::from_le_bytes(b[60..64].try_into().unwrap());
            (crc32fast::hash(&b[..60]) == crc && u64_at(0) != 0).then(|| {
                (
                    u64_at(0),
                    RecoveryRecord {
                        clean: u64_at(8) == 0,
                        heap_end: u64_at(16),
                        manifest_off: u64_at(24),
                        manifest_len: u64_at(32),
                        manifest_crc: u32::from_le_bytes(b[40..44].try_into().unwrap()),
                    },
                )
            })
        };
        let (seq, rec) = match (slot(SLOTS[0]), slot(SLOTS[1])) {
            (Some(a), Some(b)) => {
                if a.0 > b.0 {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return Err(HeapError::SuperblockChecksum),
        };
        *heap.record.lock() = (seq, rec);
        // A crash-safe reservation may lie beyond the file; the manifest may not.
        let needed = if rec.clean { rec.heap_end } else { 0 }.max(rec.manifest_off + rec.manifest_len);
        if needed > len {
            return Err(HeapError::Truncated { len, needed });
        }
        *heap.head.lock() = rec.heap_end.max(SUPERBLOCK_BYTES as u64);
        Ok((heap, rec))
    }

    fn map(
        path: &Path,
        file: File,
        budget: u64,
        existing: usize,
        barrier: BarrierChoice,
    ) -> Result<PersistentHeap, HeapError> {
        let page = page_size();
        let reserve = (budget as usize).max(existing).max(MIN_CHUNK).div_ceil(page) * page;
        let map = Mapping::reserve(reserve)?;
        let mut barrier = match barrier {
            BarrierChoice::Simulated(d) => Barrier::Sim(d),
            BarrierChoice::Auto => Barrier::Msync,
        };
        if existing > 0 {
            let whole = existing / page * page;
            if whole != existing {
                file.set_len(existing.div_ceil(page) as u64 * page as u64)?;
            }
            if matches!(barrier, Barrier::Msync)
                && FlushKind::detect() != FlushKind::None
                && Mapping::supports_map_sync(file.as_raw_fd())
            {
                barrier = Barrier::Dax(FlushKind::detect());
            }
            let dax = matches!(barrier, Barrier::Dax(_));
            map.map_file_at(file.as_raw_fd(), 0, existing.div_ceil(page) * page, dax)?;
        }
        Ok(PersistentHeap {
            path: path.to_path_buf(),
            file,
            map: Arc::new(map),
            mapped: AtomicUsize::new(existing.div_ceil(page) * page),
            prefaulted: AtomicUsize::new(0),
            prefaults: Mutex::new(Vec::new()),
            closing: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            head: Mutex::new(SUPERBLOCK_BYTES as u64),
            budget,
            barrier,
            record: Mutex::new((
                0,
                RecoveryRecord {
                    clean: false,
                    heap_end: 0,
                    manifest_off: 0,
                    manifest_len: 0,
                    manifest_crc: 0,
                },
            )),
            reserving: std::sync::atomic::AtomicBool::new(false),
            space: Mutex::new(Space::default()),
        })
    }

    /// The barrier this heap uses (`msync`, `dax (clwb)`, `simulated`, ...).
    pub fn barrier_name(&self) -> &'static str {
        match &self.barrier {
            Barrier::Msync => "msync",
            Barrier::Dax(FlushKind::Clwb) => "dax (clwb)",
            Barrier::Dax(FlushKind::Clflushopt) => "dax (clflushopt)",
            Barrier::Dax(_) => "dax (clflush)",
            Barrier::Sim(_) => "simulated",
        }
    }

    /// Crash-safe mode: from now on every allocation lies inside a durable reservation (see the module doc).
    pub fn enable_reservations(&self) {
        self.reserving.store(true, Ordering::Release);
        self.space.lock().set_gated(true);
    }

    /// Learns the free space: everything in `[SUPERBLOCK_BYTES, head)` outside `live` (every extent the
    /// shard's current state refers to). Call once, after open and recovery, before anything is released;
    /// until then allocation is bump-only.
    pub fn rebuild_free_space(&self, live: &mut [(u64, u64)]) {
        let mut head = self.head.lock();
        // Nothing lies past the last live extent: the bump pointer moves back to it. After a crash `head` is
        // the crash-safe reservation, which may lie beyond the end of the file; free space there would hand
        // out ranges that are not backed by the file (and so never durable).
        let live_end = live.iter().map(|&(o, l)| o + l).max().unwrap_or(0).max(SUPERBLOCK_BYTES as u64);
        *head = (*head).min(live_end);
        self.space.lock().rebuild(SUPERBLOCK_BYTES as u64, *head, live);
    }

    /// Gives back an extent nothing refers to any more (in crash-safe mode it is reused only after the next
    /// checkpoint is durable).
    pub fn release(&self, off: u64, len: u64) {
        self.space.lock().release(off, len);
    }

    /// A checkpoint starts: returns the ticket to pass to [`checkpoint_durable`](Self::checkpoint_durable).
    pub fn checkpoint_started(&self) -> u64 {
        self.space.lock().checkpoint_started()
    }

    /// The checkpoint with `ticket` is durable: extents released before it started become reusable.
    pub fn checkpoint_durable(&self, ticket: u64) {
        self.space.lock().checkpoint_durable(ticket);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records the file's new name after a rename (error messages name the file).
    pub fn set_path(&mut self, path: &Path) {
        self.path = path.to_path_buf();
    }

    /// Lengthens the file from `mapped` to `new_len` bytes with the space allocated (so a full disk is an
    /// error here, not a `SIGBUS` on a later store); on failure the length is rolled back.
    fn extend_file(&self, mapped: usize, new_len: usize) -> Result<(), HeapError> {
        if let Err(e) = self.file.set_len(new_len as u64) {
            let _ = self.file.set_len(mapped as u64);
            return Err(e.into());
        }
        // SAFETY: posix_fallocate on our own open descriptor; no memory is involved.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                mapped as libc::off_t,
                (new_len - mapped) as libc::off_t,
            )
        };
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            // Roll back the length so the file does not claim space it does not have.
            let _ = self.file.set_len(mapped as u64);
            return Err(HeapError::Io(io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    /// Makes sure `[0, end)` is backed by the file and mapped.
    fn grow_to(&self, end: u64) -> Result<(), HeapError> {
        let mapped = self.mapped.load(Ordering::Acquire);
        if end as usize <= mapped {
            return Ok(());
        }
        if end > self.budget.max(SUPERBLOCK_BYTES as u64) || end as usize > self.map.len() {
            return Err(HeapError::Budget { budget: self.budget, need: end - mapped as u64 });
        }
        let page = page_size();
        let chunk = (mapped.clamp(MIN_CHUNK, MAX_CHUNK)).max(end as usize - mapped);
        let new_len = ((mapped + chunk).div_ceil(page) * page).min(self.map.len()).max(end as usize);
        let new_len = new_len.div_ceil(page) * page;
        let new_len = match self.extend_file(mapped, new_len) {
            Ok(()) => new_len,
            Err(e) => {
                // Growth goes by chunks (fewer mapping calls); a nearly full disk may still hold what is
                // needed now — the last segment, or the manifest of a close — so try exactly that.
                let exact = (end as usize).div_ceil(page) * page;
                if exact >= new_len {
                    return Err(e);
                }
                self.extend_file(mapped, exact)?;
                exact
            }
        };
        let dax = matches!(self.barrier, Barrier::Dax(_));
        self.map.map_file_at(self.file.as_raw_fd(), mapped, new_len - mapped, dax)?;
        if let Barrier::Sim(d) = &self.barrier {
            d.record_resize(new_len as u64);
        }
        self.mapped.store(new_len, Ordering::Release);
        Ok(())
    }

    /// Allocates `len` bytes (64-byte aligned) and returns their offset. The range is zero (fresh file space)
    /// or stale data; the caller fills it completely through [`write`](Self::write) before publishing the
    /// offset anywhere a reader can find it. For bytes stored through the mapping ([`WriteVia::Mapping`]).
    pub fn alloc(&self, len: usize) -> Result<u64, HeapError> {
        self.alloc_via(len, WriteVia::Mapping)
    }

    /// [`alloc`](Self::alloc) for a range written as `via` says: only stores through the mapping have fresh
    /// file space ahead of the head faulted in ([`prefault_ahead`](Self::prefault_ahead)); a range that
    /// [`write_gathered`](Self::write_gathered) fills through the file would only have its page-cache pages
    /// zeroed by the prefault thread before the copy overwrites them.
    pub fn alloc_via(&self, len: usize, via: WriteVia) -> Result<u64, HeapError> {
        let mut head = self.head.lock();
        if let Some(off) = self.space.lock().take(len as u64) {
            return Ok(off);
        }
        let off = head.div_ceil(ALIGN) * ALIGN;
        let end = off + round(len.max(1) as u64);
        self.grow_to(end)?;
        if self.reserving.load(Ordering::Acquire) {
            let mut r = self.record.lock();
            if end > r.1.heap_end {
                // The heap is in use: even after a clean close, the record is no longer a clean one (a clean
                // record's end must lie inside the file; a reservation may not).
                let mut rec = RecoveryRecord { clean: false, ..r.1 };
                rec.heap_end = end + RESERVE_STEP.max(end / 16);
                self.write_record_locked(&mut r, &rec)?;
            }
        }
        *head = end;
        if via == WriteVia::Mapping {
            self.prefault_ahead(end as usize);
        }
        Ok(off)
    }

    /// Fresh file space just past the head is about to be stored to through the mapping at full speed (the
    /// merged dictionary's tables, nodes and keys, allocated with [`WriteVia::Mapping`]; images go through
    /// the file and ask for nothing); the first touch of each of its pages is a fault in which the kernel
    /// zeroes a page-cache page — the single-threaded end of a bulk load spent about half its time there
    /// (merger and flusher, perf). So the next [`PREFAULT_AHEAD`] bytes are faulted in on a background thread
    /// ([`Mapping::populate_in_background`]; contents unchanged), asked for in steps of half that. Not
    /// further: a populated page is dirty, so zeros the writeback also writes. Not on DAX (the stores go to
    /// the device) nor under the simulated persistence domain (crash tests keep their own page model).
    fn prefault_ahead(&self, head: usize) {
        if !matches!(self.barrier, Barrier::Msync) || self.closing.load(Ordering::Relaxed) {
            return;
        }
        let from = self.prefaulted.load(Ordering::Relaxed).max(head);
        let to = (head + PREFAULT_AHEAD).min(self.mapped.load(Ordering::Acquire));
        if to >= from + PREFAULT_AHEAD / 2 {
            self.prefaulted.store(to, Ordering::Relaxed);
            let (len, closing) = (to - from, self.closing.clone());
            let reach = move || (!closing.load(Ordering::Relaxed)).then_some(len);
            let mut threads = self.prefaults.lock();
            threads.retain(|t| !t.is_finished());
            threads.extend(Mapping::populate_in_background(&self.map, from, len, reach));
        }
    }

    /// Allocates and fills in one step; returns the offset.
    pub fn alloc_copy(&self, bytes: &[u8]) -> Result<u64, HeapError> {
        let off = self.alloc(bytes.len())?;
        self.write(off, bytes);
        Ok(off)
    }

    /// Writes into an allocated, not yet published range.
    pub fn write(&self, off: u64, bytes: &[u8]) {
        assert!(off + bytes.len() as u64 <= *self.head.lock(), "write beyond the allocated heap");
        assert!(off as usize + bytes.len() <= self.mapped.load(Ordering::Acquire), "write beyond the file");
        // SAFETY: the range is allocated (asserted) and mapped (alloc grew the mapping); the engine writes
        // only ranges it allocated and has not yet published, so no reader can observe it concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.map.as_ptr().add(off as usize), bytes.len());
        }
    }

    /// Lets `fill` write an allocated, not yet published range of `len` bytes in place (a large structure
    /// written where it lives, with no buffer to copy it from).
    pub fn write_with(&self, off: u64, len: usize, fill: impl FnOnce(&mut [u8])) {
        assert!(off + len as u64 <= *self.head.lock(), "write beyond the allocated heap");
        assert!(off as usize + len <= self.mapped.load(Ordering::Acquire), "write beyond the file");
        // SAFETY: as in `write`: the range is allocated and mapped (asserted), and unpublished, so nothing
        // else reads or writes it while `fill` holds the only reference.
        let out = unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(off as usize), len) };
        fill(out);
    }

    /// Writes an allocated, not yet published range of `len` bytes from the consecutive slices `bytes`
    /// hands its callback. With `msync` persistence through the file (`pwrite`), not the mapping: the kernel
    /// copies whole pages straight into the page cache, where the first store through the mapping to a page
    /// of fresh file space makes it read that page as zeros first (a fault and a page zeroed: 1.7% of a 2-thread
    /// enwiki bulk load's samples in the flusher); allocate the range with [`WriteVia::File`], so no
    /// prefault thread zeroes its pages first either. The mapping sees the same pages, and a later
    /// [`persist`](Self::persist) (`msync`) writes them back like any other. On DAX and under the simulated
    /// persistence domain the bytes go through the mapping. An I/O error leaves the range unpublished; the
    /// caller releases it.
    pub fn write_gathered(&self, off: u64, len: usize, bytes: &Pieces) -> io::Result<()> {
        if !matches!(self.barrier, Barrier::Msync) {
            self.write_with(off, len, |out| gather_into(out, bytes));
            return Ok(());
        }
        assert!(off + len as u64 <= *self.head.lock(), "write beyond the allocated heap");
        assert!(off as usize + len <= self.mapped.load(Ordering::Acquire), "write beyond the file");
        // Pages of the range the mapping has touched (fresh space the prefault thread reached, reused free
        // space) would otherwise be write-protected one TLB flush at a time — an IPI whenever another thread
        // runs — when the image is written back (`Mapping::sync_released`); the range is not published yet,
        // and a reader's later fault finds the bytes in the page cache. Whole pages of the range only: the
        // first and last may hold a neighbour that another thread stores to through the mapping meanwhile.
        let page = page_size() as u64;
        let (first, end) = (off.div_ceil(page) * page, (off + len as u64) / page * page);
        if end > first {
            // SAFETY: under `msync` persistence (checked above) the mapped heap is a shared, non-`MAP_SYNC`
            // file mapping (`grow_to`), and the range lies inside it (asserted above).
            unsafe { self.map.release_file_pages(first as usize, (end - first) as usize) };
        }
        use std::os::unix::fs::FileExt;
        // Small pieces (headers, padding) are gathered so each write covers whole pages where it can.
        let (mut at, mut small, mut result) = (off, Vec::with_capacity(4096), Ok(()));
        bytes(&mut |b| {
            if result.is_err() {
                return;
            }
            if b.len() < 4096 {
                small.extend_from_slice(b);
                return;
            }
            if !small.is_empty() {
                result = self.file.write_all_at(&small, at);
                at += small.len() as u64;
                small.clear();
            }
            for chunk in b.chunks(WRITE_CHUNK) {
                if result.is_ok() {
                    result = self.file.write_all_at(chunk, at);
                    at += chunk.len() as u64;
                }
            }
        });
        result?;
        self.file.write_all_at(&small, at)?;
        at += small.len() as u64;
        assert_eq!(at, off + len as u64, "the pieces fill the range");
        Ok(())
    }

    /// Asks the kernel to start writing `[off, off + len)` back now, without waiting for it
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): a large image written through the file is otherwise
    /// written back only by the next [`persist`](Self::persist) — a bulk load's close then waited for every
    /// image at once (~250 MB, 0.1 s of its 0.8 s after the last document) — or by the kernel's dirty-page
    /// flusher, whenever its thresholds say. For bulk loads only: real-time ingest, whose images are
    /// persisted lazily, paid for the I/O during the ingest instead (static enwiki ingest ~8% slower).
    /// Advisory: a kernel or file system without it changes nothing.
    #[cfg(target_os = "linux")]
    pub fn start_writeback(&self, off: u64, len: usize) {
        // SAFETY: sync_file_range on our own open descriptor, within the file (asserted by the caller's
        // write); no memory is involved.
        let _ = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                off as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
    }

    #[cfg(not(target_os = "linux"))]
    pub fn start_writeback(&self, _off: u64, _len: usize) {}

    /// A published range, read-only.
    pub fn slice(&self, off: u64, len: usize) -> &[u8] {
        assert!(off as usize + len <= self.mapped.load(Ordering::Acquire), "read beyond the mapped heap");
        // SAFETY: in bounds of the mapping (asserted); published ranges are immutable.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off as usize), len) }
    }

    /// A published range, or `None` if it lies outside the mapped heap (a corrupt offset read from disk).
    pub fn try_slice(&self, off: u64, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len as u64)?;
        (end <= self.mapped.load(Ordering::Acquire) as u64).then(|| self.slice(off, len))
    }

    /// The heap offset of a slice that [`slice`](Self::slice) handed out (`None` for any other memory).
    pub fn offset_of(&self, s: &[u8]) -> Option<u64> {
        let (at, base) = (s.as_ptr() as usize, self.map.as_ptr() as usize);
        let off = at.checked_sub(base)?;
        (off + s.len() <= self.mapped.load(Ordering::Acquire)).then_some(off as u64)
    }

    /// An 8-byte word that changes while readers look at it (chain heads, table slots, delete bitmaps).
    pub fn atomic(&self, off: u64) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off as usize + 8 <= self.mapped.load(Ordering::Acquire),
            "bad atomic offset"
        );
        // SAFETY: aligned and in bounds (asserted); words accessed through this view are only ever
        // accessed through it.
        unsafe { atomic_u64(self.map.as_ptr().add(off as usize)) }
    }

    /// The persistence barrier: returns once `[off, off+len)` is durable.
    pub fn persist(&self, off: u64, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        assert!(off as usize + len <= self.mapped.load(Ordering::Acquire), "persist beyond the mapped heap");
        match &self.barrier {
            // SAFETY: under `msync` persistence the whole mapped heap is a shared, non-`MAP_SYNC` file mapping
            // (`grow_to`), and the range lies inside it (asserted above).
            Barrier::Msync if self.closing.load(Ordering::Relaxed) => unsafe {
                self.map.sync_released(off as usize, len)
            },
            Barrier::Msync => self.map.sync(off as usize, len),
            Barrier::Dax(kind) => {
                // SAFETY: the range is inside the mapping (asserted above).
                if unsafe { flush_range(*kind, self.map.as_ptr().add(off as usize), len) } {
                    Ok(())
                } else {
                    self.map.sync(off as usize, len)
                }
            }
            Barrier::Sim(d) => {
                d.record_persist(off, self.slice(off, len));
                Ok(())
            }
        }
    }

    /// Persists many small ranges `(start, end)` with few barriers: ranges closer than a page are coalesced
    /// (persisting bytes in between is harmless: they hold what they hold now).
    pub fn persist_ranges(&self, ranges: &mut [(u64, u64)]) -> io::Result<()> {
        ranges.sort_unstable();
        let gap = page_size() as u64;
        let mut cur: Option<(u64, u64)> = None;
        for &(a, b) in ranges.iter() {
            cur = match cur {
                Some((ca, cb)) if a <= cb + gap => Some((ca, cb.max(b))),
                Some((ca, cb)) => {
                    self.persist(ca, (cb - ca) as usize)?;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((a, b)) = cur {
            self.persist(a, (b - a) as usize)?;
        }
        Ok(())
    }

    /// The owner is closing: little of what it still writes is touched again. Fresh file space is no longer
    /// faulted in ahead (the prefault threads stop; at the end of a bulk load they zeroed up to 32 MiB per
    /// shard that only the close's final truncation saw), and each persistence barrier releases the pages
    /// it writes back from this process's page tables first (see [`Mapping::sync_released`]). Everything
    /// stays correct if the heap is used on (a failed close): a released page touched again faults back in
    /// from the page cache, at the cost of that fault.
    pub fn begin_close(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// Persists everything allocated so far.
    pub fn persist_all(&self) -> io::Result<()> {
        let end = *self.head.lock();
        self.persist(0, end as usize)
    }

    pub fn stats(&self) -> PersistentStats {
        let head = *self.head.lock();
        let space = self.space.lock();
        let ((free, pending), free_extents) = (space.bytes(), space.extents());
        drop(space);
        PersistentStats {
            budget: self.budget,
            used: head - free - pending,
            free,
            pending,
            free_extents,
            head,
            file_len: self.mapped.load(Ordering::Acquire) as u64,
            barrier: self.barrier_name(),
        }
    }

    /// Writes the recovery record into the next superblock slot and persists it (the commit point of a close
    /// or a checkpoint). In crash-safe mode `heap_end` never moves below the current reservation.
    pub fn write_record(&self, rec: &RecoveryRecord) -> io::Result<()> {
        let mut r = self.record.lock();
        let mut rec = *rec;
        // A checkpoint keeps the reservation; a clean close records the true end (nothing allocates after it).
        if self.reserving.load(Ordering::Acquire) && !rec.clean {
            rec.heap_end = rec.heap_end.max(r.1.heap_end);
        }
        self.write_record_locked(&mut r, &rec)
    }

    /// The recovery record last written or read.
    pub fn record(&self) -> RecoveryRecord {
        self.record.lock().1
    }

    fn write_record_locked(&self, r: &mut (u64, RecoveryRecord), rec: &RecoveryRecord) -> io::Result<()> {
        let seq = r.0 + 1;
        let mut b = [0u8; SLOT_BYTES];
        b[0..8].copy_from_slice(&seq.to_le_bytes());
        b[8..16].copy_from_slice(&(if rec.clean { 0u64 } else { 1 }).to_le_bytes());
        b[16..24].copy_from_slice(&rec.heap_end.to_le_bytes());
        b[24..32].copy_from_slice(&rec.manifest_off.to_le_bytes());
        b[32..40].copy_from_slice(&rec.manifest_len.to_le_bytes());
        b[40..44].copy_from_slice(&rec.manifest_crc.to_le_bytes());
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        let at = SLOTS[(seq % 2) as usize];
        // The superblock is written only under the record lock, and nothing reads it while the heap is open
        // (open() parsed it into memory), so this store races with nothing.
        // SAFETY: the superblock lies inside the mapping (the heap is at least SUPERBLOCK_BYTES long).
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), self.map.as_ptr().add(at), SLOT_BYTES);
        }
        self.persist(at as u64, SLOT_BYTES)?;
        *r = (seq, *rec);
        Ok(())
    }

    /// Current allocation head.
    pub fn head(&self) -> u64 {
        *self.head.lock()
    }
}

/// Ownership of an allocated extent that readers may be using (a segment image, a superseded dictionary).
/// Once [`retire`](Extent::retire)d — nothing new will refer to it — the drop of the last holder (the last
/// GDT snapshot, i.e. the last reader of an old epoch) gives it back to the heap.
pub struct Extent {
    heap: Arc<PersistentHeap>,
    pub off: u64,
    pub len: u64,
    retired: std::sync::atomic::AtomicBool,
}

impl Extent {
    pub fn new(heap: Arc<PersistentHeap>, off: u64, len: u64) -> Extent {
        Extent { heap, off, len, retired: std::sync::atomic::AtomicBool::new(false) }
    }

    pub fn heap(&self) -> &Arc<PersistentHeap> {
        &self.heap
    }

    /// Nothing new will refer to this extent: give it back when the last holder drops it.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }
}

impl Drop for Extent {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Acquire) {
            self.heap.release(self.off, self.len);
        }
    }
}

fn lock(file: &File) -> Result<(), HeapError> {
    // SAFETY: flock on our own open descriptor; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(HeapError::Locked);
        }
        return Err(HeapError::Io(e));
    }
    Ok(())
}

impl Drop for PersistentHeap {
    fn drop(&mut self) {
        // The prefault threads hold the mapping during a step (one 2 MiB populate): stop and wait for them, so
        // the file is unmapped — and its lock released — when the heap is gone.
        self.closing.store(true, Ordering::Relaxed);
        for t in self.prefaults.get_mut().drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_without_moving_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        let heap = PersistentHeap::create(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        let a = heap.alloc_copy(b"hello").unwrap();
        let first = heap.slice(a, 5).as_ptr();
        // Force several growths.
        let big = vec![7u8; 3 << 20];
        let b = heap.alloc_copy(&big).unwrap();
        assert_eq!(heap.slice(a, 5).as_ptr(), first, "addresses never move");
        assert_eq!(heap.slice(b, big.len()), &big[..]);
        heap.atomic(heap.alloc(8).unwrap()).store(42, Ordering::Release);
        assert!(matches!(PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto), Err(HeapError::Locked)));
        let end = heap.head();
        heap.write_record(&RecoveryRecord {
            clean: true,
            heap_end: end,
            manifest_off: a,
            manifest_len: 5,
            manifest_crc: 1,
        })
        .unwrap();
        heap.persist_all().unwrap();
        drop(heap);
        let (heap, rec) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        assert!(rec.clean);
        assert_eq!(rec.manifest_off, a);
        assert_eq!(heap.slice(a, 5), b"hello");
        assert!(heap.alloc(1).unwrap() >= end);
    }

    /// Fresh file space faulted in ahead of the head (`prefault_ahead`) reads as zeros and takes what is
    /// written after, while the background thread may still be populating it; the data survives a reopen,
    /// and closing with it running is safe.
    #[test]
    fn space_faulted_in_ahead_holds_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        let heap = PersistentHeap::create(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        // Enough growth to ask for space ahead several times (every half of PREFAULT_AHEAD).
        let piece: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i % 253) as u8).collect();
        let mut offs = vec![];
        for k in 0..40u8 {
            let off = heap.alloc(piece.len()).unwrap();
            assert!(heap.slice(off, piece.len()).iter().all(|&b| b == 0), "fresh space reads as zeros");
            let mut mine = piece.clone();
            mine[0] = k;
            heap.write(off, &mine);
            offs.push((off, mine));
        }
        assert!(heap.prefaulted.load(Ordering::Relaxed) > heap.head() as usize, "space was asked for ahead");
        for (off, mine) in &offs {
            assert_eq!(heap.slice(*off, mine.len()), &mine[..]);
        }
        let end = heap.head();
        let rec =
            RecoveryRecord { clean: true, heap_end: end, manifest_off: 0, manifest_len: 0, manifest_crc: 0 };
        heap.write_record(&rec).unwrap();
        heap.persist_all().unwrap();
        drop(heap);
        let (heap, _) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        for (off, mine) in &offs {
            assert_eq!(heap.slice(*off, mine.len()), &mine[..]);
        }
    }

    #[test]
    fn gathered_writes_hold_their_pieces_in_order() {
        let pieces_of = |k: usize| -> Vec<Vec<u8>> {
            // Small pieces (gathered into one write), large ones (written as they are), empty ones.
            [0, 3, 5000, 0, 17, 64 << 10, 4095, 4096, 1, 300_000]
                .iter()
                .enumerate()
                .map(|(j, &n)| (0..n).map(|i| (i * 7 + j * 13 + k) as u8).collect())
                .collect()
        };
        for barrier in [BarrierChoice::Auto, BarrierChoice::Simulated(SimDomain::new())] {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("heap");
            let heap = PersistentHeap::create(&p, 1 << 30, barrier.clone()).unwrap();
            let mut written = vec![];
            for k in 0..12 {
                let pieces = pieces_of(k);
                let whole = pieces.concat();
                let off = heap.alloc(whole.len()).unwrap();
                if k % 2 == 0 {
                    // Pages the mapping has read (as zeros) before the file is written under them.
                    assert!(heap.slice(off, whole.len()).iter().all(|&b| b == 0));
                }
                heap.write_gathered(off, whole.len(), &|f| pieces.iter().for_each(|x| f(x))).unwrap();
                assert_eq!(heap.slice(off, whole.len()), &whole[..], "{barrier:?}, range {k}");
                written.push((off, whole));
            }
            if matches!(barrier, BarrierChoice::Auto) {
                let end = heap.head();
                let rec = RecoveryRecord {
                    clean: true,
                    heap_end: end,
                    manifest_off: 0,
                    manifest_len: 0,
                    manifest_crc: 0,
                };
                heap.write_record(&rec).unwrap();
                heap.persist_all().unwrap();
                drop(heap);
                let (heap, _) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
                for (off, whole) in &written {
                    assert_eq!(heap.slice(*off, whole.len()), &whole[..], "reopened");
                }
            }
        }
    }

    #[test]
    fn budget_and_corruption_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        let heap = PersistentHeap::create(&p, 2 << 20, BarrierChoice::Auto).unwrap();
        assert!(matches!(heap.alloc(4 << 20), Err(HeapError::Budget { .. })));
        let rec =
            RecoveryRecord { clean: true, heap_end: 4096, manifest_off: 0, manifest_len: 0, manifest_crc: 0 };
        heap.write_record(&rec).unwrap();
        drop(heap);
        let mut bytes = std::fs::read(&p).unwrap();
        // One damaged slot falls back to the other; both damaged is an error.
        bytes[SLOTS[0] + 20] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let (h, rec) = PersistentHeap::open(&p, 2 << 20, BarrierChoice::Auto).unwrap();
        assert!(!rec.clean, "the older record (seq 1, not clean) is used");
        drop(h);
        bytes[SLOTS[1] + 20] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(
            PersistentHeap::open(&p, 2 << 20, BarrierChoice::Auto),
            Err(HeapError::SuperblockChecksum)
        ));
        std::fs::write(&p, b"not a heap at all, just some text").unwrap();
        assert!(matches!(
            PersistentHeap::open(&p, 2 << 20, BarrierChoice::Auto),
            Err(HeapError::Truncated { .. })
        ));
    }

    /// After a crash the recorded heap end is the crash-safe reservation, which may lie beyond the file:
    /// the free space learnt at open must stop at the last live extent, so every allocation is file-backed.
    #[test]
    fn free_space_after_a_crash_stays_inside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        let live = {
            let heap = PersistentHeap::create(&p, 1 << 30, BarrierChoice::Auto).unwrap();
            heap.enable_reservations();
            let a = heap.alloc_copy(&[1u8; 4096]).unwrap();
            heap.persist_all().unwrap();
            (a, 4096u64)
        };
        let (heap, rec) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        assert!(!rec.clean);
        let file_len = std::fs::metadata(&p).unwrap().len();
        assert!(
            rec.heap_end > file_len,
            "the reservation reaches past the file ({} <= {file_len})",
            rec.heap_end
        );
        heap.rebuild_free_space(&mut [live]);
        for _ in 0..64 {
            let off = heap.alloc_copy(&[2u8; 64 << 10]).unwrap();
            assert!(off + (64 << 10) <= std::fs::metadata(&p).unwrap().len());
        }
        assert_eq!(heap.slice(live.0, 4096), &[1u8; 4096][..]);
    }

    /// A crash-safe session opened from a clean close and then killed: its reservation records are not
    /// clean ones, so the next open does not take the reservation for the end of the data (beyond the file).
    #[test]
    fn a_reservation_after_a_clean_close_is_not_clean() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        {
            let heap = PersistentHeap::create(&p, 1 << 30, BarrierChoice::Auto).unwrap();
            let a = heap.alloc_copy(b"manifest").unwrap();
            let rec = RecoveryRecord {
                clean: true,
                heap_end: heap.head(),
                manifest_off: a,
                manifest_len: 8,
                manifest_crc: 0,
            };
            heap.write_record(&rec).unwrap();
            heap.persist_all().unwrap();
        }
        {
            let (heap, rec) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
            assert!(rec.clean);
            heap.enable_reservations();
            heap.alloc_copy(&[3u8; 4096]).unwrap();
            heap.persist_all().unwrap();
            // Killed here: no close.
        }
        let (_heap, rec) = PersistentHeap::open(&p, 1 << 30, BarrierChoice::Auto).unwrap();
        assert!(!rec.clean);
        assert!(rec.heap_end > std::fs::metadata(&p).unwrap().len());
    }
}
