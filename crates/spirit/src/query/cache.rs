//! The result cache of SPIRIT §4.11: answers of repeated queries over the *sealed* part of the index, reused
//! while the index keeps growing.
//!
//! An entry holds, for one planned query and one order, the best `capacity` documents of every segment up to
//! a segment id (its *coverage*: the sealed, immutable prefix of the GDT when the entry was made), how many
//! documents matched there, and what is needed to prove a later answer exact. A hit evaluates only the
//! segments newer than the coverage and merges them with the cached candidates, as SPIRIT does; SPIRIT
//! orders by recency, so its cached doc ids never go stale. Under BM25 they can: statistics move as documents
//! arrive, so a cached score is not today's score. A hit therefore *re-scores* the cached candidates under
//! the current statistics (the same scorers at the same documents: bit-identical to an uncached run) and
//! proves that no document left out of the entry can reach the top k: a left-out document scored at most
//! `θ` (the entry's `capacity`-th score) under the old statistics, and each term's contribution can have grown
//! by at most `idf_new / idf_old · max(1, avgdl_new / avgdl_old)`, so it scores at most `F · θ` now. If the
//! k-th score of the merged answer is above that bound the answer is exact; otherwise the query runs in full
//! and the entry is replaced. Deleted candidates are dropped at hit time; exact counts are reused only while no
//! covered document was deleted. Compaction keeps global doc ids (it rewrites consecutive segments in
//! order), so entries survive it; retention, which removes covered documents, invalidates them.
//!
//! The cache is an LRU bounded in bytes. Its capacity is carved out of the shard's DRAM budget (the DRAM heap
//! is mapped that much smaller), so the budget covers it.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// What an entry proves about the documents of its coverage it does not hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Boundary {
    /// Every match of the coverage is in the entry.
    Complete,
    /// Score order: the entry's last candidate (score, doc); every left-out document ranked below it under
    /// the entry's statistics.
    Score(f32, u32),
    /// Newest first: every left-out document is older than every cached one.
    Older,
    /// Field order: every left-out document sorts after this (missing, key, doc) entry.
    Field { missing: bool, key: f64, doc: u32 },
}

/// One cached answer over the coverage.
#[derive(Debug, Clone)]
pub(crate) struct CachedResult {
    /// Newest segment id the entry covers.
    pub upto_id: u32,
    /// Segments in the coverage when the entry was made (fewer later: a compaction inside it).
    pub segments: usize,
    /// Documents (live or deleted) and deleted documents in the coverage when the entry was made.
    pub docs: u64,
    pub deleted: u64,
    /// Matching live documents in the coverage; exact if `count_exact`, else a lower bound.
    pub count: u64,
    pub count_exact: bool,
    /// Candidates kept (the entry answers queries asking for at most this many hits).
    pub capacity: usize,
    pub boundary: Boundary,
    /// Per scoring leaf of the query, in plan order: (idf, avgdl) when the entry was made.
    pub leaves: Vec<(f32, f32)>,
    /// Candidate global doc ids, in result order (best first).
    pub docs_in_order: Vec<u32>,
    /// With field order: each candidate's value.
    pub values: Vec<Option<f64>>,
    /// With score order: each candidate's score under the entry's statistics (reused while they hold).
    pub scores: Vec<f32>,
}

impl CachedResult {
    fn bytes(&self, key: &str) -> usize {
        // Key (twice: map and recency index), candidates, values, leaves, and fixed overhead.
        2 * key.len()
            + self.docs_in_order.len() * 4
            + self.values.len() * 16
            + self.scores.len() * 4
            + self.leaves.len() * 8
            + std::mem::size_of::<CachedResult>()
            + 64
    }
}

/// Counters and occupancy, for `stats` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CacheStats {
    pub capacity_bytes: usize,
    pub used_bytes: usize,
    /// Most bytes ever in use.
    pub high_water_bytes: usize,
    pub entries: usize,
    /// Answered from an entry (plus the segments newer than it).
    pub hits: u64,
    /// No entry for the query.
    pub misses: u64,
    /// An entry existed but could not prove the answer exact (or retention removed covered documents, or
    /// fewer candidates than asked, or an exact count after deletes): the query ran in full.
    pub stale: u64,
    pub evictions: u64,
    /// hits / (hits + misses + stale); 0 before the first lookup.
    pub hit_rate: f64,
}

struct Slot {
    tick: u64,
    bytes: usize,
    entry: Arc<CachedResult>,
}

#[derive(Default)]
struct Lru {
    map: HashMap<Arc<str>, Slot>,
    /// Recency: tick → key, oldest first.
    order: BTreeMap<u64, Arc<str>>,
    tick: u64,
    used: usize,
}

/// An LRU of [`CachedResult`]s bounded in bytes; shared by the query threads of one shard.
pub struct ResultCache {
    capacity: usize,
    min_work: u64,
    lru: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
    stale: AtomicU64,
    evictions: AtomicU64,
    /// The most bytes held at once: an atomic beside the lock, so the pipeline's threads (the manifest
    /// records it) read it without taking the lock queries take.
    high_water: AtomicUsize,
}

