//! Configuration: budgets, durability mode and lifecycle policies, with sane defaults.

use serde::{Deserialize, Serialize};

/// What survives a shutdown or a crash (DESIGN.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// Nothing survives: the persistent tier is only overflow space. Fastest.
    Volatile,
    /// A clean shutdown (`close()`, SIGTERM, SIGINT) persists everything; restart maps the heap.
    #[default]
    Graceful,
    /// Survives `kill -9` and power loss: every write is in the write-ahead tLog before it is acknowledged.
    CrashSafe,
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "volatile" => Ok(Durability::Volatile),
            "graceful" | "async" => Ok(Durability::Graceful),
            "crash-safe" | "crash_safe" | "request" => Ok(Durability::CrashSafe),
            other => Err(format!("unknown durability mode [{other}]; use volatile, graceful or crash-safe")),
        }
    }
}

/// When an engraved segment is committed (its DRAM copy released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CommitPolicy {
    /// Only when DRAM is needed (SPIRIT's lazy pointer update): queries read DRAM copies while they fit.
    #[default]
    Lazy,
    /// Right after engraving: DRAM holds only fresh segments and images in flight.
    Eager,
}

impl std::str::FromStr for CommitPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lazy" => Ok(CommitPolicy::Lazy),
            "eager" => Ok(CommitPolicy::Eager),
            other => Err(format!("unknown commit policy [{other}]; use lazy or eager")),
        }
    }
}

