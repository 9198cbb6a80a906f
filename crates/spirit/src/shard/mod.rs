//! A shard (SPIRIT's executor): its two heaps, its GDT and its pipeline.
//!
//! ```text
//! add() ─► fresh segment ──seal──► flusher ──► engraver ──► (commit when DRAM is short) ──► merger
//!           (caller thread)        image in     copy in       GDT points at the            links lists
//!                                  DRAM ring    persistent    persistent copy, DRAM        into the merged
//!                                               heap          copy freed after readers     segment
//! ```
//! The ingester is the caller's thread holding the writer lock (one writer per shard, as in SPIRIT). Each
//! later stage is one thread fed by a bounded queue, so a slow stage back-pressures the one before it and,
//! ultimately, `add`. Nothing in the pipeline blocks readers: every hand-over is a GDT state change.
//!
//! In crash-safe mode (module `durable`) every write is also recorded in the tLog before it is acknowledged,
//! the engraver records each engraved segment in the eLog, the merger records its progress in the mLog and
//! writes a checkpoint after each merge, and `open` recovers from the last checkpoint and the logs.

mod check;
mod durable;
mod reclaim;

pub use check::CheckReport;

pub use durable::Replay;

use crate::codec::FieldCodecs;
use crate::config::{CommitPolicy, Durability, ShardConfig};
use crate::error::{Error, Result};
use crate::gdt::{DramImage, Gdt, PersistentImage, SegData, SegState, SegmentDesc, Snapshot};
use crate::memory::{
    DramHeap, DramStats, Fill, PersistentHeap, PersistentStats, RecoveryRecord, RingKind, WriteVia,
};
use crate::schema::AnalyzedDoc;
use crate::segment::hot::{HotChains, HotStats};
use crate::segment::image::{id_hash, id_lower_bounds, SealedImage, ID_LOCKSTEP};
use crate::segment::{
    DeleteBitmap, FreshSegment, ImageBuilder, ImageView, InsertError, MergedSegment, TermBatch,
};
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Name of the persistent heap file in a shard directory.
pub const HEAP_FILE: &str = "heap.spirit";
const MANIFEST_FORMAT: u32 = 1;
/// How far past the writer a bulk arena's never-used memory is faulted in ([`FreshSegment::prefault_ahead`]):
/// a few tenths of a second of a two-thread bulk load's writing, and at most this much touched for nothing
/// when a load ends.
const BULK_PREFAULT_AHEAD: usize = 32 << 20;
/// The same for a real-time arena: tens of milliseconds of a single writer at full speed, and little memory
/// made resident for nothing in a shard that receives a handful of documents (every shard of every index
/// has its own arenas).
const REALTIME_PREFAULT_AHEAD: usize = 4 << 20;

/// A condition a write to an `_id` must meet, checked under the shard's writer lock together with the write
/// (Elasticsearch's optimistic concurrency control). A document's *sequence number* is its doc id in its
/// shard: doc ids only grow, every write of an `_id` gets a new one, and merges keep them — so it names one
/// version of the `_id`, as Elasticsearch's `_seq_no` does (with primary term 1: spirit has no replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precondition {
    /// Write whatever is there.
    #[default]
    None,
    /// Only if the `_id` has no live document (`op_type=create`).
    Absent,
    /// Only if the `_id`'s live document has this sequence number (`if_seq_no`).
    SeqNo(u64),
    /// External versioning (`version_type=external`, or `external_gte` with `gte`): only if `version` is
    /// above the live document's `_version` (or equal to it, with `gte`), or there is none; the written
    /// document then has `version` as its `_version`.
    Version { version: u64, gte: bool },
}

/// The largest `_version`: versions are kept in a numeric column of doubles, exact up to 2^53 (an external
/// version of epoch milliseconds fits; one of epoch nanoseconds does not and is refused).
pub const MAX_VERSION: u64 = 1 << 53;

impl Precondition {
    /// Whether a write may go ahead when the `_id`'s live version is `live` (its doc id and `_version`;
    /// `None`: no live document); the conflict error, in Elasticsearch's words, if not. An external version
    /// above [`MAX_VERSION`] is an invalid argument.
    pub fn check(self, id: &str, live: Option<(u32, u64)>) -> Result<()> {
        if let Precondition::Version { version, .. } = self {
            if version > MAX_VERSION {
                return Err(Error::InvalidArgument(format!(
                    "version [{version}] is above the largest spirit keeps exactly, 2^53 = {MAX_VERSION}"
                )));
            }
        }
        let why = match (self, live) {
            (Precondition::None, _) | (Precondition::Absent, None) | (Precondition::Version { .. }, None) => {
                return Ok(())
            }
            (Precondition::SeqNo(want), Some((have, _))) if want == have as u64 => return Ok(()),
            (Precondition::Version { version, gte }, Some((_, have))) if version > have || (gte && version == have) => {
                return Ok(())
            }
            (Precondition::Absent, Some(_)) => "document already exists".to_string(),
            (Precondition::SeqNo(want), Some((have, _))) => format!(
                "required seqNo [{want}], primary term [1]. current document has seqNo [{have}] and primary term [1]"
            ),
            (Precondition::SeqNo(want), None) => {
                format!("required seqNo [{want}], primary term [1]. but no document was found")
            }
            (Precondition::Version { version, gte }, Some((_, have))) => format!(
                "current version [{have}] is higher{} the one provided [{version}]",
                if gte { " than" } else { " or equal to" }
            ),
        };
        Err(Error::VersionConflict(format!("[{id}]: version conflict, {why}")))
    }

    /// The `_version` a write under this condition gives a document whose live version has `_version`
    /// `live` (`None`: none): the external version, or one more than the live one (1 for a new `_id`).
    pub fn next_version(self, live: Option<u64>) -> u64 {
        match self {
            Precondition::Version { version, .. } => version,
            _ => live.map_or(1, |v| (v + 1).min(MAX_VERSION)),
        }
    }
}

/// What an [`Shard::upsert_deferred`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upserted {
    /// The new document's doc id.
    pub doc: u32,
    /// Whether it replaced a live document with its `_id`.
    pub replaced: bool,
    /// Its `_version`.
    pub version: u64,
    /// Crash-safe mode: the tLog LSN to pass to [`Shard::sync_to`].
    pub lsn: Option<u64>,
}

/// The value of numeric column `field` of doc `local` of `seg`.
fn number_of(seg: &SegmentDesc, field: u16, local: u32) -> Result<Option<f64>> {
    Ok(match &seg.data {
        SegData::Fresh(f) => f.numeric(field, local),
        SegData::Image { .. } => {
            let v = seg.image().expect("image").map_err(|e| Error::Format(e.0))?;
            v.numbers(field).and_then(|c| crate::segment::image::number_at(c, local))
        }
    })
}

/// The `_version` of doc `local` of `seg`, kept in the hidden column `field` ([`crate::schema::VERSION_FIELD`]).
/// Only versions other than 1 are stored (the first write of an `_id`, every bulk-loaded document, costs
/// nothing): no value is version 1, as are documents written before versions were kept.
pub fn version_of(seg: &SegmentDesc, field: u16, local: u32) -> Result<u64> {
    Ok(number_of(seg, field, local)?.map_or(1, |v| v as u64))
}

/// What [`Shard::delete_version_deferred`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionDelete {
    /// The version asked for was live and is deleted.
    Deleted,
    /// Another version of the `_id` is live now: nothing was deleted.
    Replaced,
    /// No version of the `_id` is live: nothing was deleted.
    Gone,
}

/// What a clean close leaves for the next open (serialized as JSON inside the heap).
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    next_doc: u32,
    next_seg: u32,
    merged_header: u64,
    /// Highest DRAM heap use over the index's life (all sessions).
    #[serde(default)]
    dram_high_water: usize,
    segments: Vec<ManifestSegment>,
    /// The owner's data (schema, settings).
    extra: serde_json::Value,
    /// Crash-safe mode: where the logs continue after this checkpoint.
    #[serde(default)]
    logs: Option<durable::LogHeads>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ManifestSegment {
    id: u32,
    base_doc: u32,
    doc_count: u32,
    image_off: u64,
    image_len: u64,
    deletes_off: u64,
    deletes_len: u64,
    deletes_crc: u32,
    merged: bool,
    /// Unix milliseconds (0 in manifests written before retention existed: the load time is used).
    #[serde(default)]
    sealed_at: u64,
}

impl Writer {
    /// The doc id the next add gets.
    fn next_doc(&self) -> u32 {
        self.fresh_base + self.fresh.visible()
    }
}

struct Writer {
    fresh: Arc<FreshSegment>,
    fresh_id: u32,
    /// First doc id of the fresh segment.
    fresh_base: u32,
    fresh_deletes: Arc<DeleteBitmap>,
    next_seg: u32,
    closed: bool,
    /// Crash-safe mode: tLog bytes of the documents in the fresh segment (what a crash would replay).
    fresh_log_bytes: usize,
    /// When the fresh segment last received a document (unix ms): its `sealed_at` once sealed.
    fresh_newest_at: u64,
    /// Sharded indexes: stamps each added document with its index-wide sequence number.
    seq: Option<Sequencer>,
    /// The hidden `_version` column ([`Shard::set_version_field`]; none: every document is version 1).
    version_field: Option<u16>,
    /// Bulk loads running ([`Shard::begin_bulk`]): while any does, new fresh segments get the bulk arena.
    bulk_loads: usize,
}

/// The index-wide sequence numbers of a sharded index: every shard's writer takes the next one *under its
/// writer lock* and stores it in a hidden numeric column, so within a shard sequence order is doc-id order,
/// and hits from different shards merge newest-first (and break score ties) exactly as one shard would.
#[derive(Debug, Clone)]
pub struct Sequencer {
    /// The hidden column (`_seq`).
    pub field: u16,
    /// The next number to hand out.
    pub next: Arc<AtomicU64>,
}

/// Counters for stats and benchmarks.
#[derive(Debug, Default)]
pub struct Counters {
    pub flushes: AtomicU64,
    /// Flushes the writer was waiting for, run by the urgent flusher at normal priority.
    pub urgent_flushes: AtomicU64,
    pub engraves: AtomicU64,
    pub commits: AtomicU64,
    pub merges: AtomicU64,
    pub flush_nanos: AtomicU64,
    pub engrave_nanos: AtomicU64,
    pub merge_nanos: AtomicU64,
    pub compactions: AtomicU64,
    pub compact_nanos: AtomicU64,
    /// Segments and documents dropped by retention.
    pub dropped_segments: AtomicU64,
    pub dropped_docs: AtomicU64,
}

/// A flush handed to the urgent flusher: the segment, and where its result goes.
type UrgentFlush = (u32, Sender<Result<()>>);

