//! Per-segment delete bitmaps, read consistently with a query's snapshot.
//!
//! A delete sets one bit, under the shard's writer lock. Queries test bits with one acquire load each and
//! see the delete from the moment it is made — which alone would let a search running while a document is
//! *replaced* find neither version (the new one lies past the snapshot's watermark, the old one's bit is set
//! while the query runs) or both (the new one within the watermark, the old one's bit not yet set when the
//! query passes it).
//!
//! So every delete carries a *stamp*, a global doc id of its shard: the delete belongs to every snapshot that
//! sees doc ids below the stamp and to none other. An update deletes the old version with the new version's
//! doc id, *before* the new version is added (and undoes the delete if the add fails), so a snapshot sees the
//! old version exactly when it does not see the new one. A plain delete is stamped with the newest doc id
//! there is, so every snapshot taken after it sees it.
//!
//! A snapshot that sees doc ids below `visible_end` ([`DeletesAt`]) needs the stamp only of a delete whose
//! stamp is at least that — one made after the query began, or in flight when it did. Stamps never decrease
//! (doc ids only grow), so each bitmap keeps its newest [`LATE_DELETES`] deletes in a ring, and a query
//! finds a set bit's stamp there, newest first, stopping at the first stamp below its `visible_end`; one
//! load says when no stamp can be (the newest). A query that outlives more than [`LATE_DELETES`] deletes
//! in one segment, and then meets one of the earliest, counts it deleted (as if stamps did not exist).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

/// Deletes remembered with their stamps, per segment.
pub const LATE_DELETES: usize = 64;

#[derive(Debug)]
pub struct DeleteBitmap {
    words: Box<[AtomicU64]>,
    count: AtomicU32,
    /// The highest stamp of any delete (stamps never decrease, so also the newest's).
    newest_stamp: AtomicU32,
    /// Deletes made so far (the ring's next slot is `made % LATE_DELETES`).
    made: AtomicU64,
    /// `(doc << 32) | stamp` of the newest deletes.
    ring: [AtomicU64; LATE_DELETES],
}

impl DeleteBitmap {
    pub fn new(docs: u32) -> DeleteBitmap {
        DeleteBitmap {
            words: (0..(docs as usize).div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU32::new(0),
            newest_stamp: AtomicU32::new(0),
            made: AtomicU64::new(0),
            ring: [const { AtomicU64::new(0) }; LATE_DELETES],
        }
    }

    /// Restores a bitmap from its persisted little-endian bytes: deletes every snapshot sees.
    pub fn from_bytes(docs: u32, bytes: &[u8]) -> DeleteBitmap {
        let b = DeleteBitmap::new(docs);
        let mut n = 0;
        for (w, chunk) in b.words.iter().zip(bytes.chunks(8)) {
            let mut x = [0u8; 8];
            x[..chunk.len()].copy_from_slice(chunk);
            let v = u64::from_le_bytes(x);
            n += v.count_ones();
            w.store(v, Relaxed);
        }
        b.count.store(n, Relaxed);
        b
    }

    /// The bits as they are now, one word per 64 docs (compaction's purge set, read under the writer lock).
    pub fn words(&self) -> Vec<u64> {
        self.words.iter().map(|w| w.load(Acquire)).collect()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.load(Relaxed).to_le_bytes()).collect()
    }

    /// Marks `doc` deleted for every snapshot that sees doc ids below `stamp` (see the module doc); returns
    /// false if it already was deleted. The caller holds the shard's writer lock: one writer at a time, and
    /// stamps in the order deletes are made never decrease — except after an [`undelete`](Self::undelete),
    /// whose entry may keep a higher stamp than later ones; its doc's bit is clear (or set again by a newer
    /// entry, found first), so no query needs it, and the early stop of a ring scan stays right.
    pub fn delete(&self, doc: u32, stamp: u32) -> bool {
        if self.is_deleted(doc) {
            return false;
        }
        // The ring entry and the newest stamp are published before the bit: a query that sees the bit
        // (acquire) sees them. A query scanning the ring newest first reads slots with acquire loads, so once
        // it sees a slot overwritten it sees every older slot overwritten too (written earlier).
        let made = self.made.load(Relaxed);
        self.ring[made as usize % LATE_DELETES].store(((doc as u64) << 32) | stamp as u64, Release);
        self.made.store(made + 1, Release);
        self.newest_stamp.fetch_max(stamp, Release);
        self.count.fetch_add(1, Release);
        self.words[(doc / 64) as usize].fetch_or(1 << (doc % 64), Release);
        true
    }

    /// A delete every snapshot sees (a bitmap filled from older ones, under the writer lock).
    pub fn delete_settled(&self, doc: u32) {
        let old = self.words[(doc / 64) as usize].fetch_or(1 << (doc % 64), Release);
        if old & (1 << (doc % 64)) == 0 {
            self.count.fetch_add(1, Release);
        }
    }

    /// Undoes [`delete`](Self::delete) of `doc` (an update whose add failed): the old version is live again
    /// for every snapshot, as it was for those that did not see the stamp.
    pub fn undelete(&self, doc: u32) {
        let old = self.words[(doc / 64) as usize].fetch_and(!(1 << (doc % 64)), Release);
        if old & (1 << (doc % 64)) != 0 {
            self.count.fetch_sub(1, Release);
        }
    }

