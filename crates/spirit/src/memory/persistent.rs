//! The persistent heap: one file, mapped shared into a reserved address range, grown by whole chunks.
//!
//! Layout: a 4 KiB superblock (magic, format version, open/clean state, the recovery record pointing at the
//! manifest) followed by allocations handed out by a bump allocator. Space is fallocated when the file grows,
//! so a full disk is an error at growth time, never a `SIGBUS` on a later store. The file is locked with
//! `flock` so two processes can never map the same heap.

use super::mapping::{atomic_u64, page_size, Mapping};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes reserved at the start of the heap for the superblock.
pub const SUPERBLOCK_BYTES: usize = 4096;
const MAGIC: &[u8; 8] = b"SPIRITPH";
/// Version of the persistent format. Bump on any incompatible change of any persistent structure.
pub const FORMAT_VERSION: u32 = 1;
const ALIGN: u64 = 64;
const MIN_CHUNK: usize = 1 << 20;
const MAX_CHUNK: usize = 256 << 20;

/// What the superblock says about the last session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryRecord {
    /// `true` if the heap was closed cleanly (graceful shutdown).
    pub clean: bool,
    pub heap_end: u64,
    pub manifest_off: u64,
    pub manifest_len: u64,
    pub manifest_crc: u32,
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PersistentStats {
    pub budget: u64,
    /// Bytes handed out by the allocator (including the superblock).
    pub used: u64,
    /// Current file length.
    pub file_len: u64,
}

/// The persistent heap of one shard.
pub struct PersistentHeap {
    path: PathBuf,
    file: File,
    map: Mapping,
    mapped: AtomicUsize,
    head: Mutex<u64>,
    budget: u64,
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
    #[error("superblock checksum mismatch at offset 0")]
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
    pub fn create(path: &Path, budget: u64) -> Result<PersistentHeap, HeapError> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        lock(&file)?;
        let heap = Self::map(path, file, budget, 0)?;
        heap.grow_to(SUPERBLOCK_BYTES as u64)?;
        *heap.head.lock() = SUPERBLOCK_BYTES as u64;
        let mut sb = [0u8; 12];
        sb[..8].copy_from_slice(MAGIC);
        sb[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        heap.write(0, &sb);
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
    pub fn open(path: &Path, budget: u64) -> Result<(PersistentHeap, RecoveryRecord), HeapError> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        lock(&file)?;
        let len = file.metadata()?.len();
        if len < SUPERBLOCK_BYTES as u64 {
            return Err(HeapError::Truncated { len, needed: SUPERBLOCK_BYTES as u64 });
        }
        let heap = Self::map(path, file, budget, len as usize)?;
        let sb = heap.slice(0, SUPERBLOCK_BYTES);
        if &sb[..8] != MAGIC {
            return Err(HeapError::BadMagic);
        }
        let version = u32::from_le_bytes(sb[8..12].try_into().unwrap());
        if version != FORMAT_VERSION {
            return Err(HeapError::Version { found: version });
        }
        let crc = u32::from_le_bytes(sb[44..48].try_into().unwrap());
        if crc32fast::hash(&sb[..44]) != crc {
            return Err(HeapError::SuperblockChecksum);
        }
        let rec = RecoveryRecord {
            clean: u32::from_le_bytes(sb[12..16].try_into().unwrap()) == 0,
            heap_end: u64::from_le_bytes(sb[16..24].try_into().unwrap()),
            manifest_off: u64::from_le_bytes(sb[24..32].try_into().unwrap()),
            manifest_len: u64::from_le_bytes(sb[32..40].try_into().unwrap()),
            manifest_crc: u32::from_le_bytes(sb[40..44].try_into().unwrap()),
        };
        let needed = rec.heap_end.max(rec.manifest_off + rec.manifest_len);
        if needed > len {
            return Err(HeapError::Truncated { len, needed });
        }
        *heap.head.lock() = rec.heap_end.max(SUPERBLOCK_BYTES as u64);
        Ok((heap, rec))
    }

