//! The shard's crash-safe side: logging writes, engraves and merges, writing checkpoints, and recovering.
//!
//! What is durable at any moment (see `crate::durability` for the logs):
//! ```text
//! superblock ──► checkpoint (manifest): segments [0, k) with images + delete bitmaps, merged header, schema,
//!                                      log heads, replay_from
//!                eLog after its head:   segments engraved since (images durable before their record)
//!                mLog after its head:   merges begun / progressed / ended since
//!                tLog from replay_from: every operation not reflected by the segments above
//! ```
//! Recovery loads the checkpoint's segments, appends the eLog's segments that continue them without a gap,
//! marks merged the segments whose merge ended and redoes any merge cut short, then hands the tLog records
//! from `replay_from` on to the owner, who re-analyses each document with its schema and calls
//! [`Shard::replay_add`] / [`Shard::replay_delete`]: adds whose doc id a durable segment already holds are
//! skipped, every delete bit is set again (idempotent).

use super::{Manifest, ManifestSegment, Shard, ShardInner, Writer, MANIFEST_FORMAT};
use crate::durability::{Engraved, Log, LogError, LogPos, MergeRecord, TlogRecord, ELOG, MLOG, TLOG};
use crate::error::{Error, Result};
use crate::gdt::{PersistentImage, SegData, SegState, SegmentDesc, Snapshot};
use crate::memory::{PersistentHeap, PersistentHeapError, RecoveryRecord};
use crate::segment::{DeleteBitmap, ImageView, LinkOptions, MergeError, MergedSegment};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// tLog chunk size: large, so a chunk switch (two barriers) is rare, but a small part of the budget.
fn tlog_chunk(budget: u64) -> usize {
    (budget / 32).clamp(256 << 10, 8 << 20) as usize
}
/// eLog and mLog chunk size: their records are tiny.
const SMALL_CHUNK: usize = 64 << 10;
/// Terms linked between two mLog progress records.
const MERGE_PROGRESS_TERMS: u32 = 1 << 16;

/// Where each log continues after a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LogHeads {
    tlog: LogPos,
    elog: LogPos,
    mlog: LogPos,
    /// First tLog LSN the checkpoint does not reflect.
    replay_from: u64,
    /// Recycled tLog chunks.
    #[serde(default)]
    tlog_free: Vec<u64>,
}

