//! Per-segment delete bitmaps. A delete sets one bit; readers test bits with relaxed loads (a delete becomes
//! visible to the next query that starts after the call returns, because the GDT load that starts a query
//! synchronizes with the writer through the index's write lock release).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

#[derive(Debug)]
pub struct DeleteBitmap {
    words: Box<[AtomicU64]>,
    count: AtomicU32,
}

impl DeleteBitmap {
    pub fn new(docs: u32) -> DeleteBitmap {
        DeleteBitmap {
            words: (0..(docs as usize).div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU32::new(0),
        }
    }

    /// Restores a bitmap from its persisted little-endian bytes.
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

    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.load(Relaxed).to_le_bytes()).collect()
    }

    /// Marks `doc` deleted; returns false if it already was.
    pub fn delete(&self, doc: u32) -> bool {
        let (w, bit) = ((doc / 64) as usize, 1u64 << (doc % 64));
        let old = self.words[w].fetch_or(bit, Release);
        let fresh = old & bit == 0;
        if fresh {
            self.count.fetch_add(1, Relaxed);
        }
        fresh
    }

    #[inline]
    pub fn is_deleted(&self, doc: u32) -> bool {
        self.words.get((doc / 64) as usize).is_some_and(|w| w.load(Acquire) & (1 << (doc % 64)) != 0)
    }

    pub fn count(&self) -> u32 {
        self.count.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_bytes() {
        let b = DeleteBitmap::new(130);
        assert!(b.delete(0) && b.delete(129) && !b.delete(129));
        assert!(b.is_deleted(129) && !b.is_deleted(128) && !b.is_deleted(5000));
        let c = DeleteBitmap::from_bytes(130, &b.to_bytes());
        assert_eq!(c.count(), 2);
        assert!(c.is_deleted(0) && c.is_deleted(129));
    }
}