impl ResultCache {
    /// A cache of at most `capacity` bytes (0: disabled) for queries whose estimated work (postings of their
    /// terms, documents scanned) is at least `min_work`: below that, evaluating is about as fast as a hit
    /// and an entry would only take room.
    pub fn new(capacity: usize, min_work: u64) -> ResultCache {
        ResultCache {
            capacity,
            min_work,
            lru: Mutex::new(Lru::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            high_water: AtomicUsize::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The least estimated work of a query worth caching.
    pub fn min_work(&self) -> u64 {
        self.min_work
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<CachedResult>> {
        let mut l = self.lru.lock();
        l.tick += 1;
        let tick = l.tick;
        let slot = l.map.get_mut(key)?;
        let old = std::mem::replace(&mut slot.tick, tick);
        let entry = slot.entry.clone();
        if let Some(k) = l.order.remove(&old) {
            l.order.insert(tick, k);
        }
        Some(entry)
    }

    /// Stores `entry` under `key`, evicting the least recently used entries to make room. Entries larger
    /// than an eighth of the cache are not stored. The entries it replaces are dropped (their memory freed)
    /// after the lock is released, not while other queries wait for it.
    pub(crate) fn put(&self, key: &str, entry: CachedResult) {
        let bytes = entry.bytes(key);
        if bytes > self.capacity / 8 {
            return;
        }
        let k: Arc<str> = Arc::from(key);
        let entry = Arc::new(entry);
        let mut gone = Vec::new();
        let mut l = self.lru.lock();
        l.tick += 1;
        let tick = l.tick;
        if let Some(old) = l.map.remove(key) {
            l.order.remove(&old.tick);
            l.used -= old.bytes;
            gone.push(old);
        }
        while l.used + bytes > self.capacity {
            let Some((_, k)) = l.order.pop_first() else { break };
            if let Some(s) = l.map.remove(&k) {
                l.used -= s.bytes;
                self.evictions.fetch_add(1, Relaxed);
                gone.push(s);
            }
        }
        l.order.insert(tick, k.clone());
        l.map.insert(k, Slot { tick, bytes, entry });
        l.used += bytes;
        self.high_water.fetch_max(l.used, Relaxed);
        debug_assert!(l.used <= self.capacity);
        drop(l);
        drop(gone);
    }

    /// The most bytes the cache has held at once, without its lock.
    pub fn high_water_bytes(&self) -> usize {
        self.high_water.load(Relaxed)
    }

    /// Drops every entry (counters stay).
    pub fn clear(&self) {
        let mut l = self.lru.lock();
        let gone = std::mem::take(&mut l.map);
        l.order.clear();
        l.used = 0;
        drop(l);
        drop(gone);
    }

    pub(crate) fn record_hit(&self) {
        self.hits.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_miss(&self) {
        self.misses.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_stale(&self) {
        self.stale.fetch_add(1, Relaxed);
    }

    pub fn stats(&self) -> CacheStats {
        let l = self.lru.lock();
        let (hits, misses, stale) =
            (self.hits.load(Relaxed), self.misses.load(Relaxed), self.stale.load(Relaxed));
        let lookups = hits + misses + stale;
        CacheStats {
            capacity_bytes: self.capacity,
            used_bytes: l.used,
            high_water_bytes: self.high_water.load(Relaxed),
            entries: l.map.len(),
            hits,
            misses,
            stale,
            evictions: self.evictions.load(Relaxed),
            hit_rate: if lookups == 0 { 0.0 } else { hits as f64 / lookups as f64 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: usize) -> CachedResult {
        CachedResult {
            upto_id: 0,
            segments: 0,
            docs: 0,
            deleted: 0,
            count: 0,
            count_exact: true,
            capacity: n,
            boundary: Boundary::Complete,
            leaves: vec![],
            docs_in_order: vec![0; n],
            values: vec![],
            scores: vec![],
        }
    }

    #[test]
    fn lru_stays_within_its_bytes_and_evicts_the_least_recently_used() {
        let one = entry(100).bytes("q00");
        let c = ResultCache::new(one * 10, 0);
        for i in 0..10 {
            c.put(&format!("q{i:02}"), entry(100));
        }
        assert_eq!(c.stats().entries, 10);
        assert!(c.get("q00").is_some()); // q0 is now the most recent
        c.put("q10", entry(100));
        let s = c.stats();
        assert!(s.used_bytes <= s.capacity_bytes);
        assert_eq!(s.evictions, 1);
        assert!(c.get("q00").is_some());
        assert!(c.get("q01").is_none(), "the least recently used entry goes first");
        // Replacing an entry does not double-count it.
        c.put("q10", entry(100));
        assert_eq!(c.stats().used_bytes, s.used_bytes);
        // Too large for the cache: not stored.
        c.put("big", entry(one * 4));
        assert!(c.get("big").is_none());
        c.clear();
        assert_eq!(c.stats().used_bytes, 0);
        assert!(ResultCache::new(0, 0).stats().capacity_bytes == 0 && !ResultCache::new(0, 0).enabled());
    }
}