impl LogHeads {
    /// The recycled tLog chunks this checkpoint names (whole chunks, as their headers say): they stay out of
    /// the free space until a later checkpoint stops naming them.
    pub(super) fn recycled_extents(&self, heap: &PersistentHeap) -> Vec<(u64, u64)> {
        let len_at = |c: u64| heap.try_slice(c + 24, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        self.tlog_free.iter().map(|&c| (c, len_at(c).filter(|&l| l <= 1 << 30).unwrap_or(64))).collect()
    }
}

/// The logs of a crash-safe shard.
pub(super) struct Logs {
    tlog: Log,
    elog: Log,
    mlog: Log,
    /// The owner's latest metadata (logged as tLog `Meta` records; stored in checkpoints).
    meta: Mutex<serde_json::Value>,
    /// First tLog LSN applied to each segment not yet in a checkpoint.
    seg_lsn: Mutex<BTreeMap<u32, u64>>,
    /// Serializes checkpoints.
    checkpoint: Mutex<()>,
}

/// tLog records to re-apply after a crash, in order.
pub struct Replay {
    pub records: Vec<(u64, TlogRecord)>,
}

fn log_err(path: &Path, e: LogError) -> Error {
    match e {
        LogError::Io(io) => Error::io(path, io),
        LogError::Corrupt(off) => Error::corrupt(path, off, "bad log chunk header"),
        LogError::Damaged { at, lsn } => Error::corrupt(
            path,
            at,
            format!("log record {lsn} is damaged, but later records show it was durable"),
        ),
        other => Error::ResourceExhausted(format!("{}: {other}", path.display())),
    }
}

/// Loads one segment image from the heap, checking it against what the manifest or eLog says.
pub(super) fn load_segment(
    heap: &Arc<PersistentHeap>,
    path: &Path,
    e: &Engraved,
    deletes: DeleteBitmap,
    state: SegState,
    sealed_at: u64,
) -> Result<SegmentDesc> {
    if heap.try_slice(e.image_off, e.image_len as usize).is_none() {
        return Err(Error::corrupt(path, e.image_off, "segment image beyond the end of the file"));
    }
    let p = PersistentImage::new(heap.clone(), e.image_off, e.image_len as usize);
    let v = ImageView::parse(p.bytes()).map_err(|err| Error::corrupt(path, e.image_off, err.0))?;
    // Every image is checksummed once per session before any query reads it (crc32 runs at several GB/s).
    v.verify().map_err(|err| Error::corrupt(path, e.image_off, err.0))?;
    if v.doc_count() != e.doc_count || v.seg_id() != e.seg || v.base_doc() != e.base_doc {
        return Err(Error::corrupt(path, e.image_off, "segment header disagrees with the manifest or eLog"));
    }
    Ok(SegmentDesc {
        id: e.seg,
        base_doc: e.base_doc,
        state,
        deletes: Arc::new(deletes),
        data: SegData::Image { dram: None, persistent: Some(p) },
        doc_count: e.doc_count,
        sealed_at,
    })
}

/// What [`recover`] hands back to `Shard::open`.
pub(super) struct Recovered {
    pub logs: Logs,
    pub replay: Replay,
    pub next_doc: u32,
    pub next_seg: u32,
    pub merged_upto: Option<u32>,
}

/// Recovers from the checkpoint `m` (whose segments are already in `segs`) and the logs it points to.
pub(super) fn recover(
    heap: &Arc<PersistentHeap>,
    path: &Path,
    m: &Manifest,
    heads: &LogHeads,
    segs: &mut Vec<Arc<SegmentDesc>>,
    merged: &MergedSegment,
) -> Result<Recovered> {
    let scan = |kind, pos| Log::scan(heap, kind, pos).map_err(|e| log_err(path, e));
    let crate::durability::Scan { records: erecs, chunks: echunks, end: eend } = scan(ELOG, heads.elog)?;
    let crate::durability::Scan { records: mrecs, chunks: mchunks, end: mend } = scan(MLOG, heads.mlog)?;
    let crate::durability::Scan { records: trecs, chunks: tchunks, end: tend } = scan(TLOG, heads.tlog)?;
    let bad = |e: crate::durability::BadRecord| Error::corrupt(path, 0, format!("{e}"));

    // Segments engraved after the checkpoint, continuing it without a gap.
    let mut next_doc = m.next_doc;
    let mut next_seg = m.next_seg;
    let mut engraved: Vec<Engraved> =
        erecs.iter().map(Engraved::decode).collect::<Result<_, _>>().map_err(bad)?;
    engraved.sort_by_key(|e| e.seg);
    for e in &engraved {
        // Never reuse a segment id that may have chain nodes in the merged segment.
        next_seg = next_seg.max(e.seg + 1);
        if segs.iter().any(|s| s.id == e.seg) || e.base_doc != next_doc {
            continue;
        }
        let d = DeleteBitmap::new(e.doc_count);
        segs.push(Arc::new(load_segment(heap, path, e, d, SegState::Committed, crate::gdt::now_millis())?));
        next_doc = e.base_doc + e.doc_count;
    }

    // Merges: ended ones mark their segment merged; one cut short is redone from its last progress.
    let mut progress: BTreeMap<u32, Option<u32>> = BTreeMap::new(); // seg -> None = ended, Some(t) = begun
    for r in &mrecs {
        let (seg, p) = match MergeRecord::decode(r).map_err(bad)? {
            MergeRecord::Begin { seg } => (seg, Some(0)),
            MergeRecord::Progress { seg, terms } => (seg, Some(terms)),
            MergeRecord::End { seg } => (seg, None),
        };
        progress.insert(seg, p);
        next_seg = next_seg.max(seg + 1);
    }
    let mlog =
        Log::reopen(heap.clone(), MLOG, SMALL_CHUNK, &mchunks, mend, &[]).map_err(|e| log_err(path, e))?;
    let mut merged_upto = segs.iter().filter(|s| s.state == SegState::Merged).map(|s| s.id).max();
    for (seg, p) in progress {
        let Some(i) = segs.iter().position(|s| s.id == seg) else { continue };
        if let Some(from) = p {
            let SegData::Image { persistent: Some(img), .. } = &segs[i].data else { continue };
            let view = ImageView::parse(img.bytes()).map_err(|e| Error::corrupt(path, img.off, e.0))?;
            let mut opts = LinkOptions {
                durable: true,
                redo: true,
                from_term: from,
                progress_every: MERGE_PROGRESS_TERMS,
                progress: None,
            };
            match merged.link(img.off, &view, &mut opts) {
                Ok(()) => {}
                Err(MergeError::Heap(PersistentHeapError::Budget { .. } | PersistentHeapError::Io(_))) => {
                    // No room to finish the link now (a full disk, a spent budget): the segment stays
                    // committed — read through its own image, its chain nodes so far ignored — and counts as
                    // partially linked, so the merger redoes the link once there is room (and a later
                    // recovery does, from this progress). The index opens, for reads at least.
                    continue;
                }
                Err(e) => return Err(merge_err(path, e)),
            }
        }
        let mut d = (*segs[i]).clone();
        d.state = SegState::Merged;
        segs[i] = Arc::new(d);
        merged_upto = Some(merged_upto.map_or(seg, |u: u32| u.max(seg)));
        if p.is_some() {
            let lsn = mlog.append(&MergeRecord::End { seg }.encode()).map_err(|e| log_err(path, e))?;
            mlog.sync(lsn).map_err(|e| log_err(path, e))?;
        }
    }

    let chunk = tlog_chunk(heap.stats().budget);
    let tlog = Log::reopen(heap.clone(), TLOG, chunk, &tchunks, tend, &heads.tlog_free)
        .map_err(|e| log_err(path, e))?;
    let elog =
        Log::reopen(heap.clone(), ELOG, SMALL_CHUNK, &echunks, eend, &[]).map_err(|e| log_err(path, e))?;
    let mut records = Vec::new();
    for r in trecs.iter().filter(|r| r.lsn >= heads.replay_from) {
        records.push((r.lsn, TlogRecord::decode(r).map_err(bad)?));
    }
    Ok(Recovered {
        logs: Logs::new(tlog, elog, mlog, m.extra.clone()),
        replay: Replay { records },
        next_doc,
        next_seg,
        merged_upto,
    })
}

fn merge_err(path: &Path, e: MergeError) -> Error {
    match e {
        MergeError::Io(io) => Error::io(path, io),
        other => Error::ResourceExhausted(format!("{}: merge: {other}", path.display())),
    }
}

impl Logs {
    fn new(tlog: Log, elog: Log, mlog: Log, meta: serde_json::Value) -> Logs {
        Logs {
            tlog,
            elog,
            mlog,
            meta: Mutex::new(meta),
            seg_lsn: Mutex::new(BTreeMap::new()),
            checkpoint: Mutex::new(()),
        }
    }