/// Per-shard settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardConfig {
    /// Hard cap on the DRAM heap in bytes.
    pub dram_budget: usize,
    /// Hard cap on the persistent heap file in bytes.
    pub persistent_budget: u64,
    /// Arena size of one fresh segment; default: min(64 MiB, budget / 8).
    pub fresh_segment_bytes: Option<usize>,
    /// Bulk arenas: a fresh segment started while a bulk load runs (`spirit::bulk_load`) gets
    /// `bulk_segment_bytes`, by default min(256 MiB, budget / 4) of the shard's budget, instead of the
    /// real-time arena. Off by default; [`Self::with_bulk_arenas`] turns it on, as `spirit index` does.
    /// Real-time writes keep small fresh segments (a fresh segment has no skip data, so every query reads its
    /// lists whole); a bulk load wants few, large ones: each segment costs a dictionary entry per distinct term,
    /// a merge and compaction work. The price is DRAM layout: the short-term ring is made to hold three bulk
    /// arenas (see [`Self::short_term_bytes`]), which a real-time process would cycle its small arenas through
    /// (and keep resident) for nothing.
    #[serde(default)]
    pub bulk_arenas: bool,
    /// The bulk arena's size (implies `bulk_arenas`); default min(256 MiB, budget / 4). At least
    /// `fresh_segment_bytes`; at most what leaves the long-term ring an eighth of the budget; in crash-safe
    /// mode at most 4 × `replay_bytes` (a fresh segment is sealed once its log tail reaches `replay_bytes`, so a
    /// larger arena would never fill).
    #[serde(default)]
    pub bulk_segment_bytes: Option<usize>,
    /// Upper bound on documents per segment (an arena also holds at most one document per KiB of it, for its
    /// per-document columns).
    pub max_docs_per_segment: u32,
    pub durability: Durability,
    pub commit: CommitPolicy,
    /// Lazy commit's bound on engraved segments waiting for DRAM to run short: once more are engraved, the
    /// oldest are committed and merged anyway. Each unmerged segment costs every query one dictionary probe
    /// and one cursor per term; merged ones share one dictionary (and its selective cache), and compaction
    /// keeps their number logarithmic. `None`: no bound (SPIRIT's pure lazy update).
    #[serde(default = "default_max_unmerged")]
    pub max_unmerged: Option<usize>,
    /// Crash-safe mode: a fresh segment is sealed (and soon engraved) once its documents' tLog records reach
    /// this many bytes, which bounds what recovery after a crash re-indexes. Smaller: faster recovery, more
    /// segments.
    #[serde(default = "default_replay_bytes")]
    pub replay_bytes: usize,
    /// When merged segments are compacted into one (contiguous posting lists, fewer segments per query).
    #[serde(default)]
    pub compaction: CompactionPolicy,
    /// When the oldest segments are dropped.
    #[serde(default)]
    pub retention: RetentionPolicy,
    /// Bytes of the DRAM budget given to the result cache (SPIRIT §4.11); default: min(budget / 16, 32 MiB);
    /// 0 turns the cache off. The DRAM heap is mapped that much smaller, so the budget covers both.
    #[serde(default)]
    pub result_cache_bytes: Option<usize>,
    /// Bytes of the DRAM budget given to selective caching of the merged dictionary (seed 002: hot terms'
    /// chains resolved and held in DRAM); default: min(budget / 16, 32 MiB); 0 turns it off. The DRAM heap
    /// is mapped that much smaller, so the budget covers it; the two caches must leave the rings the fresh
    /// segments' share and an eighth of the budget (`validate`).
    #[serde(default)]
    pub selective_cache_bytes: Option<usize>,
    /// Queries cheaper than this (postings of their terms, documents they scan) bypass the result cache: they
    /// evaluate about as fast as a hit would answer them.
    #[serde(default = "default_result_cache_min_work")]
    pub result_cache_min_work: u64,
    /// Fault the whole DRAM heap in when the shard opens, in the background at idle priority, as
    /// Elasticsearch's `-XX:+AlwaysPreTouch` does for the JVM heap: the process then holds its whole budget
    /// resident from the start, and no add or query pays for a page's first touch. On a virtual machine a
    /// first touch is a fault in the host too: in the real-time benchmark on the 2-core VM (`spirit-bench run
    /// --mode nrt`), the slowest add — the one laying out a fresh segment's tables on never-touched memory,
    /// usually 0.5–1 ms — took 4.6–115 ms over six runs (four above 19 ms), and 4.1–7.8 ms over five with
    /// the heap touched (three in the background as here, two before the load); no effect on the queries'
    /// outliers was measurable in those runs. Off by default: the budget is per shard of every index, so a
    /// server with many indexes, a library embedding many small engines, or the tests would hold it all
    /// resident at once (the benchmark's static run: peak RSS 1.1 → 1.8 GB). `spirit serve --pretouch` and
    /// `spirit-bench run --pretouch` turn it on. Bulk loads gain nothing: they fault their large arenas in ahead
    /// of the writer anyway.
    #[serde(default)]
    pub pretouch: bool,
    /// The persistence barrier (tests swap in a simulated persistence domain).
    #[serde(skip)]
    pub barrier: crate::memory::BarrierChoice,
}

/// Compaction (a log-structured, tiered policy like Lucene's `LogByteSizeMergePolicy`): merged segments are
/// grouped into size levels (a level spans a factor of `factor` in image bytes); once `factor` consecutive
/// segments share a level they are rewritten as one image with one contiguous posting list per term, and the
/// merged dictionary is rebuilt without their chain nodes. A query then visits O(factor × levels) segments.
///
/// With `on_pause`, idle time is spent on queries' behalf too: once ingestion pauses (the merger finds no new
/// document for two idle wake-ups, a second apart), the newest merged segments are compacted into one — as
/// many as fit `max_image_bytes`, leaving out an oldest one larger than `factor` times the others together
/// (so a document is rewritten a bounded number of times however often ingestion pauses: each rewrite of the
/// large segment grows it by at least 1/`factor`). A query after a burst then visits one segment where the
/// level policy would leave up to `factor - 1` per level (measured: +11% on the windowed real-time
/// benchmark's queries, 2 merged segments against 1).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Segments compacted together (at least 2); 0 turns compaction off (also on pauses).
    pub factor: u32,
    /// No compaction writes an image larger than this (the image is built in process memory first).
    pub max_image_bytes: u64,
    /// Compact the newest merged segments into one when ingestion pauses (default: on).
    #[serde(default = "default_on_pause")]
    pub on_pause: bool,
    /// A merged segment whose deleted documents not yet purged are more than this percentage of the
    /// documents it holds (purged ones not counted) is rewritten alone, purging them (Lucene's and Elasticsearch's `deletes_pct_allowed`,
    /// default 20 there too); 100 or more turns it off. Every compaction purges the deleted documents of the
    /// segments it rewrites (`segment::compact`).
    #[serde(default = "default_deletes_pct_allowed")]
    pub deletes_pct_allowed: u32,
}

