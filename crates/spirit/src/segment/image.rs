//! The segment image: the read-optimized, position-independent bytes of a flushed segment.
//!
//! ```text
//! header (64 B): magic "SPSEG001" | version | doc_count | seg_id | base_doc | n_terms | n_fields | body crc32
//!                | biwords (the biword list held, `segment::biword`; 0 = none) | total length
//!                | purged (documents compaction dropped, see below)
//! sections (7 × off,len; offsets from the image start):
//!   TERMS    n_terms × 32 B, sorted by key (a text field's biwords after its terms): key_off u32 | key_len u32 | df u32 | max_tf u32 | post_off u64 | post_len u64
//!   KEYS     concatenated term keys (field id big-endian + term bytes)
//!   POSTINGS one codec blob per term (see `codec`)
//!   FIELDS   n_fields × 32 B: field u32 | kind u32 | docs u64 | total_len u64 | column offset u64
//!   COLUMNS  norms (one byte per doc, `codec::encode_norm` of the field length) or numbers (f64 per doc,
//!            NaN = none)
//!   DOCSTORE n_blocks u32 | pad | n_blocks × (first_doc u32 | comp_len u32 | off u64) | LZ4 blocks of
//!            records (VByte id length, id, VByte source length, source)
//!   IDS      doc_count × 16 B sorted: xxh3(_id) u64 | doc u32 | id offset u32, then the `_id`s' bytes in the
//!            entries' order (an entry's `_id` ends where the next one's begins): an update confirms the
//!            old version's `_id` without decompressing its doc-store block
//!   HASH     capacity u32 (power of two, ≥ 2 × n_terms) | capacity × u32 slots (term index + 1, 0 = empty),
//!            open addressing on xxh3(key): exact lookups in O(1); the sorted TERMS serve prefixes
//! ```
//! A compacted image may have *purged* documents (`segment::compact`): deleted ones whose postings and stored
//! records it dropped. They keep their doc ids, delete bits, norms and columns, and the statistics count
//! them as before (a term's df and a field's docs and length), so that scores do not change when deleted
//! documents are dropped: a term's df is then at least its list's postings (a term all of whose postings
//! were purged keeps one, of a deleted document), and IDS holds the kept documents only. Such an image is
//! version 3 (others stay version 2), so that a binary from before purging refuses it.
//!
//! Version 4 adds the `_id` bytes to IDS (versions 2 and 3 have a zero pad there, and their `_id`s are read
//! from the doc store), with or without purged documents; every image written now is version 4.
//!
//! No pointer inside is absolute, so engraving is one bulk copy and the persistent copy is read with the same
//! code as the DRAM copy. The body checksum is verified by `spirit check` and on demand.

use super::biword::{
    group_stably, word_entry, BiwordBuilder, BiwordLists, BIWORDS_VERSION, BIWORD_MARK, COMMON_WORDS,
};
use super::{FieldStats, FreshSegment, SegmentError};
use crate::codec::{
    encode_norm, encode_postings_encoded, read_vbyte, write_positions, write_vbyte, FieldCodecs,
    PostingsCursor, BLOCK,
};
use crate::memory::prefetch;
use std::sync::atomic::{AtomicU32, Ordering};

const MAGIC: &[u8; 8] = b"SPSEG001";
/// 4: the IDS section holds the `_id` bytes. Read as well: 2 (one-byte norms; 1 had u32 lengths) and 3 (2
/// with purged documents, see the module doc), whose `_id`s are read from the doc store.
pub(crate) const VERSION: u32 = 4;
/// The oldest version read.
const VERSION_OLDEST: u32 = 2;
/// Version 3: purged documents, without `_id` bytes (written before version 4).
const VERSION_PURGED_NO_ID_BYTES: u32 = 3;
const HEADER: usize = 64;
const N_SECTIONS: usize = 8;
const PREFIX: usize = HEADER + N_SECTIONS * 16;

/// The image checksum: every byte except the checksum field itself (header bytes 32..36).
fn image_crc(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[..32]);
    h.update(&bytes[36..]);
    h.finalize()
}
const TERMS: usize = 0;
const KEYS: usize = 1;
const POSTINGS: usize = 2;
const FIELDS: usize = 3;
const COLUMNS: usize = 4;
const DOCSTORE: usize = 5;
const IDS: usize = 6;
const HASH: usize = 7;
const KIND_NORMS: u32 = 1;
const KIND_NUMERIC: u32 = 2;
const DOC_BLOCK_BYTES: usize = 16 * 1024;
/// Ranges of terms a parallel flush cuts its keys into (see [`ImageBuilder::seal_fresh`]).
const PARALLEL_FLUSH_PIECES: usize = 8;
/// Steps (terms, documents) between two checks of whether a flush gives up ([`ImageBuilder::seal_fresh_unless`]).
const ABORT_CHECK_EVERY: usize = 4096;
/// Fewest terms for which a flush asked to run in parallel does (tests split small segments too).
const PARALLEL_FLUSH_TERMS: usize = if cfg!(test) { 2 } else { 4096 };

fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Hash of an `_id` in the IDS section.
pub fn id_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// How many terms ahead a flush fetches a term's key and entry (and half as far, its first posting block).
const FLUSH_AHEAD: usize = 16;
/// Documents whose common words [`fresh_biwords`] gathers together (for enwiki-sized documents ~60k
/// occurrences, in cache); a handful in tests, so that their documents span many ranges.
const BIWORD_DOCS: u32 = if cfg!(test) { 7 } else { 1024 };
// A document's place in its range goes above an occurrence's 40 bits in one u64.
const _: () = assert!((BIWORD_DOCS as u64) < 1 << 24);

/// Builds images.
pub struct ImageBuilder;

impl ImageBuilder {
    /// Flushes the visible documents of a (sealed) fresh segment into an image, each field's postings in
    /// its codec.
    pub fn from_fresh(
        fresh: &FreshSegment,
        seg_id: u32,
        base_doc: u32,
        codecs: &FieldCodecs,
    ) -> Result<Vec<u8>, SegmentError> {
        Ok(Self::seal_fresh(fresh, seg_id, base_doc, codecs, false)?.to_vec())
    }

    /// [`from_fresh`](Self::from_fresh), laid out but not yet written (see [`ImageWriter::seal`]). With
    /// `parallel`, the image is built in pieces on the rayon pool — ranges of the key order, each text
    /// field's biwords, the stored documents — then joined (a bulk load's large segments: the last ones are
    /// flushed while the loader's threads have nothing left to do).
    pub(crate) fn seal_fresh(
        fresh: &FreshSegment,
        seg_id: u32,
        base_doc: u32,
        codecs: &FieldCodecs,
        parallel: bool,
    ) -> Result<SealedImage, SegmentError> {
        let image = Self::seal_fresh_unless(fresh, seg_id, base_doc, codecs, parallel, &|| false)?;
        Ok(image.expect("a build that is never told to give up completes"))
    }

