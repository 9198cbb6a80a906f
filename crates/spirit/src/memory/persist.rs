//! The persistence barrier (DESIGN.md §4): the one function that makes a range of the persistent heap
//! durable, in three implementations.
//!
//! * **DAX** (`MAP_SYNC` granted at open): the mapping *is* persistent memory; a range is durable once each of
//!   its cache lines is written back (`clwb`, else `clflushopt`, else `clflush`, chosen by CPUID) and an
//!   `sfence` orders the write-backs before anything that follows.
//! * **msync**: ordinary file systems; `msync(MS_SYNC)` of the pages covering the range.
//! * **Simulated persistence domain** ([`SimDomain`]): for crash tests. Besides the real file, it keeps the
//!   log of every persisted range (the bytes as they were at the barrier). The durable image after barrier
//!   *n* is the replay of the first *n* entries: exactly what persistent memory would hold had the machine
//!   died right after that barrier — every store not yet persisted is gone. A crash can also tear the next
//!   barrier's range at 8-byte granularity (an arbitrary subset of its words survives), which is what real
//!   hardware guarantees: aligned 8-byte stores are atomic, nothing larger is.
//!
//! Every persistent structure is written so that any such image is recoverable: data first, a barrier, then
//! the 8-byte pointer or checksummed record that publishes it, then a barrier.

use parking_lot::Mutex;
use std::sync::Arc;

/// How a heap makes ranges durable.
#[derive(Clone)]
pub enum Barrier {
    /// `msync(MS_SYNC)` of the covering pages.
    Msync,
    /// Cache-line write-back plus `sfence` on a `MAP_SYNC` mapping.
    Dax(FlushKind),
    /// Copy into a simulated durable image (tests).
    Sim(Arc<SimDomain>),
}

impl std::fmt::Debug for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Barrier::Msync => write!(f, "msync"),
            Barrier::Dax(k) => write!(f, "dax ({k:?})"),
            Barrier::Sim(_) => write!(f, "simulated"),
        }
    }
}

/// The cache-line write-back instruction this CPU offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushKind {
    /// Writes back without evicting (keeps the line cached).
    Clwb,
    /// Writes back and evicts, weakly ordered.
    Clflushopt,
    /// Writes back and evicts, strongly ordered (every x86-64 has it).
    Clflush,
    /// Not x86-64: fall back to `msync` semantics by the caller.
    None,
}

impl FlushKind {
    /// The best write-back instruction of this CPU (CPUID leaf 7: EBX bit 24 is CLWB, bit 23 CLFLUSHOPT).
    pub fn detect() -> FlushKind {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID exists on every x86-64 CPU; leaf 7 is valid when the maximum leaf (checked first) is >= 7.
            let max_leaf = std::arch::x86_64::__cpuid(0).eax;
            if max_leaf >= 7 {
                let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
                if ebx & (1 << 24) != 0 {
                    return FlushKind::Clwb;
                }
                if ebx & (1 << 23) != 0 {
                    return FlushKind::Clflushopt;
                }
            }
            FlushKind::Clflush
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushKind::None
    }
}

const CACHE_LINE: usize = 64;

/// Writes back every cache line of `[ptr, ptr+len)` and fences. Returns `false` if this CPU has no such
/// instruction (the caller then falls back to `msync`).
///
/// # Safety
/// `ptr..ptr+len` must be mapped memory of this process.
pub unsafe fn flush_range(kind: FlushKind, ptr: *const u8, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let start = ptr as usize & !(CACHE_LINE - 1);
        let end = ptr as usize + len;
        let mut p = start;
        while p < end {
            // SAFETY: the caller guarantees the range is mapped; write-back instructions neither change
            // memory contents nor fault on mapped addresses.
            unsafe {
                match kind {
                    FlushKind::Clwb => std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack)),
                    FlushKind::Clflushopt => {
                        std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack))
                    }
                    FlushKind::Clflush | FlushKind::None => std::arch::x86_64::_mm_clflush(p as *const u8),
                }
            }
            p += CACHE_LINE;
        }
        // SAFETY: SFENCE is part of the x86-64 baseline (SSE).
        unsafe { std::arch::x86_64::_mm_sfence() };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, ptr);
        false
    }
}

/// One event of the simulated persistence domain.
#[derive(Debug, Clone)]
enum SimEvent {
    /// A barrier: these bytes at this offset are now durable.
    Persist { off: u64, bytes: Vec<u8> },
    /// The file grew (fallocate is durable once a later barrier syncs the file).
    Resize { len: u64 },
}

/// A simulated persistence domain for one heap file: the ordered log of everything ever persisted.
#[derive(Default)]
pub struct SimDomain {
    /// What was durable before the first event (a crash image being recovered, for crashes during recovery).
    base: Vec<u8>,
    events: Mutex<Vec<SimEvent>>,
}