fn default_on_pause() -> bool {
    true
}

fn default_deletes_pct_allowed() -> u32 {
    20
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            factor: 4,
            max_image_bytes: 256 << 20,
            on_pause: default_on_pause(),
            deletes_pct_allowed: default_deletes_pct_allowed(),
        }
    }
}

/// Retention (like an Elasticsearch ILM delete phase, per segment): the oldest merged segments are dropped —
/// their documents disappear from every query and their space is reused — once they are older than
/// `max_age_secs` (age = time since the segment's newest document was written) or while the segment data
/// (images and the merged dictionary) exceeds `max_bytes`. With either set, the heap is also kept below 3/4
/// of the persistent budget by dropping the oldest segments, and an engrave that still finds the budget spent
/// drops more instead of refusing writes. Off by default.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct RetentionPolicy {
    pub max_age_secs: Option<u64>,
    pub max_bytes: Option<u64>,
}

impl RetentionPolicy {
    pub fn enabled(&self) -> bool {
        self.max_age_secs.is_some() || self.max_bytes.is_some()
    }
}

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            dram_budget: 1 << 30,
            persistent_budget: 64 << 30,
            fresh_segment_bytes: None,
            bulk_arenas: false,
            bulk_segment_bytes: None,
            max_docs_per_segment: 1 << 20,
            durability: Durability::Graceful,
            commit: CommitPolicy::Lazy,
            max_unmerged: default_max_unmerged(),
            replay_bytes: default_replay_bytes(),
            compaction: CompactionPolicy::default(),
            retention: RetentionPolicy::default(),
            result_cache_bytes: None,
            selective_cache_bytes: None,
            result_cache_min_work: default_result_cache_min_work(),
            pretouch: false,
            barrier: Default::default(),
        }
    }
}

fn default_max_unmerged() -> Option<usize> {
    Some(2)
}

fn default_result_cache_min_work() -> u64 {
    4096
}

fn default_replay_bytes() -> usize {
    8 << 20
}

/// The smallest DRAM budget that holds two fresh segments and a long-term ring.
pub const MIN_DRAM_BUDGET: usize = 1 << 20;

impl ShardConfig {
    pub fn fresh_bytes(&self) -> usize {
        let b = self.fresh_segment_bytes.unwrap_or((self.dram_budget / 8).min(64 << 20));
        b.clamp(256 << 10, self.dram_budget / 4) / 64 * 64
    }

    /// The arena of a fresh segment started during a bulk load (see [`Self::bulk_arenas`]): never below
    /// [`Self::fresh_bytes`], and small enough that three of them in the short-term ring leave the long-term
    /// ring its eighth of the budget. Equal to `fresh_bytes` when bulk arenas are off.
    pub fn bulk_fresh_bytes(&self) -> usize {
        let f = self.fresh_bytes();
        if !self.bulk_arenas && self.bulk_segment_bytes.is_none() {
            return f;
        }
        let mut want = self.bulk_segment_bytes.unwrap_or((self.dram_budget / 4).min(256 << 20));
        if self.durability == Durability::CrashSafe {
            // The log tail seals a segment first: arena bytes run about 2.5x the log bytes of its documents.
            want = want.min(self.replay_bytes.saturating_mul(4));
        }
        let room = self.dram_heap_bytes().saturating_sub(self.dram_budget / 8) / 3;
        want.min(room).min(self.dram_budget / 4).max(f) / 64 * 64
    }

