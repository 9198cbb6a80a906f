//! Raw mappings (anonymous and file-backed) and the typed views over them.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// An owned mapping of `len` bytes at `ptr`, unmapped on drop.
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// Transparent huge pages were asked for ([`Mapping::anonymous`]).
    huge: bool,
}

/// CPU time of one [`Mapping::populate_probing`] step (up to 2 MiB; a shorter one still faults in the
/// whole huge pages it touches) above which huge pages are taken to be costly here, and the rest of the range
/// gets small pages. Zeroing a huge page takes 0.1–0.4 ms (512 MiB in 67–110 ms on the 2-core benchmark VM,
/// where 4 KiB pages took 156–290 ms); but under that VM's hypervisor a huge page whose memory the guest freed
/// a few seconds or more before took ~10 ms (512 MiB in 4.5–5.5 s, `MADV_POPULATE_WRITE` after 20 s idle,
/// reproducible), so a bulk load started cold spent 5–6 s more of system time in its arenas' faults than one
/// started right after another load.
const HUGE_STEP_SLOW: std::time::Duration = std::time::Duration::from_millis(4);

/// Bytes a populate faults in per step (a huge page): the unit [`Mapping::populate_probing`] times.
const POPULATE_STEP: usize = 2 << 20;

// SAFETY: the mapping is plain memory; synchronisation of its contents is the job of the views built on it
// (unique blocks, shared immutable slices, atomics).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Anonymous, private, zero-filled memory. Pages are touched lazily, so reserving the whole budget costs
    /// nothing until it is used.
    ///
    /// Transparent huge pages are asked for (`MADV_HUGEPAGE`; best effort, a kernel without them maps small
    /// pages): the fresh segments' tables, posting blocks and columns are written and read at random over
    /// arenas of tens to hundreds of MiB, where 4 KiB pages cost a TLB miss on most accesses and a page
    /// fault per 4 KiB touched.
    /// Where huge pages prove far costlier than zeroing them (a hypervisor backing freed guest memory anew;
    /// see `HUGE_STEP_SLOW`), the background populate gives the rest of its range small pages.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mapping> {
        let mut map = Self::raw(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        )?;
        // SAFETY: the range is exactly our own fresh mapping; the advice changes how the kernel backs it,
        // never its contents. Refused advice (no THP in this kernel) leaves small pages: ignored.
        map.huge = unsafe { libc::madvise(map.ptr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) } == 0;
        Ok(map)
    }

    /// An inaccessible reservation of address space, to be filled by [`Mapping::map_file_at`].
    pub(crate) fn reserve(len: usize) -> io::Result<Mapping> {
        Self::raw(len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE)
    }

    fn raw(len: usize, prot: i32, flags: i32) -> io::Result<Mapping> {
        assert!(len > 0, "empty mapping");
        // SAFETY: a fresh mapping at an address the kernel chooses; no existing memory is affected.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: ptr as *mut u8, len, huge: false })
    }

    /// Whether the kernel maps `fd` with `MAP_SYNC` (only DAX file systems do). Probed with a separate,
    /// kernel-placed mapping: a refused `MAP_FIXED` request may already have unmapped the target range, and
    /// another thread could map something into that hole before it is filled again.
    pub(crate) fn supports_map_sync(fd: i32) -> bool {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let len = page_size();
            // SAFETY: a fresh mapping at an address the kernel picks; it replaces nothing and is unmapped
            // right away.
            unsafe {
                let ptr = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                    fd,
                    0,
                );
                if ptr == libc::MAP_FAILED {
                    return false;
                }
                libc::munmap(ptr, len);
            }
            true
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = fd;
            false
        }
    }

    /// Maps `len` bytes of `fd` starting at file offset `offset` over `[offset, offset+len)` of this
    /// reservation, shared and writable; with `sync` (only after [`supports_map_sync`](Self::supports_map_sync)
    /// said yes) as `MAP_SYNC`, so stores reach persistence with a cache-line write-back, no `msync`.
    pub(crate) fn map_file_at(&self, fd: i32, offset: usize, len: usize, sync: bool) -> io::Result<()> {
        assert!(offset + len <= self.len, "file mapping beyond the reserved range");
        assert_eq!(offset % page_size(), 0, "file chunk not page aligned");
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        let flags = if sync { libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC } else { libc::MAP_SHARED };
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let flags = {
            let _ = sync;
            libc::MAP_SHARED
        };
        // SAFETY: the target range lies inside our own reservation (asserted above), so MAP_FIXED replaces
        // only pages this mapping owns and no other object's memory.
        let ptr = unsafe {
            libc::mmap(
                self.ptr.add(offset) as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_FIXED,
                fd,
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Page-cache folios faulted in through a page-cache mapping stay small: the kernel backs a fault with
        // folios up to a huge page, and under the benchmark VM's hypervisor one whose memory the guest freed
        // seconds before costs ~10 ms to back (see `HUGE_STEP_SLOW`): 256 MiB of fresh file space populated
        // through the mapping after 25 s idle took 1.7-2.4 s of CPU, 0.27 s with this advice (0.05 s warm).
        // Not on DAX, whose stores go to the device and whose huge mappings cost nothing to back.
        if !sync {
            self.advise_small_pages(offset, len);
        }
        Ok(())
    }

    /// How many of the mapping's pages are resident (`mincore`), for tests of what is faulted in.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn resident_pages(&self) -> usize {
        let pages = self.len.div_ceil(page_size());
        let mut v = vec![0u8; pages];
        // SAFETY: the range is exactly this mapping (page aligned: mmap returned it); `v` has a byte per page.
        let rc = unsafe { libc::mincore(self.ptr as *mut libc::c_void, self.len, v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore failed: {}", io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Has the kernel back the whole pages inside `[offset, offset+len)` with written-to memory now
    /// (`MADV_POPULATE_WRITE`, Linux 5.14+; anonymous memory or a shared file mapping): what the first store
    /// to each page would do, without changing any byte, so it may run while other threads write the same
    /// pages. `false` when the kernel refuses (an older kernel, another OS, a range it cannot back — an
    /// error, never a `SIGBUS`): the pages are then faulted in on first touch.
    pub(crate) fn populate_write(&self, offset: usize, len: usize) -> bool {
        #[cfg(target_os = "linux")]
        {
            let page = page_size();
            let start = offset.div_ceil(page) * page;
            let end = offset.saturating_add(len).min(self.len) / page * page;
            if end <= start {
                return true;
            }
            // SAFETY: the range is inside this mapping (clamped to its length) and page aligned; populating
            // leaves every byte as it was, so it races with no reader or writer of those pages.
            let rc = unsafe {
                libc::madvise(
                    self.ptr.add(start) as *mut libc::c_void,
                    end - start,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            rc == 0
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (offset, len);
            false
        }
    }

    /// Asks the kernel to back the pages of `[offset, offset+len)` not yet touched with small pages
    /// (`MADV_NOHUGEPAGE`); pages already backed keep their size. Best effort.
    fn advise_small_pages(&self, offset: usize, len: usize) {
        let page = page_size();
        let start = offset.div_ceil(page) * page;
        let end = offset.saturating_add(len).min(self.len) / page * page;
        if end > start {
            // SAFETY: the range is inside this mapping (clamped) and page aligned; the advice changes how the
            // kernel backs pages not yet touched, never any byte's contents.
            unsafe {
                libc::madvise(self.ptr.add(start) as *mut libc::c_void, end - start, libc::MADV_NOHUGEPAGE)
            };
        }
    }

    /// [`populate_write`](Self::populate_write) of `[offset, offset+len)` front to back on a short-lived
    /// thread at background priority ([`super::run_in_background`]), a huge page's worth at a time, never past
    /// what `reach` says is wanted by now (bytes from `offset`; once the thread catches up it asks again after
    /// a nap that doubles from 1 to 64 ms while nothing more is wanted, and gives up once nothing more has
    /// been wanted for a second, so a writer gone idle costs a few wakeups and no thread; `None` stops the
    /// thread): the pages an owner is about to fill at full speed are faulted in
    /// (zeroed by the kernel — and, under a hypervisor, backed by the host) on CPU time the pipeline leaves
    /// idle rather than on the writer's. The thread holds the mapping only during a step, so a mapping dropped
    /// meanwhile is unmapped right after. Best effort: no thread, or a kernel without the advice, leaves the
    /// faults to the writer. Returns the thread, for an owner that must see it gone (a file mapping keeps the
    /// file's `flock` while it lives).
    pub(crate) fn populate_in_background(
        map: &std::sync::Arc<Mapping>,
        offset: usize,
        len: usize,
        reach: impl Fn() -> Option<usize> + Send + 'static,
    ) -> Option<std::thread::JoinHandle<()>> {
        const NAP_MIN: std::time::Duration = std::time::Duration::from_millis(1);
        const NAP_MAX: std::time::Duration = std::time::Duration::from_millis(64);
        const GIVE_UP: std::time::Duration = std::time::Duration::from_secs(1);
        let map = std::sync::Arc::downgrade(map);
        std::thread::Builder::new()
            .name("spirit-prefault".into())
            .spawn(move || {
                super::run_in_background();
                let (mut at, mut nap, mut idle) = (0, NAP_MIN, std::time::Duration::ZERO);
                // Steps are timed until one is slow (the kernel hands out recently freed memory first).
                let mut huge = map.upgrade().is_some_and(|m| m.huge);
                while at < len {
                    let Some(want) = reach() else { return };
                    let want = want.min(len);
                    if at >= want {
                        if idle >= GIVE_UP {
                            return;
                        }
                        std::thread::sleep(nap);
                        idle += nap;
                        nap = (nap * 2).min(NAP_MAX);
                        continue;
                    }
                    (nap, idle) = (NAP_MIN, std::time::Duration::ZERO);
                    let Some(map) = map.upgrade() else { return };
                    let step = POPULATE_STEP.min(want - at);
                    if !map.populate_probing(offset + at, step, offset + len, &mut huge) {
                        return;
                    }
                    at += step;
                }
            })
            .ok()
    }

    /// [`populate_write`](Self::populate_write) of `[offset, offset+len)` now, on this thread, a huge page's
    /// worth at a time: while `huge` holds, each step is timed in thread CPU time (not wall time: a populate
    /// thread at idle priority is preempted at will), and after one slower than `HUGE_STEP_SLOW` (huge pages
    /// the hypervisor backs anew) what lies past it up to `small_to` gets small pages, whose faults it serves
    /// cheaply, and `huge` is cleared. `false` when the kernel refuses (the pages are then faulted in on first
    /// touch).
    pub(crate) fn populate_probing(
        &self,
        offset: usize,
        len: usize,
        small_to: usize,
        huge: &mut bool,
    ) -> bool {
        let mut at = 0;
        while at < len {
            let step = POPULATE_STEP.min(len - at);
            let cpu = thread_cpu_time();
            if !self.populate_write(offset + at, step) {
                return false;
            }
            at += step;
            if *huge && thread_cpu_time() - cpu > HUGE_STEP_SLOW {
                self.advise_small_pages(offset + at, small_to.saturating_sub(offset + at));
                *huge = false;
            }
        }
        true
    }

    /// Whether transparent huge pages were asked for ([`Mapping::anonymous`]).
    pub(crate) fn huge(&self) -> bool {
        self.huge
    }

    /// [`sync`](Self::sync), after dropping the range's pages — every page it touches — from this process's
    /// page tables (`MADV_DONTNEED`; on a shared file mapping the page cache keeps them, dirty ones included): writeback
    /// then finds them unmapped. A page written through the mapping is otherwise write-protected by writeback
    /// with a TLB flush of its own, an inter-processor interrupt whenever another thread of the process runs
    /// on another CPU — a VM exit under a hypervisor. Closing two shards at the end of a bulk load, one
    /// shard's final barriers spent 0.35 s in those while the other's merger ran (perf); dropping the pages
    /// takes one flush per batch. For ranges not touched again soon (a closing heap's,
    /// `PersistentHeap::begin_close`): a later access faults the page back in.
    ///
    /// # Safety
    /// As [`release_file_pages`](Self::release_file_pages).
    pub(crate) unsafe fn sync_released(&self, offset: usize, len: usize) -> io::Result<()> {
        // SAFETY: the caller's promise.
        unsafe { self.release_file_pages(offset, len) };
        self.sync(offset, len)
    }

    /// Drops the pages covering `[offset, offset+len)` from this process's page tables (`MADV_DONTNEED`), on
    /// a shared file mapping only, where the page cache keeps every byte (dirty pages included) and a later
    /// access faults the page back in: so writeback need not write-protect them one TLB flush at a time (see
    /// [`sync_released`](Self::sync_released)). Every page the range touches, partly covered ones too. Best
    /// effort.
    ///
    /// # Safety
    /// The pages must lie in a part of the mapping that is a shared file mapping ([`Self::map_file_at`], not
    /// `MAP_SYNC`): on anonymous or private memory the advice discards the bytes, which live borrows may be
    /// reading.
    pub(crate) unsafe fn release_file_pages(&self, offset: usize, len: usize) {
        let page = page_size();
        let start = offset / page * page;
        let end = offset.saturating_add(len).min(self.len).div_ceil(page) * page;
        if end > start {
            // SAFETY: the page-aligned range lies inside this mapping (clamped to its length), and the caller
            // promises it is file-mapped and shared, where MADV_DONTNEED changes no byte of the file or page
            // cache, only which pages this process has mapped (dirty ones are marked dirty in the page cache).
            unsafe {
                libc::madvise(
                    self.ptr.add(start) as *mut libc::c_void,
                    end.min(self.len) - start,
                    libc::MADV_DONTNEED,
                )
            };
        }
    }

    /// `msync(MS_SYNC)` of the pages covering `[offset, offset+len)`.
    pub(crate) fn sync(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let page = page_size();
        let start = offset / page * page;
        let end = (offset + len).min(self.len);
        // SAFETY: the range is inside this mapping (clamped to its length) and page aligned at its start.
        let rc = unsafe { libc::msync(self.ptr.add(start) as *mut libc::c_void, end - start, libc::MS_SYNC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and nothing refers to the memory any more (every
        // view borrows the owner of this mapping).
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// CPU time the calling thread has used (zero where the clock is missing).
fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a pointer to a live local.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p <= 0 {
        4096
    } else {
        p as usize
    }
}

/// Views `len` bytes at `ptr` as shared 32-bit atomic words.
///
/// # Safety
/// `ptr` must be 4-byte aligned, valid for `len` bytes for `'a`, and every access to that memory during
/// `'a` must go through atomics.
pub(crate) unsafe fn atomic_u32s<'a>(ptr: *const u8, len: usize) -> &'a [AtomicU32] {
    debug_assert_eq!(ptr as usize % 4, 0);
    std::slice::from_raw_parts(ptr as *const AtomicU32, len / 4)
}

/// # Safety
/// As [`atomic_u32s`], for one 8-byte aligned word.
pub(crate) unsafe fn atomic_u64<'a>(ptr: *const u8) -> &'a AtomicU64 {
    debug_assert_eq!(ptr as usize % 8, 0);
    &*(ptr as *const AtomicU64)
}

/// Reads a little-endian byte string out of atomic words (the fresh segment stores stored fields and term
/// bytes in its word arena).
pub(crate) fn words_of(words: &[AtomicU32], byte_len: usize, out: &mut Vec<u8>) {
    use std::sync::atomic::Ordering::Relaxed;
    out.clear();
    out.reserve(byte_len);
    for w in words.iter().take(byte_len.div_ceil(4)) {
        out.extend_from_slice(&w.load(Relaxed).to_le_bytes());
    }
    out.truncate(byte_len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The small-page advice a slow huge page leads to (`populate_in_background`) keeps every byte and
    /// marks exactly the advised whole pages: the kernel splits the mapping there and flags the middle part.
    #[cfg(target_os = "linux")]
    #[test]
    fn small_page_advice_keeps_bytes_and_covers_the_range() {
        let page = page_size();
        let len = 64 * page;
        let map = Mapping::anonymous(len).unwrap();
        // SAFETY: the whole mapping, owned by this test alone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), len) };
        for (i, b) in bytes.iter_mut().enumerate().take(40 * page) {
            *b = (i % 253) as u8 + 1;
        }
        let expected = bytes.to_vec();
        map.advise_small_pages(8 * page + 5, 16 * page);
        assert_eq!(&bytes[..], &expected[..]);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // Each mapping: a header line `start-end perms ...`, then fields, `VmFlags:` last.
        let flags_of = |addr: usize| {
            let mut in_range = false;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-')) {
                    let (a, b) = range.split_once('-').unwrap();
                    let parse = |x: &str| usize::from_str_radix(x, 16).unwrap_or(0);
                    in_range = (parse(a)..parse(b)).contains(&addr);
                } else if in_range && line.starts_with("VmFlags:") {
                    return line.to_string();
                }
            }
            panic!("no mapping holds {addr:#x}");
        };
        let at = |p: usize| map.as_ptr() as usize + p * page;
        // Whole pages only: the one holding the range's start is left as it was, as is the one past its end.
        for p in [9, 16, 23] {
            assert!(flags_of(at(p)).contains(" nh"), "page {p}: {}", flags_of(at(p)));
        }
        for p in [0, 8, 24, 63] {
            assert!(!flags_of(at(p)).contains(" nh"), "page {p}: {}", flags_of(at(p)));
        }
    }

    /// A barrier that releases its pages keeps every byte — in the page cache, which the file and a new
    /// fault through the mapping both read — and leaves the range unmapped from this process until touched.
    #[cfg(target_os = "linux")]
    #[test]
    fn released_sync_keeps_bytes_and_unmaps_the_pages() {
        use std::os::unix::io::AsRawFd;
        let page = page_size();
        let len = 32 * page;
        let file = tempfile::tempfile().unwrap();
        file.set_len(len as u64).unwrap();
        let map = Mapping::reserve(len).unwrap();
        map.map_file_at(file.as_raw_fd(), 0, len, false).unwrap();
        // SAFETY: the whole mapping, owned by this test alone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), len) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i % 251) as u8 + 1;
        }
        let expected = bytes.to_vec();
        let rss_kb = || {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let start = format!("{:x}-", map.as_ptr() as usize);
            let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
            assert!(lines.next().is_some(), "the mapping is listed");
            let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
            rss.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap()
        };
        assert_eq!(rss_kb(), len / 1024, "every page written is mapped");
        // SAFETY: the whole range was mapped shared from the file just above.
        unsafe { map.sync_released(3, len - 3) }.unwrap();
        assert_eq!(rss_kb(), 0, "every page of the range is unmapped, the partly covered first one too");
        let mut on_disk = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut on_disk, 0).unwrap();
        assert_eq!(on_disk, expected, "the file holds what was written");
        assert_eq!(&bytes[..], &expected[..], "and the pages fault back in with it");
    }

    /// Populating leaves every byte as it was — pages written before, pages never touched (zeros), a range
    /// that is not page aligned or runs past the end — on the caller's thread and on the background one,
    /// while the owner writes.
    #[test]
    fn populating_changes_no_byte() {
        let page = page_size();
        let len = 64 * page;
        let map = Arc::new(Mapping::anonymous(len).unwrap());
        let bytes = |m: &Mapping| {
            // SAFETY: the whole mapping, read between this thread's writes (the background thread only
            // populates, which writes nothing).
            unsafe { std::slice::from_raw_parts(m.as_ptr(), len) }.to_vec()
        };
        let write = |i: usize, v: u8| {
            assert!(i < len);
            // SAFETY: in bounds (asserted); this thread is the only writer.
            unsafe { map.as_ptr().add(i).write(v) }
        };
        for i in 0..8 * page {
            write(i, (i % 251) as u8 + 1);
        }
        let mut expected = bytes(&map);
        // Best effort: a kernel without the advice (before 5.14) refuses, which changes nothing either.
        let _ = map.populate_write(page / 2, 20 * page);
        assert_eq!(bytes(&map), expected);
        let _ = Mapping::populate_in_background(&map, 3, len - 3, move || Some(len));
        // The owner goes on writing meanwhile.
        write(0, 0);
        expected[0] = 0;
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(bytes(&map), expected);
        let _ = map.populate_write(len - page, 10 * page);
        assert_eq!(bytes(&map), expected);
    }

    /// A populating thread whose writer wants nothing more gives up after about a second, instead of
    /// napping for as long as the mapping lives (an idle shard's fresh segment may live for days).
    #[test]
    fn populating_thread_gives_up_on_an_idle_writer() {
        let map = Arc::new(Mapping::anonymous(16 * page_size()).unwrap());
        let t0 = std::time::Instant::now();
        let t = Mapping::populate_in_background(&map, 0, map.len(), || Some(0)).expect("a thread");
        t.join().unwrap();
        let took = t0.elapsed();
        assert!(took >= std::time::Duration::from_millis(900), "gave up too early: {took:?}");
        assert!(Arc::strong_count(&map) == 1, "the thread held the mapping only during a step");
    }

    /// The background thread goes no further than `reach` says and ends when it says stop (a segment gone,
    /// a heap closing), waiting meanwhile.
    #[test]
    fn populating_follows_reach_and_stops() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
        let page = page_size();
        let len = 16 * page;
        let map = Arc::new(Mapping::anonymous(len).unwrap());
        let t = Mapping::populate_in_background(&map, 0, len, || None).expect("a thread");
        t.join().unwrap();
        let (stop, asked) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (s, a) = (stop.clone(), asked.clone());
        let t = Mapping::populate_in_background(&map, 0, len, move || {
            a.fetch_add(1, Relaxed);
            (!s.load(Relaxed)).then_some(4 * page)
        })
        .expect("a thread");
        // Caught up at 4 pages, it keeps asking (after naps) and does not end on its own.
        while asked.load(Relaxed) < 3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!t.is_finished());
        stop.store(true, Relaxed);
        t.join().unwrap();
    }
}
