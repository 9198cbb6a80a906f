//! The posting-list blob: header, skip table, blocks, positions stream.
//!
//! ```text
//! VByte n_postings | VByte blocks_len
//! skip[n_blocks] (only when n_blocks > 1): u32 last_doc | u32 block_offset | u32 positions_offset
//!                                            | IMPACTS × u32: the block's impacts, each tf << 8 | norm code
//! ```
//! The impacts are the Pareto frontier of the block's (term frequency, field length) pairs — no posting has
//! a higher tf *and* a shorter field than every one of them — capped at `IMPACTS` entries by merging the tail
//! into one conservative pair. BM25 grows with tf and shrinks with the field length, so the best score of any
//! impact bounds every document of the block, whatever the query-time idf and average length (as Lucene's
//! impacts do). Lengths are the quantized ones scoring uses ([`super::quantized_length`]), so an impact
//! fits one word: the tf in the high 24 bits (saturated: the largest reads back as `u32::MAX`, still a
//! bound) above the length's one-byte norm code ([`pack_impact`]). Unused entries are 0 and read back as
//! (0, u32::MAX). Eight impacts per block: with four, the capped tail of a frequent term's frontier (its
//! short documents, merged into one pair with the tail's highest tf) bounded far above any real score, and
//! the top-10 of `the` on the enwiki dev file decoded most of its 1,950 blocks (106 µs; with eight 14 µs,
//! with sixteen 13.5 µs).
//! ```text
//! blocks (blocks_len bytes):
//!         full:    u8 doc_bits | u8 tf_bits | packed (doc gaps - 1) | packed (tf - 1)
//!              or  u8 0x80|codec | u8 tf_bits | the field's DocCodec's gaps | packed (tf - 1)
//!         partial: VByte gaps, then VByte tf - 1
//! positions: per posting, tf VByte position gaps (first absolute)
//! ```
//! Gaps are taken from the previous block's last doc; the first posting of the list is stored as is. Most
//! terms of a segment occur once (Zipf), so a one-block list has no skip table and costs a few bytes.
//!
//! Full blocks code their doc gaps with the field's [`DocCodec`] (SIMD bit-packing unless the mapping says
//! otherwise); the first byte tells which, so every block decodes whatever the field's codec is now, and
//! images written under another choice (or before codecs were selectable) stay readable.

use super::family::{self, GapCodec};
use super::norm::{decode_norm, encode_norm};
use super::vbyte::{read_vbyte, write_vbyte};
use super::CodecError;
use bitpacking::{BitPacker, BitPacker4x};
use serde::{Deserialize, Serialize};

/// Postings per block.
pub const BLOCK: usize = BitPacker4x::BLOCK_LEN;
/// The doc id of an exhausted cursor.
pub const NO_DOC: u32 = u32::MAX;
/// Impacts kept per block.
pub const IMPACTS: usize = 8;
/// A block's impacts, (tf, quantized length) each, highest tf first; unused entries have tf 0.
pub type Impacts = [(u32, u32); IMPACTS];
const SKIP: usize = 12 + 4 * IMPACTS;
/// The largest tf an impact word holds; a higher one is stored as it and read back as `u32::MAX`.
const IMPACT_TF_MAX: u32 = (1 << 24) - 1;

/// One impact (tf, quantized length) as a word: the tf (saturated at [`IMPACT_TF_MAX`]) above the
/// length's norm code; an unused entry (tf 0) is 0. The skip table and the fresh segment's sealed blocks
/// store impacts so.
#[inline]
pub fn pack_impact((tf, dl): (u32, u32)) -> u32 {
    if tf == 0 {
        return 0;
    }
    tf.min(IMPACT_TF_MAX) << 8 | encode_norm(dl) as u32
}

/// The impact [`pack_impact`] stored: a saturated tf reads back as `u32::MAX`, which bounds any real one.
#[inline]
pub fn unpack_impact(w: u32) -> (u32, u32) {
    match packed_tf(w) {
        0 => (0, u32::MAX),
        tf => (tf, decode_norm(w as u8)),
    }
}

/// A block's impacts as stored, one [`pack_impact`] word each: scoring reads the norm code and the tf
/// ([`packed_tf`]) straight from them.
pub type PackedImpacts = [u32; IMPACTS];

/// The tf of a packed impact (`u32::MAX` for a saturated one, 0 for an unused entry).
#[inline]
pub fn packed_tf(w: u32) -> u32 {
    match w >> 8 {
        IMPACT_TF_MAX => u32::MAX,
        tf => tf,
    }
}

/// How full blocks code their doc-id gaps, selectable per field (a text or keyword field's
/// `postings_codec` mapping); term frequencies are always bit-packed, positions VByte. Seed 004's study
/// (`spirit-bench codecs`) measures each on our data: bit-packing decodes fastest at 9.1 bits per doc id,
/// PFor is the smallest, raw u32 the simplest, VByte and Stream VByte sit between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocCodec {
    /// SIMD bit-packing at the block's widest gap (`bitpacking`'s `BitPacker4x`): the default.
    #[default]
    Bitpacked,
    /// Four bytes per gap.
    Raw,
    /// 7 bits per byte with a continuation bit.
    Vbyte,
    /// Lemire's Stream VByte: 2-bit lengths in control bytes, the value bytes apart.
    Streamvbyte,
    /// Patched frame of reference over the block's 128 gaps: a width covering 90% of them, exceptions after.
    Pfor,
}

static RAW: family::Raw = family::Raw;
static VBYTE: family::VByte = family::VByte;
static STREAM_VBYTE: family::StreamVByte = family::StreamVByte;
static PFOR: family::PFor = family::PFor { block: BLOCK };

/// A block's first byte for a codec other than bit-packing (whose first byte is its width, at most 32).
const CODEC_TAG: u8 = 0x80;

impl DocCodec {
    /// Every codec, the default first.
    pub const ALL: [DocCodec; 5] =
        [DocCodec::Bitpacked, DocCodec::Raw, DocCodec::Vbyte, DocCodec::Streamvbyte, DocCodec::Pfor];

    /// The name mappings use.
    pub fn name(self) -> &'static str {
        match self {
            DocCodec::Bitpacked => "bitpacked",
            DocCodec::Raw => "raw",
            DocCodec::Vbyte => "vbyte",
            DocCodec::Streamvbyte => "streamvbyte",
            DocCodec::Pfor => "pfor",
        }
    }

    /// The codec of a mapping name.
    pub fn from_name(name: &str) -> Option<DocCodec> {
        DocCodec::ALL.into_iter().find(|c| c.name() == name)
    }

    fn id(self) -> u8 {
        DocCodec::ALL.iter().position(|&c| c == self).expect("listed") as u8
    }

    /// The gap codec of a tagged block (`None` for bit-packing, which the cursor inlines).
    fn gap_codec(self) -> Option<&'static dyn GapCodec> {
        match self {
            DocCodec::Bitpacked => None,
            DocCodec::Raw => Some(&RAW),
            DocCodec::Vbyte => Some(&VBYTE),
            DocCodec::Streamvbyte => Some(&STREAM_VBYTE),
            DocCodec::Pfor => Some(&PFOR),
        }
    }
}

/// Each field's [`DocCodec`] by field id (fields past the end, and a default value: bit-packing). Flush
/// and compaction encode with it; reading never needs it (blocks say how they are coded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldCodecs(pub Vec<DocCodec>);

impl FieldCodecs {
    /// The codec of `field`.
    #[inline]
    pub fn get(&self, field: u16) -> DocCodec {
        self.0.get(field as usize).copied().unwrap_or_default()
    }
}

/// What the encoder learned about the list (stored in the dictionary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PostingsMeta {
    pub df: u32,
    pub total_tf: u64,
    pub max_tf: u32,
}

/// Encodes postings (`docs` strictly increasing, `tfs[i] >= 1`, `positions` concatenated per posting,
/// `tfs[i]` positions each, increasing within a posting, `dls[i]` the field length of `docs[i]`) and appends
/// the blob to `out`.
pub fn encode_postings(
    docs: &[u32],
    tfs: &[u32],
    positions: &[u32],
    dls: &[u32],
    out: &mut Vec<u8>,
) -> PostingsMeta {
    encode_postings_with(DocCodec::Bitpacked, docs, tfs, positions, dls, out)
}

/// [`encode_postings`] with full blocks' doc gaps in `codec`.
pub fn encode_postings_with(
    codec: DocCodec,
    docs: &[u32],
    tfs: &[u32],
    positions: &[u32],
    dls: &[u32],
    out: &mut Vec<u8>,
) -> PostingsMeta {
    assert_eq!(docs.len(), tfs.len());
    let (mut stream, mut starts) = (Vec::new(), Vec::with_capacity(docs.len().div_ceil(BLOCK)));
    let mut pos_i = 0usize;
    for (k, &tf) in tfs.iter().enumerate() {
        if k % BLOCK == 0 {
            starts.push(stream.len() as u32);
        }
        write_positions(&mut stream, positions[pos_i..pos_i + tf as usize].iter().copied());
        pos_i += tf as usize;
    }
    assert_eq!(pos_i, positions.len(), "positions do not match term frequencies");
    encode_postings_encoded(codec, docs, tfs, (&stream, &starts), dls, out)
}

/// Appends one posting's positions (increasing) as the positions stream holds them: VByte gaps, the first
/// absolute.
pub fn write_positions(stream: &mut Vec<u8>, positions: impl IntoIterator<Item = u32>) {
    let mut last = 0;
    for (j, p) in positions.into_iter().enumerate() {
        write_vbyte(stream, if j == 0 { p } else { p - last });
        last = p;
    }
}

/// [`encode_postings_with`] with the positions already in the blob's form: `positions.0` the stream (each
/// posting's [`write_positions`], back to back), `positions.1` where each block of [`BLOCK`] postings
/// starts in it. Compaction copies its parts' streams whole ([`PostingsCursor::positions_stream`]) instead of
/// decoding and re-encoding every position.
pub fn encode_postings_encoded(
    codec: DocCodec,
    docs: &[u32],
    tfs: &[u32],
    positions: (&[u8], &[u32]),
    dls: &[u32],
    out: &mut Vec<u8>,
) -> PostingsMeta {
    ENCODE_SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => encode_with_scratch(&mut s, codec, docs, tfs, positions, dls, out),
        // Re-entered on this thread (not done today): scratch of its own.
        Err(_) => encode_with_scratch(&mut EncodeScratch::default(), codec, docs, tfs, positions, dls, out),
    })
}

