//! The global descriptor table (SPIRIT §4.3): the one place a reader finds segments.
//!
//! A [`Snapshot`] is an immutable list of segment descriptors, oldest first, each saying which state the
//! segment is in and which copy a query reads (DRAM image, persistent image, or the fresh arena). A state
//! change builds a new snapshot and publishes it with one atomic pointer swap; a reader *pins* the current
//! snapshot (an epoch) for the duration of its query. Memory a state change frees — a fresh arena after flush,
//! a DRAM image after commit — is returned to its ring when the last snapshot referring to it is dropped,
//! i.e. when the last reader of that epoch leaves. Readers take no locks; writers serialize state changes on
//! one mutex and never wait for readers.

use crate::memory::{DramBlock, Extent, PersistentHeap};
use crate::segment::image::SealedImage;
use crate::segment::{DeleteBitmap, FreshSegment, ImageView, MergedSegment, SegmentError};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::sync::Arc;

/// The lifecycle states of SPIRIT §4.6–4.7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SegState {
    /// Being written (or sealed and waiting for the flusher); read from the fresh arena.
    Fresh,
    /// Read-optimized image in DRAM, not yet copied to the persistent tier.
    Flushed,
    /// Image in DRAM and a copy in the persistent tier; queries read the DRAM copy.
    Engraved,
    /// DRAM copy released; queries read the persistent copy.
    Committed,
    /// Posting lists linked into the merged segment; queries read them through its dictionary.
    Merged,
}

impl SegState {
    pub const ALL: [SegState; 5] =
        [SegState::Fresh, SegState::Flushed, SegState::Engraved, SegState::Committed, SegState::Merged];
}

/// A flushed image held in the DRAM long-term ring.
pub struct DramImage {
    block: DramBlock,
    len: usize,
}

impl DramImage {
    /// Writes a sealed image straight into `block` (its previous bytes all overwritten).
    pub(crate) fn write(mut block: DramBlock, image: &SealedImage) -> DramImage {
        let len = image.len();
        assert!(len <= block.len());
        image.write_into(&mut block.as_mut_slice()[..len]);
        DramImage { block, len }
    }
    pub fn bytes(&self) -> &[u8] {
        &self.block.as_slice()[..self.len]
    }
    pub fn dram_bytes(&self) -> usize {
        self.block.len()
    }
}

/// An image engraved into the persistent heap. Its extent goes back to the heap when the image is retired
/// (compacted or dropped by retention) and the last snapshot holding it is gone.
#[derive(Clone)]
pub struct PersistentImage {
    pub off: u64,
    pub len: usize,
    extent: Arc<Extent>,
}

impl PersistentImage {
    pub fn new(heap: Arc<PersistentHeap>, off: u64, len: usize) -> PersistentImage {
        PersistentImage { off, len, extent: Arc::new(Extent::new(heap, off, len as u64)) }
    }
    pub fn bytes(&self) -> &[u8] {
        self.extent.heap().slice(self.off, self.len)
    }
    /// No new snapshot will refer to this image: its space is reusable once the readers of older epochs are
    /// gone (and, in crash-safe mode, a later checkpoint is durable).
    pub fn retire(&self) {
        self.extent.retire();
    }
}

/// Where a segment's data is.
#[derive(Clone)]
pub enum SegData {
    Fresh(Arc<FreshSegment>),
    Image { dram: Option<Arc<DramImage>>, persistent: Option<PersistentImage> },
}

/// One row of the GDT.
#[derive(Clone)]
pub struct SegmentDesc {
    pub id: u32,
    pub base_doc: u32,
    /// Documents in the segment (for a fresh segment: its capacity bound; the watermark says how many are
    /// visible).
    pub state: SegState,
    pub deletes: Arc<DeleteBitmap>,
    pub data: SegData,
    /// Documents, for image states (fresh segments report their watermark).
    pub doc_count: u32,
    /// When the segment's newest document was sealed (unix milliseconds; 0 while fresh). Retention by age
    /// reads it.
    pub sealed_at: u64,
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl SegmentDesc {
    /// Documents a reader pinning now may see.
    pub fn visible_docs(&self) -> u32 {
        match &self.data {
            SegData::Fresh(f) => f.visible(),
            SegData::Image { .. } => self.doc_count,
        }
    }

    /// The image copy a query reads: DRAM while it exists, the persistent copy otherwise.
    pub fn image(&self) -> Option<Result<ImageView<'_>, SegmentError>> {
        match &self.data {
            SegData::Fresh(_) => None,
            SegData::Image { dram: Some(d), .. } => Some(ImageView::parse(d.bytes())),
            SegData::Image { persistent: Some(p), .. } => Some(ImageView::parse(p.bytes())),
            SegData::Image { .. } => Some(Err(SegmentError("segment has no copy".into()))),
        }
    }
}

/// An immutable view of the GDT: an epoch.
#[derive(Clone)]
pub struct Snapshot {
    pub epoch: u64,
    /// Oldest first; ids and doc ranges increase.
    pub segments: Vec<Arc<SegmentDesc>>,
    /// Segments with id <= this are merged and read through `merged`.
    pub merged_upto: Option<u32>,
    pub merged: Arc<MergedSegment>,
}

impl Snapshot {
    /// The segment holding global doc `doc`.
    pub fn segment_of(&self, doc: u32) -> Option<&Arc<SegmentDesc>> {
        let i = self.segments.partition_point(|s| s.base_doc <= doc);
        let s = self.segments.get(i.checked_sub(1)?)?;
        (doc < s.base_doc + s.visible_docs()).then_some(s)
    }

    /// Index of segment `id` in `segments`.
    pub fn index_of(&self, id: u32) -> Option<usize> {
        self.segments.binary_search_by_key(&id, |s| s.id).ok()
    }
}

/// The GDT of one shard.
pub struct Gdt {
    current: ArcSwap<Snapshot>,
    update: Mutex<()>,
}

impl Gdt {
    pub fn new(initial: Snapshot) -> Gdt {
        Gdt { current: ArcSwap::from_pointee(initial), update: Mutex::new(()) }
    }

    /// Pins the current epoch.
    pub fn pin(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Applies a state change: `f` edits a copy of the current snapshot, which is then published as the next
    /// epoch. State changes are serialized.
    pub fn update<R>(&self, f: impl FnOnce(&mut Snapshot) -> R) -> R {
        let _g = self.update.lock();
        let mut next = (**self.current.load()).clone();
        next.epoch += 1;
        let r = f(&mut next);
        self.current.store(Arc::new(next));
        r
    }

    /// Replaces segment `id`'s descriptor using `f`; returns false if it is not there.
    pub fn update_segment(&self, id: u32, f: impl FnOnce(&mut SegmentDesc)) -> bool {
        self.update(|s| match s.index_of(id) {
            Some(i) => {
                let mut d = (*s.segments[i]).clone();
                f(&mut d);
                s.segments[i] = Arc::new(d);
                true
            }
            None => false,
        })
    }
}