    fn map(path: &Path, file: File, budget: u64, existing: usize) -> Result<PersistentHeap, HeapError> {
        let page = page_size();
        let reserve = (budget as usize).max(existing).max(MIN_CHUNK).div_ceil(page) * page;
        let map = Mapping::reserve(reserve)?;
        if existing > 0 {
            let whole = existing / page * page;
            if whole != existing {
                file.set_len(existing.div_ceil(page) as u64 * page as u64)?;
            }
            map.map_file_at(file.as_raw_fd(), 0, existing.div_ceil(page) * page)?;
        }
        Ok(PersistentHeap {
            path: path.to_path_buf(),
            file,
            map,
            mapped: AtomicUsize::new(existing.div_ceil(page) * page),
            head: Mutex::new(SUPERBLOCK_BYTES as u64),
            budget,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
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
        self.file.set_len(new_len as u64)?;
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
        self.map.map_file_at(self.file.as_raw_fd(), mapped, new_len - mapped)?;
        self.mapped.store(new_len, Ordering::Release);
        Ok(())
    }

    /// Allocates `len` bytes (64-byte aligned) and returns their offset. The range is zero (fresh file space)
    /// or stale data; the caller fills it completely through [`write`](Self::write) before publishing the
    /// offset anywhere a reader can find it.
    pub fn alloc(&self, len: usize) -> Result<u64, HeapError> {
        let mut head = self.head.lock();
        let off = head.div_ceil(ALIGN) * ALIGN;
        let end = off + len as u64;
        self.grow_to(end)?;
        *head = end;
        Ok(off)
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
        // SAFETY: the range is allocated (asserted) and mapped (alloc grew the mapping); the engine writes
        // only ranges it allocated and has not yet published, so no reader can observe it concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.map.as_ptr().add(off as usize), bytes.len());
        }
    }

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
        self.map.sync(off as usize, len)
    }

    /// Persists everything allocated so far.
    pub fn persist_all(&self) -> io::Result<()> {
        let end = *self.head.lock();
        self.map.sync(0, end as usize)
    }

    pub fn stats(&self) -> PersistentStats {
        PersistentStats {
            budget: self.budget,
            used: *self.head.lock(),
            file_len: self.mapped.load(Ordering::Acquire) as u64,
        }
    }

    /// Writes the recovery record into the superblock and persists it (the commit point of a close).
    pub fn write_record(&self, rec: &RecoveryRecord) -> io::Result<()> {
        // The superblock is written only by the thread that opens or closes the heap, while no reader looks
        // at it (readers use the manifest that open() parsed into memory).
        let mut sb = [0u8; 48];
        sb.copy_from_slice(self.slice(0, 48));
        sb[12..16].copy_from_slice(&(if rec.clean { 0u32 } else { 1 }).to_le_bytes());
        sb[16..24].copy_from_slice(&rec.heap_end.to_le_bytes());
        sb[24..32].copy_from_slice(&rec.manifest_off.to_le_bytes());
        sb[32..40].copy_from_slice(&rec.manifest_len.to_le_bytes());
        sb[40..44].copy_from_slice(&rec.manifest_crc.to_le_bytes());
        let crc = crc32fast::hash(&sb[..44]);
        sb[44..48].copy_from_slice(&crc.to_le_bytes());
        self.write(0, &sb);
        self.persist(0, SUPERBLOCK_BYTES)
    }

    /// Current allocation head.
    pub fn head(&self) -> u64 {
        *self.head.lock()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_without_moving_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        let heap = PersistentHeap::create(&p, 1 << 30).unwrap();
        let a = heap.alloc_copy(b"hello").unwrap();
        let first = heap.slice(a, 5).as_ptr();
        // Force several growths.
        let big = vec![7u8; 3 << 20];
        let b = heap.alloc_copy(&big).unwrap();
        assert_eq!(heap.slice(a, 5).as_ptr(), first, "addresses never move");
        assert_eq!(heap.slice(b, big.len()), &big[..]);
        heap.atomic(heap.alloc(8).unwrap()).store(42, Ordering::Release);
        assert!(matches!(PersistentHeap::open(&p, 1 << 30), Err(HeapError::Locked)));
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
        let (heap, rec) = PersistentHeap::open(&p, 1 << 30).unwrap();
        assert!(rec.clean);
        assert_eq!(rec.manifest_off, a);
        assert_eq!(heap.slice(a, 5), b"hello");
        assert!(heap.alloc(1).unwrap() >= end);
    }

    #[test]
    fn budget_and_corruption_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("heap");
        let heap = PersistentHeap::create(&p, 2 << 20).unwrap();
        assert!(matches!(heap.alloc(4 << 20), Err(HeapError::Budget { .. })));
        drop(heap);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[20] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(PersistentHeap::open(&p, 2 << 20), Err(HeapError::SuperblockChecksum)));
        std::fs::write(&p, b"not a heap at all, just some text").unwrap();
        assert!(matches!(PersistentHeap::open(&p, 2 << 20), Err(HeapError::Truncated { .. })));
    }
}
