//! Free space of the persistent heap: which extents below the bump head may be handed out again.
//!
//! Compaction, retention and checkpoints leave whole extents behind (segment images, superseded merged
//! dictionaries, old manifests). They come back here, but not at once: an extent is *retired* while a durable
//! checkpoint may still point at it, and becomes *free* only once a checkpoint that started after its release
//! is durable (crash-safe mode; see [`Space::release`]). A crash loses this map, which is fine: at open the
//! shard recomputes it as the complement of everything its recovered state refers to
//! ([`Space::rebuild`]). Before that, allocation is bump-only.
//!
//! Extents are 64-byte aligned and multiples of 64 bytes; neighbours coalesce. Allocation is first fit by
//! address, which keeps live data packed towards the start of the file.

use std::collections::BTreeMap;

/// Alignment and size granule of every extent.
pub const GRANULE: u64 = 64;

/// Rounds a length up to the granule.
pub fn round(len: u64) -> u64 {
    len.div_ceil(GRANULE) * GRANULE
}

#[derive(Debug, Default)]
pub struct Space {
    /// Reusable extents: offset → length, coalesced.
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
    /// Released extents waiting for a checkpoint: (offset, length, checkpoints started at release).
    pending: Vec<(u64, u64, u64)>,
    pending_bytes: u64,
    /// Checkpoints started so far.
    started: u64,
    /// Crash-safe: released extents wait for a durable checkpoint; otherwise they are free at once.
    gated: bool,
    /// Whether the map is known (after `rebuild`); before, releases are forgotten (the next rebuild finds
    /// them anyway, since nothing refers to them).
    tracking: bool,
}

impl Space {
    pub fn set_gated(&mut self, gated: bool) {
        self.gated = gated;
    }

    /// Bytes that can be handed out again, and bytes waiting for a checkpoint.
    pub fn bytes(&self) -> (u64, u64) {
        (self.free_bytes, self.pending_bytes)
    }

    /// Number of free extents (fragmentation, for stats).
    pub fn extents(&self) -> usize {
        self.free.len()
    }

    /// Sets the map to the complement of `live` (offset, length) in `[start, head)`. Live extents may
    /// overlap and come in any order.
    pub fn rebuild(&mut self, start: u64, head: u64, live: &mut [(u64, u64)]) {
        live.sort_unstable();
        self.free.clear();
        self.free_bytes = 0;
        self.pending.clear();
        self.pending_bytes = 0;
        let mut at = start.div_ceil(GRANULE) * GRANULE;
        for &(off, len) in live.iter() {
            let (a, b) = (off / GRANULE * GRANULE, round(off + len));
            if a > at && at < head {
                self.insert(at, a.min(head) - at);
            }
            at = at.max(b);
        }
        if at < head {
            let end = head / GRANULE * GRANULE;
            if end > at {
                self.insert(at, end - at);
            }
        }
        self.tracking = true;
    }

    fn insert(&mut self, mut off: u64, mut len: u64) {
        debug_assert!(off.is_multiple_of(GRANULE) && len.is_multiple_of(GRANULE) && len > 0);
        self.free_bytes += len;
        // Coalesce with the neighbour before and after.
        if let Some((&p, &pl)) = self.free.range(..off).next_back() {
            assert!(p + pl <= off, "double free of persistent extent {off}+{len} (overlaps {p}+{pl})");
            if p + pl == off {
                self.free.remove(&p);
                off = p;
                len += pl;
            }
        }
        if let Some((&n, &nl)) = self.free.range(off..).next() {
            assert!(off + len <= n, "double free of persistent extent {off}+{len} (overlaps {n}+{nl})");
            if off + len == n {
                self.free.remove(&n);
                len += nl;
            }
        }
        self.free.insert(off, len);
    }

    /// Takes `len` bytes (rounded up to the granule) from the lowest free extent that holds them.
    pub fn take(&mut self, len: u64) -> Option<u64> {
        let len = round(len.max(1));
        let (&off, &have) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&off);
        if have > len {
            self.free.insert(off + len, have - len);
        }
        self.free_bytes -= len;
        Some(off)
    }

    /// Gives an extent back. Crash-safe: it waits for a checkpoint that starts after this call to become
    /// durable (the last durable checkpoint may still refer to it).
    pub fn release(&mut self, off: u64, len: u64) {
        if !self.tracking || len == 0 {
            return;
        }
        let (a, b) = (off / GRANULE * GRANULE, round(off + len));
        if self.gated {
            self.pending.push((a, b - a, self.started));
            self.pending_bytes += b - a;
        } else {
            self.insert(a, b - a);
        }
    }

    /// A checkpoint starts; returns its ticket for [`checkpoint_durable`](Self::checkpoint_durable).
    pub fn checkpoint_started(&mut self) -> u64 {
        self.started += 1;
        self.started - 1
    }

    /// The checkpoint with `ticket` is durable: extents released before it started are free.
    pub fn checkpoint_durable(&mut self, ticket: u64) {
        let ready: Vec<(u64, u64, u64)> = self.pending.iter().copied().filter(|p| p.2 <= ticket).collect();
        self.pending.retain(|p| p.2 > ticket);
        for (off, len, _) in ready {
            self.pending_bytes -= len;
            self.insert(off, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuild_take_release_coalesce() {
        let mut s = Space::default();
        // Before tracking, releases are ignored.
        s.release(4096, 64);
        assert_eq!(s.bytes(), (0, 0));
        s.rebuild(4096, 4096 + 1024, &mut [(4096 + 128, 100), (4096 + 192, 10), (4096 + 512, 64)]);
        // Free: [4096, 4224), [4352, 4608), [4672, 5120).
        assert_eq!(s.bytes().0, 128 + 256 + 448);
        assert_eq!(s.take(200), Some(4352));
        assert_eq!(s.take(64), Some(4096));
        assert_eq!(s.take(10_000), None);
        s.release(4096, 64);
        s.release(4352, 200);
        // [4096,4224) and [4352,4608) are free again, [4224,4352) is not.
        assert_eq!(s.take(256), Some(4352));
        assert_eq!(s.extents(), 2);
    }

    #[test]
    fn gated_release_waits_for_a_later_checkpoint() {
        let mut s = Space::default();
        s.rebuild(0, 0, &mut []);
        s.set_gated(true);
        let t0 = s.checkpoint_started();
        s.release(640, 64);
        // A checkpoint that started before the release does not free it.
        s.checkpoint_durable(t0);
        assert_eq!(s.bytes(), (0, 64));
        let t1 = s.checkpoint_started();
        s.checkpoint_durable(t1);
        assert_eq!(s.bytes(), (64, 0));
        assert_eq!(s.take(1), Some(640));
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let mut s = Space::default();
        s.rebuild(0, 1024, &mut [(0, 1024)]);
        s.release(64, 64);
        s.release(64, 64);
    }
}