    /// New, empty logs (a new crash-safe shard, or a graceful one switching to crash-safe).
    pub(super) fn create(heap: &Arc<PersistentHeap>, meta: serde_json::Value) -> Result<Logs> {
        let path = heap.path().to_path_buf();
        let mk = |kind, chunk| Log::create(heap.clone(), kind, chunk, 0).map_err(|e| log_err(&path, e));
        let chunk = tlog_chunk(heap.stats().budget);
        Ok(Logs::new(mk(TLOG, chunk)?, mk(ELOG, SMALL_CHUNK)?, mk(MLOG, SMALL_CHUNK)?, meta))
    }

    /// The heap extents the three logs own.
    pub(super) fn extents(&self) -> Vec<(u64, u64)> {
        let mut v = self.tlog.extents();
        v.extend(self.elog.extents());
        v.extend(self.mlog.extents());
        v
    }

    /// tLog barriers taken and the time spent in them.
    pub(super) fn tlog_sync_stats(&self) -> (u64, std::time::Duration) {
        self.tlog.sync_stats()
    }

    /// tLog statistics: (chunks, bytes, next LSN).
    pub(super) fn tlog_stats(&self) -> (usize, u64, u64) {
        let (c, b) = self.tlog.chunk_stats();
        (c, b, self.tlog.next_lsn())
    }
}

impl Shard {
    /// Crash-safe mode: makes every operation accepted so far durable (the group commit behind bulk calls).
    /// A no-op in the other modes.
    pub fn sync(&self) -> Result<()> {
        match &self.inner.logs {
            Some(l) => l.tlog.sync_all().map(|_| ()).map_err(|e| log_err(self.inner.heap.path(), e)),
            None => Ok(()),
        }
    }

