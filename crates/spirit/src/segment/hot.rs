//! Selective caching (seed 002) of the merged dictionary: the hot part of the persistent dictionary held in
//! DRAM, so resolving a hot term reads no persistent structure at all.
//!
//! Looking a term up in the merged segment probes its persistent hash table (checking each slot passed and
//! the key record's crc), then walks the term's chain — one 32-byte node per merged segment holding the term,
//! scattered over the heap, each checked against its crc. On persistent memory every one of those reads pays
//! the medium's latency; on a file mapping each is at least a cache miss plus a checksum. A [`HotChains`]
//! entry holds a term's chain *resolved*: per node its segment, df, max tf and posting list's place in the
//! heap, verified once when it was cached. A lookup that hits costs one DRAM hash probe.
//!
//! **Hot lists.** Each node also pins its posting list's head in DRAM ([`PinnedList`]): the skip table, and
//! the doc and frequency blocks when they fit in [`HotChains::pin_blocks_limit`], so a hot term's query reads
//! its skip data — and a small list's blocks — from DRAM, and only positions from the heap. Beside the copy,
//! queries keep a table derived from the skip data (per-block score bounds, see `query::eval`), made once
//! and reused by every query under the same scoring parameters.
//!
//! **Freshness.** Chains only ever grow at their head (the merger links a newer segment's node in front), and
//! a snapshot's `merged_upto` says every segment up to it is fully linked. So an entry records the
//! `merged_upto` it is complete for (`upto`) and holds only nodes up to it. A query whose snapshot is at or
//! below `upto` reads the entry alone; a newer one walks only the chain's new head nodes (those above `upto`)
//! and splices the entry's nodes after them, then refreshes the entry. Compaction builds a new dictionary
//! (new places for everything): entries name the dictionary they came from (a process-unique id, increasing
//! with each dictionary made), and the first admission from a newer dictionary empties the cache.
//!
//! **Policy.** The paper found classic replacement (LRU, LFU, 2Q) not to pay off and proposed LLA — evict the
//! entry *least likely to be accessed*, by a fixed access probability, and only for a newcomer more likely
//! than it. Here a term's probability is taken as its document frequency (query terms follow the collection's
//! Zipf law: common terms are the ones asked for most, and the ones whose chains are longest): a full cache
//! admits a term only if evicting entries of lower df makes room for it — otherwise nothing changes (a
//! refreshed term keeps its older entry). Hits take a shared lock and count nothing but an atomic.
//!
//! **Never waited on.** A query only *tries* the table's lock: a lookup that finds it held for an
//! admission walks the chain as on a miss, and an admission that finds it busy is dropped (the term is
//! offered again by its next lookup). Both are counted as `contended`. A query that waited instead could
//! wait for as long as the holder is off its core: in windowed real-time runs the query thread parked on
//! this lock while the ingest thread's probes admitted their terms, about 100 µs per wait on this VM — a
//! rare-term query's time ten times over.
//!
//! **Budget.** The cache's bytes (keys, nodes, pinned heads and tables, bookkeeping) are carved out of the shard's DRAM budget, as the
//! result cache's are: the DRAM heap is mapped that much smaller (`ShardConfig::selective_cache_bytes`).

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// A resolved chain node: where the term's posting list of one merged segment is, and the list's part
/// pinned in DRAM.
#[derive(Debug, Clone)]
pub struct HotNode {
    pub seg_id: u32,
    pub df: u32,
    pub max_tf: u32,
    pub blob_len: u32,
    pub blob_off: u64,
    pub pinned: Option<Arc<PinnedList>>,
}

/// A hot posting list's part held in DRAM: a copy of the head of its blob — header and skip table, and its
/// doc and frequency blocks too when the list is small enough for [`HotChains::pin_blocks_limit`]
/// (positions, read only by phrases, stay where they are) — and a table queries derive from the skip data
/// (per-block score bounds under one set of BM25 parameters; see [`Self::table`]), made on first use.
/// Queries hold an `Arc` of it while they read, so an eviction never pulls bytes from under a cursor.
#[derive(Debug)]
pub struct PinnedList {
    pub head: Box<[u8]>,
    n_blocks: u32,
    table: Mutex<Option<Arc<BlockTable>>>,
}

