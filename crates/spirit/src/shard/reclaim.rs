//! Keeping the persistent tier short and bounded: compaction, retention, and the heap's free space.
//!
//! * **Compaction** (DESIGN §5): merging links lists in place, so a term's chain grows by one node per
//!   merged segment and a query visits every merged segment. Once `factor` consecutive merged segments share
//!   a size level (`CompactionPolicy`), the merger rewrites them as one image — one contiguous posting list
//!   per term, the deleted documents purged (`segment::compact`; their statistics stay, so answers and
//!   scores do not change) — and builds a new merged dictionary without their nodes. A merged segment
//!   whose unpurged deleted documents pass `deletes_pct_allowed` of it is rewritten alone (after a merge,
//!   and on pauses in ingestion, which a stream of deletes alone makes). Both are written and made durable
//!   where nothing refers to them yet; the swap is one GDT update (readers of older epochs keep the old
//!   dictionary and images), and in crash-safe mode the checkpoint that follows is the durable switch: a
//!   crash before it recovers the old state, whose space was never reused. The old images and dictionary go
//!   back to the heap when their last reader leaves (and, crash-safe, once a later checkpoint is durable).
//! * **Retention** (`RetentionPolicy`): the oldest merged segments past an age or a size are dropped from
//!   the GDT, then from the checkpoint; their chain nodes stay in the dictionary (readers skip nodes of
//!   segments their snapshot lacks) until the next rebuild. Out of persistent space, retention drops the
//!   oldest segments to make room for the new one instead of refusing writes.
//! * **Free space**: at open, everything the recovered state refers to is live and the rest of the heap is
//!   free ([`ShardInner::rebuild_free_space`]).
//!
//! Compaction and retention both run on the merger thread (and retention also on the engraver when space
//! runs out), serialized by `ShardInner::reclaim`.