pub(crate) struct ShardInner {
    cfg: ShardConfig,
    dir: PathBuf,
    pub(crate) dram: Arc<DramHeap>,
    pub(crate) heap: Arc<PersistentHeap>,
    pub(crate) gdt: Gdt,
    writer: Mutex<Writer>,
    flush_tx: Mutex<Option<Sender<u32>>>,
    merge_tx: Mutex<Option<Sender<u32>>>,
    progress: (Mutex<()>, Condvar),
    failure: Mutex<Option<String>>,
    pub(crate) counters: Counters,
    /// DRAM high-water mark of earlier sessions.
    earlier_high_water: usize,
    /// Crash-safe mode: the logs.
    logs: Option<durable::Logs>,
    /// Heap extents of the manifest (and delete bitmaps) the durable recovery record points to.
    manifest_extents: Mutex<Vec<(u64, u64)>>,
    /// Serializes compaction and retention (they both replace merged segments and the dictionary).
    reclaim: Mutex<reclaim::ReclaimState>,
    /// Answers of repeated queries over the sealed segments (its bytes are part of the DRAM budget).
    pub(crate) cache: crate::query::ResultCache,
    /// Selective caching of the merged dictionary's hot chains, shared by its successive dictionaries (its
    /// bytes are part of the DRAM budget too).
    pub(crate) hot: Arc<HotChains>,
    /// Each field's postings codec, for flushes and compactions from now on (the owner's mapping).
    codecs: Mutex<Arc<FieldCodecs>>,
}

/// A shard. Dropping it closes it (gracefully, in graceful mode).
pub struct Shard {
    pub(crate) inner: Arc<ShardInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Set until [`finish_recovery`](Self::finish_recovery) has woken the merger (once).
    recovering: std::sync::atomic::AtomicBool,
}

/// Segment counts and tier usage.
#[derive(Debug, Clone, Serialize)]
pub struct ShardStats {
    pub docs: u64,
    pub deleted: u64,
    /// Deleted documents whose postings and stored records compaction has dropped (of `deleted`).
    pub purged: u64,
    pub segments: std::collections::BTreeMap<SegState, usize>,
    /// The DRAM heap (short-term and long-term rings); `dram.budget` is the whole DRAM budget, of which the
    /// rings get `budget − result_cache.capacity_bytes − selective_cache.capacity_bytes`.
    pub dram: DramStats,
    /// Highest DRAM use over the life of the index, across restarts (rings plus the caches' high-water
    /// marks; never above the budget).
    pub lifetime_dram_high_water: usize,
    pub result_cache: crate::query::CacheStats,
    /// Selective caching of the merged dictionary (hot chains in DRAM; part of the DRAM budget).
    pub selective_cache: HotStats,
    pub persistent: PersistentStats,
    pub merged_terms: u64,
    /// Bytes of segment images read from DRAM copies and from persistent copies.
    pub image_bytes_dram: u64,
    pub image_bytes_persistent: u64,
    pub flushes: u64,
    /// Of the flushes, those run at normal priority because the writer was waiting for them (the rest run
    /// at background priority, see `memory::run_in_background`).
    pub urgent_flushes: u64,
    pub engraves: u64,
    pub commits: u64,
    pub merges: u64,
    pub compactions: u64,
    /// Milliseconds the pipeline has spent flushing, engraving, merging and compacting (wall time of each
    /// step on its thread, summed; Elasticsearch's `total_time_in_millis` of flush and merge): with the
    /// counts above, the mean cost of a step.
    pub flush_millis: u64,
    pub engrave_millis: u64,
    pub merge_millis: u64,
    pub compaction_millis: u64,
    pub dropped_segments: u64,
    pub dropped_docs: u64,
    /// Bytes of the merged dictionary's region (tables, chain nodes, keys).
    pub merged_dictionary_bytes: u64,
    pub epoch: u64,
    pub durability: Durability,
    /// Crash-safe mode: tLog chunks in use, their bytes, and the next LSN.
    pub tlog_chunks: usize,
    pub tlog_bytes: u64,
    pub tlog_next_lsn: u64,
    /// tLog persist barriers taken (group commits, checkpoints) and the time spent in them.
    pub tlog_syncs: u64,
    pub tlog_sync_nanos: u64,
}

impl ShardStats {
    /// The stats of a sharded index: counts, bytes and budgets summed over its shards (the epoch is the
    /// highest; the cache's hit rate is recomputed from the summed counts).
    pub fn sum(parts: &[ShardStats]) -> ShardStats {
        let mut t = parts[0].clone();
        for p in &parts[1..] {
            t.docs += p.docs;
            t.deleted += p.deleted;
            t.purged += p.purged;
            for (k, v) in &p.segments {
                *t.segments.entry(*k).or_default() += v;
            }
            let (d, e) = (&mut t.dram, &p.dram);
            d.budget += e.budget;
            d.short_term_capacity += e.short_term_capacity;
            d.short_term_used += e.short_term_used;
            d.long_term_capacity += e.long_term_capacity;
            d.long_term_used += e.long_term_used;
            d.high_water += e.high_water;
            t.lifetime_dram_high_water += p.lifetime_dram_high_water;
            let (c, e) = (&mut t.result_cache, &p.result_cache);
            c.capacity_bytes += e.capacity_bytes;
            c.used_bytes += e.used_bytes;
            c.high_water_bytes += e.high_water_bytes;
            c.entries += e.entries;
            c.hits += e.hits;
            c.misses += e.misses;
            c.stale += e.stale;
            c.evictions += e.evictions;
            let (h, e) = (&mut t.selective_cache, &p.selective_cache);
            h.capacity_bytes += e.capacity_bytes;
            h.used_bytes += e.used_bytes;
            h.high_water_bytes += e.high_water_bytes;
            h.pinned_list_bytes += e.pinned_list_bytes;
            h.entries += e.entries;
            h.hits += e.hits;
            h.refreshes += e.refreshes;
            h.misses += e.misses;
            h.evictions += e.evictions;
            h.rejected += e.rejected;
            h.contended += e.contended;
            let (q, e) = (&mut t.persistent, &p.persistent);
            q.budget += e.budget;
            q.used += e.used;
            q.free += e.free;
            q.pending += e.pending;
            q.free_extents += e.free_extents;
            q.head += e.head;
            q.file_len += e.file_len;
            t.merged_terms += p.merged_terms;
            t.image_bytes_dram += p.image_bytes_dram;
            t.image_bytes_persistent += p.image_bytes_persistent;
            t.flushes += p.flushes;
            t.urgent_flushes += p.urgent_flushes;
            t.engraves += p.engraves;
            t.commits += p.commits;
            t.merges += p.merges;
            t.compactions += p.compactions;
            t.flush_millis += p.flush_millis;
            t.engrave_millis += p.engrave_millis;
            t.merge_millis += p.merge_millis;
            t.compaction_millis += p.compaction_millis;
            t.dropped_segments += p.dropped_segments;
            t.dropped_docs += p.dropped_docs;
            t.merged_dictionary_bytes += p.merged_dictionary_bytes;
            t.epoch = t.epoch.max(p.epoch);
            t.tlog_chunks += p.tlog_chunks;
            t.tlog_bytes += p.tlog_bytes;
            t.tlog_next_lsn = t.tlog_next_lsn.max(p.tlog_next_lsn);
            t.tlog_syncs += p.tlog_syncs;
            t.tlog_sync_nanos += p.tlog_sync_nanos;
        }
        let c = &mut t.result_cache;
        let asked = c.hits + c.misses + c.stale;
        c.hit_rate = if asked == 0 { 0.0 } else { c.hits as f64 / asked as f64 };
        let h = &mut t.selective_cache;
        let asked = h.hits + h.refreshes + h.misses;
        h.hit_rate = if asked == 0 { 0.0 } else { (h.hits + h.refreshes) as f64 / asked as f64 };
        t
    }
}