/// One value per block of a list, derived from its skip data, and the key of what it was derived under.
#[derive(Debug)]
pub struct BlockTable {
    pub key: u128,
    pub values: Box<[f32]>,
}

impl PinnedList {
    /// Pins `head` (the first bytes of a list's blob) of a list of `n_blocks` blocks.
    pub fn new(head: &[u8], n_blocks: u32) -> PinnedList {
        PinnedList { head: head.into(), n_blocks, table: Mutex::new(None) }
    }

    /// Bytes charged to the budget: the head, a table's worth of values (charged up front, so an entry's
    /// charge never changes), and bookkeeping.
    fn bytes(&self) -> usize {
        Self::charge(self.head.len(), self.n_blocks)
    }

    /// What pinning a head of `head_len` bytes of a list of `n_blocks` blocks charges (see `bytes`).
    pub fn charge(head_len: usize, n_blocks: u32) -> usize {
        head_len
            + 4 * n_blocks as usize
            + std::mem::size_of::<PinnedList>()
            + std::mem::size_of::<BlockTable>()
            + 48
    }

    /// The block table made under `key`: the one held if its key is `key`, else `make()`'s (at most one
    /// value per block), which replaces it. Queries under other parameters take turns replacing it. The
    /// lock is held for the look and the swap only, never while a table is made: a query never waits for
    /// another's `make` (two that miss at once both make one; the last stored stays).
    pub fn table(&self, key: u128, make: impl FnOnce() -> Box<[f32]>) -> Arc<BlockTable> {
        if let Some(t) = self.table.lock().as_ref().filter(|t| t.key == key) {
            return t.clone();
        }
        let values = make();
        assert!(values.len() <= self.n_blocks as usize, "a block table holds one value per block");
        let t = Arc::new(BlockTable { key, values });
        *self.table.lock() = Some(t.clone());
        t
    }
}

/// A term's chain, newest first, complete for every segment id up to `upto`.
#[derive(Debug)]
pub struct HotChain {
    pub key: Box<[u8]>,
    pub upto: u32,
    /// The dictionary (see [`MergedSegment::uid`](super::MergedSegment::uid)) whose heap places these are.
    pub dict: u64,
    pub nodes: Box<[HotNode]>,
}

impl HotChain {
    /// The LLA access probability: the term's df over the chain's nodes (nodes of segments retention dropped
    /// count until a compaction rebuilds the dictionary without them).
    pub fn weight(&self) -> u64 {
        self.nodes.iter().map(|n| n.df as u64).sum()
    }

    /// Bytes charged to the budget: key, nodes, their pinned lists, and the map's and order's bookkeeping.
    pub fn bytes(&self) -> usize {
        self.key.len()
            + self.nodes.len() * std::mem::size_of::<HotNode>()
            + self.nodes.iter().filter_map(|n| n.pinned.as_ref()).map(|p| p.bytes()).sum::<usize>()
            + std::mem::size_of::<HotChain>()
            + 96
    }

    /// Bytes of posting lists (heads) pinned by this entry.
    fn pinned_bytes(&self) -> usize {
        self.nodes.iter().filter_map(|n| n.pinned.as_ref()).map(|p| p.head.len()).sum()
    }
}

/// Occupancy and counters, for `stats`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HotStats {
    pub capacity_bytes: usize,
    pub used_bytes: usize,
    pub high_water_bytes: usize,
    /// Of `used_bytes`, the posting-list heads (skip tables, and small lists' blocks) pinned in DRAM.
    pub pinned_list_bytes: usize,
    pub entries: usize,
    /// Lookups answered by an entry alone.
    pub hits: u64,
    /// Lookups that found an entry older than their snapshot: only the chain's new head nodes were read.
    pub refreshes: u64,
    /// Lookups that walked the whole chain.
    pub misses: u64,
    pub evictions: u64,
    /// Terms not admitted: the cache was full of more probable ones.
    pub rejected: u64,
    /// Lookups (then walks, as misses), admissions and admission checks that found the table held by
    /// another thread and went on without it (a query never waits for the cache).
    pub contended: u64,
    /// (hits + refreshes) / lookups; 0 before the first lookup.
    pub hit_rate: f64,
}