    /// Makes the operation with tLog sequence number `lsn` (and all before it) durable.
    pub fn sync_to(&self, lsn: Option<u64>) -> Result<()> {
        match (&self.inner.logs, lsn) {
            (Some(l), Some(lsn)) => l.tlog.sync(lsn).map_err(|e| log_err(self.inner.heap.path(), e)),
            _ => Ok(()),
        }
    }

    /// Records the owner's metadata (schema, settings) durably; a no-op outside crash-safe mode. Call it
    /// after every change, before adding documents that depend on it.
    pub fn log_meta(&self, meta: serde_json::Value) -> Result<()> {
        let Some(l) = &self.inner.logs else { return Ok(()) };
        let json = serde_json::to_vec(&meta).expect("metadata serializes");
        let mut cur = l.meta.lock();
        let lsn = l.tlog.append(&TlogRecord::meta(&json)).map_err(|e| log_err(self.inner.heap.path(), e))?;
        *cur = meta;
        drop(cur);
        l.tlog.sync(lsn).map_err(|e| log_err(self.inner.heap.path(), e))
    }

    /// Replays a tLog add (recovery): re-inserts `doc` unless a durable segment already holds doc id
    /// `expected`, and deletes `replaces` again.
    pub fn replay_add(
        &self,
        lsn: u64,
        doc: &crate::schema::AnalyzedDoc,
        expected: u32,
        replaces: Option<u32>,
    ) -> Result<()> {
        let mut w = self.inner.writer.lock();
        if let Some(r) = replaces {
            self.inner.delete_doc(r, None, None);
        }
        let next = w.next_doc();
        if expected < next {
            return Ok(());
        }
        // Doc ids `next..expected` have no record: each went into the fresh segment before the crash, its tLog
        // append failed (out of space), and the add returned that error after deleting the doc again
        // (`log_add`) — nothing of them was acknowledged, but later records name the doc ids after them. Each
        // gets a deleted, empty placeholder, as the doc was before the crash. (Records are checksummed and
        // read in order, so a gap says no more than that.)
        for gap in next..expected {
            let placeholder = self.add_locked(&mut w, &crate::schema::AnalyzedDoc::default())?;
            debug_assert_eq!(placeholder, gap);
            self.inner.delete_doc(placeholder, Some(""), None);
        }
        let got = self.add_locked(&mut w, doc)?;
        debug_assert_eq!(got, expected);
        if let Some(l) = &self.inner.logs {
            l.seg_lsn.lock().entry(w.fresh_id).or_insert(lsn);
        }
        Ok(())
    }

    /// The doc id the next add gets: replayed adds below it are already in a durable segment (recovery
    /// skips them without re-analysing them, but still applies their `replaces`).
    pub fn next_doc(&self) -> u32 {
        let w = self.inner.writer.lock();
        w.next_doc()
    }

    /// Replays a tLog delete (recovery).
    pub fn replay_delete(&self, doc: u32, id: &str) {
        let _w = self.inner.writer.lock();
        self.inner.delete_doc(doc, Some(id), None);
    }
}

impl ShardInner {
    /// Sets the delete bit of global doc `doc` (idempotent), stamped `stamp` ([`crate::segment::deletes`];
    /// `None`: a delete every snapshot sees, as recovery replays them).
    pub(super) fn delete_doc(&self, doc: u32, id: Option<&str>, stamp: Option<u32>) {
        let snap = self.gdt.pin();
        if let Some(seg) = snap.segment_of(doc) {
            match stamp {
                Some(stamp) => _ = seg.deletes.delete(doc - seg.base_doc, stamp),
                None => seg.deletes.delete_settled(doc - seg.base_doc),
            }
            if let (SegData::Fresh(f), Some(id)) = (&seg.data, id) {
                f.forget_id(id);
            }
        }
    }

