//! Codecs: how posting lists are laid out as bytes.
//!
//! A posting list is cut into blocks of [`BLOCK`] postings. Full blocks store doc-id gaps and term
//! frequencies SIMD bit-packed (the `bitpacking` crate, seed 004's SIMD-BP128); the last, partial block uses
//! VByte. A skip table in front (last doc, byte offset, positions offset and max tf per block) lets
//! [`PostingsCursor::advance`] jump over whole blocks, and positions live in their own VByte stream that is
//! decoded only when a phrase needs them. The layout is position independent: the same bytes are read from
//! the DRAM copy and from the persistent copy.
//!
//! Every decoder bounds-checks what it reads and reports [`CodecError`] instead of panicking, because
//! persistent bytes can be corrupted.
//!
//! Field lengths are stored as one-byte norms ([`encode_norm`], Lucene's scheme). [`family`] holds the codecs
//! the doc-id format was chosen against (raw, VByte, Stream VByte, PFor) behind one trait, for the codec
//! study (`spirit-bench codecs`).

pub mod family;
mod norm;
mod postings;
pub mod simd;
mod vbyte;

pub use norm::{decode_norm, encode_norm, quantized_length, NORM_VALUES};
pub use postings::{
    encode_postings, encode_postings_encoded, encode_postings_with, impacts, pack_impact, packed_tf,
    unpack_impact, write_positions, DocCodec, FieldCodecs, Impacts, Intersect, ListHead, PackedImpacts,
    PostingsCursor, PostingsMeta, BLOCK, IMPACTS, MARKS_SPAN, NO_DOC,
};
pub use vbyte::{read_vbyte, write_vbyte};

/// A malformed encoded structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt {what} at byte {offset}")]
pub struct CodecError {
    pub what: &'static str,
    pub offset: usize,
}