    /// [`seal_fresh`](Self::seal_fresh), giving up (`None`) as soon as `abort` says so: it is asked every
    /// [`ABORT_CHECK_EVERY`] terms or documents. A build changes nothing outside itself, so one given up
    /// costs only the work done (the flusher gives up a flush at background priority that has become
    /// urgent, and the urgent flusher builds it again at normal priority).
    pub(crate) fn seal_fresh_unless(
        fresh: &FreshSegment,
        seg_id: u32,
        base_doc: u32,
        codecs: &FieldCodecs,
        parallel: bool,
        abort: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<SealedImage>, SegmentError> {
        let aborted = std::sync::atomic::AtomicBool::new(false);
        // Whether to give up, asked at step `i` of a loop (every ABORT_CHECK_EVERY steps, from its first).
        let give_up = |i: usize| {
            if !i.is_multiple_of(ABORT_CHECK_EVERY) {
                return false;
            }
            if !aborted.load(Ordering::Relaxed) && abort() {
                aborted.store(true, Ordering::Relaxed);
            }
            aborted.load(Ordering::Relaxed)
        };
        let n = fresh.visible();
        // Keys back to back in one buffer (no allocation per term), sorted through (head, offset, length,
        // entry): each key's first 8 bytes (zero-padded, big-endian) decide most comparisons of the sort without
        // reaching into the buffer (the keys are the field's 2 bytes and the term, so that is 6 term bytes).
        type Key = (u64, u32, u32, u32);
        let mut arena: Vec<u8> = vec![];
        let mut keys: Vec<Key> = vec![];
        fresh.for_each_key(&mut |k, e| {
            let mut head = [0u8; 8];
            let l = k.len().min(8);
            head[..l].copy_from_slice(&k[..l]);
            keys.push((u64::from_be_bytes(head), arena.len() as u32, k.len() as u32, e));
            arena.extend_from_slice(k);
        });
        let key_of = |&(_, o, l, _): &Key| &arena[o as usize..(o + l) as usize];
        // Zero padding sorts a key before the keys it is a prefix of, as the bytes do; equal heads (a shared
        // prefix, or a key ending where the other has zero bytes) compare the keys.
        let order = |a: &Key, b: &Key| a.0.cmp(&b.0).then_with(|| key_of(a).cmp(key_of(b)));
        let parallel = parallel && keys.len() >= PARALLEL_FLUSH_TERMS;
        if parallel {
            // A bulk load's segment (~1M keys): its sort was a tenth of the final flush, on one thread.
            use rayon::slice::ParallelSliceMut;
            keys.par_sort_unstable_by(order);
        } else {
            keys.sort_unstable_by(order);
        }
        // The image's terms in key order, as pieces written by separate writers (then appended): ranges of
        // the fresh segment's keys, and each text field's biwords, whose keys sort after every term of their
        // field and before the next field's (`BIWORD_MARK`), so where they go is known before they are
        // built. With `parallel`, the keys are cut in PARALLEL_FLUSH_PIECES ranges as well, and the pieces
        // are built on the rayon pool: a field's biwords take about a quarter of a flush, which the other
        // threads balance with small ranges of terms (halves left a thread with half the terms and the
        // biwords too).
        enum Piece {
            Terms(usize, usize),
            Biwords(u16),
            /// The stored documents (with `parallel`; else they are written after the columns, on this
            /// thread): the flusher's last step otherwise, on one thread while the others have finished.
            Docs,
        }
        let mut cuts: Vec<(usize, Option<u16>)> = fresh
            .column_fields()
            .into_iter()
            .filter(|&(_, is_text)| is_text)
            .map(|(f, _)| {
                let after = [f.to_be_bytes()[0], f.to_be_bytes()[1], BIWORD_MARK];
                (keys.partition_point(|k| key_of(k) < &after[..]), Some(f))
            })
            .collect();
        if parallel {
            cuts.extend((1..PARALLEL_FLUSH_PIECES).map(|i| (keys.len() * i / PARALLEL_FLUSH_PIECES, None)));
        }
        cuts.sort_unstable();
        let mut pieces = vec![];
        let mut lo = 0;
        for (at, field) in cuts {
            if at > lo {
                pieces.push(Piece::Terms(lo, at));
                lo = at;
            }
            pieces.extend(field.map(Piece::Biwords));
        }
        pieces.push(Piece::Terms(lo, keys.len()));
        if parallel {
            // Last: its writer is taken off the end below.
            pieces.push(Piece::Docs);
        }
        // The stored documents into `w` (it has none yet).
        let store_docs = |w: &mut ImageWriter| -> Result<(), SegmentError> {
            let (mut id, mut src) = (vec![], vec![]);
            for d in 0..n {
                if give_up(d as usize) {
                    return Ok(());
                }
                fresh.stored_into(d, &mut id, &mut src)?;
                let id =
                    std::str::from_utf8(&id).map_err(|_| SegmentError("stored _id is not UTF-8".into()))?;
                w.add_doc(id, &src);
            }
            Ok(())
        };

        // The terms of keys `lo..hi`.
        let terms = |lo: usize, hi: usize| {
            let mut w = ImageWriter::with_codecs(codecs.clone());
            let mut post = TermPostings::default();
            for i in lo..hi {
                if give_up(i - lo) {
                    break;
                }
                let k = &keys[i];
                // Keys, entries and first blocks lie at random in memory: each term's are fetched while
                // earlier terms are encoded (its key and entry FLUSH_AHEAD terms ahead, its block half as far).
                if let Some(ahead) = keys.get(i + FLUSH_AHEAD) {
                    prefetch(&arena[ahead.1 as usize]);
                    fresh.prefetch_entry(ahead.3);
                }
                if let Some(ahead) = keys.get(i + FLUSH_AHEAD / 2) {
                    fresh.prefetch_head(ahead.3);
                }
                let (key, e) = (key_of(k), &k.3);
                post.clear();
                let lengths = fresh.lengths(crate::schema::key_field(key));
                fresh.for_each_posting(*e, n, &mut |doc, positions| {
                    let dl = length_of(lengths, doc);
                    post.push_from(doc, positions.iter().map(|x| x.load(Ordering::Relaxed)), dl);
                });
                w.add_term(key, &post);
            }
            w
        };
        let build = |piece: &Piece| -> Result<ImageWriter, SegmentError> {
            Ok(match *piece {
                Piece::Terms(lo, hi) => terms(lo, hi),
                Piece::Biwords(field) => {
                    let mut w = ImageWriter::with_codecs(codecs.clone());
                    if give_up(0) {
                        return Ok(w);
                    }
                    if let Some(lists) = fresh_biwords(fresh, field, n) {
                        lists.for_each(&mut |key, post| w.add_term(key, post));
                    }
                    w
                }
                Piece::Docs => {
                    let mut w = ImageWriter::with_codecs(codecs.clone());
                    store_docs(&mut w)?;
                    w
                }
            })
        };
        let mut writers: Vec<ImageWriter> = if parallel {
            use rayon::prelude::*;
            pieces.par_iter().map(build).collect::<Result<_, _>>()?
        } else {
            pieces.iter().map(build).collect::<Result<_, _>>()?
        };
        if aborted.load(Ordering::Relaxed) || give_up(0) {
            return Ok(None);
        }
        let docs = if parallel { writers.pop() } else { None };
        let mut writers = writers.into_iter();
        let mut w = writers.next().expect("at least one piece");
        for next in writers {
            w.append_terms(next);
        }
        w.biwords = BIWORDS_VERSION;
        for (f, is_text) in fresh.column_fields() {
            let stats = if is_text { fresh.field_stats(f, n) } else { FieldStats::default() };
            w.add_column(f, is_text, stats, |col| {
                for d in 0..n {
                    if is_text {
                        col.push(encode_norm(fresh.field_len(f, d)));
                    } else {
                        col.extend_from_slice(&fresh.numeric(f, d).unwrap_or(f64::NAN).to_le_bytes());
                    }
                }
                Ok(())
            })?;
        }
        match docs {
            Some(docs) => w.take_docs(docs),
            None => store_docs(&mut w)?,
        }
        if aborted.load(Ordering::Relaxed) {
            return Ok(None);
        }
        Ok(Some(w.seal(seg_id, base_doc)))
    }
}

/// Document `doc`'s length in a text field whose per-document lengths are `lengths`
/// ([`FreshSegment::lengths`]; 0 where the field has no column).
fn length_of(lengths: &[AtomicU32], doc: u32) -> u32 {
    lengths.get(doc as usize).map_or(0, |l| l.load(Ordering::Relaxed))
}

/// The biwords of text field `field` over the first `n` documents of `fresh` ([`super::biword`]): the
/// field's common words' occurrences gathered over ranges of documents, then handed to the builder
/// document by document. Its scratch holds a range's occurrences, 16 bytes each (the builder itself keeps
/// 10 per pair of the whole segment).
fn fresh_biwords(fresh: &FreshSegment, field: u16, n: u32) -> Option<BiwordLists> {
    let mut key = vec![];
    let mut words: Vec<(u8, crate::segment::FreshPostings<'_>)> = COMMON_WORDS
        .iter()
        .enumerate()
        .filter_map(|(rank, w)| {
            crate::schema::term_key(field, w, &mut key);
            fresh.lookup(&key).map(|e| (rank as u8, fresh.postings(e, n)))
        })
        .collect();
    if words.is_empty() {
        return None;
    }
    let lengths = fresh.lengths(field);
    let mut b = BiwordBuilder::new(field);
    let (mut p, mut got, mut starts, mut by_doc) = (vec![], vec![], vec![], vec![]);
    // Documents in ranges of BIWORD_DOCS: each word's occurrences in a range are gathered word by word (a
    // cursor walk per word and range, where a look at every word for every document was most of the
    // work), then grouped by document with a counting sort, which keeps each document's in word order and
    // each word's in position order, as `BiwordBuilder` takes them.
    let mut from = 0u32;
    while from < n {
        let to = from.saturating_add(BIWORD_DOCS).min(n);
        got.clear();
        for (rank, c) in words.iter_mut() {
            while c.doc() < to {
                c.positions(&mut p);
                let at = (c.doc() - from) as u64;
                got.extend(p.iter().map(|&x| at << 40 | word_entry(*rank, x)));
                c.next();
            }
        }
        // An occurrence: its document's place in the range above bit 40, its entry (below 2^40) under it.
        let (at_of, entry_of) = (|i: usize| (got[i] >> 40) as usize, |i: usize| got[i] & ((1 << 40) - 1));
        group_stably(got.len(), (to - from) as usize, at_of, entry_of, &mut starts, &mut by_doc);
        for (at, w) in starts.windows(2).enumerate() {
            if w[1] > w[0] {
                let doc = from + at as u32;
                b.entries(&by_doc[w[0] as usize..w[1] as usize]);
                b.end_doc(doc, length_of(lengths, doc));
            }
        }
        from = to;
    }
    Some(b.finish())
}

/// The postings of one term, as [`encode_postings_encoded`] takes them (flush and compaction fill it): docs
/// and frequencies decoded, positions already in the blob's form, so compaction copies each posting's
/// positions bytes from its part instead of decoding and re-encoding them.
#[derive(Default)]
pub(crate) struct TermPostings {
    pub docs: Vec<u32>,
    pub tfs: Vec<u32>,
    /// Each posting's positions as the blob stores them ([`write_positions`]), back to back.
    positions: Vec<u8>,
    /// Where each block of [`BLOCK`] postings starts in `positions`.
    block_starts: Vec<u32>,
    /// The field length of each doc (for the blocks' impacts).
    pub dls: Vec<u32>,
}

impl TermPostings {
    pub fn clear(&mut self) {
        self.docs.clear();
        self.tfs.clear();
        self.positions.clear();
        self.block_starts.clear();
        self.dls.clear();
    }

    /// Appends one posting (its positions increasing, as many as its frequency).
    pub fn push(&mut self, doc: u32, positions: &[u32], dl: u32) {
        self.push_from(doc, positions.iter().copied(), dl);
    }

    /// Appends one posting whose positions (increasing; as many as its frequency) `positions` yields.
    pub fn push_from(&mut self, doc: u32, positions: impl ExactSizeIterator<Item = u32>, dl: u32) {
        let tf = positions.len() as u32;
        self.start_posting();
        write_positions(&mut self.positions, positions);
        self.docs.push(doc);
        self.tfs.push(tf);
        self.dls.push(dl);
    }

    /// Appends one posting of a list whose whole positions stream follows, copied undecoded by
    /// [`push_positions_stream`](Self::push_positions_stream) once all of the list's postings are pushed
    /// (compaction's path: every posting of a part is kept, in order). `stream_offset` tells where this
    /// posting's positions start in that stream; it is asked at block boundaries only.
    pub fn push_positionless(
        &mut self,
        doc: u32,
        tf: u32,
        dl: u32,
        stream_offset: impl FnOnce() -> Result<usize, crate::codec::CodecError>,
    ) -> Result<(), crate::codec::CodecError> {
        if self.docs.len().is_multiple_of(BLOCK) {
            self.block_starts.push((self.positions.len() + stream_offset()?) as u32);
        }
        self.docs.push(doc);
        self.tfs.push(tf);
        self.dls.push(dl);
        Ok(())
    }

    /// Appends the positions stream of the postings pushed with
    /// [`push_positionless`](Self::push_positionless) since the last stream.
    pub fn push_positions_stream(&mut self, stream: &[u8]) {
        self.positions.extend_from_slice(stream);
    }

    /// Every posting's positions, decoded (tests).
    #[cfg(test)]
    pub fn decoded_positions(&self) -> Vec<Vec<u32>> {
        let mut at = 0;
        self.tfs
            .iter()
            .map(|&tf| {
                let mut last = 0;
                (0..tf)
                    .map(|j| {
                        let v = read_vbyte(&self.positions, &mut at).expect("positions as written");
                        last = if j == 0 { v } else { last + v };
                        last
                    })
                    .collect()
            })
            .collect()
    }

    fn start_posting(&mut self) {
        if self.docs.len().is_multiple_of(BLOCK) {
            self.block_starts.push(self.positions.len() as u32);
        }
    }
}

/// Writes an image section by section: terms in key order, then columns in field order, then every document
/// in doc order; [`seal`](Self::seal) adds the hash and id sections and lays the bytes out. The one
/// place the image layout is written (flush and compaction both use it).
#[derive(Default)]
pub(crate) struct ImageWriter {
    terms: Vec<u8>,
    /// The open pieces of the keys and postings sections; the pieces before them, appended whole
    /// ([`append_terms`](Self::append_terms)), are in `done`.
    keys: Vec<u8>,
    postings: Vec<u8>,
    done: DonePieces,
    fields: Vec<u8>,
    columns: Vec<u8>,
    n_fields: u32,
    key_hashes: Vec<u64>,
    /// Doc store: directory (first doc, compressed length, offset), compressed blocks, the open block.
    doc_dir: Vec<(u32, u32, u64)>,
    doc_data: Vec<u8>,
    raw: Vec<u8>,
    block_first: u32,
    /// IDS entries: `_id` hash, doc, and the `_id`'s range in `id_bytes`.
    ids: Vec<(u64, u32, u32, u32)>,
    id_bytes: Vec<u8>,
    n_docs: u32,
    /// How each field's full blocks code their doc gaps.
    codecs: FieldCodecs,
    /// The biword list the image holds ([`super::biword`]; 0: none), written in the header.
    pub biwords: u32,
    /// Documents purged by compaction (see the module doc), written in the header.
    pub purged: u32,
}

/// Pieces of the keys and postings sections before an [`ImageWriter`]'s open ones, and their lengths.
#[derive(Default)]
struct DonePieces {
    keys: Vec<Vec<u8>>,
    postings: Vec<Vec<u8>>,
    keys_len: usize,
    postings_len: usize,
}

impl DonePieces {
    fn push(&mut self, keys: Vec<u8>, postings: Vec<u8>) {
        self.keys_len += keys.len();
        self.postings_len += postings.len();
        self.keys.push(keys);
        self.postings.push(postings);
    }
}

impl ImageWriter {
    pub fn with_codecs(codecs: FieldCodecs) -> ImageWriter {
        ImageWriter { codecs, ..Default::default() }
    }

    /// Adds the next term (keys strictly increasing); a term without postings is left out.
    pub fn add_term(&mut self, key: &[u8], p: &TermPostings) {
        self.add_term_counted(key, p, 0);
    }

    /// [`add_term`](Self::add_term) with the term's df for scoring: `df` if more than its postings (a
    /// compaction's purged documents still count, see the module doc).
    pub fn add_term_counted(&mut self, key: &[u8], p: &TermPostings, df: u32) {
        if p.docs.is_empty() {
            return;
        }
        let post_off = (self.done.postings_len + self.postings.len()) as u64;
        let codec =
            if key.len() >= 2 { self.codecs.get(crate::schema::key_field(key)) } else { Default::default() };
        let positions = (&p.positions[..], &p.block_starts[..]);
        let meta = encode_postings_encoded(codec, &p.docs, &p.tfs, positions, &p.dls, &mut self.postings);
        let post_len = (self.done.postings_len + self.postings.len()) as u64 - post_off;
        let t = &mut self.terms;
        t.extend_from_slice(&((self.done.keys_len + self.keys.len()) as u32).to_le_bytes());
        t.extend_from_slice(&(key.len() as u32).to_le_bytes());
        t.extend_from_slice(&meta.df.max(df).to_le_bytes());
        t.extend_from_slice(&meta.max_tf.to_le_bytes());
        t.extend_from_slice(&post_off.to_le_bytes());
        t.extend_from_slice(&post_len.to_le_bytes());
        self.keys.extend_from_slice(key);
        self.key_hashes.push(key_hash(key));
    }

    /// Appends the terms of `next`, a writer that holds only terms, all after this one's in key order (a
    /// later piece of a flush, see [`ImageBuilder::seal_fresh`]): its dictionary entries are moved with their key and postings offsets
    /// shifted past this writer's, and its keys and postings become pieces of those sections as they are
    /// (copying a flush's second half of postings, tens of MB, into the first cost a pass over them and the
    /// first touch of as many fresh pages).
    pub fn append_terms(&mut self, next: ImageWriter) {
        debug_assert!(next.n_fields == 0 && next.n_docs == 0, "a writer of terms only");
        let key_base = (self.done.keys_len + self.keys.len()) as u32;
        let post_base = (self.done.postings_len + self.postings.len()) as u64;
        for e in next.terms.chunks_exact(32) {
            self.terms.extend_from_slice(&(u32_at(e, 0) + key_base).to_le_bytes());
            self.terms.extend_from_slice(&e[4..16]);
            self.terms.extend_from_slice(&(u64_at(e, 16) + post_base).to_le_bytes());
            self.terms.extend_from_slice(&e[24..32]);
        }
        let (keys, postings) = (std::mem::take(&mut self.keys), std::mem::take(&mut self.postings));
        self.done.push(keys, postings);
        for (k, p) in next.done.keys.into_iter().zip(next.done.postings) {
            self.done.push(k, p);
        }
        self.done.push(next.keys, next.postings);
        self.key_hashes.extend_from_slice(&next.key_hashes);
    }

    /// Adds the next field's column (fields increasing): `fill` appends a one-byte norm (text) or an f64 (numeric,
    /// NaN = none) per document of the image.
    pub fn add_column(
        &mut self,
        field: u16,
        is_text: bool,
        stats: FieldStats,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), SegmentError>,
    ) -> Result<(), SegmentError> {
        let col_off = self.columns.len() as u64;
        fill(&mut self.columns)?;
        while !self.columns.len().is_multiple_of(8) {
            self.columns.push(0);
        }
        let kind = if is_text { KIND_NORMS } else { KIND_NUMERIC };
        let fs = &mut self.fields;
        fs.extend_from_slice(&(field as u32).to_le_bytes());
        fs.extend_from_slice(&kind.to_le_bytes());
        fs.extend_from_slice(&stats.docs.to_le_bytes());
        fs.extend_from_slice(&stats.total_len.to_le_bytes());
        fs.extend_from_slice(&col_off.to_le_bytes());
        self.n_fields += 1;
        Ok(())
    }

    /// Adds the next document's stored record.
    pub fn add_doc(&mut self, id: &str, source: &[u8]) {
        self.push_id(id.as_bytes(), self.n_docs);
        write_vbyte(&mut self.raw, id.len() as u32);
        self.raw.extend_from_slice(id.as_bytes());
        write_vbyte(&mut self.raw, source.len() as u32);
        self.raw.extend_from_slice(source);
        self.n_docs += 1;
        if self.raw.len() >= DOC_BLOCK_BYTES {
            self.flush_doc_block();
        }
    }

    /// Adds an IDS entry: `id` is the `_id` of `doc`.
    fn push_id(&mut self, id: &[u8], doc: u32) {
        let off = u32::try_from(self.id_bytes.len()).expect("an image's _ids fit in 4 GiB");
        self.ids.push((xxhash_rust::xxh3::xxh3_64(id), doc, off, id.len() as u32));
        self.id_bytes.extend_from_slice(id);
    }

    /// Adds the next document as purged: an empty record, no `_id` entry.
    pub fn add_purged_doc(&mut self) {
        write_vbyte(&mut self.raw, 0);
        write_vbyte(&mut self.raw, 0);
        self.n_docs += 1;
        self.purged += 1;
        if self.raw.len() >= DOC_BLOCK_BYTES {
            self.flush_doc_block();
        }
    }

    /// Appends the stored records of `part` as the next documents, those `purge` holds as purged ones
    /// ([`add_purged_doc`](Self::add_purged_doc)), and so those an earlier compaction purged (an empty
    /// `_id`, which no document has): each block is decompressed and its kept records added again.
    pub fn append_stored_purging(
        &mut self,
        part: &ImageView<'_>,
        purge: &dyn Fn(u32) -> bool,
    ) -> Result<(), SegmentError> {
        part.for_each_record(&mut |d, id, src| {
            if purge(d) || id.is_empty() {
                self.add_purged_doc();
            } else {
                self.add_doc(id, src);
            }
        })
    }

    /// Appends every stored record of `part` as the next documents, copying its compressed doc-store blocks
    /// and `_id` index entries as they are (compaction: nothing is decompressed or compressed again). The
    /// part's block directory must cover its documents exactly.
    pub fn append_stored(&mut self, part: &ImageView<'_>) -> Result<(), SegmentError> {
        self.flush_doc_block();
        let (ds, n, dir_end) = part.doc_directory()?;
        let bad = |m: &str| SegmentError(format!("doc store: {m}"));
        let base = self.n_docs;
        let mut next = 0u32;
        for b in 0..n {
            let e = &ds[8 + b * 16..8 + b * 16 + 16];
            let (first, clen, off) = (u32_at(e, 0), u32_at(e, 4) as usize, u64_at(e, 8) as usize);
            let end = if b + 1 < n { u32_at(ds, 8 + (b + 1) * 16) } else { part.doc_count };
            if first != next || end <= first || end > part.doc_count {
                return Err(bad("block directory does not cover the documents"));
            }
            let data = dir_end
                .checked_add(off)
                .and_then(|s| ds.get(s..s.checked_add(clen)?))
                .ok_or_else(|| bad("block out of bounds"))?;
            self.doc_dir.push((base + first, clen as u32, self.doc_data.len() as u64));
            self.doc_data.extend_from_slice(data);
            next = end;
        }
        if next != part.doc_count {
            return Err(bad("block directory does not cover the documents"));
        }
        if part.has_id_bytes() {
            // The entries are checked as `check_structure` checks them, so that the image passes it.
            part.id_entry_of_doc()?;
            for e in 0..part.id_entries() {
                let id = part.entry_id(e).expect("checked: every entry has its bytes");
                self.push_id(id, base + part.entry_doc(e));
            }
        } else {
            // An image written before version 4: its `_id`s are read from its doc store, once.
            part.for_each_record(&mut |d, id, _| {
                if !id.is_empty() {
                    self.push_id(id.as_bytes(), base + d);
                }
            })?;
        }
        self.n_docs += part.doc_count;
        self.purged += part.purged();
        self.block_first = self.n_docs;
        Ok(())
    }

    /// Takes the stored documents of `other` (written apart, in parallel with this writer's terms) as this
    /// writer's, which has none yet.
    fn take_docs(&mut self, other: ImageWriter) {
        assert!(
            self.n_docs == 0 && self.raw.is_empty() && self.doc_dir.is_empty() && self.ids.is_empty(),
            "documents are taken by a writer without any"
        );
        assert!(
            other.terms.is_empty()
                && other.keys.is_empty()
                && other.postings.is_empty()
                && other.n_fields == 0
                && other.columns.is_empty(),
            "a documents-only writer"
        );
        self.doc_dir = other.doc_dir;
        self.doc_data = other.doc_data;
        self.raw = other.raw;
        self.block_first = other.block_first;
        self.ids = other.ids;
        self.id_bytes = other.id_bytes;
        self.n_docs = other.n_docs;
        self.purged += other.purged;
    }

    fn flush_doc_block(&mut self) {
        if self.raw.is_empty() {
            return;
        }
        let data = lz4_flex::compress(&self.raw);
        self.doc_dir.push((self.block_first, data.len() as u32, self.doc_data.len() as u64));
        self.doc_data.extend_from_slice(&data);
        self.raw.clear();
        self.block_first = self.n_docs;
    }

    /// Completes the sections (the hash and id sections, the doc store's directory) and lays them out: the
    /// image's length is then known, and [`SealedImage::write_into`] writes its bytes straight into their
    /// destination — the flusher's DRAM block, compaction's persistent extent — with no intermediate copy
    /// (an image is tens of MB; assembling it in a buffer of its own cost a second copy and the kernel's
    /// zero-filling of the buffer's fresh pages).
    pub fn seal(mut self, seg_id: u32, base_doc: u32) -> SealedImage {
        self.flush_doc_block();
        let cap = (2 * self.key_hashes.len()).next_power_of_two().max(2);
        let mut slots = vec![0u32; cap];
        for (i, h) in self.key_hashes.iter().enumerate() {
            let mut j = *h as usize & (cap - 1);
            while slots[j] != 0 {
                j = (j + 1) & (cap - 1);
            }
            slots[j] = i as u32 + 1;
        }
        let mut hash = Vec::with_capacity(4 + 4 * cap);
        hash.extend_from_slice(&(cap as u32).to_le_bytes());
        for x in slots {
            hash.extend_from_slice(&x.to_le_bytes());
        }
        let mut ds_dir = Vec::with_capacity(8 + 16 * self.doc_dir.len());
        ds_dir.extend_from_slice(&(self.doc_dir.len() as u32).to_le_bytes());
        ds_dir.extend_from_slice(&0u32.to_le_bytes());
        for (first, len, off) in &self.doc_dir {
            ds_dir.extend_from_slice(&first.to_le_bytes());
            ds_dir.extend_from_slice(&len.to_le_bytes());
            ds_dir.extend_from_slice(&off.to_le_bytes());
        }
        self.ids.sort_unstable();
        let mut ids = Vec::with_capacity(16 * self.ids.len() + self.id_bytes.len());
        let mut off = 0u32;
        for &(h, d, _, len) in &self.ids {
            ids.extend_from_slice(&h.to_le_bytes());
            ids.extend_from_slice(&d.to_le_bytes());
            ids.extend_from_slice(&off.to_le_bytes());
            off += len;
        }
        for &(_, _, at, len) in &self.ids {
            ids.extend_from_slice(&self.id_bytes[at as usize..(at + len) as usize]);
        }
        let mut sealed = SealedImage {
            table: [(0, 0); N_SECTIONS],
            len: 0,
            seg_id,
            base_doc,
            biwords: self.biwords,
            purged: self.purged,
            n_docs: self.n_docs,
            n_terms: self.key_hashes.len() as u32,
            n_fields: self.n_fields,
            sections: [
                vec![self.terms],
                self.done.keys.into_iter().chain([self.keys]).collect(),
                self.done.postings.into_iter().chain([self.postings]).collect(),
                vec![self.fields],
                vec![self.columns],
                vec![ds_dir, self.doc_data],
                vec![ids],
                vec![hash],
            ],
        };
        // Sections in the order of their indices (TERMS .. HASH), each 8-byte aligned.
        let mut at = PREFIX;
        for (s, pieces) in sealed.table.iter_mut().zip(&sealed.sections) {
            at = at.next_multiple_of(8);
            let len: usize = pieces.iter().map(Vec::len).sum();
            *s = (at as u64, len as u64);
            at += len;
        }
        sealed.len = at;
        sealed
    }
}

/// An image laid out but not yet written: see [`ImageWriter::seal`].
pub(crate) struct SealedImage {
    /// Offset and length of each section.
    table: [(u64, u64); N_SECTIONS],
    len: usize,
    seg_id: u32,
    base_doc: u32,
    biwords: u32,
    purged: u32,
    n_docs: u32,
    n_terms: u32,
    n_fields: u32,
    /// Each section's bytes, in pieces written back to back.
    sections: [Vec<Vec<u8>>; N_SECTIONS],
}

impl SealedImage {
    /// The image's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Writes the image into `out`, exactly [`len`](Self::len) bytes whatever they held before: every byte
    /// is written, padding included, the checksum over them in the header.
    pub fn write_into(&self, out: &mut [u8]) {
        assert_eq!(out.len(), self.len, "an image is written into exactly its length");
        crate::memory::gather_into(out, &|f| self.pieces(f));
    }