/// The map's hasher: keys are already xxh3 hashes.
#[derive(Default)]
struct Prehashed(u64);
impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

#[derive(Default)]
struct Table {
    /// By the key's hash (a collision is a miss: the entry's own key decides).
    map: HashMap<u64, Arc<HotChain>, BuildHasherDefault<Prehashed>>,
    /// Eviction order: (LLA weight, hash), least probable first.
    order: BTreeSet<(u64, u64)>,
    /// The dictionary the entries belong to.
    dict: u64,
    used: usize,
    /// Bytes of posting-list heads pinned by the entries (part of `used`).
    pinned: usize,
}

impl Table {
    /// Removes the entry under `h`, with its place in the eviction order and its bytes.
    fn remove(&mut self, h: u64) -> Option<Arc<HotChain>> {
        let old = self.map.remove(&h)?;
        self.order.remove(&(old.weight(), h));
        self.used -= old.bytes();
        self.pinned -= old.pinned_bytes();
        Some(old)
    }
}

/// The DRAM cache of hot chains of one shard's merged dictionary (see the module docs).
pub struct HotChains {
    capacity: usize,
    table: RwLock<Table>,
    high_water: AtomicUsize,
    hits: AtomicU64,
    refreshes: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    rejected: AtomicU64,
    contended: AtomicU64,
}

/// What [`HotChains::get`] found for a term.
pub enum Lookup {
    /// Not cached (or cached for another dictionary).
    Miss,
    /// Cached: complete up to `upto`.
    Hit(Arc<HotChain>),
}