    /// Appends the tLog record of an add that just went into the fresh segment (crash-safe mode). On failure
    /// the doc is deleted again, so nothing unlogged stays visible (the caller undoes the delete of the
    /// version it replaced).
    pub(super) fn log_add(
        &self,
        w: &Writer,
        doc: &crate::schema::AnalyzedDoc,
        doc_id: u32,
        replaces: Option<u32>,
        seq: Option<u64>,
        version: u64,
    ) -> Result<Option<u64>> {
        let Some(l) = &self.logs else { return Ok(None) };
        let head = TlogRecord::add_header(doc_id, replaces, &doc.id, seq, version);
        match l.tlog.append_parts(&[&head, doc.log_source()]) {
            Ok(lsn) => {
                l.seg_lsn.lock().entry(w.fresh_id).or_insert(lsn);
                Ok(Some(lsn))
            }
            Err(e) => {
                // Stamped with its own doc id: deleted for exactly the snapshots that see it.
                self.delete_doc(doc_id, Some(&doc.id), Some(doc_id));
                Err(log_err(self.heap.path(), e))
            }
        }
    }

    pub(super) fn log_delete(&self, doc_id: u32, id: &str) -> Result<Option<u64>> {
        let Some(l) = &self.logs else { return Ok(None) };
        l.tlog.append(&TlogRecord::delete(doc_id, id)).map(Some).map_err(|e| log_err(self.heap.path(), e))
    }

    /// Records an engraved segment (its image is already durable). The tLog is made durable first, so an
    /// engraved image never holds an operation that a crash would lose from the log around it.
    pub(super) fn log_engraved(&self, seg: &SegmentDesc, image_off: u64, image_len: usize) -> Result<()> {
        let Some(l) = &self.logs else { return Ok(()) };
        let path = self.heap.path();
        l.tlog.sync_all().map_err(|e| log_err(path, e))?;
        let e = Engraved {
            seg: seg.id,
            base_doc: seg.base_doc,
            doc_count: seg.visible_docs(),
            image_off,
            image_len: image_len as u64,
        };
        let lsn = l.elog.append(&e.encode()).map_err(|e| log_err(path, e))?;
        l.elog.sync(lsn).map_err(|e| log_err(path, e))
    }

    /// Links a committed segment into the merged segment, logging its progress in crash-safe mode.
    pub(super) fn link_logged(
        &self,
        merged: &MergedSegment,
        seg: u32,
        image_off: u64,
        view: &ImageView,
        resume: bool,
    ) -> Result<()> {
        let path = self.heap.path();
        let Some(l) = &self.logs else {
            let mut opts = LinkOptions { redo: resume, ..Default::default() };
            return merged.link(image_off, view, &mut opts).map_err(|e| merge_err(path, e));
        };
        let rec = |r: MergeRecord| -> Result<(), MergeError> {
            let lsn = l.mlog.append(&r.encode()).map_err(|e| MergeError::Log(e.to_string()))?;
            l.mlog.sync(lsn).map_err(|e| MergeError::Log(e.to_string()))
        };
        rec(MergeRecord::Begin { seg }).map_err(|e| merge_err(path, e))?;
        let mut progress = |terms: u32| rec(MergeRecord::Progress { seg, terms });
        let mut opts = LinkOptions {
            durable: true,
            redo: resume,
            from_term: 0,
            progress_every: MERGE_PROGRESS_TERMS,
            progress: Some(&mut progress),
        };
        merged.link(image_off, view, &mut opts).map_err(|e| merge_err(path, e))?;
        rec(MergeRecord::End { seg }).map_err(|e| merge_err(path, e))
    }

    /// Writes a manifest: at close (`clean`), or as a crash-safe checkpoint. `extra` is the owner's data; a
    /// checkpoint uses the latest metadata logged.
    pub(super) fn write_manifest(&self, extra: Option<serde_json::Value>, clean: bool) -> Result<()> {
        self.write_manifest_within(extra, clean, None, false).map(|_| ())
    }