    /// The image's bytes in order, as consecutive slices that together are exactly [`len`](Self::len)
    /// bytes — the header with its checksum, each section's padding (zeros) and pieces: what
    /// [`write_into`](Self::write_into) copies, for a writer that takes them as they are (the persistent
    /// heap writes them to its file, `PersistentHeap::write_gathered`).
    pub fn pieces(&self, f: &mut dyn FnMut(&[u8])) {
        let mut prefix = [0u8; PREFIX];
        prefix[..8].copy_from_slice(MAGIC);
        prefix[8..12].copy_from_slice(&VERSION.to_le_bytes());
        prefix[12..16].copy_from_slice(&self.n_docs.to_le_bytes());
        prefix[16..20].copy_from_slice(&self.seg_id.to_le_bytes());
        prefix[20..24].copy_from_slice(&self.base_doc.to_le_bytes());
        prefix[24..28].copy_from_slice(&self.n_terms.to_le_bytes());
        prefix[28..32].copy_from_slice(&self.n_fields.to_le_bytes());
        prefix[36..40].copy_from_slice(&self.biwords.to_le_bytes());
        prefix[40..48].copy_from_slice(&(self.len as u64).to_le_bytes());
        prefix[48..52].copy_from_slice(&self.purged.to_le_bytes());
        for (i, (o, l)) in self.table.iter().enumerate() {
            prefix[HEADER + i * 16..HEADER + i * 16 + 8].copy_from_slice(&o.to_le_bytes());
            prefix[HEADER + i * 16 + 8..HEADER + i * 16 + 16].copy_from_slice(&l.to_le_bytes());
        }
        // The checksum first (over every byte but its own four, as `image_crc`), then the bytes.
        let mut crc = crc32fast::Hasher::new();
        crc.update(&prefix[..32]);
        crc.update(&prefix[36..]);
        self.sections_bytes(&mut |b| crc.update(b));
        prefix[32..36].copy_from_slice(&crc.finalize().to_le_bytes());
        f(&prefix);
        self.sections_bytes(f);
    }