    /// Whether a fresh segment's arena of `arena_bytes` is a bulk arena (only ever larger than a real-time one).
    pub fn is_bulk_arena(&self, arena_bytes: usize) -> bool {
        arena_bytes > self.fresh_bytes()
    }

    /// This configuration with bulk arenas on (see [`Self::bulk_arenas`]): for a process that loads files in
    /// bulk. Sizes follow each shard's share of the budget.
    pub fn with_bulk_arenas(self) -> ShardConfig {
        ShardConfig { bulk_arenas: true, ..self }
    }

    /// The short-term ring holds the fresh segment being written plus the ones waiting for the flusher. The
    /// writer holds the segment it seals while it waits for the next arena, so that arena must fit beside it
    /// wherever it lies: with arenas of one size at aligned offsets two suffice; once bulk arenas mix with
    /// real-time ones, three bulk arenas do (a sealed arena at offset `o < b` of size `s ≤ b` leaves a
    /// contiguous `b` after it when the ring holds `o + s + b < 3b`).
    pub fn short_term_bytes(&self) -> usize {
        let (f, b) = (self.fresh_bytes(), self.bulk_fresh_bytes());
        let real_time = (2 * f).max((self.dram_budget / 2).min(4 * f));
        if b > f {
            real_time.max(3 * b)
        } else {
            real_time
        }
    }

    /// The result cache's share of the DRAM budget.
    pub fn result_cache_bytes(&self) -> usize {
        self.result_cache_bytes.unwrap_or((self.dram_budget / 16).min(32 << 20))
    }

    /// The selective cache's share of the DRAM budget.
    pub fn selective_cache_bytes(&self) -> usize {
        self.selective_cache_bytes.unwrap_or((self.dram_budget / 16).min(32 << 20))
    }

    /// The DRAM heap (both rings): the budget less the result cache and the selective cache.
    pub fn dram_heap_bytes(&self) -> usize {
        self.dram_budget - self.result_cache_bytes() - self.selective_cache_bytes()
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.dram_budget < MIN_DRAM_BUDGET {
            return Err(format!("dram budget must be at least {} bytes", MIN_DRAM_BUDGET));
        }
        if self.result_cache_bytes() > self.dram_budget / 4 {
            return Err("the result cache may take at most a quarter of the dram budget".into());
        }
        if self.selective_cache_bytes() > self.dram_budget / 4 {
            return Err("the selective cache may take at most a quarter of the dram budget".into());
        }
        if self.dram_heap_bytes() < self.short_term_bytes() + self.dram_budget / 8 {
            return Err(format!(
                "the result and selective caches ({} + {} bytes) leave too little of the dram budget for the \
                 segments: the rings need {} bytes for fresh segments and an eighth of the budget for flushed ones",
                self.result_cache_bytes(),
                self.selective_cache_bytes(),
                self.short_term_bytes()
            ));
        }
        if self.persistent_budget < (1 << 20) {
            return Err("persistent budget must be at least 1 MiB".into());
        }
        if self.max_docs_per_segment == 0 {
            return Err("max_docs_per_segment must be positive".into());
        }
        if self.compaction.factor == 1 {
            return Err("compaction factor must be 0 (off) or at least 2".into());
        }
        Ok(())
    }
}