    /// A clean manifest of what is persisted — the segments engraved in order from the first, up to the
    /// first one that is not — for a graceful close after the pipeline failed (a full disk): the index then
    /// opens with those segments; the documents after them were never persisted and are lost, as graceful
    /// mode (durable only at a clean close) allows. Committed segments not yet merged are linked again at
    /// open (every committed segment counts as partially linked there), so a link the failure cut short is
    /// finished, not repeated.
    pub(super) fn write_manifest_prefix(&self, extra: Option<serde_json::Value>) -> Result<()> {
        self.write_manifest_within(extra, true, None, true).map(|_| ())
    }

    /// A checkpoint that gives up (returns `Ok(false)`) if the writer lock is not free within a moment. The
    /// engraver checkpoints this way: an ingesting thread may hold the writer lock while it waits for the
    /// pipeline (a full flush queue or DRAM ring) to move, which needs the engraver, so the engraver must
    /// never wait for that lock. A skipped checkpoint is harmless: the eLog covers the engraved segment and
    /// the next checkpoint covers everything.
    pub(super) fn try_checkpoint(&self) -> Result<bool> {
        self.write_manifest_within(None, false, Some(std::time::Duration::from_millis(20)), false)
    }

    fn write_manifest_within(
        &self,
        extra: Option<serde_json::Value>,
        clean: bool,
        wait: Option<std::time::Duration>,
        prefix_only: bool,
    ) -> Result<bool> {
        let path = self.heap.path().to_path_buf();
        let _serial = match (&self.logs, wait) {
            (None, _) => None,
            (Some(l), None) => Some(l.checkpoint.lock()),
            (Some(l), Some(d)) => match l.checkpoint.try_lock_for(d) {
                Some(g) => Some(g),
                None => return Ok(false),
            },
        };
        // Space released from here on may still be named by the checkpoint before this one; space released
        // before this point is not named by this one (see `memory::space`).
        let ticket = self.heap.checkpoint_started();
        // Log positions first: records appended from here on are scanned at recovery even if the snapshot
        // below already reflects them (replaying them is idempotent).
        let heads = self
            .logs
            .as_ref()
            .map(|l| (l.elog.position_of(l.elog.next_lsn()).0, l.mlog.position_of(l.mlog.next_lsn()).0));
        let mut segments = vec![];
        let mut next_doc = 0;
        let mut bitmaps = Vec::new();
        let (snap, next_seg, replay_from, meta): (Arc<Snapshot>, u32, u64, serde_json::Value) = {
            // Under the writer lock, so the snapshot, the delete bitmaps and the tLog agree on one cut.
            let w = match wait {
                None => self.writer.lock(),
                Some(d) => match self.writer.try_lock_for(d) {
                    Some(w) => w,
                    None => return Ok(false),
                },
            };
            let snap = self.gdt.pin();
            for s in &snap.segments {
                let SegData::Image { persistent: Some(p), .. } = &s.data else {
                    if clean && !prefix_only && s.state != SegState::Fresh {
                        return Err(Error::Format(format!("segment {} not engraved at close", s.id)));
                    }
                    break;
                };
                let del = s.deletes.to_bytes();
                segments.push(ManifestSegment {
                    id: s.id,
                    base_doc: s.base_doc,
                    doc_count: s.doc_count,
                    image_off: p.off,
                    image_len: p.len as u64,
                    deletes_off: bitmaps.len() as u64,
                    deletes_len: del.len() as u64,
                    deletes_crc: crc32fast::hash(&del),
                    merged: s.state == SegState::Merged,
                    sealed_at: s.sealed_at,
                });
                bitmaps.extend_from_slice(&del);
                next_doc = s.base_doc + s.doc_count;
            }
            // Retention may have dropped every segment before the prefix's end: the next doc id is where
            // the segments after the prefix (or the writer) continue, never below a doc id already used.
            next_doc = match snap.segments.get(segments.len()) {
                Some(s) => s.base_doc,
                None if segments.is_empty() => w.next_doc(),
                None => next_doc,
            };
            let (replay_from, meta) = match &self.logs {
                Some(l) => {
                    // Everything the snapshot reflects is in the durable tLog prefix.
                    let next = l.tlog.sync_all().map_err(|e| log_err(&path, e))?;
                    let lsns = l.seg_lsn.lock();
                    let from = snap.segments[segments.len()..]
                        .iter()
                        .filter_map(|s| lsns.get(&s.id).copied())
                        .min()
                        .unwrap_or(next);
                    (from, l.meta.lock().clone())
                }
                None => (0, serde_json::Value::Null),
            };
            (snap, w.next_seg, replay_from, meta)
        };
        let heap_err = |e: crate::memory::PersistentHeapError| Error::ResourceExhausted(e.to_string());
        // Out of space with retention on, a checkpoint is skipped rather than failing the shard: the last
        // durable one stays the recovery point, and retention is making room.
        let skip = |e: &crate::memory::PersistentHeapError| {
            !clean
                && self.cfg.retention.enabled()
                && matches!(e, crate::memory::PersistentHeapError::Budget { .. })
        };
        let bitmaps_off = match self.heap.alloc_copy(&bitmaps) {
            Ok(o) => o,
            Err(e) if skip(&e) => return Ok(false),
            Err(e) => return Err(heap_err(e)),
        };
        for s in &mut segments {
            s.deletes_off += bitmaps_off;
        }
        let mut freed = vec![];
        let logs = match (&self.logs, heads) {
            (Some(l), Some((elog, mlog))) => {
                let (tlog, before) = l.tlog.position_of(replay_from);
                let mut free = l.tlog.free_chunks();
                free.extend_from_slice(&before);
                freed = before;
                Some(LogHeads { tlog, elog, mlog, replay_from, tlog_free: free })
            }
            _ => None,
        };
        let m = Manifest {
            format: MANIFEST_FORMAT,
            next_doc,
            next_seg,
            merged_header: snap.merged.header_offset(),
            // The caches' figures read without their locks: this runs on a background thread at idle
            // priority, which must not hold a lock a query takes while it waits for a core.
            dram_high_water: (self.dram.stats().high_water
                + self.cache.high_water_bytes()
                + self.hot.high_water_bytes())
            .max(self.earlier_high_water),
            segments,
            extra: extra.unwrap_or(meta),
            logs,
        };
        let bytes = serde_json::to_vec(&m).expect("manifest serializes");
        let off = match self.heap.alloc_copy(&bytes) {
            Ok(o) => o,
            Err(e) if skip(&e) => {
                self.heap.release(bitmaps_off, bitmaps.len().max(1) as u64);
                return Ok(false);
            }
            Err(e) => return Err(heap_err(e)),
        };
        if clean {
            self.heap.persist_all().map_err(|e| Error::io(&path, e))?;
        } else {
            self.heap.persist(bitmaps_off, bitmaps.len()).map_err(|e| Error::io(&path, e))?;
            self.heap.persist(off, bytes.len()).map_err(|e| Error::io(&path, e))?;
        }
        self.heap
            .write_record(&RecoveryRecord {
                clean,
                heap_end: self.heap.head(),
                manifest_off: off,
                manifest_len: bytes.len() as u64,
                manifest_crc: crc32fast::hash(&bytes),
            })
            .map_err(|e| Error::io(&path, e))?;
        drop(snap);
        self.heap.checkpoint_durable(ticket);
        // The previous checkpoint's manifest and bitmaps are superseded.
        let old = std::mem::replace(
            &mut *self.manifest_extents.lock(),
            vec![(bitmaps_off, bitmaps.len().max(1) as u64), (off, bytes.len() as u64)],
        );
        for (o, l) in old {
            self.heap.release(o, l);
        }
        if let Some(l) = &self.logs {
            l.tlog.recycle(&freed);
            let mut lsns = l.seg_lsn.lock();
            let ids: Vec<u32> = m.segments.iter().map(|s| s.id).collect();
            lsns.retain(|id, _| !ids.contains(id));
        }
        Ok(true)
    }
}

/// Makes a directory entry (a new or renamed file) durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}