    /// Every byte after the prefix: each section's padding to its offset, then its pieces.
    fn sections_bytes(&self, f: &mut dyn FnMut(&[u8])) {
        const ZEROS: [u8; 8] = [0; 8];
        let mut at = PREFIX;
        for ((off, _), pieces) in self.table.iter().zip(&self.sections) {
            let off = *off as usize;
            // Sections are 8-byte aligned (`ImageWriter::seal`): padding is under 8 bytes.
            f(&ZEROS[..off - at]);
            at = off;
            for p in pieces {
                f(p);
                at += p.len();
            }
        }
        assert_eq!(at, self.len, "an image's sections end at its length");
    }

    /// The image in a buffer of its own.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        self.write_into(&mut out);
        out
    }
}

/// Interpolation probes [`id_lower_bound`] makes before it bisects what is left.
const ID_PROBES: usize = 4;

/// Most IDS tables [`id_lower_bounds`] searches at once.
pub const ID_LOCKSTEP: usize = 8;

/// The first entry of an IDS section (16-byte entries sorted by their leading u64 hash) whose hash is at
/// least `hash`. The hashes are xxh3 values, uniform over u64, so the entry's position is interpolated from
/// its hash: a 100k-entry table takes about three probes (each usually a cache miss) where a binary search
/// takes seventeen, and every add with an explicit `_id` looks its id up in each image. After
/// [`ID_PROBES`] probes the rest of the range is bisected, so skewed hashes cost at most a few probes more
/// than a binary search, and an unsorted (corrupt) table still ends, at some index.
#[cfg(test)]
fn id_lower_bound(ids: &[u8], hash: u64) -> usize {
    let mut out = [0];
    id_lower_bounds(&[ids], hash, &mut out);
    out[0]
}

