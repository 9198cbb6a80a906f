//! The allocator of the DRAM heap's two rings (SPIRIT §4.4's short-term and long-term rings) over
//! `[0, capacity)`: lowest address first fit over the few live blocks (fresh arenas, images awaiting
//! commit), so a block freed in any order is reusable at once and freeing is one removal from a short list.
//!
//! SPIRIT carves its rings FIFO: the head walks the whole capacity before it wraps. On an anonymous mapping
//! that touches every page of the budget, and the first touch of a page is the kernel zeroing it (under a
//! hypervisor, the host backing it too): ingesting the enwiki file with a 1 GB budget, page faults were 11% of
//! the add thread's CPU and 19% of the flusher's, while the rings never held more than a few hundred MiB at
//! once. First fit keeps reusing the same low blocks (two fresh arenas alternate while the flusher keeps up), so
//! the pages touched — and the process's resident memory — follow what the rings hold, not the budget. Frees
//! still come mostly in allocation order (segments are flushed and committed oldest first), so the live list
//! stays a handful of entries long.

/// Every allocation is rounded up to this many bytes (cache line), which also aligns u64 views.
pub(crate) const RING_ALIGN: usize = 64;

#[derive(Debug)]
pub(crate) struct Ring {
    capacity: usize,
    /// Live allocations by offset: (offset, len), disjoint.
    live: Vec<(usize, usize)>,
    used: usize,
    /// The furthest end any allocation ever reached: below it the ring's memory has been handed out (and, on
    /// an anonymous mapping, most likely touched); above it, never.
    reached: usize,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Ring {
        Ring { capacity: capacity / RING_ALIGN * RING_ALIGN, live: Vec::new(), used: 0, reached: 0 }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held by live allocations.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// The furthest end any allocation has reached so far (see [`alloc`](Self::alloc)).
    pub(crate) fn reached(&self) -> usize {
        self.reached
    }

    /// Allocates `len` bytes (rounded up) at the lowest offset where they fit, or `None` if no contiguous
    /// room exists now. [`reached`](Self::reached) read before the call tells whether the block extends into
    /// memory no allocation ever held.
    pub(crate) fn alloc(&mut self, len: usize) -> Option<(usize, usize)> {
        let len = len.max(1).div_ceil(RING_ALIGN) * RING_ALIGN;
        let mut at = 0;
        let mut slot = self.live.len();
        for (i, &(off, l)) in self.live.iter().enumerate() {
            if off - at >= len {
                slot = i;
                break;
            }
            at = off + l;
        }
        if slot == self.live.len() && self.capacity.saturating_sub(at) < len {
            return None;
        }
        self.live.insert(slot, (at, len));
        self.used += len;
        self.reached = self.reached.max(at + len);
        debug_assert!(self.live.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
        Some((at, len))
    }

    /// Frees the allocation at `off`; its space is reusable at once.
    pub(crate) fn free(&mut self, off: usize) {
        let i = self
            .live
            .binary_search_by_key(&off, |&(o, _)| o)
            .expect("ring free of an offset that is not allocated");
        let (_, len) = self.live.remove(i);
        self.used -= len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_reuse() {
        let mut r = Ring::new(1024);
        let a = r.alloc(300).unwrap();
        let b = r.alloc(300).unwrap();
        let c = r.alloc(300).unwrap();
        assert_eq!((a.0, b.0, c.0), (0, 320, 640));
        assert!(r.alloc(200).is_none(), "ring is full");
        r.free(a.0);
        let d = r.alloc(200).unwrap();
        assert_eq!(d.0, 0, "the lowest free block is reused first");
        assert!(r.alloc(200).is_none());
        // Out-of-order free: c freed before b is reusable at once.
        r.free(c.0);
        assert_eq!(r.used(), 256 + 320);
        assert_eq!(r.alloc(300).unwrap().0, 640);
        r.free(640);
        r.free(b.0);
        assert_eq!(r.used(), 256);
        assert_eq!(r.alloc(64).unwrap().0, 256, "fits in the gap right after d");
        r.free(256);
        r.free(d.0);
        assert_eq!(r.used(), 0);
        assert_eq!(r.alloc(1024).unwrap().0, 0);
        assert!(r.alloc(1).is_none());
    }

    /// Two fresh arenas alternate while each is freed before the next but one is needed: the ring's
    /// pages beyond them are never touched.
    #[test]
    fn a_writer_and_a_prompt_flusher_use_two_arenas() {
        let mut r = Ring::new(4 * 1024);
        let mut held = r.alloc(1024).unwrap().0;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100 {
            let next = r.alloc(1024).unwrap().0;
            r.free(held);
            held = next;
            seen.insert(next);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0, 1024]);
        assert_eq!(r.reached(), 2048, "the furthest end ever handed out");
    }

    /// The fresh-segment discipline (`ShardConfig::short_term_bytes`): the writer holds the arena it just
    /// sealed while it allocates the next, everything older eventually frees. With arenas of two sizes
    /// (real-time `f`, bulk `b`) a ring of `3b` always has room beside the held one (a FIFO ring of `2b + f`
    /// did not).
    #[test]
    fn three_bulk_arenas_always_fit_beside_the_held_one() {
        let (f, b) = (64 * RING_ALIGN, 256 * RING_ALIGN);
        let run = |capacity: usize, seed: u64| -> bool {
            let mut r = Ring::new(capacity);
            let mut x = seed;
            let mut held = r.alloc(f).unwrap().0;
            for _ in 0..2000 {
                let len = if crate::rng::xorshift(&mut x).is_multiple_of(3) { f } else { b };
                // Everything older than the held arena has been flushed and freed.
                let older: Vec<usize> = r.live.iter().map(|a| a.0).filter(|&o| o != held).collect();
                for o in older {
                    r.free(o);
                }
                let Some((off, _)) = r.alloc(len) else { return false };
                r.free(held);
                held = off;
            }
            true
        };
        for seed in 1..50 {
            assert!(run(3 * b, seed), "seed {seed}");
        }
    }

    #[test]
    fn never_overlaps() {
        // A random workload: live allocations never overlap and stay within capacity.
        let mut r = Ring::new(4096);
        let mut live: Vec<(usize, usize)> = vec![];
        let mut seed = 12345u64;
        for _ in 0..10_000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if seed.is_multiple_of(3) && !live.is_empty() {
                let i = (seed >> 32) as usize % live.len().min(2);
                let (o, _) = live.remove(i);
                r.free(o);
            } else if let Some(a) = r.alloc(((seed >> 20) % 900) as usize + 1) {
                for &(o, l) in &live {
                    assert!(a.0 + a.1 <= o || o + l <= a.0, "overlap {a:?} with {o},{l}");
                }
                assert!(a.0 + a.1 <= 4096);
                live.push(a);
            }
        }
    }
}
