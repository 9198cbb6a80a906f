//! A FIFO ring allocator over `[0, capacity)`: allocations are carved at the head, frees normally happen
//! in allocation order (segments are flushed and committed oldest first), and an out-of-order free only
//! marks its slot; the tail advances over every freed prefix. This is the SPIRIT §4.4 allocator, which
//! makes freeing a whole segment a pointer bump.

use std::collections::VecDeque;

/// Every allocation is rounded up to this many bytes (cache line), which also aligns u64 views.
pub(crate) const RING_ALIGN: usize = 64;

#[derive(Debug)]
pub(crate) struct Ring {
    capacity: usize,
    /// Live (and freed-but-not-yet-reclaimed) allocations, oldest first: (offset, len, freed).
    allocs: VecDeque<(usize, usize, bool)>,
    used: usize,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Ring {
        Ring { capacity: capacity / RING_ALIGN * RING_ALIGN, allocs: VecDeque::new(), used: 0 }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held by allocations not yet reclaimed.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Allocates `len` bytes (rounded up), or `None` if no contiguous room exists now.
    pub(crate) fn alloc(&mut self, len: usize) -> Option<(usize, usize)> {
        let len = len.max(1).div_ceil(RING_ALIGN) * RING_ALIGN;
        if len > self.capacity {
            return None;
        }
        let off = match (self.allocs.front(), self.allocs.back()) {
            (None, _) | (_, None) => 0,
            (Some(&(tail, _, _)), Some(&(last, last_len, _))) => {
                let head = last + last_len;
                if last >= tail {
                    // Not wrapped: free space is [head, capacity) and [0, tail).
                    if head + len <= self.capacity {
                        head
                    } else if len <= tail {
                        0
                    } else {
                        return None;
                    }
                } else if head + len <= tail {
                    head
                } else {
                    return None;
                }
            }
        };
        self.allocs.push_back((off, len, false));
        self.used += len;
        Some((off, len))
    }

    /// Frees the allocation at `off`; the space is reusable once every older allocation is freed too.
    pub(crate) fn free(&mut self, off: usize) {
        let slot = self
            .allocs
            .iter_mut()
            .find(|(o, _, freed)| *o == off && !*freed)
            .expect("ring free of an offset that is not allocated");
        slot.2 = true;
        while let Some(&(_, len, true)) = self.allocs.front() {
            self.allocs.pop_front();
            self.used -= len;
        }
    }

    /// Bytes that are freed but wait behind an older live allocation.
    #[cfg(test)]
    pub(crate) fn pending_free(&self) -> usize {
        self.allocs.iter().filter(|a| a.2).map(|a| a.1).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_reuse_and_wrap() {
        let mut r = Ring::new(1024);
        let a = r.alloc(300).unwrap();
        let b = r.alloc(300).unwrap();
        let c = r.alloc(300).unwrap();
        assert_eq!((a.0, b.0, c.0), (0, 320, 640));
        assert!(r.alloc(200).is_none(), "ring is full");
        r.free(a.0);
        let d = r.alloc(200).unwrap();
        assert_eq!(d.0, 0, "wraps to the start once the oldest is freed");
        assert!(r.alloc(200).is_none());
        // Out-of-order free: c freed before b does not reclaim anything.
        r.free(c.0);
        assert_eq!(r.pending_free(), 320);
        r.free(b.0);
        assert_eq!(r.used(), 256);
        r.free(d.0);
        assert_eq!(r.used(), 0);
        assert_eq!(r.alloc(1024).unwrap().0, 0);
    }

    /// The fresh-segment discipline (`ShardConfig::short_term_bytes`): the writer holds the arena it just
    /// sealed while it allocates the next, everything older eventually frees. With arenas of two sizes
    /// (real-time `f`, bulk `b`) a ring of `3b` always has room beside the held one; `2b + f` does not.
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
                let older: Vec<usize> = r.allocs.iter().map(|a| a.0).filter(|&o| o != held).collect();
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
        assert!((1..50).any(|seed| !run(2 * b + f, seed)), "2b + f can leave no room beside the held arena");
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