/// [`id_lower_bound`] of one hash in up to [`ID_LOCKSTEP`] tables (`out[t]` for `tables[t]`), in lockstep:
/// each round computes every table's next probe, then reads them all, then narrows every range, so the
/// tables' cache misses overlap instead of queueing one after another (an add with an `_id` new to the
/// shard searches every image's table).
pub fn id_lower_bounds(tables: &[&[u8]], hash: u64, out: &mut [usize]) {
    const NONE: usize = usize::MAX;
    let n = tables.len();
    assert!(n <= ID_LOCKSTEP && out.len() == n, "lockstep of {n} tables");
    let key = |t: usize, i: usize| u64_at(tables[t], i * 16);
    // Per table: every entry below `lo` hashes below `hash`, every entry from `hi` on at or above it; in a
    // sorted table the hashes of [lo, hi) lie in [lo_key, hi_key].
    let (mut lo, mut hi) = ([0usize; ID_LOCKSTEP], [0usize; ID_LOCKSTEP]);
    let (mut lo_key, mut hi_key) = ([0u64; ID_LOCKSTEP], [u64::MAX; ID_LOCKSTEP]);
    let (mut pos, mut k) = ([NONE; ID_LOCKSTEP], [0u64; ID_LOCKSTEP]);
    for t in 0..n {
        hi[t] = tables[t].len() / 16;
    }
    for _ in 0..ID_PROBES {
        let mut any = false;
        for t in 0..n {
            pos[t] = NONE;
            if hi[t] - lo[t] <= 8 {
                continue;
            }
            let span = hi_key[t].saturating_sub(lo_key[t]) as u128 + 1;
            // (Not `clamp`: in a corrupt table `lo_key` may exceed `hi_key`.)
            let frac = hash.saturating_sub(lo_key[t]).min(hi_key[t].saturating_sub(lo_key[t])) as u128;
            pos[t] = (lo[t] + (frac * (hi[t] - lo[t]) as u128 / span) as usize).min(hi[t] - 1);
            any = true;
        }
        if !any {
            break;
        }
        for t in 0..n {
            if pos[t] != NONE {
                k[t] = key(t, pos[t]);
            }
        }
        for t in 0..n {
            if pos[t] == NONE {
                continue;
            }
            if k[t] < hash {
                (lo[t], lo_key[t]) = (pos[t] + 1, k[t]);
            } else {
                (hi[t], hi_key[t]) = (pos[t], k[t]);
            }
        }
    }
    for t in 0..n {
        let (mut l, mut h) = (lo[t], hi[t]);
        while l < h {
            let mid = (l + h) / 2;
            if key(t, mid) < hash {
                l = mid + 1;
            } else {
                h = mid;
            }
        }
        out[t] = l;
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// A dictionary entry.
#[derive(Debug, Clone, Copy)]
pub struct TermInfo<'a> {
    pub df: u32,
    pub max_tf: u32,
    pub blob: &'a [u8],
    /// Offset of the blob from the image start (for the merged segment's chain).
    pub blob_offset: u64,
}

/// A validated view of an image's bytes.
#[derive(Clone, Copy)]
pub struct ImageView<'a> {
    bytes: &'a [u8],
    doc_count: u32,
    seg_id: u32,
    base_doc: u32,
    n_terms: usize,
    n_fields: usize,
    sections: [(usize, usize); N_SECTIONS],
    /// Version 4 or later: IDS holds the `_id` bytes.
    id_bytes: bool,
}

impl<'a> ImageView<'a> {
    /// Validates the header and section table (not the body checksum: see [`verify`](Self::verify)).
    pub fn parse(bytes: &'a [u8]) -> Result<ImageView<'a>, SegmentError> {
        let err = |m: &str| SegmentError(format!("segment image: {m}"));
        if bytes.len() < PREFIX || &bytes[..8] != MAGIC {
            return Err(err("bad magic or truncated header"));
        }
        let version = u32_at(bytes, 8);
        if !(VERSION_OLDEST..=VERSION).contains(&version) {
            return Err(err(&format!("unsupported version {version}")));
        }
        if version < VERSION && (version == VERSION_PURGED_NO_ID_BYTES) != (u32_at(bytes, 48) > 0) {
            return Err(err("the version disagrees with the purged count"));
        }
        let total = u64_at(bytes, 40) as usize;
        if total > bytes.len() || total < PREFIX {
            return Err(err("truncated"));
        }
        let bytes = &bytes[..total];
        let mut sections = [(0, 0); N_SECTIONS];
        for (i, s) in sections.iter_mut().enumerate() {
            let (o, l) =
                (u64_at(bytes, HEADER + i * 16) as usize, u64_at(bytes, HEADER + i * 16 + 8) as usize);
            if o < PREFIX || o.checked_add(l).is_none_or(|e| e > total) {
                return Err(err("section out of bounds"));
            }
            *s = (o, l);
        }
        let v = ImageView {
            bytes,
            doc_count: u32_at(bytes, 12),
            seg_id: u32_at(bytes, 16),
            base_doc: u32_at(bytes, 20),
            n_terms: u32_at(bytes, 24) as usize,
            n_fields: u32_at(bytes, 28) as usize,
            sections,
            id_bytes: version >= 4,
        };
        let entries = (v.doc_count - v.purged().min(v.doc_count)) as usize * 16;
        if v.sections[TERMS].1 != v.n_terms * 32
            || v.sections[FIELDS].1 != v.n_fields * 32
            || v.purged() > v.doc_count
            || (v.id_bytes && v.sections[IDS].1 < entries)
            || (!v.id_bytes && v.sections[IDS].1 != entries)
            || v.sections[DOCSTORE].1 < 8
            || v.sections[HASH].1 < 8
        {
            return Err(err("section sizes disagree with the header"));
        }
        Ok(v)
    }

    /// Verifies the body checksum.
    pub fn verify(&self) -> Result<(), SegmentError> {
        if image_crc(self.bytes) != u32_at(self.bytes, 32) {
            return Err(SegmentError("segment image: checksum mismatch".into()));
        }
        Ok(())
    }

    /// Structural check beyond the checksum: keys strictly sorted, every key found through the hash section,
    /// every posting list decodable with increasing docs below `doc_count` and df as recorded.
    pub fn check_structure(&self) -> Result<(), SegmentError> {
        let mut prev: Option<&[u8]> = None;
        for i in 0..self.n_terms {
            let k = self.key_at(i)?;
            if prev.is_some_and(|p| p >= k) {
                return Err(SegmentError(format!("dictionary not sorted at term {i}")));
            }
            prev = Some(k);
            let t = self.term_at(i)?;
            match self.term(k)? {
                Some(h) if h.blob_offset == t.blob_offset => {}
                _ => {
                    return Err(SegmentError(format!(
                        "hash lookup disagrees with the dictionary at term {i}"
                    )))
                }
            }
            let mut c = PostingsCursor::new(t.blob)?;
            let (mut n, mut last) = (0u32, None);
            while c.doc() != crate::codec::NO_DOC {
                if c.doc() >= self.doc_count || last.is_some_and(|l| l >= c.doc()) {
                    return Err(SegmentError(format!("postings of term {i} out of order or range")));
                }
                last = Some(c.doc());
                n += 1;
                c.next()?;
            }
            if !self.df_holds(t.df, n) {
                return Err(SegmentError(format!("term {i}: df {} recorded, {n} postings found", t.df)));
            }
        }
        self.id_entry_of_doc().map(|_| ())
    }

    /// Checks the IDS entries (sorted by hash, each of a document in range listed once, and in version 4
    /// with `_id` bytes that hash to the entry) and returns each document's entry (`usize::MAX`: none).
    fn id_entry_of_doc(&self) -> Result<Vec<usize>, SegmentError> {
        let bad = |m: String| Err(SegmentError(format!("_id index: {m}")));
        let ids = self.ids();
        let mut entry_of = vec![usize::MAX; self.doc_count as usize];
        for e in 0..self.id_entries() {
            let (h, d) = (u64_at(ids, e * 16), self.entry_doc(e));
            if e > 0 && u64_at(ids, (e - 1) * 16) > h {
                return bad(format!("not sorted at entry {e}"));
            }
            match entry_of.get_mut(d as usize) {
                Some(x) if *x == usize::MAX => *x = e,
                _ => return bad(format!("entry {e}: doc {d} out of range or listed twice")),
            }
            if self.id_bytes && self.entry_id(e).is_none_or(|b| xxhash_rust::xxh3::xxh3_64(b) != h) {
                return bad(format!("entry {e}: its _id bytes are out of bounds or do not hash to it"));
            }
        }
        Ok(entry_of)
    }

    /// Checks the doc store against IDS (`spirit check`, after [`check_structure`](Self::check_structure)):
    /// every block decompresses, and each document with a record has the IDS entry of its `_id`, a purged
    /// one (an empty record) none. Compaction copies a part's compressed blocks without reading them, so
    /// this reads what [`check_structure`](Self::check_structure) does not. Returns the documents compaction
    /// purged (an empty record), in order: `spirit check` holds them against the delete bits.
    pub fn check_stored(&self) -> Result<Vec<u32>, SegmentError> {
        let (ids, entry_of) = (self.ids(), self.id_entry_of_doc()?);
        let (mut wrong, mut purged) = (None, vec![]);
        self.for_each_record(&mut |d, id, _| {
            let e = entry_of.get(d as usize).copied().unwrap_or(usize::MAX);
            let ok = if id.is_empty() {
                purged.push(d);
                e == usize::MAX
            } else {
                e != usize::MAX
                    && u64_at(ids, e * 16) == id_hash(id)
                    && (!self.id_bytes || self.entry_id(e) == Some(id.as_bytes()))
            };
            if !ok && wrong.is_none() {
                wrong = Some(d);
            }
        })?;
        match wrong {
            Some(d) => {
                Err(SegmentError(format!("_id index: doc {d}: its stored _id and its entry disagree")))
            }
            None => Ok(purged),
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.doc_count == 0
    }
    pub fn doc_count(&self) -> u32 {
        self.doc_count
    }
    pub fn seg_id(&self) -> u32 {
        self.seg_id
    }
    /// Whether the image holds every biword of its text fields ([`super::biword`]): then a biword it lacks
    /// occurs in none of its documents.
    pub fn has_biwords(&self) -> bool {
        u32_at(self.bytes, 36) == BIWORDS_VERSION
    }

    /// Documents compaction purged from this image (see the module doc): deleted, without postings (but
    /// for a term's last) or stored records.
    pub fn purged(&self) -> u32 {
        u32_at(self.bytes, 48)
    }

    /// Calls `f` with every document's `_id` and `_source`, in doc order, one decompressed block at a time.
    /// The block directory must cover the documents exactly.
    fn for_each_record(&self, f: &mut dyn FnMut(u32, &str, &[u8])) -> Result<(), SegmentError> {
        let bad = || SegmentError("doc store: block directory does not cover the documents".into());
        let (ds, n, _) = self.doc_directory()?;
        let mut next = 0u32;
        for b in 0..n {
            let (first, raw) = self.doc_block(b)?;
            let end = if b + 1 < n { u32_at(ds, 8 + (b + 1) * 16) } else { self.doc_count };
            if first != next || end <= first || end > self.doc_count {
                return Err(bad());
            }
            let mut at = 0;
            for d in first..end {
                let (id, src) = Self::doc_record(&raw, &mut at)?;
                f(d, id, src);
            }
            next = end;
        }
        if next != self.doc_count {
            return Err(bad());
        }
        Ok(())
    }

    /// Whether a term with df `df` may hold `postings` postings: as many, or with purged documents, at
    /// least one and at most `df`.
    pub fn df_holds(&self, df: u32, postings: u32) -> bool {
        postings == df || (self.purged() > 0 && postings >= 1 && postings < df)
    }

    pub fn base_doc(&self) -> u32 {
        self.base_doc
    }
    pub fn n_terms(&self) -> usize {
        self.n_terms
    }

    /// Every section but the doc store (whose block boundaries depend on how the image was built).
    #[cfg(test)]
    pub(crate) fn sections_but_doc_store(&self) -> Vec<&'a [u8]> {
        (0..N_SECTIONS).filter(|&s| s != DOCSTORE).map(|s| self.section(s)).collect()
    }

    fn section(&self, s: usize) -> &'a [u8] {
        let (o, l) = self.sections[s];
        &self.bytes[o..o + l]
    }