/// The buffers [`encode_postings_encoded`] builds a list in before appending it, kept per thread: a flush
/// encodes about a million lists, most of a posting or two, and a new buffer and 1.5 KB of zeroed arrays
/// for each were ~7% of the flush's time.
#[derive(Default)]
struct EncodeScratch {
    skip: Vec<u8>,
    blocks: Vec<u8>,
    /// A full block's bit-packed output, its `tf - 1`s and its doc gaps ([`BLOCK`]-sized once used).
    packed: Vec<u8>,
    tf_minus: Vec<u32>,
    gaps: Vec<u32>,
}

/// Scratch that grew past this (a very long list) is given back after the list is encoded.
const SCRATCH_KEEP: usize = 1 << 20;

thread_local! {
    static ENCODE_SCRATCH: std::cell::RefCell<EncodeScratch> = std::cell::RefCell::default();
}

fn encode_with_scratch(
    scratch: &mut EncodeScratch,
    codec: DocCodec,
    docs: &[u32],
    tfs: &[u32],
    (positions_stream, block_starts): (&[u8], &[u32]),
    dls: &[u32],
    out: &mut Vec<u8>,
) -> PostingsMeta {
    assert_eq!(docs.len(), dls.len());
    assert_eq!(docs.len(), tfs.len());
    assert!(!docs.is_empty(), "empty posting list");
    debug_assert!(docs.windows(2).all(|w| w[0] < w[1]), "doc ids must increase");
    let n = docs.len();
    let n_blocks = n.div_ceil(BLOCK);
    let EncodeScratch { skip, blocks, packed, tf_minus, gaps } = scratch;
    skip.clear();
    skip.resize(if n_blocks > 1 { n_blocks * SKIP } else { 0 }, 0);
    blocks.clear();
    if n >= BLOCK && packed.is_empty() {
        packed.resize(4 * BLOCK, 0);
        tf_minus.resize(BLOCK, 0);
        gaps.resize(BLOCK, 0);
    }
    assert_eq!(block_starts.len(), n_blocks, "a positions start per block");
    let bp = BitPacker4x::new();
    let mut prev: Option<u32> = None;
    let mut meta = PostingsMeta { df: n as u32, ..Default::default() };
    for (b, &pos_off) in block_starts.iter().enumerate() {
        let lo = b * BLOCK;
        let hi = (lo + BLOCK).min(n);
        let block_off = blocks.len();
        let mut max_tf = 0;
        for &tf in &tfs[lo..hi] {
            assert!(tf >= 1);
            max_tf = max_tf.max(tf);
            meta.total_tf += tf as u64;
        }
        meta.max_tf = meta.max_tf.max(max_tf);
        if hi - lo == BLOCK {
            let d = &docs[lo..hi];
            let doc_bits = bp.num_bits_strictly_sorted(prev, d);
            for (k, &tf) in tfs[lo..hi].iter().enumerate() {
                tf_minus[k] = tf - 1;
            }
            let tf_bits = bp.num_bits(tf_minus);
            match codec.gap_codec() {
                None => {
                    blocks.push(doc_bits);
                    blocks.push(tf_bits);
                    let w = bp.compress_strictly_sorted(prev, d, packed, doc_bits);
                    blocks.extend_from_slice(&packed[..w]);
                }
                Some(gc) => {
                    blocks.push(CODEC_TAG | codec.id());
                    blocks.push(tf_bits);
                    let mut p = prev;
                    for (g, &x) in gaps.iter_mut().zip(d) {
                        *g = p.map_or(x, |p| x - p - 1);
                        p = Some(x);
                    }
                    gc.encode(gaps, blocks);
                }
            }
            let w = bp.compress(tf_minus, packed, tf_bits);
            blocks.extend_from_slice(&packed[..w]);
        } else {
            let mut p = prev;
            for &d in &docs[lo..hi] {
                write_vbyte(
                    blocks,
                    match p {
                        Some(p) => d - p - 1,
                        None => d,
                    },
                );
                p = Some(d);
            }
            for &tf in &tfs[lo..hi] {
                write_vbyte(blocks, tf - 1);
            }
        }
        let last_doc = docs[hi - 1];
        prev = Some(last_doc);
        if n_blocks > 1 {
            let s = b * SKIP;
            skip[s..s + 4].copy_from_slice(&last_doc.to_le_bytes());
            skip[s + 4..s + 8].copy_from_slice(&(block_off as u32).to_le_bytes());
            skip[s + 8..s + 12].copy_from_slice(&pos_off.to_le_bytes());
            for (j, imp) in impacts(&tfs[lo..hi], &dls[lo..hi]).into_iter().enumerate() {
                skip[s + 12 + 4 * j..s + 16 + 4 * j].copy_from_slice(&pack_impact(imp).to_le_bytes());
            }
        }
    }
    write_vbyte(out, n as u32);
    write_vbyte(out, blocks.len() as u32);
    out.extend_from_slice(skip);
    out.extend_from_slice(blocks);
    out.extend_from_slice(positions_stream);
    if skip.capacity() > SCRATCH_KEEP || blocks.capacity() > SCRATCH_KEEP {
        *skip = Vec::new();
        *blocks = Vec::new();
    }
    meta
}

/// The Pareto frontier of (tf, dl) pairs, highest tf first, capped at [`IMPACTS`] entries (the tail merged
/// into one pair with the tail's highest tf and shortest length, which dominates all of it).
///
/// Scoring sees lengths through the one-byte norm, so the frontier is taken over norm codes (lengths that
/// differ by less than the norm's step become one): the highest tf per code, then one pass over the codes
/// in length order, where a code's pair is on the frontier iff its tf beats every shorter length's. Linear,
/// with no allocation — the flusher, compaction and the fresh segment's sealing call it for every block —
/// and for blocks of up to [`SMALL_IMPACTS`] postings a sort of their few pairs instead of a table of every
/// code (a flush's lists mostly hold a posting or two).
pub fn impacts(tfs: &[u32], dls: &[u32]) -> [(u32, u32); IMPACTS] {
    if tfs.len() <= SMALL_IMPACTS {
        // Few postings (most lists of a flush hold one or two): their (code, tf) pairs sorted, the highest
        // tf of a code first, instead of a 256-entry table to clear for each.
        let mut pairs = [(0u8, 0u32); SMALL_IMPACTS];
        let mut n = 0;
        for (&tf, &dl) in tfs.iter().zip(dls) {
            pairs[n] = (encode_norm(dl), tf);
            n += 1;
        }
        let pairs = &mut pairs[..n];
        pairs.sort_unstable_by_key(|&(c, tf)| (c, std::cmp::Reverse(tf)));
        let mut code = None;
        return frontier(pairs.iter().copied().filter(|&(c, _)| code.replace(c) != Some(c)));
    }
    let mut best = [0u32; 256];
    let mut seen = [0u64; 4];
    for (&tf, &dl) in tfs.iter().zip(dls) {
        let c = encode_norm(dl) as usize;
        best[c] = best[c].max(tf);
        seen[c >> 6] |= 1 << (c & 63);
    }
    frontier(
        seen.iter()
            .enumerate()
            .flat_map(|(w, &word)| {
                let mut bits = word;
                std::iter::from_fn(move || {
                    (bits != 0).then(|| {
                        let c = w * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        c as u8
                    })
                })
            })
            .map(|c| (c, best[c as usize])),
    )
}

/// Blocks of at most this many postings take [`impacts`]' sorting path.
const SMALL_IMPACTS: usize = 8;

/// [`impacts`] from each norm code's highest tf, codes in increasing order (= lengths ascending): a code's
/// pair is on the frontier iff its tf beats every shorter length's; only the frontier's last IMPACTS pairs
/// and its shortest length are kept.
#[inline]
fn frontier(codes: impl Iterator<Item = (u8, u32)>) -> [(u32, u32); IMPACTS] {
    let mut last = [(0u32, 0u32); IMPACTS];
    let (mut n, mut top, mut shortest) = (0, 0, 0);
    for (c, tf) in codes {
        if tf > top {
            top = tf;
            let dl = decode_norm(c);
            if n == 0 {
                shortest = dl;
            }
            last[n % IMPACTS] = (top, dl);
            n += 1;
        }
    }
    let mut out = [(0, u32::MAX); IMPACTS];
    for (k, o) in out.iter_mut().enumerate().take(n) {
        *o = last[(n - 1 - k) % IMPACTS];
    }
    if n > IMPACTS {
        // The tail's shortest length is the frontier's shortest.
        out[IMPACTS - 1].1 = shortest;
    }
    out
}

fn u32_at(buf: &[u8], at: usize, what: &'static str) -> Result<u32, CodecError> {
    buf.get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .ok_or(CodecError { what, offset: at })
}

/// A list's head: its block count, and where its header and skip table end and where its blocks end (the
/// positions start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListHead {
    pub n_blocks: u32,
    pub skip_end: usize,
    pub blocks_end: usize,
}

/// Where a blob's parts start, from its header (checked against the blob's length).
struct Layout {
    n: u32,
    skip_start: usize,
    blocks_start: usize,
    positions_start: usize,
}

impl Layout {
    fn of(blob: &[u8]) -> Result<Layout, CodecError> {
        let mut at = 0;
        let n = read_vbyte(blob, &mut at)?;
        let blocks_len = read_vbyte(blob, &mut at)? as usize;
        let n_blocks = n.div_ceil(BLOCK as u32);
        let skip_start = at;
        let blocks_start = skip_start + if n_blocks > 1 { n_blocks as usize * SKIP } else { 0 };
        let positions_start = blocks_start.saturating_add(blocks_len);
        if positions_start > blob.len() {
            return Err(CodecError { what: "postings header", offset: 0 });
        }
        Ok(Layout { n, skip_start, blocks_start, positions_start })
    }
}