impl SimDomain {
    pub fn new() -> Arc<SimDomain> {
        Arc::new(SimDomain::default())
    }

    /// A domain whose durable image starts as `base` (the file being opened).
    pub fn with_base(base: Vec<u8>) -> Arc<SimDomain> {
        Arc::new(SimDomain { base, events: Mutex::new(vec![]) })
    }

    pub(crate) fn record_persist(&self, off: u64, bytes: &[u8]) {
        self.events.lock().push(SimEvent::Persist { off, bytes: bytes.to_vec() });
    }

    pub(crate) fn record_resize(&self, len: u64) {
        self.events.lock().push(SimEvent::Resize { len });
    }

    /// Offset and length of barrier `n` (1-based), for diagnostics.
    pub fn barrier_range(&self, n: usize) -> Option<(u64, usize)> {
        self.events
            .lock()
            .iter()
            .filter_map(|e| match e {
                SimEvent::Persist { off, bytes } => Some((*off, bytes.len())),
                SimEvent::Resize { .. } => None,
            })
            .nth(n.checked_sub(1)?)
    }

    /// Number of persist barriers so far: the crash points are `0..=barriers()`.
    pub fn barriers(&self) -> usize {
        self.events.lock().iter().filter(|e| matches!(e, SimEvent::Persist { .. })).count()
    }

    /// The durable image had the machine crashed right after barrier `n` (1-based; `n = barriers()` is the
    /// final state). With `tear = Some(seed)`, the range of barrier `n + 1` (if any) is half written: each of
    /// its aligned 8-byte words independently made it or not (a deterministic function of `seed`).
    pub fn image_after(&self, n: usize, tear: Option<u64>) -> Vec<u8> {
        let events = self.events.lock();
        let mut img: Vec<u8> = self.base.clone();
        let mut seen = 0;
        let mut rng = tear.unwrap_or(0) | 1;
        for e in events.iter() {
            match e {
                SimEvent::Resize { len } => {
                    if (*len as usize) > img.len() {
                        img.resize(*len as usize, 0);
                    }
                }
                SimEvent::Persist { off, bytes } => {
                    let off = *off as usize;
                    if img.len() < off + bytes.len() {
                        img.resize(off + bytes.len(), 0);
                    }
                    if seen < n {
                        img[off..off + bytes.len()].copy_from_slice(bytes);
                        seen += 1;
                        continue;
                    }
                    if tear.is_some() {
                        // Word-granular tearing: aligned 8-byte words either made it or not.
                        let mut i = 0;
                        while i < bytes.len() {
                            let w_end = ((off + i) / 8 * 8 + 8 - off).min(bytes.len());
                            if crate::rng::xorshift(&mut rng) & 1 == 1 {
                                img[off + i..off + w_end].copy_from_slice(&bytes[i..w_end]);
                            }
                            i = w_end;
                        }
                    }
                    break;
                }
            }
        }
        img
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_domain_replays_prefixes_and_tears_words() {
        let d = SimDomain::new();
        d.record_resize(64);
        d.record_persist(0, &[1u8; 16]);
        d.record_persist(8, &[2u8; 32]);
        assert_eq!(d.barriers(), 2);
        assert_eq!(d.image_after(0, None), vec![0u8; 64]);
        let one = d.image_after(1, None);
        assert_eq!(&one[..16], &[1u8; 16]);
        assert_eq!(&one[16..], &[0u8; 48]);
        let two = d.image_after(2, None);
        assert_eq!(&two[..8], &[1u8; 8]);
        assert_eq!(&two[8..40], &[2u8; 32]);
        // A torn second barrier: every 8-byte word is either all old or all new, and some seed mixes both.
        let mut mixed = false;
        for seed in 0..16 {
            let t = d.image_after(1, Some(seed));
            let words: Vec<bool> = (8..40).step_by(8).map(|w| t[w] == 2).collect();
            for w in (8..40).step_by(8) {
                assert!(t[w..w + 8].iter().all(|&b| b == t[w]), "word torn inside");
            }
            mixed |= words.iter().any(|&x| x) && words.iter().any(|&x| !x);
        }
        assert!(mixed);
    }

    #[test]
    fn cache_line_flush_runs_on_ordinary_memory() {
        let kind = FlushKind::detect();
        let buf = vec![7u8; 4096];
        // SAFETY: the buffer is mapped memory of this process.
        let ok = unsafe { flush_range(kind, buf.as_ptr().wrapping_add(3), 1000) };
        assert_eq!(ok, cfg!(target_arch = "x86_64"));
        assert_eq!(buf[5], 7);
    }
}