use super::{ShardInner, Writer};
use crate::error::{Error, Result};
use crate::gdt::{now_millis, PersistentImage, SegData, SegState, SegmentDesc, Snapshot};
use crate::memory::WriteVia;
use crate::segment::compact::seal_compacted;
use crate::segment::{DeleteBitmap, ImageView, LinkOptions, MergedSegment};
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Level unit: segments below this many bytes are all on level 0 (Lucene's floor segment size).
const LEVEL_FLOOR: u64 = 1 << 20;

/// What the reclaim lock protects.
#[derive(Default)]
pub(crate) struct ReclaimState {
    /// Segments dropped by retention whose chain nodes are still in the merged dictionary.
    pub(super) stale_segments: usize,
    /// Segments whose link into the dictionary may have run part-way (out of space, or before a crash):
    /// their merge runs as a redo, which skips terms already linked.
    pub(super) partial_links: std::collections::BTreeSet<u32>,
    /// The heap's bytes in use when a purge last found no room for its image: purges wait until some are
    /// given back (else a full heap would have the same image built and thrown away on every pause).
    pub(super) purge_refused_at: Option<u64>,
}

/// Deleted documents of a merged segment that no compaction has purged yet, and the documents it holds
/// (purged ones not counted).
fn unpurged(s: &SegmentDesc) -> (u32, u32) {
    let purged = s.image().and_then(Result::ok).map_or(0, |v| v.purged());
    (s.deletes.count().saturating_sub(purged), s.doc_count.saturating_sub(purged))
}

fn image_len(s: &SegmentDesc) -> u64 {
    match &s.data {
        SegData::Image { persistent: Some(p), .. } => p.len as u64,
        _ => 0,
    }
}

/// The oldest segments retention may drop: merged ones and, after them, committed and engraved ones (they
/// have a persistent copy; the merger skips a segment that is gone). Oldest first.
fn droppable_prefix(snap: &Snapshot) -> Vec<Arc<SegmentDesc>> {
    snap.segments
        .iter()
        .take_while(|s| {
            matches!(s.state, SegState::Committed | SegState::Engraved)
                || (s.state == SegState::Merged && snap.merged_upto.is_some_and(|m| s.id <= m))
        })
        .cloned()
        .collect()
}

/// The merged segments of a snapshot (always a prefix of its segment list), oldest first.
fn merged_prefix(snap: &Snapshot) -> Vec<Arc<SegmentDesc>> {
    snap.segments
        .iter()
        .take_while(|s| s.state == SegState::Merged && snap.merged_upto.is_some_and(|m| s.id <= m))
        .cloned()
        .collect()
}

/// The segments a compaction on pause rewrites, of merged segments given as (image bytes, documents), oldest
/// first: the longest newest run within `max` bytes (and below `u32::MAX` documents), without its oldest
/// segments while each is more than `factor` times the rest of the run. Fewer than two: nothing to do.
fn pause_run(segs: &[(u64, u64)], max: u64, factor: u64) -> std::ops::Range<usize> {
    let (mut start, mut bytes, mut docs) = (segs.len(), 0u64, 0u64);
    while start > 0 {
        let (b, d) = (bytes + segs[start - 1].0, docs + segs[start - 1].1);
        if b > max || d >= u32::MAX as u64 {
            break;
        }
        (bytes, docs, start) = (b, d, start - 1);
    }
    while segs.len() - start >= 2 && segs[start].0 > (bytes - segs[start].0).saturating_mul(factor) {
        bytes -= segs[start].0;
        start += 1;
    }
    start..segs.len()
}

impl ShardInner {
    /// Every heap extent the shard's current state refers to.
    fn live_extents(&self) -> Result<Vec<(u64, u64)>> {
        let snap = self.gdt.pin();
        let mut v = self.manifest_extents.lock().clone();
        for s in &snap.segments {
            if let SegData::Image { persistent: Some(p), .. } = &s.data {
                v.push((p.off, p.len as u64));
            }
        }
        let dict = snap
            .merged
            .extents()
            .map_err(|e| Error::corrupt(self.heap.path(), snap.merged.header_offset(), e.0))?;
        v.extend(dict);
        if let Some(l) = &self.logs {
            v.extend(l.extents());
        }
        Ok(v)
    }

    /// Computes the heap's free space from the recovered state (open, before any pipeline thread runs).
    pub(super) fn rebuild_free_space(&self) -> Result<()> {
        let mut live = self.live_extents()?;
        self.heap.rebuild_free_space(&mut live);
        Ok(())
    }

    /// Retention, then compaction while a run qualifies (merger thread, after each merge).
    pub(super) fn reclaim(&self) -> Result<()> {
        let mut st = self.reclaim.lock();
        // Compaction first: it shrinks the dictionary, which retention's size estimate counts.
        while let Some(run) = self.pick_compaction() {
            if !self.compact(&mut st, &run)? {
                break;
            }
        }
        self.purge_deleted(&mut st)?;
        if self.apply_retention(&mut st, 0)? && self.logs.is_some() {
            self.write_manifest(None, false)?;
        }
        let live = merged_prefix(&self.gdt.pin()).len();
        if st.stale_segments > 0 && st.stale_segments * 4 >= live.max(1) {
            self.rebuild_dictionary(&mut st)?;
        }
        Ok(())
    }

    /// Force merge (Elasticsearch's `_forcemerge?max_num_segments=N`, Lucene's `forceMerge(N)`): compacts
    /// merged segments until at most `max_segments` remain, ignoring the policy's size bound (the caller
    /// asked for it). Each step rewrites the consecutive window of segments with the fewest bytes that brings
    /// the count down to the target, so one step reaches it. Like every compaction, it purges the deleted
    /// documents of what it rewrites; then each remaining segment with deleted documents not yet purged is
    /// rewritten alone (Elasticsearch's force merge rewrites a lone segment that has deletes too). Returns
    /// the number of merged segments left.
    pub(super) fn force_merge(&self, max_segments: usize) -> Result<usize> {
        assert!(max_segments >= 1, "force merge to zero segments");
        let mut st = self.reclaim.lock();
        loop {
            let merged = merged_prefix(&self.gdt.pin());
            if merged.len() <= max_segments {
                // Best effort: the segment count is reached; a segment the heap has no room to rewrite now
                // keeps its deleted documents until a later compaction.
                for s in &merged {
                    if unpurged(s).0 > 0 && !self.compact(&mut st, std::slice::from_ref(s))? {
                        break;
                    }
                }
                return Ok(merged.len());
            }
            let width = merged.len() - max_segments + 1;
            let run = merged
                .windows(width)
                .min_by_key(|w| w.iter().map(|s| image_len(s)).sum::<u64>())
                .expect("more segments than the target")
                .to_vec();
            if run.iter().map(|s| s.doc_count as u64).sum::<u64>() >= u32::MAX as u64 {
                return Err(Error::InvalidArgument(format!(
                    "force merge to {max_segments} segment(s): a segment would hold more than {} documents",
                    u32::MAX - 1
                )));
            }
            if !self.compact(&mut st, &run)? {
                return Err(Error::ResourceExhausted(format!(
                    "{}: not enough persistent space to force merge {} segments (the new image needs room \
                     beside the old ones until the swap)",
                    self.heap.path().display(),
                    run.len()
                )));
            }
        }
    }

    /// The oldest run of `factor` consecutive merged segments on one size level, if any.
    fn pick_compaction(&self) -> Option<Vec<Arc<SegmentDesc>>> {
        let p = self.cfg.compaction;
        if p.factor < 2 {
            return None;
        }
        let merged = merged_prefix(&self.gdt.pin());
        let f = p.factor as usize;
        let level = |s: &SegmentDesc| {
            let units = (image_len(s).max(LEVEL_FLOOR) / LEVEL_FLOOR) as f64;
            (units.ln() / (p.factor as f64).ln()).floor() as u32
        };
        let max = self.compaction_max_bytes();
        let mut i = 0;
        while i < merged.len() {
            let l = level(&merged[i]);
            let mut j = i + 1;
            while j < merged.len() && level(&merged[j]) == l {
                j += 1;
            }
            // The oldest window of `factor` segments on this level that fits the size bound.
            for run in merged[i..j].windows(f) {
                let bytes: u64 = run.iter().map(|s| image_len(s)).sum();
                let docs: u64 = run.iter().map(|s| s.doc_count as u64).sum();
                if bytes <= max && docs < u32::MAX as u64 {
                    return Some(run.to_vec());
                }
            }
            i = j;
        }
        None
    }

    /// Rewrites, alone, each merged segment whose deleted documents not yet purged are more than
    /// `CompactionPolicy::deletes_pct_allowed` percent of the documents it holds (with compaction on), once
    /// each: a rewrite purges every delete made before it, so a segment qualifies again only through
    /// deletes made since, which the next pass sees. Returns whether one was rewritten.
    fn purge_deleted(&self, st: &mut MutexGuard<'_, ReclaimState>) -> Result<bool> {
        let p = self.cfg.compaction;
        let pct = p.deletes_pct_allowed as u64;
        if p.factor < 2 || pct >= 100 {
            return Ok(false);
        }
        let max = self.compaction_max_bytes();
        let heap = self.heap.stats();
        if st.purge_refused_at.is_some_and(|used| heap.used >= used) {
            return Ok(false);
        }
        st.purge_refused_at = None;
        let mut any = false;
        // The snapshot is let go before any compaction: one held across it would keep the DRAM of segments
        // flushed since (a `for` keeps its head's temporaries to the end), which a writer waiting for an
        // arena under the writer lock needs, while `compact` waits for that lock.
        let merged = merged_prefix(&self.gdt.pin());
        for s in merged {
            let (deleted, held) = unpurged(&s);
            if image_len(&s) <= max && deleted as u64 * 100 > pct * held as u64 {
                // The new image is at most the old one's size: none is built that the budget cannot take.
                let room = heap.budget.saturating_sub(self.heap.stats().used);
                if image_len(&s) > room || !self.compact(st, &[s])? {
                    st.purge_refused_at = Some(self.heap.stats().used);
                    break;
                }
                any = true;
            }
        }
        Ok(any)
    }

    /// [`purge_deleted`](Self::purge_deleted) on a pause in ingestion (merger thread): deletes alone wake
    /// no merge.
    pub(super) fn purge_on_pause(&self) -> Result<bool> {
        self.purge_deleted(&mut self.reclaim.lock())
    }

    /// The largest image a compaction may write: the policy's bound, and with retention on, small against
    /// its size bound (retention drops whole segments) and against the budget (a compaction briefly holds
    /// both copies).
    fn compaction_max_bytes(&self) -> u64 {
        let r = self.cfg.retention;
        let budget = if r.enabled() { self.heap.stats().budget / 16 } else { u64::MAX };
        self.cfg.compaction.max_image_bytes.min(r.max_bytes.map_or(u64::MAX, |m| m / 8)).min(budget)
    }

    /// Compaction on a pause in ingestion (`CompactionPolicy::on_pause`, merger thread): the newest merged
    /// segments that fit the size bound together become one, unless the oldest of them is more than
    /// `factor` times the others together (then it stays out, and the rest go if at least two). Returns
    /// whether a compaction ran.
    pub(super) fn compact_on_pause(&self) -> Result<bool> {
        let p = self.cfg.compaction;
        if p.factor < 2 || !p.on_pause {
            return Ok(false);
        }
        let mut st = self.reclaim.lock();
        let merged = merged_prefix(&self.gdt.pin());
        let sizes: Vec<(u64, u64)> = merged.iter().map(|s| (image_len(s), s.doc_count as u64)).collect();
        let run = pause_run(&sizes, self.compaction_max_bytes(), p.factor as u64);
        if run.len() < 2 {
            return Ok(false);
        }
        self.compact(&mut st, &merged[run])
    }

    /// Builds a merged dictionary linking every merged segment of `snap`, with the segments of `replace.0`
    /// replaced by the image `replace.1` (whose segment id is the run's last). Nothing refers to it yet.
    fn build_dictionary(
        &self,
        snap: &Snapshot,
        replace: Option<(&[Arc<SegmentDesc>], &PersistentImage)>,
    ) -> Result<MergedSegment> {
        let path = self.heap.path();
        let heap_err = |e: crate::memory::PersistentHeapError| Error::ResourceExhausted(e.to_string());
        let ms = MergedSegment::create(self.heap.clone()).map_err(heap_err)?.with_hot(self.hot.clone());
        let built = (|| -> Result<()> {
            for s in merged_prefix(snap) {
                let img = match replace {
                    Some((run, img)) if run.iter().any(|r| r.id == s.id) => {
                        if run[0].id != s.id {
                            continue;
                        }
                        img.clone()
                    }
                    _ => match &s.data {
                        SegData::Image { persistent: Some(p), .. } => p.clone(),
                        _ => {
                            return Err(Error::Format(format!(
                                "merged segment {} has no persistent copy",
                                s.id
                            )))
                        }
                    },
                };
                let view = ImageView::parse(img.bytes()).map_err(|e| Error::corrupt(path, img.off, e.0))?;
                ms.link(img.off, &view, &mut LinkOptions::default())
                    .map_err(|e| Error::ResourceExhausted(format!("{}: compaction: {e}", path.display())))?;
            }
            if self.logs.is_some() {
                ms.persist_all().map_err(heap_err)?;
            }
            Ok(())
        })();
        if let Err(e) = built {
            ms.retire();
            return Err(e);
        }
        Ok(ms)
    }

    /// Rewrites `run` as one image and swaps it (and a dictionary without the run's nodes) in. Returns false
    /// if the heap has no room for it now (compaction is skipped, nothing changes).
    fn compact(&self, st: &mut MutexGuard<'_, ReclaimState>, run: &[Arc<SegmentDesc>]) -> Result<bool> {
        let t0 = Instant::now();
        let path = self.heap.path();
        let mut views = Vec::with_capacity(run.len());
        for s in run {
            let v =
                s.image().expect("merged segments are images").map_err(|e| Error::corrupt(path, 0, e.0))?;
            views.push(v);
        }
        let last = run.last().expect("a run has segments");
        let codecs = self.codecs.lock().clone();
        // The deleted documents to purge, as the writer lock leaves them: an update deletes the old version
        // and adds the new one under it (and undoes the delete if the add fails), so no delete read here is
        // one that may yet be undone, and every snapshot taken after the swap sees every one of them.
        let purge: Vec<Vec<u64>> = {
            let _w = self.writer.lock();
            run.iter().map(|s| s.deletes.words()).collect()
        };
        let purge: Vec<&[u64]> = purge.iter().map(Vec::as_slice).collect();
        let image =
            seal_compacted(&views, &purge, last.id, &codecs).map_err(|e| Error::corrupt(path, 0, e.0))?;
        drop(views);
        let len = image.len();
        let Ok(off) = self.heap.alloc_via(len, WriteVia::File) else {
            return Ok(false);
        };
        if let Err(e) = self.heap.write_gathered(off, len, &|f| image.pieces(f)) {
            self.heap.release(off, len as u64);
            return Err(Error::io(path, e));
        }
        drop(image);
        let img = PersistentImage::new(self.heap.clone(), off, len);
        if self.logs.is_some() {
            if let Err(e) = self.heap.persist(off, len) {
                img.retire();
                return Err(Error::io(path, e));
            }
        }
        let snap = self.gdt.pin();
        let dict = match self.build_dictionary(&snap, Some((run, &img))) {
            Ok(d) => d,
            Err(Error::ResourceExhausted(_)) => {
                img.retire();
                return Ok(false);
            }
            Err(e) => {
                img.retire();
                return Err(e);
            }
        };
        drop(snap);
        let doc_count: u32 = run.iter().map(|s| s.doc_count).sum();
        let desc = |deletes| SegmentDesc {
            id: last.id,
            base_doc: run[0].base_doc,
            state: SegState::Merged,
            deletes,
            data: SegData::Image { dram: None, persistent: Some(img.clone()) },
            doc_count,
            sealed_at: run.iter().map(|s| s.sealed_at).max().unwrap_or(0),
        };
        let old_dict = self.swap(run, Some(desc), dict);
        old_dict.retire();
        st.stale_segments = 0;
        self.counters.compactions.fetch_add(1, Relaxed);
        self.counters.compact_nanos.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        if self.logs.is_some() {
            self.write_manifest(None, false)?;
        }
        Ok(true)
    }

    /// Replaces the segments `old` (consecutive) by `new` (or removes them) and the dictionary by `dict` in
    /// one GDT update, under the writer lock so no delete is lost: deletes set bits only under that lock, and
    /// the new segment's bitmap is filled from the old ones inside it. Retires the old images; returns the
    /// old dictionary.
    fn swap(
        &self,
        old: &[Arc<SegmentDesc>],
        new: Option<impl FnOnce(Arc<DeleteBitmap>) -> SegmentDesc>,
        dict: MergedSegment,
    ) -> Arc<MergedSegment> {
        let _w: MutexGuard<'_, Writer> = self.writer.lock();
        let new = new.map(|mk| {
            let del = DeleteBitmap::new(old.iter().map(|s| s.doc_count).sum());
            let mut at = 0;
            for s in old {
                for d in 0..s.doc_count {
                    if s.deletes.is_deleted(d) {
                        del.delete_settled(at + d);
                    }
                }
                at += s.doc_count;
            }
            Arc::new(mk(Arc::new(del)))
        });
        let ids: Vec<u32> = old.iter().map(|s| s.id).collect();
        let old_dict = self.gdt.update(|s| {
            let first = s.segments.iter().position(|d| ids.contains(&d.id)).expect("segments in the GDT");
            s.segments.retain(|d| !ids.contains(&d.id));
            if let Some(n) = new {
                s.segments.insert(first, n);
            }
            std::mem::replace(&mut s.merged, Arc::new(dict))
        });
        for s in old {
            if let SegData::Image { persistent: Some(p), .. } = &s.data {
                p.retire();
            }
        }
        old_dict
    }

    /// A new dictionary without the chain nodes of segments retention dropped.
    fn rebuild_dictionary(&self, st: &mut MutexGuard<'_, ReclaimState>) -> Result<()> {
        let snap = self.gdt.pin();
        let dict = match self.build_dictionary(&snap, None) {
            Ok(d) => d,
            Err(Error::ResourceExhausted(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        drop(snap);
        let old = {
            let _w = self.writer.lock();
            self.gdt.update(|s| std::mem::replace(&mut s.merged, Arc::new(dict)))
        };
        old.retire();
        st.stale_segments = 0;
        if self.logs.is_some() {
            self.write_manifest(None, false)?;
        }
        Ok(())
    }

    /// Drops the oldest merged segments that retention says must go, plus enough to free `need` bytes.
    /// Returns whether any was dropped; the caller checkpoints (crash-safe) so the drop becomes durable and
    /// the space reusable.
    pub(super) fn apply_retention(&self, st: &mut MutexGuard<'_, ReclaimState>, need: u64) -> Result<bool> {
        let r = self.cfg.retention;
        if !r.enabled() {
            return Ok(false);
        }
        let merged = droppable_prefix(&self.gdt.pin());
        let mut n = 0;
        if let Some(age) = r.max_age_secs {
            let now = now_millis();
            while n < merged.len() && merged[n].sealed_at.saturating_add(age.saturating_mul(1000)) <= now {
                n += 1;
            }
        }
        // `max_bytes` bounds the segment data (images and the merged dictionary), like an index size; with
        // retention on, the whole heap also keeps a quarter of its budget free, so logs, checkpoints, merges
        // and compactions (which briefly hold old and new copies) find room before anything runs out.
        let snap = self.gdt.pin();
        let images: u64 = snap.segments.iter().map(|s| image_len(s)).sum();
        let data = images + snap.merged.region_bytes();
        drop(snap);
        let hs = self.heap.stats();
        let over_data = r.max_bytes.map_or(0, |m| data.saturating_sub(m));
        let target = over_data.max(hs.used.saturating_sub(hs.budget / 4 * 3)).max(need);
        // A segment's share: its image plus its part of the dictionary, estimated by scaling.
        let scale = data as f64 / images.max(1) as f64;
        let share = |s: &SegmentDesc| (image_len(s) as f64 * scale.max(1.0)) as u64;
        let mut freed: u64 = merged[..n].iter().map(|s| share(s)).sum();
        while freed < target && n < merged.len() {
            freed += share(&merged[n]);
            n += 1;
        }
        if n == 0 {
            return Ok(false);
        }
        let run = &merged[..n];
        // The dictionary stays; readers skip its nodes of dropped segments until the next rebuild.
        // No writer lock: a delete racing with the drop sets a bit in a bitmap that is going away anyway.
        let ids: Vec<u32> = run.iter().map(|s| s.id).collect();
        self.gdt.update(|s| s.segments.retain(|d| !ids.contains(&d.id)));
        for s in run {
            if let SegData::Image { persistent: Some(p), .. } = &s.data {
                p.retire();
            }
        }
        st.stale_segments += n;
        self.counters.dropped_segments.fetch_add(n as u64, Relaxed);
        self.counters.dropped_docs.fetch_add(run.iter().map(|s| s.doc_count as u64).sum(), Relaxed);
        Ok(true)
    }

    /// Persistent space for an image of `len` bytes written through the file ([`WriteVia::File`]). Out of
    /// space: if retention is configured, drop the oldest segments until the allocation succeeds (waiting
    /// for readers of old epochs to let go of their space); otherwise, or if nothing is left to drop, the
    /// error.
    pub(super) fn alloc_with_retention(&self, len: usize) -> Result<u64> {
        let mut last = match self.heap.alloc_via(len, WriteVia::File) {
            Ok(off) => return Ok(off),
            Err(e) => e,
        };
        if !self.cfg.retention.enabled() {
            return Err(Error::ResourceExhausted(last.to_string()));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        // Space a drop frees comes back once readers of older epochs leave (and, crash-safe, after a
        // checkpoint): drop again only if that did not suffice after a while.
        let mut dropped_at: Option<Instant> = None;
        while Instant::now() < deadline {
            // Never wait for the merger here: it may be waiting for the writer lock (see `try_checkpoint`).
            if let Some(mut st) = self.reclaim.try_lock_for(Duration::from_millis(20)) {
                if dropped_at.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                    // Nothing droppable yet (the oldest segments still in flight): wait for the pipeline.
                    if self.apply_retention(&mut st, len as u64)? {
                        dropped_at = Some(Instant::now());
                    }
                }
                if self.logs.is_some() && self.heap.stats().pending > 0 {
                    // The engraver must not wait for the writer lock (see `try_checkpoint`).
                    self.try_checkpoint()?;
                }
            }
            match self.heap.alloc_via(len, WriteVia::File) {
                Ok(off) => return Ok(off),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(Error::ResourceExhausted(format!("{last} (retention could not free enough in 30 s)")))
    }
}

#[cfg(test)]
mod tests {
    use super::pause_run;

    #[test]
    fn pause_run_takes_the_newest_segments_that_fit_and_leaves_out_a_dominant_oldest() {
        let mb = |v: &[u64]| v.iter().map(|&m| (m << 20, m * 1000)).collect::<Vec<_>>();
        // All fit, none dominates: all of them.
        assert_eq!(pause_run(&mb(&[40, 30, 10]), 256 << 20, 4), 0..3);
        // The size bound cuts the run at the newest that fit together.
        assert_eq!(pause_run(&mb(&[200, 40, 30, 10]), 100 << 20, 4), 1..4);
        // An oldest segment more than factor times the rest stays out (bounded rewriting); at exactly
        // factor times it goes in.
        assert_eq!(pause_run(&mb(&[100, 10, 10]), 256 << 20, 4), 1..3);
        assert_eq!(pause_run(&mb(&[80, 10, 10]), 256 << 20, 4), 0..3);
        // Dropping one dominant segment can make the next one dominant in turn.
        assert_eq!(pause_run(&mb(&[200, 40, 1, 1]), 256 << 20, 4), 2..4);
        // One segment, none, or one that alone exceeds the bound: nothing to do.
        assert!(pause_run(&mb(&[50]), 256 << 20, 4).len() < 2);
        assert!(pause_run(&[], 256 << 20, 4).is_empty());
        assert!(pause_run(&mb(&[300, 10]), 256 << 20, 4).len() < 2);
        // Documents: a run stays below u32::MAX of them.
        let big = [(1, 3_000_000_000), (1, 3_000_000_000), (1, 1)];
        assert_eq!(pause_run(&big, 256 << 20, 4), 1..3);
    }
}