/// A forward cursor over one posting blob: `next`, `advance(target)` with block skipping, lazy positions.
///
/// It reads the skip table from `meta`, blocks from `blob` and positions from `positions`: all three are the
/// blob itself, unless [`Self::with_pinned`] gave it a DRAM copy of the blob's head (selective caching of
/// hot lists), which then serves the skip table and, when it reaches that far, the blocks. A copy keeps the
/// blob's layout, so every offset is the same in either.
pub struct PostingsCursor<'a> {
    blob: &'a [u8],
    meta: &'a [u8],
    positions: &'a [u8],
    n: u32,
    n_blocks: u32,
    skip_start: usize,
    blocks_start: usize,
    positions_start: usize,
    block: u32,
    /// The current block's docs, then [`PAD`] sentinels (`NO_DOC`) so an in-block scan reads whole chunks.
    docs: [u32; BLOCK + PAD],
    tfs: [u32; BLOCK],
    len: usize,
    i: usize,
    doc: u32,
    /// Byte offset in the positions stream of the positions of posting `pos_index` of the current block.
    pos_cursor: usize,
    pos_index: usize,
    /// Where the current block's term frequencies are (`tf_bits` = [`TF_VBYTE`] for a partial block) and
    /// whether `tfs` holds them: they are decoded on first use, so counting, filtering and newest-first
    /// queries never decode frequencies.
    tf_at: usize,
    tf_bits: u8,
    tfs_ready: bool,
}

/// [`PostingsCursor::intersect`] goes dense for candidates spanning at most this many doc ids (a 32 KB
/// table, cleared per batch)...
pub const DENSE_SPAN: usize = 8192;
/// ...whose postings in this list fill at most this many blocks (and at most 8 postings per candidate).
pub const DENSE_BLOCKS: u32 = 8;

/// [`PostingsCursor::retain`] intersects by marks where a block holds at most this many postings per
/// candidate in it, and searches candidate by candidate in denser lists. Counting the enwiki AND queries
/// (`spirit-bench loop --top-k 0`, one core, two rounds of 1 s per category), geomean µs for ratios 0 (always
/// search) / 1 / 2 / 4 / 8 / ∞ (marks wherever the span allows): AndHighHigh 221 / 198 / 184 / 203 / 255 /
/// 295, AndHighMed 70 / 63 / 61 / 64 / 73 / 109, AndHighLow 24.4 / 25.3 / 24.8 / 23.8 / 24.0 / 37.7,
/// AndMedMed 24.2 / 20.9 / 20.9 / 24.9 / 21.1 / 22.0...
pub const MARKS_RATIO: usize = 2;
/// ...and the block's candidates span fewer than this many doc ids (the caller's mark table: a byte per doc
/// id; `FreshPostings::probe` marks spans of this length too, a frequency per doc id).
pub const MARKS_SPAN: u32 = 4096;

/// How [`PostingsCursor::retain`] intersects: chosen per block by the lists' densities, or one way forced
/// (tests compare every way with the others and with a set intersection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intersect {
    Auto,
    Marks,
    Search,
}

/// Sentinel slots after a block's docs: in-block scans compare [`PAD`] docs at a time (one SIMD compare).
const PAD: usize = 8;

/// `tf_bits` of a partial block, whose frequencies are VByte.
const TF_VBYTE: u8 = u8::MAX;

/// A binary search over a whole decoded block, for an `x` at most the block's last doc: entries past a short
/// block's end are `NO_DOC` (see `load_block`), so the search runs over all `BLOCK` entries with its steps
/// fixed at compile time — unrolled, no bounds checks — and finds the first index whose doc is at least `x`.
#[inline]
fn lower_bound_block(docs: &[u32; BLOCK + PAD], x: u32) -> usize {
    const { assert!(BLOCK.is_power_of_two()) };
    let mut base = 0usize;
    let mut half = BLOCK / 2;
    while half > 0 {
        // `base + half - 1 < BLOCK` throughout: the mask changes nothing but proves it to the compiler.
        base = std::hint::select_unpredictable(docs[(base + half - 1) & (BLOCK - 1)] < x, base + half, base);
        half /= 2;
    }
    base + (docs[base & (BLOCK - 1)] < x) as usize
}

/// [`lower_bound_block`] for four targets at once, step by step in lockstep (four independent chains of
/// loads in flight: AndMedMed -5% on the enwiki index, alternated loops; eight lanes were slower on
/// AndHighHigh, whose windows have fewer candidates).
#[inline]
fn lower_bound_block4(docs: &[u32; BLOCK + PAD], x: [u32; 4]) -> [usize; 4] {
    let mut base = [0usize; 4];
    let mut half = BLOCK / 2;
    while half > 0 {
        for j in 0..4 {
            let b = base[j];
            base[j] = std::hint::select_unpredictable(docs[(b + half - 1) & (BLOCK - 1)] < x[j], b + half, b);
        }
        half /= 2;
    }
    std::array::from_fn(|j| base[j] + (docs[base[j] & (BLOCK - 1)] < x[j]) as usize)
}

/// [`PostingsCursor::probe`]'s lookups in one decoded block without wide vectors (the answers of
/// [`super::simd::probe_block`]): four branch-free binary searches in lockstep (independent chains of loads,
/// so their latencies overlap), then the rest one by one. The block's last doc reaches each candidate, so every
/// search ends inside the block. Returns where the last one landed (`at` if there are none).
fn probe_block_searches(
    docs: &[u32; BLOCK + PAD],
    tfs: &[u32; BLOCK],
    cs: &[u32],
    os: &mut [u32],
    mut at: usize,
) -> usize {
    let n = cs.len().min(os.len());
    let mut q = 0;
    while q + 4 <= n {
        let ats = lower_bound_block4(docs, [cs[q], cs[q + 1], cs[q + 2], cs[q + 3]]);
        for (j, &a) in ats.iter().enumerate() {
            os[q + j] = std::hint::select_unpredictable(docs[a] == cs[q + j], tfs[a & (BLOCK - 1)], 0);
        }
        at = ats[3];
        q += 4;
    }
    for (&c, o) in cs[q..n].iter().zip(&mut os[q..n]) {
        at = lower_bound_block(docs, c);
        *o = std::hint::select_unpredictable(docs[at] == c, tfs[at & (BLOCK - 1)], 0);
    }
    at
}

impl<'a> PostingsCursor<'a> {
    /// Opens a cursor positioned on the first posting (or exhausted for an empty list).
    pub fn new(blob: &'a [u8]) -> Result<PostingsCursor<'a>, CodecError> {
        Self::with_pinned(blob, &[])
    }

    /// Where `blob`'s head ends: the parts of a list worth pinning in DRAM (positions, read only for phrases,
    /// stay out).
    pub fn head(blob: &[u8]) -> Result<ListHead, CodecError> {
        let l = Layout::of(blob)?;
        Ok(ListHead {
            n_blocks: l.n.div_ceil(BLOCK as u32),
            skip_end: l.blocks_start,
            blocks_end: l.positions_start,
        })
    }

    /// [`Self::new`] reading from `pinned` — a DRAM copy of the first `skip_end` or `blocks_end` bytes of
    /// `blob` (see [`Self::head`]; `&[]` for none) — whatever part of the list it holds: the skip table, and
    /// the blocks when it reaches the positions. Positions are always read from `blob`.
    pub fn with_pinned(blob: &'a [u8], pinned: &'a [u8]) -> Result<PostingsCursor<'a>, CodecError> {
        let Layout { n, skip_start, blocks_start, positions_start } = Layout::of(blob)?;
        let n_blocks = n.div_ceil(BLOCK as u32);
        let meta = if pinned.len() >= blocks_start { pinned } else { blob };
        let mut c = PostingsCursor {
            blob: if pinned.len() >= positions_start { pinned } else { blob },
            meta,
            positions: blob,
            n,
            n_blocks,
            skip_start,
            blocks_start,
            positions_start,
            block: 0,
            docs: [NO_DOC; BLOCK + PAD],
            tfs: [0; BLOCK],
            len: 0,
            i: 0,
            doc: NO_DOC,
            pos_cursor: 0,
            pos_index: 0,
            tf_at: 0,
            tf_bits: 0,
            tfs_ready: false,
        };
        if n > 0 {
            c.load_block(0)?;
        }
        Ok(c)
    }