    /// The key of term `i` (in sorted order).
    pub fn key_at(&self, i: usize) -> Result<&'a [u8], SegmentError> {
        let t = self.section(TERMS);
        let (o, l) = (u32_at(t, i * 32) as usize, u32_at(t, i * 32 + 4) as usize);
        self.section(KEYS).get(o..o + l).ok_or_else(|| SegmentError("term key out of bounds".into()))
    }

    /// Dictionary entry `i`.
    pub fn term_at(&self, i: usize) -> Result<TermInfo<'a>, SegmentError> {
        let t = self.section(TERMS);
        let e = &t[i * 32..i * 32 + 32];
        let (po, pl) = (u64_at(e, 16) as usize, u64_at(e, 24) as usize);
        let blob = self
            .section(POSTINGS)
            .get(po..po.saturating_add(pl))
            .ok_or_else(|| SegmentError("postings out of bounds".into()))?;
        Ok(TermInfo {
            df: u32_at(e, 8),
            max_tf: u32_at(e, 12),
            blob,
            blob_offset: (self.sections[POSTINGS].0 + po) as u64,
        })
    }

    /// Exact lookup through the hash section.
    pub fn term(&self, key: &[u8]) -> Result<Option<TermInfo<'a>>, SegmentError> {
        let h = self.section(HASH);
        let cap = u32_at(h, 0) as usize;
        if !cap.is_power_of_two() || h.len() != 4 + cap * 4 {
            return Err(SegmentError("term hash section malformed".into()));
        }
        let mut j = key_hash(key) as usize & (cap - 1);
        for _ in 0..cap {
            let slot = u32_at(h, 4 + j * 4) as usize;
            if slot == 0 {
                return Ok(None);
            }
            if slot > self.n_terms {
                return Err(SegmentError("term hash slot out of range".into()));
            }
            if self.key_at(slot - 1)? == key {
                return self.term_at(slot - 1).map(Some);
            }
            j = (j + 1) & (cap - 1);
        }
        Ok(None)
    }

    /// Exact lookup by binary search over the sorted dictionary (used by `check` to cross-validate the hash).
    pub fn term_sorted(&self, key: &[u8]) -> Result<Option<TermInfo<'a>>, SegmentError> {
        let (mut lo, mut hi) = (0, self.n_terms);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key_at(mid)?.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.term_at(mid).map(Some),
            }
        }
        Ok(None)
    }

    /// Index range of the terms whose key starts with `prefix`; when the prefix holds a field id, not its
    /// biwords (`super::biword`).
    pub fn prefix_range(&self, prefix: &[u8]) -> Result<std::ops::Range<usize>, SegmentError> {
        let lower = |strict: bool| -> Result<usize, SegmentError> {
            let (mut lo, mut hi) = (0, self.n_terms);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let k = self.key_at(mid)?;
                // A field's biwords follow its terms: a prefix within a field stops before them.
                let before = if strict {
                    k < prefix
                        || (k.starts_with(prefix) && (prefix.len() < 2 || !super::biword::is_biword_key(k)))
                } else {
                    k < prefix
                };
                if before {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            Ok(lo)
        };
        Ok(lower(false)?..lower(true)?)
    }

    fn field_entry(&self, field: u16) -> Option<&'a [u8]> {
        let f = self.section(FIELDS);
        (0..self.n_fields).map(|i| &f[i * 32..i * 32 + 32]).find(|e| u32_at(e, 0) == field as u32)
    }

    pub fn field_stats(&self, field: u16) -> FieldStats {
        self.field_entry(field)
            .filter(|e| u32_at(e, 4) == KIND_NORMS)
            .map(|e| FieldStats { docs: u64_at(e, 8), total_len: u64_at(e, 16) })
            .unwrap_or_default()
    }

    fn column(&self, field: u16, kind: u32, width: usize) -> Option<&'a [u8]> {
        let e = self.field_entry(field).filter(|e| u32_at(e, 4) == kind)?;
        let off = u64_at(e, 24) as usize;
        self.section(COLUMNS).get(off..off.checked_add(self.doc_count as usize * width)?)
    }

    /// The norms column of a term field (one-byte norm of the field length per doc).
    pub fn norms(&self, field: u16) -> Option<&'a [u8]> {
        self.column(field, KIND_NORMS, 1)
    }

    /// The numeric column of a numeric or date field.
    pub fn numbers(&self, field: u16) -> Option<&'a [u8]> {
        self.column(field, KIND_NUMERIC, 8)
    }

    /// Fields with a column, in the order of the FIELDS section: `(field, is_text)` (text = norms, otherwise
    /// numbers), as [`FreshSegment::column_fields`] reports them.
    pub(crate) fn column_fields(&self) -> Result<Vec<(u16, bool)>, SegmentError> {
        let f = self.section(FIELDS);
        let mut out: Vec<(u16, bool)> = Vec::with_capacity(self.n_fields);
        for e in f.chunks_exact(32) {
            let field = u16::try_from(u32_at(e, 0)).map_err(|_| {
                SegmentError(format!("segment image: field id {} out of range", u32_at(e, 0)))
            })?;
            let is_text = match u32_at(e, 4) {
                KIND_NORMS => true,
                KIND_NUMERIC => false,
                k => return Err(SegmentError(format!("segment image: field {field} has unknown kind {k}"))),
            };
            if out.iter().any(|&(g, _)| g == field) {
                return Err(SegmentError(format!("segment image: field {field} listed twice")));
            }
            out.push((field, is_text));
        }
        Ok(out)
    }

    /// The doc store's block directory: (section, number of blocks, end of the directory).
    fn doc_directory(&self) -> Result<(&'a [u8], usize, usize), SegmentError> {
        let ds = self.section(DOCSTORE);
        let n = u32_at(ds, 0) as usize;
        match n.checked_mul(16).and_then(|x| x.checked_add(8)) {
            Some(end) if end <= ds.len() => Ok((ds, n, end)),
            _ => Err(SegmentError("doc store: block directory out of bounds".into())),
        }
    }

    /// Doc-store block `b`: its first doc and its decompressed records.
    fn doc_block(&self, b: usize) -> Result<(u32, Vec<u8>), SegmentError> {
        let (ds, _, dir_end) = self.doc_directory()?;
        let bad = |m: &str| SegmentError(format!("doc store: {m}"));
        let e = &ds[8 + b * 16..8 + b * 16 + 16];
        let (first, clen, off) = (u32_at(e, 0), u32_at(e, 4) as usize, u64_at(e, 8) as usize);
        let data = dir_end
            .checked_add(off)
            .and_then(|s| ds.get(s..s.checked_add(clen)?))
            .ok_or_else(|| bad("block out of bounds"))?;
        Ok((first, lz4_block(data).map_err(|e| bad(&e.to_string()))?))
    }

    /// Reads the record at `at` of a decompressed block: `_id` and `_source`.
    fn doc_record<'r>(raw: &'r [u8], at: &mut usize) -> Result<(&'r str, &'r [u8]), SegmentError> {
        let bad = || SegmentError("doc store: record out of bounds".into());
        let il = read_vbyte(raw, at)? as usize;
        let id = raw.get(*at..*at + il).ok_or_else(bad)?;
        *at += il;
        let sl = read_vbyte(raw, at)? as usize;
        let src = raw.get(*at..*at + sl).ok_or_else(bad)?;
        *at += sl;
        let id = std::str::from_utf8(id).map_err(|_| SegmentError("doc store: _id not UTF-8".into()))?;
        Ok((id, src))
    }

    /// `_id` and `_source` of a document.
    pub fn stored(&self, doc: u32) -> Result<(String, Vec<u8>), SegmentError> {
        let (ds, n, _) = self.doc_directory()?;
        if doc >= self.doc_count {
            return Err(SegmentError("doc store: doc out of range".into()));
        }
        // The directory is sorted by first doc: the block is the last one starting at or before `doc`.
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if u32_at(ds, 8 + mid * 16) <= doc {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let b = lo.checked_sub(1).ok_or_else(|| SegmentError("doc store: no block".into()))?;
        let (first, raw) = self.doc_block(b)?;
        let mut at = 0;
        for d in first..=doc {
            let (id, src) = Self::doc_record(&raw, &mut at)?;
            if d == doc {
                return Ok((id.to_string(), src.to_vec()));
            }
        }
        Err(SegmentError("doc store: record not found".into()))
    }

    /// Docs whose `_id` hashes to `hash`.
    pub fn docs_with_id_hash(&self, hash: u64) -> impl Iterator<Item = u32> + 'a {
        let mut start = [0];
        id_lower_bounds(&[self.ids()], hash, &mut start);
        let v = *self;
        self.id_entries_from(hash, start[0]).map(move |e| v.entry_doc(e))
    }

    /// Docs whose `_id` is `id`.
    pub fn docs_with_id(&self, id: &'a str) -> impl Iterator<Item = u32> + 'a {
        let mut start = [0];
        let hash = id_hash(id);
        id_lower_bounds(&[self.ids()], hash, &mut start);
        let v = *self;
        self.id_entries_from(hash, start[0]).filter(move |&e| v.entry_is(e, id)).map(move |e| v.entry_doc(e))
    }

    /// The IDS entries, for [`id_lower_bounds`] over several images (16 bytes each, sorted by their leading
    /// u64 hash).
    pub fn ids(&self) -> &'a [u8] {
        &self.section(IDS)[..self.id_entries() * 16]
    }

    /// The number of IDS entries: one per document not purged.
    pub fn id_entries(&self) -> usize {
        (self.doc_count - self.purged()) as usize
    }

    /// Whether IDS holds the `_id` bytes (version 4); before, [`entry_id`](Self::entry_id) is `None`.
    pub fn has_id_bytes(&self) -> bool {
        self.id_bytes
    }

    /// IDS entries whose `_id` hashes to `hash`, given the entries' lower bound of `hash` (from
    /// [`id_lower_bounds`]).
    pub fn id_entries_from(&self, hash: u64, start: usize) -> impl Iterator<Item = usize> + 'a {
        let ids = self.ids();
        (start..ids.len() / 16).take_while(move |&e| u64_at(ids, e * 16) == hash)
    }

    /// The doc of IDS entry `e`.
    pub fn entry_doc(&self, e: usize) -> u32 {
        u32_at(self.ids(), e * 16 + 8)
    }

    /// The `_id` bytes of IDS entry `e` (`None` before version 4, or out of bounds in a corrupt image).
    pub fn entry_id(&self, e: usize) -> Option<&'a [u8]> {
        if !self.id_bytes {
            return None;
        }
        let (ids, n) = (self.section(IDS), self.id_entries());
        let bytes = &ids[n * 16..];
        let start = u32_at(ids, e * 16 + 12) as usize;
        let end = if e + 1 < n { u32_at(ids, (e + 1) * 16 + 12) as usize } else { bytes.len() };
        bytes.get(start..end)
    }

    /// Whether the `_id` of IDS entry `e` is `id`: from the entry's bytes, or for an image before version 4
    /// from the doc store.
    pub fn entry_is(&self, e: usize, id: &str) -> bool {
        match self.entry_id(e) {
            Some(b) => b == id.as_bytes(),
            None => !self.id_bytes && self.stored(self.entry_doc(e)).is_ok_and(|(sid, _)| sid == id),
        }
    }

    /// Opens a cursor over a term's postings.
    pub fn cursor(blob: &'a [u8]) -> Result<PostingsCursor<'a>, SegmentError> {
        Ok(PostingsCursor::new(blob)?)
    }
}

