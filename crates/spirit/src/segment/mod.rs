//! Segments: the units of the index, each holding a contiguous, increasing range of doc ids.
//!
//! * [`fresh`]: the write-optimized segment the ingester writes into, searchable while written.
//! * [`image`]: the read-optimized, position-independent byte image a fresh segment is flushed into. The same
//!   bytes serve as the *flushed* copy (DRAM long-term ring) and, after one bulk copy, as the *engraved* and
//!   *committed* copy (persistent heap).
//! * [`merged`]: the merged segment — one persistent dictionary whose entries chain the per-segment posting
//!   lists of every merged image, linked in place (SPIRIT §4.7).
//! * [`hot`]: selective caching of the merged dictionary — hot terms' chains resolved and held in DRAM.
//! * [`biword`]: the postings of two-word phrases of common words, built with every image.
//! * [`compact`]: compaction's builder — N consecutive images into one, every document kept.
//! * [`deletes`]: per-segment delete bitmaps.

pub mod biword;
pub mod compact;
pub mod deletes;
pub mod fresh;
pub mod hot;
pub mod image;
pub mod merged;

pub use compact::compact_images;
pub use deletes::DeleteBitmap;
pub use fresh::{BatchError, FreshPostings, FreshSegment, InsertError, TermBatch};
pub use image::{ImageBuilder, ImageView};
pub use merged::{LinkOptions, MergeError, MergedSegment};

/// BM25 statistics of one field over a set of documents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldStats {
    /// Documents that have the field.
    pub docs: u64,
    /// Sum of the field's length over those documents.
    pub total_len: u64,
}

impl std::ops::AddAssign for FieldStats {
    fn add_assign(&mut self, o: FieldStats) {
        self.docs += o.docs;
        self.total_len += o.total_len;
    }
}

/// A structural problem found while reading a segment (turned into [`crate::Error::Corrupt`] with the
/// file and offset by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentError(pub String);

impl From<crate::codec::CodecError> for SegmentError {
    fn from(e: crate::codec::CodecError) -> Self {
        SegmentError(e.to_string())
    }
}