    /// [`Self::with_pinned`] as the new last element of `into`. A cursor is over a kilobyte (its decoded
    /// block), and one returned through `Result`s and `Option`s and then pushed was copied five times — a
    /// tenth of the time of an AND of two rare terms over a few segments. Built in place, it is not. (The
    /// struct literal repeats `with_pinned`'s on purpose: built by a shared `#[inline(always)]` function
    /// and pushed, it was still copied once, gdb on memcpy showed.)
    pub fn push_with_pinned(
        into: &mut Vec<PostingsCursor<'a>>,
        blob: &'a [u8],
        pinned: &'a [u8],
    ) -> Result<(), CodecError> {
        let Layout { n, skip_start, blocks_start, positions_start } = Layout::of(blob)?;
        into.push(PostingsCursor {
            blob: if pinned.len() >= positions_start { pinned } else { blob },
            meta: if pinned.len() >= blocks_start { pinned } else { blob },
            positions: blob,
            n,
            n_blocks: n.div_ceil(BLOCK as u32),
            skip_start,
            blocks_start,
            positions_start,
            block: 0,
            docs: [NO_DOC; BLOCK + PAD],
            tfs: [0; BLOCK],
            len: 0,
            i: 0,
            doc: NO_DOC,
            pos_cursor: 0,
            pos_index: 0,
            tf_at: 0,
            tf_bits: 0,
            tfs_ready: false,
        });
        let c = into.last_mut().expect("just pushed");
        if n > 0 {
            if let Err(e) = c.load_block(0) {
                into.pop();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Number of postings in the list.
    pub fn len(&self) -> u32 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Last doc of block `b` (from the skip table; a one-block list has none and its block is loaded).
    fn last_doc(&self, b: u32) -> u32 {
        if self.n_blocks == 1 {
            return self.docs[self.len.max(1) - 1];
        }
        u32_at(self.meta, self.skip_start + b as usize * SKIP, "skip").unwrap_or(NO_DOC)
    }

    /// `f` of the current block's impacts — for `f` the largest of a score function over them, increasing
    /// in tf and decreasing in dl, a bound of it over the block — or `None` for a one-block list, which has
    /// no skip table. `f` sees the whole array at once, so its scores are computed independently.
    pub fn block_bound(&self, f: impl Fn(&Impacts) -> f32) -> Option<f32> {
        if self.n_blocks == 1 {
            return None;
        }
        Some(self.bound_of(self.block as usize, &f))
    }

    /// Number of blocks of the list.
    #[inline]
    pub fn block_count(&self) -> u32 {
        self.n_blocks
    }

    /// Index of the current block.
    #[inline]
    pub fn block_index(&self) -> u32 {
        self.block
    }

    /// Block-max bound of block `b` from its impacts, without decoding it: `f` of them, as in
    /// [`Self::block_bound`] (`None` for a one-block list, which has no skip table).
    #[inline]
    pub fn bound_of_block(&self, b: u32, f: impl Fn(&Impacts) -> f32) -> Option<f32> {
        if self.n_blocks == 1 || b >= self.n_blocks {
            return None;
        }
        Some(self.bound_of(b as usize, &f))
    }

    /// The first block from the current one whose last doc reaches `target` (`block_count()` if none), from
    /// the skip table alone (Lucene's `advanceShallow`): galloping forward from the current block, since
    /// intersections mostly move a block or two, then a binary search.
    pub fn shallow_block(&self, target: u32) -> u32 {
        self.shallow_block_from(self.block, target)
    }

    /// [`Self::shallow_block`] galloping from block `from` instead of the current one: callers that walk the
    /// skip table ahead of the cursor (block-max windows) keep their own position. Every block before `from`
    /// must end before the target.
    pub fn shallow_block_from(&self, from: u32, target: u32) -> u32 {
        if from >= self.n_blocks {
            return self.n_blocks;
        }
        let cur = from;
        if self.last_doc(cur) >= target {
            return cur;
        }
        let (mut lo, mut step) = (cur + 1, 1u32);
        // Gallop to a block that reaches the target (or past the end). Invariant: every block below `lo`
        // ends before the target.
        let mut hi = self.n_blocks;
        loop {
            let probe = lo.saturating_add(step - 1);
            if probe >= self.n_blocks {
                break;
            }
            if self.last_doc(probe) >= target {
                hi = probe;
                break;
            }
            lo = probe + 1;
            step = step.saturating_mul(2);
        }
        // Then the first block in lo..=hi that reaches it.
        self.first_reaching(lo, hi, target)
    }

    /// The first block in `lo..=hi` whose last doc reaches `target`, when block `hi` does or is the block
    /// count (binary search over the skip table).
    #[inline]
    fn first_reaching(&self, mut lo: u32, mut hi: u32, target: u32) -> u32 {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.last_doc(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first block that reaches `target` (its last doc at or after it; the block count if none), searched
    /// from block `from` back or forward: for walks that move back block by block (newest first) and then
    /// forward inside a span, galloping from where they were.
    pub fn block_reaching(&self, from: u32, target: u32) -> u32 {
        let Some(last) = self.n_blocks.checked_sub(1) else {
            return 0;
        };
        let from = from.min(last);
        if self.last_doc(from) < target {
            return self.shallow_block_from(from, target);
        }
        // Back. Invariant: block `hi` reaches the target; blocks below `lo` end before it.
        let (mut lo, mut hi, mut step) = (0u32, from, 1u32);
        while hi > 0 {
            let probe = hi.saturating_sub(step);
            if self.last_doc(probe) < target {
                lo = probe + 1;
                break;
            }
            hi = probe;
            step = step.saturating_mul(2);
        }
        self.first_reaching(lo, hi, target)
    }

    /// Last doc of block `b` (from the skip table).
    #[inline]
    pub fn last_doc_of(&self, b: u32) -> u32 {
        self.last_doc(b)
    }

    /// Moves to the first posting of block `b` (forward or back; `NO_DOC` past the last block), decoding
    /// only that block: block-max skipping jumps over blocks whose bound cannot compete without decoding
    /// them.
    pub fn seek_block(&mut self, b: u32) -> Result<u32, CodecError> {
        if b >= self.n_blocks {
            self.doc = NO_DOC;
        } else if b != self.block || self.doc == NO_DOC || self.i != 0 {
            self.load_block(b)?;
        }
        Ok(self.doc)
    }

    /// Last doc of the current block.
    pub fn block_last_doc(&self) -> u32 {
        self.last_doc(self.block)
    }

    /// Block `b`'s impacts from the skip table (`None` if unreadable); unused entries have tf 0.
    #[inline]
    fn impacts_of(&self, b: usize) -> Option<Impacts> {
        let s = self.skip_start + b * SKIP + 12;
        let raw = self.meta.get(s..s + 4 * IMPACTS)?;
        Some(std::array::from_fn(|j| {
            unpack_impact(u32::from_le_bytes(raw[4 * j..4 * j + 4].try_into().unwrap()))
        }))
    }

    /// Whether any (max tf, min length) impact of block `b` satisfies `pred` — a block-max test that stops at
    /// the first impact that can compete; `None` for a one-block list (no skip table) or an unreadable entry.
    #[inline]
    pub fn any_impact(&self, b: u32, pred: impl Fn(u32, u32) -> bool) -> Option<bool> {
        if self.n_blocks == 1 || b >= self.n_blocks {
            return None;
        }
        Some(self.impacts_of(b as usize)?.iter().any(|&(tf, dl)| tf > 0 && pred(tf, dl)))
    }

    fn bound_of(&self, b: usize, f: &impl Fn(&Impacts) -> f32) -> f32 {
        // A corrupt entry bounds nothing (the error surfaces when the block is read).
        self.impacts_of(b).map_or(f32::INFINITY, |imp| f(&imp))
    }

    /// The largest `f` of each block's impacts over all blocks (a list-wide score bound), or `None` for a
    /// one-block list.
    pub fn max_over_blocks(&self, f: impl Fn(&Impacts) -> f32) -> Option<f32> {
        if self.n_blocks == 1 {
            return None;
        }
        Some((0..self.n_blocks as usize).map(|b| self.bound_of(b, &f)).fold(0.0, f32::max))
    }

    /// Docs and term frequencies of the current block from the current posting on.
    pub fn rest_of_block(&mut self) -> Result<(&[u32], &[u32]), CodecError> {
        self.decode_tfs()?;
        Ok((&self.docs[self.i..self.len], &self.tfs[self.i..self.len]))
    }

    /// Where the current posting is in the decoded block (0 for its first).
    #[inline]
    pub fn index_in_block(&self) -> usize {
        self.i
    }

    /// Docs of the decoded block (its frequencies are not decoded).
    pub fn block_docs(&self) -> &[u32] {
        &self.docs[..self.len]
    }

    /// Docs and term frequencies of the decoded block.
    pub fn block_postings(&mut self) -> Result<(&[u32], &[u32]), CodecError> {
        self.decode_tfs()?;
        Ok((&self.docs[..self.len], &self.tfs[..self.len]))
    }

    /// Decodes the current block's term frequencies, once.
    fn decode_tfs(&mut self) -> Result<(), CodecError> {
        if self.tfs_ready {
            return Ok(());
        }
        let mut at = self.tf_at;
        if self.tf_bits == TF_VBYTE {
            for k in 0..self.len {
                self.tfs[k] = read_vbyte(self.blob, &mut at)?.wrapping_add(1);
            }
        } else {
            let need = self.tf_bits as usize * BLOCK / 8;
            let src = self.blob.get(at..at + need).ok_or(CodecError { what: "tf block", offset: at })?;
            BitPacker4x::new().decompress(src, &mut self.tfs, self.tf_bits);
            for t in self.tfs.iter_mut() {
                *t = t.wrapping_add(1);
            }
        }
        self.tfs_ready = true;
        Ok(())
    }

    /// Whether the cursor sits on the first posting of its block (the moment to consider skipping it).
    #[inline]
    pub fn at_block_start(&self) -> bool {
        self.i == 0
    }

    /// Skips the rest of the current block: moves to the first posting of the next block (or exhausts).
    pub fn next_block(&mut self) -> Result<u32, CodecError> {
        if self.doc == NO_DOC {
            return Ok(NO_DOC);
        }
        if self.block + 1 < self.n_blocks {
            self.load_block(self.block + 1)?;
        } else {
            self.doc = NO_DOC;
        }
        Ok(self.doc)
    }

    fn load_block(&mut self, b: u32) -> Result<(), CodecError> {
        let (block_off, pos_off) = if self.n_blocks == 1 {
            (0, 0)
        } else {
            let s = self.skip_start + b as usize * SKIP;
            (u32_at(self.meta, s + 4, "skip")? as usize, u32_at(self.meta, s + 8, "skip")? as usize)
        };
        let mut at = self.blocks_start.saturating_add(block_off);
        let prev = if b == 0 { None } else { Some(self.last_doc(b - 1)) };
        let lo = b as usize * BLOCK;
        let len = (self.n as usize - lo).min(BLOCK);
        if len == BLOCK {
            let (Some(&doc_bits), Some(&tf_bits)) = (self.blob.get(at), self.blob.get(at + 1)) else {
                return Err(CodecError { what: "block header", offset: at });
            };
            if tf_bits > 32 {
                return Err(CodecError { what: "block bit width", offset: at });
            }
            at += 2;
            if doc_bits <= 32 {
                let bp = BitPacker4x::new();
                let need = doc_bits as usize * BLOCK / 8;
                let src = self.blob.get(at..at + need).ok_or(CodecError { what: "doc block", offset: at })?;
                bp.decompress_strictly_sorted(prev, src, &mut self.docs[..BLOCK], doc_bits);
                at += need;
            } else {
                at += self.decode_tagged(doc_bits, at, prev)?;
            }
            self.tf_at = at;
            self.tf_bits = tf_bits;
        } else {
            let mut p = prev;
            for k in 0..len {
                let g = read_vbyte(self.blob, &mut at)?;
                let d = match p {
                    Some(p) => p.checked_add(g).and_then(|x| x.checked_add(1)),
                    None => Some(g),
                }
                .ok_or(CodecError { what: "doc gap", offset: at })?;
                self.docs[k] = d;
                p = Some(d);
            }
            self.tf_at = at;
            self.tf_bits = TF_VBYTE;
        }
        // Past the end, NO_DOC: scans stop there, and `lower_bound_block` searches a short block whole.
        self.docs[len..].fill(NO_DOC);
        self.tfs_ready = false;
        self.block = b;
        self.len = len;
        self.i = 0;
        self.doc = self.docs[0];
        self.pos_cursor = self.positions_start + pos_off;
        self.pos_index = 0;
        Ok(())
    }

    /// Decodes a full block whose gaps another [`DocCodec`] coded (first byte `tag`) from `at` into
    /// `docs`, returning the bytes read; doc ids that overflow are corruption.
    #[cold]
    fn decode_tagged(&mut self, tag: u8, at: usize, prev: Option<u32>) -> Result<usize, CodecError> {
        let codec = DocCodec::ALL
            .get((tag & !CODEC_TAG) as usize)
            .filter(|_| tag & CODEC_TAG != 0)
            .and_then(|c| c.gap_codec())
            .ok_or(CodecError { what: "block codec", offset: at - 2 })?;
        let src = self.blob.get(at..).ok_or(CodecError { what: "doc block", offset: at })?;
        let used = codec
            .decode(src, BLOCK, &mut self.docs[..BLOCK])
            .map_err(|e| CodecError { what: e.what, offset: at + e.offset })?;
        let mut p = prev;
        for d in &mut self.docs[..BLOCK] {
            let x = match p {
                Some(p) => p.checked_add(*d).and_then(|x| x.checked_add(1)),
                None => Some(*d),
            }
            .filter(|&x| x != NO_DOC)
            .ok_or(CodecError { what: "doc gap", offset: at })?;
            *d = x;
            p = Some(x);
        }
        Ok(used)
    }

    /// The current doc, or [`NO_DOC`].
    #[inline]
    pub fn doc(&self) -> u32 {
        self.doc
    }

    /// Term frequency of the current posting (the block's frequencies are decoded on the first call).
    #[inline]
    pub fn freq(&mut self) -> Result<u32, CodecError> {
        if !self.tfs_ready {
            self.decode_tfs()?;
        }
        Ok(self.tfs[self.i])
    }

    /// Moves to the next posting.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<u32, CodecError> {
        if self.doc == NO_DOC {
            return Ok(NO_DOC);
        }
        self.i += 1;
        if self.i < self.len {
            self.doc = self.docs[self.i];
        } else if self.block + 1 < self.n_blocks {
            self.load_block(self.block + 1)?;
        } else {
            self.doc = NO_DOC;
        }
        Ok(self.doc)
    }

    /// Moves to the first posting with doc >= `target`, skipping whole blocks through the skip table and
    /// galloping inside the decoded block.
    pub fn advance(&mut self, target: u32) -> Result<u32, CodecError> {
        if self.doc >= target {
            return Ok(self.doc);
        }
        if !self.move_to_block_of(target)? {
            return Ok(NO_DOC);
        }
        self.scan_to(target);
        Ok(self.doc)
    }

    /// Moves to the block that may hold `target` (the current one if its last doc reaches it, else the one
    /// the skip table names) without searching inside it; `false` (and the cursor exhausted) when no block
    /// reaches `target`. The cursor must not be exhausted.
    #[inline]
    fn move_to_block_of(&mut self, target: u32) -> Result<bool, CodecError> {
        debug_assert!(self.doc != NO_DOC);
        if self.docs[self.len - 1] < target {
            let b = self.shallow_block(target);
            if b >= self.n_blocks {
                self.doc = NO_DOC;
                return Ok(false);
            }
            self.load_block(b)?;
            if self.docs[self.len - 1] < target {
                // The skip table promised the target inside this block: corruption.
                return Err(CodecError { what: "skip table", offset: self.skip_start + b as usize * SKIP });
            }
        }
        Ok(true)
    }

    /// Moves inside the current block to its first doc at or after `target`, which must be in the block
    /// (its last doc reaches `target`): the next [`PAD`] docs first, counting those below the target with
    /// one vector compare — intersections of dense lists mostly move a few postings — and past them a
    /// branch-free binary search over the whole block (`lower_bound_block`: conditional moves, no
    /// mispredicted branches: a sparse candidate lands anywhere in it).
    #[inline]
    fn scan_to(&mut self, target: u32) {
        debug_assert!(self.len > 0 && self.docs[self.len - 1] >= target);
        let mut i = self.i;
        let chunk: &[u32; PAD] = self.docs[i..i + PAD].try_into().expect("padded block");
        let below = chunk.iter().map(|&d| (d < target) as usize).sum::<usize>();
        i += below;
        if below == PAD && i < self.len {
            // The first doc >= target in the block (the last doc reaches target; those before `i` are below
            // it, so the search lands at or after `i`).
            i = lower_bound_block(&self.docs, target);
        }
        // Docs are strictly increasing and the sentinels are NO_DOC, so the count stops inside the block.
        debug_assert!(i < self.len);
        self.i = i;
        self.doc = self.docs[i];
    }

    /// Intersects sorted candidate docs with this list from the current position on, pushing `(k, tf)` for
    /// every `cands[k]` the list contains, and leaves the cursor past the last candidate. SPIRIT §4.11
    /// adapts the intersection to the lists' densities; two ways here, chosen per batch:
    ///
    /// - *dense*: when the candidates span at most [`DENSE_SPAN`] doc ids and this list's postings there
    ///   fill at most [`DENSE_BLOCKS`] blocks (and at most 8 per candidate), those postings are written into `table` (indexed by doc id,
    ///   holding the frequency) and each candidate is one load — no comparison chains, no mispredicted
    ///   merge branches: lists of similar density, where most postings are looked at anyway;
    /// - *skipping*: otherwise a candidate past the current block jumps over the skip table to its block
    ///   and one inside it is reached with the chunked scan of [`Self::scan_to`], so a much longer list
    ///   never decodes the blocks between candidates.
    pub fn intersect(
        &mut self,
        cands: &[u32],
        table: &mut Vec<u32>,
        hits: &mut Vec<(usize, u32)>,
    ) -> Result<(), CodecError> {
        let (Some(&lo), Some(&hi)) = (cands.first(), cands.last()) else {
            return Ok(());
        };
        if self.advance(lo)? == NO_DOC {
            return Ok(());
        }
        let span = hi.saturating_sub(lo) as usize + 1;
        // Dense only when the postings written are not many more than the candidates probed.
        let blocks = self.shallow_block(hi).saturating_sub(self.block) + 1;
        if span <= DENSE_SPAN && blocks <= DENSE_BLOCKS && blocks as usize * BLOCK <= cands.len() * 8 {
            self.intersect_dense(cands, lo, hi, table, hits)
        } else {
            self.intersect_skipping(cands, hits)
        }
    }

    fn intersect_dense(
        &mut self,
        cands: &[u32],
        lo: u32,
        hi: u32,
        table: &mut Vec<u32>,
        hits: &mut Vec<(usize, u32)>,
    ) -> Result<(), CodecError> {
        table.clear();
        table.resize(hi.saturating_sub(lo) as usize + 1, 0);
        loop {
            self.decode_tfs()?;
            let from = self.i;
            let end = from + self.docs[from..self.len].partition_point(|&d| d <= hi);
            for (&d, &tf) in self.docs[from..end].iter().zip(&self.tfs[from..end]) {
                // In range unless the block is corrupt (then the posting is simply not found).
                if let Some(x) = table.get_mut(d.wrapping_sub(lo) as usize) {
                    *x = tf;
                }
            }
            if end < self.len {
                self.i = end;
                self.doc = self.docs[end];
                break;
            }
            if self.block + 1 < self.n_blocks {
                self.load_block(self.block + 1)?;
            } else {
                self.doc = NO_DOC;
                break;
            }
        }
        // A posting's frequency is at least 1, so 0 marks a doc the list does not have.
        for (k, &c) in cands.iter().enumerate() {
            let tf = table[(c - lo) as usize];
            if tf != 0 {
                hits.push((k, tf));
            }
        }
        Ok(())
    }

    fn intersect_skipping(&mut self, cands: &[u32], hits: &mut Vec<(usize, u32)>) -> Result<(), CodecError> {
        for (k, &c) in cands.iter().enumerate() {
            if self.doc < c {
                if self.docs[self.len - 1] < c {
                    if self.advance(c)? == NO_DOC {
                        return Ok(());
                    }
                } else {
                    self.scan_to(c);
                }
            } else if self.doc == NO_DOC {
                return Ok(());
            }
            if self.doc == c {
                hits.push((k, self.freq()?));
            }
        }
        Ok(())
    }

    /// Looks sorted candidate docs up in this list from the current block on: `out[k]` becomes the frequency
    /// of `cands[k]` here, or 0 where the list does not have it (a posting's frequency is at least 1). The
    /// cursor ends on the block of the last candidate it reached. Block by block, without a branch per
    /// candidate: a candidate inside the decoded block is found by a branch-free binary search over the whole
    /// block (a fixed trip count, and independent of the other candidates, so several are in flight at once);
    /// blocks between candidates are skipped through the skip table. Made for the few candidates of a
    /// block-max window against a denser list, where a forward scan mispredicts at nearly every candidate.
    /// Where the CPU has AVX-512 the search is [`super::simd::probe_block`]'s two vector compares instead
    /// (same answers). Candidates before the current block are not found (callers probe in increasing doc
    /// order).
    pub fn probe(&mut self, cands: &[u32], out: &mut [u32]) -> Result<(), CodecError> {
        let out = &mut out[..cands.len()];
        let mut k = 0;
        while let Some(n) = self.block_holding(&cands[k..])? {
            self.decode_tfs()?;
            let (cs, os) = (&cands[k..k + n], &mut out[k..k + n]);
            let at = super::simd::probe_block(&self.docs, &self.tfs, cs, os)
                .unwrap_or_else(|| probe_block_searches(&self.docs, &self.tfs, cs, os, self.i));
            debug_assert!(at < self.len);
            self.i = at;
            self.doc = self.docs[at];
            k += n;
        }
        out[k..].fill(0);
        Ok(())
    }

    /// [`Self::probe`] for callers that read more than a frequency: `found(k, self)` for each `cands[k]` the
    /// list has, in order, with the cursor on it (its frequency and positions readable). The candidates are
    /// found as `probe` finds them, block by block without a branch per candidate; a candidate the list lacks
    /// costs nothing more.
    pub fn probe_each(
        &mut self,
        cands: &[u32],
        mut found: impl FnMut(usize, &mut Self) -> Result<(), CodecError>,
    ) -> Result<(), CodecError> {
        let mut k = 0;
        while let Some(n) = self.block_holding(&cands[k..])? {
            let mut q = 0;
            while q < n {
                // Four searches in lockstep, as in `probe` (fewer at the end).
                let m = (n - q).min(4);
                let x: [u32; 4] = std::array::from_fn(|j| cands[k + q + j.min(m - 1)]);
                let ats = lower_bound_block4(&self.docs, x);
                for (j, &a) in ats.iter().enumerate().take(m) {
                    debug_assert!(a < self.len);
                    if self.docs[a] == x[j] {
                        self.i = a;
                        self.doc = x[j];
                        found(k + q + j, self)?;
                    }
                }
                q += m;
            }
            k += n;
        }
        Ok(())
    }

    /// Keeps those of the sorted candidates `cands[..m]` (at most [`BLOCK`] of them) that this list holds,
    /// compacted in place in order, and returns how many — from the doc ids alone (no frequency is decoded:
    /// counting). SPIRIT §4.11 adapts the intersection to the lists' lengths; here the choice is made per
    /// block of this list that holds candidates, by the ratio of its postings there to those candidates
    /// (`how` forces one way, for tests and measurements):
    ///
    /// - *marks* when the block has at most [`MARKS_RATIO`] postings per candidate (lists of similar
    ///   length: a merge would look at nearly every posting anyway) and the candidates span fewer than
    ///   [`MARKS_SPAN`] doc ids: the block's postings there are marked in `marks` (a byte per doc id, all
    ///   zero on entry and again on return) and each candidate is one load — a merge without its
    ///   comparison chain or mispredicted branches;
    /// - *search* otherwise: each candidate's place by [`super::simd::probe_block`]'s two vector compares
    ///   (AVX-512) or branch-free binary searches, as [`Self::probe`] finds them — a much longer list's block
    ///   is never scanned.
    ///
    /// Either way the blocks between candidates are skipped through the skip table, undecoded (galloping
    /// over the list), and the cursor ends on the block of the last candidate it reached.
    pub fn retain(
        &mut self,
        cands: &mut [u32],
        m: usize,
        how: Intersect,
        marks: &mut [u8; MARKS_SPAN as usize],
    ) -> Result<usize, CodecError> {
        assert!(m <= BLOCK && m <= cands.len(), "at most a block of candidates");
        debug_assert!(marks.iter().all(|&x| x == 0), "the caller's table is all zero");
        static FOUND: [u32; BLOCK] = [1; BLOCK];
        let (mut k, mut w) = (0, 0);
        while let Some(n) = self.block_holding(&cands[k..m])? {
            let (lo, hi) = (cands[k], cands[k + n - 1]);
            let span_ok = hi.wrapping_sub(lo) < MARKS_SPAN;
            let by_marks = match how {
                Intersect::Auto => span_ok && self.len <= n * MARKS_RATIO,
                Intersect::Marks => span_ok,
                Intersect::Search => false,
            };
            if by_marks {
                // The block's postings in [lo, hi] (its last doc reaches `hi`, so `end < len`); the whole
                // block, as the searches look at it whole.
                let from = self.docs[..self.len].partition_point(|&d| d < lo);
                let end = from + self.docs[from..self.len].partition_point(|&d| d <= hi);
                // A byte per doc id rather than a bit: every store is independent (bits of neighbouring docs
                // share a word: a chain of read-modify-writes through memory). Marked, tested, then unmarked,
                // so the table is all zero again and never needs clearing.
                let span = &mut marks[..=(hi.wrapping_sub(lo) as usize)];
                let postings = &self.docs[from..end];
                for &d in postings {
                    // In [lo, hi] unless the block is corrupt (then the posting is simply not found).
                    if let Some(x) = span.get_mut(d.wrapping_sub(lo) as usize) {
                        *x = 1;
                    }
                }
                for j in k..k + n {
                    // Candidates are increasing, so in [lo, hi]; out of range (a corrupt lead) is not found.
                    let c = cands[j];
                    cands[w] = c;
                    w += span.get(c.wrapping_sub(lo) as usize).map_or(0, |&x| x as usize);
                }
                for &d in postings {
                    if let Some(x) = span.get_mut(d.wrapping_sub(lo) as usize) {
                        *x = 0;
                    }
                }
                // On the first doc at or after `hi` (the last candidate), as a search would leave it.
                self.i = end - (end > from && self.docs[end - 1] == hi) as usize;
                debug_assert!(self.i < self.len);
                self.doc = self.docs[self.i];
            } else {
                let mut found = [0u32; BLOCK];
                let (cs, os) = (&cands[k..k + n], &mut found[..n]);
                let at = super::simd::probe_block(&self.docs, &FOUND, cs, os)
                    .unwrap_or_else(|| probe_block_searches(&self.docs, &FOUND, cs, os, self.i));
                debug_assert!(at < self.len);
                self.i = at;
                self.doc = self.docs[at];
                for (j, &f) in (k..k + n).zip(&found[..n]) {
                    cands[w] = cands[j];
                    w += f as usize;
                }
            }
            k += n;
        }
        Ok(w)
    }

    /// For [`Self::probe`]: moves to the block that may hold `cands[0]` (from the current one on, through the
    /// skip table) and returns how many of `cands` it may hold; `None` once the list has nothing left for
    /// them (the cursor is then exhausted) or there are no candidates.
    #[inline]
    fn block_holding(&mut self, cands: &[u32]) -> Result<Option<usize>, CodecError> {
        let Some(&c) = cands.first() else {
            return Ok(None);
        };
        // To the block that holds `c`, if any: the caller's search finds it (no scan here).
        if self.doc == NO_DOC || !self.move_to_block_of(c)? {
            return Ok(None);
        }
        let last = self.docs[self.len - 1];
        Ok(Some(cands.partition_point(|&x| x <= last)))
    }

    /// Decodes the positions of the current posting into `out` (cleared first).
    pub fn positions(&mut self, out: &mut Vec<u32>) -> Result<(), CodecError> {
        out.clear();
        let mut at = self.seek_positions()?;
        let tf = self.tfs[self.i] as usize;
        out.reserve(tf);
        // The first value is absolute, the others gaps: a running sum from 0 reads both.
        let mut p = 0u32;
        let mut left = tf;
        // Eight values at a time while their eight bytes are all one-byte values (gaps below 128: most of a
        // common term's), fewer for the last ones: one load and one test instead of a branch per byte.
        while left > 0 {
            let take = left.min(8);
            let Some(w) = self.positions.get(at..at + 8) else {
                break;
            };
            let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
            let mask = if take == 8 { u64::MAX } else { (1u64 << (8 * take)) - 1 };
            if w & mask & 0x8080_8080_8080_8080 != 0 {
                break;
            }
            for k in 0..take {
                p = p.wrapping_add((w >> (8 * k)) as u8 as u32);
                out.push(p);
            }
            at += take;
            left -= take;
        }
        for _ in 0..left {
            p = p.wrapping_add(read_vbyte(self.positions, &mut at)?);
            out.push(p);
        }
        Ok(())
    }

    /// The list's whole positions stream: every posting's positions, in posting order (see
    /// [`write_positions`]). Compaction, which keeps every posting, copies it whole.
    pub fn positions_stream(&self) -> &'a [u8] {
        &self.positions[self.positions_start..]
    }

    /// Where the current posting's positions start in [`positions_stream`](Self::positions_stream).
    pub fn positions_offset(&mut self) -> Result<usize, CodecError> {
        Ok(self.seek_positions()? - self.positions_start)
    }

    /// Byte offset in the positions stream where the current posting's positions start (skipping those of
    /// the postings since the last call without decoding them).
    fn seek_positions(&mut self) -> Result<usize, CodecError> {
        self.decode_tfs()?;
        if self.pos_index < self.i {
            // Skip the positions of the postings in between without decoding them: a VByte value ends at the
            // first byte below 0x80, so skipping n values means finding n such bytes.
            let mut n: u64 = self.tfs[self.pos_index..self.i].iter().map(|&t| t as u64).sum();
            let mut at = self.pos_cursor;
            let bytes = self.positions;
            // 64 bytes at a time while at least 64 values remain (a chunk holds at most 64 value ends, so it
            // is skipped whole: a branch-free count in byte lanes, vectorized), then 16, then byte by byte.
            while n >= 64 {
                let Some(chunk) = bytes.get(at..at + 64) else {
                    break;
                };
                n -= chunk.iter().fold(0u8, |a, &b| a + (1 - (b >> 7))) as u64;
                at += 64;
            }
            while n >= 16 {
                let Some(chunk) = bytes.get(at..at + 16) else {
                    break;
                };
                n -= chunk.iter().map(|&b| (b < 0x80) as u64).sum::<u64>();
                at += 16;
            }
            while n > 0 {
                let Some(&b) = bytes.get(at) else {
                    return Err(CodecError { what: "positions (truncated)", offset: at });
                };
                n -= (b < 0x80) as u64;
                at += 1;
            }
            self.pos_cursor = at;
            self.pos_index = self.i;
        }
        Ok(self.pos_cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition [`impacts`] implements: sort by tf descending, then length ascending; a pair is on
    /// the frontier iff its (quantized) length is below every earlier one's.
    fn impacts_by_sort(tfs: &[u32], dls: &[u32]) -> [(u32, u32); IMPACTS] {
        let mut pairs: Vec<(u32, u32)> =
            tfs.iter().copied().zip(dls.iter().map(|&dl| crate::codec::quantized_length(dl))).collect();
        pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut frontier: Vec<(u32, u32)> = vec![];
        for p in pairs {
            if frontier.last().is_none_or(|l| p.1 < l.1) {
                frontier.push(p);
            }
        }
        if frontier.len() > IMPACTS {
            let min_dl = frontier[IMPACTS - 1..].iter().map(|p| p.1).min().unwrap_or(0);
            frontier.truncate(IMPACTS);
            frontier[IMPACTS - 1].1 = min_dl;
        }
        let mut out = [(0, u32::MAX); IMPACTS];
        out[..frontier.len()].copy_from_slice(&frontier);
        out
    }

    #[test]
    fn impacts_equal_the_sorted_frontier() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |m: u64| crate::rng::xorshift(&mut x) % m;
        assert_eq!(impacts(&[], &[]), [(0, u32::MAX); IMPACTS]);
        for case in 0..20_000 {
            // Both paths: up to SMALL_IMPACTS postings, and more.
            let n = 1 + rnd(if case % 3 == 0 { 12 } else { 300 }) as usize;
            // Small and huge tfs and lengths, with many ties (lengths below the norm's exact range too).
            let tf_max = [3, 40, 1 << 20][case % 3];
            let dl_max = [30, 2000, u32::MAX as u64][(case / 3) % 3];
            let tfs: Vec<u32> = (0..n).map(|_| 1 + rnd(tf_max) as u32).collect();
            let dls: Vec<u32> = (0..n).map(|_| rnd(dl_max) as u32).collect();
            assert_eq!(impacts(&tfs, &dls), impacts_by_sort(&tfs, &dls), "tfs {tfs:?} dls {dls:?}");
        }
    }

    /// A packed impact reads back as itself (impacts hold quantized lengths), unused as (0, u32::MAX), and a
    /// tf beyond the word's 24 bits as `u32::MAX` — never below the real one, so bounds stay bounds.
    #[test]
    fn packed_impacts_read_back_as_bounds() {
        assert_eq!(pack_impact((0, u32::MAX)), 0);
        assert_eq!(unpack_impact(0), (0, u32::MAX));
        for code in 0..=255u8 {
            let dl = decode_norm(code);
            for tf in [1, 2, 77, IMPACT_TF_MAX - 1] {
                assert_eq!(unpack_impact(pack_impact((tf, dl))), (tf, dl));
            }
            for tf in [IMPACT_TF_MAX, IMPACT_TF_MAX + 1, u32::MAX] {
                assert_eq!(unpack_impact(pack_impact((tf, dl))), (u32::MAX, dl));
            }
        }
        // Every block's frontier (here of more than IMPACTS pairs, so the tail is merged) survives the skip
        // table whole.
        let docs: Vec<u32> = (0..3 * BLOCK as u32).map(|d| d * 3).collect();
        let tfs: Vec<u32> = (0..docs.len() as u32).map(|k| k % 23 + 1).collect();
        let dls: Vec<u32> = tfs.iter().enumerate().map(|(k, &tf)| tf * 40 + (k as u32 % 7) * 500).collect();
        let pos: Vec<u32> = tfs.iter().flat_map(|&tf| 0..tf).collect();
        let mut blob = vec![];
        encode_postings(&docs, &tfs, &pos, &dls, &mut blob);
        let c = PostingsCursor::new(&blob).unwrap();
        assert_eq!(c.block_count(), 3);
        for b in 0..3 {
            let r = b * BLOCK..(b + 1) * BLOCK;
            let want = impacts(&tfs[r.clone()], &dls[r]);
            assert!(want.iter().all(|&(tf, _)| tf > 0), "a full frontier: {want:?}");
            assert_eq!(c.impacts_of(b).unwrap(), want);
        }
    }

    fn list(docs: &[u32]) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let tfs: Vec<u32> = docs.iter().map(|d| d % 5 + 1).collect();
        let mut pos = vec![];
        for (k, &tf) in tfs.iter().enumerate() {
            for j in 0..tf {
                pos.push(k as u32 * 3 + j * 7);
            }
        }
        (docs.to_vec(), tfs, pos)
    }

    /// Every codec: the cursor reads back what each encoded, through every access path.
    fn check(docs: &[u32]) {
        for codec in DocCodec::ALL {
            check_with(codec, docs);
        }
    }

    fn check_with(codec: DocCodec, docs: &[u32]) {
        let (docs, tfs, pos) = list(docs);
        let mut blob = vec![];
        let dls: Vec<u32> = docs.iter().map(|d| d % 97 + 1).collect();
        let meta = encode_postings_with(codec, &docs, &tfs, &pos, &dls, &mut blob);
        // Read as it is, and through a DRAM copy of its head — the skip table alone, or with the blocks — with
        // the copied bytes wiped in the blob itself, so that only a cursor reading the copy reads right.
        let head = PostingsCursor::head(&blob).unwrap();
        assert!(head.skip_end <= head.blocks_end && head.blocks_end <= blob.len());
        assert_eq!(head.n_blocks as usize, docs.len().div_ceil(BLOCK));
        for pin_end in [0, head.skip_end, head.blocks_end] {
            let pinned = blob[..pin_end].to_vec();
            let mut wiped = blob.clone();
            // The header stays: the cursor reads the layout from the blob.
            let header = Layout::of(&blob).unwrap().skip_start;
            wiped[header.min(pin_end)..pin_end].fill(0xA5);
            check_reads(&docs, &tfs, &pos, &dls, || PostingsCursor::with_pinned(&wiped, &pinned).unwrap());
        }
        if docs.len() >= BLOCK {
            // The first (full) block is tagged with its codec; bit-packing's first byte is its width.
            let first = blob[PostingsCursor::new(&blob).unwrap().blocks_start];
            match codec {
                DocCodec::Bitpacked => assert!(first <= 32),
                _ => assert_eq!(first, CODEC_TAG | codec.id()),
            }
        }
        assert_eq!(meta.df as usize, docs.len());
        // Compaction's path: the positions stream copied whole, with each block's start from the cursor,
        // re-encodes to the same blob; asking where a posting's positions start leaves their decoding right.
        let (mut own, mut offsets, mut pi) = (vec![], vec![], 0);
        for &tf in &tfs {
            offsets.push(own.len());
            write_positions(&mut own, pos[pi..pi + tf as usize].iter().copied());
            pi += tf as usize;
        }
        let mut c = PostingsCursor::new(&blob).unwrap();
        let (mut starts, mut out, mut pi) = (vec![], vec![], 0);
        for (k, &tf) in tfs.iter().enumerate() {
            if k % 7 == 3 {
                c.positions(&mut out).unwrap();
                assert_eq!(&out[..], &pos[pi..pi + tf as usize]);
            }
            if k % BLOCK == 0 || k % 5 == 2 {
                let at = c.positions_offset().unwrap();
                assert_eq!(at, offsets[k], "posting {k}");
                if k % BLOCK == 0 {
                    starts.push(at as u32);
                }
                c.positions(&mut out).unwrap();
                assert_eq!(&out[..], &pos[pi..pi + tf as usize], "positions after their offset, posting {k}");
            }
            pi += tf as usize;
            c.next().unwrap();
        }
        let stream = c.positions_stream().to_vec();
        assert_eq!(stream, own);
        let mut again = vec![];
        let meta_again = encode_postings_encoded(codec, &docs, &tfs, (&stream, &starts), &dls, &mut again);
        assert_eq!(again, blob);
        assert_eq!(meta_again, meta);
    }

    fn check_reads<'a>(
        docs: &[u32],
        tfs: &[u32],
        pos: &[u32],
        dls: &[u32],
        open: impl Fn() -> PostingsCursor<'a>,
    ) {
        let mut c = open();
        let mut out = vec![];
        let mut pi = 0;
        for (k, &d) in docs.iter().enumerate() {
            assert_eq!(c.doc(), d);
            assert_eq!(c.freq().unwrap(), tfs[k]);
            if k % 3 == 0 {
                c.positions(&mut out).unwrap();
                assert_eq!(&out[..], &pos[pi..pi + tfs[k] as usize]);
            }
            pi += tfs[k] as usize;
            c.next().unwrap();
        }
        assert_eq!(c.doc(), NO_DOC);
        // Sparse position reads skip many values at once (the chunked skip).
        let mut c = open();
        let mut pi = 0;
        for (k, &d) in docs.iter().enumerate() {
            assert_eq!(c.doc(), d);
            if k % 29 == 28 {
                c.positions(&mut out).unwrap();
                assert_eq!(&out[..], &pos[pi..pi + tfs[k] as usize], "posting {k}");
            }
            pi += tfs[k] as usize;
            c.next().unwrap();
        }
        // Probing candidates — every third doc of the list, each with the doc after it (mostly absent),
        // none before the first: `probe_each` stops on exactly the docs the list has, with their frequency and
        // positions, in order; `probe` gives the same frequencies and 0 elsewhere.
        let starts: Vec<usize> = std::iter::once(0)
            .chain(tfs.iter().scan(0, |a, &t| {
                *a += t as usize;
                Some(*a)
            }))
            .collect();
        let cands: Vec<u32> = docs.iter().step_by(3).flat_map(|&d| [d, d + 1]).collect();
        let mut cands = cands;
        cands.dedup();
        let mut seen = vec![];
        let mut c = open();
        c.probe_each(&cands, |k, c| {
            let at = docs.binary_search(&cands[k]).expect("found docs are the list's");
            assert_eq!(c.doc(), cands[k]);
            assert_eq!(c.freq().unwrap(), tfs[at]);
            c.positions(&mut out).unwrap();
            assert_eq!(&out[..], &pos[starts[at]..starts[at + 1]], "positions of posting {at}");
            seen.push(cands[k]);
            Ok(())
        })
        .unwrap();
        let want: Vec<u32> = cands.iter().copied().filter(|d| docs.binary_search(d).is_ok()).collect();
        assert_eq!(seen, want);
        let mut freqs = vec![7; cands.len()];
        open().probe(&cands, &mut freqs).unwrap();
        for (&d, &f) in cands.iter().zip(&freqs) {
            assert_eq!(f, docs.binary_search(&d).map_or(0, |at| tfs[at]), "probe of {d}");
        }
        // block bounds hold for every posting of their block, for BM25-like functions
        for (c0, c1) in [(0.3f32, 0.01f32), (1.0, 0.5), (0.0, 2.0)] {
            let f = |tf: u32, dl: u32| tf as f32 / (tf as f32 + c0 + c1 * dl as f32);
            let fb = |imp: &Impacts| {
                imp.iter().filter(|&&(tf, _)| tf > 0).fold(0.0f32, |m, &(tf, dl)| m.max(f(tf, dl)))
            };
            let mut c = open();
            let mut k = 0;
            while c.doc() != NO_DOC {
                if let Some(b) = c.block_bound(fb) {
                    // Scoring sees the quantized length (never longer than the true one).
                    let dl = crate::codec::quantized_length(dls[k]);
                    assert!(f(c.freq().unwrap(), dl) <= b, "bound {b} below posting {k}");
                    assert_eq!(c.bound_of_block(c.block_index(), fb), Some(b));
                }
                k += 1;
                c.next().unwrap();
            }
        }
        // skipping whole blocks lands on block starts
        let mut c = open();
        let mut starts = vec![];
        while c.doc() != NO_DOC {
            assert!(c.at_block_start());
            starts.push(c.doc());
            c.next_block().unwrap();
        }
        assert_eq!(starts, docs.iter().step_by(BLOCK).copied().collect::<Vec<_>>());
        // seeking any block, backwards too, lands on its first posting; past the end exhausts
        let mut c = open();
        for b in (0..c.block_count()).rev().chain(0..c.block_count()) {
            assert_eq!(c.seek_block(b).unwrap(), starts[b as usize]);
            assert_eq!(c.block_index(), b);
            c.next().unwrap();
        }
        assert_eq!(c.seek_block(c.block_count()).unwrap(), NO_DOC);
        // the block reaching a target, searched back or forward from any block, is the first whose last doc
        // reaches it (the block count past the list's end)
        let c = open();
        let lasts: Vec<u32> = (0..c.block_count()).map(|b| c.last_doc_of(b)).collect();
        let targets = docs.iter().step_by(7).flat_map(|&d| [d, d.saturating_add(1)]).chain([0, u32::MAX]);
        for t in targets {
            let want = lasts.iter().position(|&l| l >= t).map_or(c.block_count(), |b| b as u32);
            for from in (0..c.block_count()).step_by(3).chain([c.block_count()]) {
                assert_eq!(c.block_reaching(from, t), want, "target {t} from block {from}");
            }
        }
        // advance to every doc and to every gap
        for (k, &d) in docs.iter().enumerate() {
            let mut c = open();
            assert_eq!(c.advance(d).unwrap(), d);
            if d > 0 && (k == 0 || docs[k - 1] < d - 1) {
                let mut c = open();
                assert_eq!(c.advance(d - 1).unwrap(), d);
            }
        }
        let mut c = open();
        assert_eq!(
            c.advance(docs[docs.len() - 1].saturating_add(1)).unwrap(),
            if *docs.last().unwrap() == u32::MAX { u32::MAX } else { NO_DOC }
        );
    }

    #[test]
    fn adversarial_lengths() {
        for n in [1usize, 2, 127, 128, 129, 255, 256, 257, 1000] {
            let docs: Vec<u32> = (0..n as u32).map(|i| i * 3 + 1).collect();
            check(&docs);
            let dense: Vec<u32> = (0..n as u32).collect();
            check(&dense);
        }
        check(&[0]);
        check(&[u32::MAX - 1]);
        check(&[0, u32::MAX - 1]);
        let gaps: Vec<u32> = (0..300u32).map(|i| i * 14_000_000).collect();
        check(&gaps);
    }

    proptest! {
        #[test]
        fn random_lists(mut docs in proptest::collection::btree_set(0u32..5_000_000, 1..700)) {
            let docs: Vec<u32> = std::mem::take(&mut docs).into_iter().collect();
            check(&docs);
        }

        #[test]
        fn corrupt_blobs_never_panic(docs in proptest::collection::btree_set(0u32..100_000, 1..400), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), codec in 0..DocCodec::ALL.len()) {
            let docs: Vec<u32> = docs.into_iter().collect();
            let (docs, tfs, pos) = list(&docs);
            let mut blob = vec![];
            let dls = vec![7; docs.len()];
            encode_postings_with(DocCodec::ALL[codec], &docs, &tfs, &pos, &dls, &mut blob);
            for (i, x) in flips { let n = blob.len(); blob[i % n] ^= x | 1; }
            if let Ok(mut c) = PostingsCursor::new(&blob) {
                let mut out = vec![];
                for _ in 0..2000 {
                    if c.doc() == NO_DOC { break; }
                    let _ = c.positions(&mut out);
                    let _ = c.positions_offset();
                    if c.next().is_err() { break; }
                }
            }
            // Intersections over corrupt blocks return errors or wrong hits, never panic.
            if let Ok(mut c) = PostingsCursor::new(&blob) {
                let cands: Vec<u32> = (0..100_000).step_by(97).collect();
                let (mut table, mut hits) = (vec![], vec![]);
                for batch in cands.chunks(128) {
                    if c.intersect(batch, &mut table, &mut hits).is_err() { break; }
                }
            }
            if let Ok(mut c) = PostingsCursor::new(&blob) {
                let cands: Vec<u32> = (0..100_000).step_by(89).collect();
                let mut out = [0u32; 128];
                for batch in cands.chunks(128) {
                    if c.probe(batch, &mut out).is_err() { break; }
                }
            }
            let mut marks = [0u8; MARKS_SPAN as usize];
            for how in [Intersect::Marks, Intersect::Search] {
                if let Ok(mut c) = PostingsCursor::new(&blob) {
                    let cands: Vec<u32> = (0..100_000).step_by(83).collect();
                    for batch in cands.chunks(BLOCK) {
                        let mut buf = batch.to_vec();
                        if c.retain(&mut buf, batch.len(), how, &mut marks).is_err() { break; }
                    }
                }
                prop_assert!(marks.iter().all(|&x| x == 0), "the marks are cleared even on corrupt blocks");
            }
        }

        /// Batches of sorted candidates against a list, dense and skipping (sparse and dense lists, narrow and
        /// wide batches): exactly the candidates in the list, with their frequencies.
        #[test]
        fn intersect_finds_exactly_the_common_docs(
            docs in proptest::collection::btree_set(0u32..60_000, 1..3000),
            cands in proptest::collection::btree_set(0u32..60_000, 1..3000),
            batch in 1usize..300,
        ) {
            let (blob, cands, want) = lookup_case(docs, cands);
            let mut c = PostingsCursor::new(&blob).unwrap();
            let (mut table, mut hits, mut got) = (vec![], vec![], vec![]);
            for chunk in cands.chunks(batch) {
                hits.clear();
                c.intersect(chunk, &mut table, &mut hits).unwrap();
                got.extend(hits.iter().map(|&(k, tf)| (chunk[k], tf)));
            }
            prop_assert_eq!(got, want);
        }

        /// Batches of sorted candidates probed in increasing order (full and partial blocks, candidates
        /// before, inside, between and past the blocks): each gets its frequency if the list has it, else 0.
        #[test]
        fn probe_finds_exactly_the_common_docs(
            docs in proptest::collection::btree_set(0u32..60_000, 1..3000),
            cands in proptest::collection::btree_set(0u32..60_000, 1..3000),
            batch in 1usize..300,
        ) {
            let (blob, cands, want) = lookup_case(docs, cands);
            let mut c = PostingsCursor::new(&blob).unwrap();
            let mut got = vec![];
            let mut out = vec![u32::MAX; batch];
            for chunk in cands.chunks(batch) {
                c.probe(chunk, &mut out).unwrap();
                got.extend(chunk.iter().zip(&out).filter(|x| *x.1 != 0).map(|(&d, &tf)| (d, tf)));
            }
            prop_assert_eq!(got, want);
        }

        /// Counting intersections (doc ids only), each way — chosen by density, marks wherever the span
        /// allows, searches only — over dense and sparse lists and candidate batches of up to a block: each
        /// keeps exactly the candidates the list has, in order, and leaves the cursor where the next batch
        /// is found from.
        #[test]
        fn retain_keeps_exactly_the_common_docs(
            docs in proptest::collection::btree_set(0u32..60_000, 1..3000),
            cands in proptest::collection::btree_set(0u32..60_000, 1..3000),
            batch in 1usize..=BLOCK,
        ) {
            let (blob, cands, want) = lookup_case(docs, cands);
            let want: Vec<u32> = want.into_iter().map(|(d, _)| d).collect();
            for how in [Intersect::Auto, Intersect::Marks, Intersect::Search] {
                prop_assert_eq!(&retain_all(&blob, &cands, batch, how), &want, "{:?}", how);
            }
        }
    }

    /// Lists of every density against candidates of every density, batch by batch: the marks and the
    /// searches agree, and `Auto` takes both ways (the span and ratio limits are reached on either side).
    #[test]
    fn retain_ways_agree_at_every_density() {
        for (step, cstep) in
            [(1u32, 1u32), (1, 3), (3, 1), (2, 7), (7, 2), (40, 1), (1, 40), (300, 5), (5, 300)]
        {
            let docs: std::collections::BTreeSet<u32> = (0..20_000).step_by(step as usize).collect();
            let cands: std::collections::BTreeSet<u32> = (3..20_000).step_by(cstep as usize).collect();
            let (blob, cands, want) = lookup_case(docs, cands);
            let want: Vec<u32> = want.into_iter().map(|(d, _)| d).collect();
            for how in [Intersect::Auto, Intersect::Marks, Intersect::Search] {
                let got = retain_all(&blob, &cands, BLOCK, how);
                assert_eq!(got, want, "list step {step}, candidate step {cstep}, {how:?}");
            }
        }
    }

    /// The candidates `retain` keeps, batch by batch, one way; the marks must be all zero after each batch.
    fn retain_all(blob: &[u8], cands: &[u32], batch: usize, how: Intersect) -> Vec<u32> {
        let mut marks = [0u8; MARKS_SPAN as usize];
        let mut c = PostingsCursor::new(blob).unwrap();
        let mut got = vec![];
        for chunk in cands.chunks(batch) {
            let mut buf = chunk.to_vec();
            let m = c.retain(&mut buf, chunk.len(), how, &mut marks).unwrap();
            got.extend_from_slice(&buf[..m]);
            assert!(marks.iter().all(|&x| x == 0), "marks left set ({how:?})");
        }
        got
    }

    /// A list of `docs` encoded, the candidates in order, and the (doc, frequency) of each candidate the
    /// list has: what a lookup of the candidates must find.
    fn lookup_case(
        docs: std::collections::BTreeSet<u32>,
        cands: std::collections::BTreeSet<u32>,
    ) -> (Vec<u8>, Vec<u32>, Vec<(u32, u32)>) {
        let docs: Vec<u32> = docs.into_iter().collect();
        let (docs, tfs, pos) = list(&docs);
        let mut blob = vec![];
        encode_postings(&docs, &tfs, &pos, &vec![5; docs.len()], &mut blob);
        let cands: Vec<u32> = cands.into_iter().collect();
        let want = cands.iter().filter_map(|d| docs.binary_search(d).ok().map(|k| (*d, tfs[k]))).collect();
        (blob, cands, want)
    }

    #[test]
    fn lower_bound_is_the_first_index_at_or_after() {
        let docs: Vec<u32> = (0..128).map(|i| i * 3 + 1).collect();
        for n in 1..=docs.len() {
            let d = &docs[..n];
            for x in 0..=d[n - 1] {
                // Over the block padded as `load_block` pads it.
                let mut block = [NO_DOC; BLOCK + PAD];
                block[..n].copy_from_slice(d);
                assert_eq!(lower_bound_block(&block, x), d.partition_point(|&v| v < x), "n {n} x {x}");
            }
        }
    }
}