/// Decompresses one doc-store block. A block holds records up to [`DOC_BLOCK_BYTES`] plus its last record,
/// whose size only the document limit bounds, and its raw size is not stored: the output buffer starts at
/// twice the usual block (or four times the compressed bytes) and grows while LZ4 says it is too small, up
/// to LZ4's largest expansion (255 bytes out per byte in). `lz4_flex::decompress` with a bound for the
/// largest document allocated and zeroed 64 MiB per call, whose unmapping (a TLB shootdown on every core)
/// dominated gets and updates.
fn lz4_block(data: &[u8]) -> Result<Vec<u8>, lz4_flex::block::DecompressError> {
    let most = data.len().saturating_mul(255).max(2 * DOC_BLOCK_BYTES);
    let mut cap = (2 * DOC_BLOCK_BYTES).max(data.len().saturating_mul(4)).min(most);
    loop {
        let mut raw = vec![0u8; cap];
        match lz4_flex::block::decompress_into(data, &mut raw) {
            Ok(len) => {
                raw.truncate(len);
                return Ok(raw);
            }
            Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if cap < most => {
                cap = cap.saturating_mul(4).min(most)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads the one-byte norm of `doc` from a norms column (0 past its end).
#[inline]
pub fn norm_at(col: &[u8], doc: u32) -> u8 {
    col.get(doc as usize).copied().unwrap_or(0)
}

/// Reads the number of `doc` from a numeric column.
#[inline]
pub fn number_at(col: &[u8], doc: u32) -> Option<f64> {
    let x = f64::from_le_bytes(col.get(doc as usize * 8..doc as usize * 8 + 8)?.try_into().unwrap());
    (!x.is_nan()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(hashes: &[u64]) -> Vec<u8> {
        hashes
            .iter()
            .enumerate()
            .flat_map(|(d, &h)| [h.to_le_bytes(), (d as u64).to_le_bytes()])
            .flatten()
            .collect()
    }

    fn bisect(hashes: &[u64], hash: u64) -> usize {
        hashes.partition_point(|&h| h < hash)
    }

    /// Biword key -> postings: (doc, positions, field length).
    type Lists = std::collections::BTreeMap<Vec<u8>, Vec<(u32, Vec<u32>, u32)>>;

    proptest::proptest! {
        /// A flush's biwords are exactly the adjacent common words of its documents' text fields, read off the
        /// indexed terms' positions: random texts over common words, stop words and other words, in a field
        /// with the simple analyzer and a multi-valued one with the English one (stop words leave gaps, values
        /// are POSITION_GAP apart), with each posting's field length. Each text is indexed `copies` times in a
        /// row; the documents often span several of the flush's ranges (`BIWORD_DOCS`, a handful in tests).
        #[test]
        fn flushed_biwords_are_the_adjacent_common_words(docs in proptest::collection::vec(
            (proptest::collection::vec(0usize..9, 0..40), proptest::collection::vec(proptest::collection::vec(0usize..9, 0..8), 0..3)),
            1..25), copies in 1usize..4
        ) {
            use crate::memory::{DramHeap, RingKind};
            use crate::schema::{document::analyze_document, key_field, Schema};
            use crate::segment::biword::{biword_key, common_rank};
            // Lucene's English stop words, the English analyzer's common words ("from his he"), an overlong word:
            // dropped tokens still take their positions, so they part the words around them.
            let long = "x".repeat(300);
            let words = ["in", "by", "the", "cat", "a", &long, "from", "his", "he"];
            let schema = Schema::from_mappings(&serde_json::json!({"properties": {
                "s": {"type": "text"}, "e": {"type": "text", "analyzer": "english"}}}))
            .unwrap();
            let text = |toks: &[usize]| toks.iter().map(|&t| words[t]).collect::<Vec<_>>().join(" ");
            let heap = DramHeap::new(20 << 20, 17 << 20).unwrap();
            let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 16 << 20).unwrap(), 4000);
            let mut want: Lists = Default::default();
            for (d, (s_toks, e_vals)) in docs.iter().flat_map(|d| std::iter::repeat_n(d, copies)).enumerate() {
                let e: Vec<String> = e_vals.iter().map(|v| text(v)).collect();
                let doc = analyze_document(&schema, d.to_string(), &serde_json::json!({"s": text(s_toks), "e": e}))
                    .unwrap();
                fresh.insert(&doc).unwrap();
                let mut at: std::collections::BTreeMap<(u16, u32), Vec<u8>> = Default::default();
                for (key, positions) in doc.terms() {
                    for &p in positions {
                        at.insert((key_field(key), p), key.to_vec());
                    }
                }
                for ((f, p), a) in &at {
                    let Some(b) = p.checked_add(1).and_then(|q| at.get(&(*f, q))) else { continue };
                    if common_rank(&a[2..]).is_none() || common_rank(&b[2..]).is_none() {
                        continue;
                    }
                    let dl = doc.lens.iter().find(|l| l.0 == *f).map_or(0, |l| l.1);
                    let list = want.entry(biword_key(a, b).unwrap()).or_default();
                    match list.last_mut() {
                        Some((ld, ps, _)) if *ld == d as u32 => ps.push(*p),
                        _ => list.push((d as u32, vec![*p], dl)),
                    }
                }
            }
            let mut got: Lists = Default::default();
            for (f, is_text) in fresh.column_fields() {
                proptest::prop_assert!(is_text);
                if let Some(lists) = fresh_biwords(&fresh, f, fresh.visible()) {
                    lists.for_each(&mut |k, p| {
                        let postings = p.docs.iter().zip(p.decoded_positions()).zip(&p.dls);
                        got.insert(k.to_vec(), postings.map(|((&d, ps), &dl)| (d, ps, dl)).collect());
                    });
                }
            }
            proptest::prop_assert_eq!(got, want);
        }
    }

    /// A flush lists its terms in byte order, whatever the keys' first 8 bytes (which its sort compares
    /// first, zero-padded) say: keys that share those bytes, keys that end where another has zero bytes, keys
    /// of zero bytes only, and text terms of two fields; each key is found again by lookup.
    #[test]
    fn flushed_terms_are_in_byte_order() {
        use crate::memory::{DramHeap, RingKind};
        use crate::schema::{document::analyze_document, Schema};
        let schema = Schema::from_mappings(&serde_json::json!({"properties": {
            "k": {"type": "keyword"}, "t": {"type": "text"}}}))
        .unwrap();
        let tricky = [
            "",
            "\0",
            "\0\0",
            "a",
            "a\0",
            "a\0\0",
            "a\0b",
            "ab",
            "abcdef",
            "abcdefg",
            "abcdef\0",
            "abcdefgh",
            "abcdefga",
            "abcdef\u{1}",
            "zzzzzzzzzz",
            "zzzzzz",
            "\u{ff}",
            "é",
            "abcdefgh\0",
            "abcdefgh\0\0x",
        ];
        let heap = DramHeap::new(20 << 20, 17 << 20).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 16 << 20).unwrap(), 1000);
        let mut want = std::collections::BTreeSet::new();
        for (i, k) in tricky.iter().enumerate() {
            let doc = serde_json::json!({"k": k, "t": format!("w{} abcdefgh{} abcdefgh", i % 3, i)});
            fresh.insert(&analyze_document(&schema, i.to_string(), &doc).unwrap()).unwrap();
            let mut key = vec![];
            crate::schema::term_key(schema.field_id("k").unwrap(), k, &mut key);
            want.insert(key.clone());
            for t in [format!("w{}", i % 3), format!("abcdefgh{i}"), "abcdefgh".into()] {
                crate::schema::term_key(schema.field_id("t").unwrap(), &t, &mut key);
                want.insert(key.clone());
            }
        }
        let bytes = ImageBuilder::from_fresh(&fresh, 1, 0, &FieldCodecs::default()).unwrap();
        let view = ImageView::parse(&bytes).unwrap();
        let keys: Vec<Vec<u8>> = (0..view.n_terms())
            .map(|i| view.key_at(i).unwrap().to_vec())
            .filter(|k| !crate::segment::biword::is_biword_key(k))
            .collect();
        assert_eq!(keys, want.iter().cloned().collect::<Vec<_>>());
        for k in &want {
            assert!(view.term(k).unwrap().is_some(), "{k:?} is found");
        }
    }

    /// The interpolated search finds exactly what a binary search finds: in uniform tables (its case), in
    /// skewed ones (all hashes in a narrow band, runs of equal hashes, extremes 0 and u64::MAX), for hashes
    /// present, absent, below and above every entry.
    #[test]
    fn id_lower_bound_is_the_binary_searchs_answer() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut tables: Vec<Vec<u64>> = vec![vec![], vec![0], vec![u64::MAX], vec![0, u64::MAX]];
        for n in [1usize, 7, 8, 9, 100, 1000, 100_000] {
            let uniform: Vec<u64> = (0..n).map(|_| crate::rng::xorshift(&mut seed)).collect();
            let band: Vec<u64> =
                (0..n).map(|_| (1 << 40) | (crate::rng::xorshift(&mut seed) % 1000)).collect();
            let runs: Vec<u64> = (0..n).map(|i| (i as u64 / 5) << 50).collect();
            let mut skewed: Vec<u64> = (0..n).map(|i| (i as u64).saturating_pow(4)).collect();
            skewed.push(u64::MAX);
            tables.extend([uniform, band, runs, skewed]);
        }
        for mut hashes in tables {
            hashes.sort_unstable();
            let bytes = table(&hashes);
            let mut probes: Vec<u64> =
                hashes.iter().flat_map(|&h| [h, h.wrapping_add(1), h.wrapping_sub(1)]).collect();
            probes.extend([0, 1, u64::MAX, u64::MAX - 1, 1 << 63]);
            probes.extend((0..200).map(|_| crate::rng::xorshift(&mut seed)));
            for h in probes {
                assert_eq!(id_lower_bound(&bytes, h), bisect(&hashes, h), "n {} hash {h:#x}", hashes.len());
            }
        }
    }

    /// Searched in lockstep, several tables of different sizes and skews each give the binary search's
    /// answer, whatever their number (1 to `ID_LOCKSTEP`) and order.
    #[test]
    fn id_lower_bounds_in_lockstep_answer_each_table() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut tables: Vec<Vec<u64>> = vec![vec![], vec![7]];
        for n in [5usize, 9, 300, 20_000] {
            tables.push((0..n).map(|_| crate::rng::xorshift(&mut seed)).collect());
            tables.push((0..n).map(|i| (i as u64 / 3) << 40).collect());
        }
        for t in tables.iter_mut() {
            t.sort_unstable();
        }
        let bytes: Vec<Vec<u8>> = tables.iter().map(|t| table(t)).collect();
        for round in 0..300 {
            let k = 1 + round % ID_LOCKSTEP;
            let pick: Vec<usize> =
                (0..k).map(|_| crate::rng::xorshift(&mut seed) as usize % tables.len()).collect();
            let h = match round % 3 {
                0 => crate::rng::xorshift(&mut seed),
                _ => {
                    let t = &tables[pick[0]];
                    t.get(round % t.len().max(1)).copied().unwrap_or(0).wrapping_add((round % 2) as u64)
                }
            };
            let refs: Vec<&[u8]> = pick.iter().map(|&i| &bytes[i][..]).collect();
            let mut out = vec![0; k];
            id_lower_bounds(&refs, h, &mut out);
            for (j, &i) in pick.iter().enumerate() {
                assert_eq!(out[j], bisect(&tables[i], h), "table {i} hash {h:#x}");
            }
        }
    }

    /// A corrupt, unsorted table gives some index in range, without panicking or looping.
    #[test]
    fn id_lower_bound_ends_on_unsorted_tables() {
        let mut seed = 42u64;
        for n in [2usize, 9, 50, 5000] {
            let hashes: Vec<u64> = (0..n).map(|_| crate::rng::xorshift(&mut seed)).collect();
            let bytes = table(&hashes);
            for _ in 0..500 {
                assert!(id_lower_bound(&bytes, crate::rng::xorshift(&mut seed)) <= n);
            }
        }
    }

    /// `bytes` as an image of version 2 would hold them: the IDS section without the `_id` bytes (left in
    /// place, unreferenced) and a zero pad in each entry.
    fn as_version_2(bytes: &[u8]) -> Vec<u8> {
        let v = ImageView::parse(bytes).unwrap();
        assert_eq!(v.purged(), 0, "version 2 has no purged documents");
        let (o, n) = (v.sections[IDS].0, v.id_entries());
        let mut b = bytes.to_vec();
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        b[HEADER + IDS * 16 + 8..HEADER + IDS * 16 + 16].copy_from_slice(&(n as u64 * 16).to_le_bytes());
        for e in 0..n {
            b[o + e * 16 + 12..o + e * 16 + 16].fill(0);
        }
        let crc = image_crc(&b);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Every stored record reads back from a flushed image, and every `_id` finds its document through the
    /// IDS entries and their bytes: small documents, one of 600 KB of repetitive text (a block whose raw size
    /// is many times its compressed one) and one of 300 KB that barely compresses, ids of one byte to 300,
    /// not ASCII. The same image as version 2 wrote it (no `_id` bytes) is read through the doc store, and a
    /// compaction of it writes the `_id` bytes again (the same image as compacting the version 4 one).
    /// Corrupt `_id` bytes fail `check_structure`.
    /// A fresh segment in an arena of `arena` bytes holding `docs`: (`_id`, text of the one text field).
    fn text_fresh(arena: usize, docs: impl IntoIterator<Item = (String, String)>) -> FreshSegment {
        use crate::memory::{DramHeap, RingKind};
        use crate::schema::{document::analyze_document, Schema};
        let schema =
            Schema::from_mappings(&serde_json::json!({"properties": {"t": {"type": "text"}}})).unwrap();
        let heap = DramHeap::new(arena + (8 << 20), arena + (2 << 20)).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, arena).unwrap(), 10_000);
        for (id, text) in docs {
            fresh.insert(&analyze_document(&schema, id, &serde_json::json!({"t": text})).unwrap()).unwrap();
        }
        fresh
    }

    #[test]
    fn stored_records_and_ids_read_back() {
        let mut seed = 7u64;
        let noise: String =
            (0..300_000).map(|_| (b'a' + (crate::rng::xorshift(&mut seed) % 26) as u8) as char).collect();
        let ids: Vec<String> = (0..300)
            .map(|i| match i % 4 {
                0 => format!("{i}"),
                1 => format!("doc-é-{i}"),
                2 => "x".repeat(1 + i),
                _ => format!("{i}-{}", "y".repeat(i % 7)),
            })
            .collect();
        let texts = (0..300).map(|i| match i {
            100 => "repeated words ".repeat(40_000),
            200 => noise.clone(),
            _ => format!("document {i} text"),
        });
        let fresh = text_fresh(32 << 20, ids.iter().cloned().zip(texts));
        let bytes = ImageBuilder::from_fresh(&fresh, 1, 0, &FieldCodecs::default()).unwrap();
        let v4 = ImageView::parse(&bytes).unwrap();
        let old = as_version_2(&bytes);
        let v2 = ImageView::parse(&old).unwrap();
        assert!(v4.has_id_bytes() && !v2.has_id_bytes());
        for v in [v4, v2] {
            v.verify().unwrap();
            v.check_structure().unwrap();
            v.check_stored().unwrap();
            for (d, id) in ids.iter().enumerate() {
                assert_eq!(v.stored(d as u32).unwrap(), fresh.stored(d as u32).unwrap(), "doc {d}");
                assert_eq!(v.docs_with_id(id).collect::<Vec<_>>(), [d as u32], "_id {id}");
            }
            assert_eq!(v.docs_with_id("absent").count(), 0);
        }
        let codecs = FieldCodecs::default();
        let (from_v4, from_v2) = (
            super::super::compact::compact_images(&[v4], &[], 9, &codecs).unwrap(),
            super::super::compact::compact_images(&[v2], &[], 9, &codecs).unwrap(),
        );
        assert!(from_v2 == from_v4, "compacting a version 2 image writes its _id bytes");
        assert!(ImageView::parse(&from_v2).unwrap().has_id_bytes());
        // One byte of the first `_id` changed: its hash no longer matches.
        let mut bad = bytes.clone();
        bad[v4.sections[IDS].0 + v4.id_entries() * 16] ^= 1;
        let err = ImageView::parse(&bad).unwrap().check_structure().unwrap_err();
        assert!(err.0.contains("_id index"), "{err:?}");
    }

    /// A build told to give up returns nothing, whenever it is told (at its first check, among the terms, at
    /// the documents); one never told to builds the same bytes as `from_fresh`, and so does one given up
    /// before and built again. 6,000 documents of a unique term each: more than one check's worth of terms
    /// and of documents.
    #[test]
    fn a_flush_gives_up_when_told_and_builds_the_same_image_again() {
        use std::sync::atomic::AtomicUsize;
        let fresh = text_fresh(16 << 20, (0..6000).map(|i| (i.to_string(), format!("unique{i} the of and"))));
        let codecs = FieldCodecs::default();
        let want = ImageBuilder::from_fresh(&fresh, 1, 0, &codecs).unwrap();
        let checks = AtomicUsize::new(0);
        let counting = || {
            checks.fetch_add(1, Ordering::Relaxed);
            false
        };
        let full = ImageBuilder::seal_fresh_unless(&fresh, 1, 0, &codecs, false, &counting).unwrap().unwrap();
        assert!(full.to_vec() == want);
        let total = checks.load(Ordering::Relaxed);
        assert!(total >= 4, "{total} checks");
        for parallel in [false, true] {
            for after in [0, 1, total / 2, total - 1] {
                let asked = AtomicUsize::new(0);
                let abort = || asked.fetch_add(1, Ordering::Relaxed) >= after;
                let built = ImageBuilder::seal_fresh_unless(&fresh, 1, 0, &codecs, parallel, &abort).unwrap();
                assert!(built.is_none(), "told to give up after {after} of {total} checks");
            }
        }
        assert!(ImageBuilder::from_fresh(&fresh, 1, 0, &codecs).unwrap() == want);
    }
}