impl HotChains {
    /// A cache of at most `capacity` bytes; 0 turns it off.
    pub fn new(capacity: usize) -> HotChains {
        HotChains {
            capacity,
            table: RwLock::new(Table::default()),
            high_water: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            contended: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// A list whose head up to its positions fits in this many bytes is pinned with its blocks (the rest
    /// pin their skip tables only): 1/1024 of the cache (32 KB by default). Blocks are the bulk of a list and
    /// the least valuable per byte — a dictionary entry saves a probe and a chain walk in ~150 bytes, a
    /// skip table and its bound table save the impacts' reads and divisions of every block bounded — so
    /// only small lists bring theirs, and long lists never crowd entries out.
    pub fn pin_blocks_limit(&self) -> usize {
        self.capacity / 1024
    }

    /// The entry of `key` (hash `h`) for dictionary `dict`; a miss also when an admission holds the table
    /// (see the module docs: a lookup never waits).
    pub fn get(&self, dict: u64, key: &[u8], h: u64) -> Lookup {
        if !self.enabled() {
            return Lookup::Miss;
        }
        let Some(t) = self.table.try_read() else {
            self.contended.fetch_add(1, Relaxed);
            return Lookup::Miss;
        };
        match t.map.get(&h) {
            Some(e) if e.dict == dict && *e.key == *key => Lookup::Hit(e.clone()),
            _ => Lookup::Miss,
        }
    }

    /// Counts a lookup: answered by an entry alone, by an entry and the chain's new head, or by a walk.
    pub fn record(&self, hit: bool, refreshed: bool) {
        if !self.enabled() {
            return;
        }
        match (hit, refreshed) {
            (true, false) => &self.hits,
            (true, true) => &self.refreshes,
            _ => &self.misses,
        }
        .fetch_add(1, Relaxed);
    }

    /// Offers a resolved chain. A chain of an older dictionary than the cache's is ignored; one of a newer
    /// dictionary empties the cache first. A full cache makes room by evicting entries of lower LLA weight
    /// (df) than the newcomer's, or rejects it. Dropped when another thread holds the table (never waited for;
    /// counted as contended).
    pub fn admit(&self, h: u64, chain: HotChain) {
        if !self.enabled() {
            return;
        }
        let bytes = chain.bytes();
        if bytes > self.capacity {
            self.rejected.fetch_add(1, Relaxed);
            return;
        }
        let weight = chain.weight();
        let Some(mut t) = self.table.try_write() else {
            self.contended.fetch_add(1, Relaxed);
            return;
        };
        if chain.dict < t.dict {
            return;
        }
        if chain.dict > t.dict {
            let Table { map, order, .. } = &mut *t;
            map.clear();
            order.clear();
            t.dict = chain.dict;
            t.used = 0;
            t.pinned = 0;
        }
        let Some(victims) = self.victims(&t, h, weight, bytes) else {
            self.rejected.fetch_add(1, Relaxed);
            return;
        };
        t.remove(h);
        for (_, v) in victims {
            t.remove(v).expect("ordered entries are mapped");
            self.evictions.fetch_add(1, Relaxed);
        }
        debug_assert!(t.used + bytes <= self.capacity);
        t.order.insert((weight, h));
        t.pinned += chain.pinned_bytes();
        t.map.insert(h, Arc::new(chain));
        t.used += bytes;
        self.high_water.fetch_max(t.used, Relaxed);
    }

    /// The entries to evict to admit a chain of `weight` and `bytes` under hash `h`, or `None` if it cannot
    /// be: the entry it replaces (a refresh, or a colliding key) frees its bytes; beyond that, room comes only
    /// from entries less probable than the newcomer. Victims are chosen before anything changes: a newcomer
    /// that cannot fit leaves the cache as it was (a refreshed term keeps its older entry).
    fn victims(&self, t: &Table, h: u64, weight: u64, bytes: usize) -> Option<Vec<(u64, u64)>> {
        let old_bytes = t.map.get(&h).map_or(0, |o| o.bytes());
        let mut free = self.capacity - (t.used - old_bytes);
        let mut victims = Vec::new();
        if bytes > free {
            for &(w, v) in &t.order {
                if w >= weight {
                    break; // ascending: nothing after it is less probable either
                }
                if v != h {
                    victims.push((w, v));
                    free += t.map[&v].bytes();
                    if bytes <= free {
                        break;
                    }
                }
            }
            if bytes > free {
                return None;
            }
        }
        Some(victims)
    }

    /// Whether [`Self::admit`] would now take a chain of dictionary `dict`, LLA `weight` and `bytes` under
    /// hash `h` — asked before a chain's lists are copied for pinning, so a term the cache would reject
    /// costs no copy (the answer may change before the admission: then it is only a wasted copy). No when
    /// another thread holds the table for an admission (counted as contended, not as a rejection).
    pub fn would_admit(&self, h: u64, dict: u64, weight: u64, bytes: usize) -> bool {
        if !self.enabled() {
            return false;
        }
        if bytes > self.capacity {
            self.rejected.fetch_add(1, Relaxed);
            return false;
        }
        let Some(t) = self.table.try_read() else {
            self.contended.fetch_add(1, Relaxed);
            return false;
        };
        let fits = dict > t.dict || (dict == t.dict && self.victims(&t, h, weight, bytes).is_some());
        if !fits && dict == t.dict {
            self.rejected.fetch_add(1, Relaxed);
        }
        fits
    }

    /// The most bytes the cache has held at once, without its lock.
    pub fn high_water_bytes(&self) -> usize {
        self.high_water.load(Relaxed)
    }

    pub fn stats(&self) -> HotStats {
        let t = self.table.read();
        let (hits, refreshes, misses) =
            (self.hits.load(Relaxed), self.refreshes.load(Relaxed), self.misses.load(Relaxed));
        let asked = hits + refreshes + misses;
        HotStats {
            capacity_bytes: self.capacity,
            used_bytes: t.used,
            high_water_bytes: self.high_water.load(Relaxed),
            pinned_list_bytes: t.pinned,
            entries: t.map.len(),
            hits,
            refreshes,
            misses,
            evictions: self.evictions.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            contended: self.contended.load(Relaxed),
            hit_rate: if asked == 0 { 0.0 } else { (hits + refreshes) as f64 / asked as f64 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(key: &str, dict: u64, dfs: &[u32]) -> HotChain {
        let nodes = dfs
            .iter()
            .enumerate()
            .map(|(i, &df)| HotNode {
                seg_id: 10 - i as u32,
                df,
                max_tf: 1,
                blob_len: 8,
                blob_off: 64 * i as u64,
                pinned: None,
            })
            .collect();
        HotChain { key: key.as_bytes().into(), upto: 10, dict, nodes }
    }

    fn hit(c: &HotChains, dict: u64, key: &str) -> bool {
        matches!(c.get(dict, key.as_bytes(), key.len() as u64), Lookup::Hit(_))
    }

    #[test]
    fn lla_evicts_only_for_more_probable_terms() {
        let one = chain("aaaa", 1, &[5]).bytes();
        let c = HotChains::new(2 * one);
        c.admit(4, chain("aaaa", 1, &[5]));
        c.admit(3, chain("bbb", 1, &[50]));
        assert!(hit(&c, 1, "aaaa") && hit(&c, 1, "bbb"));
        // Full: a rarer term is rejected, a more frequent one evicts the rarest.
        c.admit(2, chain("cc", 1, &[1]));
        assert!(!hit(&c, 1, "cc") && hit(&c, 1, "aaaa"));
        c.admit(1, chain("d", 1, &[100]));
        assert!(hit(&c, 1, "d") && hit(&c, 1, "bbb") && !hit(&c, 1, "aaaa"));
        let s = c.stats();
        assert_eq!((s.entries, s.evictions, s.rejected), (2, 1, 1));
        assert!(s.used_bytes <= s.capacity_bytes && s.high_water_bytes <= s.capacity_bytes);
    }

    /// A newcomer that cannot fit evicts nothing; a refresh that cannot fit keeps the older entry.
    #[test]
    fn no_eviction_without_room_for_the_newcomer() {
        // Hashes are the keys' lengths (see `hit`).
        let put = |c: &HotChains, key: &str, dfs: &[u32]| c.admit(key.len() as u64, chain(key, 1, dfs));
        let small = chain("a", 1, &[1]).bytes();
        let c = HotChains::new(3 * small + 8);
        put(&c, "a", &[1]);
        put(&c, "bb", &[50]);
        put(&c, "ccc", &[60]);
        assert_eq!(c.stats().entries, 3);
        // Needs the room of two entries, but only one is less probable than it: rejected, nothing evicted.
        let big = chain("dddd", 1, &[2, 2, 2, 20]);
        assert!(big.bytes() > small + 3 && big.bytes() <= 2 * small, "{} vs {small}", big.bytes());
        c.admit(4, big);
        assert!(hit(&c, 1, "a") && hit(&c, 1, "bb") && hit(&c, 1, "ccc") && !hit(&c, 1, "dddd"));
        assert_eq!((c.stats().evictions, c.stats().rejected), (0, 1));
        // A refresh of "a" that needs more room than its old entry, with only more probable entries around,
        // keeps the old entry.
        put(&c, "a", &[1, 1]);
        assert_eq!(c.stats().entries, 3);
        assert!(matches!(c.get(1, b"a", 1), Lookup::Hit(e) if e.nodes.len() == 1));
        assert_eq!((c.stats().evictions, c.stats().rejected), (0, 2));
        // One that fits by evicting a less probable entry does: "a" (weight 1) goes for "eeeee" (weight 30).
        put(&c, "eeeee", &[30]);
        assert!(hit(&c, 1, "eeeee") && !hit(&c, 1, "a"));
        assert_eq!(c.stats().evictions, 1);
        assert!(c.stats().used_bytes <= c.stats().capacity_bytes);
    }

    /// `would_admit` answers as `admit` would decide (and counts a refusal as a rejection), so a term the
    /// cache would reject costs no copy of its lists.
    #[test]
    fn would_admit_agrees_with_admit() {
        let small = chain("a", 1, &[1]).bytes();
        let c = HotChains::new(2 * small + 8);
        // Hashes are the keys' lengths, as for `hit`.
        let ask = |c: &HotChains, key: &str, dfs: &[u32]| {
            let ch = chain(key, 1, dfs);
            c.would_admit(key.len() as u64, 1, ch.weight(), ch.bytes())
        };
        assert!(ask(&c, "a", &[1]));
        c.admit(1, chain("a", 1, &[1]));
        c.admit(2, chain("bb", 1, &[50]));
        // Full: a rarer newcomer would be rejected, a more probable one would evict "a".
        assert!(!ask(&c, "cccc", &[0]) && ask(&c, "ccc", &[60]));
        assert_eq!(c.stats().rejected, 1);
        // Too big for the whole cache; another dictionary's chain is never refused here.
        let huge = chain("dddd", 1, &[1; 9]);
        assert!(huge.bytes() > 2 * small + 8 && !c.would_admit(4, 1, huge.weight(), huge.bytes()));
        assert!(c.would_admit(3, 2, 1, small));
        assert_eq!((c.stats().rejected, c.stats().entries), (2, 2));
        // PinnedList charges add up in an entry's bytes.
        let mut pinned = chain("e", 1, &[3]);
        let before = pinned.bytes();
        pinned.nodes[0].pinned = Some(Arc::new(PinnedList::new(&[1, 2, 3], 1)));
        assert_eq!(pinned.bytes(), before + PinnedList::charge(3, 1));
        assert_eq!(pinned.pinned_bytes(), 3);
    }

    #[test]
    fn dictionaries_do_not_mix() {
        let c = HotChains::new(1 << 20);
        c.admit(4, chain("aaaa", 2, &[5]));
        // Another dictionary's entry is not served; an older dictionary's chain is not admitted.
        assert!(hit(&c, 2, "aaaa") && !hit(&c, 3, "aaaa"));
        c.admit(3, chain("bbb", 1, &[5]));
        assert!(!hit(&c, 1, "bbb"));
        // A newer dictionary's chain empties the cache.
        c.admit(3, chain("bbb", 3, &[5]));
        assert!(hit(&c, 3, "bbb") && !hit(&c, 2, "aaaa"));
        assert_eq!(c.stats().entries, 1);
        // A colliding key is a miss, and a refresh replaces the entry.
        assert!(!hit(&c, 3, "ccc"));
        c.admit(3, chain("bbb", 3, &[5, 6]));
        assert_eq!(c.stats().entries, 1);
        assert_eq!(c.stats().used_bytes, chain("bbb", 3, &[5, 6]).bytes());
    }

    /// While another thread holds the table, lookups miss, checks say no and admissions are dropped — none
    /// waits — and each is counted as contended, not as a miss of the policy or a rejection.
    #[test]
    fn a_held_table_is_passed_by_not_waited_for() {
        let c = HotChains::new(1 << 20);
        c.admit(4, chain("aaaa", 1, &[5]));
        let held = c.table.write();
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!hit(&c, 1, "aaaa"), "a lookup passes a held table by");
                assert!(!c.would_admit(3, 1, 5, 100));
                c.admit(3, chain("bbb", 1, &[5]));
            });
        });
        drop(held);
        let s = c.stats();
        assert_eq!((s.contended, s.rejected, s.entries), (3, 0, 1));
        assert!(hit(&c, 1, "aaaa") && !hit(&c, 1, "bbb"), "the held table was left as it was");
    }

    #[test]
    fn disabled_cache_holds_nothing() {
        let c = HotChains::new(0);
        c.admit(4, chain("aaaa", 1, &[5]));
        assert!(!hit(&c, 1, "aaaa"));
        assert_eq!(c.stats().entries, 0);
    }
}