/// Parses sizes like `64MB`, `1g`, `512k`, `1000`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = match t.trim_end_matches(['b', 'i']) {
        x if x.ends_with('k') => (&x[..x.len() - 1], 1u64 << 10),
        x if x.ends_with('m') => (&x[..x.len() - 1], 1 << 20),
        x if x.ends_with('g') => (&x[..x.len() - 1], 1 << 30),
        x if x.ends_with('t') => (&x[..x.len() - 1], 1 << 40),
        x => (x, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("invalid size [{s}]; use e.g. 64MB, 2GB"))?;
    if n.is_nan() || n < 0.0 {
        return Err(format!("invalid size [{s}]"));
    }
    Ok((n * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rings() {
        assert_eq!(parse_size("64MB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert!(parse_size("lots").is_err());
        let c = ShardConfig { dram_budget: 64 << 20, ..Default::default() };
        assert_eq!(c.fresh_bytes(), 8 << 20);
        assert!(c.short_term_bytes() >= 2 * c.fresh_bytes() && c.short_term_bytes() < c.dram_budget);
        // No bulk arenas unless asked for: the rings keep their real-time layout.
        assert_eq!(c.bulk_fresh_bytes(), c.fresh_bytes());
        let real_time = c.short_term_bytes();
        // Bulk arenas: a quarter of the budget, three of them in the short-term ring, the long-term ring keeps
        // its eighth.
        let c = c.with_bulk_arenas();
        assert_eq!(c.bulk_fresh_bytes(), 16 << 20);
        assert!(c.short_term_bytes() >= 3 * c.bulk_fresh_bytes() && c.short_term_bytes() > real_time);
        let g = ShardConfig { dram_budget: 1 << 30, ..Default::default() }.with_bulk_arenas();
        assert_eq!(
            (g.fresh_bytes(), g.bulk_fresh_bytes(), g.short_term_bytes()),
            (64 << 20, 256 << 20, 768 << 20)
        );
        // Asked for more than fits: what fits; asked for less than a fresh segment: a fresh segment.
        let big = ShardConfig { bulk_segment_bytes: Some(1 << 40), ..g.clone() };
        assert!(big.dram_heap_bytes() >= big.short_term_bytes() + big.dram_budget / 8);
        big.validate().unwrap();
        let small = ShardConfig { bulk_segment_bytes: Some(1 << 20), ..g.clone() };
        assert_eq!(small.bulk_fresh_bytes(), small.fresh_bytes());
        // Crash-safe: the log tail seals first, so no larger arena than it can fill (8 MiB of log: none).
        let safe = ShardConfig { durability: Durability::CrashSafe, ..g.clone() };
        assert_eq!((safe.bulk_fresh_bytes(), safe.short_term_bytes()), (64 << 20, 256 << 20));
        let long_tail = ShardConfig { replay_bytes: 32 << 20, ..safe };
        assert_eq!(long_tail.bulk_fresh_bytes(), 128 << 20);
        // Each shard's own budget: four shards of 1 GB get 64 MiB bulk arenas, like their real-time ones.
        let quarter = ShardConfig { dram_budget: 256 << 20, ..g };
        assert_eq!((quarter.fresh_bytes(), quarter.bulk_fresh_bytes()), (32 << 20, 64 << 20));
    }

    /// The two caches may each take a quarter of the budget, but not so much together that the rings no
    /// longer fit: such a configuration is an error, never a failed assertion when the heap is made.
    #[test]
    fn caches_leave_room_for_the_rings() {
        for budget in [MIN_DRAM_BUDGET, 64 << 20, 1 << 30] {
            let ok = ShardConfig { dram_budget: budget, ..Default::default() };
            ok.validate().unwrap();
            let q = budget / 4;
            let one = ShardConfig { result_cache_bytes: Some(q), ..ok.clone() };
            one.validate().unwrap();
            let both =
                ShardConfig { result_cache_bytes: Some(q), selective_cache_bytes: Some(q), ..ok.clone() };
            if budget < 512 << 20 {
                // Small budgets give fresh segments half of the budget: both caches at a quarter cannot fit.
                let e = both.validate().unwrap_err();
                assert!(e.contains("too little of the dram budget"), "{e}");
            }
            for c in [&ok, &one, &both] {
                if c.validate().is_ok() {
                    assert!(c.dram_heap_bytes() >= c.short_term_bytes() + budget / 8);
                }
            }
        }
    }
}