impl Shard {
    /// Opens the shard in `dir`, creating it if absent. Returns the shard, the `extra` data stored at its
    /// last clean close or checkpoint (`Null` for a new shard), and — after a crash in crash-safe mode — the
    /// tLog records the owner must [`replay`](Self::replay_add) (re-analysing each document with its schema).
    pub fn open(dir: &Path, cfg: ShardConfig) -> Result<(Shard, serde_json::Value, Option<Replay>)> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(HEAP_FILE);
        let heap_err = |e: crate::memory::PersistentHeapError| match e {
            crate::memory::PersistentHeapError::Locked => Error::Locked(dir.to_path_buf()),
            crate::memory::PersistentHeapError::Io(io) => Error::io(&path, io),
            other => Error::Format(format!("{}: {other}", path.display())),
        };
        if cfg.durability == Durability::Volatile && path.exists() {
            std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
        let dram = DramHeap::new(cfg.dram_heap_bytes(), cfg.short_term_bytes())
            .map_err(|e| Error::io("DRAM heap", e))?;
        if cfg.pretouch {
            // Not joined: the thread ends once the heap is touched, or at its next step after the heap is gone.
            let _ = dram.pretouch_in_background();
        }
        // What the durable recovery record refers to besides the segments, the dictionary and the logs.
        let mut durable_refs: Vec<(u64, u64)> = vec![];
        let (heap, manifest) = if path.exists() {
            let (heap, rec) =
                PersistentHeap::open(&path, cfg.persistent_budget, cfg.barrier.clone()).map_err(heap_err)?;
            if !rec.clean && rec.manifest_len == 0 {
                return Err(Error::Format(format!(
                    "{} was not closed cleanly (the process crashed or was killed) and graceful mode cannot \
                     recover it; restore a backup or re-index",
                    path.display()
                )));
            }
            if rec.manifest_len == 0 {
                return Err(Error::Format(format!("{}: clean heap without a manifest", path.display())));
            }
            let bytes = heap.slice(rec.manifest_off, rec.manifest_len as usize);
            if crc32fast::hash(bytes) != rec.manifest_crc {
                return Err(Error::corrupt(&path, rec.manifest_off, "manifest checksum mismatch"));
            }
            let m: Manifest = serde_json::from_slice(bytes)
                .map_err(|e| Error::corrupt(&path, rec.manifest_off, format!("manifest: {e}")))?;
            if !rec.clean && m.logs.is_none() {
                return Err(Error::Format(format!(
                    "{}: checkpoint without logs in a heap not closed cleanly",
                    path.display()
                )));
            }
            if m.format != MANIFEST_FORMAT {
                return Err(Error::Format(format!(
                    "{}: manifest format {} is not supported",
                    path.display(),
                    m.format
                )));
            }
            if let Some(heads) = &m.logs {
                // A crash-safe checkpoint stays the recovery point until the next one is durable.
                durable_refs.push((rec.manifest_off, rec.manifest_len));
                // The delete bitmaps are one allocation (each segment's lies inside it): one extent, so
                // it is given back exactly once.
                if let Some(start) = m.segments.iter().map(|s| s.deletes_off).min() {
                    let end = m.segments.iter().map(|s| s.deletes_off + s.deletes_len).max().unwrap_or(start);
                    durable_refs.push((start, (end - start).max(1)));
                }
                durable_refs.extend(heads.recycled_extents(&heap));
            }
            (Arc::new(heap), Some(m))
        } else {
            // Create under a temporary name and rename once the superblock is durable, so a crash during
            // creation leaves no half-made heap behind.
            let tmp = dir.join(format!("{HEAP_FILE}.new"));
            let _ = std::fs::remove_file(&tmp);
            let mut heap =
                PersistentHeap::create(&tmp, cfg.persistent_budget, cfg.barrier.clone()).map_err(heap_err)?;
            std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
            durable::sync_dir(dir)?;
            heap.set_path(&path);
            (Arc::new(heap), None)
        };

        let earlier_high_water = manifest.as_ref().map_or(0, |m| m.dram_high_water);
        let hot = Arc::new(HotChains::new(cfg.selective_cache_bytes()));
        let mut cfg = cfg;
        let mut logs = None;
        let mut replay = None;
        let (merged, segments, next_doc, next_seg, merged_upto, extra) = match manifest {
            Some(m) => {
                let merged = MergedSegment::open(heap.clone(), m.merged_header)
                    .map_err(|e| Error::corrupt(&path, m.merged_header, e.0))?
                    .with_hot(hot.clone());
                let mut segs = vec![];
                for s in &m.segments {
                    let e = crate::durability::Engraved {
                        seg: s.id,
                        base_doc: s.base_doc,
                        doc_count: s.doc_count,
                        image_off: s.image_off,
                        image_len: s.image_len,
                    };
                    let bytes = heap.try_slice(s.deletes_off, s.deletes_len as usize).ok_or_else(|| {
                        Error::corrupt(&path, s.deletes_off, "delete bitmap beyond the file")
                    })?;
                    if crc32fast::hash(bytes) != s.deletes_crc {
                        return Err(Error::corrupt(&path, s.deletes_off, "delete bitmap checksum mismatch"));
                    }
                    let del = DeleteBitmap::from_bytes(s.doc_count, bytes);
                    let state = if s.merged { SegState::Merged } else { SegState::Committed };
                    let sealed_at = if s.sealed_at == 0 { crate::gdt::now_millis() } else { s.sealed_at };
                    segs.push(Arc::new(durable::load_segment(&heap, &path, &e, del, state, sealed_at)?));
                }
                let mut merged_upto = segs.iter().filter(|s| s.state == SegState::Merged).map(|s| s.id).max();
                let (mut next_doc, mut next_seg) = (m.next_doc, m.next_seg);
                // A crash-safe shard stays crash-safe whatever the configuration says (like an Elasticsearch
                // index setting): recover from its logs and keep them.
                if let Some(heads) = &m.logs {
                    cfg.durability = Durability::CrashSafe;
                    heap.enable_reservations();
                    let r = durable::recover(&heap, &path, &m, heads, &mut segs, &merged)?;
                    (next_doc, next_seg, merged_upto) = (r.next_doc, r.next_seg, r.merged_upto);
                    logs = Some(r.logs);
                    replay = Some(r.replay);
                }
                if cfg.durability != Durability::CrashSafe {
                    // The heap is now in use: a crash from here on must be detected at the next open.
                    heap.write_record(&RecoveryRecord {
                        clean: false,
                        heap_end: heap.head(),
                        manifest_off: 0,
                        manifest_len: 0,
                        manifest_crc: 0,
                    })
                    .map_err(|e| Error::io(&path, e))?;
                }
                (Arc::new(merged), segs, next_doc, next_seg, merged_upto, m.extra)
            }
            None => {
                if cfg.durability == Durability::CrashSafe {
                    heap.enable_reservations();
                }
                let ms = MergedSegment::create(heap.clone()).map_err(heap_err)?.with_hot(hot.clone());
                (Arc::new(ms), vec![], 0, 0, None, serde_json::Value::Null)
            }
        };
        let new_logs = cfg.durability == Durability::CrashSafe && logs.is_none();
        if new_logs {
            // A new crash-safe shard (or a graceful one switching): the merged segment as it stands is the
            // base of the first checkpoint.
            heap.enable_reservations();
            merged.persist_all().map_err(heap_err)?;
            logs = Some(durable::Logs::create(&heap, extra.clone())?);
        }

        let fresh_block = dram
            .try_alloc_filled(RingKind::ShortTerm, cfg.fresh_bytes(), Fill::Overwritten)
            .ok_or_else(|| Error::ResourceExhausted("DRAM budget too small for one fresh segment".into()))?;
        let fresh = Arc::new(FreshSegment::new(fresh_block, cfg.max_docs_per_segment));
        fresh.prefault_ahead(REALTIME_PREFAULT_AHEAD);
        let fresh_deletes = Arc::new(DeleteBitmap::new(fresh.max_docs()));
        let mut segments = segments;
        segments.push(Arc::new(SegmentDesc {
            id: next_seg,
            base_doc: next_doc,
            state: SegState::Fresh,
            deletes: fresh_deletes.clone(),
            data: SegData::Fresh(fresh.clone()),
            doc_count: 0,
            sealed_at: 0,
        }));
        if let Some(l) = &logs {
            // The checkpoint's recycled tLog chunks stay out of reuse until the next checkpoint, which no
            // longer names them, releases them with this one. But the chunks the reopened tLog took back
            // (into its chain or its free list) are the log's: released too, they would have two owners.
            let owned: std::collections::HashSet<u64> = l.extents().iter().map(|e| e.0).collect();
            durable_refs.retain(|e| !owned.contains(&e.0));
        }
        let committed_at_open =
            segments.iter().filter(|s| s.state == SegState::Committed).map(|s| s.id).collect();
        let gdt = Gdt::new(Snapshot { epoch: 0, segments, merged_upto, merged });
        let (flush_tx, flush_rx) = bounded::<u32>(1);
        let (engrave_tx, engrave_rx) = bounded::<u32>(4);
        let (merge_tx, merge_rx) = bounded::<u32>(1 << 16);
        let cache = crate::query::ResultCache::new(cfg.result_cache_bytes(), cfg.result_cache_min_work);
        let inner = Arc::new(ShardInner {
            cfg,
            dir: dir.to_path_buf(),
            dram,
            heap,
            gdt,
            writer: Mutex::new(Writer {
                fresh,
                fresh_id: next_seg,
                fresh_base: next_doc,
                fresh_deletes,
                next_seg: next_seg + 1,
                closed: false,
                fresh_log_bytes: 0,
                fresh_newest_at: 0,
                seq: None,
                version_field: None,
                bulk_loads: 0,
            }),
            flush_tx: Mutex::new(Some(flush_tx)),
            merge_tx: Mutex::new(Some(merge_tx)),
            progress: (Mutex::new(()), Condvar::new()),
            failure: Mutex::new(None),
            counters: Counters::default(),
            earlier_high_water,
            logs,
            manifest_extents: Mutex::new(durable_refs),
            cache,
            hot,
            codecs: Mutex::new(Arc::new(FieldCodecs::default())),
            reclaim: Mutex::new(reclaim::ReclaimState {
                // After a crash, a committed segment's link may have begun before the checkpoint.
                partial_links: committed_at_open,
                ..Default::default()
            }),
        });
        if new_logs {
            inner.write_manifest(None, false)?;
        }
        // Free space = the heap minus everything the recovered state refers to.
        inner.rebuild_free_space()?;
        // The global rayon pool (a bulk arena's flush halves, a multi-shard query's fan-out) is made now, from
        // the opening thread: made lazily from a pipeline thread, its workers would inherit that thread's
        // background priority (`SCHED_IDLE`), and every multi-shard query would then run at idle priority.
        let _ = rayon::current_num_threads();
        let spawn = |name: &str, background: bool, f: Box<dyn FnOnce() + Send>| {
            // A bug that panics a pipeline thread fails the shard (writes refused with the message) instead
            // of leaving callers waiting for a stage that is gone.
            let (who, inner) = (name.to_string(), inner.clone());
            let body = move || {
                if background {
                    crate::memory::run_in_background();
                }
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    inner.fail(format!("{who} panicked: {msg}"));
                }
            };
            std::thread::Builder::new().name(name.into()).spawn(body).map_err(|e| Error::io("thread", e))
        };
        let (a, b, c, d) = (inner.clone(), inner.clone(), inner.clone(), inner.clone());
        let (urgent_tx, urgent_rx) = bounded::<UrgentFlush>(0);
        let engrave = engrave_tx.clone();
        let threads = vec![
            spawn("spirit-flusher", true, Box::new(move || a.flusher(flush_rx, engrave_tx, urgent_tx)))?,
            spawn("spirit-flusher-urgent", false, Box::new(move || d.urgent_flusher(urgent_rx, engrave)))?,
            spawn("spirit-engraver", true, Box::new(move || b.engraver(engrave_rx)))?,
            spawn("spirit-merger", true, Box::new(move || c.merger(merge_rx)))?,
        ];
        let shard = Shard { inner, threads: Mutex::new(threads), recovering: true.into() };
        if replay.is_none() {
            shard.finish_recovery();
        }
        Ok((shard, extra, replay))
    }

    /// Ends a crash recovery (the owner calls it after replaying): wakes the merger for the segments recovered
    /// committed but not merged. Deferred until the replay is done so the two do not compete for cores —
    /// unless a replayed segment commits first, since the merger always merges in segment order.
    /// Idempotent. An owner whose replay failed calls [`abandon`](Self::abandon) instead, so the next open
    /// replays again.
    pub fn finish_recovery(&self) {
        if !self.recovering.swap(false, SeqCst) {
            return;
        }
        let snap = self.inner.gdt.pin();
        let pending = snap.segments.iter().filter(|s| s.state == SegState::Committed).map(|s| s.id);
        if let Some(tx) = self.inner.merge_tx.lock().as_ref() {
            for id in pending {
                let _ = tx.send(id);
            }
        }
    }

    /// The postings codec of each field for the images built from now on (existing images keep theirs
    /// until compaction re-encodes them).
    pub fn set_field_codecs(&self, codecs: FieldCodecs) {
        *self.inner.codecs.lock() = Arc::new(codecs);
    }

    /// The postings codecs images are built with now.
    pub fn field_codecs(&self) -> Arc<FieldCodecs> {
        self.inner.codecs.lock().clone()
    }

    /// Makes every later add take its sequence number from `seq` (sharded indexes; set before any add).
    pub fn set_sequencer(&self, seq: Sequencer) {
        self.inner.writer.lock().seq = Some(seq);
    }

    /// Makes every later write keep its document's `_version` in hidden column `field` (set before any add).
    pub fn set_version_field(&self, field: u16) {
        self.inner.writer.lock().version_field = Some(field);
    }

    /// The sequence number of the newest document (sharded indexes), to resume numbering after a restart.
    pub fn newest_seq(&self, field: u16) -> Result<Option<u64>> {
        let snap = self.pin();
        let Some(seg) = snap.segments.iter().rev().find(|s| s.visible_docs() > 0) else { return Ok(None) };
        Ok(number_of(seg, field, seg.visible_docs() - 1)?.map(|x| x as u64))
    }

    /// Pins the current epoch for a query.
    pub fn pin(&self) -> Arc<Snapshot> {
        self.inner.gdt.pin()
    }

    /// Adds a document; it is visible to every query that starts after this returns. Returns its doc id.
    pub fn add(&self, doc: &AnalyzedDoc) -> Result<u32> {
        let mut w = self.inner.writer.lock();
        self.add_locked(&mut w, doc)
    }

    fn add_locked(&self, w: &mut Writer, doc: &AnalyzedDoc) -> Result<u32> {
        self.inner.check_open(w)?;
        // The limit is an empty real-time arena's, whatever arena is current (a bulk load's are larger): what
        // is accepted never depends on how documents fell into segments, and a crash-safe replay, which runs
        // in real-time arenas, accepts everything the log holds.
        let (cfg, too_large) = (&self.inner.cfg, |limit| Error::DocumentTooLarge {
            size: doc.source.len() + doc.postings_words() * 4,
            limit,
        });
        if !FreshSegment::fits_empty_arena(cfg.fresh_bytes(), cfg.max_docs_per_segment, doc) {
            return Err(too_large(cfg.fresh_bytes()));
        }
        loop {
            match w.fresh.insert(doc) {
                Ok(local) => {
                    if self.inner.cfg.retention.max_age_secs.is_some() {
                        w.fresh_newest_at = crate::gdt::now_millis();
                    }
                    return Ok(w.fresh_base + local);
                }
                // An empty segment that cannot take it never will (no arena is smaller than the limit's; this
                // only guards the loop).
                Err(InsertError::Full) if w.fresh.visible() == 0 => {
                    return Err(too_large(w.fresh.dram_bytes()))
                }
                Err(InsertError::Full) => self.inner.seal(w)?,
            }
        }
    }

    /// Finds the live doc with `_id`, if any, without the writer lock.
    ///
    /// A lookup reads delete bits as they are now (it must find the newest version), so over one snapshot it
    /// can race with an update: the writer deletes the old version, which the lookup then finds deleted, and
    /// inserts the new one — into a fresh segment newer than the snapshot, or into the live fresh segment
    /// after the lookup passed it: neither version would be seen. So a lookup
    /// that finds no live version but passed a deleted one with the id's hash (an old version, or a
    /// collision) looks again under the writer lock, where no write is half done. Gets of live documents
    /// never take the lock; a get of a deleted one (or a race) does, for a moment.
    pub fn find_id(&self, id: &str) -> Option<(Arc<SegmentDesc>, u32)> {
        match self.find_id_once(id) {
            (None, true) => {
                let _w = self.inner.writer.lock();
                self.find_id_once(id).0
            }
            (found, _) => found,
        }
    }

    /// [`find_id`](Self::find_id) for a caller that holds the writer lock: one lookup is exact.
    fn find_id_locked(&self, _w: &Writer, id: &str) -> Option<(Arc<SegmentDesc>, u32)> {
        self.find_id_once(id).0
    }

    /// One lookup of `_id` over the current snapshot: the live version if any, and whether a deleted doc
    /// with the id's hash was passed.
    fn find_id_once(&self, id: &str) -> (Option<(Arc<SegmentDesc>, u32)>, bool) {
        let snap = self.inner.gdt.pin();
        let saw_deleted = std::cell::Cell::new(false);
        let h = id_hash(id);
        // Images are searched in groups of up to ID_LOCKSTEP, newest first, their tables in lockstep
        // (`id_lower_bounds`); a fresh segment first ends the group before it, so segments are still
        // answered newest first.
        let mut group: [Option<(&Arc<SegmentDesc>, ImageView<'_>)>; ID_LOCKSTEP] = [None; ID_LOCKSTEP];
        let mut len = 0;
        let search = |group: &[Option<(&Arc<SegmentDesc>, ImageView<'_>)>]| {
            let mut tables = [&[][..]; ID_LOCKSTEP];
            for (t, (_, v)) in tables.iter_mut().zip(group.iter().flatten()) {
                *t = v.ids();
            }
            let mut starts = [0usize; ID_LOCKSTEP];
            id_lower_bounds(&tables[..group.len()], h, &mut starts[..group.len()]);
            group.iter().flatten().zip(starts).find_map(|((s, v), start)| {
                v.id_entries_from(h, start)
                    .find(|&e| {
                        if s.deletes.is_deleted(v.entry_doc(e)) {
                            saw_deleted.set(true);
                            return false;
                        }
                        v.entry_is(e, id)
                    })
                    .map(|e| (Arc::clone(s), v.entry_doc(e)))
            })
        };
        for s in snap.segments.iter().rev() {
            match &s.data {
                SegData::Fresh(f) => {
                    if len > 0 {
                        if let Some(hit) = search(&group[..len]) {
                            return (Some(hit), saw_deleted.get());
                        }
                        len = 0;
                    }
                    if let Some(local) = f.lookup_id(id) {
                        if !s.deletes.is_deleted(local) {
                            return (Some((s.clone(), local)), saw_deleted.get());
                        }
                        saw_deleted.set(true);
                    }
                }
                SegData::Image { .. } => {
                    if let Some(Ok(v)) = s.image() {
                        group[len] = Some((s, v));
                        len += 1;
                        if len == ID_LOCKSTEP {
                            if let Some(hit) = search(&group[..len]) {
                                return (Some(hit), saw_deleted.get());
                            }
                            len = 0;
                        }
                    }
                }
            }
        }
        let found = if len > 0 { search(&group[..len]) } else { None };
        (found, saw_deleted.get())
    }

    /// Deletes the live doc with `_id`; returns whether there was one. In crash-safe mode the delete is
    /// durable when this returns.
    pub fn delete(&self, id: &str) -> Result<bool> {
        let (found, lsn) = self.delete_deferred(id)?;
        self.sync_to(lsn)?;
        Ok(found.is_some())
    }

    /// Like [`delete`](Self::delete), but not yet durable: returns the deleted document's `_version` (`None`:
    /// there was none) and the tLog LSN to pass to [`sync_to`](Self::sync_to) (bulk requests sync once for
    /// many operations).
    pub fn delete_deferred(&self, id: &str) -> Result<(Option<u64>, Option<u64>)> {
        self.delete_if_deferred(id, Precondition::None)
    }

    /// The `_version` of doc `local` of `seg` (the caller holds the writer lock).
    fn live_version(&self, w: &Writer, seg: &SegmentDesc, local: u32) -> Result<u64> {
        w.version_field.map_or(Ok(1), |f| version_of(seg, f, local))
    }

    /// Deletes the document with `_id` only if its live version is still doc `doc` (a doc id of this shard):
    /// the conditional delete of `_delete_by_query`, which must not delete a newer version written after the
    /// query matched the old one (Elasticsearch's version conflict). Not yet durable: returns the tLog LSN as
    /// [`delete_deferred`](Self::delete_deferred) does.
    pub fn delete_version_deferred(&self, id: &str, doc: u32) -> Result<(VersionDelete, Option<u64>)> {
        self.delete_live(id, doc)
    }

    /// Deletes the live doc with `_id` only if `cond` holds for it (Elasticsearch's `if_seq_no`, or an
    /// external version above its `_version`); otherwise [`Error::VersionConflict`] and nothing is deleted.
    /// Returns the deleted document's `_version` (`None`: there was none, which an external version allows)
    /// and, not yet durable, the tLog LSN as [`delete_deferred`](Self::delete_deferred) does.
    pub fn delete_if_deferred(&self, id: &str, cond: Precondition) -> Result<(Option<u64>, Option<u64>)> {
        let w = self.inner.writer.lock();
        self.inner.check_open(&w)?;
        let found = self.find_id_locked(&w, id);
        let live = match &found {
            Some((seg, local)) => Some((seg.base_doc + local, self.live_version(&w, seg, *local)?)),
            None => None,
        };
        cond.check(id, live)?;
        match found {
            Some((seg, local)) => Ok((live.map(|l| l.1), self.delete_found(&w, &seg, local, id)?)),
            None => Ok((None, None)),
        }
    }

    /// Deletes the live version of `_id` only when that is doc `doc`, and logs the delete; returns what
    /// happened and the tLog LSN.
    fn delete_live(&self, id: &str, doc: u32) -> Result<(VersionDelete, Option<u64>)> {
        let w = self.inner.writer.lock();
        self.inner.check_open(&w)?;
        match self.find_id_locked(&w, id) {
            Some((seg, local)) if doc == seg.base_doc + local => {
                Ok((VersionDelete::Deleted, self.delete_found(&w, &seg, local, id)?))
            }
            Some(_) => Ok((VersionDelete::Replaced, None)),
            None => Ok((VersionDelete::Gone, None)),
        }
    }

    /// Deletes doc `local` of `seg`, the live version of `_id` (the caller holds the writer lock), and logs it.
    ///
    /// Stamped with the newest doc id there is ([`crate::segment::deletes`]): queries that began before it
    /// and do not see that doc do not see the delete either. If the tLog append fails the delete is undone
    /// (nothing is lost that the error says was not done).
    fn delete_found(&self, w: &Writer, seg: &SegmentDesc, local: u32, id: &str) -> Result<Option<u64>> {
        seg.deletes.delete(local, w.next_doc().saturating_sub(1));
        let logged = self.inner.log_delete(seg.base_doc + local, id);
        match &logged {
            Err(_) => seg.deletes.undelete(local),
            Ok(_) => {
                if let SegData::Fresh(f) = &seg.data {
                    f.forget_id(id);
                }
            }
        }
        logged
    }

    /// Adds `doc`, replacing the live doc with the same `_id` (Elasticsearch `index` semantics). With
    /// `check_existing` false the caller promises the id is new (auto-generated ids). Returns the new doc id
    /// and whether a doc was replaced. In crash-safe mode the write is durable when this returns.
    pub fn upsert(&self, doc: &mut AnalyzedDoc, check_existing: bool) -> Result<(u32, bool)> {
        let u = self.upsert_deferred(doc, check_existing, Precondition::None)?;
        self.sync_to(u.lsn)?;
        Ok((u.doc, u.replaced))
    }

    /// Like [`upsert`](Self::upsert), but not yet durable: also returns the document's `_version` and the
    /// tLog LSN to pass to [`sync_to`](Self::sync_to). The write happens only if `cond` holds for the `_id`'s
    /// live version, checked under the writer lock with the write itself (otherwise
    /// [`Error::VersionConflict`], nothing written); a condition needs `check_existing`.
    pub fn upsert_deferred(
        &self,
        doc: &mut AnalyzedDoc,
        check_existing: bool,
        cond: Precondition,
    ) -> Result<Upserted> {
        assert!(check_existing || cond == Precondition::None, "a condition looks the _id up");
        // One writer: find, add and delete under the writer lock, so no other write interleaves.
        let mut w = self.inner.writer.lock();
        // Keep only where the old version is, not its segment: a descriptor of a fresh segment owns that
        // segment's arena, and `add_locked` may seal and wait for the short-term ring to free an arena —
        // possibly this very one, once the flusher is done with it. Holding it would deadlock the writer.
        // The live version: its doc id, delete bitmap, place in its segment and `_version`.
        let old = match check_existing.then(|| self.find_id_locked(&w, &doc.id)).flatten() {
            Some((seg, local)) => {
                let version = self.live_version(&w, &seg, local)?;
                Some((seg.base_doc + local, seg.deletes.clone(), local, version))
            }
            None => None,
        };
        cond.check(&doc.id, old.as_ref().map(|o| (o.0, o.3)))?;
        let version = cond.next_version(old.as_ref().map(|o| o.3));
        if let Some(f) = w.version_field {
            // Version 1 is no value (see `version_of`).
            match version {
                1 => doc.clear_numeric(f),
                v => doc.set_numeric(f, v as f64),
            }
        }
        let seq = w.seq.as_ref().map(|s| {
            let n = s.next.fetch_add(1, Relaxed);
            doc.set_numeric(s.field, n as f64);
            n
        });
        // The old version is deleted first, stamped with the doc id the new one gets
        // ([`crate::segment::deletes`]): a query sees exactly one of them whenever it runs. Bitmaps are
        // shared by every descriptor of a segment, so this reaches the current one.
        let stamp = w.next_doc();
        if let Some((_, deletes, local, _)) = &old {
            deletes.delete(*local, stamp);
        }
        let undo = |old: &Option<(u32, Arc<DeleteBitmap>, u32, u64)>| {
            if let Some((_, deletes, local, _)) = old {
                deletes.undelete(*local);
            }
        };
        let new = self.add_locked(&mut w, doc).inspect_err(|_| undo(&old))?;
        assert_eq!(new, stamp, "an add takes the next doc id");
        let replaced = old.as_ref().map(|o| o.0);
        let lsn = self.inner.log_add(&w, doc, new, replaced, seq, version).inspect_err(|_| undo(&old))?;
        if lsn.is_some() {
            // Bound what recovery must re-index: seal once the fresh segment's log tail is long enough.
            w.fresh_log_bytes += doc.log_source().len() + doc.id.len();
            if w.fresh_log_bytes >= self.inner.cfg.replay_bytes {
                self.inner.seal(&mut w)?;
            }
        }
        Ok(Upserted { doc: new, replaced: replaced.is_some(), version, lsn })
    }

    /// Whether `doc` is within the document size limit: an empty real-time fresh segment could hold it (see
    /// [`add_locked`](Self::add_locked), which refuses it otherwise). For a document whose block holds its
    /// terms, only the bound from its totals is known: `false` may mean it needs its terms back to tell.
    pub(crate) fn accepts(&self, doc: &AnalyzedDoc) -> bool {
        let cfg = &self.inner.cfg;
        FreshSegment::fits_empty_arena(cfg.fresh_bytes(), cfg.max_docs_per_segment, doc)
    }

    /// Adds `docs`, new documents with generated `_id`s (none replaces anything: nothing to look up), as
    /// [`upsert_deferred`](Self::upsert_deferred) would one after the other — consecutive doc ids, `_seq` and
    /// version numbers, log records in order — but with their postings inserted term by term
    /// ([`FreshSegment::insert_batch`]; `batch` is filled from the block they were analyzed into): a bulk load's block at a time. Into an
    /// empty fresh segment (a new one, or after the batch did not fit the last) they go one by one (given
    /// their terms back, [`TermBatch::unbatch`]), so a
    /// batch that fills a segment part-way only ever leaves its writes in one with documents, which the seal
    /// ends at their watermark. Every document must pass [`accepts`](Self::accepts).
    ///
    /// One result per document, in order, up to the first that failed (a failed log write, a closed shard):
    /// the documents after it are not in the index (their `_seq` numbers, drawn for the block, are lost: a
    /// gap, as a failed log write leaves one too). `Err` when none was added.
    pub(crate) fn add_batch(
        &self,
        docs: &mut [AnalyzedDoc],
        batch: &TermBatch,
    ) -> Result<Vec<Result<Upserted>>> {
        let mut w = self.inner.writer.lock();
        self.inner.check_open(&w)?;
        let mut seqs = Vec::with_capacity(docs.len());
        for doc in docs.iter_mut() {
            debug_assert!(self.accepts(doc), "the caller checked the size limit");
            // Version 1 is no value (see `version_of`).
            if let Some(f) = w.version_field {
                doc.clear_numeric(f);
            }
            seqs.push(w.seq.as_ref().map(|s| {
                let n = s.next.fetch_add(1, Relaxed);
                doc.set_numeric(s.field, n as f64);
                n
            }));
        }
        let first = w.next_doc();
        // Together into the current segment, or one by one into an empty one.
        let together = loop {
            if w.fresh.visible() == 0 {
                break None;
            }
            let refs: Vec<&AnalyzedDoc> = docs.iter().collect();
            match w.fresh.insert_batch(&refs, batch) {
                Ok(local) => break Some(local),
                Err(_) => self.inner.seal(&mut w)?,
            }
        };
        if together.is_none() {
            batch.unbatch(docs.iter_mut());
        }
        let refs: Vec<&AnalyzedDoc> = docs.iter().collect();
        // Logs document `i`, added as doc `first + i`.
        let log = |w: &mut Writer, i: usize, seq: Option<u64>| -> Result<Upserted> {
            let (doc, new) = (refs[i], first + i as u32);
            let lsn = self.inner.log_add(w, doc, new, None, seq, 1)?;
            if lsn.is_some() {
                w.fresh_log_bytes += doc.log_source().len() + doc.id.len();
            }
            Ok(Upserted { doc: new, replaced: false, version: 1, lsn })
        };
        let mut out: Vec<Result<Upserted>> = Vec::with_capacity(docs.len());
        match together {
            None => {
                // One by one, each logged as it goes in (the log tail's seal is checked once, after the
                // block); the first failure ends it.
                for (i, &seq) in seqs.iter().enumerate() {
                    let r = self.add_locked(&mut w, refs[i]).and_then(|new| {
                        assert_eq!(new, first + i as u32, "an add takes the next doc id");
                        log(&mut w, i, seq)
                    });
                    let failed = r.is_err();
                    out.push(r);
                    if failed {
                        break;
                    }
                }
            }
            Some(local) => {
                assert_eq!(w.fresh_base + local, first, "a batch takes the next doc ids");
                if self.inner.cfg.retention.max_age_secs.is_some() {
                    w.fresh_newest_at = crate::gdt::now_millis();
                }
                for (i, &seq) in seqs.iter().enumerate() {
                    let r = log(&mut w, i, seq);
                    if r.is_err() {
                        // `log_add` deleted this one; the ones after it are published but not logged:
                        // deleted too, each stamped with its own doc id as `log_add` does.
                        for (j, d) in refs.iter().enumerate().skip(i + 1) {
                            let doc = first + j as u32;
                            self.inner.delete_doc(doc, Some(&d.id), Some(doc));
                        }
                        out.push(r);
                        break;
                    }
                    out.push(r);
                }
            }
        }
        if w.fresh_log_bytes >= self.inner.cfg.replay_bytes
            && out.iter().any(|u| matches!(u, Ok(u) if u.lsn.is_some()))
        {
            // The documents are in and logged: a failed seal (a stopped pipeline, which stays failed) is
            // reported by the next write, not as theirs.
            let _ = self.inner.seal(&mut w);
        }
        Ok(out)
    }

    /// A bulk load starts: fresh segments started from now on get the bulk arena
    /// ([`ShardConfig::bulk_arenas`]) until every bulk load begun has ended. The fresh segment being
    /// written keeps its arena until it fills — unless it holds no document yet (a new index, or one just
    /// sealed), when one with the bulk arena replaces it at once if the short-term ring has room: a load
    /// into a new index otherwise began with a real-time segment (32k enwiki documents in 64 MiB) flushed,
    /// engraved and merged on its own. Paired with [`Self::end_bulk`] by [`crate::index::BulkGuard`].
    pub(crate) fn begin_bulk(&self) {
        let mut w = self.inner.writer.lock();
        w.bulk_loads += 1;
        let cfg = &self.inner.cfg;
        let realtime_arena =
            !cfg.is_bulk_arena(w.fresh.dram_bytes()) && cfg.bulk_fresh_bytes() > cfg.fresh_bytes();
        if realtime_arena && w.fresh.visible() == 0 && self.inner.check_open(&w).is_ok() {
            // Not zeroed: the fresh segment zeroes what it uses as it goes.
            let block = self.inner.dram.try_alloc_filled(
                RingKind::ShortTerm,
                cfg.bulk_fresh_bytes(),
                Fill::Overwritten,
            );
            if let Some(block) = block {
                let (base, empty) = (w.next_doc(), w.fresh_id);
                self.inner.start_fresh(&mut w, block, base, Some(empty));
            }
        }
    }

    /// A bulk load ended. Once none runs, a fresh segment with a bulk arena is sealed if it holds documents,
    /// so real-time writes go on in a segment of the real-time size (a fresh segment has no skip data: the
    /// smaller, the cheaper every query over it). An empty one (the load ended right after a seal) is kept and
    /// filled by real-time writes until it is full — the document limit is the real-time arena's either way.
    /// A closed or failed shard only counts the load as ended.
    pub(crate) fn end_bulk(&self) -> Result<()> {
        let mut w = self.inner.writer.lock();
        debug_assert!(w.bulk_loads > 0, "end_bulk without begin_bulk");
        w.bulk_loads = w.bulk_loads.saturating_sub(1);
        let bulk_arena = self.inner.cfg.is_bulk_arena(w.fresh.dram_bytes());
        if w.bulk_loads == 0 && bulk_arena && w.fresh.visible() > 0 && self.inner.check_open(&w).is_ok() {
            self.inner.seal(&mut w)?;
        }
        Ok(())
    }

    /// Seals the current fresh segment (if it has documents) so the pipeline flushes it.
    pub fn seal(&self) -> Result<()> {
        let mut w = self.inner.writer.lock();
        self.inner.check_open(&w)?;
        if w.fresh.visible() > 0 {
            self.inner.seal(&mut w)?;
        }
        Ok(())
    }

    /// Waits until every sealed segment is flushed and engraved, and every committed one is merged (tests and
    /// benchmarks use this to reach a lifecycle stage deterministically).
    pub fn wait_idle(&self) -> Result<()> {
        self.wait_pipeline(true)
    }

    /// Waits until every sealed segment is flushed and engraved (and committed, as far as the commit policy
    /// commits right after engraving), leaving merges to run on in the background — the point a benchmark
    /// compares with a baseline's commit, which does not wait for its background merges either.
    pub fn wait_engraved(&self) -> Result<()> {
        self.wait_pipeline(false)
    }

    /// [`Self::wait_idle`] (`merges`) or [`Self::wait_engraved`].
    fn wait_pipeline(&self, merges: bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(f) = self.inner.failure.lock().clone() {
                return Err(Error::ResourceExhausted(f));
            }
            let active = {
                let w = self.inner.writer.lock();
                (!w.closed).then_some(w.fresh_id)
            };
            let snap = self.inner.gdt.pin();
            // Busy while a sealed segment waits for the flusher or engraver, the engraver has yet to commit
            // what the commit policy commits right after engraving (it marks a segment engraved first), or
            // the merger can merge the oldest unmerged segment (committed; merges go in segment order).
            let engraved = snap.segments.iter().filter(|s| s.state == SegState::Engraved).count();
            let to_commit = match (self.inner.cfg.commit, self.inner.cfg.max_unmerged) {
                (CommitPolicy::Eager, _) => engraved > 0,
                (CommitPolicy::Lazy, Some(max)) => engraved > max,
                (CommitPolicy::Lazy, None) => false,
            };
            let busy = to_commit
                || snap
                    .segments
                    .iter()
                    .any(|s| Some(s.id) != active && matches!(s.state, SegState::Fresh | SegState::Flushed))
                || merges
                    && snap
                        .segments
                        .iter()
                        .find(|s| s.state != SegState::Merged)
                        .is_some_and(|s| s.state == SegState::Committed);
            if !busy {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::ResourceExhausted("pipeline did not drain in 300 s".into()));
            }
            let mut g = self.inner.progress.0.lock();
            self.inner.progress.1.wait_for(&mut g, Duration::from_millis(5));
        }
    }

    /// Commits every engraved segment (GDT switches to the persistent copy) and waits until all committed
    /// segments are merged.
    pub fn commit_and_merge_all(&self) -> Result<()> {
        self.wait_idle()?;
        while self.inner.commit_oldest() == Commit::Done {}
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let snap = self.inner.gdt.pin();
            if !snap.segments.iter().any(|s| s.state == SegState::Committed) {
                return Ok(());
            }
            if let Some(f) = self.inner.failure.lock().clone() {
                return Err(Error::ResourceExhausted(f));
            }
            if Instant::now() > deadline {
                return Err(Error::ResourceExhausted("merger did not finish in 300 s".into()));
            }
            let mut g = self.inner.progress.0.lock();
            self.inner.progress.1.wait_for(&mut g, Duration::from_millis(5));
        }
    }

    /// Commits and merges everything, then runs compaction and retention at once (what the merger does in
    /// the background after merges). Like Elasticsearch's `_forcemerge`, it returns when they are done.
    pub fn compact_now(&self) -> Result<()> {
        self.commit_and_merge_all()?;
        self.inner.reclaim()
    }

    /// Seals the fresh segment, commits and merges everything, then compacts until at most `max_segments`
    /// merged segments remain (see `ShardInner::force_merge`). Returns the segments left. Documents added
    /// meanwhile stay in newer segments, as in Elasticsearch.
    pub fn force_merge(&self, max_segments: usize) -> Result<usize> {
        if max_segments == 0 {
            return Err(Error::InvalidArgument("max_num_segments must be at least 1".into()));
        }
        self.seal()?;
        self.commit_and_merge_all()?;
        self.inner.force_merge(max_segments)
    }

    pub fn stats(&self) -> ShardStats {
        let snap = self.inner.gdt.pin();
        let mut segments = std::collections::BTreeMap::new();
        for st in SegState::ALL {
            segments.insert(st, 0);
        }
        let (mut docs, mut deleted, mut purged) = (0u64, 0u64, 0u64);
        let (mut img_dram, mut img_pers) = (0u64, 0u64);
        for s in &snap.segments {
            if let SegData::Image { dram, persistent } = &s.data {
                img_dram += dram.as_ref().map_or(0, |d| d.bytes().len() as u64);
                img_pers += persistent.as_ref().map_or(0, |p| p.len as u64);
            }
            if s.state == SegState::Fresh && s.visible_docs() == 0 {
                continue;
            }
            *segments.get_mut(&s.state).unwrap() += 1;
            docs += s.visible_docs() as u64;
            deleted += s.deletes.count() as u64;
            purged += s.image().and_then(Result::ok).map_or(0, |v| v.purged() as u64);
        }
        let c = &self.inner.counters;
        let (dram, cache, hot) = (self.inner.dram.stats(), self.inner.cache.stats(), self.inner.hot.stats());
        let tlog = self.inner.logs.as_ref().map_or((0, 0, 0), |l| l.tlog_stats());
        let tsync = self.inner.logs.as_ref().map_or((0, Duration::ZERO), |l| l.tlog_sync_stats());
        ShardStats {
            docs: docs - deleted,
            deleted,
            purged,
            segments,
            dram: DramStats { budget: self.inner.cfg.dram_budget, ..dram },
            lifetime_dram_high_water: (dram.high_water + cache.high_water_bytes + hot.high_water_bytes)
                .max(self.inner.earlier_high_water),
            result_cache: cache,
            selective_cache: hot,
            persistent: self.inner.heap.stats(),
            merged_terms: snap.merged.term_count(),
            image_bytes_dram: img_dram,
            image_bytes_persistent: img_pers,
            flushes: c.flushes.load(Relaxed),
            urgent_flushes: c.urgent_flushes.load(Relaxed),
            engraves: c.engraves.load(Relaxed),
            commits: c.commits.load(Relaxed),
            merges: c.merges.load(Relaxed),
            compactions: c.compactions.load(Relaxed),
            flush_millis: c.flush_nanos.load(Relaxed) / 1_000_000,
            engrave_millis: c.engrave_nanos.load(Relaxed) / 1_000_000,
            merge_millis: c.merge_nanos.load(Relaxed) / 1_000_000,
            compaction_millis: c.compact_nanos.load(Relaxed) / 1_000_000,
            dropped_segments: c.dropped_segments.load(Relaxed),
            dropped_docs: c.dropped_docs.load(Relaxed),
            merged_dictionary_bytes: snap.merged.region_bytes(),
            epoch: snap.epoch,
            durability: self.inner.cfg.durability,
            tlog_chunks: tlog.0,
            tlog_bytes: tlog.1,
            tlog_next_lsn: tlog.2,
            tlog_syncs: tsync.0,
            tlog_sync_nanos: tsync.1.as_nanos() as u64,
        }
    }

    /// The result cache (SPIRIT §4.11) that [`crate::Index`] searches use.
    pub fn result_cache(&self) -> &crate::query::ResultCache {
        &self.inner.cache
    }

    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    pub fn durability(&self) -> Durability {
        self.inner.cfg.durability
    }

    /// Closes the shard: drains the pipeline, commits and merges everything, and (in graceful mode) writes the
    /// manifest and the recovery record. `extra` is stored in the manifest and returned by the next `open`.
    pub fn close(&self, extra: serde_json::Value) -> Result<()> {
        {
            let mut w = self.inner.writer.lock();
            if w.closed {
                return Ok(());
            }
            if w.fresh.visible() > 0 {
                self.inner.seal_last(&mut w)?;
            } else {
                let id = w.fresh_id;
                self.inner.gdt.update(|s| s.segments.retain(|d| d.id != id));
            }
            w.closed = true;
        }
        self.inner.heap.begin_close();
        // Let the flusher and engraver drain, then stop them.
        let drained = self.wait_idle();
        self.inner.flush_tx.lock().take();
        let result = drained.and_then(|_| {
            if self.inner.cfg.durability == Durability::Volatile {
                return Ok(());
            }
            self.commit_and_merge_all()
        });
        self.inner.merge_tx.lock().take();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if let Err(e) = result {
            // Graceful mode recovers nothing it did not close cleanly, so a failure in the persistent tier (a
            // full disk) must not cost the whole index: the close records the persisted prefix, and only the
            // documents after it are lost — and an update among them with the version it replaced, whose
            // delete bit is in a persisted segment's bitmap. (Crash-safe mode recovers from its logs.)
            if self.inner.cfg.durability == Durability::Graceful {
                return Err(match self.inner.write_manifest_prefix(Some(extra)) {
                    Ok(()) => Error::ResourceExhausted(format!(
                        "{e}; closed with the documents persisted before the failure; later writes are lost \
                         (an update among them, with the version it replaced)"
                    )),
                    Err(e2) => Error::ResourceExhausted(format!(
                        "{e}; and the close could not record what was persisted ({e2}): the index will not open"
                    )),
                });
            }
            return Err(e);
        }
        if self.inner.cfg.durability == Durability::Volatile {
            return Ok(());
        }
        self.inner.write_manifest(Some(extra), true)
    }

    /// Stops the pipeline without writing a manifest or a clean checkpoint: what an owner does when it
    /// cannot finish opening (a failed replay, another shard that would not open). The next open recovers
    /// from the logs exactly as it would have now, so nothing acknowledged is lost.
    pub fn abandon(&self) {
        self.inner.writer.lock().closed = true;
        self.inner.flush_tx.lock().take();
        self.inner.merge_tx.lock().take();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        // Graceful mode promises survival of a clean shutdown even if the owner forgot close(); the extra data
        // is then lost, so owners always call close() themselves.
        if !self.inner.writer.lock().closed {
            let _ = self.close(serde_json::Value::Null);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Commit {
    Done,
    /// The oldest uncommitted segment is not engraved yet.
    Wait,
    /// Nothing left to commit.
    Nothing,
}

impl ShardInner {
    fn check_open(&self, w: &Writer) -> Result<()> {
        if w.closed {
            return Err(Error::Closed);
        }
        if let Some(f) = self.failure.lock().clone() {
            return Err(Error::ResourceExhausted(f));
        }
        Ok(())
    }

    fn fail(&self, msg: String) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(msg);
        }
        self.progress.1.notify_all();
    }

    fn notify(&self) {
        let _g = self.progress.0.lock();
        self.progress.1.notify_all();
    }

    /// Records when the segment being sealed received its newest document (retention by age reads it).
    fn stamp_sealed(&self, w: &mut Writer) {
        let at = if w.fresh_newest_at == 0 { crate::gdt::now_millis() } else { w.fresh_newest_at };
        self.gdt.update_segment(w.fresh_id, |d| d.sealed_at = at);
        w.fresh_newest_at = 0;
    }

    /// Hands the current fresh segment to the flusher without starting a new one (close).
    fn seal_last(&self, w: &mut Writer) -> Result<()> {
        self.stamp_sealed(w);
        let tx = self.flush_tx.lock().clone().ok_or(Error::Closed)?;
        tx.send(w.fresh_id).map_err(|_| Error::ResourceExhausted("flusher stopped".into()))
    }

    /// Hands the current fresh segment to the flusher and starts a new one.
    fn seal(&self, w: &mut Writer) -> Result<()> {
        let sealed_id = w.fresh_id;
        self.stamp_sealed(w);
        let next_base = w.next_doc();
        let tx = self.flush_tx.lock().clone().ok_or(Error::Closed)?;
        tx.send(sealed_id).map_err(|_| Error::ResourceExhausted("flusher stopped".into()))?;
        // A bulk load gets few, large segments; real-time writes small ones (see `ShardConfig::bulk_arenas`).
        let bytes = if w.bulk_loads > 0 { self.cfg.bulk_fresh_bytes() } else { self.cfg.fresh_bytes() };
        // Back-pressure: wait for the short-term ring (the flusher frees arenas as it goes).
        let block = loop {
            if let Some(b) =
                // Not zeroed: the fresh segment zeroes what it uses as it goes.
                self.dram.alloc_wait(
                    RingKind::ShortTerm,
                    bytes,
                    Duration::from_millis(100),
                    Fill::Overwritten,
                )
            {
                break b;
            }
            if let Some(f) = self.failure.lock().clone() {
                return Err(Error::ResourceExhausted(f));
            }
        };
        self.start_fresh(w, block, next_base, None);
        Ok(())
    }

    /// Makes a new fresh segment on `block`, its first document `base`, the one the writer fills (the GDT
    /// lists it after every other segment). `replaces`: an empty fresh segment it takes the place of, in the
    /// same GDT update (no snapshot lacks a fresh segment).
    fn start_fresh(&self, w: &mut Writer, block: crate::memory::DramBlock, base: u32, replaces: Option<u32>) {
        let fresh = Arc::new(FreshSegment::new(block, self.cfg.max_docs_per_segment));
        // Pages no arena used before are faulted in ahead of the writer (nothing happens for reused ones).
        fresh.prefault_ahead(if w.bulk_loads > 0 { BULK_PREFAULT_AHEAD } else { REALTIME_PREFAULT_AHEAD });
        let deletes = Arc::new(DeleteBitmap::new(fresh.max_docs()));
        let id = w.next_seg;
        w.next_seg += 1;
        self.gdt.update(|s| {
            if let Some(empty) = replaces {
                s.segments.retain(|d| d.id != empty);
            }
            s.segments.push(Arc::new(SegmentDesc {
                id,
                base_doc: base,
                state: SegState::Fresh,
                deletes: deletes.clone(),
                data: SegData::Fresh(fresh.clone()),
                doc_count: 0,
                sealed_at: 0,
            }))
        });
        w.fresh = fresh;
        w.fresh_id = id;
        w.fresh_base = base;
        w.fresh_deletes = deletes;
        w.fresh_log_bytes = 0;
    }

    /// Flushes sealed segments in order, at background priority — unless the flush is urgent
    /// ([`Self::flush_is_urgent`]) when it starts or becomes so while the image is built (the build is then
    /// given up): then the urgent flusher, a thread at normal priority, runs it while this one waits. A
    /// pipeline thread cannot raise its own priority again (leaving `SCHED_IDLE` takes a privilege), so the
    /// work moves to a thread that never lowered its own.
    fn flusher(self: Arc<Self>, rx: Receiver<u32>, engrave: Sender<u32>, urgent: Sender<UrgentFlush>) {
        for id in rx {
            let result = if self.flush_is_urgent(id) {
                self.flush_urgently(id, &urgent, &engrave)
            } else {
                match self.flush_one(id, &engrave, &|| self.flush_is_urgent(id)) {
                    Ok(false) => self.flush_urgently(id, &urgent, &engrave),
                    r => r.map(|_| ()),
                }
            };
            if let Err(e) = result {
                self.fail(format!("flush of segment {id} failed: {e}"));
            }
            self.notify();
        }
    }

    /// Has the urgent flusher flush `id` and waits for it.
    fn flush_urgently(&self, id: u32, urgent: &Sender<UrgentFlush>, engrave: &Sender<u32>) -> Result<()> {
        let (done_tx, done) = bounded(1);
        match urgent.send((id, done_tx)) {
            Ok(()) => done.recv().unwrap_or_else(|_| Err(Error::Format("the urgent flusher stopped".into()))),
            // Gone (it panicked and failed the shard): flushed here, as the failure allows.
            Err(_) => self.flush_one(id, engrave, &|| false).map(|_| ()),
        }
    }

    /// Runs the flushes [`Self::flusher`] hands over, at normal priority, answering each with its result.
    fn urgent_flusher(self: Arc<Self>, rx: Receiver<UrgentFlush>, engrave: Sender<u32>) {
        for (id, done) in rx {
            self.counters.urgent_flushes.fetch_add(1, Relaxed);
            let _ = done.send(self.flush_one(id, &engrave, &|| false).map(|_| ()));
        }
    }

    /// Whether the writer will wait for this flush: the short-term ring has room for fewer than two more
    /// arenas of the sealed segment's size, so a segment sealed after it is already waiting (the flush
    /// channel holds one) or the writer's next seal finds no arena. At background priority, a flush that the
    /// writer waits for gets a core only between queries: measured with `spirit-bench http-load` (8 searchers
    /// keeping both cores busy), bulk requests waited up to 3.5 s.
    fn flush_is_urgent(&self, id: u32) -> bool {
        let snap = self.gdt.pin();
        let Some(SegData::Fresh(fresh)) = snap.index_of(id).map(|i| &snap.segments[i].data) else {
            return false;
        };
        let st = self.dram.stats();
        st.short_term_capacity.saturating_sub(st.short_term_used) < 2 * fresh.dram_bytes()
    }

    /// Flushes segment `id`; `Ok(false)`, with nothing changed, if `abort` said to give up while its image
    /// was built ([`ImageBuilder::seal_fresh_unless`]).
    fn flush_one(&self, id: u32, engrave: &Sender<u32>, abort: &(dyn Fn() -> bool + Sync)) -> Result<bool> {
        let t0 = Instant::now();
        let snap = self.gdt.pin();
        let seg = snap.segments[snap.index_of(id).expect("sealed segment in GDT")].clone();
        drop(snap);
        let SegData::Fresh(fresh) = &seg.data else { return Ok(true) };
        let codecs = self.codecs.lock().clone();
        // A bulk arena's segment is encoded on two threads (the last ones of a load are flushed while the
        // loader's threads have nothing left to do) and written straight into the persistent tier: a DRAM copy
        // in the long-term ring would be one more copy of ~100 MB per segment, in pages the kernel zeroes on
        // first touch, for a load that few queries read meanwhile.
        let bulk = self.cfg.is_bulk_arena(fresh.dram_bytes());
        let image = ImageBuilder::seal_fresh_unless(fresh, id, seg.base_doc, &codecs, bulk, abort)
            .map_err(|e| Error::Format(e.0))?;
        let Some(image) = image else { return Ok(false) };
        let doc_count = fresh.visible();
        let block = if bulk { None } else { self.alloc_image(image.len())? };
        let data = match block {
            Some(block) => {
                SegData::Image { dram: Some(Arc::new(DramImage::write(block, &image))), persistent: None }
            }
            None => {
                // A bulk segment, or larger than the whole long-term ring: engrave directly and read it from the
                // persistent tier.
                let (off, len) = (self.write_persistent(&image)?, image.len());
                if bulk {
                    // The close persists every image of the load: its writeback starts now.
                    self.heap.start_writeback(off, len);
                }
                if self.cfg.durability == Durability::CrashSafe {
                    self.heap.persist(off, len).map_err(|e| Error::io(self.heap.path(), e))?;
                    self.log_engraved(&seg, off, len)?;
                }
                SegData::Image {
                    dram: None,
                    persistent: Some(PersistentImage::new(self.heap.clone(), off, len)),
                }
            }
        };
        let direct = matches!(data, SegData::Image { dram: None, .. });
        // Counted before the state is published, as merges are (a segment committed directly is engraved too).
        self.counters.flushes.fetch_add(1, Relaxed);
        self.counters.flush_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        if direct {
            self.counters.engraves.fetch_add(1, Relaxed);
        }
        // The delete bitmap stays the same object through every state, so deletes racing with this swap
        // are never lost.
        self.gdt.update_segment(id, |d| {
            d.state = if direct { SegState::Committed } else { SegState::Flushed };
            d.data = data;
            d.doc_count = doc_count;
            if d.sealed_at == 0 {
                d.sealed_at = crate::gdt::now_millis();
            }
        });
        if direct {
            if let Some(tx) = self.merge_tx.lock().as_ref() {
                let _ = tx.send(id);
            }
        } else {
            engrave.send(id).map_err(|_| Error::ResourceExhausted("engraver stopped".into()))?;
        }
        Ok(true)
    }

    /// Writes an image into a new extent of the persistent heap; its offset.
    fn write_persistent(&self, image: &SealedImage) -> Result<u64> {
        let off = self
            .heap
            .alloc_via(image.len(), WriteVia::File)
            .map_err(|e| Error::ResourceExhausted(e.to_string()))?;
        if let Err(e) = self.heap.write_gathered(off, image.len(), &|f| image.pieces(f)) {
            self.heap.release(off, image.len() as u64);
            return Err(Error::io(self.heap.path(), e));
        }
        Ok(off)
    }

    /// A block in the long-term ring for a new image (its bytes unspecified: the image overwrites them),
    /// committing the oldest engraved segments to make room. `None` if the image can never fit the ring.
    fn alloc_image(&self, len: usize) -> Result<Option<crate::memory::DramBlock>> {
        if len > self.dram.capacity(RingKind::LongTerm) {
            return Ok(None);
        }
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Some(b) = self.dram.try_alloc_filled(RingKind::LongTerm, len, Fill::Overwritten) {
                return Ok(Some(b));
            }
            match self.commit_oldest() {
                Commit::Done => continue,
                Commit::Wait | Commit::Nothing => {
                    // Wait for the engraver to finish, or for readers of old epochs to release DRAM copies.
                    if let Some(b) = self.dram.alloc_wait(
                        RingKind::LongTerm,
                        len,
                        Duration::from_millis(20),
                        Fill::Overwritten,
                    ) {
                        return Ok(Some(b));
                    }
                }
            }
            if let Some(f) = self.failure.lock().clone() {
                return Err(Error::ResourceExhausted(f));
            }
            if Instant::now() > deadline {
                return Err(Error::ResourceExhausted("DRAM long-term ring did not free up in 600 s".into()));
            }
        }
    }

    /// Commits the oldest engraved segment: the GDT switches it to the persistent copy, so its DRAM copy is
    /// freed when the readers of older epochs leave (SPIRIT's lazy pointer update).
    fn commit_oldest(&self) -> Commit {
        let r = self.gdt.update(|s| {
            for i in 0..s.segments.len() {
                match s.segments[i].state {
                    SegState::Committed | SegState::Merged => continue,
                    SegState::Fresh | SegState::Flushed => return (Commit::Wait, None),
                    SegState::Engraved => {
                        let mut d = (*s.segments[i]).clone();
                        d.state = SegState::Committed;
                        if let SegData::Image { dram, .. } = &mut d.data {
                            *dram = None;
                        }
                        let id = d.id;
                        s.segments[i] = Arc::new(d);
                        return (Commit::Done, Some(id));
                    }
                }
            }
            (Commit::Nothing, None)
        });
        if let (Commit::Done, Some(id)) = &r {
            self.counters.commits.fetch_add(1, Relaxed);
            if let Some(tx) = self.merge_tx.lock().as_ref() {
                let _ = tx.send(*id);
            }
        }
        r.0
    }

    fn engraver(self: Arc<Self>, rx: Receiver<u32>) {
        for id in rx {
            if let Err(e) = self.engrave_one(id) {
                self.fail(format!("engrave of segment {id} failed: {e}"));
            }
            self.notify();
        }
    }

    fn engrave_one(&self, id: u32) -> Result<()> {
        let t0 = Instant::now();
        let snap = self.gdt.pin();
        let seg = snap.segments[snap.index_of(id).expect("flushed segment in GDT")].clone();
        drop(snap);
        let SegData::Image { dram: Some(img), .. } = &seg.data else { return Ok(()) };
        let bytes = img.bytes();
        let off = self.alloc_with_retention(bytes.len())?;
        if let Err(e) = self.heap.write_gathered(off, bytes.len(), &|f| f(bytes)) {
            self.heap.release(off, bytes.len() as u64);
            return Err(Error::io(self.heap.path(), e));
        }
        if self.cfg.durability == Durability::CrashSafe {
            self.heap.persist(off, bytes.len()).map_err(|e| Error::io(self.heap.path(), e))?;
            self.log_engraved(&seg, off, bytes.len())?;
        }
        let p = PersistentImage::new(self.heap.clone(), off, bytes.len());
        // Counted before the state is published, as flushes and merges are.
        self.counters.engraves.fetch_add(1, Relaxed);
        self.counters.engrave_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        self.gdt.update_segment(id, |d| {
            d.state = SegState::Engraved;
            if let SegData::Image { persistent, .. } = &mut d.data {
                *persistent = Some(p);
            }
        });
        if self.logs.is_some() {
            // A checkpoint after each engrave moves the tLog's replay point past this segment's documents
            // (skipped if the writer lock is busy: see `try_checkpoint`).
            self.try_checkpoint()?;
        }
        match (self.cfg.commit, self.cfg.max_unmerged) {
            (CommitPolicy::Eager, _) => while self.commit_oldest() == Commit::Done {},
            (CommitPolicy::Lazy, Some(max)) => {
                let engraved =
                    || self.gdt.pin().segments.iter().filter(|s| s.state == SegState::Engraved).count();
                while engraved() > max && self.commit_oldest() == Commit::Done {}
            }
            (CommitPolicy::Lazy, None) => {}
        }
        Ok(())
    }

    fn merger(self: Arc<Self>, rx: Receiver<u32>) {
        let idle = Duration::from_secs(1);
        // What was ingested at the merger's last wake-up, by a segment or idle (see `ingest_stamp`): a pause is
        // an idle second with no document since, so it is seen a second after the last merge, not two.
        let mut last_stamp = None;
        loop {
            match rx.recv_timeout(idle) {
                Ok(id) => {
                    last_stamp = Some(self.ingest_stamp());
                    if self.failure.lock().is_some() {
                        // A failed shard refuses writes; merging on could only fail again. Recovery at the
                        // next open resumes the merges.
                        continue;
                    }
                    if let Err(e) = self.merge_one(id) {
                        self.fail(format!("merge of segment {id} failed: {e}"));
                    } else if let Err(e) = self.reclaim() {
                        // Compaction and retention after every merge (cheap when there is nothing to do).
                        self.fail(format!("compaction or retention failed: {e}"));
                    }
                    self.notify();
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    // Ingestion paused (no document since the last wake-up, a second or more ago): the
                    // engraved segments that lazy commit keeps out of the merged segment until DRAM runs
                    // short are committed and merged now, so queries probe one merged dictionary instead of
                    // one per segment. (Not with pure lazy commit, which asks for them to stay.)
                    // Then the newest merged segments are compacted into one (`CompactionPolicy::on_pause`),
                    // and segments with too many deleted documents rewritten without them.
                    let stamp = Some(self.ingest_stamp());
                    if stamp == last_stamp && self.failure.lock().is_none() {
                        if self.cfg.commit == CommitPolicy::Lazy
                            && self.cfg.max_unmerged.is_some()
                            && self.gdt.pin().segments.iter().any(|s| s.state == SegState::Engraved)
                        {
                            while self.commit_oldest() == Commit::Done {}
                            if let Err(e) = self.merge_one(0).and_then(|_| self.reclaim()) {
                                self.fail(format!("merge after ingestion paused failed: {e}"));
                            }
                        }
                        if self.failure.lock().is_none() {
                            if let Err(e) = self.compact_on_pause().and_then(|_| self.purge_on_pause()) {
                                self.fail(format!("compaction after ingestion paused failed: {e}"));
                            }
                        }
                        self.notify();
                    }
                    last_stamp = stamp;
                    // While nothing is ingested: resume a merge retention had to interrupt, and apply
                    // retention by age.
                    if self.cfg.retention.enabled() && self.failure.lock().is_none() {
                        if let Err(e) = self.merge_one(0).and_then(|_| self.reclaim()) {
                            self.fail(format!("merge or retention failed: {e}"));
                        }
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// What has been ingested so far, as far as the merger's idle check needs: the newest segment and the
    /// documents visible in it if it is fresh. Unchanged across an idle interval: no document came in.
    fn ingest_stamp(&self) -> (Option<u32>, u32) {
        let snap = self.gdt.pin();
        let last = snap.segments.last();
        let visible = match last.map(|s| &s.data) {
            Some(SegData::Fresh(f)) => f.visible(),
            _ => 0,
        };
        (last.map(|s| s.id), visible)
    }

    /// Merges committed segments in segment order, as long as the oldest unmerged one is committed. A queue
    /// message is only a wake-up: segments may become committed out of order (an image too large for the
    /// DRAM ring is committed at flush; after a crash, replayed segments commit while recovered ones wait),
    /// but chains must stay newest-first and merged segments a prefix of the GDT.
    fn merge_one(&self, _wakeup: u32) -> Result<()> {
        loop {
            let next = {
                let snap = self.gdt.pin();
                snap.segments
                    .iter()
                    .find(|s| s.state != SegState::Merged)
                    .filter(|s| s.state == SegState::Committed)
                    .map(|s| s.id)
            };
            match next {
                Some(id) if self.merge_segment(id)? => {}
                _ => return Ok(()),
            }
        }
    }

    /// Links one committed segment into the merged segment; returns whether it is now merged. Out of
    /// persistent space with retention on, it drops the oldest segments instead of failing and leaves the
    /// segment committed (readable through its image) for the next wake-up, which resumes the link.
    fn merge_segment(&self, id: u32) -> Result<bool> {
        let t0 = Instant::now();
        // Links go into the current dictionary: no compaction may replace it meanwhile.
        let mut st = self.reclaim.lock();
        let snap = self.gdt.pin();
        // Retention may have dropped it meanwhile.
        let Some(i) = snap.index_of(id) else { return Ok(false) };
        let seg = snap.segments[i].clone();
        if seg.state != SegState::Committed {
            return Ok(false);
        }
        let SegData::Image { persistent: Some(p), .. } = &seg.data else {
            return Err(Error::Format(format!("segment {id} committed without a persistent copy")));
        };
        let view = ImageView::parse(p.bytes()).map_err(|e| Error::corrupt(self.heap.path(), p.off, e.0))?;
        // A link cut short (out of space, or any error) may have published some chain heads: whoever links
        // this segment next must redo, skipping the terms already linked, or a chain would name the segment
        // twice. So the segment counts as partially linked from before the first store until it is merged.
        let resume = !st.partial_links.insert(id);
        match self.link_logged(&snap.merged, id, p.off, &view, resume) {
            Ok(()) => {
                st.partial_links.remove(&id);
            }
            Err(Error::ResourceExhausted(_)) if self.cfg.retention.enabled() => {
                drop(snap);
                if self.apply_retention(&mut st, 4 << 20)? && self.logs.is_some() {
                    self.write_manifest(None, false)?;
                }
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        drop(snap);
        // Counted before the state is published: whoever sees the segment merged (a caller of
        // `commit_and_merge_all`, then `stats`) sees the merge counted.
        self.counters.merges.fetch_add(1, Relaxed);
        self.counters.merge_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        self.gdt.update(|s| {
            if let Some(i) = s.index_of(id) {
                let mut d = (*s.segments[i]).clone();
                d.state = SegState::Merged;
                s.segments[i] = Arc::new(d);
            }
            s.merged_upto = Some(s.merged_upto.map_or(id, |m| m.max(id)));
        });
        if self.logs.is_some() {
            // A checkpoint after each merge bounds recovery and lets the tLog recycle its chunks.
            self.write_manifest(None, false)?;
        }
        Ok(true)
    }
}