    /// Whether `doc`'s bit is set: deleted for a snapshot taken now (the writer lock's holder, a get's
    /// second look). Queries read [`DeletesAt`].
    #[inline]
    pub fn is_deleted(&self, doc: u32) -> bool {
        self.words.get((doc / 64) as usize).is_some_and(|w| w.load(Acquire) & (1 << (doc % 64)) != 0)
    }

    pub fn count(&self) -> u32 {
        self.count.load(Acquire)
    }

    /// The bitmap as a snapshot that sees doc ids below `visible_end` reads it.
    pub fn at(&self, visible_end: u32) -> DeletesAt<'_> {
        DeletesAt { bitmap: self, visible_end }
    }

    /// Whether no delete made so far is hidden from a snapshot that sees doc ids below `visible_end` (no
    /// stamp reaches it). Stamps only grow: true now means true for every earlier moment too.
    pub fn settled_for(&self, visible_end: u32) -> bool {
        self.made.load(Acquire) == 0 || self.newest_stamp.load(Acquire) < visible_end
    }

    /// The stamp of set bit `doc`'s delete if it is one of the deletes stamped `visible_end` or later (see
    /// the module doc); `None` when it is older, or when the ring no longer tells.
    #[cold]
    fn late_stamp(&self, doc: u32, visible_end: u32) -> Option<u32> {
        let made = self.made.load(Acquire);
        for i in (made.saturating_sub(LATE_DELETES as u64)..made).rev() {
            let v = self.ring[i as usize % LATE_DELETES].load(Acquire);
            let (d, stamp) = ((v >> 32) as u32, v as u32);
            if stamp < visible_end {
                // This delete and every older one are the snapshot's (a slot overwritten by a newer delete
                // would hold a stamp at least as high).
                return None;
            }
            if d == doc {
                return Some(stamp);
            }
        }
        None
    }
}

/// A segment's deletes as a snapshot that sees doc ids below `visible_end` reads them.
#[derive(Clone, Copy, Debug)]
pub struct DeletesAt<'a> {
    bitmap: &'a DeleteBitmap,
    visible_end: u32,
}

impl DeletesAt<'_> {
    /// Whether `doc` is deleted in the snapshot: its bit is set by a delete stamped below `visible_end`.
    #[inline]
    pub fn is_deleted(&self, doc: u32) -> bool {
        self.bitmap.is_deleted(doc)
            && (self.bitmap.newest_stamp.load(Acquire) < self.visible_end
                || self.bitmap.late_stamp(doc, self.visible_end).is_none())
    }

    /// Set bits (an upper bound of the snapshot's deletes: a bit set after it may not be its).
    pub fn count(&self) -> u32 {
        self.bitmap.count()
    }

    /// See [`DeleteBitmap::settled_for`].
    pub fn settled(&self) -> bool {
        self.bitmap.settled_for(self.visible_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_bytes() {
        let b = DeleteBitmap::new(130);
        assert!(b.delete(0, 0) && b.delete(129, 0) && !b.delete(129, 0));
        assert!(b.is_deleted(129) && !b.is_deleted(128) && !b.is_deleted(5000));
        let c = DeleteBitmap::from_bytes(130, &b.to_bytes());
        assert_eq!(c.count(), 2);
        assert!(c.is_deleted(0) && c.is_deleted(129));
        c.undelete(0);
        c.undelete(0);
        assert!(!c.is_deleted(0) && c.count() == 1);
        c.delete_settled(0);
        c.delete_settled(0);
        assert!(c.is_deleted(0) && c.count() == 2 && c.settled_for(0));
    }

    #[test]
    fn a_snapshot_sees_the_deletes_stamped_below_its_end() {
        let b = DeleteBitmap::new(100);
        b.delete(3, 10); // an update: doc 3 replaced by doc 10
        b.delete(5, 12);
        for end in [0, 10, 11, 12, 13, 1000] {
            let at = b.at(end);
            assert_eq!(at.is_deleted(3), end > 10, "end {end}");
            assert_eq!(at.is_deleted(5), end > 12, "end {end}");
            assert!(!at.is_deleted(4));
            assert_eq!(at.settled(), end > 12);
        }
        b.undelete(5);
        assert!(!b.at(1000).is_deleted(5) && !b.at(0).is_deleted(5));
        // Deleted again by a later update: the newest entry is the one that counts.
        b.delete(5, 20);
        assert!(!b.at(15).is_deleted(5) && b.at(21).is_deleted(5));
    }

    #[test]
    fn beyond_the_ring_older_deletes_count_as_deleted() {
        let n = LATE_DELETES as u32 * 3;
        let b = DeleteBitmap::new(n);
        for d in 0..n {
            b.delete(d, 1000 + d);
        }
        // A snapshot older than every stamp: the newest LATE_DELETES are hidden from it, the others (no
        // longer in the ring) count as deleted.
        let at = b.at(0);
        let hidden = (0..n).filter(|&d| !at.is_deleted(d)).count();
        assert_eq!(hidden, LATE_DELETES);
        assert!((n - LATE_DELETES as u32..n).all(|d| !at.is_deleted(d)));
        // A snapshot in the middle: stamps below its end are its deletes, the rest within the ring hidden.
        let mid = 1000 + n - 10;
        let at = b.at(mid);
        assert!((0..n).all(|d| at.is_deleted(d) == (1000 + d < mid)));
    }
}
